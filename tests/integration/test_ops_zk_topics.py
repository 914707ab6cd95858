"""kctl zk and kctl topic against the shared cluster, cross-checked with kafka-topics.sh and the znodes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.integration.cli import js, kctl, tool_config
from tests.kafka_tools import parse_kafka_topics_describe

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka_cluster(profiled_cluster: Any) -> Any:
    """This module's tests take the profile matrix's cluster (tests/integration/conftest.py)."""
    return profiled_cluster




def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ----- zk -----------------------------------------------------------------------------------


@pytest.mark.both_profiles
def test_zk_srvr_all_nodes_parsed(kafka_cluster: Any) -> None:
    res = js(kafka_cluster, "zk", "srvr", "--node", "all")
    assert len(res) == len(kafka_cluster.spec.nodes)
    modes = sorted(r["fields"]["mode"] for r in res)
    assert modes.count("leader") == 1 and all(m in ("leader", "follower") for m in modes)


def test_zk_words_raw_and_parsed(kafka_cluster: Any) -> None:
    p = kctl(kafka_cluster, "zk", "ruok", "--node", "logger1")
    assert p.returncode == 0 and p.stdout.strip() == "imok"
    mntr = js(kafka_cluster, "zk", "mntr", "--node", "logger1")[0]["fields"]
    assert mntr["zk_server_state"] in ("leader", "follower")
    conf = js(kafka_cluster, "zk", "conf", "--node", "logger1")[0]["fields"]
    assert conf["clientPort"] == kafka_cluster.spec.zookeeper.client_port
    p = kctl(kafka_cluster, "zk", "srvr", "--node", "logger1", "-o", "raw")
    assert "Zookeeper version:" in p.stdout and "Mode:" in p.stdout


def test_zk_unknown_node_is_an_error(kafka_cluster: Any) -> None:
    p = kctl(kafka_cluster, "zk", "srvr", "--node", "logger9")
    assert p.returncode != 0 and "no node 'logger9'" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.both_profiles
def test_zk_ls_get_tree(kafka_cluster: Any) -> None:
    root = js(kafka_cluster, "zk", "ls", "/")["children"]
    assert {"brokers", "controller", "config"} <= set(root)
    ids = js(kafka_cluster, "zk", "ls", "/brokers/ids")["children"]
    assert sorted(int(i) for i in ids) == sorted(n.id for n in kafka_cluster.spec.nodes)
    ctrl = js(kafka_cluster, "zk", "get", "/controller")
    assert ctrl["json"]["brokerid"] in [n.id for n in kafka_cluster.spec.nodes]
    assert ctrl["stat"]["ephemeral_owner"] != "0x0"
    tree = js(kafka_cluster, "zk", "tree", "/config", "--depth", "1")
    assert tree[0]["path"] == "/config" and any(e["path"] == "/config/topics" for e in tree)
    p = kctl(kafka_cluster, "zk", "get", "/no/such/znode")
    assert p.returncode == 1 and "no znode /no/such/znode" in p.stderr


# ----- topics --------------------------------------------------------------------------------


@pytest.mark.both_profiles
def test_topic_lifecycle_agrees_with_kafka_topics_and_znodes(kafka_cluster: Any) -> None:
    t = name("ops-topic")
    p = kctl(kafka_cluster, "topic", "create", t, "--partitions", "3", "--replication-factor", "2",
             "--config", "retention.ms=3600000")
    assert p.returncode == 0, p.stderr
    assert t in [x["name"] for x in js(kafka_cluster, "topic", "list")]

    # znode: /brokers/topics/T holds the partitions map, each partition has a state znode
    z = js(kafka_cluster, "zk", "get", f"/brokers/topics/{t}")["json"]
    assert sorted(z["partitions"]) == ["0", "1", "2"] and all(len(r) == 2 for r in z["partitions"].values())
    state = js(kafka_cluster, "zk", "get", f"/brokers/topics/{t}/partitions/0/state")["json"]
    assert {"leader", "isr"} <= set(state)

    ours = _settled(kafka_cluster, t, 3)
    rc, out = kafka_cluster.exec("logger1", ["/opt/kafka/bin/kafka-topics.sh", "--bootstrap-server",
                                             "logger1:9092", *tool_config(kafka_cluster), "--describe",
                                             "--topic", t], stderr=False)
    assert rc == 0, out
    theirs = parse_kafka_topics_describe(out)
    assert theirs["partition_count"] == ours["partition_count"] == 3
    assert theirs["replication_factor"] == ours["replication_factor"] == 2
    for p_ in ours["partitions"]:
        k = theirs["partitions"][p_["partition"]]
        assert (k["leader"], k["replicas"], sorted(k["isr"])) == (p_["leader"], p_["replicas"], sorted(p_["isr"]))
    assert {c["key"]: c["value"] for c in ours["configs"]} == theirs["configs"]
    assert theirs["configs"]["retention.ms"] == "3600000"
    assert z["partitions"] == {str(p_["partition"]): p_["replicas"] for p_ in ours["partitions"]}

    # add a partition: the znode's partitions map grows too
    p = kctl(kafka_cluster, "topic", "alter", t, "--partitions", "4")
    assert p.returncode == 0, p.stderr
    z = js(kafka_cluster, "zk", "get", f"/brokers/topics/{t}")["json"]
    assert sorted(z["partitions"], key=int) == ["0", "1", "2", "3"]
    assert _settled(kafka_cluster, t, 4)["partition_count"] == 4

    p = kctl(kafka_cluster, "topic", "delete", t, "--yes")
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + 30
    while t in [x["name"] for x in js(kafka_cluster, "topic", "list")] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert t not in [x["name"] for x in js(kafka_cluster, "topic", "list")]


def _settled(cluster: Any, t: str, partitions: int) -> Any:
    deadline = time.monotonic() + 20
    while True:
        d = js(cluster, "topic", "describe", t)
        if len(d["partitions"]) == partitions and all(p["leader"] is not None for p in d["partitions"]) \
                or time.monotonic() > deadline:
            return d
        time.sleep(0.5)


def test_topic_errors(kafka_cluster: Any) -> None:
    brokers = len(kafka_cluster.spec.nodes)
    p = kctl(kafka_cluster, "topic", "create", "bad name!", "--partitions", "1", "--replication-factor", "1")
    assert p.returncode != 0 and "invalid topic name" in p.stderr
    p = kctl(kafka_cluster, "topic", "create", name("ops-rf"), "--partitions", "1",
             "--replication-factor", str(brokers + 1))
    assert p.returncode == 1 and "live broker" in p.stderr
    p = kctl(kafka_cluster, "topic", "describe", name("ops-missing"))
    assert p.returncode == 1 and "does not exist" in p.stderr
    p = kctl(kafka_cluster, "topic", "delete", name("ops-missing"), "--yes")
    assert p.returncode == 1 and "does not exist" in p.stderr
    t = name("ops-dec")
    assert kctl(kafka_cluster, "topic", "create", t, "-p", "2", "-r", "1").returncode == 0
    try:
        p = kctl(kafka_cluster, "topic", "alter", t, "--partitions", "1")
        assert p.returncode == 1 and "cannot decrease" in p.stderr
        p = kctl(kafka_cluster, "topic", "create", t, "-p", "2", "-r", "1")
        assert p.returncode == 1 and "already exists" in p.stderr
        assert kctl(kafka_cluster, "topic", "create", t, "-p", "2", "-r", "1", "--if-not-exists").returncode == 0
    finally:
        kctl(kafka_cluster, "topic", "delete", t, "--yes")
    for err in (p.stderr,):
        assert "Traceback" not in err


def test_topic_list_hides_internal(kafka_cluster: Any) -> None:
    names = [x["name"] for x in js(kafka_cluster, "topic", "list")]
    assert not any(n.startswith("__") for n in names)
    internal = [x["name"] for x in js(kafka_cluster, "topic", "list", "--internal")]
    assert "__consumer_offsets" in internal or "__kctl_health" in internal
