"""kctl drill on a cluster of its own: short drills (a few seconds of load, one fault), each healing itself.

The verdict is cross-checked by this test's own reader, and the checker must catch loss that is planted
behind the producer's back (delete_records): lost > 0 and exit 1. kctl's short ZooKeeper session (4 s)
keeps the kill scenarios' "left /brokers/ids" gate short.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kctl.testing.cluster import KafkaCluster
from kctl.testing.plugin import restore
from tests.integration.load import read_values

pytestmark = pytest.mark.integration

SHORT = ["--duration", "6s", "--rate", "200", "--bounces", "1", "--hold", "4s", "--timeout", "120"]


@pytest.fixture(scope="module")
def drill_cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3) as c:
        yield c


@pytest.fixture()
def cluster(drill_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    yield drill_cluster
    restore(drill_cluster)


def assert_healed(cluster: KafkaCluster) -> None:
    """A drill removes its own faults: nothing paused, stopped, frozen, cut off or slowed down is left."""
    assert cluster.faults.restore() == []


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)],
                          capture_output=True, text=True, timeout=timeout)


def drill(cluster: KafkaCluster, *args: str) -> tuple[int, dict[str, Any], str]:
    p = kctl(cluster, "drill", "run", *args, "-o", "json")
    try:
        return p.returncode, json.loads(p.stdout), p.stderr
    except json.JSONDecodeError:
        raise AssertionError(f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}") from None


def test_leader_kill_loses_nothing_and_the_verdict_agrees_with_an_independent_read(cluster: KafkaCluster) -> None:
    code, v, err = drill(cluster, "leader-kill", *SHORT, "--keep-topic")
    assert code == 0, (v["failures"], err)
    assert v["scenario"] == "leader-kill" and v["holds"] is True
    assert v["acked"] > 500 and v["lost"] == 0 and v["duplicates"] == 0 and v["reordered"] == 0
    assert v["recovery_seconds"] is not None and v["recovery_seconds"] > 0
    assert v["leader_changes"] >= 1  # partition 0's leader went away: another one took over
    assert any("SIGKILL broker" in e["event"] for e in v["events"])
    assert len(v["timeline"]) >= 6 and sum(r["acked"] for r in v["timeline"]) == v["acked"]
    assert_healed(cluster)
    values = read_values(cluster.bootstrap_servers, v["topic"])  # this test's own reader, not the drill's
    assert len(values) == v["read"] and len(set(values)) == len(values)  # no duplicates here either
    # Nothing lost: every value read is either acknowledged or reported as unacknowledged-but-present.
    assert len(set(values)) == v["acked"] + v["unacked_present"]
    assert set(values) <= set(range(v["produced"]))
    from kctl.drill.run import delete_topic

    delete_topic(cluster.spec, v["topic"])


def test_planted_loss_is_caught(cluster: KafkaCluster) -> None:
    """Records deleted behind the producer's back (delete_records): the checker reports them lost, exit 1."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"drill-planted-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    deleted: list[int] = []

    def plant() -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "planter"})
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
                except KafkaException:  # the new topic's metadata not there yet
                    time.sleep(0.2)
                    continue
                if high >= 50:
                    res = admin.delete_records([TopicPartition(topic, 0, high)])
                    next(iter(res.values())).result(30)
                    deleted.append(high)
                    return
                time.sleep(0.2)
        finally:
            c.close()

    t = threading.Thread(target=plant, daemon=True)
    t.start()
    code, v, err = drill(cluster, "baseline", "--topic", topic, "--duration", "8s", "--rate", "200",
                         "--bounces", "1", "--hold", "1s")
    t.join(60)
    assert deleted, "the planter never saw 50 records in partition 0"
    assert code == 1, err
    assert v["holds"] is False and v["lost"] >= deleted[0] - 5  # the deleted prefix, give or take in flight
    assert any("not in the topic" in f for f in v["failures"])
    assert_healed(cluster)
    admin.delete_topics([topic])


def test_refused_before_anything_is_injected(cluster: KafkaCluster) -> None:
    # An RF 1 topic for a kill scenario: exit 2, the topic untouched, no fault.
    topic = f"drill-rf1-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    p = kctl(cluster, "drill", "run", "leader-kill", "--topic", topic)
    assert p.returncode == 2 and "replication factor 1" in p.stderr and "nothing was injected" in p.stderr
    p = kctl(cluster, "drill", "run", "leader-kill", "--duration", "0")
    assert p.returncode == 2 and "--duration 0 is not positive" in p.stderr
    p = kctl(cluster, "drill", "run", "no-such-drill")
    assert p.returncode == 2 and "unknown scenario" in p.stderr and "Traceback" not in p.stderr
    # An unhealthy cluster (one broker down): refused, and the broker stays as it was (not restarted by it).
    cluster.kill("logger3")
    p = kctl(cluster, "drill", "run", "broker-pause", *SHORT)
    assert p.returncode == 2 and "not healthy" in p.stderr, p.stderr
    assert "kafka" in cluster.status().nodes[2].processes and cluster.status().nodes[2].processes["kafka"] == "STOPPED"


@pytest.mark.parametrize("scenario", ["leader-term", "controller-kill", "zk-leader-kill", "zk-quorum-loss",
                                      "broker-pause", "broker-partition", "slow-network"])
def test_short_drill(cluster: KafkaCluster, scenario: str) -> None:
    code, v, err = drill(cluster, scenario, *SHORT)
    assert code == 0, (v["failures"], v["notes"], v["events"], err)
    assert v["lost"] == 0 and v["duplicates"] == 0 and v["reordered"] == 0 and v["acked"] > 300
    assert len(v["faults"]) == 1 and v["faults"][0]["end"] is not None  # injected, then healed
    assert v["recovery_seconds"] is not None
    if scenario == "zk-leader-kill":
        assert v["zk_leader_changes"] >= 1
    if scenario in ("leader-kill", "leader-term", "controller-kill"):
        # the killed broker's role taken over (its session expired: out of /brokers/ids) before it came back
        [failover] = v["failover_seconds"]
        assert 0 < failover <= v["faults"][0]["end"] - v["faults"][0]["start"], v["events"]
        assert any(e["event"].startswith("failover: broker") for e in v["events"])
    else:
        assert v["failover_seconds"] == []
    assert_healed(cluster)
