"""kctl config against the shared cluster, cross-checked with kafka-configs.sh."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.kafka.configs import parse_quota_describe
from kctl.wait import Stage, wait_for_stages
from tests.integration.cli import js, kctl, tool_config
from tests.kafka_tools import parse_kafka_configs

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka_cluster(profiled_cluster: Any) -> Any:
    """This module's tests take the profile matrix's cluster (tests/integration/conftest.py)."""
    return profiled_cluster




def kafka_configs(cluster: Any, *args: str) -> str:
    rc, out = cluster.exec("logger1", ["/opt/kafka/bin/kafka-configs.sh", "--bootstrap-server", "logger1:9092",
                                       *tool_config(cluster), *args], stderr=False)
    assert rc == 0, out
    return out


def rows(d: Any) -> dict[str, Any]:
    return {r["key"]: r for r in d["rows"]}


def _wait(pred: Any, timeout: float = 15) -> None:
    wait_for_stages([Stage("the change is visible", lambda: (bool(pred()), "not yet"))], timeout=timeout, poll=0.5)


@pytest.mark.both_profiles
def test_broker_precedence_per_broker_over_cluster_default(kafka_cluster: Any) -> None:
    b = str(kafka_cluster.spec.nodes[-1].id)
    key = "log.cleaner.threads"
    try:
        assert kctl(kafka_cluster, "config", "set", f"{key}=2", "--broker", b).returncode == 0
        _wait(lambda: rows(js(kafka_cluster, "config", "describe", "--broker", b, "--key", key))[key]["value"] == "2")
        r = rows(js(kafka_cluster, "config", "describe", "--broker", b, "--key", key))[key]
        assert (r["value"], r["source"], r["update_mode"]) == ("2", "dynamic per-broker", "cluster-wide")
        assert [la["source"] for la in r["layers"]] == ["DYNAMIC_BROKER_CONFIG", "DEFAULT_CONFIG"]

        theirs = parse_kafka_configs(kafka_configs(kafka_cluster, "--entity-type", "brokers", "--entity-name", b,
                                                   "--describe"))
        assert theirs[key]["value"] == "2" and theirs[key]["synonyms"][0][0] == "DYNAMIC_BROKER_CONFIG"
        ours = js(kafka_cluster, "config", "describe", "--broker", b)
        ours_dynamic = {r["key"]: r["value"] for r in ours["rows"] if r["source"] == "dynamic per-broker"}
        assert ours_dynamic == {k: v["value"] for k, v in theirs.items()}

        # cluster-wide default: lower precedence than the per-broker value
        assert kctl(kafka_cluster, "config", "set", f"{key}=2", "--broker-default").returncode == 0
        d = rows(js(kafka_cluster, "config", "describe", "--broker-default"))
        assert d[key]["value"] == "2" and d[key]["source"] == "dynamic cluster-wide default"
        theirs_default = parse_kafka_configs(kafka_configs(kafka_cluster, "--entity-type", "brokers",
                                                           "--entity-default", "--describe"))
        assert theirs_default[key]["value"] == "2"
        r = rows(js(kafka_cluster, "config", "describe", "--broker", b, "--key", key))[key]
        assert [la["source"] for la in r["layers"]][:2] == ["DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG"]

        # delete the per-broker value: the cluster-wide default applies
        assert kctl(kafka_cluster, "config", "delete", key, "--broker", b).returncode == 0
        _wait(lambda: rows(js(kafka_cluster, "config", "describe", "--broker", b, "--key", key))[key]["source"]
              == "dynamic cluster-wide default")
        r = rows(js(kafka_cluster, "config", "describe", "--broker", b, "--key", key))[key]
        assert r["source"] == "dynamic cluster-wide default"
    finally:
        kctl(kafka_cluster, "config", "delete", key, "--broker", b)
        kctl(kafka_cluster, "config", "delete", key, "--broker-default")
    assert key not in rows(js(kafka_cluster, "config", "describe", "--broker-default"))


def test_all_values_agree_with_kafka_configs_all(kafka_cluster: Any) -> None:
    b = str(kafka_cluster.spec.nodes[0].id)
    ours = {r["key"]: r for r in js(kafka_cluster, "config", "describe", "--broker", b, "--all")["rows"]}
    theirs = parse_kafka_configs(kafka_configs(kafka_cluster, "--entity-type", "brokers", "--entity-name", b,
                                               "--describe", "--all"))
    assert set(theirs) == set(ours)
    for k, v in theirs.items():
        if not ours[k]["sensitive"]:
            assert ours[k]["value"] == v["value"], k
        if v["synonyms"]:
            src = {"STATIC_BROKER_CONFIG": "static server.properties", "DEFAULT_CONFIG": "Kafka default",
                   "DYNAMIC_BROKER_CONFIG": "dynamic per-broker",
                   "DYNAMIC_DEFAULT_BROKER_CONFIG": "dynamic cluster-wide default"}[v["synonyms"][0][0]]
            assert ours[k]["source"] == src, k


def test_read_only_key_is_refused_with_the_spec_setting(kafka_cluster: Any) -> None:
    p = kctl(kafka_cluster, "config", "set", "log.dirs=/tmp/x", "--broker", "1")
    assert p.returncode == 1
    assert "read-only" in p.stderr and "restart" in p.stderr and "kafka.log_dirs" in p.stderr
    p = kctl(kafka_cluster, "config", "set", "num.partitions=5", "--broker-default")
    assert p.returncode == 1 and "kafka.num_partitions" in p.stderr
    p = kctl(kafka_cluster, "config", "set", "log.cleaner.threads=2", "--broker", "99")
    assert p.returncode == 1 and "no live broker 99" in p.stderr
    p = kctl(kafka_cluster, "config", "describe", "--broker", "1", "--topic", "x")
    assert p.returncode == 2 and "exactly one entity" in p.stderr


def test_topic_config_set_keeps_other_keys(kafka_cluster: Any) -> None:
    t = f"ops-cfg-{uuid.uuid4().hex[:8]}"
    assert kctl(kafka_cluster, "topic", "create", t, "-p", "1", "-r", "1", "-c", "retention.ms=600000").returncode == 0
    try:
        assert kctl(kafka_cluster, "config", "set", "cleanup.policy=compact", "--topic", t).returncode == 0
        r = rows(js(kafka_cluster, "config", "describe", "--topic", t))
        assert r["retention.ms"]["value"] == "600000" and r["cleanup.policy"]["value"] == "compact"
        assert r["cleanup.policy"]["source"] == "dynamic topic"
        theirs = parse_kafka_configs(kafka_configs(kafka_cluster, "--entity-type", "topics", "--entity-name", t,
                                                   "--describe"))
        assert {k: v["value"] for k, v in theirs.items()} == {"retention.ms": "600000", "cleanup.policy": "compact"}
        assert kctl(kafka_cluster, "config", "delete", "cleanup.policy", "--topic", t).returncode == 0
        r = rows(js(kafka_cluster, "config", "describe", "--topic", t))
        assert "cleanup.policy" not in r and r["retention.ms"]["value"] == "600000"
        p = kctl(kafka_cluster, "config", "set", "no.such.key=1", "--topic", t)
        assert p.returncode == 1 and "no.such.key" in p.stderr
    finally:
        kctl(kafka_cluster, "topic", "delete", t, "--yes")


def test_client_and_user_quotas(kafka_cluster: Any) -> None:
    c = f"ops-client-{uuid.uuid4().hex[:6]}"
    assert kctl(kafka_cluster, "config", "set", "producer_byte_rate=1048576", "consumer_byte_rate=2097152",
                "--client", c).returncode == 0
    r = rows(js(kafka_cluster, "config", "describe", "--client", c))
    assert r["producer_byte_rate"]["value"] == "1048576" and r["consumer_byte_rate"]["value"] == "2097152"
    theirs = parse_quota_describe(kafka_configs(kafka_cluster, "--entity-type", "clients", "--entity-name", c,
                                                "--describe"))
    assert theirs == {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}
    assert kctl(kafka_cluster, "config", "delete", "producer_byte_rate", "consumer_byte_rate",
                "--client", c).returncode == 0
    assert js(kafka_cluster, "config", "describe", "--client", c)["rows"] == []
    p = kctl(kafka_cluster, "config", "set", "bogus=1", "--user", "alice")
    assert p.returncode == 2 and "not a quota" in p.stderr
    u = f"ops-user-{uuid.uuid4().hex[:6]}"
    assert kctl(kafka_cluster, "config", "set", "request_percentage=50", "--user", u).returncode == 0
    assert rows(js(kafka_cluster, "config", "describe", "--user", u))["request_percentage"]["value"] == "50"
    assert kctl(kafka_cluster, "config", "delete", "request_percentage", "--user", u).returncode == 0


@pytest.mark.both_profiles
def test_static_layer_is_what_the_broker_runs_not_todays_spec(kafka_cluster: Any, tmp_path: Path) -> None:
    # kctl.yaml edited after `up`, without another `up`: the broker still runs the old server.properties.
    b = str(kafka_cluster.spec.nodes[0].id)
    key = "min.insync.replicas"
    running = str(kafka_cluster.spec.kafka.min_insync_replicas)
    edited = yaml.safe_load(kafka_cluster.spec_file.read_text())
    edited.setdefault("kafka", {})["min_insync_replicas"] = 1
    assert running != "1"
    # Next to the cluster's own kctl.yaml: the same state dir (a copy elsewhere is another cluster's spec,
    # and kctl refuses to touch containers of another state dir).
    spec_file = kafka_cluster.workdir / f"kctl-edited-{tmp_path.name}.yaml"
    spec_file.write_text(yaml.safe_dump(edited, sort_keys=False))
    try:
        assert kctl(kafka_cluster, "config", "set", f"{key}=3", "--broker", b).returncode == 0
        p = subprocess.run([sys.executable, "-m", "kctl", "config", "describe", "--broker", b, "--key", key,
                            "-o", "json", "-f", str(spec_file)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        d = json.loads(p.stdout)
        layers = {la["source"]: la["value"] for la in rows(d)[key]["layers"]}
        assert layers["DYNAMIC_BROKER_CONFIG"] == "3"
        assert layers["STATIC_BROKER_CONFIG"] == running  # the running render, not kctl.yaml's 1
        assert d["pending"][key] == {"running": running, "spec": "1"}
        assert any("kctl.yaml differs from what" in w and f"{key}: {running} -> 1" in w for w in d["warnings"])
        assert d["static_from"].endswith("/conf/server.properties")
        assert "kctl.yaml differs from what" in p.stderr  # the operator sees it in every format

        same = js(kafka_cluster, "config", "describe", "--broker", b, "--key", key)  # the spec it runs
        assert same["pending"] == {} and same["warnings"] == []
    finally:
        kctl(kafka_cluster, "config", "delete", key, "--broker", b)
