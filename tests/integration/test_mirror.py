"""kctl mirror (issue 27): MirrorMaker 2 from one real cluster into another, read back by this test's own reader.

Two one-node clusters (a three-node source and target would be twelve JVMs beside MirrorMaker on two cores;
replication between clusters does not depend on either's replication factor). The source has `orders` (3
partitions, its own retention.ms) and `excluded-a`; the target's kctl.yaml mirrors `orders|new-.*|excluded-.*`
minus `excluded-.*` from it, under the alias `primary`, with short intervals so that a test sees new topics
and checkpoints within seconds. Every claim about records is checked by reading the topics back with a fresh
consumer (kctl.drill.check.read_topic), never with kctl mirror's own figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kctl.drill.check import read_topic
from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration

ALIAS = "primary"
ORDERS = 300


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)],
                          capture_output=True, text=True, timeout=timeout, cwd=cluster.workdir)


def produce(cluster: KafkaCluster, topic: str, values: range) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    failed: list[Any] = []
    for v in values:
        p.produce(topic, value=str(v).encode(), on_delivery=lambda e, m: failed.append(e) if e else None)
        p.poll(0)
    assert p.flush(60) == 0 and not failed, failed


def values_in(cluster: KafkaCluster, topic: str) -> list[int]:
    """Every value of ``topic`` (duplicates kept), read by a fresh consumer to the end offsets."""
    return [seq for records in read_topic(cluster.spec, topic, timeout=60).values() for _, seq in records]


def eventually(what: str, probe: Callable[[], Any], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:  # bounded: timeout
        try:
            last = probe()
        except Exception as exc:  # noqa: BLE001 - not yet: the last error is reported on timeout
            last = exc
        else:
            if last:
                return last
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def topics(cluster: KafkaCluster) -> dict[str, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10)
    return {t: len(m.partitions) for t, m in md.topics.items()}


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[KafkaCluster, KafkaCluster]]:
    with KafkaCluster(nodes=1) as source:
        source.create_topic("orders", partitions=3, replication_factor=1, config={"retention.ms": "7200000"})
        source.create_topic("excluded-a", partitions=1, replication_factor=1)
        produce(source, "orders", range(ORDERS))
        produce(source, "excluded-a", range(10))
        mirror = {"name": ALIAS, "source": {"spec": str(source.spec_file)},
                  "topics": "orders|new-.*|excluded-.*|kctl-drill-.*", "topics_exclude": "excluded-.*",
                  "groups": "billing.*|kctl-drill-.*", "refresh_topics_seconds": 3, "checkpoint_seconds": 2}
        with KafkaCluster(nodes=1, mirrors=[mirror]) as target:
            p = kctl(target, "mirror", "up", "--timeout", "180")
            assert p.returncode == 0, p.stdout + p.stderr
            yield source, target


def test_topics_their_configs_and_new_ones_are_replicated_and_excluded_ones_are_not(pair: Any) -> None:
    source, target = pair
    remote = f"{ALIAS}.orders"
    eventually("orders on the target", lambda: sorted(values_in(target, remote)) == list(range(ORDERS)))
    assert topics(target)[remote] == 3
    from confluent_kafka.admin import AdminClient, ConfigResource

    a = AdminClient({"bootstrap.servers": target.bootstrap_servers})
    res = ConfigResource(ConfigResource.Type.TOPIC, remote)
    conf = a.describe_configs([res])[res].result(30)
    assert conf["retention.ms"].value == "7200000"
    # a topic made after the mirror started, matching the regex: picked up without a restart
    source.create_topic("new-1", partitions=2, replication_factor=1)
    produce(source, "new-1", range(1000, 1020))
    eventually("new-1 on the target", lambda: sorted(values_in(target, f"{ALIAS}.new-1")) == list(range(1000, 1020)))
    assert f"{ALIAS}.excluded-a" not in topics(target) and "excluded-a" not in topics(target)
    # status and lag agree once it has caught up
    st = eventually("the mirror caught up", lambda: (lambda s: s if s[0]["total_lag"] == 0 else None)(
        json.loads(kctl(target, "mirror", "status", "-o", "json").stdout)))
    assert st[0]["container"] == "running" and st[0]["problems"] == []
    assert st[0]["tasks"]["task MirrorSourceConnector-0"] == "RUNNING"
    assert st[0]["heartbeat_age_seconds"] is not None and st[0]["heartbeat_age_seconds"] < 30
    lag = json.loads(kctl(target, "mirror", "lag", "-o", "json").stdout)
    orders = {(x["source_topic"], x["partition"]): x for x in lag if x["source_topic"] == "orders"}
    assert set(orders) == {("orders", 0), ("orders", 1), ("orders", 2)}
    assert sum(x["replicated"] for x in orders.values()) == ORDERS and all(x["lag"] == 0 for x in orders.values())


def test_up_again_restarts_a_running_mirror_only_when_its_configuration_changed(pair: Any) -> None:
    import yaml

    source, target = pair

    def started() -> str:
        p = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={target.spec.project}"
                            "-mirror"], capture_output=True, text=True, timeout=60)
        ids = p.stdout.split()
        assert len(ids) == 1, p.stdout + p.stderr
        return subprocess.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", ids[0]], capture_output=True,
                              text=True, timeout=60).stdout.strip()

    first = started()
    p = kctl(target, "mirror", "up", "--timeout", "120")
    assert p.returncode == 0 and "restarting" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert started() == first  # nothing changed: the running mirror kept on
    data = yaml.safe_load(target.spec_file.read_text())
    data["mirrors"][0]["checkpoint_seconds"] = 3
    target.spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    p = kctl(target, "mirror", "up", "--timeout", "180")
    assert p.returncode == 0 and "restarting" in p.stdout + p.stderr, p.stdout + p.stderr
    assert started() != first  # MirrorMaker reads its file at start: it was restarted to read the new one
    source.create_topic("new-2", partitions=1, replication_factor=1)  # and it replicates on
    produce(source, "new-2", range(2000, 2010))
    eventually("new-2 after the restart",
               lambda: sorted(values_in(target, f"{ALIAS}.new-2")) == list(range(2000, 2010)))


def test_a_group_fails_over_to_the_target_and_loses_nothing(pair: Any) -> None:
    from confluent_kafka import Consumer

    source, target = pair
    group = "billing-1"
    seen_on_source: list[int] = []
    c = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["orders"])
    deadline = time.monotonic() + 60
    while len(seen_on_source) < 120 and time.monotonic() < deadline:
        for m in c.consume(10, timeout=1.0):
            if m.error() is None:
                seen_on_source.append(int(m.value()))
    c.commit(asynchronous=False)
    assert len(seen_on_source) >= 120
    # MirrorMaker checkpoints the group (every 2 s here); the dry run shows the translation, and that the group
    # still has its member on the source (the consumer is not closed yet)
    plan = eventually("a checkpoint of billing-1", lambda: json.loads(
        kctl(target, "mirror", "failover", group, "--dry-run", "-o", "json").stdout or "null"))
    assert {m["topic"] for m in plan["moves"]} == {f"{ALIAS}.orders"}
    assert plan["source_reachable"] is True and len(plan["source_members"]) == 1, plan
    assert any("1 active member(s) on the source" in r for r in plan["refusals"]), plan
    refused = kctl(target, "mirror", "failover", group, "--yes")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert f"failover of '{group}' refused, nothing was set" in refused.stderr, refused.stderr
    assert "stop the group's consumers on the source first" in refused.stderr
    c.close()  # the group's consumers on the source are gone: now it may fail over
    p = kctl(target, "mirror", "failover", group, "--yes", "-o", "json")
    assert p.returncode == 0, p.stderr
    done = json.loads(p.stdout)
    assert done["applied"] is True and done["refusals"] == [] and done["sync_stopped"] is True, done
    # MirrorMaker no longer syncs the group here: its file excludes it, and the mirror restarted with it
    assert "restarting" in p.stderr, p.stderr
    mm2 = (target.state_dir / "mirror" / ALIAS / "conf" / "mm2.properties").read_text()
    assert next(x for x in mm2.splitlines() if ".groups.exclude" in x).endswith(r"billing\\-1"), mm2
    # the group's consumers resume on the target: with what they read on the source, nothing is missing
    seen_on_target: list[int] = []
    # A partition the group never read on the source has no checkpoint: there, as on the source, the consumer's
    # auto.offset.reset (earliest) applies.
    c = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([f"{ALIAS}.orders"])
    quiet = time.monotonic() + 10
    while time.monotonic() < quiet:
        for m in c.consume(100, timeout=1.0):
            if m.error() is None:
                seen_on_target.append(int(m.value()))
                quiet = time.monotonic() + 5
    c.close()
    assert set(seen_on_source) | set(seen_on_target) == set(range(ORDERS))  # nothing lost
    again = set(seen_on_source) & set(seen_on_target)
    print(f"failover of {group}: {len(seen_on_source)} read on the source, {len(seen_on_target)} on the target"
          f" ({len(set(seen_on_target))} distinct), {len(again)} of the source's read again on the target"
          " (MirrorMaker translates at least once)")
    assert len(again) < len(seen_on_source)  # it resumed past where it started, not from the beginning


@pytest.mark.long  # 3,000 records through two kills of MirrorMaker
def test_mirrormaker_killed_mid_stream_loses_nothing(pair: Any) -> None:
    """kill -9 of the MirrorMaker JVM (its supervisor starts it again), then SIGKILL of the container's main
    process from the host, as the kernel's OOM killer would (Docker's restart policy starts it again): every
    record produced meanwhile reaches the target; replayed ones are counted."""
    import os
    import signal

    import docker

    source, target = pair
    source.create_topic("new-kill", partitions=3, replication_factor=1)
    eventually("new-kill mirrored", lambda: f"{ALIAS}.new-kill" in topics(target), timeout=60)
    produce(source, "new-kill", range(5000, 6000))
    dc = docker.from_env()
    (mm,) = dc.containers.list(filters={"label": [f"io.kctl.mirror={ALIAS}",
                                                  f"io.kctl.cluster.mirror={target.spec.name}"]})
    rc, out = mm.exec_run(["pkill", "-9", "-f", "connect.mirror.MirrorMaker"])
    assert rc == 0, out
    produce(source, "new-kill", range(6000, 7000))
    eventually("the JVM's records", lambda: set(values_in(target, f"{ALIAS}.new-kill")) >= set(range(5000, 7000)),
               timeout=180)
    mm.reload()
    restarts = mm.attrs["RestartCount"]
    os.kill(mm.attrs["State"]["Pid"], signal.SIGKILL)
    produce(source, "new-kill", range(7000, 8000))
    eventually("the container restarted by Docker", lambda: (mm.reload(), mm.attrs["RestartCount"] > restarts
                                                             and mm.status == "running")[1], timeout=60)
    got = eventually("every record after the kills", lambda: (lambda v: v if set(v) >= set(range(5000, 8000))
                                                              else None)(values_in(target, f"{ALIAS}.new-kill")),
                     timeout=240)
    assert set(got) == set(range(5000, 8000))  # nothing lost, nothing that was not produced
    print(f"two kills of MirrorMaker: {len(got) - len(set(got))} record(s) replicated twice (at least once)")
    eventually("status running again", lambda: json.loads(
        kctl(target, "mirror", "status", "-o", "json").stdout)[0]["container"] == "running")


@pytest.mark.long  # make test's short form: the fail-over runbook takes the source down and back
def test_the_source_down_is_reported_the_target_serves_and_replication_resumes(pair: Any) -> None:
    source, target = pair
    source.stop("logger1", "kafka")
    try:
        p = kctl(target, "mirror", "status", "-o", "json")
        assert p.returncode == 1
        st = json.loads(p.stdout)[0]
        assert st["source_reachable"] is False and any("does not answer" in x for x in st["problems"])
        # the replicas keep serving on the target
        assert sorted(set(values_in(target, f"{ALIAS}.orders"))) == list(range(ORDERS))
    finally:
        source.start("logger1", "kafka")
    source.wait_until_healthy(timeout=120)
    produce(source, "orders", range(ORDERS, ORDERS + 50))
    eventually("records produced after the source came back", lambda: set(values_in(target, f"{ALIAS}.orders"))
               >= set(range(ORDERS + 50)), timeout=180)


def test_drill_mirror_failover_loses_nothing_the_replica_holds(pair: Any) -> None:
    source, target = pair
    p = kctl(target, "drill", "run", "mirror-failover", "--duration", "10s", "--rate", "200", "-o", "json",
             timeout=600)
    assert p.stdout.strip(), f"exit {p.returncode}: {p.stderr[-3000:]}"
    v = json.loads(p.stdout)
    assert p.returncode == 0, (v["failures"], v["notes"], p.stderr[-2000:])
    assert v["holds"] and v["lost"] == 0 and v["acked"] > 500
    # an independent look: the replica topic holds what the verdict says it held at the loss, or more (the
    # primary came back and MirrorMaker went on)
    replica = set(values_in(target, f"{ALIAS}.{v['topic']}"))
    held = int(v["notes"][0].split()[0])
    assert len(replica) >= held > 0
    source.wait_for(lambda st: st.health == "healthy", timeout=60, description="the primary healthy again")


def _consume_and_commit(cluster: KafkaCluster, topic: str, group: str, at_least: int) -> list[int]:
    from confluent_kafka import Consumer

    seen: list[int] = []
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while len(seen) < at_least and time.monotonic() < deadline:
        for m in c.consume(10, timeout=1.0):
            if m.error() is None:
                seen.append(int(m.value()))
    c.commit(asynchronous=False)
    c.close()
    assert len(seen) >= at_least
    return seen


def test_runbook_fail_over_to_replica_cluster(pair: Any) -> None:
    from tests.integration import runbook

    source, target = pair
    _consume_and_commit(source, "orders", "billing", 50)
    eventually("a checkpoint of billing", lambda: kctl(target, "mirror", "failover", "billing", "--dry-run")
               .returncode == 0)
    eventually("the mirror caught up", lambda: kctl(target, "mirror", "status").returncode == 0)

    def before(step: runbook.Step) -> None:
        if step.command.startswith("kctl status -f"):
            source.stop("logger1", "kafka")  # the primary is lost

    try:
        runbook.run(runbook.RUNBOOKS / "fail-over-to-replica-cluster.md", target.spec_file,
                    state_dir=target.state_dir, env={"PRIMARY": str(source.spec_file)}, before=before)
    finally:
        source.start("logger1", "kafka")
        source.wait_until_healthy(timeout=120)


def committed_values(cluster: KafkaCluster, topic: str) -> list[int]:
    """Every committed value of ``topic`` (isolation.level=read_committed: aborted transactions left out)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"t-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[int] = []
        todo = {p for p, e in ends.items() if e > 0}
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                if m.error() is None:
                    out.append(int(m.value()))
            for tp in c.position([TopicPartition(topic, p) for p in sorted(todo)]):
                if tp.offset >= ends[tp.partition]:  # the last stable offset: past the end's control record
                    todo.discard(tp.partition)
        return out
    finally:
        c.close()


@pytest.mark.long  # two more clusters: the exactly-once flow
def test_exactly_once_mirror_killed_mid_stream_has_no_duplicates() -> None:
    """exactly_once: true (each batch and its source offsets in one transaction): after a kill -9 of
    MirrorMaker mid-stream, a read_committed reader of the replica finds every record once."""
    import docker

    with KafkaCluster(nodes=1) as source:
        source.create_topic("eos", partitions=3, replication_factor=1)
        mirror = {"name": ALIAS, "source": {"spec": str(source.spec_file)}, "topics": "eos", "exactly_once": True,
                  "rest_port": free_port()}
        with KafkaCluster(nodes=1, mirrors=[mirror]) as target:
            p = kctl(target, "mirror", "up", "--timeout", "180")
            assert p.returncode == 0, p.stdout + p.stderr
            produce(source, "eos", range(0, 3000))
            (mm,) = docker.from_env().containers.list(filters={"label": [
                f"io.kctl.mirror={ALIAS}", f"io.kctl.cluster.mirror={target.spec.name}"]})
            eventually("some records replicated", lambda: len(committed_values(target, f"{ALIAS}.eos")) > 0)
            rc, out = mm.exec_run(["pkill", "-9", "-f", "connect.mirror.MirrorMaker"])
            assert rc == 0, out
            produce(source, "eos", range(3000, 6000))
            got = eventually("every record, committed", lambda: (lambda v: v if set(v) >= set(range(6000))
                                                                  else None)(committed_values(target, f"{ALIAS}.eos")),
                             timeout=240)
            assert sorted(got) == list(range(6000))  # each exactly once


def free_port() -> int:
    from kctl.runtime.ports import free_ports

    return free_ports(1)[0]


@pytest.mark.long  # two more clusters, on Kafka 4 (make test's pair runs 3.9.1 on ZooKeeper)
def test_a_mirror_between_two_kraft_clusters_on_kafka_4() -> None:
    """Both clusters made on KRaft with the newest release kctl's image build makes (contract.ZOOKEEPER_VERSIONS):
    MirrorMaker 2 of that release replicates every record, read back by this test's reader."""
    from kctl import contract

    newest = max(contract.ZOOKEEPER_VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))
    on_4 = {"metadata": "kraft", "versions": {"kafka": newest}}
    with KafkaCluster(nodes=1, **on_4) as source:
        source.create_topic("orders", partitions=3, replication_factor=1)
        produce(source, "orders", range(ORDERS))
        mirror = {"name": ALIAS, "source": {"spec": str(source.spec_file)}, "topics": "orders",
                  "refresh_topics_seconds": 3, "checkpoint_seconds": 2}
        with KafkaCluster(nodes=1, mirrors=[mirror], **on_4) as target:
            p = kctl(target, "mirror", "up", "--timeout", "240")
            assert p.returncode == 0, p.stdout + p.stderr
            eventually("orders on the target", lambda: sorted(values_in(target, f"{ALIAS}.orders"))
                       == list(range(ORDERS)), timeout=120)
            st = json.loads(kctl(target, "mirror", "status", "-o", "json").stdout)
            assert st[0]["container"] == "running" and st[0]["problems"] == [], st
            kctl(target, "mirror", "down")
