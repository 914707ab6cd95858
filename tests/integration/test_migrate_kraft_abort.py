"""A `kctl migrate kraft next` that cannot finish is rolled back: on a one-node cluster whose KRaft controller is
held down (the image's hold: its program waits instead of starting the JVM), `next` times out at its
controller-quorum step and leaves the transition under way; `kctl migrate kraft rollback` stops it, stops and
removes the controller, and the cluster is back on ZooKeeper, healthy, with nothing under way, no controller's
file in the state dir and no controller running in the node (read in its process table)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kctl import contract
from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration


@pytest.fixture()
def single() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1) as c:
        yield c


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.long  # a start, a 20 s timeout and a rollback (about 90 s): `make test-long`
def test_a_next_stuck_at_the_controller_quorum_is_rolled_back(single: KafkaCluster) -> None:
    code, out = single.exec("logger1", ["touch", contract.hold_file("controller")])
    assert code == 0, out
    stuck = kctl(single, "migrate", "kraft", "next", "--yes", "--timeout", "20")
    assert stuck.returncode != 0 and "controller quorum" in stuck.stderr, stuck.stderr[-2000:]
    assert "Traceback" not in stuck.stderr
    st = json.loads(kctl(single, "migrate", "kraft", "status", "-o", "json").stdout)
    assert st["under_way"]["target"] == "controllers" and "start-controllers" in st["under_way"]["done"]
    # anything but the rollback is still refused while it is under way
    refused = kctl(single, "migrate", "kraft", "finalize", "--yes")
    assert refused.returncode != 0 and "`kctl migrate kraft rollback` stops it" in refused.stderr

    back = kctl(single, "migrate", "kraft", "rollback", "--yes", "--timeout", "60")
    assert back.returncode == 0, back.stderr[-3000:]
    assert "stopping the next to controllers" in back.stderr and "remove-controllers" in back.stderr
    st = json.loads(kctl(single, "migrate", "kraft", "status", "-o", "json").stdout)
    assert (st["phase"], st["under_way"], st["kept"]) == ("zookeeper", None, {})
    assert "aborted" in st["history"][0] and st["history"][-1]["phase"] == "zookeeper"
    conf = single.state_dir / "logger1" / "conf"
    assert not (conf / "controller.properties").exists() and not (conf / "cluster-id").exists()
    code, out = single.exec("logger1", ["rm", "-f", contract.hold_file("controller")])
    assert code == 0, out
    code, procs = single.exec("logger1", ["sh", "-c", "sleep 3; ps -eo args"])
    assert "kafka.Kafka /etc/kctl/controller.properties" not in procs and "idle controller" in procs, procs
    healthy = kctl(single, "status", "--wait", "120", "-o", "json")
    assert healthy.returncode == 0 and json.loads(healthy.stdout)["health"] == "healthy", healthy.stdout[-2000:]
