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


@pytest.mark.long  # three forward steps and a finalize on one node (about 5 min): `make test-long`
def test_a_finalize_killed_between_its_steps_is_resumed_and_ends_on_kraft(single: KafkaCluster) -> None:
    """Finalize is the one transition with no way back: a kctl SIGKILLed during it (once the controllers are
    rolled) leaves the record naming it, every other action refused but the finalize itself, which resumes
    from the step it reached and ends on KRaft, healthy, with every record written before it still readable."""
    import os
    import signal
    import time

    single.create_topic("before-finalize", partitions=2, replication_factor=1)
    from confluent_kafka import Producer

    p = Producer(single.client_config())
    for i in range(200):
        p.produce("before-finalize", str(i).encode())
    assert p.flush(30) == 0
    for _ in range(3):
        step = kctl(single, "migrate", "kraft", "next", "--yes")
        assert step.returncode == 0, step.stderr[-3000:]
    kraft_json = single.state_dir / "kraft.json"
    log = single.workdir / "finalize.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kctl", "migrate", "kraft", "finalize", "--yes", "-f",
                                 str(single.spec_file)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 600
        try:
            while time.monotonic() < deadline and proc.poll() is None:  # bounded: 600 s
                try:
                    done = json.loads(kraft_json.read_text()).get("done") or []
                except ValueError:
                    done = []
                if "roll-controllers" in done:
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    rec = json.loads(kraft_json.read_text())
    assert rec["action"] == "finalize" and rec["target"] == "kraft", (rec, log.read_text()[-2000:])
    refused = kctl(single, "migrate", "kraft", "rollback", "--yes")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    again = kctl(single, "migrate", "kraft", "finalize", "--yes")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming the finalize to kraft" in again.stderr and "roll-controllers" in again.stderr
    st = json.loads(kctl(single, "migrate", "kraft", "status", "-o", "json").stdout)
    assert st["phase"] == "kraft" and st["under_way"] is None
    healthy = kctl(single, "status", "--wait", "120", "-o", "json")
    assert healthy.returncode == 0 and json.loads(healthy.stdout)["health"] == "healthy", healthy.stdout[-2000:]
    out = subprocess.run(["kcat", "-b", single.bootstrap_servers, "-C", "-t", "before-finalize", "-e", "-q"],
                         capture_output=True, text=True, timeout=60)
    assert sorted(int(v) for v in out.stdout.split()) == list(range(200))
