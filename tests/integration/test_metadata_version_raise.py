"""An owed raise of metadata.version (kraft.json's metadata_version_pending, what a `kctl apply` of a new release
killed in its roll leaves) on a real cluster on KRaft: `kctl migrate kraft status` names the command, `kctl
migrate kraft raise-metadata-version` asks Kafka's own kafka-features.sh in the node (here the level is already
the newest the release supports) and clears it; an owed raise left again is cleared by `kctl up`. The level kctl
records is the one kafka-features.sh describes, run in the node by hand."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kctl.kraft import phases as ph
from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1, metadata="kraft") as c:
        yield c


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                          text=True, timeout=timeout)


def test_an_owed_raise_is_shown_raised_by_hand_and_by_up(cluster: KafkaCluster) -> None:
    code, described = cluster.exec("logger1", ["sh", "-c", "KAFKA_HEAP_OPTS=-Xmx128m kafka-features.sh"
                                                           f" --bootstrap-server {cluster.internal_bootstrap_servers}"
                                                           " describe"])
    assert code == 0, described
    level = re.search(r"Feature: metadata\.version\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
                      r"FinalizedVersionLevel: (\S+)", described)
    assert level, described
    ph.metadata_version_owed(cluster.state_dir, "3.9.1")
    st = json.loads(kctl(cluster, "migrate", "kraft", "status", "-o", "json").stdout)
    assert st["metadata_version_pending"] == {"release": "3.9.1", "run": "kctl migrate kraft raise-metadata-version"}
    shown = kctl(cluster, "migrate", "kraft", "status")
    assert "owed" in shown.stdout and "kctl migrate kraft raise-metadata-version" in shown.stdout, shown.stdout

    raised = kctl(cluster, "migrate", "kraft", "raise-metadata-version", "-o", "json")
    assert raised.returncode == 0, raised.stderr[-2000:]
    assert json.loads(raised.stdout) == {"cluster": cluster.spec.name, "before": level.group(1),
                                         "after": level.group(1)}
    record = ph.read(cluster.state_dir)
    assert (record.metadata_version_pending, record.metadata_version) == (None, level.group(1))

    ph.metadata_version_owed(cluster.state_dir, "3.9.1")  # owed again: `kctl up` raises it once every node serves
    up = kctl(cluster, "up")
    assert up.returncode == 0, up.stderr[-2000:]
    assert "metadata.version: " in up.stdout + up.stderr
    assert ph.read(cluster.state_dir).metadata_version_pending is None
