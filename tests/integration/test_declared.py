"""kctl.yaml's declared topics, quotas, users and ACLs on the shared secured cluster: an export
round trip, apply --dry-run changing nothing, apply creating what is declared, changes made by hand found by
diff and put back by apply, --prune deleting only what the file does not name (never Kafka's or kctl's own), a
shrink refused with nothing changed. What the cluster holds is read with Kafka's own tools in a node."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.cli import kctl, secured, tool_config
from tests.kafka_tools import parse_kafka_configs

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka_cluster(secured_cluster: Any) -> Any:
    """The session's secured cluster (tests/integration/conftest.py): every section, users and ACLs too, on one run
    (a plain cluster's topics and quotas take the same path, less the users' and ACLs')."""
    return secured_cluster


def tool(cluster: Any, name: str, *args: str) -> str:
    rc, out = cluster.exec("logger1", [f"/opt/kafka/bin/{name}", "--bootstrap-server", "logger1:9092",
                                       *tool_config(cluster), *args], stderr=False)
    assert rc == 0, out
    return out


class Copy:
    """The cluster's kctl.yaml in a directory of the test's, on the same state dir, with sections of its own."""

    def __init__(self, cluster: Any, where: Path) -> None:
        self.cluster, self.where = cluster, where
        self.base = yaml.safe_load(cluster.spec_file.read_text())
        self.base["state_dir"] = str(Path(cluster.state_dir).resolve())
        self.file = where / "kctl.yaml"
        self.write({})

    def write(self, sections: dict[str, Any]) -> None:
        self.file.write_text(yaml.safe_dump({**self.base, **sections}, sort_keys=False))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(self.file)], capture_output=True,
                              text=True, timeout=300, cwd=self.where)


def own_configs(cluster: Any, topic: str) -> dict[str, str]:
    """The topic's own (dynamic) configs, as Kafka's kafka-configs.sh --describe lists them."""
    out = tool(cluster, "kafka-configs.sh", "--entity-type", "topics", "--entity-name", topic, "--describe")
    return {k: v["value"] for k, v in parse_kafka_configs(out).items()}


def test_declared_resources_export_apply_drift_and_prune(kafka_cluster: Any, tmp_path: Path) -> None:
    c = kafka_cluster
    uid = uuid.uuid4().hex[:6]
    t1, t2, t3 = f"decl-{uid}-a", f"decl-{uid}-b", f"decl-{uid}-undeclared"
    rf = min(3, len(c.spec.nodes))
    assert kctl(c, "topic", "create", t3, "-p", "1", "-r", "1").returncode == 0
    copy = Copy(c, tmp_path)
    exported = copy.run("export")
    assert exported.returncode == 0, exported.stderr
    live = yaml.safe_load(exported.stdout)
    names = [t["name"] for t in live["topics"]]
    assert t3 in names and not [n for n in names if n.startswith("__")], names
    # the export round trip: the live cluster as declared diffs clean (its declared part)
    copy.write(live)
    d = copy.run("diff", "-o", "json")
    assert d.returncode in (0, 1) and yaml.safe_load(d.stdout)["declared"]["clean"], d.stdout[-2000:]

    declared = dict(live)
    declared["topics"] = [t for t in live["topics"] if t["name"] != t3] + [
        {"name": t1, "partitions": 3, "replication_factor": rf, "configs": {"retention.ms": 3600000}},
        {"name": t2, "partitions": 1, "replication_factor": 1, "configs": {"cleanup.policy": "compact"}}]
    declared["quotas"] = [*live.get("quotas", []), {"client": f"c-{uid}", "producer_byte_rate": 1048576}]
    if secured(c):
        pw = tmp_path / "app.password"
        pw.write_text(f"pw-{uuid.uuid4().hex}\n")
        os.chmod(pw, 0o600)
        declared["users"] = [*live.get("users", []), {"name": f"app-{uid}", "password_file": "app.password"}]
        declared["acls"] = [*live.get("acls", []),
                            {"principal": f"User:app-{uid}", "operation": "read", "resource_type": "topic",
                             "resource": t1},
                            {"principal": f"User:app-{uid}", "operation": "write", "resource_type": "topic",
                             "resource": f"decl-{uid}-", "pattern": "prefixed"}]
    copy.write(declared)

    dry = copy.run("apply", "--dry-run")
    said = dry.stdout + dry.stderr
    assert dry.returncode == 0, said
    assert f"create topic '{t1}': 3 partition(s)" in said and f"topic '{t3}': not in kctl.yaml (kept" in said, said
    listed = tool(c, "kafka-topics.sh", "--list").split()
    assert t1 not in listed and t2 not in listed  # a dry run changes nothing

    done = copy.run("apply", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert own_configs(c, t1) == {"retention.ms": "3600000"} and own_configs(c, t2) == {"cleanup.policy": "compact"}
    described = tool(c, "kafka-topics.sh", "--describe", "--topic", t1)
    assert "PartitionCount: 3" in described and f"ReplicationFactor: {rf}" in described, described
    quota = tool(c, "kafka-configs.sh", "--entity-type", "clients", "--entity-name", f"c-{uid}", "--describe")
    assert "producer_byte_rate=1048576" in quota, quota
    if secured(c):
        acls = tool(c, "kafka-acls.sh", "--list", "--principal", f"User:app-{uid}")
        assert f"name={t1}, patternType=LITERAL" in acls and f"name=decl-{uid}-, patternType=PREFIXED" in acls, acls
        from confluent_kafka.admin import AdminClient

        login = {**c.client_config(), "sasl.username": f"app-{uid}", "sasl.password": pw.read_text().strip()}
        assert AdminClient(login).list_topics(timeout=30).topics  # the declared user logs in with its file's password

    # by hand: t1's retention changed, a config added to t2
    tool(c, "kafka-configs.sh", "--entity-type", "topics", "--entity-name", t1, "--alter", "--add-config",
         "retention.ms=999")
    tool(c, "kafka-configs.sh", "--entity-type", "topics", "--entity-name", t2, "--alter", "--add-config",
         "segment.ms=600000")
    d = copy.run("diff")
    said = d.stdout + d.stderr
    assert d.returncode == 1 and f"set configs of topic '{t1}': retention.ms=3600000 (was 999)" in said, said
    assert f"reset configs of topic '{t2}' to the cluster's default: segment.ms (was 600000)" in said, said
    pruned = copy.run("apply", "--prune", "--yes")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    listed = tool(c, "kafka-topics.sh", "--list").split()
    assert t3 not in listed and t1 in listed and "__consumer_offsets" in listed
    assert own_configs(c, t1) == {"retention.ms": "3600000"} and own_configs(c, t2) == {"cleanup.policy": "compact"}
    d = copy.run("diff", "-o", "json")
    assert yaml.safe_load(d.stdout)["declared"]["clean"], d.stdout[-2000:]

    # a replication factor declared higher: named by diff, made by apply --reassign through a reassignment
    if len(c.spec.nodes) >= 2:
        declared["topics"] = [t if t.get("name") != t2 else {**t, "replication_factor": 2}
                              for t in declared["topics"]]
        copy.write(declared)
        d = copy.run("diff")
        assert d.returncode == 1 and f"--topics {t2} --replication-factor 2" in d.stdout + d.stderr, d.stderr
        moved = copy.run("apply", "--reassign", "--throttle", "50MB/s", "--yes")
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert "ReplicationFactor: 2" in tool(c, "kafka-topics.sh", "--describe", "--topic", t2)
        assert yaml.safe_load(copy.run("diff", "-o", "json").stdout)["declared"]["clean"]

    # a shrink: refused, nothing changed
    declared["topics"] = [t if t.get("name") != t1 else {**t, "partitions": 1} for t in declared["topics"]]
    copy.write(declared)
    shrink = copy.run("apply", "--yes")
    assert shrink.returncode == 2 and "cannot shrink from 3 to 1 partitions" in shrink.stderr, shrink.stderr
    assert "Traceback" not in shrink.stderr
    assert "PartitionCount: 3" in tool(c, "kafka-topics.sh", "--describe", "--topic", t1)
    for t in (t1, t2):
        kctl(c, "topic", "delete", t, "--yes")
    kctl(c, "quota", "delete", "--client", f"c-{uid}", "producer_byte_rate")
    if secured(c):
        kctl(c, "user", "delete", f"app-{uid}", "--yes")
