"""The migration to KRaft of a secured three-node cluster (SASL_SSL, SCRAM, ACLs, znode ACLs), under an acks=all
load over SASL_SSL (issue #26, "in the long suite, the secured profile's SCRAM users and ACLs").

zookeeper -> controllers -> dual-write -> rollback to zookeeper (the znodes the KRaft controller wrote with the
brokers' ACLs deleted again) -> controllers -> dual-write -> kraft-brokers -> finalize -> Kafka 4.1.1 by `kctl
apply` (the runbook's §9: metadata.version raised with the admin's login). What must not change is
read by other means than kctl's: the SCRAM users and every ACL by confluent-kafka's AdminClient, topic ids and a
group's committed offsets likewise, and every acknowledged record by kcat (the admin's login in a private file) up
to finalizing, then by a consumer of the test's own (Debian's kcat cannot log in to Kafka 4 with SCRAM).
The ACLs still decide, on the StandardAuthorizer of the KRaft brokers: a user made before the migration reads the
topic an ACL allows it with its old password, and is refused the topic none allows. The controllers' listener
carries SASL_SSL with SASL/PLAIN, and no rendered file nor container environment names a password.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kctl.testing.cluster import KafkaCluster
from tests.integration.load import Load, kcat_values, read_values
from tests.integration.test_change import edit_spec

# long: about 8 minutes of three-node rolls; make test migrates a plain cluster (test_migrate_kraft.py) and the
# secured profile's controllers' files are unit-tested (tests/unit/test_kraft_phases.py).
pytestmark = [pytest.mark.integration, pytest.mark.long]

LOAD_TOPIC = "kraft-load"
APP = "app"


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3, security=True) as c:
        yield c


def kctl(cluster: KafkaCluster, *args: str, stdin: str | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                       text=True, timeout=timeout, input=stdin, cwd=cluster.workdir,
                       env={**os.environ, "COLUMNS": "200"})
    assert "Traceback" not in p.stderr, p.stderr
    return p


def users_and_acls(cluster: KafkaCluster) -> dict[str, Any]:
    """The SCRAM users (mechanism, iterations) and every ACL, as confluent-kafka's AdminClient reads them."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    a = AdminClient(cluster.client_config())
    deadline = time.monotonic() + 60
    while True:
        try:
            scram = a.describe_user_scram_credentials().result(30)  # every user: one future of a dict
            acls = a.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                    AclOperation.ANY, AclPermissionType.ANY)).result(30)
            break
        except KafkaException:  # a broker mid-restart
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    return {"users": {u: sorted((str(i.mechanism), i.iterations) for i in d.scram_credential_infos)
                      for u, d in scram.items()},
            "acls": sorted((str(b.restype), b.name, str(b.resource_pattern_type), b.principal, b.host,
                            str(b.operation), str(b.permission_type)) for b in acls)}


def topics_and_offsets(cluster: KafkaCluster) -> dict[str, Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection
    from confluent_kafka.admin import AdminClient

    a = AdminClient(cluster.client_config())
    described = a.describe_topics(TopicCollection(["orders", "audit", LOAD_TOPIC]))
    ids = {t: (str(f.result(30).topic_id), len(f.result(30).partitions)) for t, f in described.items()}
    offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing")])["billing"].result(30)
    return {"topics": ids, "committed": sorted((tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions)}


def app_reads(cluster: KafkaCluster, topic: str) -> tuple[int, str]:
    """(records ``app`` read from ``topic``'s start, the error it met): its own login, a group of its own."""
    from confluent_kafka import Consumer

    c = Consumer({**cluster.client_config(APP), "group.id": f"app-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got, error = 0, ""
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and got < 600 and not error:  # bounded: 30 s
            for m in c.consume(100, 1.0):
                if m.error() is None:
                    got += 1
                elif "AUTHORIZATION" in m.error().name() or m.error().fatal():
                    error = m.error().name()
    finally:
        c.close()
    return got, error


def read_all(cluster: KafkaCluster, topic: str) -> list[int]:
    """Every value of ``topic`` by a consumer of the test's own, the admin's login."""
    return read_values(cluster.client_config(), topic)


def seed(cluster: KafkaCluster) -> None:
    from confluent_kafka import Consumer, Producer

    cluster.create_topic("orders", partitions=3, replication_factor=3, config={"retention.ms": "7200000"})
    cluster.create_topic("audit", partitions=1, replication_factor=3)
    cluster.create_topic(LOAD_TOPIC, partitions=3, replication_factor=3)
    p = Producer({**cluster.client_config(), "acks": "all"})
    for i in range(600):
        p.produce("orders", value=str(i).encode())
        p.produce("audit", value=str(i).encode())
    assert p.flush(60) == 0
    c = Consumer({**cluster.client_config(), "group.id": "billing", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe(["orders"])
    got, deadline = 0, time.monotonic() + 60
    while got < 400 and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(100, 1.0) if m.error() is None)
    c.commit(asynchronous=False)
    c.close()
    assert kctl(cluster, "user", "create", APP).returncode == 0
    for args in (["--operation", "read", "--topic", "orders"], ["--operation", "describe", "--topic", "orders"],
                 ["--operation", "read", "--group", "app-", "--prefixed"]):
        p = kctl(cluster, "acl", "add", "--allow", f"User:{APP}", *args)
        assert p.returncode == 0, p.stderr


def test_a_secured_cluster_migrates_with_its_users_and_acls(cluster: KafkaCluster) -> None:
    seed(cluster)
    before = {**users_and_acls(cluster), **topics_and_offsets(cluster)}
    assert APP in before["users"] and len(before["acls"]) == 3
    assert app_reads(cluster, "orders") == (600, "")
    assert app_reads(cluster, "audit")[1] == "TOPIC_AUTHORIZATION_FAILED"
    stalls = []
    with Load(cluster.client_config(), LOAD_TOPIC, max_records=400_000, max_seconds=1500) as load:  # all steps
        for action, phase in (("next", "controllers"), ("next", "dual-write"), ("rollback", "zookeeper"),
                              ("next", "controllers"), ("next", "dual-write"), ("next", "kraft-brokers"),
                              ("finalize", "kraft")):
            stall_from = load.stall
            load.stall = 0.0
            t = time.monotonic()
            p = kctl(cluster, "migrate", "kraft", action, "--yes")
            assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
            stalls.append(f"{action} -> {phase} {time.monotonic() - t:.1f} s (stall {load.stall:.1f} s)")
            load.stall = max(load.stall, stall_from)
            status = json.loads(kctl(cluster, "migrate", "kraft", "status", "-o", "json").stdout)
            assert status["phase"] == phase, status
            if phase == "zookeeper":  # rolled back: what the migration made is gone, the rest as it was
                print(f"\nthe rollback from dual-write:\n{p.stdout}{p.stderr}")
                assert {**users_and_acls(cluster), **topics_and_offsets(cluster)} == before
        upto = set(load.acked)  # kcat, on Kafka 3.9 still: every record acknowledged until now
        assert sorted(upto - set(kcat_values(cluster.client_config(), LOAD_TOPIC))) == []
        # then Kafka 4 (the runbook's §9): its features tool and its roll log in as the admin
        edit_spec(cluster, {"versions": {"kafka": "4.1.1"}})
        load.stall, t = 0.0, time.monotonic()
        p = kctl(cluster, "apply", "--yes")
        assert p.returncode == 0 and "metadata.version: 3.9-IV0 -> 4.1-IV1" in p.stderr, p.stdout + p.stderr[-3000:]
        stalls.append(f"Kafka 4.1.1 {time.monotonic() - t:.1f} s (stall {load.stall:.1f} s)")
        time.sleep(2)  # the load runs on after the last roll
    print(f"\nsecured migration: {'; '.join(stalls)}; {len(load.acked)} acknowledged,"
          f" {len(load.errors)} not delivered {load.errors[:3]}")
    assert load.errors == [] and len(load.acked) > 1000
    # 0 acknowledged records lost, read by a reader of the test's own (Debian's kcat cannot log in to Kafka 4 with
    # SCRAM: docs/security.md; it read everything acknowledged up to finalizing, above)
    assert sorted(load.acked - set(read_all(cluster, LOAD_TOPIC))) == []
    assert {**users_and_acls(cluster), **topics_and_offsets(cluster)} == before
    # the ACLs still decide, now on KRaft: app's old password, its topic and not the other
    assert app_reads(cluster, "orders") == (600, "")
    assert app_reads(cluster, "audit")[1] == "TOPIC_AUTHORIZATION_FAILED"
    code, out = cluster.exec("logger2", ["sh", "-c", "ls /opt/kafka/libs/ | grep '^kafka_2.13-'"])
    assert "4.1.1" in out, out
    status = json.loads(kctl(cluster, "status", "-o", "json").stdout)
    assert (status["health"], status["metadata"]) == ("healthy", "kraft"), status["problems"]
    for n in cluster.spec.nodes:
        conf = (cluster.state_dir / n.hostname / "conf" / "controller.properties").read_text()
        assert "CONTROLLER:SASL_SSL" in conf and "sasl.mechanism.controller.protocol=PLAIN" in conf
        assert "org.apache.kafka.metadata.authorizer.StandardAuthorizer" in conf
        env = subprocess.run(["docker", "inspect", "-f", "{{json .Config.Env}}",
                              f"kctl-{cluster.spec.name}-{n.hostname}-1"], capture_output=True, text=True,
                             timeout=60).stdout
        assert "password" not in env.lower(), env
    from kctl.security import store

    secrets = set(store.passwords(cluster.spec, cluster.state_dir).values())
    rendered = [p for p in cluster.state_dir.rglob("*") if p.is_file() and "secrets" not in p.parts]
    assert not [str(p) for p in rendered if any(pw in p.read_text(errors="replace") for pw in secrets)]
