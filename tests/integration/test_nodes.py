"""kctl node add/remove, kctl reassign and kctl zk reconfig on a cluster of their own, through the runbooks.

One cluster, one sequence (the tests run in file order and each leaves the cluster as the next one
expects): bad input changes nothing -> add node 4 and rebalance (add-broker-and-rebalance.md) ->
decommission it (decommission-broker.md) -> add it as a ZooKeeper-only observer (`--no-broker`) and
take it away again, `kctl up` after each leaving the other containers as they are (grow-zookeeper.md).
Records written with acks=all before the first change are all read back after the last one by an
independent consumer, and every partition ends fully replicated on brokers 1-3.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kctl.testing.cluster import KafkaCluster
from tests.integration import runbook

pytestmark = pytest.mark.integration

TOPIC = "orders"
RECORDS = 3000


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3) as c:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, config={"min.insync.replicas": "2"})
        c.create_topic("rf2", partitions=4, replication_factor=2)
        yield c


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                          text=True, timeout=timeout, cwd=cluster.workdir, env=_env())


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "COLUMNS": "200"}


def assignment(cluster: KafkaCluster) -> dict[str, tuple[list[int], list[int]]]:
    """{topic-partition: (replicas, isr)} as an AdminClient reads it (independent of kctl's reassign code)."""
    from kctl.kafka.client import Target, admin

    md = admin(Target.of(cluster.spec)).list_topics(timeout=10)
    return {f"{t}-{p}": (list(pm.replicas), list(pm.isrs)) for t, tm in md.topics.items()
            for p, pm in tm.partitions.items()}


def produce(cluster: KafkaCluster, n: int) -> set[bytes]:
    from kctl.kafka.client import Target, producer

    p = producer(Target.of(cluster.spec), acks="all")
    acked: set[bytes] = set()
    run = uuid.uuid4().hex[:6]

    def cb(err: object, msg: object) -> None:
        if err is None:
            acked.add(msg.value())  # type: ignore[attr-defined]

    for i in range(n):
        p.produce(TOPIC, key=str(i % 32).encode(), value=f"{run}-{i:06d}".encode() * 20, on_delivery=cb)
        p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == n
    return acked


def read_all(cluster: KafkaCluster) -> set[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from kctl.kafka.client import Target, consumer

    c = consumer(Target.of(cluster.spec), group=f"check-{uuid.uuid4().hex[:6]}")
    try:
        parts = list(c.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in parts])
        got: set[bytes] = set()
        done: set[int] = {p for p, e in ends.items() if e == 0}
        for _ in range(600):
            if len(done) == len(parts):
                break
            for m in c.consume(500, timeout=1.0):
                if m.error() is None:
                    got.add(m.value())
                    if m.offset() + 1 >= ends[m.partition()]:
                        done.add(m.partition())
        return got
    finally:
        c.close()


@pytest.fixture(scope="module")
def acked(cluster: KafkaCluster) -> set[bytes]:
    return produce(cluster, RECORDS)


def test_bad_input_changes_nothing(cluster: KafkaCluster, acked: set[bytes]) -> None:
    before_spec, before = cluster.spec_file.read_text(), assignment(cluster)
    zk_before = kctl(cluster, "zk", "config", "-o", "raw").stdout
    (cluster.workdir / "bad.json").write_text('{"version": 1, "partitions": [{"topic": "orders", "partition": 0,'
                                              ' "replicas": [1, 2, 9]}]}')
    (cluster.workdir / "nope.json").write_text('{"version": 1, "partitions": [{"topic": "nope", "partition": 0,'
                                               ' "replicas": [1, 2, 3]}]}')
    (cluster.workdir / "broken.json").write_text('{"version": 1, "partitions": [')
    (cluster.workdir / "rf.json").write_text('{"version": 1, "partitions": [{"topic": "orders", "partition": 0,'
                                             ' "replicas": [1, 2]}]}')
    (cluster.workdir / "rf1.json").write_text('{"version": 1, "partitions": [{"topic": "orders", "partition": 0,'
                                              ' "replicas": [1]}]}')
    cases = [
        (("reassign", "execute", "rf.json"), "changes the replication factor of orders-0 (3 -> 2)"),
        (("reassign", "execute", "rf1.json", "--replication-factor-change"),
         "fewer replicas than min.insync.replicas: orders-0 (1 < min.insync.replicas 2)"),
        (("reassign", "plan", "--replication-factor", "2"), "--replication-factor needs --topics"),
        (("reassign", "plan", "--topics", "orders", "--replication-factor", "1"), "fewer replicas than min.insync"),
        (("reassign", "plan", "--topics", "orders", "--replication-factor", "5"), "needs at least 5 brokers"),
        (("node", "add", "--throttle", "1MB/s"), "--by and --throttle go with --rebalance"),
        (("reassign", "execute", "bad.json"), "not registered"),
        (("reassign", "execute", "nope.json"), "do not exist: nope"),
        (("reassign", "execute", "broken.json"), "is not JSON"),
        (("reassign", "plan", "--brokers", "1,2"), "needs at least 3 brokers"),
        (("reassign", "plan", "--brokers", "1,2,3,7"), "not registered"),
        (("node", "remove", "2", "--yes"), "cannot remove node 2: replication factor 3"),
        (("node", "remove", "9", "--yes"), "no node '9'"),
        (("node", "add", "--role", "participant"), "even ensemble"),
        (("zk", "reconfig", "--remove", "3"), "even ensemble"),
        (("zk", "reconfig", "--add", "server.4=logger4:2888:3888:observer;2181"), "do not answer"),
    ]
    for args, text in cases:
        p = kctl(cluster, *args)
        assert p.returncode != 0 and text in p.stderr, (args, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr
    assert cluster.spec_file.read_text() == before_spec
    assert kctl(cluster, "zk", "config", "-o", "raw").stdout == zk_before
    assert assignment(cluster) == before
    assert sorted(cluster.brokers()) == [1, 2, 3] and cluster.status().health == "healthy"


def test_runbook_add_broker_and_rebalance(cluster: KafkaCluster) -> None:
    before = assignment(cluster)
    assert all(4 not in r for r, _ in before.values())
    ran = runbook.run(runbook.RUNBOOKS / "add-broker-and-rebalance.md", cluster.spec_file, state_dir=cluster.state_dir)
    nodes = yaml.safe_load(cluster.spec_file.read_text())["nodes"]
    assert [n["id"] for n in nodes] == [1, 2, 3, 4] and nodes[3]["role"] == "observer"
    a = assignment(cluster)
    per_broker = {b: sum(b in r for r, _ in a.values()) for b in (1, 2, 3, 4)}
    assert max(per_broker.values()) - min(per_broker.values()) <= 1, per_broker  # balanced, 4 included
    assert all(sorted(r) == sorted(isr) for r, isr in a.values())
    # `node add --rebalance` moved as many partitions as it said, and no more than needed to give broker 4 its share
    moved = {k for k in a if sorted(a[k][0]) != sorted(before[k][0])}
    said = next(r for r in ran if "--rebalance" in r.step.command)
    assert f"{len(moved)} partition(s) moved to spread the replicas over every broker" in said.output, said.output
    assert len(moved) <= per_broker[4], (moved, per_broker)
    # Throttles are gone once --wait verified the move: no broker keeps a replication rate limit.
    st = json.loads(kctl(cluster, "reassign", "status", "-o", "json").stdout)
    assert st["moving"] == [] and st["throttled_brokers"] == []


def test_reassign_status_verify_and_cancel_of_a_throttled_move(cluster: KafkaCluster) -> None:
    from kctl.kafka.client import Target, admin, producer

    # A plan of the assignment as it is: Kafka's --verify says each partition's move is complete.
    (cluster.workdir / "plan.json").write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": int(k.rsplit("-", 1)[1]), "replicas": r}
        for k, (r, _) in assignment(cluster).items() if k.startswith(f"{TOPIC}-")]}))
    done = kctl(cluster, "reassign", "verify", "plan.json")
    assert done.returncode == 0 and "is completed" in done.stdout + done.stderr, done.stdout + done.stderr
    # 8 MB in one partition, throttled to 10 KB/s: the new replica copies for minutes, so the move is
    # still going below (Kafka lets a fetch or so through before the throttle bites).
    topic = "slow-move"
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    prod = producer(Target.of(cluster.spec), acks="all", **{"linger.ms": 20, "compression.type": "none"})
    for _ in range(800):
        prod.produce(topic, value=uuid.uuid4().bytes * 640)
        prod.poll(0)
    assert prod.flush(60) == 0
    replicas = assignment(cluster)[f"{topic}-0"][0]
    spare = min({1, 2, 3, 4} - set(replicas))
    (cluster.workdir / "slow.json").write_text(json.dumps(
        {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [*replicas[:-1], spare]}]}))
    p = kctl(cluster, "reassign", "execute", "slow.json", "--throttle", "10KB/s")
    assert p.returncode == 0, p.stderr
    st = json.loads(kctl(cluster, "reassign", "status", "-o", "json").stdout)
    moving = {m["partition"]: m for m in st["moving"]}
    assert f"{topic}-0" in moving and moving[f"{topic}-0"]["adding"] == [spare], st
    assert st["bytes_left"] and st["bytes_left"] > 0 and spare in st["throttled_brokers"], st
    # The time left: one broker receives at 10 KB/s at most, so no less than bytes left / 10 000 (the estimate's
    # rate is what was copied since execute started, capped by that throttle), and the table says it.
    assert st["throttle"] == 10_000 and st["seconds_left"] >= st["bytes_left"] / 10_000 - 1, st
    table = kctl(cluster, "reassign", "status")
    assert "left (throttled to 10000 B/s per broker)" in table.stdout + table.stderr, table.stdout + table.stderr
    c = kctl(cluster, "reassign", "cancel")
    assert c.returncode == 0 and f"cancelled the reassignment of 1 partition(s) ({topic}-0)" in c.stdout + c.stderr, \
        c.stdout + c.stderr
    for _ in range(30):  # the controller finishes the cancel on its own time
        after = json.loads(kctl(cluster, "reassign", "status", "-o", "json").stdout)
        if not after["moving"] and not after["throttled_brokers"]:
            break
        time.sleep(1)
    assert after["moving"] == [] and after["throttled_brokers"] == [], after
    assert assignment(cluster)[f"{topic}-0"][0] == replicas  # back to the original replicas
    a = admin(Target.of(cluster.spec))  # held while its future runs
    a.delete_topics([topic])[topic].result(30)  # the runbooks that follow move less


def _bytes_on_disk(cluster: KafkaCluster, topic: str) -> dict[int, int]:
    """Each broker's bytes of ``topic``, read from the log segments in its data directory on this host (the
    brokers' own files: independent of kctl and of Kafka's tools); a replica moved away (its directory renamed
    ``<topic>-<p>.<id>-delete`` until Kafka deletes it) no longer counts."""
    import re

    live = re.compile(rf"{re.escape(topic)}-\d+")
    out = {}
    for b in (1, 2, 3, 4):
        root = cluster.state_dir / f"logger{b}" / "data"
        out[b] = sum(f.stat().st_size for d in root.rglob(f"{topic}-*") if d.is_dir() and live.fullmatch(d.name)
                     for f in d.glob("*.log"))
    return out


def test_a_plan_by_bytes_evens_out_a_topic_whose_bytes_sit_on_one_broker(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import NewTopic

    from kctl.kafka.client import Target, admin, producer, wait_for_topic

    topic = "skewed"
    a = admin(Target.of(cluster.spec))  # held while its futures run
    a.create_topics([NewTopic(topic, num_partitions=4, replica_assignment=[[1], [1], [1], [1]])])[topic].result(30)
    wait_for_topic(a, topic, partitions=4)
    prod = producer(Target.of(cluster.spec), acks="all", **{"compression.type": "none"})
    for p in range(4):
        for _ in range(100):
            prod.produce(topic, value=uuid.uuid4().bytes * 250, partition=p)  # 4 KB records, 400 KB a partition
        prod.poll(0)
    assert prod.flush(60) == 0
    before = _bytes_on_disk(cluster, topic)
    assert before[1] >= 4 * 400_000 and before[2] == before[3] == before[4] == 0, before
    shown = kctl(cluster, "reassign", "plan", "--brokers", "1,2,3,4", "--topics", topic, "--by", "bytes", "-o", "yaml")
    assert shown.returncode == 0, shown.stderr
    doc = yaml.safe_load(shown.stdout)
    current, target = ({int(b): v for b, v in doc["bytes_per_broker"][w].items()} for w in ("current", "target"))
    assert doc["by"] == "bytes" and current[1] >= 4 * 400_000 and current[2] == 0, doc["bytes_per_broker"]
    assert max(target.values()) - min(target.values()) <= max(before.values()) // 4 + 1, target
    plan = kctl(cluster, "reassign", "plan", "--brokers", "1,2,3,4", "--topics", topic, "--by", "bytes", "-o", "json")
    (cluster.workdir / "bytes.json").write_text(plan.stdout)
    run = kctl(cluster, "reassign", "execute", "bytes.json", "--wait")
    assert run.returncode == 0, run.stdout + run.stderr
    after = {}
    for _ in range(30):  # the old replicas' files are deleted a moment after the move (log.segment.delete.delay)
        after = _bytes_on_disk(cluster, topic)
        if sum(after.values()) == sum(before.values()):
            break
        time.sleep(1)
    share = sum(before.values()) // 4
    assert all(abs(v - share) <= share // 2 for v in after.values()), (before, after)  # one partition each
    assert sum(after.values()) == sum(before.values()), (before, after)
    bad = kctl(cluster, "reassign", "plan", "--brokers", "1,2", "--by", "size")
    assert bad.returncode == 2 and "--by 'size': expected replicas or bytes" in bad.stderr, bad.stderr
    a.delete_topics([topic])[topic].result(30)  # the runbooks that follow move less


def test_a_replication_factor_raised_and_lowered_under_load_loses_nothing(cluster: KafkaCluster) -> None:
    from tests.integration.load import Load, kcat_values

    topic = "rf-change"
    cluster.create_topic(topic, partitions=3, replication_factor=1)
    with Load(cluster.bootstrap_servers, topic, max_records=20_000, max_seconds=120) as load:
        up = kctl(cluster, "reassign", "plan", "--topics", topic, "--replication-factor", "3", "-o", "json")
        assert up.returncode == 0, up.stderr
        (cluster.workdir / "rf3.json").write_text(up.stdout)
        assert all(len(e["replicas"]) == 3 for e in json.loads(up.stdout)["partitions"]), up.stdout
        run = kctl(cluster, "reassign", "execute", "rf3.json", "--replication-factor-change", "--throttle", "50MB/s",
                   "--wait")
        assert run.returncode == 0, run.stdout + run.stderr
        three = {k: v for k, v in assignment(cluster).items() if k.startswith(f"{topic}-")}
        assert all(len(r) == 3 and sorted(r) == sorted(isr) for r, isr in three.values()), three
        down = kctl(cluster, "reassign", "plan", "--topics", topic, "--replication-factor", "2", "-o", "json")
        (cluster.workdir / "rf2.json").write_text(down.stdout)
        run = kctl(cluster, "reassign", "execute", "rf2.json", "--replication-factor-change", "--wait")
        assert run.returncode == 0, run.stdout + run.stderr
        time.sleep(2)  # the load goes on writing a moment after the last move
    assert len(load.acked) > 100 and not load.failures(), (len(load.acked), load.failures()[:3])
    two = {k: v for k, v in assignment(cluster).items() if k.startswith(f"{topic}-")}
    assert all(len(r) == 2 and sorted(r) == sorted(isr) for r, isr in two.values()), two
    # each partition kept its leader through both changes (the first replica of its factor-1 assignment)
    assert all(r[0] == three[k][0][0] for k, (r, _) in two.items()), (three, two)
    assert load.acked <= set(kcat_values(cluster.bootstrap_servers, topic))  # kcat reads every acknowledged record
    from kctl.kafka.client import Target, admin

    a = admin(Target.of(cluster.spec))  # held while its future runs
    a.delete_topics([topic])[topic].result(30)  # the runbooks that follow move less


def test_runbook_decommission_broker(cluster: KafkaCluster, acked: set[bytes]) -> None:
    runbook.run(runbook.RUNBOOKS / "decommission-broker.md", cluster.spec_file, state_dir=cluster.state_dir)
    a = assignment(cluster)
    assert all(4 not in r for r, _ in a.values())
    assert sorted(cluster.brokers()) == [1, 2, 3]
    assert not (cluster.state_dir / "logger4").exists()
    assert acked <= read_all(cluster)  # nothing acknowledged was lost through add, move and remove


def started(cluster: KafkaCluster) -> dict[str, tuple[str, str]]:
    """{node: (container id, State.StartedAt)} as Docker reports them (a container made again or restarted
    changes one of the two)."""
    import docker

    from kctl.runtime import docker_api

    dc = docker.from_env()
    try:
        return {c.name: (c.id, dc.containers.get(c.id).attrs["State"]["StartedAt"])
                for c in docker_api.infos(cluster.spec.name, dc)}
    finally:
        dc.close()


def java_mains(cluster: KafkaCluster, node: str) -> list[str]:
    import docker

    from kctl.runtime import docker_api

    dc = docker.from_env()
    try:
        cid = next(c.id for c in docker_api.infos(cluster.spec.name, dc) if c.name == node)
        top = dc.containers.get(cid).top(ps_args="-eo pid,args")  # docker top needs the PID column
        return [" ".join(p) for p in top["Processes"] if "java" in " ".join(p)]
    finally:
        dc.close()


def test_runbook_grow_zookeeper(cluster: KafkaCluster, acked: set[bytes]) -> None:
    before = started(cluster)
    assert sorted(before) == ["logger1", "logger2", "logger3"]
    seen: dict[str, Any] = {}

    def look(step: runbook.Step) -> None:
        if step.command == "kctl status" and "logger4" not in seen:  # the ZooKeeper-only node is up
            seen["logger4"] = yaml.safe_load(cluster.spec_file.read_text())["nodes"][3]
            seen["brokers"] = sorted(cluster.brokers())
            seen["commands"] = java_mains(cluster, "logger4")

    ran = runbook.run(runbook.RUNBOOKS / "grow-zookeeper.md", cluster.spec_file, state_dir=cluster.state_dir,
                      before=look)
    assert seen["logger4"]["broker"] is False and seen["logger4"]["role"] == "observer"
    assert seen["brokers"] == [1, 2, 3]
    # the node runs ZooKeeper's JVM and no broker's (what `docker top` lists, not what kctl reports)
    assert any("QuorumPeerMain" in c for c in seen["commands"]), seen["commands"]
    assert not any("kafka.Kafka" in c for c in seen["commands"]), seen["commands"]
    assert sum(r.step.command == "kctl up" for r in ran) == 2
    # `kctl up` after the node add and after the remove left the three untouched nodes as they were
    assert started(cluster) == before
    # The done-when: a healthy 3-node cluster, every partition fully replicated, nothing lost.
    st = cluster.status()
    assert st.health == "healthy" and st.brokers_registered == 3 and st.under_replicated_partitions == 0
    a = assignment(cluster)
    assert a[f"{TOPIC}-0"][0] and all(len(a[f"{TOPIC}-{p}"][0]) == 3 for p in range(6))
    assert all(len(a[f"rf2-{p}"][0]) == 2 for p in range(4))
    assert all(sorted(r) == sorted(isr) and set(r) <= {1, 2, 3} for r, isr in a.values())
    assert [n["id"] for n in yaml.safe_load(cluster.spec_file.read_text())["nodes"]] == [1, 2, 3]
    assert acked <= read_all(cluster)
