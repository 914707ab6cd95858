"""kctl up / status / logs / down through the real CLI on a cluster of its own (these tests break it).

Each test states what it needs through a fixture and runs alone (``-k``) as in
the file's order: ``healthy`` runs ``kctl up`` (a no-op when the cluster is
already healthy; it restarts what an earlier test killed), ``present`` only
makes sure the containers exist (``kctl up --no-wait``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from kctl.testing.cluster import with_quick_jit
from tests.integration.ports import free_bases

pytestmark = pytest.mark.integration


def kctl(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def status_json(cwd: Path) -> tuple[int, dict[str, Any]]:
    p = kctl("status", "-o", "json", cwd=cwd, timeout=60)
    return p.returncode, json.loads(p.stdout)


def wait_status(cwd: Path, pred: Any, timeout: float = 90) -> tuple[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        rc, st = status_json(cwd)
        if pred(rc, st) or time.monotonic() > deadline:
            return rc, st
        time.sleep(1)


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cwd = tmp_path_factory.mktemp("lifecycle")
    name = f"lc-{uuid.uuid4().hex[:6]}"
    spec: dict[str, Any] = {"name": name, "zookeeper": {}, "kafka": {}}
    # Three consecutive ports from each base: pick bases whose neighbours are free.
    spec["zookeeper"]["host_port_base"], spec["kafka"]["external_port_base"] = _consecutive_bases()
    (cwd / "kctl.yaml").write_text(yaml.safe_dump(with_quick_jit(spec)))
    try:
        yield cwd
    finally:
        kctl("down", "--volumes", cwd=cwd)
        client = docker.from_env()
        for c in client.containers.list(all=True, filters={"label": f"io.kctl.cluster={name}"}):
            c.remove(force=True)
        shutil.rmtree(cwd, ignore_errors=True)


@pytest.fixture()
def healthy(lifecycle: Path) -> Path:
    p = kctl("up", cwd=lifecycle)
    assert p.returncode == 0, p.stderr
    return lifecycle


@pytest.fixture()
def present(lifecycle: Path) -> Path:
    p = kctl("up", "--no-wait", cwd=lifecycle)
    assert p.returncode == 0, p.stderr
    return lifecycle


def cluster_name(cwd: Path) -> str:
    return str(yaml.safe_load((cwd / "kctl.yaml").read_text())["name"])


def container(cwd: Path, node: str) -> Any:
    name = cluster_name(cwd)
    return next(c for c in docker.from_env().containers.list(all=True, filters={"label": f"io.kctl.cluster={name}"})
                if c.labels["io.kctl.service"] == node)


def _consecutive_bases() -> tuple[int, int]:
    first, second = free_bases(2)
    return first, second


def test_01_up_from_nothing_to_healthy(lifecycle: Path) -> None:
    d = kctl("down", "--volumes", cwd=lifecycle)  # nothing, whatever ran before
    assert d.returncode == 0, d.stderr
    p = kctl("up", cwd=lifecycle)
    assert p.returncode == 0, p.stderr
    for stage in ("containers running", "every ZooKeeper answers srvr", "exactly one ZooKeeper leader",
                  "every broker registered", "a controller elected", "produce/consume round trip"):
        assert stage in p.stderr
    assert "healthy in" in p.stderr


def test_02_status_json(healthy: Path) -> None:
    rc, st = status_json(healthy)
    assert rc == 0 and st["health"] == "healthy" and st["quorum"] == "ok"
    modes = sorted(z["mode"] for z in st["zookeeper"])
    assert modes == ["follower", "follower", "leader"]
    assert [z["node"] for z in st["zookeeper"]] == ["logger1", "logger2", "logger3"]
    assert [(b["id"], b["registered"]) for b in st["brokers"]] == [(1, True), (2, True), (3, True)]
    assert st["controller"] in (1, 2, 3)
    # bootstrap_servers and zookeeper_connect work from the host
    md = Consumer({"bootstrap.servers": st["bootstrap_servers"], "group.id": "x"}).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    host, port = st["zookeeper_connect"].split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"ruok")
        assert s.recv(16) == b"imok"


def test_02b_logs(healthy: Path) -> None:
    zk = kctl("logs", "logger1", "--service", "zookeeper", "-n", "5000", cwd=healthy, timeout=60)
    assert zk.returncode == 0 and "zookeeper" in zk.stdout.lower()
    assert "LEADING" in zk.stdout or "FOLLOWING" in zk.stdout
    kafka = kctl("logs", "logger2", "-n", "5000", cwd=healthy, timeout=60)
    assert kafka.returncode == 0 and "[KafkaServer id=2] started" in kafka.stdout
    assert len(kctl("logs", "logger2", "-n", "3", cwd=healthy, timeout=60).stdout.splitlines()) == 3
    sup = kctl("logs", "logger3", "--service", "supervisor", cwd=healthy, timeout=60)
    assert sup.returncode == 0 and "kafka" in sup.stdout, sup.stderr
    bad = kctl("logs", "logger1", "--service", "nginx", cwd=healthy, timeout=60)
    assert bad.returncode == 2 and "unknown service" in bad.stderr


def test_03_second_up_is_a_noop(healthy: Path) -> None:
    lifecycle = healthy
    client = docker.from_env()
    name = cluster_name(lifecycle)
    before = {c.name: (c.id, c.attrs["State"]["StartedAt"])
              for c in client.containers.list(filters={"label": f"io.kctl.cluster={name}"})}
    p = kctl("up", cwd=lifecycle)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("noop (up to date)") == 3
    after = {c.name: (c.id, c.attrs["State"]["StartedAt"])
             for c in client.containers.list(filters={"label": f"io.kctl.cluster={name}"})}
    assert before == after


def test_04_edit_recreates_only_changed_node(healthy: Path) -> None:
    lifecycle = healthy
    client = docker.from_env()
    spec = yaml.safe_load((lifecycle / "kctl.yaml").read_text())
    name = spec["name"]
    before = {c.labels["io.kctl.service"]: c.id
              for c in client.containers.list(filters={"label": f"io.kctl.cluster={name}"})}
    # A value logger2 does not have yet, whatever ran before: its config changes, the others' do not.
    nodes = spec.get("nodes") or [{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)]
    kafka = nodes[1].setdefault("overrides", {}).setdefault("kafka", {})
    kafka["log.cleaner.threads"] = int(kafka.get("log.cleaner.threads", 1)) + 1
    spec["nodes"] = nodes
    (lifecycle / "kctl.yaml").write_text(yaml.safe_dump(spec))
    p = kctl("up", cwd=lifecycle)
    assert p.returncode == 0, p.stderr
    assert "logger2: recreate" in p.stderr and "logger1: noop" in p.stderr and "logger3: noop" in p.stderr
    after = {c.labels["io.kctl.service"]: c.id
             for c in client.containers.list(filters={"label": f"io.kctl.cluster={name}"})}
    assert after["logger1"] == before["logger1"] and after["logger3"] == before["logger3"]
    assert after["logger2"] != before["logger2"]


def test_05_down_then_up_keeps_topic_data(healthy: Path) -> None:
    lifecycle = healthy
    _, st = status_json(lifecycle)
    topic = f"keep-{uuid.uuid4().hex[:6]}"
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": st["bootstrap_servers"]})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    prod = Producer({"bootstrap.servers": st["bootstrap_servers"], "acks": "all"})
    for i in range(20):
        prod.produce(topic, value=f"m{i}".encode())
    assert prod.flush(30) == 0
    d = kctl("down", cwd=lifecycle)
    assert d.returncode == 0, d.stderr
    name = cluster_name(lifecycle)
    assert docker.from_env().containers.list(all=True, filters={"label": f"io.kctl.cluster={name}"}) == []
    # No container left, and the logs are still there to read: the controlled shutdown included.
    gone = kctl("logs", "logger2", "-n", "2000", cwd=lifecycle, timeout=60)
    assert gone.returncode == 0 and "[KafkaServer id=2] shut down completed" in gone.stdout, gone.stderr
    u = kctl("up", cwd=lifecycle)
    assert u.returncode == 0, u.stderr
    c = Consumer({"bootstrap.servers": st["bootstrap_servers"], "group.id": "keep", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        for m in c.consume(20, timeout=1):
            if m.error() is None:
                got.append(m.value())
    c.close()
    assert got == [f"m{i}".encode() for i in range(20)]


def test_06_port_taken_caught_before_any_container(healthy: Path, tmp_path: Path) -> None:
    spec = yaml.safe_load((healthy / "kctl.yaml").read_text())
    other = {"name": f"clash-{uuid.uuid4().hex[:4]}",
             "zookeeper": {"host_port_base": spec["zookeeper"]["host_port_base"]},
             "kafka": {"external_port_base": spec["kafka"]["external_port_base"] + 100}}
    (tmp_path / "kctl.yaml").write_text(yaml.safe_dump(other))
    p = kctl("up", cwd=tmp_path)
    assert p.returncode != 0 and "in use on 127.0.0.1" in p.stderr and "Traceback" not in p.stderr
    assert docker.from_env().containers.list(all=True, filters={"label": f"io.kctl.cluster={other['name']}"}) == []


def test_06b_a_broker_its_supervisor_gave_up_on_is_failed_and_up_starts_it(healthy: Path) -> None:
    from kctl.runtime.faults import JVM_PATTERN

    c = container(healthy, "logger2")
    # the wrapper's record of a crash loop one start short of its limit (jvm-common.sh's supervise), then the
    # broker dies: the next start gives up at once, supervisord retries it (startretries), then holds it FATAL
    at_limit = c.exec_run(["sh", "-c", 'n=$(date +%s); echo "$n $n $n $n $n" > /tmp/kctl-starts-kafka'],
                          user="logger")
    assert at_limit.exit_code == 0, at_limit.output
    assert c.exec_run(["pkill", "-KILL", "-f", JVM_PATTERN["kafka"]]).exit_code == 0
    failed = ("logger2: kafka FAILED: its supervisor gave up restarting it (see `kctl logs logger2 --service kafka`;"
              " `kctl up` starts it again)")
    rc, st = wait_status(healthy, lambda rc, st: failed in st["problems"], timeout=60)
    assert rc == 1 and failed in st["problems"], st["problems"]
    assert [n["processes"]["kafka"] for n in st["nodes"]] == ["RUNNING", "FAILED", "RUNNING"]
    assert "FATAL" in c.exec_run(["supervisorctl", "-c", "/etc/supervisor/supervisord.conf", "status", "kafka"],
                                 user="root").output.decode()
    up = kctl("up", cwd=healthy)
    assert up.returncode == 0, up.stderr
    assert "logger2: kafka is not running in its running container; starting it" in up.stderr
    rc, st = status_json(healthy)
    assert rc == 0 and st["health"] == "healthy", st["problems"]


def test_07_one_node_killed_is_degraded(healthy: Path) -> None:
    lifecycle = healthy
    container(lifecycle, "logger3").kill()
    t0 = time.monotonic()
    rc, st = status_json(lifecycle)
    assert time.monotonic() - t0 < 15  # a dead node never makes status hang
    assert rc == 1 and st["health"] == "degraded"
    # If logger3 led the ensemble, the other two elect a new leader first (quorum briefly lost).
    rc, st = wait_status(lifecycle, lambda rc, st: st["quorum"] == "ok", timeout=30)
    assert rc == 1 and st["health"] == "degraded" and st["quorum"] == "ok"
    # The dead broker disappears from /brokers/ids once its session expires.
    rc, st = wait_status(lifecycle, lambda rc, st: st["brokers_registered"] == 2, timeout=60)
    assert rc == 1 and st["brokers_registered"] == 2 and st["quorum"] == "ok"
    assert [b["registered"] for b in st["brokers"]] == [True, True, False]
    # The stopped node's logs, when they are needed most: read from the host, no container to exec into.
    assert container(lifecycle, "logger3").status == "exited"
    # Broker 3's own lines (its start, or its partitions' after the module's earlier steps: a CI run's last 5,000
    # lines no longer reached back to the start).
    log = kctl("logs", "logger3", "-n", "5000", cwd=lifecycle, timeout=60)
    assert log.returncode == 0 and re.search(r"\[KafkaServer id=3\] started|\[Partition [^\]]* broker=3\]",
                                             log.stdout), log.stderr


def test_08_two_zookeepers_down_is_quorum_lost(present: Path) -> None:
    lifecycle = present
    for node in ("logger2", "logger3"):
        victim = container(lifecycle, node)
        victim.reload()
        if victim.status == "running":
            victim.kill()
    rc, st = wait_status(lifecycle, lambda rc, st: st["quorum"] == "lost", timeout=30)
    assert st["quorum"] == "lost" and rc in (1, 2)
    p = kctl("status", cwd=lifecycle)
    assert "quorum lost" in p.stdout


def test_09_down_volumes_leaves_nothing(present: Path) -> None:
    lifecycle = present
    name = cluster_name(lifecycle)
    p = kctl("down", "--volumes", cwd=lifecycle)
    assert p.returncode == 0, p.stderr
    client = docker.from_env()
    assert client.containers.list(all=True, filters={"label": f"io.kctl.cluster={name}"}) == []
    assert client.networks.list(filters={"label": f"io.kctl.cluster={name}"}) == []
    assert client.volumes.list(filters={"label": f"com.docker.compose.project=kctl-{name}"}) == []
    assert not (lifecycle / ".kctl" / name).exists()
    rc, st = status_json(lifecycle)
    assert rc == 2 and st["health"] == "down"
