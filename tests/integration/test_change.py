"""kctl diff and kctl apply on a cluster of their own (apply restarts brokers and edits kctl.yaml), and the
runbooks that change a running cluster, executed as written through the shared runbook runner.

Each test leaves the cluster as it found it: kctl.yaml back to its first content, applied, and healthy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kctl.testing.cluster import KafkaCluster
from kctl.testing.plugin import restore

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3) as c:
        yield c


@pytest.fixture()
def cluster(own_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    original = own_cluster.spec_file.read_text()
    yield own_cluster
    if own_cluster.spec_file.read_text() != original:
        own_cluster.spec_file.write_text(original)
        kctl(own_cluster, "apply", "--yes")
    restore(own_cluster)


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)],
                          capture_output=True, text=True, timeout=timeout)


def edit_spec(cluster: KafkaCluster, change: dict[str, Any]) -> None:
    """Merge ``change`` into the cluster's kctl.yaml, as an operator's edit would."""
    data = yaml.safe_load(cluster.spec_file.read_text())

    def merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
        for k, v in extra.items():
            if isinstance(v, dict) and isinstance(into.get(k), dict):
                merge(into[k], v)
            else:
                into[k] = v

    merge(data, change)
    cluster.spec_file.write_text(yaml.safe_dump(data, sort_keys=False))


def diff(cluster: KafkaCluster) -> tuple[int, dict[str, Any]]:
    p = kctl(cluster, "diff", "-o", "json")
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def test_diff_sees_a_dynamic_override_and_its_removal(cluster: KafkaCluster) -> None:
    code, res = diff(cluster)
    assert code == 0 and res["clean"] and res["rows"] == [] and res["compared"] > 100, res

    p = kctl(cluster, "config", "set", "--broker", "2", "log.cleaner.threads=2")
    assert p.returncode == 0, p.stderr
    code, res = diff(cluster)
    assert code == 1 and not res["clean"], res
    assert [(r["node"], r["key"], r["broker_override"], r["running"], r["drift"]) for r in res["rows"]] == \
        [("logger2", "log.cleaner.threads", "2", "2", ["dynamic override"])]
    table = kctl(cluster, "diff")
    assert table.returncode == 1 and "log.cleaner.threads" in table.stdout and "broker=2" in table.stdout

    p = kctl(cluster, "config", "delete", "--broker", "2", "log.cleaner.threads")
    assert p.returncode == 0, p.stderr
    code, res = diff(cluster)
    assert code == 0 and res["clean"], res


def test_diff_sees_kctl_yaml_edited_but_not_applied(cluster: KafkaCluster) -> None:
    edit_spec(cluster, {"kafka": {"log_retention_hours": 100}})
    code, res = diff(cluster)
    assert code == 1
    rows = {(r["node"], r["key"]): r for r in res["rows"]}
    assert set(rows) == {(f"logger{i}", "log.retention.hours") for i in (1, 2, 3)}, rows
    assert all(r["spec"] == "100" and r["rendered"] == "168" and r["running"] == "168"
               and r["drift"] == ["not applied"] for r in rows.values())
