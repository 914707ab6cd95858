"""What the migration to KRaft refuses before anything is rendered, built or written (issue 43: 1, 5, 7): kctl.yaml
changed under a transition under way, a split topology, a downgrade below a raised metadata.version, removed
Kafka 4 settings; and its record, written durably and read back with one clear message when it is damaged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.errors import KctlError, SpecError, UsageError
from kctl.kraft import phases as ph
from kctl.kraft.phases import Phase
from kctl.migrate import kraft as migrate
from kctl.model.spec import ClusterSpec, load_cluster, parse_spec

PINS_391 = ClusterSpec().migration_pins  # the default kctl.yaml: Kafka 3.9.1

# Every transition a kctl killed in the middle leaves under way: (phase, action, target, steps done).
UNDER_WAY = [
    (Phase.zookeeper, "next", Phase.controllers, ["read-cluster-id", "write-files"]),
    (Phase.controllers, "next", Phase.dual_write, ["write-files"]),
    (Phase.dual_write, "next", Phase.kraft_brokers, ["write-files", "roll-brokers"]),
    (Phase.kraft_brokers, "finalize", Phase.kraft, ["write-files", "roll-controllers"]),
    (Phase.dual_write, "rollback", Phase.zookeeper, ["stop-controllers"]),
    (Phase.kraft_brokers, "rollback", Phase.zookeeper, []),
]


def cluster(tmp_path: Path, record: ph.Record | None, **settings: Any) -> tuple[Path, Path]:
    """A kctl.yaml with ``settings`` and its state dir holding ``record`` (kraft.json)."""
    spec_file = tmp_path / "kctl.yaml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(yaml.safe_dump({"name": "logger", **settings}))
    state = tmp_path / ".kctl" / "logger"
    if record is not None:
        ph.write(state, record)
    return spec_file, state


def state_files(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state)) for p in state.rglob("*")) if state.exists() else []


@pytest.mark.parametrize(("phase", "action", "target", "done"), UNDER_WAY,
                         ids=[f"{a}-{p.value}-to-{t.value}" for p, a, t, _d in UNDER_WAY])
def test_a_version_change_under_a_transition_is_refused_before_anything_is_rendered(
        tmp_path: Path, phase: Phase, action: str, target: Phase, done: list[str]) -> None:
    from kctl.model.render import render

    record = ph.Record(phase, target, action, done, cluster_id="Xy7kQ2fnT3a1bC9dE0fG1h", pins=dict(PINS_391))
    spec_file, state = cluster(tmp_path, record, versions={"kafka": "4.1.1"})
    before = state_files(state)
    spec, _ = load_cluster(spec_file)
    for attempt in (lambda: render(spec, state), lambda: migrate.run(spec, state, action)):
        with pytest.raises(UsageError) as refused:
            attempt()
        msg = refused.value.message
        assert f"a {action} to {target.value} is under way (phase {phase.value}" in msg
        assert "versions.kafka: 4.1.1 in kctl.yaml, 3.9.1 when the migration started" in msg
        assert f"`kctl migrate kraft {action}` to finish it" in (refused.value.hint or "")
        assert refused.value.exit_code == 2
    assert state_files(state) == before  # nothing rendered, written or locked
    assert ph.read(state) == record
    # kctl.yaml put back as it was: the render goes on (the transition's own files)
    spec_file.write_text(yaml.safe_dump({"name": "logger"}))
    spec, _ = load_cluster(spec_file)
    assert render(spec, state).files


@pytest.mark.parametrize("changed", [{"versions": {"kafka": "4.1.1", "scala": "2.13"}},
                                     {"security": {"enabled": True}},
                                     {"image": {"ref": "example/kafka:3.9.1"}}])
def test_every_setting_a_migration_keeps_is_held_between_its_transitions_too(
        tmp_path: Path, changed: dict[str, Any]) -> None:
    from kctl.model.render import render

    spec_file, state = cluster(tmp_path, ph.Record(Phase.dual_write, pins=dict(PINS_391)), **changed)
    spec, _ = load_cluster(spec_file)
    with pytest.raises(UsageError, match="in the middle of its migration to KRaft .phase dual-write.") as refused:
        render(spec, state)
    assert "`kctl migrate kraft rollback`" in (refused.value.hint or "")


def test_a_record_from_before_pins_holds_the_cluster_to_the_release_that_migrates(tmp_path: Path) -> None:
    from kctl.model.render import render

    # kraft.json as an older kctl wrote it: a finalize under way, no pins
    state = tmp_path / ".kctl" / "logger"
    state.mkdir(parents=True)
    (state / ph.STATE_FILE).write_text(json.dumps({"phase": "kraft-brokers", "target": "kraft", "action": "finalize",
                                                   "done": ["write-files"], "cluster_id": "x"}))
    spec_file, _ = cluster(tmp_path, None, versions={"kafka": "4.1.1"})
    spec, _ = load_cluster(spec_file)
    with pytest.raises(UsageError, match="a finalize to kraft is under way"):
        render(spec, state)
    spec_file.write_text(yaml.safe_dump({"name": "logger", "versions": {"kafka": "3.9.1"}}))
    assert render(load_cluster(spec_file)[0], state).files


def test_the_first_transition_records_the_pins_and_arriving_at_an_end_clears_them() -> None:
    begun = ph.current_pins(ph.begin(ph.Record(Phase.zookeeper), "next", Phase.controllers), PINS_391)
    assert begun.pins == PINS_391 and begun.migrating
    later = ph.current_pins(ph.begin(ph.arrive(begun, now=1.0), "next", Phase.dual_write),
                            {**PINS_391, "versions.kafka": "3.9.2"})
    assert later.pins == PINS_391  # the migration keeps what it started from
    ph.check_pins(ph.Record(Phase.zookeeper, pins=PINS_391), {**PINS_391, "versions.kafka": "4.1.1"})  # not migrating
    back = ph.arrive(ph.begin(ph.arrive(later, now=2.0), "rollback", Phase.zookeeper), now=3.0)
    assert (back.phase, back.pins, back.migrating) == (Phase.zookeeper, {}, False)


def test_the_cli_refuses_a_finalize_under_a_changed_version_with_exit_2(tmp_path: Path) -> None:
    record = ph.Record(Phase.kraft_brokers, Phase.kraft, "finalize", ["write-files"], cluster_id="x",
                       pins=dict(PINS_391))
    spec_file, state = cluster(tmp_path, record, versions={"kafka": "4.1.1"})
    before = state_files(state)
    p = subprocess.run([sys.executable, "-m", "kctl", "migrate", "kraft", "finalize", "--yes", "-f", str(spec_file)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "a finalize to kraft is under way" in p.stderr and "cannot migrate" not in p.stderr
    assert "Traceback" not in p.stderr
    assert state_files(state) == before


# ----- 5: the split topology --------------------------------------------------------------------------------


def test_a_split_cluster_is_not_migrated_but_may_roll_back() -> None:
    split = parse_spec({"topology": "split"})[0]
    for action in ("next", "finalize"):
        with pytest.raises(UsageError, match="split topology") as refused:
            migrate.check_can_migrate(split, action)
        assert refused.value.exit_code == 2 and refused.value.hint
    migrate.check_can_migrate(split.with_kraft("dual-write", "x"), "rollback")  # begun by an older kctl: a way back


def test_a_kafka_4_apply_of_a_split_kraft_cluster_is_refused_before_the_image_or_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A split cluster on KRaft (migrated by an older kctl) and Kafka 4 in kctl.yaml: `kctl apply` is refused
    before it builds an image or writes a file (before, it built the image and wrote every node's files, then its
    roll was refused at the first ZooKeeper step)."""
    from kctl.roll import apply as apply_mod
    from kctl.runtime.engine import engines
    from kctl.runtime.image import build as image

    record = ph.Record(Phase.kraft, cluster_id="Xy7kQ2fnT3a1bC9dE0fG1h")
    spec_file, state = cluster(tmp_path, record, topology="split",
                               nodes=[{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)],
                               versions={"kafka": "4.1.1"})
    built: list[str] = []
    monkeypatch.setattr(image, "ensure_image", lambda *a, **k: built.append(k.get("kafka_version", "?")))
    monkeypatch.setattr(engines, "observe", lambda *a, **k: pytest.fail("the cluster was asked before the refusal"))
    spec, _ = load_cluster(spec_file)
    with pytest.raises(UsageError, match="on KRaft with topology split") as refused:
        apply_mod.apply(spec, state)
    assert refused.value.exit_code == 2
    assert built == []
    assert state_files(state) == sorted([ph.STATE_FILE, "restart.lock"])  # no node file, no compose.yaml


def test_an_apply_whose_roll_kctl_would_refuse_is_refused_before_the_image_or_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the render: a planned roll that kctl restart would refuse (here a ZooKeeper restart on a cluster on
    KRaft, whose ZooKeeper is retired: a zookeeper.overrides edit) stops the apply before its image build, its
    secrets and its files; before, the refusal came from the roll itself, after all of them were written."""
    from kctl.model.render import render
    from kctl.roll import apply as apply_mod
    from kctl.roll import run as roll_run

    spec_file, state = cluster(tmp_path, ph.Record(Phase.kraft, cluster_id="x"), versions={"kafka": "4.1.1"})
    spec, _ = load_cluster(spec_file)
    rendered = render(spec, state)
    planned = apply_mod.ApplyPlan(spec.name, [], ["logger1/conf/zoo.cfg"],
                                  restarts=[apply_mod.Restart("logger1", "zookeeper", ["zoo.cfg changed"])])
    monkeypatch.setattr(apply_mod, "plan", lambda s, d: (planned, rendered))
    monkeypatch.setattr(roll_run, "check_before_roll", lambda *a, **k: None)  # a healthy cluster, as far as it asks
    with pytest.raises(UsageError, match="its ZooKeeper is retired"):
        apply_mod.apply(spec, state)
    assert state_files(state) == sorted([ph.STATE_FILE, "restart.lock"])


# ----- 7: a downgrade below a raised metadata.version; removed Kafka 4 settings ----------------------------


def test_a_downgrade_below_the_raised_metadata_version_is_refused(tmp_path: Path) -> None:
    from kctl.model.render import render

    state = tmp_path / ".kctl" / "logger"
    ph.write(state, ph.Record(Phase.kraft, cluster_id="x", history=[{"phase": "kraft", "at": 1.0}]))
    ph.record_metadata_version(state, "4.1-IV1", "4.1.1")  # what `kctl apply` records after its raise
    assert (ph.read(state).metadata_version, ph.read(state).history) == ("4.1-IV1", [{"phase": "kraft", "at": 1.0}])
    for older in ("3.9.1", "4.0.0"):
        spec_file, _ = cluster(tmp_path, None, versions={"kafka": older} if older != "4.0.0"
                               else {"kafka": older, "scala": "2.13"}, image={"ref": f"example/kafka:{older}"})
        spec, _ = load_cluster(spec_file)
        with pytest.raises(UsageError, match=f"versions.kafka: {older} is older than the cluster's metadata.version"
                                             " 4.1-IV1") as refused:
            render(spec, state)
        assert "4.1.x or later" in (refused.value.hint or "")
    for same_or_newer in ("4.1.1", "4.3.1"):
        spec_file, _ = cluster(tmp_path, None, versions={"kafka": same_or_newer})
        assert render(load_cluster(spec_file)[0], state).files


def test_a_cluster_made_on_kraft_is_never_rendered_with_a_release_older_than_its_format(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made on KRaft by Kafka 4.1.1 (`kctl init --kraft`): its storage is formatted at 4.1-IV1 with no raise kctl
    records, and Kafka 4.0.0 cannot start on it. The first `kctl up` records the level; 4.0.0 is then refused."""
    from kctl.cluster import lifecycle
    from kctl.model.render import render

    spec_file, state = cluster(tmp_path, None, metadata="kraft", versions={"kafka": "4.1.1"})
    spec, _ = load_cluster(spec_file)

    class Stop(Exception):
        pass

    def stop(*_a: object, **_k: object) -> None:
        raise Stop  # the first `kctl up` up to its render: the record is written first, before any node is made

    monkeypatch.setattr(lifecycle, "render", stop)
    with pytest.raises(Stop):
        lifecycle.converge(spec, state, build=False)
    monkeypatch.undo()
    made = ph.read(state)
    assert (made.phase, made.metadata_version) == (Phase.kraft, None)  # nothing raised
    assert (made.formatted_metadata_version, made.formatted_release) == ("4.1-IV1", "4.1.1")
    before = state_files(state)
    for older in ("4.0.0", "3.9.1"):
        spec_file.write_text(yaml.safe_dump({"name": "logger", "metadata": "kraft", "versions": {"kafka": older},
                                             "image": {"ref": f"example/kafka:{older}"}}))
        with pytest.raises(UsageError) as refused:
            render(load_cluster(spec_file)[0], state)
        assert refused.value.message.startswith(f"versions.kafka: {older} is older than the cluster's"
                                                " metadata.version 4.1-IV1 (its storage was formatted at it by"
                                                " Kafka 4.1.1)"), refused.value.message
        assert "nothing was rendered or written" in refused.value.message
        assert "keep versions.kafka at 4.1.x or later (it was 4.1.1)" in (refused.value.hint or "")
        assert state_files(state) == before
    for same_or_newer, image in (("4.1.0", {"image": {"ref": "example/kafka:4.1.0"}}), ("4.3.1", {})):
        spec_file.write_text(yaml.safe_dump({"name": "logger", "metadata": "kraft",
                                             "versions": {"kafka": same_or_newer}, **image}))
        assert render(load_cluster(spec_file)[0], state).files


@pytest.mark.parametrize(("release", "level"), [("3.9.1", "3.9-IV0"), ("4.0.0", "4.0-IV3"), ("4.1.1", "4.1-IV1"),
                                                ("4.3.1", None)])
def test_made_on_kraft_records_the_level_its_release_formats_with(tmp_path: Path, release: str,
                                                                  level: str | None) -> None:
    made = ph.made_on_kraft(tmp_path, release)
    assert (made.formatted_metadata_version, made.formatted_release) == (level, release)
    assert ph.read(tmp_path) == made
    # a release the table does not name is held to its own release all the same
    ph.check_downgrade(made, release)
    if release != "3.9.1":
        with pytest.raises(UsageError, match="versions.kafka: 3.9.1 is older than the cluster's metadata.version"):
            ph.check_downgrade(made, "3.9.1")


def test_the_newer_of_the_formatted_and_the_raised_level_holds() -> None:
    made = ph.Record(Phase.kraft, cluster_id="x", formatted_metadata_version="4.0-IV3", formatted_release="4.0.0")
    raised = made.replace(metadata_version="4.1-IV1", metadata_version_release="4.1.1")
    ph.check_downgrade(made, "4.0.0")
    with pytest.raises(UsageError, match="3.9.1 is older than the cluster's metadata.version 4.0-IV3 "):
        ph.check_downgrade(made, "3.9.1")
    for older in ("4.0.0", "3.9.1"):  # raised above its format: the raise is the bound
        with pytest.raises(UsageError, match=rf"{older} is older than the cluster's metadata.version 4.1-IV1 \(raised"
                                             r" by Kafka 4.1.1\)") as refused:
            ph.check_downgrade(raised, older)
        assert "4.1.x or later (it was 4.1.1)" in (refused.value.hint or "")
    ph.check_downgrade(raised, "4.1.1")
    # formatted newer than a raise kctl recorded earlier (a state dir kept across a rebuild): the format holds
    newer = ph.Record(Phase.kraft, cluster_id="x", formatted_metadata_version="4.1-IV1", formatted_release="4.1.1",
                      metadata_version="4.0-IV3", metadata_version_release="4.0.0")
    with pytest.raises(UsageError, match="4.0.0 is older than the cluster's metadata.version 4.1-IV1 \\(its storage"):
        ph.check_downgrade(newer, "4.0.0")


def test_a_record_from_before_the_formatted_level_was_kept(tmp_path: Path) -> None:
    """kraft.json of a cluster made on KRaft by an older kctl names no formatted level: held to a release the
    record names (a migration's pinned one), else nothing is refused on this ground (kctl.yaml's own version is
    what a downgrade changes, so it cannot stand in); a raise it recorded still holds."""
    state = tmp_path / "state"
    state.mkdir()
    old = {"phase": "kraft", "target": None, "action": None, "done": [], "cluster_id": "Xy7kQ2fnT3a1bC9dE0fG1h",
           "history": [{"phase": "kraft", "at": 1.0, "made": "on KRaft"}], "pins": {}, "metadata_version": None,
           "metadata_version_release": None, "metadata_version_pending": None}
    (state / ph.STATE_FILE).write_text(json.dumps(old))
    record = ph.read(state)
    assert (record.formatted_metadata_version, record.formatted_release) == (None, None)
    assert ph.formatted_floor(record) is None
    for version in ("3.9.1", "4.0.0", "4.1.1"):
        ph.check_downgrade(record, version)
    assert ph.made_on_kraft(state, "4.1.1") == record  # read, never rewritten with kctl.yaml's release
    # a migration under way: its pinned release formatted the controllers
    migrating = ph.Record(Phase.controllers, cluster_id="x", pins={"versions.kafka": "4.1.1"})
    assert ph.formatted_floor(migrating) is not None
    with pytest.raises(UsageError, match="4.0.0 is older than the cluster's metadata.version 4.1 \\(its storage was"
                                         " formatted by Kafka 4.1.1"):
        ph.check_downgrade(migrating, "4.0.0")
    # the raise an older kctl recorded still holds
    ph.check_downgrade(record.replace(metadata_version="4.1-IV1"), "4.1.1")
    with pytest.raises(UsageError, match="older than the cluster's metadata.version 4.1-IV1 \\(raised\\)"):
        ph.check_downgrade(record.replace(metadata_version="4.1-IV1"), "4.0.0")


def test_the_apply_that_raises_metadata_version_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one place kctl raises metadata.version (kctl apply, after a new release's roll) records the level."""
    from kctl.cluster import features
    from kctl.model.render import render
    from kctl.roll import apply as apply_mod

    spec_file, state = cluster(tmp_path, ph.Record(Phase.kraft, cluster_id="x"), versions={"kafka": "4.1.1"})
    spec, _ = load_cluster(spec_file)
    monkeypatch.setattr(features, "raise_metadata_version", lambda s: ("3.9-IV0", "4.1-IV1"))
    monkeypatch.setattr(features, "raise_the_others", lambda s, say: None)  # their raise: test_features_plan
    said: list[str] = []
    assert apply_mod.raise_metadata_version(spec, state, said.append) == ("3.9-IV0", "4.1-IV1")
    assert (ph.read(state).metadata_version, ph.read(state).metadata_version_release) == ("4.1-IV1", "4.1.1")
    assert said and "3.9-IV0 -> 4.1-IV1" in said[0]
    spec_file.write_text(yaml.safe_dump({"name": "logger", "versions": {"kafka": "3.9.1"},
                                         "image": {"ref": "example/kafka:3.9.1"}}))
    with pytest.raises(UsageError, match="older than the cluster's metadata.version 4.1-IV1"):
        render(load_cluster(spec_file)[0], state)


@pytest.mark.parametrize("key", ["log.message.format.version", "message.format.version",
                                 "inter.broker.protocol.version"])
def test_settings_kafka_4_removed_are_refused_in_a_4x_render(key: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec({"versions": {"kafka": "4.1.1"}, "metadata": "kraft", "kafka": {"overrides": {key: "3.0"}}})
    assert any(p.startswith(f"kafka.overrides.{key}: Kafka 4.1.1 has no {key}") for p in refused.value.problems)
    with pytest.raises(SpecError, match=f"nodes.1.overrides.kafka.{key}"):
        parse_spec({"versions": {"kafka": "4.1.1"}, "metadata": "kraft",
                    "nodes": [{"id": 1, "hostname": "logger1"},
                              {"id": 2, "hostname": "logger2", "overrides": {"kafka": {key: "3.0"}}}]})
    parse_spec({"kafka": {"overrides": {key: "3.0"}}})  # Kafka 3.9 still reads it


# ----- 7: the record written durably, a damaged one named with its way back --------------------------------


def test_the_record_is_written_through_fsync_and_a_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        synced.append(f"replace -> {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    ph.write(tmp_path, ph.Record(Phase.controllers))
    # the data is on disk before the rename, and the rename is on disk (the directory synced) after it
    assert [Path(s).name if not s.startswith("replace") else s for s in synced][1:] == [
        "replace -> kraft.json", tmp_path.name]
    assert Path(synced[0]).name.startswith(".kraft.json.")
    assert os.stat(tmp_path / ph.STATE_FILE).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kraft.json"]


def test_a_failed_write_leaves_the_record_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ph.write(tmp_path, ph.Record(Phase.controllers))

    def full(fd: int, data: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        ph.write(tmp_path, ph.Record(Phase.dual_write))
    monkeypatch.undo()
    assert ph.read(tmp_path).phase is Phase.controllers
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("damage", ["", "{\n  \"cluster_id\": \"x\",\n  \"done\": [", "[]", "{\"phase\": 3}"],
                         ids=["empty", "cut-short", "a-list", "no-phase"])
def test_a_damaged_record_is_one_message_with_the_way_back(tmp_path: Path, damage: str) -> None:
    ph.write(tmp_path, ph.Record(Phase.controllers, cluster_id="x"))
    ph.write(tmp_path, ph.Record(Phase.controllers, Phase.dual_write, "next", ["write-files"], cluster_id="x"))
    (tmp_path / ph.STATE_FILE).write_text(damage)
    with pytest.raises(KctlError) as refused:
        ph.read(tmp_path)
    assert str(tmp_path / ph.STATE_FILE) in refused.value.message
    assert "kctl cannot tell where the migration to KRaft stands" in refused.value.message
    hint = refused.value.hint or ""
    assert "its previous copy records phase controllers" in hint
    assert f"`cp {tmp_path / 'kraft.json.prev'} {tmp_path / 'kraft.json'}`" in hint
    # the way back works: the previous copy is a record kctl reads
    (tmp_path / ph.STATE_FILE).write_bytes((tmp_path / "kraft.json.prev").read_bytes())
    assert ph.read(tmp_path) == ph.Record(Phase.controllers, cluster_id="x")


def test_a_damaged_record_without_a_previous_copy_names_the_runbook(tmp_path: Path) -> None:
    (tmp_path / ph.STATE_FILE).write_text("")
    with pytest.raises(KctlError) as refused:
        ph.read(tmp_path)
    assert "is empty" in refused.value.message and "migrate-to-kraft.md" in (refused.value.hint or "")


def test_the_cli_names_a_damaged_record_without_a_traceback(tmp_path: Path) -> None:
    spec_file, state = cluster(tmp_path, ph.Record(Phase.controllers, cluster_id="x"))
    (state / ph.STATE_FILE).write_text("")
    p = subprocess.run([sys.executable, "-m", "kctl", "migrate", "kraft", "plan", "-f", str(spec_file)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert p.returncode != 0 and "is empty" in p.stderr and "Traceback" not in p.stderr, p.stderr


def _write_applied(state: Path) -> None:
    from kctl.runtime import cluster as rc

    rc.write_applied(state, {"logger1": "abc"})
    assert rc.applied_hashes(state) == {"logger1": "abc"}


def _write_identity(state: Path) -> None:
    from kctl.cluster import identity

    identity.record(ClusterSpec(), state, "Xy7kQ2fnT3a1bC9dE0fG1h")
    assert identity.read(state) is not None and identity.read(state).cluster_id == "Xy7kQ2fnT3a1bC9dE0fG1h"  # type: ignore[union-attr]


def _write_engine(state: Path) -> None:
    from kctl.model.spec import Engine, record_engine, recorded_engine

    record_engine(state, Engine.swarm)
    assert recorded_engine(state) is Engine.swarm


@pytest.mark.parametrize(("name", "module", "write"), [("applied.json", "kctl.runtime.cluster", _write_applied),
                                                       ("identity.json", "kctl.cluster.identity", _write_identity),
                                                       ("engine", "kctl.model.spec", _write_engine)])
def test_the_state_files_beside_it_are_written_durably_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           name: str, module: str, write: Any) -> None:
    import importlib

    from kctl import contract, files

    seen: list[Path] = []
    real = files.write_durable
    monkeypatch.setattr(importlib.import_module(module), "write_durable",
                        lambda path, data, **kw: (seen.append(path), real(path, data, **kw)))
    write(tmp_path)
    assert [p.name for p in seen] == [name] and name in (contract.APPLIED_FILE, contract.IDENTITY_FILE,
                                                         contract.ENGINE_FILE)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left


def _kctl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


def test_the_cli_refuses_each_kind_with_exit_2_and_nothing_written(tmp_path: Path) -> None:
    # a split cluster's migration: refused before any cluster is asked
    split = tmp_path / "split"
    spec_file, state = cluster(split, None, topology="split")
    p = _kctl(split, "migrate", "kraft", "next", "--yes", "-f", str(spec_file))
    assert p.returncode == 2 and "split topology" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not state.exists()
    # a downgrade below the recorded metadata.version: `kctl render` writes nothing
    down = tmp_path / "down"
    spec_file, state = cluster(down, ph.Record(Phase.kraft, cluster_id="x", metadata_version="4.1-IV1",
                                               metadata_version_release="4.1.1"), versions={"kafka": "3.9.1"})
    before = state_files(state)
    p = _kctl(down, "render", "-f", str(spec_file))
    assert p.returncode == 2 and "older than the cluster's metadata.version 4.1-IV1" in p.stderr, p.stderr
    assert "hint:" in p.stderr and state_files(state) == before
    # a setting Kafka 4 removed
    gone = tmp_path / "gone"
    spec_file, state = cluster(gone, None, metadata="kraft", versions={"kafka": "4.1.1"},
                               kafka={"overrides": {"log.message.format.version": "2.8"}})
    p = _kctl(gone, "render", "-f", str(spec_file))
    assert p.returncode == 2 and "kafka.overrides.log.message.format.version: Kafka 4.1.1 has no" in p.stderr
    assert not state.exists()


def test_status_says_what_kctl_yaml_keeps_and_the_raised_metadata_version(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    record = ph.Record(Phase.controllers, cluster_id="x", pins=dict(PINS_391))
    spec_file, state = cluster(tmp_path, record)
    monkeypatch.setattr(migrate, "controller_hosts", lambda spec: [])
    monkeypatch.setattr(migrate, "describe_quorum", lambda spec: (_ for _ in ()).throw(KctlError("no quorum")))
    monkeypatch.setattr(migrate, "migrated", lambda spec: None)
    from kctl.zk import migration as zkm

    monkeypatch.setattr(zkm, "migration_state", lambda spec: {"error": "not asked"})
    st = migrate.status(load_cluster(spec_file)[0], state)
    assert st["kept"] == PINS_391 and st["kept"]["versions.kafka"] == "3.9.1" and st["metadata_version"] is None
