"""Share groups (KIP-932) on Kafka 4.3.1 on KRaft, through `kctl group`: listed beside the consumer groups (which
librdkafka's ListGroups leaves them out of), described with each share-partition's start offset and lag, their
start offsets reset (refused while a member is active), deleted. The share consumer is confluent-kafka's; the
lag is checked against the log's end read by a plain consumer, the start offset against the records the share
consumer acknowledged. On one broker: kctl sets the share coordinator's state topic to the cluster's size (Kafka's
default of 3 replicas gives a one-broker cluster's share consumers no partitions at all)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1, metadata="kraft", versions={"kafka": "4.3.1"}) as c:
        yield c


def kctl(cluster: KafkaCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                          text=True, timeout=180)


def ends(cluster: KafkaCluster, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def test_a_share_group_listed_described_reset_and_deleted(cluster: KafkaCluster) -> None:
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

    topic, group = f"sq-{uuid.uuid4().hex[:6]}", f"sg-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    # a new share group starts at the log's end (share.auto.offset.reset=latest): this one from its start
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # kept: a collected one cancels
    admin.incremental_alter_configs([res])[res].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(100):
        producer.produce(topic, value=f"r{i}".encode())
    assert producer.flush(30) == 0
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 90
    while got < 100 and time.monotonic() < deadline:
        got += sum(1 for m in consumer.poll(1.0) if m.error() is None)
    assert got == 100
    consumer.close()  # accepts what the last poll gave (implicit acknowledgement) and leaves the group
    for i in range(50):  # 50 more that no member takes
        producer.produce(topic, value=f"s{i}".encode())
    assert producer.flush(30) == 0

    d = json.loads(kctl(cluster, "group", "describe", group, "-o", "json").stdout)
    assert d["type"] == "share" and d["state"] == "EMPTY" and d["members"] == [], d
    [p] = d["partitions"]
    end = ends(cluster, topic, 1)[0]
    # the start offset is where the share coordinator last persisted the group's acknowledgements (librdkafka's
    # share consumer is a preview: what it acknowledged is not always there yet); the lag runs from it to the end
    assert end == 150 and 0 <= p["start_offset"] <= 100, d
    assert p["lag"] == end - p["start_offset"] == d["total_lag"], d
    listed = json.loads(kctl(cluster, "group", "list", "-o", "json").stdout)
    assert {"group": group, "state": "EMPTY", "type": "share", "simple": False} in listed, listed

    # an active member: described with its partition; a reset is refused
    member = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                            "share.acknowledgement.mode": "explicit"})
    member.subscribe([topic])
    until = time.monotonic() + 60
    while not kctl_members(cluster, group) and time.monotonic() < until:
        for m in member.poll(1.0):
            if m.error() is None:
                member.acknowledge(m, AcknowledgeType.RELEASE)
        member.commit_sync()
    d = json.loads(kctl(cluster, "group", "describe", group, "-o", "json").stdout)
    assert d["state"] == "STABLE" and [m["assignment"] for m in d["members"]] == [[f"{topic}-0"]], d
    refused = kctl(cluster, "group", "reset-offsets", group, "-t", topic, "--to-earliest", "--execute")
    assert refused.returncode == 1 and "has active members" in refused.stderr and "Traceback" not in refused.stderr
    member.close()
    gone = time.monotonic() + 60
    while kctl_members(cluster, group) and time.monotonic() < gone:
        time.sleep(1)
    dry = json.loads(kctl(cluster, "group", "reset-offsets", group, "-t", topic, "--to-earliest", "-o",
                          "json").stdout)
    assert dry["executed"] is False and dry["moves"] == [{"topic": topic, "partition": 0, "target": 0}]
    before = json.loads(kctl(cluster, "group", "describe", group, "-o", "json").stdout)["partitions"][0]
    assert before["start_offset"] == p["start_offset"]  # a dry run changes nothing
    refused = kctl(cluster, "group", "reset-offsets", group, "-t", topic, "--to-offset", "10", "--execute")
    assert refused.returncode == 2 and "not to an offset" in refused.stderr and "--to-datetime" in refused.stderr
    done = kctl(cluster, "group", "reset-offsets", group, "-t", topic, "--to-latest", "--execute")
    assert done.returncode == 0, done.stderr
    after = json.loads(kctl(cluster, "group", "describe", group, "-o", "json").stdout)
    assert after["state"] == "EMPTY" and after["partitions"][0]["start_offset"] == 150
    assert after["partitions"][0]["lag"] == 0

    assert kctl(cluster, "group", "delete", group).returncode == 0
    assert group not in {g["group"] for g in json.loads(kctl(cluster, "group", "list", "-o", "json").stdout)}
    missing = kctl(cluster, "group", "describe", group)
    assert missing.returncode != 0 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def kctl_members(cluster: KafkaCluster, group: str) -> int:
    """The share group's members with a partition, as `kctl group describe` says (0 while it has none)."""
    p = kctl(cluster, "group", "describe", group, "-o", "json")
    if p.returncode != 0:
        return 0
    return sum(1 for m in json.loads(p.stdout)["members"] if m["assignment"])


def test_a_share_group_judged_by_kctl_lag_the_monitor_and_the_console_alike(cluster: KafkaCluster) -> None:
    """A share group left with unacknowledged records and no member: STOP, with Kafka's lag, by `kctl lag` (a fresh
    sampling), by the monitor's evaluation (its round, its API's answer) and by the console (the monitor's store);
    then a member takes the rest: OK everywhere. The lag is checked against `kctl group describe` (another run of
    Kafka's tool) and the log end read by a plain consumer."""
    import threading

    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from kctl.console import ops
    from kctl.monitor import api
    from kctl.monitor import metrics as mx
    from kctl.monitor.service import Monitor

    topic, group = f"lq-{uuid.uuid4().hex[:6]}", f"lg-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.incremental_alter_configs([res])[res].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(40):
        producer.produce(topic, value=f"r{i}".encode())
    assert producer.flush(30) == 0
    first = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    first.subscribe([topic])
    got, deadline = 0, time.monotonic() + 90
    while got < 40 and time.monotonic() < deadline:
        got += sum(1 for m in first.poll(1.0) if m.error() is None)
    first.close()
    for i in range(60):  # records no member takes
        producer.produce(topic, value=f"s{i}".encode())
    assert producer.flush(30) == 0

    d = json.loads(kctl(cluster, "group", "describe", group, "-o", "json").stdout)
    [p] = d["partitions"]
    assert d["members"] == [] and p["lag"] >= 60 and p["start_offset"] + p["lag"] <= ends(cluster, topic, 1)[0], d
    lag = kctl(cluster, "lag", group, "--samples", "3", "--interval", "1", "-o", "json")
    assert lag.returncode == 1, lag.stderr
    doc = json.loads(lag.stdout)
    assert (doc["type"], doc["state"], doc["status"], doc["total_lag"]) == ("share", "EMPTY", "STOP", p["lag"]), doc
    assert doc["partitions"][0]["offset"] == p["start_offset"]
    table = kctl(cluster, "lag", "--samples", "2", "--interval", "1")  # every group: this one among them, typed
    assert any(group in ln and "share" in ln and "STOP" in ln for ln in table.stdout.splitlines()), table.stdout

    mon = Monitor(cluster.spec, cluster.state_dir, interval_s=1, window=5, log=lambda line: None)
    try:
        for _ in range(2):
            mon.round()
            time.sleep(1)
        mon.round()
        docs, _, _ = mon.snapshot()
        assert (docs[group]["status"], docs[group]["total_lag"], docs[group]["type"]) == ("STOP", p["lag"], "share")
        assert api.burrow_status(cluster.spec.name, docs[group], every_partition=True)["worst_status"] == "STOP"
        # On KRaft the monitor asks no ZooKeeper (no srvr, no exporter) and judges the quorum from the controllers'
        # files, as `kctl status` does: a healthy cluster opens no alert of either. A KRaft broker exports no
        # ActiveControllerCount (its controller's JVM has it, and no exporter): the brokers cannot say it here.
        assert cluster.spec.on_kraft
        opened = sorted(a.key for a in mon.tracker.open_alerts())
        assert not [k for k in opened if k[0] in ("zookeeper", "exporter", "controller")], opened
        views, leader = mon.kraft_quorum() or ({}, None)
        assert (leader, sorted(views)) == (3001, ["logger1"]), views
        report = mx.report(mon.last_scrapes, mon.last_scrapes)
        assert [b["active_controller"] for b in report["brokers"]] == [None], report["brokers"]
        assert [e.service for e in mon.endpoints] == ["kafka"] and report["errors"] == [], report["errors"]
        [row] = [r for r in ops.group_list(cluster.spec) if r["group"] == group]
        assert (row["type"], row["status"], row["total_lag"]) == ("share", "STOP", p["lag"]), row

        # A member takes the rest and stays: Kafka's lag goes to 0, and every reader says OK.
        stop = threading.Event()

        def member() -> None:
            c = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
            c.subscribe([topic])
            while not stop.is_set():
                c.poll(0.5)
            c.close()

        t = threading.Thread(target=member, daemon=True)
        t.start()
        try:
            until = time.monotonic() + 90
            while time.monotonic() < until:
                now = json.loads(kctl(cluster, "group", "describe", group, "-o", "json").stdout)
                if now["total_lag"] == 0 and now["state"] == "STABLE":
                    break
                time.sleep(1)
            assert now["total_lag"] == 0 and now["state"] == "STABLE", now
            ok = kctl(cluster, "lag", group, "--samples", "2", "--interval", "1", "-o", "json")
            doc = json.loads(ok.stdout)
            assert ok.returncode == 0 and (doc["status"], doc["total_lag"], doc["state"]) == ("OK", 0, "STABLE"), doc
            mon.round()
            docs, _, _ = mon.snapshot()
            assert (docs[group]["status"], docs[group]["total_lag"]) == ("OK", 0), docs[group]
            [row] = [r for r in ops.group_list(cluster.spec) if r["group"] == group]
            assert (row["status"], row["state"]) == ("OK", "STABLE"), row
        finally:
            stop.set()
            t.join(30)
    finally:
        mon.store.close()


@pytest.mark.long
def test_a_streams_group_listed_described_and_judged(cluster: KafkaCluster, tmp_path: object) -> None:
    """A real streams group: Kafka's WordCountDemo (kafka-streams-examples 4.3.1, resolved by Maven as kctl's
    image build resolves Kafka's jars, run on this machine's JVM) with group.protocol=streams against the cluster's
    127.0.0.1 listener. `kctl group list` types it streams, `kctl group describe` gives its state, its member's
    four tasks and each partition's committed offset and lag (checked against the log end a plain consumer reads),
    `kctl lag` judges it OK; stopped, it is EMPTY with no member."""
    import shutil
    import signal
    from pathlib import Path

    from confluent_kafka import Producer

    from kctl.runtime.image import maven

    java = shutil.which("java")
    if java is None or shutil.which("mvn") is None:
        pytest.fail("no java or mvn on this machine: `make setup` installs them (kctl's image build needs Maven)")
    work = Path(str(tmp_path))
    libs = maven.copy_dependencies([maven.Artifact.parse("org.apache.kafka:kafka-streams-examples:4.3.1")],
                                   work / "libs", what="Kafka Streams' examples 4.3.1", hint="Maven Central")
    assert any(j.name == "kafka-streams-examples-4.3.1.jar" for j in libs)
    topic = "streams-plaintext-input"  # WordCountDemo's own topics
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    cluster.create_topic("streams-wordcount-output", partitions=1, replication_factor=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(200):
        producer.produce(topic, value=f"hello world {i % 7}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    app = f"wc-{uuid.uuid4().hex[:6]}"
    props = work / "wc.properties"
    props.write_text(f"bootstrap.servers={cluster.bootstrap_servers}\napplication.id={app}\ngroup.protocol=streams\n"
                     f"state.dir={work / 'state'}\ncommit.interval.ms=1000\n")
    demo = subprocess.Popen([java, "-cp", f"{work / 'libs'}/*", "org.apache.kafka.streams.examples.wordcount"
                             ".WordCountDemo", str(props)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until = time.monotonic() + 120
        d: dict[str, object] = {}
        while time.monotonic() < until:
            p = kctl(cluster, "group", "describe", app, "-o", "json")
            d = json.loads(p.stdout) if p.returncode == 0 else {}
            inputs = [x for x in d.get("partitions", []) if x["topic"] == topic]  # type: ignore[attr-defined]
            if d.get("state") == "STABLE" and len(inputs) == 2 and all(x["lag"] == 0 for x in inputs):
                break
            time.sleep(2)
        assert d.get("type") == "streams" and d.get("state") == "STABLE", d
        end = ends(cluster, topic, 2)
        assert {x["partition"]: (x["committed"], x["log_end"]) for x in inputs} == {p: (end[p], end[p]) for p in end}
        [member] = d["members"]  # type: ignore[misc]
        assert member["active"] == ["0_0", "0_1", "1_0", "1_1"], member  # two subtopologies, two partitions each
        listed = json.loads(kctl(cluster, "group", "list", "-o", "json").stdout)
        assert {"group": app, "state": "STABLE", "type": "streams", "simple": False} in listed, listed
        lag = json.loads(kctl(cluster, "lag", app, "--samples", "2", "--interval", "1", "-o", "json").stdout)
        assert (lag["type"], lag["status"]) == ("streams", "OK") and lag["total_lag"] >= 0, lag
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(60)
    gone = time.monotonic() + 90
    while time.monotonic() < gone:
        d = json.loads(kctl(cluster, "group", "describe", app, "-o", "json").stdout)
        if d["state"] == "EMPTY":
            break
        time.sleep(2)
    assert d["state"] == "EMPTY" and d["members"] == [], d
    # kctl does not reset or delete a streams group yet: one message naming Kafka's tool, the group untouched
    for verb in (["reset-offsets", app, "--topic", topic, "--to-earliest", "--execute"], ["delete", app]):
        p = kctl(cluster, "group", *verb)
        assert p.returncode != 0 and "is a streams group" in p.stderr and "kafka-streams-groups.sh" in p.stderr, \
            p.stderr
        assert "Traceback" not in p.stderr
    d = json.loads(kctl(cluster, "group", "describe", app, "-o", "json").stdout)
    assert {x["partition"]: x["committed"] for x in d["partitions"] if x["topic"] == topic} == end, d


def test_a_consumer_group_of_kip_848_is_described_with_its_epochs(cluster: KafkaCluster) -> None:
    """A consumer group of KIP-848's protocol (group.protocol=consumer, two members): `kctl group describe -o json`
    types it consumer and gives the group epoch, the target assignment's epoch and each member's epoch (Kafka's
    tool in a node) beside its assignment (the AdminClient); with both members reconciled, their epochs are the
    group's and every partition is owned once. The epochs are checked against a second, direct run of Kafka's
    tool (not kctl's parser)."""
    from confluent_kafka import Consumer, Producer

    topic, group = f"cq-{uuid.uuid4().hex[:6]}", f"cg-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=4, replication_factor=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(40):
        producer.produce(topic, value=str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0
    members = [Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"}) for _ in range(2)]
    try:
        for c in members:
            c.subscribe([topic])
        d: dict[str, object] = {}
        until = time.monotonic() + 90
        while time.monotonic() < until:
            for c in members:
                c.poll(0.5)
            d = json.loads(kctl(cluster, "group", "describe", group, "-o", "json").stdout or "{}")
            ms = d.get("members") or []
            if (len(ms) == 2 and all(m["assignment"] for m in ms)  # type: ignore[index,union-attr]
                    and all(m["member_epoch"] == d["group_epoch"] for m in ms)):  # type: ignore[index,union-attr]
                break
        assert d.get("type") == "consumer" and d.get("state") == "STABLE", d
        ms = d["members"]  # type: ignore[assignment]
        assert isinstance(d["group_epoch"], int) and d["group_epoch"] >= 2, d  # two members joined: two bumps
        assert d["target_assignment_epoch"] == d["group_epoch"], d
        assert all(m["member_epoch"] == m["target_epoch"] == d["group_epoch"] for m in ms), ms  # type: ignore[index]
        owned = sorted(p for m in ms for p in m["assignment"])  # type: ignore[index,union-attr]
        assert owned == [f"{topic}-{p}" for p in range(4)], ms
        assert all(sorted(m["target_assignment"]) == sorted(m["assignment"]) for m in ms), ms  # type: ignore[index]
        raw = cluster.exec("logger1", ["sh", "-c", "KAFKA_OPTS= KAFKA_HEAP_OPTS=-Xmx256m"
                                                   " /opt/kafka/bin/kafka-consumer-groups.sh --bootstrap-server"
                                                   f" logger1:{cluster.spec.kafka.internal_port} --describe --group"
                                                   f" {group} --state --verbose"])[1]
        assert str(d["group_epoch"]) in raw.split(), raw
    finally:
        for c in members:
            c.close()
