"""kctl.testing.KafkaCluster itself: parallel clusters, cleanup, failover without loss, pause and partition."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import docker
import pytest

from kctl.testing import KafkaCluster

pytestmark = pytest.mark.integration


def _containers(name: str) -> list[object]:
    return docker.from_env().containers.list(all=True, filters={"label": f"io.kctl.cluster={name}"})


def test_shared_fixture(kctl_cluster: KafkaCluster) -> None:
    assert kctl_cluster.brokers() == [1, 2, 3]
    modes = kctl_cluster.zookeeper_modes()
    assert sorted(modes.values()) == ["follower", "follower", "leader"]
    assert kctl_cluster.internal_bootstrap_servers == "logger1:9092,logger2:9092,logger3:9092"
    assert docker.from_env().networks.get(kctl_cluster.network_name)


def test_two_clusters_at_once_and_cleanup_after_failure(kctl_cluster: KafkaCluster) -> None:
    """A second cluster beside the shared one: no collision; a failing body still removes everything.
    Another process takes one of its drawn host ports before it starts: it starts on new ones."""
    from kctl.runtime.ports import free_ports

    jmx = free_ports(1)[0]
    second = KafkaCluster(nodes=1, kafka={"jmx": True, "jmx_port_base": jmx})
    name = second.spec.name
    lost = second.spec.nodes[0].kafka_port
    thief = socket.socket()
    thief.bind(("127.0.0.1", lost))
    thief.listen()
    with thief, pytest.raises(RuntimeError, match="boom"), second:
        assert second.brokers() == [1]
        assert second.spec.nodes[0].kafka_port != lost  # drawn again: the first start found it taken
        with socket.create_connection(("127.0.0.1", jmx), timeout=5):
            pass  # the broker's JMX answers on its published port
        assert second.bootstrap_servers != kctl_cluster.bootstrap_servers
        assert second.network_name != kctl_cluster.network_name
        second.create_topic("t", partitions=1, replication_factor=1)
        kctl_cluster.create_topic(f"t-{uuid.uuid4().hex[:6]}", partitions=1)
        raise RuntimeError("boom")
    assert _containers(name) == []
    assert docker.from_env().networks.list(filters={"label": f"io.kctl.cluster={name}"}) == []
    assert not second.workdir.exists()
    assert kctl_cluster.brokers() == [1, 2, 3]


def test_leftover_of_crashed_run_is_removed(tmp_path: Path) -> None:
    """A process that starts a cluster and dies: the next KafkaCluster removes its containers."""
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from kctl.testing import KafkaCluster
        c = KafkaCluster(nodes=1)
        c.start()
        print(c.spec.name, flush=True)
        os._exit(3)   # no cleanup: a crashed run
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TESTCONTAINERS_RYUK_DISABLED": "true"})
    name = p.stdout.strip().splitlines()[-1]
    assert p.returncode == 3 and _containers(name)
    from kctl.testing.cluster import remove_orphans

    assert name in remove_orphans(docker.from_env())
    assert _containers(name) == []


def test_crashed_process_shows_in_status(kctl_faults: KafkaCluster) -> None:
    cluster = kctl_faults
    cluster.kill("logger1", service="zookeeper")
    try:
        st = cluster.status()
        node = next(n for n in st.nodes if n.node == "logger1")
        assert node.processes["zookeeper"] == "STOPPED" and node.processes["kafka"] == "RUNNING"
        assert "logger1: zookeeper STOPPED" in st.problems and st.health == "degraded" and st.quorum == "ok"
    finally:
        cluster.start("logger1", service="zookeeper")
    cluster.wait_until_healthy(timeout=120)
    st = cluster.wait_for(lambda s: s.health == "healthy", timeout=120, description="healthy again")
    assert next(n for n in st.nodes if n.node == "logger1").processes["zookeeper"] == "RUNNING"


def test_pause_and_disconnect_seen_by_status(kctl_faults: KafkaCluster) -> None:
    cluster = kctl_faults
    try:
        cluster.pause(3)
        st = cluster.wait_for(lambda s: s.health != "healthy", timeout=60, description="pause seen")
        assert any("logger3" in p for p in st.problems)
        assert next(n for n in st.nodes if n.node == "logger3").container == "paused"
    finally:
        cluster.unpause(3)
    cluster.wait_until_healthy(timeout=120)
    try:
        cluster.disconnect(2)
        # Broker 2's ZooKeeper session expires; if logger2 led the ensemble, the other two elect a new
        # leader first. Wait for both, then the cut-off node must show as degraded, quorum kept.
        st = cluster.wait_for(
            lambda s: s.quorum == "ok" and not next(b for b in s.brokers if b["id"] == 2)["registered"],
            timeout=90, description="partition seen")
        assert st.health == "degraded"
        assert any("logger2" in p for p in st.problems)
    finally:
        cluster.connect(2)
    cluster.wait_until_healthy(timeout=180)
    assert cluster.brokers() == [1, 2, 3]


def test_restore_undoes_every_fault_at_once(kctl_faults: KafkaCluster) -> None:
    """What kctl_faults does after a test that left the cluster broken: all of it undone, healthy again."""
    from kctl.testing.plugin import restore

    cluster = kctl_faults
    cluster.kill("logger1", service="kafka")
    applied = cluster.netem("logger2", delay_ms=50, loss_percent=2)
    _, rules = cluster.exec("logger2", ["sh", "-c", "tc qdisc show; iptables -S 2>/dev/null"])
    assert "netem" in rules or "KCTL_LOSS" in rules, (applied, rules)
    cluster.pause("logger2")
    cluster.disconnect("logger3")
    undone = restore(cluster)
    assert {"unpaused logger2", "reconnected logger3", "started kafka on logger1",
            "removed netem on logger2"} <= set(undone), undone
    _, rules = cluster.exec("logger2", ["sh", "-c", "tc qdisc show; iptables -S 2>/dev/null"])
    assert "netem" not in rules and "KCTL_LOSS" not in rules, rules
    st = cluster.status()
    assert st.health == "healthy" and cluster.brokers() == [1, 2, 3]
    assert restore(cluster) == []  # nothing left to undo


@pytest.mark.long  # a fresh virtualenv and its own cluster; the fixtures it uses are tested above
def test_docs_example_runs_in_a_fresh_project(tmp_path: Path) -> None:
    """docs/testing.md's complete example, run as a project of its own: no conftest, only kctl installed.

    It uses KafkaCluster directly (a leader failover under acks=all, no acknowledged message lost)
    and the kctl_cluster fixture that kctl's pytest11 plugin registers.
    """
    doc = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    start = doc.index("```python\n# test_failover.py") + len("```python\n")
    code = doc[start:doc.index("```", start)]
    (tmp_path / "test_failover.py").write_text(code)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_failover.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "TESTCONTAINERS_RYUK_DISABLED": "true"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 passed" in p.stdout


def test_reuse_keeps_one_cluster_across_sessions() -> None:
    """reuse=True: the cluster outlives the `with`, and the next reuse=True with the same settings adopts it."""
    settings = {"kafka": {"num_partitions": 7}}  # settings of this test only: its own reuse identity
    first = KafkaCluster(nodes=1, reuse=True, **settings)
    try:
        with first:
            first.create_topic("kept", partitions=1, replication_factor=1)
        ids = sorted(c.id for c in _containers(first.spec.name))  # type: ignore[attr-defined]
        assert ids, "a reused cluster must survive its with-block"
        second = KafkaCluster(nodes=1, reuse=True, **settings)
        assert second.spec.name == first.spec.name
        with second:
            assert sorted(c.id for c in _containers(second.spec.name)) == ids  # type: ignore[attr-defined]
            assert second.bootstrap_servers == first.bootstrap_servers
            assert second.partition_leader("kept", 0) == 1
    finally:
        first.stop()
        from kctl.runtime.docker_api import remove_by_label

        remove_by_label(first.spec.name, docker.from_env())
    assert _containers(first.spec.name) == []


def test_split_topology() -> None:
    """topology: split runs zk1..3 and kafka1..3; status, readiness and topics work the same."""
    with KafkaCluster(nodes=3, topology="split") as cluster:
        assert cluster.brokers() == [1, 2, 3]
        assert sorted(cluster.zookeeper_modes()) == ["zk1", "zk2", "zk3"]
        st = cluster.status()
        assert st.health == "healthy"
        assert {n.node: tuple(n.processes) for n in st.nodes} == {
            "zk1": ("zookeeper",), "zk2": ("zookeeper",), "zk3": ("zookeeper",),
            "kafka1": ("kafka",), "kafka2": ("kafka",), "kafka3": ("kafka",)}
        cluster.create_topic("s", partitions=3, replication_factor=3)
        assert cluster.partition_leader("s", 0) in (1, 2, 3)
