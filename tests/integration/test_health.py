"""Health against real containers: Docker's own healthcheck and kctl's status agree, on non-default ports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kctl.health import ClusterStatus
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
