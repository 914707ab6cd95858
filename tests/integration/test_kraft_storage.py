"""KRaft storage is formatted only where kctl made it: a cluster made on KRaft formats at its first `kctl up` (the
permits kctl left in each new node's data dir are gone afterwards); a controller's metadata dir and a broker's
log dir that come back empty (a disk unmounted: the mount point left, empty) are refused, not formatted: the
service waits as UNFORMATTED, the node's log and `kctl status` say why and what to do, and once the disk is back
the service starts by itself and the cluster is healthy with its data. `kctl node format-storage` refuses a
service that runs. What kctl says is checked against the node (meta.properties, its process table)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kctl import contract
from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration

META = "/var/opt/kctl/controller/metadata"
LOGS = "/var/opt/kctl/kafka/data"


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1, metadata="kraft") as c:
        yield c


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                          text=True, timeout=timeout)


def root(cluster: KafkaCluster, script: str) -> str:
    from kctl.runtime.engine import engines

    code, out = engines.exec_in(cluster.spec, "logger1", ["sh", "-c", script], user="root", timeout=60)
    assert code == 0, out
    return out


def state(cluster: KafkaCluster, service: str) -> str:
    from kctl.runtime.engine import services

    return services.process_state(cluster.spec, "logger1", service)


def wait_state(cluster: KafkaCluster, service: str, want: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while (st := state(cluster, service)) != want:
        assert time.monotonic() < deadline, f"logger1 {service} {st}, not {want}"
        time.sleep(1)


@pytest.mark.parametrize(("service", "storage"), [("controller", META), ("kafka", LOGS)])
def test_empty_storage_kctl_did_not_make_is_refused_until_the_disk_is_back(cluster: KafkaCluster, service: str,
                                                                            storage: str) -> None:
    from kctl.runtime.engine import engines

    # the first `kctl up` formatted both and took the permits away
    assert root(cluster, f"ls -a {contract.DATA_ROOT} | grep -c '^{contract.FORMAT_PERMIT_PREFIX}' || true").strip() \
        == "0"
    assert "cluster.id=" in root(cluster, f"cat {storage}/meta.properties")
    refused = kctl(cluster, "node", "format-storage", "logger1", "--service", service, "--yes")
    assert refused.returncode == 2 and "not UNFORMATTED: nothing to format" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr

    eng = engines.for_spec(cluster.spec)
    eng.stop_service(cluster.spec, "logger1", service)
    # the disk unmounted: its mount point stays, empty
    root(cluster, f"mv {storage} {storage}.unmounted && mkdir {storage} && chown 555:555 {storage}")
    eng.start_service(cluster.spec, "logger1", service)
    wait_state(cluster, service, "UNFORMATTED")
    time.sleep(3)  # it stays so: nothing formats the empty dir
    assert state(cluster, service) == "UNFORMATTED"
    assert root(cluster, f"ls -A {storage}").strip() == ""  # not formatted
    log = root(cluster, f"cat /var/log/kctl/{service}/{service}.out")
    assert f"REFUSED to format the {service}'s storage on logger1" in log
    assert f"kctl node format-storage logger1 --service {service}" in log
    st = kctl(cluster, "status", "-o", "json")
    problems = json.dumps(json.loads(st.stdout)["problems"])
    assert st.returncode != 0 and f"{service} UNFORMATTED" in problems, st.stdout[-2000:]
    assert f"kctl node format-storage logger1 --service {service}" in problems

    root(cluster, f"rmdir {storage} && mv {storage}.unmounted {storage}")  # mounted again
    wait_state(cluster, service, "RUNNING")
    back = kctl(cluster, "status", "--wait", "120", "-o", "json")
    assert back.returncode == 0 and json.loads(back.stdout)["health"] == "healthy", back.stdout[-2000:]
