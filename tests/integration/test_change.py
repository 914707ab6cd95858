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

from kctl.roll.plan import GATE_URP, URP_STABLE_S
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


def test_apply_makes_a_dynamic_change_without_restart(cluster: KafkaCluster) -> None:
    from tests.integration.test_restart import jvm_pids

    before = jvm_pids(cluster)
    edit_spec(cluster, {"kafka": {"log_retention_bytes": 1073741824}})
    p = kctl(cluster, "apply", "--dry-run", "-o", "json")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["restarts"] == [] and plan["recreate"] == {}
    assert sorted((d["broker"], d["key"], d["value"]) for d in plan["dynamic"]) == \
        [(b, "log.retention.bytes", "1073741824") for b in (1, 2, 3)]
    assert jvm_pids(cluster) == before and diff(cluster)[0] == 1  # a dry run changes nothing

    p = kctl(cluster, "apply", "--yes")
    assert p.returncode == 0, p.stderr
    assert "set dynamically, no restart" in p.stderr and "restarted nothing" in p.stderr, p.stderr
    assert jvm_pids(cluster) == before
    code, res = diff(cluster)
    assert code == 0, res
    from kctl.kafka import configs
    from kctl.kafka.client import Target

    for b in (1, 2, 3):
        d = configs.describe(Target.of(cluster.spec), configs.Entity("broker", str(b)), keys=["log.retention.bytes"])
        assert d.rows[0].value == "1073741824", d.rows


def test_apply_rolls_exactly_the_node_whose_static_config_changed(cluster: KafkaCluster) -> None:
    from tests.integration.test_restart import jvm_pids

    before = jvm_pids(cluster)
    data = yaml.safe_load(cluster.spec_file.read_text())
    node = next(n for n in data["nodes"] if n["hostname"] == "logger2")
    node.setdefault("overrides", {}).setdefault("kafka", {})["log.retention.hours"] = 100
    cluster.spec_file.write_text(yaml.safe_dump(data, sort_keys=False))

    dry = kctl(cluster, "apply", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "rolling restart" in dry.stdout and "log.retention.hours: 168 -> 100" in dry.stdout, dry.stdout
    assert "restart order (kafka): logger2" in dry.stdout, dry.stdout

    p = kctl(cluster, "apply", "--yes", "-o", "json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert [(s["host"], s["service"]) for r in res["rolls"] for s in r["steps"]] == [("logger2", "kafka")]
    assert GATE_URP.format(s=URP_STABLE_S) in p.stderr
    after = jvm_pids(cluster)
    assert {k for k in before if after.get(k) != before[k]} == {("logger2", "kafka")}, (before, after)
    assert cluster.status().health == "healthy"
    code, d = diff(cluster)
    assert code == 0, d
    again = kctl(cluster, "apply", "--dry-run")
    assert "nothing to apply" in again.stdout, again.stdout


def container_ids(cluster: KafkaCluster) -> dict[str, str]:
    import docker

    from kctl.contract import LABEL_CLUSTER, LABEL_SERVICE

    return {c.labels[LABEL_SERVICE]: c.id for c in
            docker.from_env().containers.list(filters={"label": f"{LABEL_CLUSTER}={cluster.spec.name}"})}


def test_apply_makes_again_only_the_container_whose_settings_changed(cluster: KafkaCluster) -> None:
    from kctl.runtime.ports import free_ports
    from tests.integration.test_restart import jvm_pids

    before, pids = container_ids(cluster), jvm_pids(cluster)
    jmx = free_ports(1)[0]
    data = yaml.safe_load(cluster.spec_file.read_text())
    next(n for n in data["nodes"] if n["hostname"] == "logger2")["jmx_port"] = jmx
    cluster.spec_file.write_text(yaml.safe_dump(data, sort_keys=False))

    dry = kctl(cluster, "apply", "--dry-run", "-o", "json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert list(plan["recreate"]) == ["logger2"] and f"KAFKA_JMX_PORT: None -> {jmx}" in plan["recreate"]["logger2"][0]
    assert [(s["host"], s["service"], s["recreate"]) for r in plan["roll"] for s in r["steps"]] == \
        [("logger2", "node", True)]

    p = kctl(cluster, "apply", "--yes")
    assert p.returncode == 0, p.stderr
    assert "making the container again" in p.stderr and "answers srvr with a mode" in p.stderr, p.stderr
    after = container_ids(cluster)
    assert {h for h in before if after[h] != before[h]} == {"logger2"}, (before, after)
    now = jvm_pids(cluster)
    assert {k for k in pids if now.get(k) != pids[k]} == {("logger2", "zookeeper"), ("logger2", "kafka")}
    import socket

    socket.create_connection(("127.0.0.1", jmx), timeout=5).close()  # the new port is published
    assert cluster.status().health == "healthy"
    assert diff(cluster)[0] == 0
    assert "nothing to apply" in kctl(cluster, "apply", "--dry-run").stdout


# ----- runbooks, executed as written -------------------------------------------------------------------


def test_runbook_config_change(cluster: KafkaCluster) -> None:
    from tests.integration import runbook

    path = runbook.RUNBOOKS / "config-change.md"
    (edit,) = runbook.blocks(path.read_text(), "yaml")
    done: list[str] = []

    def before(step: runbook.Step) -> None:
        if step.command == "kctl diff" and step.exit_code == 1 and not done:
            edit_spec(cluster, yaml.safe_load(edit))  # the operator's edit, exactly as the runbook shows it
            done.append(step.command)

    from tests.integration.test_restart import jvm_pids

    pids = jvm_pids(cluster)
    ran = runbook.run(path, cluster.spec_file, state_dir=cluster.state_dir, before=before)
    assert done and [r.step.command for r in ran][-2:] == ["kctl diff", "kctl status"]
    assert jvm_pids(cluster) == pids  # a dynamic change: nothing restarted
    from kctl.kafka import configs
    from kctl.kafka.client import Target

    d = configs.describe(Target.of(cluster.spec), configs.Entity("broker", "1"), keys=["log.cleaner.threads"])
    assert d.rows[0].value == "2"


def test_runbook_zookeeper_disk_full(cluster: KafkaCluster) -> None:
    from tests.integration import runbook

    runbook.run(runbook.RUNBOOKS / "zookeeper-disk-full.md", cluster.spec_file, state_dir=cluster.state_dir)


def test_runbook_broker_will_not_rejoin(cluster: KafkaCluster) -> None:
    from tests.integration import runbook

    def before(step: runbook.Step) -> None:
        if step.line == first:  # the symptom: broker 3's process stopped and not started again
            cluster.stop(3, service="kafka")
            cluster.wait_for(lambda s: s.brokers_registered == 2, timeout=60, description="broker 3 gone")

    path = runbook.RUNBOOKS / "broker-will-not-rejoin.md"
    first = runbook.steps(path.read_text())[0].line
    runbook.run(path, cluster.spec_file, state_dir=cluster.state_dir, before=before)
    st = cluster.status()
    assert st.health == "healthy" and st.brokers_registered == 3, st.problems


def test_runbook_replace_failed_node(cluster: KafkaCluster) -> None:
    from tests.integration import runbook

    topic = "replace-node"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    from kctl.kafka.client import Target, producer

    p = producer(Target.of(cluster.spec), acks="all")
    for i in range(300):
        p.produce(topic, value=f"{i}".encode())
    assert p.flush(30) == 0
    data = cluster.state_dir / "logger3" / "data"

    runbook.run(runbook.RUNBOOKS / "replace-failed-node.md", cluster.spec_file, state_dir=cluster.state_dir)

    # broker 3 holds its replicas again, copied back from the others, and is in every ISR
    from kctl.kafka.client import Target, admin

    md = admin(Target.of(cluster.spec)).list_topics(topic, timeout=10).topics[topic]
    assert all(3 in p.isrs for p in md.partitions.values()), {i: p.isrs for i, p in md.partitions.items()}
    assert any(f.name.startswith(f"{topic}-") for f in data.rglob("*") if f.is_dir())
    assert cluster.status().health == "healthy"
