"""The pipeline on kctl.yaml's Spark cluster beside a secured cluster (SASL_SSL, SCRAM, ACLs): `kctl stream submit`
makes the job a user of its own with only the ACLs it needs, its login reaches the driver's container alone, and
every table equals the generated events' ground truth (read here without a JVM: tests.integration.test_stream._check).

The login's password, read from the file kctl wrote, is then looked for where it must never be: the environment and
arguments of every container of the Spark cluster, every worker's mounts, the logs, and the shared directory. And the
job's user is refused a topic it was not granted, by the broker itself.
"""

from __future__ import annotations

import datetime as dt
import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl.kafka.client import Target
from kctl.testing.cluster import KafkaCluster
from tests.integration.test_stream import _check, _events
from tests.integration.test_stream_spark import _caught_up, _json, _kctl, _stop, _submit, spark_cluster

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.long]

T0 = dt.datetime(2024, 6, 1, 11, 58, 40, tzinfo=dt.timezone.utc)
JOB = "sec"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from spark_cluster(tmp_path_factory, "spark-secured", security=True)


def _new_topic(c: KafkaCluster, partitions: int = 2) -> str:
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"kctl-test-{uuid.uuid4().hex[:8]}"
    a = AdminClient(c.client_config())
    for f in a.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(timeout=30)
    return name


def _send_as_admin(c: KafkaCluster, topic: str, events: list[Any], bad: int, seed: int) -> None:
    from kctl.agent.nginx import malformed_records
    from kctl.agent.produce import produce

    conf = c.client_config()
    bs = conf.pop("bootstrap.servers")
    res = produce(Target.foreign(bs, conf), topic, malformed_records(((e.key, e.value) for e in events), bad,
                                                                     seed=seed))
    assert res.delivered == len(events) + bad and res.failed == 0


def test_a_job_beside_a_secured_cluster_logs_in_as_its_own_user_and_matches_ground_truth(
        cluster: KafkaCluster) -> None:
    import docker
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError
    from confluent_kafka.admin import AdminClient

    c = cluster
    topic = _new_topic(c)
    events = _events(300, seed=5, start=T0)
    _send_as_admin(c, topic, events, bad=5, seed=5)
    res = _submit(c, JOB, topic)
    st = _caught_up(c, JOB, len(events) + 5)  # read as kctl's admin on this host
    assert st["state"] == "running" and st["spark"]["driver_state"] == "running"

    # the job's user, and exactly the ACLs the job needs
    user = f"kctl-stream-{JOB}"
    users = _json(_kctl(c, "user", "list", "-o", "json"))
    assert user in [u["user"] for u in users], users
    acls = _json(_kctl(c, "acl", "list", "--principal", f"User:{user}", "-o", "json"))
    got = {(a["resource_type"], a["resource"], a["pattern"], a["operation"], a["permission"]) for a in acls}
    assert got == {("topic", topic, "LITERAL", "read", "ALLOW"), ("topic", topic, "LITERAL", "describe", "ALLOW"),
                   ("group", user, "LITERAL", "read", "ALLOW"), ("group", user, "LITERAL", "describe", "ALLOW"),
                   ("group", f"{user}.spark-", "PREFIXED", "read", "ALLOW")}, got

    # its login: a 0600 file outside the directory the workers share, mounted into the driver alone
    sd = c.state_dir.resolve()
    login_file = sd / "spark" / "secrets" / f"{JOB}.json"
    assert stat.S_IMODE(login_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(login_file.parent.stat().st_mode) == 0o700
    login = json.loads(login_file.read_text())
    assert login["sasl.username"] == user and login["security.protocol"] == "SASL_SSL" and "ssl.ca.pem" in login
    password = login["sasl.password"]
    assert len(password) >= 16
    dc = docker.from_env()
    spark_containers = dc.containers.list(all=True, filters={"label": f"io.kctl.spark={c.spec.name}"})
    assert {x.labels.get("io.kctl.spark-role") for x in spark_containers} == {"master", "worker", "driver"}
    for x in spark_containers:
        cfg = x.attrs["Config"]
        assert password not in json.dumps([cfg.get("Env"), cfg.get("Cmd"), cfg.get("Entrypoint"),
                                           x.attrs.get("Args")]), x.name
        sources = [m["Source"] for m in x.attrs["Mounts"]]
        if x.labels.get("io.kctl.spark-role") == "driver":
            assert str(login_file) in sources
        else:
            assert not [s for s in sources if "secrets" in s], (x.name, sources)
    for f in [*(sd / "spark" / "logs").rglob("*"), *(sd / "spark" / "data").rglob("*.json"),
              *(sd / "spark" / "data").rglob("*.log")]:
        if f.is_file():
            assert password not in f.read_text(errors="replace"), f
    # the worker's executor logs (its own work dir)
    for f in (sd / "spark" / "spark-worker-1").rglob("std*"):
        if f.is_file():
            assert password not in f.read_text(errors="replace"), f

    # the driver committed the job's offsets to its group as its own user: Kafka's own view of the job's lag
    admin = AdminClient(c.client_config())
    deadline = time.monotonic() + 60
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(user)])[user]
        committed = {tp.partition: tp.offset for tp in fut.result(timeout=30).topic_partitions if tp.topic == topic}
        if sum(committed.values()) == len(events) + 5:
            break
        time.sleep(1)
    assert sum(committed.values()) == len(events) + 5, committed

    # the broker shows the job's user its own topic and refuses it one it was not granted
    other = _new_topic(c, partitions=1)
    as_job = AdminClient({"bootstrap.servers": c.client_config()["bootstrap.servers"], **login})
    md = as_job.list_topics(timeout=30)
    assert topic in md.topics and md.topics[topic].error is None
    refused = as_job.list_topics(topic=other, timeout=30).topics[other].error
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    _stop(c, JOB)
    drv = dc.containers.get(res["container"])
    assert drv.status == "exited" and drv.attrs["State"]["ExitCode"] == 0
    _check(Path(res["out"]), events, bad=5)
