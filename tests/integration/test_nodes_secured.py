"""The day-2 membership commands on the secured profile, on a secured cluster of their own (they change it).

One test, one sequence: ZooKeeper refuses a reconfig to kctl's read principal -> `kctl node add` (the new
node's certificate, keystore and JAAS files made before its container starts; its ZooKeeper joins by a
reconfig as ZooKeeper's super user) -> `kctl reassign plan/execute/verify/status` onto it -> `kctl apply` of a
broker setting through kafka.overrides -> `kctl node remove`. Each outcome is checked by something other than
the command: the four-letter word ``conf`` of a node that stayed, a kazoo session, Docker's view of the new
container, and fresh confluent-kafka clients that produce to and read back from a partition the new broker
leads. Records acknowledged before the first change are all read back after the last one.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kctl.testing.cluster import KafkaCluster

# long: make test adds and removes nodes on the plain profile (test_nodes.py) and restarts through the gates
# on the secured one (test_security.py).
pytestmark = [pytest.mark.integration, pytest.mark.long]

TOPIC = "orders"


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3, security=True) as c:
        c.create_topic(TOPIC, partitions=4, replication_factor=3, config={"min.insync.replicas": "2"})
        yield c


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                       text=True, timeout=timeout, cwd=cluster.workdir, env={**os.environ, "COLUMNS": "200"})
    assert "Traceback" not in p.stderr, p.stderr
    return p


def conf_members(cluster: KafkaCluster) -> dict[int, str]:
    """{server id: role} from ZooKeeper 1's own ``conf`` answer (no session, no kctl parsing of the znode)."""
    from kctl.zk import fourlw

    n1 = cluster.spec.nodes[0]
    text = fourlw.ask("127.0.0.1", cluster.spec.zk_host_port(n1), "conf", timeout=3).text
    out = {}
    for line in text.splitlines():
        if line.startswith("server."):
            sid, rest = line[len("server."):].split("=", 1)
            out[int(sid)] = rest.split(";")[0].rsplit(":", 1)[-1]
    return out


def assignment(cluster: KafkaCluster) -> dict[str, list[int]]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient(cluster.client_config()).list_topics(timeout=15)
    return {f"{t}-{p}": list(pm.replicas) for t, tm in md.topics.items() for p, pm in tm.partitions.items()}


def produce_read(cluster: KafkaCluster, topic: str, n: int) -> tuple[set[bytes], set[bytes]]:
    """(acknowledged, read back) by fresh confluent-kafka clients with only the SASL_SSL client settings."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    acked: set[bytes] = set()
    if n:
        p = Producer({**cluster.client_config(), "acks": "all"})
        run = uuid.uuid4().hex[:6]

        def cb(err: object, msg: Any) -> None:
            if err is None:
                acked.add(msg.value())

        for i in range(n):
            p.produce(topic, key=str(i % 16).encode(), value=f"{run}-{i:05d}".encode(), on_delivery=cb)
            p.poll(0)
        assert p.flush(60) == 0 and len(acked) == n
    c = Consumer({**cluster.client_config(), "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    got: set[bytes] = set()
    try:
        parts = list(c.list_topics(topic, timeout=15).topics[topic].partitions)
        ends = {q: c.get_watermark_offsets(TopicPartition(topic, q), timeout=15)[1] for q in parts}
        c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in parts])
        done = {q for q, e in ends.items() if e == 0}
        for _ in range(120):
            if len(done) == len(parts):
                break
            for m in c.consume(500, timeout=1.0):
                if m.error() is None:
                    got.add(m.value())
                    if m.offset() + 1 >= ends[m.partition()]:
                        done.add(m.partition())
    finally:
        c.close()
    return acked, got


def test_node_add_reassign_apply_and_remove_on_a_secured_cluster(cluster: KafkaCluster) -> None:
    from kazoo.exceptions import NoAuthError

    from kctl.model.properties import ZK_KCTL_PRINCIPAL
    from kctl.security import store
    from kctl.zk import znodes

    acked, _ = produce_read(cluster, TOPIC, 2000)
    secrets = store.secrets_dir(cluster.state_dir)
    pw = store.passwords(cluster.spec, cluster.state_dir)

    # kctl's read principal has no right to change the ensemble: ZooKeeper checks /zookeeper/config's ACL.
    with znodes.connect(cluster.spec, chroot=False, principal=ZK_KCTL_PRINCIPAL) as zk, \
            pytest.raises(NoAuthError):
        zk.reconfig(joining=None, leaving="3", new_members=None)
    assert conf_members(cluster) == {1: "participant", 2: "participant", 3: "participant"}
    # `kctl zk reconfig` runs its checks on a secured cluster like on a plain one (no refusal of the profile)
    p = kctl(cluster, "zk", "reconfig", "--add", "server.4=logger4:2888:3888:observer;2181")
    assert p.returncode != 0 and "do not answer" in p.stderr, p.stderr

    # ----- node add ------------------------------------------------------------------------------------
    p = kctl(cluster, "node", "add", "--role", "observer")
    assert p.returncode == 0, p.stderr
    assert "secrets of the new node written" in p.stderr and "added to the ensemble by reconfig" in p.stderr
    node4 = yaml.safe_load(cluster.spec_file.read_text())["nodes"][3]
    assert (node4["id"], node4["hostname"], node4["role"]) == (4, "logger4", "observer")
    assert conf_members(cluster) == {1: "participant", 2: "participant", 3: "participant", 4: "observer"}
    from kctl.zk import fourlw

    assert "Mode: observer" in fourlw.ask("127.0.0.1", node4["zookeeper_port"], "srvr", timeout=3).text
    # its secrets: 0600 files in a 0700 dir, a certificate of the cluster's CA with the other nodes' SANs
    from cryptography import x509

    from kctl.security import pki

    host4 = secrets / "logger4"
    assert stat.S_IMODE(host4.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in host4.iterdir())
    cert = x509.load_pem_x509_certificate((secrets / "certs" / "logger4.pem").read_bytes())
    assert cert.issuer == x509.load_pem_x509_certificate((secrets / "ca.pem").read_bytes()).subject
    assert set(pki.cert_sans((secrets / "certs" / "logger4.pem").read_bytes())) == {"logger4", "localhost",
                                                                                    "127.0.0.1"}
    # no password in the new container's environment, its process arguments or its logs
    import docker

    from kctl import contract
    from kctl.runtime.engine import engines

    code, ps = engines.exec_in(cluster.spec, "logger4", ["ps", "-eo", "args"])
    assert code == 0 and "QuorumPeerMain" in ps and "kafka.Kafka" in ps
    logs = "".join(engines.exec_in(cluster.spec, "logger4", ["cat", contract.container_log(s)])[1]
                   for s in ("zookeeper", "kafka"))
    dc = docker.from_env()
    try:
        (c4,) = dc.containers.list(filters={"label": [f"{contract.LABEL_CLUSTER}={cluster.spec.name}",
                                                      f"{contract.LABEL_NODE}=logger4"]})
        env = json.dumps(c4.attrs["Config"]["Env"]) + json.dumps(c4.attrs["Args"])
    finally:
        dc.close()
    for secret in pw.values():
        assert secret not in ps and secret not in env and secret not in logs and secret not in p.stderr
    assert "superUser" not in ps and "zkadmin" not in env and "zkadmin" not in ps

    # the new broker leads a partition that a fresh SASL_SSL client writes to and reads back
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from kctl.runtime.cluster import run_kafka_tool

    run = run_kafka_tool(cluster.spec, "kafka-topics.sh", ["--create", "--topic", "on4", "--replica-assignment",
                                                           "4:1:2"])  # librdkafka 2.16 refuses an assignment
    assert run.exit_code == 0 and "Created topic on4" in run.output, run.output
    admin = AdminClient(cluster.client_config())
    assert cluster.partition_leader("on4", 0) == 4
    sent, got = produce_read(cluster, "on4", 200)
    assert sent == got

    # ----- reassign onto it (Kafka's tool in a node, with the admin user's client file) -----------------
    p = kctl(cluster, "reassign", "plan", "--brokers", "1,2,3,4", "-o", "json")
    assert p.returncode == 0, p.stderr
    (cluster.workdir / "plan.json").write_text(p.stdout)
    plan = json.loads(p.stdout)
    assert plan["partitions"] and any(4 in q["replicas"] for q in plan["partitions"])
    p = kctl(cluster, "reassign", "execute", "plan.json", "--throttle", "50MB/s", "--wait")
    assert p.returncode == 0, p.stderr
    p = kctl(cluster, "reassign", "verify", "plan.json")
    assert p.returncode == 0 and "is completed" in p.stdout + p.stderr, p.stdout + p.stderr
    st = json.loads(kctl(cluster, "reassign", "status", "-o", "json").stdout)
    assert st["moving"] == [] and st["throttled_brokers"] == [], st
    want = {f"{q['topic']}-{q['partition']}": q["replicas"] for q in plan["partitions"]}
    now = assignment(cluster)
    assert {k: now[k] for k in want} == want

    # a throttled move seen while it runs (the throttle is in /config/brokers, the brokers' own znodes on a
    # secured cluster), then cancelled by Kafka's tool
    # (min.insync.replicas 1: with the cluster's 2, a partition of two replicas would stop the roll below)
    run = run_kafka_tool(cluster.spec, "kafka-topics.sh", ["--create", "--topic", "slow", "--replica-assignment",
                                                           "1:2", "--config", "min.insync.replicas=1"])
    assert run.exit_code == 0, run.output
    big = Producer({**cluster.client_config(), "acks": "all", "linger.ms": 20, "compression.type": "none"})
    for _ in range(400):
        big.produce("slow", value=uuid.uuid4().bytes * 640)
        big.poll(0)
    assert big.flush(60) == 0
    (cluster.workdir / "slow.json").write_text(json.dumps(
        {"version": 1, "partitions": [{"topic": "slow", "partition": 0, "replicas": [1, 4]}]}))
    p = kctl(cluster, "reassign", "execute", "slow.json", "--throttle", "10KB/s")
    assert p.returncode == 0, p.stderr
    st = json.loads(kctl(cluster, "reassign", "status", "-o", "json").stdout)
    assert [m["partition"] for m in st["moving"]] == ["slow-0"] and 4 in st["throttled_brokers"], st
    p = kctl(cluster, "reassign", "cancel")
    assert p.returncode == 0 and "cancelled the reassignment of 1 partition(s) (slow-0)" in p.stdout + p.stderr
    for _ in range(30):
        st = json.loads(kctl(cluster, "reassign", "status", "-o", "json").stdout)
        if not st["moving"] and not st["throttled_brokers"]:
            break
        time.sleep(1)
    assert st["moving"] == [] and st["throttled_brokers"] == [], st
    assert assignment(cluster)["slow-0"] == [1, 2]

    # ----- kctl apply: a broker setting through kafka.overrides, set dynamically on all four brokers -----
    data = yaml.safe_load(cluster.spec_file.read_text())
    data.setdefault("kafka", {}).setdefault("overrides", {})["log.cleaner.threads"] = 2
    cluster.spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    p = kctl(cluster, "apply", "--yes")
    assert p.returncode == 0, p.stderr
    from confluent_kafka.admin import ConfigResource, ResourceType

    for b in (1, 4):
        res = ConfigResource(ResourceType.BROKER, str(b))
        cfg = admin.describe_configs([res])[res].result(30)
        assert cfg["log.cleaner.threads"].value == "2", (b, cfg["log.cleaner.threads"])

    # ----- node remove ---------------------------------------------------------------------------------
    p = kctl(cluster, "node", "remove", "4", "--yes", "--timeout", "300")
    assert p.returncode == 0, p.stderr
    assert "removed from the ensemble by reconfig" in p.stderr
    assert conf_members(cluster) == {1: "participant", 2: "participant", 3: "participant"}
    assert sorted(cluster.brokers()) == [1, 2, 3]
    assert all(4 not in r for r in assignment(cluster).values())
    assert not host4.exists() and not list((secrets / "certs").glob("logger4.*"))
    assert [n["id"] for n in yaml.safe_load(cluster.spec_file.read_text())["nodes"]] == [1, 2, 3]
    _, back = produce_read(cluster, TOPIC, 0)
    assert acked <= back
    _, still = produce_read(cluster, "on4", 0)
    assert sent <= still
