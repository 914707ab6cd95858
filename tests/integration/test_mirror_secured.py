"""kctl mirror between secured clusters (issue 27): MirrorMaker logs in with users of its own, secrets stay out of
every file but its 0600 secrets, and a source kctl does not run is reached with its client settings.

The source is the session's secured three-node cluster (``secured_cluster``: started anyway for test_security,
so this module adds one cluster start, not two); the target is a secured one-node cluster with two mirrors of
that source:

- ``sec``: the source by its kctl.yaml; `kctl mirror up` makes the read-only user ``mirror-to-<target>`` there
  and ``mirror-from-sec`` here, with their ACLs;
- ``ext``: the same cluster as if kctl did not run it: bootstrap servers, SASL_SSL, a user this test makes with
  read ACLs on ``ext-`` topics, its password file (0600) and the CA file; exactly once, so that its
  transactional ids' ACLs on the target are used too (a read_committed reader finds every record once).

Records are read back by the test's own consumer (kctl.drill.check.read_topic) as the target's admin user.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl.drill.check import read_topic
from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration

RECORDS = 200
READER = "ext-reader"


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)],
                          capture_output=True, text=True, timeout=timeout, cwd=cluster.workdir)


def produce(cluster: KafkaCluster, topic: str, values: range) -> None:
    from kctl.kafka.client import Target, producer

    p = producer(Target.of(cluster.spec))
    failed: list[Any] = []
    for v in values:
        p.produce(topic, value=str(v).encode(), on_delivery=lambda e, m: failed.append(e) if e else None)
        p.poll(0)
    assert p.flush(60) == 0 and not failed, failed


def values_in(cluster: KafkaCluster, topic: str) -> list[int]:
    return [seq for records in read_topic(cluster.spec, topic, timeout=60).values() for _, seq in records]


def committed_values(cluster: KafkaCluster, topic: str) -> list[int]:
    """Every committed value of ``topic`` (isolation.level=read_committed), as the admin user."""
    from confluent_kafka import TopicPartition

    from kctl.kafka.client import Target, consumer

    c = consumer(Target.of(cluster.spec), group=f"t-{time.monotonic_ns()}", **{"isolation.level": "read_committed",
                                                                    "auto.offset.reset": "earliest"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[int] = []
        todo = {p for p, e in ends.items() if e > 0}
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:  # bounded: 60 s
            for m in c.consume(500, timeout=0.5):
                if m.error() is None:
                    out.append(int(m.value()))
            for tp in c.position([TopicPartition(topic, p) for p in sorted(todo)]):
                if tp.offset >= ends[tp.partition]:  # past the last transaction's control record
                    todo.discard(tp.partition)
        return out
    finally:
        c.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eventually(what: str, probe: Callable[[], Any], timeout: float = 120) -> Any:
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


def forget(cluster: KafkaCluster, user: str) -> None:
    """Remove a user and every ACL of its principal from the shared secured cluster."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    from kctl.kafka import security
    from kctl.kafka.client import Target, admin

    a = admin(Target.of(cluster.spec))
    f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{user}", None, AclOperation.ANY,
                         AclPermissionType.ANY)
    for fut in a.delete_acls([f]).values():
        fut.result(30)
    if user in {r.user for r in security.list_users(cluster.spec)}:
        security.delete_user(cluster.spec, user)


@pytest.fixture(scope="module")
def pair(secured_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[KafkaCluster, KafkaCluster, Path]]:
    from kctl.kafka import security

    source = secured_cluster
    source.create_topic("sec-orders", partitions=3, replication_factor=3)
    source.create_topic("ext-orders", partitions=2, replication_factor=3)
    produce(source, "sec-orders", range(RECORDS))
    produce(source, "ext-orders", range(1000, 1000 + RECORDS))
    # a user of the source as an operator of another team would hand it over: read on ext- topics only
    security.set_password(source.spec, READER, None, create=True)
    for op in ("read", "describe", "describe_configs"):
        security.add_acl(source.spec, f"User:{READER}", True, op, topic="ext-", prefixed=True)
    security.add_acl(source.spec, f"User:{READER}", True, "describe", group="*")
    security.add_acl(source.spec, f"User:{READER}", True, "describe", cluster=True)
    given = tmp_path_factory.mktemp("handed-over")
    pw = given / "reader.password"
    pw.write_text((source.state_dir / "secrets" / "users" / f"{READER}.password").read_text())
    pw.chmod(0o600)
    ca = given / "ca.pem"
    ca.write_bytes((source.state_dir / "secrets" / "ca.pem").read_bytes())
    mirrors = [
        {"name": "sec", "source": {"spec": str(source.spec_file)}, "topics": "sec-.*", "groups": "none",
         "refresh_topics_seconds": 3, "checkpoint_seconds": 2},
        {"name": "ext", "source": {"bootstrap_servers": source.bootstrap_servers, "client": {
            "security_protocol": "SASL_SSL", "sasl_mechanism": source.spec.security.sasl_mechanism,
            "username": READER, "password_file": str(pw), "ca_file": str(ca)}},
         "topics": "ext-.*", "groups": "none", "refresh_topics_seconds": 3, "checkpoint_seconds": 2,
         "exactly_once": True, "rest_port": free_port()},
    ]
    try:
        with KafkaCluster(nodes=1, security=True, mirrors=mirrors) as target:
            p = kctl(target, "mirror", "up", "--timeout", "240")
            assert p.returncode == 0, p.stdout + p.stderr
            yield source, target, pw
            kctl(target, "mirror", "down")
    finally:
        for user in (READER, f"mirror-to-{target.spec.name}" if "target" in locals() else None):
            if user:
                forget(source, user)
        from confluent_kafka.admin import AdminClient

        from kctl.kafka.client import Target, base_config

        a = AdminClient(base_config(Target.of(source.spec)))  # referenced until its futures resolve
        for fut in a.delete_topics(["sec-orders", "ext-orders"]).values():
            fut.result(30)


def test_both_flows_replicate_every_record_as_users_that_are_not_the_admin(pair: Any) -> None:
    from kctl.kafka import security

    source, target, _ = pair
    eventually("sec-orders on the target", lambda: sorted(values_in(target, "sec.sec-orders")) == list(range(RECORDS)))
    eventually("ext-orders on the target",
               lambda: sorted(values_in(target, "ext.ext-orders")) == list(range(1000, 1000 + RECORDS)))
    assert sorted(committed_values(target, "ext.ext-orders")) == list(range(1000, 1000 + RECORDS))
    # MirrorMaker's users: its own, not kctl's admin, with the ACLs kctl mirror documents and nothing more
    here = {r.user: r for r in security.list_users(target.spec)}
    assert {"mirror-from-sec", "mirror-from-ext"} <= set(here)
    assert not here["mirror-from-sec"].super_user
    there = {r.user for r in security.list_users(source.spec)}
    assert f"mirror-to-{target.spec.name}" in there
    reader = {(a.resource_type, a.resource, a.operation) for a in
              security.list_acls(source.spec, principal=f"User:mirror-to-{target.spec.name}")}
    assert reader == {("topic", "*", "read"), ("topic", "*", "describe"), ("topic", "*", "describe_configs"),
                      ("group", "*", "describe"), ("cluster", "kafka-cluster", "describe")}
    writer = {(a.resource_type, a.resource, a.pattern) for a in
              security.list_acls(target.spec, principal="User:mirror-from-sec")}
    assert ("topic", "sec.", "PREFIXED") in writer and ("topic", "*", "LITERAL") not in writer
    # status and lag read both secured clusters
    st = eventually("both mirrors caught up", lambda: (lambda s: s if all(x["total_lag"] == 0 for x in s) else None)(
        json.loads(kctl(target, "mirror", "status", "-o", "json").stdout)))
    assert {x["mirror"] for x in st} == {"sec", "ext"} and all(x["problems"] == [] for x in st)
    lag = json.loads(kctl(target, "mirror", "lag", "-o", "json").stdout)
    assert sum(x["replicated"] for x in lag if x["source_topic"] == "ext-orders") == RECORDS


def test_no_secret_outside_the_mirrors_0600_secrets(pair: Any) -> None:
    import docker

    source, target, pw = pair
    passwords = [pw.read_text().strip()]
    users = target.state_dir / "secrets" / "users"
    passwords += [(users / f"mirror-from-{m}.password").read_text().strip() for m in ("sec", "ext")]
    passwords.append((source.state_dir / "secrets" / "users" / f"mirror-to-{target.spec.name}.password")
                     .read_text().strip())
    assert all(len(p) >= 16 for p in passwords)
    base = target.state_dir / "mirror"
    for m in ("sec", "ext"):
        d = base / m / "secrets"
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
        assert {f.name for f in d.iterdir()} == {"mirror.properties", f"{m}-ca.pem", f"{target.spec.name}-ca.pem"}
        assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in d.iterdir())
    texts = [f.read_text(errors="replace") for f in base.rglob("*") if f.is_file() and "secrets" not in f.parts]
    assert any("config.providers.file.class" in t for t in texts)
    client = docker.from_env()
    try:
        for c in client.containers.list(filters={"label": f"io.kctl.cluster.mirror={target.spec.name}"}):
            texts.append(json.dumps(c.attrs["Config"]) + json.dumps(c.attrs["Args"]) + json.dumps(c.attrs["Path"]))
            top = c.top(ps_args="-eo pid,args")
            texts.append("\n".join(" ".join(p) for p in top["Processes"]))
            texts.append(c.logs().decode(errors="replace"))
    finally:
        client.close()
    assert len(texts) > 6
    for text in texts:
        assert not any(p in text for p in passwords)


def test_a_wrong_password_is_refused_before_anything_changes(pair: Any) -> None:
    source, target, pw = pair
    conf = target.state_dir / "mirror" / "ext" / "conf" / "mm2.properties"
    before = (conf.read_text(), (target.state_dir / "mirror" / "ext" / "secrets" / "mirror.properties").read_bytes())
    right = pw.read_text()
    try:
        pw.write_text("not-the-password\n")
        p = kctl(target, "mirror", "up", "--timeout", "60")
        assert p.returncode != 0
        assert "mirror ext" in p.stderr and "refused the login" in p.stderr and "Traceback" not in p.stderr, p.stderr
    finally:
        pw.write_text(right)
    after = (conf.read_text(), (target.state_dir / "mirror" / "ext" / "secrets" / "mirror.properties").read_bytes())
    assert after == before
    st = json.loads(kctl(target, "mirror", "status", "-o", "json").stdout)
    assert all(x["container"] == "running" and x["problems"] == [] for x in st)
