"""The raise of metadata.version that `kctl apply` of a new release on KRaft owes the cluster: recorded in
kraft.json before anything is rolled, cleared only once the raise is done; a kill in the roll or a failed raise
leaves it owed, the next apply (with nothing left to roll) or `kctl up` raises it, `kctl migrate kraft status`
names the command, and `kctl migrate kraft raise-metadata-version` raises it by hand."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.cluster import features
from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kraft import phases as ph
from kctl.kraft.phases import Phase
from kctl.model.spec import ClusterSpec, load_cluster
from kctl.roll import apply as apply_mod


def on_kraft(tmp_path: Path, kafka: str = "4.1.1") -> tuple[ClusterSpec, Path]:
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(yaml.safe_dump({"name": "logger", "versions": {"kafka": kafka}}))
    state = tmp_path / ".kctl" / "logger"
    ph.write(state, ph.Record(Phase.kraft, cluster_id="Xy7kQ2fnT3a1bC9dE0fG1h", metadata_version="3.9-IV0",
                              metadata_version_release="3.9.1"))
    return load_cluster(spec_file)[0], state


def test_the_owed_raise_is_kept_in_the_record_and_cleared_by_the_raise(tmp_path: Path) -> None:
    _spec, state = on_kraft(tmp_path)
    ph.metadata_version_owed(state, "4.1.1")
    record = ph.read(state)
    assert record.metadata_version_pending == "4.1.1" and ph.Record.from_json(record.to_json()) == record
    ph.record_metadata_version(state, "4.1-IV1", "4.1.1")
    record = ph.read(state)
    assert (record.metadata_version, record.metadata_version_pending) == ("4.1-IV1", None)
    ph.metadata_version_owed(state, "4.1.1")
    ph.record_metadata_version(state, "4.1-IV1", "4.1.1")  # nothing left to raise: the owed raise is done too
    assert ph.read(state).metadata_version_pending is None
    assert ph.Record.from_json('{"phase": "kraft"}').metadata_version_pending is None  # a record of an older kctl


class Stub:
    """apply()'s cluster side: a plan with (or without) containers to make again, a roll that may be killed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, spec: ClusterSpec) -> None:
        from kctl.roll import run
        from kctl.runtime.engine import engines
        from kctl.security import store

        self.recreate: dict[str, list[str]] = {"logger1": ["image: kctl/node:3.9.1 -> kctl/node:4.1.1"]}
        self.kill_roll = False
        self.raises: list[str] = []
        self.raise_fails = False
        self.rolled: list[str] = []

        @contextlib.contextmanager
        def lock(state_dir: Path, what: str = "") -> Iterator[Path]:
            yield state_dir

        def plan(s: ClusterSpec, state_dir: Path) -> tuple[Any, Any]:
            p = apply_mod.ApplyPlan(cluster=s.name, hashes=[], files=[], recreate=dict(self.recreate))
            return p, type("R", (), {"containers": [], "files": {}})()

        def roll(s: ClusterSpec, state_dir: Path, **kw: Any) -> Any:
            if self.kill_roll:
                raise KeyboardInterrupt  # kctl killed in the roll
            self.rolled += list(kw.get("recreate") or ())
            return None

        def raise_mv(s: ClusterSpec) -> tuple[str, str]:
            self.raises.append(s.versions.kafka)
            if self.raise_fails:
                raise ClusterError("kafka-features.sh upgrade failed in logger1: timed out")
            return "3.9-IV0", "4.1-IV1"

        monkeypatch.setattr(apply_mod, "plan", plan)
        monkeypatch.setattr(run, "roll_lock", lock)
        monkeypatch.setattr(run, "put_back_left", lambda *a, **k: [])
        monkeypatch.setattr(run, "check_before_roll", lambda *a, **k: None)
        monkeypatch.setattr(run, "roll", roll)
        monkeypatch.setattr(apply_mod, "_record", lambda state_dir, hashes: None)
        monkeypatch.setattr(store, "ensure", lambda s, d: [])
        monkeypatch.setattr("kctl.model.render.write", lambda rendered, out: [])
        monkeypatch.setattr(engines.for_spec(spec).__class__, "uses_image", False, raising=False)
        monkeypatch.setattr(features, "raise_metadata_version", raise_mv)
        monkeypatch.setattr(features, "raise_the_others", lambda s, say: None)  # their raise: test_features_plan


def test_a_kill_in_the_roll_leaves_the_raise_owed_and_the_next_apply_raises_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, state = on_kraft(tmp_path)
    stub = Stub(monkeypatch, spec)
    stub.kill_roll = True
    with pytest.raises(KeyboardInterrupt):
        apply_mod.apply(spec, state)
    assert ph.read(state).metadata_version_pending == "4.1.1" and stub.raises == []  # owed before the roll
    # the next apply: the containers were made again meanwhile (nothing to roll), the raise still owed
    stub.kill_roll, stub.recreate = False, {}
    result = apply_mod.apply(spec, state)
    assert stub.raises == ["4.1.1"] and result.metadata_version == ("3.9-IV0", "4.1-IV1")
    record = ph.read(state)
    assert (record.metadata_version, record.metadata_version_pending) == ("4.1-IV1", None)
    apply_mod.apply(spec, state)  # nothing owed any more: no raise
    assert stub.raises == ["4.1.1"]


def test_a_failed_raise_stays_owed_and_says_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, state = on_kraft(tmp_path)
    stub = Stub(monkeypatch, spec)
    stub.raise_fails = True
    with pytest.raises(KctlError) as failed:
        apply_mod.apply(spec, state)
    assert stub.rolled == ["logger1"] and "raising metadata.version failed" in failed.value.message
    assert "kctl migrate kraft raise-metadata-version" in (failed.value.hint or "")
    assert ph.read(state).metadata_version_pending == "4.1.1" and ph.read(state).metadata_version == "3.9-IV0"
    from kctl.migrate import kraft as migrate

    monkeypatch.setattr(migrate, "controller_hosts", lambda s: [])
    monkeypatch.setattr(migrate, "describe_quorum", lambda s: (_ for _ in ()).throw(KctlError("no quorum")))
    st = migrate.status(spec, state)
    assert st["metadata_version_pending"] == {"release": "4.1.1", "run": "kctl migrate kraft raise-metadata-version"}
    # by hand, once the cause is gone
    stub.raise_fails = False
    assert migrate.raise_metadata_version(spec, state) == ("3.9-IV0", "4.1-IV1")
    assert ph.read(state).metadata_version_pending is None and ph.read(state).metadata_version == "4.1-IV1"
    assert migrate.status(spec, state)["metadata_version_pending"] is None


def test_up_raises_an_owed_raise_and_warns_when_it_fails_again(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.cluster import lifecycle

    spec, state = on_kraft(tmp_path)
    calls: list[str] = []

    def raise_mv(s: ClusterSpec) -> tuple[str, str]:
        calls.append("raise")
        if len(calls) == 1:
            raise ClusterError("kafka-features.sh upgrade failed in logger1: a node runs 3.9.1")
        return "3.9-IV0", "4.1-IV1"

    monkeypatch.setattr(features, "raise_metadata_version", raise_mv)

    monkeypatch.setattr(features, "raise_the_others", lambda s, say: None)  # their raise: test_features_plan
    said: list[str] = []
    lifecycle._raise_owed_metadata_version(spec, state, said.append)
    assert calls == []  # nothing owed: nothing asked
    ph.metadata_version_owed(state, "4.1.1")
    lifecycle._raise_owed_metadata_version(spec, state, said.append)
    assert said[-1].startswith("warning: every node runs Kafka 4.1.1, but raising metadata.version failed")
    assert "kctl migrate kraft raise-metadata-version" in said[-1] and ph.read(state).metadata_version_pending
    lifecycle._raise_owed_metadata_version(spec, state, said.append)
    assert ph.read(state).metadata_version_pending is None and "3.9-IV0 -> 4.1-IV1" in said[-1]


def test_the_raise_by_hand_is_refused_on_zookeeper(tmp_path: Path) -> None:
    from kctl.migrate import kraft as migrate

    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(yaml.safe_dump({"name": "logger"}))
    with pytest.raises(UsageError, match="keeps its metadata in ZooKeeper"):
        migrate.raise_metadata_version(load_cluster(spec_file)[0], tmp_path / ".kctl" / "logger")
