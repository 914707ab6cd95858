"""``kctl up`` after an edit on engine hosts (kctl/roll/up.py, HostsEngine.deploy): no running service is
restarted by the install; the ones whose files changed are restarted by the gated roll, ZooKeeper first, one
phase per service. Nothing here reaches a host: the engine's ssh calls and the roll are replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kctl.cluster import lifecycle
from kctl.model.spec import ClusterSpec
from kctl.roll import run
from kctl.roll import up as rolling
from kctl.runtime.engine import engines, hosts


def spec(**extra: Any) -> ClusterSpec:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    return ClusterSpec.model_validate({"engine": "hosts", "name": "hl", "nodes": nodes,
                                       "state_dir": "/tmp/kctl-state", **extra})


def test_the_restarts_are_one_roll_per_service_zookeeper_first_in_the_specs_order() -> None:
    s = spec()
    assert rolling.restart_phases(s, {}) == []
    assert rolling.restart_phases(s, {"logger3": ["kafka"], "logger1": ["kafka", "zookeeper"]}) == [
        ("zookeeper", ["logger1"]), ("kafka", ["logger1", "logger3"])]
    assert rolling.restart_phases(s, {"logger2": ["kafka"], "nobody": ["kafka"]}) == [("kafka", ["logger2"])]


def test_a_zookeeper_only_node_is_never_in_the_brokers_roll() -> None:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}", "broker": i != 3}
             for i in (1, 2, 3)]
    s = ClusterSpec.model_validate({"engine": "hosts", "nodes": nodes})
    assert rolling.restart_phases(s, {"logger3": ["zookeeper", "kafka"]}) == [("zookeeper", ["logger3"])]


class Pending:
    def __init__(self, pending: dict[str, list[str]]) -> None:
        self.pending = pending

    def pending_restarts(self, spec: ClusterSpec) -> dict[str, list[str]]:
        return self.pending


@pytest.fixture
def rolls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(lifecycle, "up", lambda spec, state, **kw: lifecycle.UpResult([], [], 1.0, str(state)))

    def roll(spec: ClusterSpec, state_dir: Path, **kw: Any) -> run.RollResult:
        seen.append((kw["service"], kw["nodes"], kw["lock"], kw["command"]))
        steps = [run.StepRecord(n, kw["service"], "", 1.0) for n in kw["nodes"]]
        return run.RollResult(plan=None, steps=steps)  # type: ignore[arg-type]

    monkeypatch.setattr(run, "roll", roll)
    return seen


def test_up_rolls_what_is_pending_under_the_roll_lock(rolls: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setattr(engines, "for_spec", lambda _s: Pending({"logger2": ["kafka"], "logger1": ["kafka"]}))
    said: list[str] = []
    result = rolling.up(spec(), tmp_path, progress=said.append)
    assert rolls == [("kafka", ["logger1", "logger2"], False, "kctl up")]
    assert result.restarted == ["logger1/kafka", "logger2/kafka"]
    assert any("restarting them one at a time through the roll's gates" in m for m in said)
    assert (tmp_path / "restart.lock").exists()  # the roll ran under the state dir's lock


def test_up_without_waiting_rolls_nothing_and_says_what_is_left(rolls: list[tuple[Any, ...]],
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setattr(engines, "for_spec", lambda _s: Pending({"logger3": ["zookeeper"]}))
    said: list[str] = []
    assert rolling.up(spec(), tmp_path, wait=False, progress=said.append).restarted == []
    assert rolls == []
    assert said == ["not restarted (--no-wait): logger3 zookeeper, whose files changed; `kctl up` without"
                    " --no-wait, or `kctl restart --rolling`, restarts them through the roll's gates"]


def test_up_with_nothing_pending_takes_no_lock(rolls: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setattr(engines, "for_spec", lambda _s: Pending({}))
    rolling.up(spec(), tmp_path)
    assert rolls == [] and not (tmp_path / "restart.lock").exists()


def test_the_install_restarts_no_running_service_and_starts_the_rest(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    from kctl.runtime.engine.bundle import NodeBundle

    s = spec()
    eng = hosts.HostsEngine()
    made = {h: NodeBundle(h, ("zookeeper", "kafka"), tmp_path / h, 1) for h in ("logger1", "logger2", "logger3")}
    # install.sh said: logger1's and logger2's brokers run on files it has just replaced
    monkeypatch.setattr(hosts.HostsEngine, "_install_all", lambda self, sp, state, hs, say: (
        made, {"logger1": ["kafka"], "logger2": ["kafka"], "logger3": []}))
    calls: list[tuple[str, str, str]] = []
    monkeypatch.setattr(hosts.HostsEngine, "stop_service",
                        lambda self, sp, h, svc, dc=None: calls.append(("stop", h, svc)) or "")
    monkeypatch.setattr(hosts.HostsEngine, "start_service",
                        lambda self, sp, h, svc, dc=None: calls.append(("start", h, svc)) or "")
    said: list[str] = []
    eng.deploy(s, tmp_path, said.append, ["logger1", "logger2", "logger3"])
    assert not [c for c in calls if c[0] == "stop"]
    assert sorted(c for c in calls if c[2] == "zookeeper") == [("start", h, "zookeeper") for h in
                                                                ("logger1", "logger2", "logger3")]
    assert [c for c in calls if c[2] == "kafka"] == [("start", "logger3", "kafka")]
    assert calls.index(("start", "logger3", "kafka")) > max(calls.index(("start", h, "zookeeper"))
                                                             for h in ("logger1", "logger2", "logger3"))
    assert "logger1: bundle installed; kafka to restart through the roll (its files changed)" in said
