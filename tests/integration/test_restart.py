"""kctl restart and kctl elect-leaders on a cluster of their own (topics other tests leave behind, with
one or two replicas, would rightly block a roll), put back together after each test.

The no-loss proof: an idempotent acks=all producer writes to an RF 3, min.insync.replicas=2 topic
during a full rolling restart; every value acknowledged in the delivery callback must be read back
from the partitions afterwards, and the producer must see no error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl.roll.plan import GATE_URP, URP_STABLE_S
from kctl.testing.cluster import KafkaCluster
from kctl.testing.plugin import restore

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[KafkaCluster]:
    # Without Kafka's own periodic rebalance, leadership returns to the preferred replicas only through
    # kctl's election: the tests below can tell whether it ran.
    with KafkaCluster(nodes=3, kafka={"overrides": {"auto.leader.rebalance.enable": "false"}}) as c:
        yield c


@pytest.fixture()
def cluster(own_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    yield own_cluster
    restore(own_cluster)


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)],
                          capture_output=True, text=True, timeout=timeout)


def jvm_pids(cluster: KafkaCluster) -> dict[tuple[str, str], str]:
    """(host, service) -> pid of its JVM, from `docker top`: a restart changes it."""
    import docker

    from kctl.contract import LABEL_CLUSTER, LABEL_SERVICE

    out: dict[tuple[str, str], str] = {}
    for c in docker.from_env().containers.list(filters={"label": f"{LABEL_CLUSTER}={cluster.spec.name}"}):
        top = c.top(ps_args="-eo pid,args")
        for pid, args in ((p[0], p[-1]) for p in top["Processes"]):
            if "QuorumPeerMain" in args:
                out[(c.labels[LABEL_SERVICE], "zookeeper")] = pid
            elif " kafka.Kafka " in f"{args} ":
                out[(c.labels[LABEL_SERVICE], "kafka")] = pid
    return out


class Load:
    """An idempotent acks=all producer, bounded in count and time, recording what was acknowledged."""

    def __init__(self, cluster: KafkaCluster, topic: str, max_records: int = 200_000, max_seconds: float = 420,
                 interval: float = 0.004) -> None:
        from kctl.kafka.client import Target, producer

        self.topic, self.max_records, self.max_seconds, self.interval = topic, max_records, max_seconds, interval
        # A broker restart may hold a record back for many seconds: give retries room.
        self.p = producer(Target.of(cluster.spec), acks="all", timeout=180, **{"linger.ms": 5})
        self.sent: dict[bytes, float] = {}
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.max_latency = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{err.name()}: {err.str()} (fatal={err.fatal()}, retriable={err.retriable()})")
            return
        v = msg.value()
        self.acked.add(v)
        self.max_latency = max(self.max_latency, time.monotonic() - self.sent[v])

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        i = 0
        while not self.stop.is_set() and i < self.max_records and time.monotonic() < deadline:
            v = f"{i:08d}".encode()
            self.sent[v] = time.monotonic()
            try:
                self.p.produce(self.topic, key=str(i % 64).encode(), value=v, on_delivery=self._delivered)
            except BufferError:
                self.p.poll(0.1)
                continue
            i += 1
            self.p.poll(0)
            time.sleep(self.interval)
        self.p.flush(200)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(240)


def read_all(cluster: KafkaCluster, topic: str, timeout: float = 120) -> set[bytes]:
    """Every value in every partition of ``topic``, from the beginning to the high watermark, by a fresh consumer."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from kctl.kafka.client import Target, consumer

    c = consumer(Target.of(cluster.spec), **{"isolation.level": "read_uncommitted"})
    try:
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts if ends[p] > 0])
        got: set[bytes] = set()
        pos = {p: 0 for p in parts}
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in parts) and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=1.0):
                if m.error() is None:
                    got.add(m.value())
                    pos[m.partition()] = m.offset() + 1
        assert all(pos[p] >= ends[p] for p in parts), f"read {pos}, high watermarks {ends}"
        return got
    finally:
        c.close()


def wait_for_line(path: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}: {path.read_text() if path.exists() else ''}")


def test_dry_run_prints_the_plan_as_data(cluster: KafkaCluster) -> None:
    before = jvm_pids(cluster)
    p = kctl(cluster, "restart", "--rolling", "--dry-run", "-o", "json")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    modes = cluster.zookeeper_modes()
    leader = next(h for h, m in modes.items() if m == "leader")
    ctrl = cluster.controller()
    zk = [s["host"] for s in plan["steps"] if s["service"] == "zookeeper"]
    kafka = [s["broker"] for s in plan["steps"] if s["service"] == "kafka"]
    assert zk[-1] == leader and sorted(zk) == sorted(modes)
    assert kafka[-1] == ctrl and kafka[:-1] == sorted(b for b in kafka if b != ctrl)
    assert plan["pre_checks"] and all(s["gates"] for s in plan["steps"])
    assert jvm_pids(cluster) == before  # a dry run touches nothing


# long: make test keeps the runbook's rolling restart and the secured profile's restart through its gates.
@pytest.mark.long
def test_rolling_restart_under_load_loses_no_acknowledged_record(cluster: KafkaCluster) -> None:
    topic = f"roll-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=6, replication_factor=3, config={"min.insync.replicas": "2"})
    before = jvm_pids(cluster)
    err_log = cluster.workdir / f"{topic}.stderr"
    with Load(cluster, topic) as load:
        time.sleep(2)  # some records in flight before the first node goes
        started = time.monotonic()
        with err_log.open("w") as err:
            roll = subprocess.Popen([sys.executable, "-m", "kctl", "restart", "--rolling", "--yes", "--timeout",
                                     "180", "-o", "json", "-f", str(cluster.spec_file)],
                                    stdout=subprocess.PIPE, stderr=err, text=True)
            wait_for_line(err_log, "restarting")
            second = kctl(cluster, "restart", "--rolling", "--yes", timeout=60)
            out, _ = roll.communicate(timeout=600)
        wall = time.monotonic() - started
    stderr = err_log.read_text()
    assert roll.returncode == 0, stderr
    assert second.returncode == 1, second.stderr
    assert "kctl restart refused: kctl restart is changing this cluster (`kctl restart --rolling" in second.stderr, \
        second.stderr

    result = json.loads(out)
    after = jvm_pids(cluster)
    assert set(after) == set(before) and all(after[k] != before[k] for k in before), (before, after)
    assert [(s["host"], s["service"]) for s in result["steps"]] == \
        [(s["host"], s["service"]) for s in result["plan"]["steps"]] and len(result["steps"]) == 6
    # the progress names the node, the gate and what it saw
    assert GATE_URP.format(s=URP_STABLE_S) in stderr and "URP 0" in stderr
    assert "/brokers/ids/" in stderr and "gone" in stderr and "answers srvr with a mode" in stderr

    assert load.errors == [], load.errors[:5]
    assert load.acked, "nothing was acknowledged"
    read = read_all(cluster, topic)
    lost = load.acked - read
    assert not lost, f"{len(lost)} acknowledged records missing, e.g. {sorted(lost)[:5]}"
    print(f"\nroll: {wall:.1f}s wall, {len(load.acked)} records acknowledged, max produce latency"
          f" {load.max_latency * 1000:.0f} ms, lost {len(lost)}; election {result['election']}")

    # finished with a preferred leader election: every partition led by its first replica
    from kctl.kafka.client import Target, admin

    md = admin(Target.of(cluster.spec)).list_topics(topic, timeout=10).topics[topic]
    assert all(p.leader == p.replicas[0] for p in md.partitions.values()), \
        {i: (p.leader, p.replicas) for i, p in md.partitions.items()}
    st = cluster.status()
    assert st.health == "healthy", st.problems


def test_a_gate_that_times_out_stops_the_roll_and_touches_nothing_after(cluster: KafkaCluster) -> None:
    from kctl import contract
    from kctl.roll.plan import kafka_order

    # The first broker of the roll is held down once the roll has stopped it (the node's supervisor does
    # not start it while the hold file exists): its start gate times out, and the roll goes no further.
    first = kafka_order(cluster.brokers(), cluster.controller())[0][0]
    hold = contract.hold_file("kafka")
    before = jvm_pids(cluster)
    code, out = cluster.exec(first, ["touch", hold])
    assert code == 0, out
    try:
        p = kctl(cluster, "restart", "--rolling", "--service", "kafka", "--yes", "--timeout", "4")
        assert p.returncode == 1, p.stderr
        assert "restart stopped at [1/3]" in p.stderr and "broker registered" in p.stderr, p.stderr
        assert "not touched:" in p.stderr and "Traceback" not in p.stderr
        after = jvm_pids(cluster)
        assert {k for k in before if after.get(k) != before[k]} == {(f"logger{first}", "kafka")}, (before, after)
    finally:
        cluster.exec(first, ["rm", "-f", hold])
        restore(cluster)


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(cluster: KafkaCluster) -> None:
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    from kctl.kafka.client import Target, admin

    def leaders() -> dict[int, tuple[int, int]]:
        md = admin(Target.of(cluster.spec)).list_topics(topic, timeout=10).topics[topic]
        return {i: (p.leader, p.replicas[0]) for i, p in md.partitions.items()}

    from kctl.wait import wait_until

    # A broker's metadata may list the new topic before its partitions: wait until all three have a leader, and
    # take the victim from that answer (a new client may ask another broker, one that still lists no partitions:
    # a CI run's next answer had no partition 0).
    led: dict[int, tuple[int, int]] = {}

    def all_led() -> tuple[bool, str]:
        led.clear()
        led.update(leaders())
        return len(led) == 3 and all(lead >= 0 for lead, _ in led.values()), str(led)

    wait_until("the new topic's leaders", all_led, 30)
    victim = led[0][1]
    cluster.stop(victim, service="kafka")
    cluster.wait_until_healthy(allow_missing=1)
    cluster.start(victim, service="kafka")
    cluster.wait_for(lambda s: s.health == "healthy", timeout=120, description="ISR back")
    moved = {i for i, (leader, preferred) in leaders().items() if leader != preferred}
    assert moved, leaders()  # the restarted broker came back as a follower everywhere

    p = kctl(cluster, "elect-leaders", "--topic", topic, "-o", "json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["type"] == "preferred" and sorted(res["elected"]) == sorted(f"{topic}-{i}" for i in moved), res

    # The controller answered once it had elected; the other brokers learn the new leaders from its next
    # UpdateMetadata, so a metadata answer right after may still name the old ones (a CI run's did).
    def preferred_lead() -> tuple[bool, str]:
        now = leaders()
        return all(leader == preferred for leader, preferred in now.values()), str(now)

    wait_until("every partition led by its preferred replica", preferred_lead, 15)

    again = json.loads(kctl(cluster, "elect-leaders", "--topic", topic, "--partition", "0", "-o", "json").stdout)
    assert again["elected"] == [] and again["not_needed"] == 1
    bad = kctl(cluster, "elect-leaders", "--topic", topic, "--partition", "7")
    assert bad.returncode == 2 and "has no partition 7" in bad.stderr
    assert "does not exist" in kctl(cluster, "elect-leaders", "--topic", "no-such-topic").stderr


def test_restart_one_node_both_services_together(cluster: KafkaCluster) -> None:
    before = jvm_pids(cluster)
    p = kctl(cluster, "restart", "logger2", "--service", "node", "--yes", "-o", "json")
    assert p.returncode == 0, p.stderr
    after = jvm_pids(cluster)
    changed = {k for k in before if after.get(k) != before[k]}
    assert changed == {("logger2", "zookeeper"), ("logger2", "kafka")}, (before, after)
    for gate in ("would drop below min.insync.replicas", "answers srvr with a mode", "under-replicated partitions 0"):
        assert gate in p.stderr
    # the broker starts beside its ZooKeeper, not after the ZooKeeper's gates
    assert p.stderr.index("starting kafka") < p.stderr.index("ok  answers srvr with a mode"), p.stderr
    assert cluster.status().health == "healthy"


# ----- ZooKeeper storage ----------------------------------------------------------------------------


def test_zk_storage_and_purge_keep_the_newest_snapshots(cluster: KafkaCluster) -> None:
    # A ZooKeeper leader takes a snapshot when it is elected: restarting the leader gives a real snapshot of a
    # new epoch (zxid above 5) to copy below.
    leader = next(h for h, m in cluster.zookeeper_modes().items() if m == "leader")
    assert kctl(cluster, "restart", leader, "--service", "zookeeper", "--yes").returncode == 0
    p = kctl(cluster, "zk", "storage", "-o", "json")
    assert p.returncode == 0, p.stderr
    nodes = {n["node"]: n for n in json.loads(p.stdout)}
    assert sorted(nodes) == ["logger1", "logger2", "logger3"]
    for n in nodes.values():
        assert n["snapshots"]["files"] >= 1 and n["txn_logs"]["files"] >= 1 and n["problems"] == [], n
        assert n["snapshots"]["key"] == "dataDir" and n["txn_logs"]["key"] == "dataLogDir" and n["separate"]

    # Old snapshots to purge: copies of a real one under lower zxids (what PurgeTxnLog orders by), on the
    # node with the newest real snapshot.
    def zxid(f: Path) -> int:
        return int(f.name.split(".")[1], 16)

    dirs = {h: Path(n["snapshots"]["host_path"]) / "version-2" for h, n in nodes.items()}
    host = max(dirs, key=lambda h: max(zxid(f) for f in dirs[h].glob("snapshot.*")))
    snap_dir = dirs[host]
    real = sorted(snap_dir.glob("snapshot.*"), key=zxid)
    assert zxid(real[-1]) > 5, real
    for z in range(1, 6):
        (snap_dir / f"snapshot.{z:x}").write_bytes(real[-1].read_bytes())
    count = len(list(snap_dir.glob("snapshot.*")))
    assert count >= 6

    bad = kctl(cluster, "zk", "purge", host, "--keep", "2")
    assert bad.returncode == 2 and "at least 3" in bad.stderr and len(list(snap_dir.glob("snapshot.*"))) == count

    p = kctl(cluster, "zk", "purge", host, "--keep", "3", "-o", "json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)[0]
    left = sorted(snap_dir.glob("snapshot.*"), key=zxid)
    assert res["before"]["snapshots"]["files"] == count and res["after"]["snapshots"]["files"] == 3 == len(left)
    assert left[-1].name == real[-1].name  # the newest one is kept
    assert cluster.status().health == "healthy"


# ----- the runbook, executed -------------------------------------------------------------------------


def test_runbook_rolling_restart_runs_as_written(cluster: KafkaCluster) -> None:
    from tests.integration import runbook

    ran = runbook.run(runbook.RUNBOOKS / "rolling-restart.md", cluster.spec_file, state_dir=cluster.state_dir)
    assert [r.step.command.split()[1] for r in ran] == \
        ["status", "render", "restart", "restart", "status", "elect-leaders"]


# ----- a roll interrupted between a broker's stop and its start -------------------------------------------


def _roll_frozen_after_first_stop(cluster: KafkaCluster) -> tuple[subprocess.Popen[str], str, list[str]]:
    """`kctl restart --rolling --service kafka` started and frozen (SIGSTOP) the moment it says it stops its first
    broker; that broker then stopped through the engine (the call kctl makes, whether or not kctl's own was
    already under way): an interruption sent now lands between the broker's stop and its start, whatever the
    machine's speed."""
    from kctl.roll.plan import kafka_order
    from kctl.runtime.docker_api import NOT_RUNNING
    from kctl.runtime.engine import services

    first = f"logger{kafka_order(cluster.brokers(), cluster.controller())[0][0]}"
    p = subprocess.Popen([sys.executable, "-m", "kctl", "restart", "--rolling", "--service", "kafka", "--yes",
                          "-f", str(cluster.spec_file)], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    said: list[str] = []
    assert p.stderr is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        said.append(line)
        if f"{first} kafka: stopping kafka" in line or not line:
            break
    assert said and "stopping kafka" in said[-1], "".join(said)
    os.kill(p.pid, signal.SIGSTOP)
    services.stop(cluster.spec, first, "kafka")
    assert services.process_state(cluster.spec, first, "kafka") in NOT_RUNNING
    return p, first, said


def test_sigterm_between_a_brokers_stop_and_start_starts_it_again(cluster: KafkaCluster) -> None:
    from kctl.runtime.engine import services

    p, first, said = _roll_frozen_after_first_stop(cluster)
    try:
        os.kill(p.pid, signal.SIGTERM)
        os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    err = "".join(said) + err
    assert p.returncode == 130, err
    assert f"restart interrupted (SIGTERM) at [1/3] {first} kafka: what it had stopped was started again" in err
    assert "Traceback" not in err and "still stopped" not in err
    assert services.process_state(cluster.spec, first, "kafka") in ("RUNNING", "STARTING"), err
    assert not (cluster.state_dir / "roll.json").exists()


@pytest.mark.long
def test_a_roll_killed_between_stop_and_start_is_put_back_by_the_next_one(cluster: KafkaCluster) -> None:
    p, first, said = _roll_frozen_after_first_stop(cluster)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(30)
    record = json.loads((cluster.state_dir / "roll.json").read_text())
    assert record["down"] == [[first, "kafka"]] and record["command"] == "kctl restart", record
    st = kctl(cluster, "status", "-o", "json")
    assert st.returncode == 1 and any(p.startswith("an interrupted roll (`kctl restart --rolling --service kafka")
                                      and f"left {first} kafka stopped" in p
                                      for p in json.loads(st.stdout)["problems"]), st.stdout
    # the next roll starts the broker first (its pre-checks would refuse a cluster with a broker down), then rolls
    again = kctl(cluster, "restart", "--rolling", "--service", "kafka", "--yes")
    assert again.returncode == 0, again.stderr
    assert f"left {first} kafka stopped: starting it again first" in again.stderr, again.stderr
    assert not (cluster.state_dir / "roll.json").exists()
    assert cluster.status().health == "healthy"
