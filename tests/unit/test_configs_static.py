"""config describe's static layer: the server.properties the broker runs, and kctl.yaml's drift from it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kctl.kafka import configs
from kctl.model.render import render
from kctl.model.spec import parse_spec
from kctl.runtime import cluster as rc

OLD = parse_spec({})[0]
NEW = parse_spec({"kafka": {"min_insync_replicas": 1, "log_retention_hours": 12}})[0]


def _mounted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, started_at: float) -> Path:
    """logger1 runs OLD's render, mounted from tmp_path."""
    old = render(OLD)
    path = tmp_path / "server.properties"
    path.write_text(old.files["logger1/conf/server.properties"])
    old_hash = next(c.config_hash for c in old.containers if c.name == "logger1")

    def fake(spec: object, host: str) -> rc.MountedConf:
        assert host == "logger1"
        return rc.MountedConf(host, tmp_path, old_hash, started_at)

    monkeypatch.setattr(rc, "mounted_conf", fake)
    return path


def test_parse_properties() -> None:
    text = "# comment\n! other\n\nbroker.id=1\nlisteners = INTERNAL://0.0.0.0:9092\nempty=\n"
    assert configs.parse_properties(text) == {"broker.id": "1", "listeners": "INTERNAL://0.0.0.0:9092",
                                              "empty": ""}


def test_static_drift() -> None:
    assert configs.static_drift({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == {
        "b": {"running": "2", "spec": "3"}, "c": {"running": None, "spec": "4"}}


def test_static_layer_comes_from_the_running_render(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _mounted(monkeypatch, tmp_path, started_at=time.time() + 60)
    rs = configs.running_static(NEW, 1)
    assert rs.values["min.insync.replicas"] == "2" and rs.values["log.retention.hours"] == "168"
    assert rs.source == str(path)
    assert rs.pending == {"log.retention.hours": {"running": "168", "spec": "12"},
                          "min.insync.replicas": {"running": "2", "spec": "1"},
                          "transaction.state.log.min.isr": {"running": "2", "spec": "1"}}
    assert len(rs.warnings) == 1 and "kctl.yaml differs from what logger1 runs" in rs.warnings[0]
    assert "min.insync.replicas: 2 -> 1" in rs.warnings[0] and "`kctl apply`" in rs.warnings[0]


def test_no_drift_when_the_spec_is_what_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _mounted(monkeypatch, tmp_path, started_at=time.time() + 60)
    rs = configs.running_static(OLD, 1)
    assert rs.pending == {} and rs.warnings == []


def test_a_render_newer_than_the_broker_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _mounted(monkeypatch, tmp_path, started_at=time.time() - 3600)
    os.utime(path, (time.time(), time.time()))
    rs = configs.running_static(OLD, 1)
    assert any("was written after logger1 started" in w for w in rs.warnings)


def test_unreadable_running_config_falls_back_to_the_spec_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(spec: object, host: str) -> rc.MountedConf:
        raise configs.KctlError(f"no container {host!r} in cluster logger")

    monkeypatch.setattr(rc, "mounted_conf", missing)
    rs = configs.running_static(NEW, 1)
    assert rs.values["min.insync.replicas"] == "1" and rs.source == "kctl.yaml"
    assert "cannot read the server.properties broker 1 runs" in rs.warnings[0]
