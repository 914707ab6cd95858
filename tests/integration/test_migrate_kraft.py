"""The migration to KRaft on a three-node cluster of its own, under an acks=all load (issue #26).

docs/runbooks/migrate-to-kraft.md as written: zookeeper -> controllers -> dual-write -> kraft-brokers ->
rollback to zookeeper, then the same way again and finalize (kraft: ZooKeeper retired).
What must not change is read by other means than kctl's: topic ids and configs and a group's committed offsets
by confluent-kafka's AdminClient, a client quota by Kafka's own kafka-configs.sh in a node, and every
acknowledged record by kcat. Topics made in dual-write (with the cluster's defaults) and with KRaft brokers, and a
config changed then (the controllers write them to ZooKeeper too), are still there after the rollback, and
after finalizing; the finalized cluster is healthy by kctl's status and runs no ZooKeeper, whose data stays. The
runbook's §9 then takes the migrated cluster to Kafka 4.1.1 under the same load (every node's image and jars
read in the node), and nothing read above has changed. Then
(make test-long) `kctl migrate kraft next` killed with -9 in the middle of a step, twice (among the controllers'
start, and in the brokers' roll), resumes and completes, and the rollback from dual-write loses nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kctl.testing.cluster import KafkaCluster
from tests.integration import runbook
from tests.integration.load import Load, kcat_values
from tests.integration.test_change import edit_spec

pytestmark = pytest.mark.integration

LOAD_TOPIC = "kraft-load"


@pytest.fixture(scope="module")
def single() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1) as c:
        yield c


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3) as c:
        yield c


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                          text=True, timeout=timeout)


def snapshot(cluster: KafkaCluster, topics: list[str]) -> dict[str, Any]:
    """Topic ids, partition counts and non-default configs, the group's committed offsets, the client quota."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection
    from confluent_kafka.admin import AdminClient, ConfigResource

    a = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = a.describe_topics(TopicCollection(topics))
    ids = {t: (str(f.result(30).topic_id), len(f.result(30).partitions),
               min(len(p.replicas) for p in f.result(30).partitions)) for t, f in described.items()}
    configs = {}
    for t in topics:
        res = ConfigResource(ConfigResource.Type.TOPIC, t)
        entries = a.describe_configs([res])[res].result(30)
        configs[t] = {k: v.value for k, v in entries.items() if not v.is_default}
    offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing")])["billing"].result(30)
    committed = sorted((tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions)
    code, quota = cluster.exec("logger1", ["kafka-configs.sh", "--bootstrap-server", cluster.internal_bootstrap_servers,
                                           "--describe", "--entity-type", "clients", "--entity-name", "app"])
    assert code == 0, quota
    return {"topics": ids, "configs": configs, "committed": committed,
            "quota": [line for line in quota.splitlines() if "producer_byte_rate" in line]}


def settled(read: Any, timeout: float = 30) -> Any:
    """``read()`` once the brokers' metadata has caught up with a topic just made (bounded: ``timeout``)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return read()
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def seed(cluster: KafkaCluster) -> None:
    """Topics with configs of their own, a group with committed offsets, a client quota."""
    from confluent_kafka import Consumer, Producer

    rf = cluster.spec.kafka.default_replication_factor
    cluster.create_topic("orders", partitions=6, replication_factor=rf, config={"retention.ms": "7200000"})
    cluster.create_topic("audit", partitions=3, replication_factor=rf, config={"cleanup.policy": "compact"})
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=30).topics
    if LOAD_TOPIC not in topics:  # the kill test before the three-node runbook made it
        cluster.create_topic(LOAD_TOPIC, partitions=6, replication_factor=rf)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(600):
        p.produce("orders", key=str(i % 7).encode(), value=str(i).encode())
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "billing", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe(["orders"])
    got = 0
    deadline = time.monotonic() + 60
    while got < 400 and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(100, 1.0) if m.error() is None)
    c.commit(asynchronous=False)
    c.close()
    code, out = cluster.exec("logger1", ["kafka-configs.sh", "--bootstrap-server", cluster.internal_bootstrap_servers,
                                         "--alter", "--entity-type", "clients", "--entity-name", "app",
                                         "--add-config", "producer_byte_rate=1048576"])
    assert code == 0, out


def test_refusals_change_nothing(single: KafkaCluster) -> None:
    p = kctl(single, "migrate", "kraft", "rollback", "--yes")
    assert p.returncode == 2 and "there is no migration to roll back" in p.stderr and "Traceback" not in p.stderr
    assert _record(single) == {}  # no record written: nothing changed


def test_runbook_on_one_node_loses_nothing_and_changes_no_metadata(single: KafkaCluster) -> None:
    """make test's short form: every step and check of the runbook, each roll one broker."""
    runbook_under_load(single)


@pytest.mark.long  # two more phases and a rollback, each killed once (about 150 s): `make test-long`
def test_a_kctl_killed_mid_phase_resumes_and_completes(cluster: KafkaCluster) -> None:
    cluster.create_topic(LOAD_TOPIC, partitions=6, replication_factor=cluster.spec.kafka.default_replication_factor)
    with Load(cluster.bootstrap_servers, LOAD_TOPIC, max_seconds=400) as load:
        start = 0  # the topic is new: everything read back was written by the load
        # 1. killed among the controllers' steps, once they have been told to start
        out = _kill_when(cluster, lambda rec, _o: "start-controllers" in (rec.get("done") or []))
        rec = _record(cluster)
        assert rec["target"] == "controllers" and rec["phase"] == "zookeeper", (rec, out[-2000:])
        p = kctl(cluster, "migrate", "kraft", "next", "--yes")
        assert p.returncode == 0, p.stderr[-3000:]
        assert "resuming the next to controllers" in p.stderr and "done already: read-cluster-id" in p.stderr
        assert _record(cluster)["phase"] == "controllers"
        # 2. killed in the brokers' roll, the second broker just stopped (between its stop and its start)
        out = _kill_when(cluster, lambda _r, o: "[2/3]" in o and "stopping kafka" in o.split("[2/3]", 1)[1])
        rec = _record(cluster)
        assert rec["target"] == "dual-write" and "roll-brokers" not in rec["done"], (rec, out[-2000:])
        p = kctl(cluster, "migrate", "kraft", "next", "--yes")
        assert p.returncode == 0, p.stderr[-3000:]
        assert "resuming the next to dual-write" in p.stderr
        st = json.loads(kctl(cluster, "migrate", "kraft", "status", "-o", "json").stdout)
        assert st["phase"] == "dual-write" and st["under_way"] is None and st["metadata_migrated_by"]
        assert st["quorum"]["voters"] == [3001, 3002, 3003] and st["quorum"]["max_follower_lag"] == 0
        assert json.loads(kctl(cluster, "status", "-o", "json").stdout)["health"] == "healthy"
        # 3. back to ZooKeeper for the modules after this one, the rollback killed once the controllers are
        # stopped (among its brokers' roll): the record says so, and the rerun resumes it from there
        out = _kill_when(cluster, lambda rec, _o: "stop-controllers" in (rec.get("done") or []), action="rollback")
        rec = _record(cluster)
        assert rec["action"] == "rollback" and rec["target"] == "zookeeper", (rec, out[-2000:])
        assert "remove-controllers" not in rec["done"], (rec, out[-2000:])
        p = kctl(cluster, "migrate", "kraft", "status")
        assert "rollback" in p.stdout + p.stderr, p.stdout + p.stderr
        p = kctl(cluster, "migrate", "kraft", "rollback", "--yes")
        assert p.returncode == 0, p.stderr[-3000:]
        assert "resuming the rollback to zookeeper" in p.stderr and "stop-controllers" in p.stderr
        assert _record(cluster)["phase"] == "zookeeper" and _record(cluster).get("target") is None
        assert json.loads(kctl(cluster, "status", "-o", "json").stdout)["health"] == "healthy"
    print(f"\nload: {len(load.acked)} acknowledged, longest stall {load.stall:.1f} s, errors {load.errors[:3]}")
    assert not load.errors
    read = kcat_values(cluster.bootstrap_servers, LOAD_TOPIC)
    assert len(read) > start and sorted(load.acked - set(read)) == []


# `make test-long`: three brokers in each of seven rolls, and the controllers'; after the test above, which
# ends on ZooKeeper
@pytest.mark.long
def test_runbook_on_three_nodes_loses_nothing_and_changes_no_metadata(cluster: KafkaCluster) -> None:
    runbook_under_load(cluster)


def runbook_under_load(cluster: KafkaCluster) -> None:
    seed(cluster)
    before = snapshot(cluster, ["orders", "audit", LOAD_TOPIC])
    made: dict[str, Any] = {}

    (upgrade,) = runbook.blocks((runbook.RUNBOOKS / "migrate-to-kraft.md").read_text(), "yaml")

    def between(step: runbook.Step) -> None:
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

        a = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        phase = _record(cluster).get("phase")
        if step.command == "kctl diff" and step.exit_code == 1 and "kafka4" not in made:
            # finalized, before §9: ZooKeeper retired with its data kept; then the operator's edit to Kafka 4
            retired(cluster)
            edit_spec(cluster, yaml.safe_load(upgrade))
            made["kafka4"] = True
        if step.command.startswith("kctl migrate kraft next") and phase == "dual-write" and "dual-write" not in made:
            # made by the KRaft controller with the cluster's defaults: 3 partitions, 3 replicas (kctl.yaml's)
            a.create_topics([NewTopic("made-in-dual-write")])["made-in-dual-write"].result(30)
            made["dual-write"] = settled(lambda: snapshot(cluster, ["made-in-dual-write"]))["topics"][
                "made-in-dual-write"]
        if step.command.startswith("kctl migrate kraft next") and phase == "zookeeper" and "kraft-brokers" in made \
                and "rolled-back" not in made:
            made["rolled-back"] = True
            rolled_back(cluster, before, made)
        if step.command.startswith("kctl migrate kraft rollback") and phase == "kraft-brokers":
            # with KRaft brokers: a new topic and a changed config, which the rollback must keep
            cluster.create_topic("made-in-kraft-brokers", partitions=2,
                                 replication_factor=cluster.spec.kafka.default_replication_factor)
            res = ConfigResource(ConfigResource.Type.TOPIC, "audit", incremental_configs=[
                ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
            a.incremental_alter_configs([res])[res].result(30)
            made["kraft-brokers"] = settled(lambda: snapshot(cluster, ["made-in-kraft-brokers"]))["topics"][
                "made-in-kraft-brokers"]

    with Load(cluster.bootstrap_servers, LOAD_TOPIC) as load:
        ran = runbook.run(runbook.RUNBOOKS / "migrate-to-kraft.md", cluster.spec_file, state_dir=cluster.state_dir,
                          before=between)
        time.sleep(2)  # the load runs on after the last roll
    assert [r.step.command.split()[3] for r in ran if "migrate kraft" in r.step.command] == [
        "status", "plan", "next", "status", "next", "status", "next", "status", "rollback", "status",
        "next", "next", "next", "status", "finalize", "status", "rollback"]
    assert made.get("rolled-back")
    print(f"\nload: {len(load.acked)} acknowledged, longest stall {load.stall:.1f} s, {len(load.errors)} not"
          f" delivered {load.errors[:3]}")
    # one node: its only broker's restarts fail the records the client held meanwhile (never acknowledged)
    assert (load.failures() if len(cluster.spec.brokers) == 1 else load.errors) == [] and len(load.acked) > 1000
    read = kcat_values(cluster.bootstrap_servers, LOAD_TOPIC)
    assert sorted(load.acked - set(read)) == []  # 0 acknowledged records lost
    # finalized: the metadata as it was, and what was made during the first migration
    unchanged(metadata_now(cluster), before, made)
    assert _record(cluster)["phase"] == "kraft" and made.get("kafka4")
    for host in (n.hostname for n in cluster.spec.nodes):  # §9: every node runs Kafka 4 from its new image
        image = subprocess.run(["docker", "inspect", "-f", "{{.Config.Image}}", f"kctl-{cluster.spec.name}-{host}-1"],
                               capture_output=True, text=True, timeout=60).stdout.strip()
        assert image == "kctl/node:4.1.1"
        code, out = cluster.exec(host, ["sh", "-c", "ls /opt/kafka/libs/ | grep '^kafka_2.13-'"])
        assert "4.1.1" in out, out
    # the level Kafka itself reports, asked by hand in a node with Kafka's own tool
    features = "KAFKA_HEAP_OPTS=-Xmx128m /opt/kafka/bin/kafka-features.sh --bootstrap-server"
    code, out = cluster.exec("logger1", ["sh", "-c", f"{features} {cluster.internal_bootstrap_servers} describe"])
    assert code == 0 and any("metadata.version" in line and "FinalizedVersionLevel: 4.1-IV1" in line
                             for line in out.splitlines()), out
    # and the other features raised with it, one at a time, but kraft.version (the quorum stays static)
    levels = {m.group(1): m.group(2) for m in re.finditer(r"Feature: (\S+)\s.*?FinalizedVersionLevel: (\S+)", out)}
    assert levels.get("group.version") == "1" and levels.get("transaction.version") == "2", out
    assert levels.get("kraft.version", "0") == "0", out
    groups_of_both_types(cluster)


def groups_of_both_types(cluster: KafkaCluster) -> None:
    """group.version 1 raised: a consumer on KIP-848's protocol makes a group of type consumer, whose members
    kctl describes with their target assignment; a classic consumer's group stays classic."""
    import uuid

    from confluent_kafka import Consumer

    made = {}
    for kind in ("consumer", "classic"):
        g = f"g-{kind}-{uuid.uuid4().hex[:6]}"
        extra = {"group.protocol": "consumer"} if kind == "consumer" else {}
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": g, "auto.offset.reset": "earliest",
                      **extra})
        c.subscribe([LOAD_TOPIC])
        got = 0
        for _ in range(60):  # bounded: a minute at most to join and read something
            got += len([m for m in c.consume(100, timeout=1.0) if m.error() is None])
            if got and c.assignment():
                break
        assert got and c.assignment(), kind
        made[kind] = (g, c)
    try:
        for kind, (g, _c) in made.items():
            p = kctl(cluster, "group", "describe", g, "-o", "json")
            assert p.returncode == 0, p.stderr
            d = json.loads(p.stdout)
            assert d["type"] == kind and len(d["members"]) == 1, d
            member = d["members"][0]
            if kind == "consumer":  # the coordinator's target: what the member owns once the group is settled
                assert member["target_assignment"] and sorted(member["target_assignment"]) == sorted(
                    member["assignment"]), member
            else:
                assert member["target_assignment"] is None, member
        listed = {r["group"]: r["type"] for r in json.loads(kctl(cluster, "group", "list", "-o", "json").stdout)}
        assert {listed[g] for g, _c in made.values()} == {"consumer", "classic"}, listed
    finally:
        for _g, c in made.values():
            c.close()


def retired(cluster: KafkaCluster) -> None:
    """Finalized: no ZooKeeper runs (its program runs the image's `retired`), and its data stays."""
    for host in (n.hostname for n in cluster.spec.nodes):
        code, out = cluster.exec(host, ["sh", "-c", "pgrep -f '[Q]uorumPeerMain' || echo no-zookeeper;"
                                                    " pgrep -f '[r]etired zookeeper' >/dev/null && echo retired;"
                                                    f" ls {cluster.spec.zookeeper.data_dir}/version-2"])
        assert "no-zookeeper" in out and "retired" in out and ("snapshot." in out or "log." in out), out


def metadata_now(cluster: KafkaCluster) -> dict[str, Any]:
    return snapshot(cluster, ["orders", "audit", LOAD_TOPIC, "made-in-dual-write", "made-in-kraft-brokers"])


def unchanged(now: dict[str, Any], before: dict[str, Any], made: dict[str, Any]) -> None:
    """The metadata after the first migration's rollback, and after finalizing: as before, and what dual-write and
    the KRaft brokers made (a topic each, audit's retention)."""
    assert now["topics"] == {**before["topics"], "made-in-dual-write": made["dual-write"],
                             "made-in-kraft-brokers": made["kraft-brokers"]}
    assert {t: now["configs"][t] for t in before["configs"]} == {
        **before["configs"], "audit": {**before["configs"]["audit"], "retention.ms": "86400000"}}
    assert now["committed"] == before["committed"] and now["quota"] == before["quota"] != []


def rolled_back(cluster: KafkaCluster, before: dict[str, Any], made: dict[str, Any]) -> None:
    """Back on ZooKeeper after the first rollback: the metadata as it was and what the migration made, and the
    controllers gone (no process, no files, no metadata)."""
    k = cluster.spec.kafka
    assert made["dual-write"][1:] == (k.num_partitions, k.default_replication_factor)
    unchanged(metadata_now(cluster), before, made)
    for host in (n.hostname for n in cluster.spec.nodes):
        assert not (cluster.state_dir / host / "conf" / "controller.properties").exists()
        code, out = cluster.exec(host, ["sh", "-c", "pgrep -f '[k]afka.Kafka /etc/kctl/controller' || echo none;"
                                                    " ls /var/opt/kctl/controller 2>&1 || true"])
        assert "none" in out and "No such file" in out, out


def _record(cluster: KafkaCluster) -> dict[str, Any]:
    try:
        return json.loads((cluster.state_dir / "kraft.json").read_text())
    except (OSError, ValueError):
        return {}


def _kill_when(cluster: KafkaCluster, ready: Any, timeout: float = 300, action: str = "next") -> str:
    """Start `kctl migrate kraft ACTION --yes`, SIGKILL it once ``ready(record, output so far)`` holds."""
    log = cluster.workdir / f"migrate-{time.monotonic_ns()}.log"
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-m", "kctl", "migrate", "kraft", action, "--yes",
                              "-f", str(cluster.spec_file)], stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and p.poll() is None:  # bounded: timeout
                if ready(_record(cluster), log.read_text()):
                    os.killpg(p.pid, signal.SIGKILL)
                    break
                time.sleep(0.2)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    return log.read_text()
