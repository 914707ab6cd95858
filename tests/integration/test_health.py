"""Health against real containers: Docker's own healthcheck and kctl's status agree, on non-default ports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kctl.cluster.health import ClusterStatus
from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration


def test_healthcheck_probes_the_ports_of_the_spec() -> None:
    # Neither port is the image's default (2181, 9092): the healthcheck must read them from the rendered files.
    with KafkaCluster(nodes=1, zookeeper={"client_port": 2281}, kafka={"internal_port": 9192}) as cluster:
        def all_healthy(st: ClusterStatus) -> bool:
            return all(n.health == "healthy" for n in st.nodes)

        st = cluster.wait_for(all_healthy, timeout=90, description="Docker reports every container healthy")
        assert st.health == "healthy", st.problems
        assert [n.health for n in st.nodes] == ["healthy"]
        rc, out = cluster.exec(1, ["/usr/local/bin/kctl-healthcheck"])
        assert rc == 0 and "port 2281" in out and "port 9192 open" in out, out

        p = subprocess.run([sys.executable, "-m", "kctl", "status", "-f", str(cluster.spec_file), "-o", "json"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        assert '"health": "healthy"' in p.stdout


def test_each_broker_answers_for_itself_and_a_paused_one_costs_nothing(kafka_cluster: KafkaCluster) -> None:
    """librdkafka bootstrapped with one broker's address asks that broker (sparse connections): fetch_each's
    views are the brokers' own; DescribeCluster's controller is the cluster's; a paused broker, even the
    controller, neither fails nor slows fetch_any beyond its timeout."""
    import time

    from kctl.kafka import describe as kmd

    spec = kafka_cluster.spec
    kafka_cluster.wait_until_healthy(timeout=120)
    boot = kafka_cluster.bootstrap_servers
    asked = {f"{spec.node_address(n)}:{spec.client_port(n)}": n.id for n in spec.brokers}
    views, errors = kmd.fetch_each(boot, 5.0)
    assert not errors and {v.answered_by: v.broker for v in views} == asked
    md = kmd.fetch_any(boot, 5.0)
    assert md.cluster_id and md.controller == kafka_cluster.controller() and md.brokers == tuple(sorted(asked.values()))
    assert all(v.cluster_id == md.cluster_id for v in views)
    ctrl = md.controller
    assert ctrl is not None
    kafka_cluster.pause(ctrl)
    try:
        started = time.monotonic()
        md = kmd.fetch_any(boot, 2.0)
        assert time.monotonic() - started < 1.5, "a paused controller held fetch_any"
        assert md.broker != ctrl and md.cluster_id
        started = time.monotonic()
        views, errors = kmd.fetch_each(boot, 2.0)
        assert time.monotonic() - started < 2.0 + kmd.GRACE + 0.5
        assert {v.broker for v in views} == set(asked.values()) - {ctrl} and len(errors) == 1
    finally:
        kafka_cluster.unpause(ctrl)
    kafka_cluster.wait_until_healthy(timeout=120)
