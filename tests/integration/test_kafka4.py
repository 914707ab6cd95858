"""Kafka 4 (issue #26): `kctl apply` of `versions.kafka: 4.3.1` on a cluster on KRaft rolls every node onto the new
release, its container made again from the new image, under an acks=all load, then raises metadata.version; a
node's controller and broker restart together (`kctl restart --service node`); a cluster still on ZooKeeper is
refused Kafka 4 before anything is made.

What kctl says is checked against the nodes themselves (the image each container runs, the release's jar in it,
`kafka-features.sh describe` run in a node by hand) and the records against kcat, an independent reader.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.load import Load, kcat_values
from tests.integration.ports import away_from_defaults

pytestmark = pytest.mark.integration

NEW = "4.3.1"  # the newest release the image build handles here (contract.ZOOKEEPER_VERSIONS)


def kctl(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, f"{' '.join(p.args[3:])}: {p.stdout[-3000:]}\n{p.stderr[-2000:]}"
    return p.stdout + p.stderr


def in_node(container: str, script: str) -> str:
    p = subprocess.run(["docker", "exec", container, "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_kafka_4_is_refused_for_a_cluster_on_zookeeper_before_anything_is_made(tmp_path: Path) -> None:
    name = f"kt-zk4-{uuid.uuid4().hex[:6]}"
    ok(kctl(tmp_path, "init", "--name", name))
    spec = tmp_path / "kctl.yaml"
    spec.write_text(spec.read_text().replace("kafka: 3.9.1", f"kafka: {NEW}"))
    p = kctl(tmp_path, "up")
    assert p.returncode == 2 and "has no ZooKeeper mode" in p.stderr and "kctl migrate kraft" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    made = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=kctl-{name}-"], capture_output=True, text=True,
                          timeout=60).stdout.split()
    assert made == [] and not (tmp_path / ".kctl" / name / "compose.yaml").exists()


# make test upgrades the one-node cluster it has just migrated (docs/runbooks/migrate-to-kraft.md §9, in
# test_migrate_kraft.py); three nodes made on KRaft, and a node's whole restart after, are `make test-long`'s.
@pytest.mark.long
def test_apply_rolls_a_cluster_on_kraft_onto_kafka_4_under_load_and_loses_nothing(tmp_path: Path) -> None:
    name = f"kt-k4-{uuid.uuid4().hex[:6]}"
    ok(kctl(tmp_path, "init", "--kraft", "--name", name))
    away_from_defaults(tmp_path / "kctl.yaml")
    try:
        ok(kctl(tmp_path, "up"))
        bootstrap = json.loads(kctl(tmp_path, "status", "-o", "json").stdout)["bootstrap_servers"]
        ok(kctl(tmp_path, "topic", "create", "orders", "-p", "3", "-r", "3", "--config", "min.insync.replicas=2"))
        spec = tmp_path / "kctl.yaml"
        spec.write_text(spec.read_text().replace("kafka: 3.9.1", f"kafka: {NEW}"))
        # kctl diff names the new release as the containers to make again (and nothing about a ZooKeeper)
        d = kctl(tmp_path, "diff")
        said = d.stdout + d.stderr
        assert d.returncode == 1 and "problem" not in said, said
        for i in (1, 2, 3):
            assert f"container logger{i} to make again: image: kctl/node:3.9.1 -> kctl/node:{NEW}" in said
        with Load(bootstrap, "orders", max_seconds=600) as load:
            applied = ok(kctl(tmp_path, "apply", "--yes"))
            # a node on KRaft restarted whole without a new container: broker down, controller down and up (the
            # quorum whole again), broker up
            restarted = ok(kctl(tmp_path, "restart", "logger2", "--service", "node", "--yes"))
        print(f"\nupgrade to {NEW}: {len(load.acked)} acknowledged, longest stall {load.stall:.1f} s")
        raised = re.search(r"metadata\.version: 3\.9-IV0 -> (\S+)", applied)
        assert raised, applied[-3000:]
        level = raised.group(1)  # the newest level the release supports, e.g. 4.1-IV1 for 4.1.1
        assert level.startswith(NEW.rsplit(".", 1)[0] + "-IV"), level
        for i in (1, 2, 3):
            assert f"logger{i} node: making the container again" in applied
        assert "controller process exited" in restarted and "the KRaft controller quorum whole again" in restarted
        assert load.errors == [] and len(load.acked) > 1000
        read = kcat_values(bootstrap, "orders")
        assert set(load.acked) <= set(read), f"lost: {sorted(set(load.acked) - set(read))[:20]}"
        assert len(read) == len(set(read))  # idempotent: no value twice
        for i in (1, 2, 3):  # what each node runs: the new image and release, the cluster at its metadata.version
            c = f"kctl-{name}-logger{i}-1"
            image = subprocess.run(["docker", "inspect", "-f", "{{.Config.Image}}", c], capture_output=True,
                                   text=True, timeout=60).stdout.strip()
            assert image == f"kctl/node:{NEW}"
            assert NEW in in_node(c, "ls /opt/kafka/libs/ | grep '^kafka_2.13-'")
        described = in_node(f"kctl-{name}-logger1-1", "KAFKA_HEAP_OPTS=-Xmx128m /opt/kafka/bin/kafka-features.sh"
                                                     " --bootstrap-server logger1:9092 describe")
        assert any("metadata.version" in line and f"FinalizedVersionLevel: {level}" in line
                   for line in described.splitlines()), described
        st = json.loads(kctl(tmp_path, "status", "-o", "json").stdout)
        assert (st["health"], st["metadata"]) == ("healthy", "kraft"), st["problems"]
        d = kctl(tmp_path, "diff")  # what runs is kctl.yaml now; the dynamic configs read from Kafka's metadata
        assert d.returncode == 0 and "no drift" in d.stdout + d.stderr, d.stdout + d.stderr
    finally:
        kctl(tmp_path, "down", "--volumes", timeout=300)
