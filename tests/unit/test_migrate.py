"""kctl migrate kraft's pure parts: which steps a command takes from a phase, and the quorum tool's answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kctl.cluster import lock as state_lock
from kctl.cluster import quorum
from kctl.errors import KctlError, UsageError
from kctl.kraft import phases as ph
from kctl.kraft.phases import Phase
from kctl.migrate import kraft as migrate

# kafka-metadata-quorum.sh describe --status of Kafka 3.9 (voters as JSON objects, KIP-853)
VOTERS = ", ".join(f'{{"id": {i}, "directoryId": null, "endpoints": ["CONTROLLER://logger{i - 3000}:9095"]}}'
                   for i in (3001, 3002, 3003))
STATUS_39 = f"""ClusterId:              Xy7kQ2fnT3a1bC9dE0fG1h
LeaderId:               3002
LeaderEpoch:            4
HighWatermark:          1234
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   12
CurrentVoters:          [{VOTERS}]
CurrentObservers:       [{{"id": 1, "directoryId": "abc"}}]
"""


def test_the_quorum_tool_is_read_in_both_of_its_voter_formats() -> None:
    q = quorum.parse_quorum(STATUS_39)
    assert (q.cluster_id, q.leader, q.epoch, q.high_watermark, q.max_follower_lag) == (
        "Xy7kQ2fnT3a1bC9dE0fG1h", 3002, 4, 1234, 0)
    assert q.voters == [3001, 3002, 3003]  # the observer (a broker) is not a voter
    older = quorum.parse_quorum("LeaderId: 3001\nCurrentVoters: [3003,3001,3002]\n")
    assert older.leader == 3001 and older.voters == [3001, 3002, 3003]
    assert quorum.parse_quorum("Error: timed out\n").leader is None


def test_next_and_rollback_take_kafkas_steps_and_resume_where_they_stopped() -> None:
    assert migrate.plan(ph.Record(Phase.zookeeper), "next") == (
        Phase.controllers, ["read-cluster-id", "write-files", "start-controllers", "controller-quorum"])
    assert migrate.plan(ph.Record(Phase.controllers), "next") == (
        Phase.dual_write, ["write-files", "roll-brokers", "metadata-migrated"])
    assert migrate.plan(ph.Record(Phase.dual_write), "rollback") == (
        Phase.zookeeper, ["stop-controllers", "delete-controller-and-migration-znodes",
                          "roll-brokers-without-migration", "remove-controllers"])
    assert migrate.plan(ph.Record(Phase.controllers), "rollback")[1] == ["stop-controllers", "remove-controllers"]
    assert migrate.plan(ph.Record(Phase.dual_write), "next") == (
        Phase.kraft_brokers, ["write-files", "roll-brokers", "brokers-in-kraft"])
    assert migrate.plan(ph.Record(Phase.kraft_brokers), "rollback")[1][0] == "roll-brokers-to-zookeeper-with-migration"
    # a transition under way is resumed by the same command, refused to another (but a next's rollback)
    busy = ph.Record(Phase.zookeeper, Phase.controllers, "next", ["read-cluster-id"])
    assert migrate.plan(busy, "next")[0] is Phase.controllers
    with pytest.raises(KctlError, match="a next to controllers is under way") as refused:
        migrate.plan(busy, "finalize")
    assert "`kctl migrate kraft rollback` stops it" in (refused.value.hint or "")


def test_what_is_not_possible_or_not_built_is_refused_with_the_reason() -> None:
    with pytest.raises(ph.RollbackRefused, match="there is no migration to roll back"):
        migrate.plan(ph.Record(Phase.zookeeper), "rollback")
    with pytest.raises(ph.RollbackRefused, match="finalized"):
        migrate.plan(ph.Record(Phase.kraft), "rollback")
    with pytest.raises(UsageError, match="`next` has nothing more to do"):
        migrate.plan(ph.Record(Phase.kraft_brokers), "next")
    # finalizing is a command of its own (it cannot be undone): `next` stops before it
    with pytest.raises(UsageError, match="nothing more to do"):
        migrate.plan(ph.Record(Phase.kraft_brokers), "next")


def test_finalize_is_a_command_of_its_own_from_kraft_brokers_only() -> None:
    assert migrate.plan(ph.Record(Phase.kraft_brokers), "finalize") == (
        Phase.kraft, ["write-files", "roll-controllers", "retire-zookeeper", "healthy-on-kraft"])
    for phase in (Phase.zookeeper, Phase.controllers, Phase.dual_write):
        with pytest.raises(UsageError, match="finalizing comes after kraft-brokers"):
            migrate.plan(ph.Record(phase), "finalize")
    with pytest.raises(UsageError, match="finalized already"):
        migrate.plan(ph.Record(Phase.kraft), "finalize")
    # a kctl killed while finalizing resumes the finalize, and nothing else runs meanwhile
    busy = ph.Record(Phase.kraft_brokers, Phase.kraft, "finalize", ["write-files"])
    assert migrate.plan(busy, "finalize")[0] is Phase.kraft
    with pytest.raises(KctlError, match="a finalize to kraft is under way"):
        migrate.plan(busy, "rollback")


def test_the_plan_lists_every_step_to_kraft() -> None:
    rows = migrate.describe_plan(ph.Record(Phase.zookeeper))
    assert [(r["from"], r["to"]) for r in rows][:4] == [("zookeeper", "controllers")] * 4
    assert [r["to"] for r in rows].count("kraft-brokers") == 3
    assert [r["step"] for r in rows if r["command"] == "finalize"] == list(migrate.FINALIZE)
    assert all(r["what"] for r in rows)
    assert migrate.describe_plan(ph.Record(Phase.kraft)) == []


@pytest.mark.parametrize(("settings", "words"), [
    ({"engine": "hosts", "nodes": [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.0.0.{i}"}
                                    for i in (1, 2, 3)]}, "engine hosts is not built yet"),
    ({"security": {"enabled": True, "migration": "secure-inter-broker"}}, "moving to the secured profile"),
])
def test_clusters_it_cannot_migrate_yet_are_refused_before_anything(settings: dict[str, object], words: str) -> None:
    from kctl.model.spec import parse_spec

    with pytest.raises(UsageError, match=words) as err:
        migrate.check_can_migrate(parse_spec(settings)[0])
    assert err.value.exit_code == 2 and err.value.hint
    migrate.check_can_migrate(parse_spec({})[0])  # the default cluster may migrate, and a secured one
    migrate.check_can_migrate(parse_spec({"security": {"enabled": True}})[0])
    migrate.check_can_migrate(parse_spec({"engine": "swarm"})[0])


def test_metadata_migrated_is_read_in_the_migration_znode_not_in_a_log() -> None:
    from kctl.zk import migration as zkm

    # what Kafka 3.9's controller writes: -1 while it has only claimed the migration, the offset after it
    claimed = {"version": 0, "kraft_controller_id": 3001, "kraft_controller_epoch": 1,
               "kraft_metadata_offset": -1, "kraft_metadata_epoch": -1}
    assert zkm.migrated_by(claimed) is None
    done = dict(claimed, kraft_metadata_offset=57, kraft_metadata_epoch=1)
    assert zkm.migrated_by(done) == "controller 3001, ZooKeeper in step with the metadata log at offset 57"
    # no znode (never migrated, or deleted by a rollback), an unreadable one, or no answer: not migrated
    for state in (None, {"raw": "garbage"}, {"kraft_metadata_offset": None}, {"kraft_metadata_offset": "x"}):
        assert zkm.migrated_by(state) is None


def test_the_gate_asks_zookeeper_and_a_zookeeper_that_does_not_answer_is_not_migrated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.zk import migration as zkm

    asked = []

    def state(spec: object) -> dict[str, object]:
        asked.append(spec)
        return {"kraft_controller_id": 3002, "kraft_metadata_offset": 0}

    monkeypatch.setattr(zkm, "migration_state", state)
    probe = migrate._migrated_probe("spec")  # type: ignore[arg-type]
    assert probe() == (True, "by controller 3002, ZooKeeper in step with the metadata log at offset 0")
    assert asked == ["spec"]
    monkeypatch.setattr(zkm, "migration_state", lambda spec: (_ for _ in ()).throw(KctlError("no quorum")))
    assert probe() == (False, "no controller has finished it yet (/migration)")


@pytest.mark.parametrize(("source", "target", "done", "steps"), [
    (Phase.zookeeper, Phase.controllers, ["read-cluster-id", "write-files", "start-controllers"],
     ["stop-controllers", "remove-controllers"]),
    (Phase.zookeeper, Phase.controllers, [], ["stop-controllers", "remove-controllers"]),
    (Phase.controllers, Phase.dual_write, ["write-files", "roll-brokers"],
     ["stop-controllers", "delete-controller-and-migration-znodes", "roll-brokers-without-migration",
      "remove-controllers"]),
    (Phase.dual_write, Phase.kraft_brokers, ["write-files"],
     ["roll-brokers-to-zookeeper-with-migration", "stop-controllers", "delete-controller-and-migration-znodes",
      "roll-brokers-without-migration", "remove-controllers"]),
])
def test_a_stuck_next_is_rolled_back_from_the_phase_it_was_heading_for(source: Phase, target: Phase,
                                                                      done: list[str], steps: list[str]) -> None:
    stuck = ph.Record(source, target, "next", done, cluster_id="x")
    assert ph.can_abort(stuck, "rollback") and not ph.can_abort(stuck, "next")
    assert migrate.plan(stuck, "rollback") == (Phase.zookeeper, steps)
    aborted = ph.abort_next(stuck, now=5.0)
    assert (aborted.phase, aborted.target, aborted.action, aborted.done) == (target, None, None, [])
    assert aborted.history[-1]["phase"] == target.value and "aborted" in aborted.history[-1]
    assert (done[-1] if done else "its first step") in str(aborted.history[-1]["aborted"])
    assert ph.begin(aborted, "rollback", Phase.zookeeper).target is Phase.zookeeper
    assert migrate.plan(aborted, "rollback") == (Phase.zookeeper, steps)  # the same steps, as a rollback


def test_what_a_rollback_does_not_stop_is_still_refused() -> None:
    finalizing = ph.Record(Phase.kraft_brokers, Phase.kraft, "finalize", ["write-files", "roll-controllers"])
    assert not ph.can_abort(finalizing, "rollback")
    with pytest.raises(KctlError, match="a finalize to kraft is under way"):
        migrate.plan(finalizing, "rollback")
    rolling_back = ph.Record(Phase.dual_write, Phase.zookeeper, "rollback", ["stop-controllers"])
    assert migrate.plan(rolling_back, "rollback")[1][0] == "stop-controllers"  # resumed, not restarted
    with pytest.raises(KctlError, match="a rollback to zookeeper is under way"):
        migrate.plan(rolling_back, "next")


def test_the_rollback_of_a_next_stuck_at_the_controllers_quorum_runs_kafkas_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kctl migrate kraft rollback` while `next` is stuck at controller-quorum (a controller held down): the
    next is stopped, the controllers are stopped and removed, and the cluster is on ZooKeeper again with nothing
    under way; a kctl killed in the rollback resumes it."""
    import yaml

    from kctl.cluster import lifecycle
    from kctl.model.spec import ClusterSpec, load_cluster
    from kctl.runtime.engine import engines

    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(yaml.safe_dump({"name": "logger"}))
    state = tmp_path / ".kctl" / "logger"
    ph.write(state, ph.Record(Phase.zookeeper, Phase.controllers, "next",
                              ["read-cluster-id", "write-files", "start-controllers"], cluster_id="Xy7kQ2fnT3a1bC9dE0",
                              pins=dict(ClusterSpec().migration_pins)))
    conf = state / "logger1" / "conf"
    conf.mkdir(parents=True)
    for name in migrate.CONTROLLER_FILES:
        (conf / name).write_text("x\n")
    calls: list[tuple[str, ...]] = []

    class Engine:
        files_reach_a_restart = True

        def stop_service(self, spec: object, host: str, service: str, dc: object = None) -> str:
            calls.append(("stop", host, service))
            return ""

        def start_service(self, spec: object, host: str, service: str, dc: object = None) -> str:
            calls.append(("start", host, service))
            return ""

    def exec_in(spec: object, host: str, argv: list[str], **kw: object) -> tuple[int, str]:
        calls.append(("exec", host, *argv))
        return 0, ""

    monkeypatch.setattr(engines, "for_spec", lambda spec: Engine())
    monkeypatch.setattr(engines, "exec_in", exec_in)
    monkeypatch.setattr(migrate, "_settled", lambda spec: lambda: (True, "settled"))
    monkeypatch.setattr(lifecycle, "start_stopped_processes", lambda *a, **k: [])
    # the kctl killed in its roll left a broker stopped, which the roll's record names: the resumed migration
    # puts it back (through its start gates) before its steps, instead of refusing as other changes do
    from kctl.roll import run as roll_run

    state_lock.record_path(state).write_text(json.dumps({"command": "kctl migrate kraft", "pid": 1,
                                                       "down": [["logger2", "kafka"]]}))

    def put_back(spec: object, state_dir: Path, timeout: float, say: object) -> list[tuple[str, str]]:
        calls.append(("put back", *state_lock.read_record(state_dir)["down"][0]))
        state_lock.clear_record(state_dir)
        return [("logger2", "kafka")]

    monkeypatch.setattr(roll_run, "put_back_left", put_back)
    said: list[str] = []
    spec = load_cluster(spec_file)[0]
    out = migrate.run(spec, state, "rollback", progress=said.append)
    assert calls.pop(0) == ("put back", "logger2", "kafka") and not state_lock.record_path(state).exists()
    assert (out.source, out.phase) == ("controllers", "zookeeper")
    assert [s["step"] for s in out.steps] == ["stop-controllers", "remove-controllers"]
    hosts = ["logger1", "logger2", "logger3"]
    assert calls[:3] == [("stop", h, "controller") for h in hosts]  # stopped first, then removed
    assert calls[3:] == [c for h in hosts for c in (("exec", h, "rm", "-rf", migrate.CONTROLLER_DATA),
                                                    ("start", h, "controller"))]
    assert not any((conf / name).exists() for name in migrate.CONTROLLER_FILES)
    assert "stopping the next to controllers (steps done: read-cluster-id, write-files, start-controllers)" in said[0]
    record = ph.read(state)
    assert (record.phase, record.target, record.pins) == (Phase.zookeeper, None, {})
    assert [h["phase"] for h in record.history] == ["controllers", "zookeeper"] and "aborted" in record.history[0]
    assert not record.migrating
    with pytest.raises(ph.RollbackRefused, match="no migration to roll back"):
        migrate.plan(record, "rollback")
