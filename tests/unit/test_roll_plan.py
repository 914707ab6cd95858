"""Rolling restart planning without Docker: the order, the min-ISR check, the lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from kctl.cluster import lock as state_lock
from kctl.cluster.lock import roll_lock
from kctl.errors import ClusterError, UsageError
from kctl.kafka.client import Target
from kctl.kafka.describe import Partition
from kctl.model.spec import ClusterSpec, NodeSpec, Topology
from kctl.roll import plan as rp
from kctl.roll import run
from kctl.runtime.engine import engines

SPEC = ClusterSpec(nodes=[NodeSpec(id=i, hostname=f"logger{i}") for i in (1, 2, 3)])


def order(p: rp.RollPlan) -> list[tuple[str, str]]:
    return [(s.host, s.service) for s in p.steps]


def test_zookeeper_followers_first_leader_last() -> None:
    p = rp.plan_roll(SPEC, service="zookeeper", zk_modes={"logger1": "leader", "logger2": "follower",
                                                          "logger3": "follower"}, controller=2)
    assert order(p) == [("logger2", "zookeeper"), ("logger3", "zookeeper"), ("logger1", "zookeeper")]
    assert p.steps[-1].why == "leader last"
    assert rp.GATE_ONE_LEADER in " ".join(p.steps[0].gates)


def test_kafka_ascending_ids_controller_last() -> None:
    p = rp.plan_roll(SPEC, service="kafka", zk_modes={}, controller=1)
    assert order(p) == [("logger2", "kafka"), ("logger3", "kafka"), ("logger1", "kafka")]
    assert [s.broker for s in p.steps] == [2, 3, 1]
    assert p.steps[-1].why == "controller last"
    assert any("/brokers/ids/1 gone" in g for g in p.steps[-1].gates)


def test_default_is_zookeeper_phase_then_kafka_phase() -> None:
    p = rp.plan_roll(SPEC, service=None, zk_modes={"logger3": "leader", "logger1": "follower",
                                                   "logger2": "follower"}, controller=2)
    assert order(p) == [("logger1", "zookeeper"), ("logger2", "zookeeper"), ("logger3", "zookeeper"),
                        ("logger1", "kafka"), ("logger3", "kafka"), ("logger2", "kafka")]
    assert p.service == "all" and p.pre_checks == list(rp.PRE_CHECKS)


def test_node_service_plain_nodes_then_controller_then_zk_leader() -> None:
    p = rp.plan_roll(SPEC, service="node", zk_modes={"logger1": "leader", "logger2": "follower",
                                                     "logger3": "follower"}, controller=2)
    assert order(p) == [("logger3", "node"), ("logger2", "node"), ("logger1", "node")]
    gates = " ".join(p.steps[0].gates)
    assert rp.GATE_MIN_ISR in gates and rp.GATE_ZK_MODE in gates and "under-replicated" in gates


def test_named_nodes_only_and_unknown_node_refused() -> None:
    p = rp.plan_roll(SPEC, service="kafka", nodes=["3", "logger2", "logger3"], zk_modes={}, controller=None)
    assert order(p) == [("logger2", "kafka"), ("logger3", "kafka")]
    with pytest.raises(UsageError, match="no node 'logger9'"):
        rp.plan_roll(SPEC, service="kafka", nodes=["logger9"], zk_modes={}, controller=None)


def test_node_service_needs_colocated_and_service_names_checked() -> None:
    split = SPEC.model_copy(update={"topology": Topology.split})
    with pytest.raises(UsageError, match="colocated"):
        rp.plan_roll(split, service="node", zk_modes={}, controller=None)
    p = rp.plan_roll(split, service="kafka", zk_modes={}, controller=None)
    assert [s.host for s in p.steps] == ["kafka1", "kafka2", "kafka3"]
    assert [s.node for s in p.steps] == ["logger1", "logger2", "logger3"]
    with pytest.raises(UsageError, match="unknown service"):
        rp.plan_roll(SPEC, service="broker", zk_modes={}, controller=None)


def P(topic: str, part: int, replicas: tuple[int, ...], isr: tuple[int, ...], leader: int | None = None) -> Partition:
    return Partition(topic, part, isr[0] if leader is None and isr else (leader if leader is not None else -1),
                     replicas, isr)


def test_broker_may_go_when_every_isr_stays_at_min_insync() -> None:
    parts = [P("t", 0, (1, 2, 3), (1, 2, 3)), P("t", 1, (2, 3, 1), (2, 3, 1)), P("other", 0, (2, 3), (2,))]
    assert rp.blocking_partitions(parts, 1, {"t": 2}, default_min_isr=2) == []


def test_broker_blocked_when_its_isr_equals_min_insync() -> None:
    parts = [P("t", 0, (1, 2, 3), (1, 2)), P("t", 1, (1, 2, 3), (2, 3))]
    got = rp.blocking_partitions(parts, 1, {"t": 2}, default_min_isr=2)
    assert got == ["t-0 ISR [1, 2] would drop below min.insync.replicas=2"]
    # broker 1 is not in t-1's ISR (2, 3): stopping it takes nothing from that partition
    assert rp.blocking_partitions(parts[1:], 1, {"t": 2}, 2) == []


def test_broker_blocked_when_isr_already_below_or_no_leader() -> None:
    parts = [P("t", 0, (1, 2, 3), (3,)), P("u", 0, (1, 2), (), leader=-1)]
    got = rp.blocking_partitions(parts, 1, {}, default_min_isr=2)
    assert got == ["t-0 ISR [3] already below min.insync.replicas=2", "u-0 has no leader"]


def test_topic_min_isr_overrides_default() -> None:
    parts = [P("rf3-min1", 0, (1, 2, 3), (1, 2))]
    assert rp.blocking_partitions(parts, 1, {"rf3-min1": 1}, default_min_isr=2) == []
    assert rp.blocking_partitions(parts, 1, {}, default_min_isr=2) != []


def test_a_partition_no_roll_can_keep_writable_does_not_hold_its_broker_and_is_named() -> None:
    # replication factor 1, and 2 with min.insync.replicas 2: stopping any replica stops acks=all writes,
    # in any order, so waiting cannot help (a one-node cluster could otherwise never roll)
    parts = [P("rf1", 0, (2,), (2,)), P("rf2", 0, (2, 3), (2, 3)), P("t", 0, (1, 2, 3), (2, 3))]
    assert rp.blocking_partitions(parts, 2, {"rf1": 1, "rf2": 2}, 2) == [
        "t-0 ISR [2, 3] would drop below min.insync.replicas=2"]
    assert rp.unprotectable_partitions(parts, 2, {"rf1": 1, "rf2": 2}, 2) == ["rf1-0", "rf2-0"]
    assert rp.unprotectable_partitions(parts, 1, {"rf1": 1, "rf2": 2}, 2) == []
    # still held when it has no leader, or its ISR is already below: stopping it would take it offline
    down = [P("rf1", 0, (2,), (), leader=-1), P("rf2", 0, (2, 3), (2,))]
    assert rp.blocking_partitions(down, 2, {"rf1": 1, "rf2": 2}, 2) == [
        "rf1-0 has no leader", "rf2-0 ISR [2] already below min.insync.replicas=2"]


# ----- the lock ------------------------------------------------------------------------------------


def test_second_roll_refused_while_the_lock_is_held(tmp_path: Path) -> None:
    with roll_lock(tmp_path) as path:
        rec = json.loads(path.read_text())
        assert rec["command"] == "kctl restart" and rec["pid"] == os.getpid() and rec["started"].endswith("Z")
        # another process, as a second `kctl restart` would be
        code = ("import sys\nfrom pathlib import Path\nfrom kctl.cluster.lock import roll_lock\n"
                "from kctl.errors import ClusterError\n"
                "try:\n    with roll_lock(Path(sys.argv[1])):\n        print('got it')\n"
                "except ClusterError as e:\n    print('refused:', e.message)\n")
        p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parents[2])
        assert p.stdout.startswith("refused: kctl restart refused: kctl restart is changing this cluster (`"), p.stderr
        assert f"pid {os.getpid()}, started " in p.stdout and "nothing was changed" in p.stdout, p.stdout
    with roll_lock(tmp_path):  # released on exit
        pass


def test_lock_is_exclusive_within_a_process_too(tmp_path: Path) -> None:
    with roll_lock(tmp_path), pytest.raises(ClusterError, match="is changing this cluster"), \
            roll_lock(tmp_path):
        pass


def test_cli_restart_without_nodes_needs_rolling(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "kctl", "restart", "-f", str(tmp_path / "kctl.yaml")],
                       capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 2 and "pass --rolling" in p.stderr and "Traceback" not in p.stderr


# ----- the election's answer -------------------------------------------------------------------------


def test_election_answer_sorted_into_moved_not_needed_and_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import Future

    from confluent_kafka import KafkaError, TopicPartition

    from kctl.kafka import leaders

    answer: Future[dict[TopicPartition, KafkaError | None]] = Future()
    answer.set_result({TopicPartition("t", 1): KafkaError(KafkaError.ELECTION_NOT_NEEDED),
                       TopicPartition("t", 0): None,
                       TopicPartition("t", 2): KafkaError(KafkaError.PREFERRED_LEADER_NOT_AVAILABLE)})

    class FakeAdmin:
        def elect_leaders(self, kind: object, partitions: object) -> Future[dict[TopicPartition, KafkaError | None]]:
            assert partitions is None  # no --topic: every partition
            return answer

    monkeypatch.setattr(leaders, "admin", lambda *_a, **_k: FakeAdmin())
    res = leaders.elect(Target.of(ClusterSpec()), "preferred")
    assert res.elected == ["t-0"] and res.not_needed == 1 and not res.ok
    assert res.failed == [{"partition": "t-2", "error": res.failed[0]["error"]}]
    assert res.failed[0]["error"].startswith("PREFERRED_LEADER_NOT_AVAILABLE")
    with pytest.raises(UsageError, match="needs --topic"):
        leaders.elect(Target.of(ClusterSpec()), "preferred", partition=1)
    with pytest.raises(UsageError, match="unknown election type"):
        leaders.elect(Target.of(ClusterSpec()), "random")


def test_an_election_without_answer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import Future

    from kctl.errors import ClusterError
    from kctl.kafka import leaders

    class SilentAdmin:
        def elect_leaders(self, kind: object, partitions: object) -> Future[dict[object, object]]:
            return Future()  # never answered

    monkeypatch.setattr(leaders, "admin", lambda *_a, **_k: SilentAdmin())
    monkeypatch.setattr(leaders, "ANSWER_MARGIN", 0.2)
    with pytest.raises(ClusterError, match="no answer from the controller in 0s") as ei:
        leaders.elect(Target.of(ClusterSpec()), "preferred", timeout=0.1)
    assert "kctl elect-leaders" in (ei.value.hint or "")


# ----- the executor's failure path, with the cluster faked ------------------------------------------------


def test_a_stuck_gate_stops_the_roll_restarts_what_it_stopped_and_touches_nothing_after(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kctl.roll import run
    from kctl.runtime.engine import services

    the_plan = rp.plan_roll(SPEC, service="kafka", zk_modes={}, controller=3)
    calls: list[tuple[str, str, str]] = []

    def ok(*_a: object) -> run.Probe:
        return lambda: (True, "fine")

    def stuck_on_broker_2(_spec: object, broker: int) -> run.Probe:
        return lambda: (broker != 2, f"/brokers/ids/{broker} still there")

    monkeypatch.setattr(run, "plan", lambda *_a: the_plan)
    containers = mock.create_autospec(engines.containers, return_value=[])  # Docker is not asked
    monkeypatch.setattr(engines, "containers", containers)
    for name in ("pre_checks", "min_isr_gate", "process_gate", "registered_gate", "urp_gate"):
        monkeypatch.setattr(run, name, ok)
    monkeypatch.setattr(run, "unregistered_gate", stuck_on_broker_2)
    monkeypatch.setattr(run._Runner, "docker", lambda self: None)
    monkeypatch.setattr(services, "stop", lambda spec, host, svc, dc=None: calls.append(("stop", host, svc)) or "")
    monkeypatch.setattr(services, "start", lambda spec, host, svc, dc=None: calls.append(("start", host, svc)) or "")
    said: list[str] = []

    with pytest.raises(run.RollStopped) as err:
        run.roll(SPEC, tmp_path, service="kafka", gate_timeout=0.3, poll=0.05, progress=said.append)
    msg = err.value.message
    assert "restart stopped at [2/3] logger2 kafka" in msg and "/brokers/ids/2 still there" in msg
    assert "restarted: logger1 kafka" in msg and "not touched: logger3 kafka" in msg
    # logger1 rolled; logger2 stopped, then started again when its gate gave up; logger3 never touched
    assert calls == [("stop", "logger1", "kafka"), ("start", "logger1", "kafka"),
                     ("stop", "logger2", "kafka"), ("start", "logger2", "kafka")]
    assert any("waiting for /brokers/ids/2 gone: /brokers/ids/2 still there" in s for s in said)
    with state_lock.roll_lock(tmp_path):  # the lock went with the roll
        pass
    containers.assert_called_once_with(SPEC)  # the engine check came before anything was touched


def test_an_unhealthy_cluster_is_refused_before_anything_is_touched(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    from kctl.roll import run
    from kctl.runtime.engine import services

    calls: list[str] = []
    monkeypatch.setattr(run, "plan", lambda *_a: rp.plan_roll(SPEC, service=None, zk_modes={}, controller=None))
    monkeypatch.setattr(engines, "containers", mock.create_autospec(engines.containers, return_value=[]))
    monkeypatch.setattr(run, "pre_checks", lambda _s: lambda: (False, "under-replicated partitions 4"))
    monkeypatch.setattr(run, "PRE_CHECK_TIMEOUT", 0.2)
    monkeypatch.setattr(services, "stop", lambda *a, **k: calls.append("stop") or "")
    with pytest.raises(ClusterError, match="restart refused, nothing was touched") as err:
        run.roll(SPEC, tmp_path, gate_timeout=300, poll=0.05)
    assert "under-replicated partitions 4" in err.value.message and calls == []


def test_the_lock_names_the_command_that_holds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kctl", "node", "add", "--role", "observer", "-f", "k.yaml"])
    with roll_lock(tmp_path, "kctl node add"), pytest.raises(ClusterError) as err, \
            roll_lock(tmp_path, "kctl apply"):
        pass
    msg, hint = err.value.message, err.value.hint or ""
    assert msg.startswith("kctl apply refused: kctl node add is changing this cluster"), msg
    assert f"`kctl node add --role observer -f k.yaml`, pid {os.getpid()}, started 20" in msg, msg
    assert "nothing was changed" in msg
    assert hint.startswith("wait for kctl node add to finish") and f"released the moment pid {os.getpid()}" in hint


def test_lock_record_and_refusal_are_pure() -> None:
    rec = state_lock.lock_record("kctl reassign execute",
                                 ["/x/kctl/__main__.py", "reassign", "execute", "my plan.json"],
                                 pid=42, now=0)
    assert rec == {"command": "kctl reassign execute", "argv": "kctl reassign execute 'my plan.json'", "pid": 42,
                   "started": "1970-01-01T00:00:00Z"}
    err = state_lock.lock_refusal(json.dumps(rec), "kctl restart", Path("/s/restart.lock"))
    assert err.message == ("kctl restart refused: kctl reassign execute is changing this cluster (`kctl reassign"
                           " execute 'my plan.json'`, pid 42, started 1970-01-01T00:00:00Z); one change at a time"
                           " (restart, apply, node add/remove, reassign execute), nothing was changed")
    assert "/s/restart.lock is released the moment pid 42 exits" in (err.hint or "")
    # a file left by an older kctl, or one caught empty between its truncate and its write
    old = state_lock.lock_refusal("kctl restart, pid 7, since T\n", "kctl apply", Path("l"))
    assert "kctl restart, pid 7" in old.message
    empty = state_lock.lock_refusal("", "kctl apply", Path("l"))
    assert "another kctl command is changing this cluster;" in empty.message
    assert "that process exits" in (empty.hint or "")


def test_recreate_marks_only_the_named_hosts_steps() -> None:
    from kctl.model.spec import ClusterSpec

    spec = ClusterSpec()
    plan = rp.plan_roll(spec, service="node", nodes=["logger2"], zk_modes={}, controller=None, recreate=["logger2"])
    assert [(s.host, s.service, s.recreate) for s in plan.steps] == [("logger2", "node", True)]
    plain = rp.plan_roll(spec, service="kafka", zk_modes={}, controller=None)
    assert not any(s.recreate for s in plain.steps)
