"""kctl diff's comparison (kctl/cluster/drift.py) without Docker: which layer disagrees with which."""

from __future__ import annotations

from kctl.cluster import drift
from kctl.cluster.drift import NOT_APPLIED, OVERRIDDEN, RUNNING, NodeObs, compare

FILE = {"log.retention.hours": "168", "num.io.threads": "8", "broker.id": "1"}


def obs(**kw: object) -> NodeObs:
    base: dict[str, object] = {"node": "logger1", "service": "kafka", "file": "server.properties",
                               "spec": dict(FILE), "rendered": dict(FILE), "running": dict(FILE)}
    base.update(kw)
    return NodeObs(**base)  # type: ignore[arg-type]


def drifts(o: NodeObs) -> dict[str, list[str]]:
    return {r.key: r.drift for r in compare(o)}


def test_all_layers_agree_is_no_drift() -> None:
    assert drifts(obs()) == {}
    assert {r.key for r in compare(obs(), all_keys=True)} == set(FILE)


def test_kctl_yaml_edited_but_not_applied() -> None:
    o = obs(spec={**FILE, "log.retention.hours": "24"})
    assert drifts(o) == {"log.retention.hours": [NOT_APPLIED]}
    row = compare(o)[0]
    assert (row.spec, row.rendered, row.running) == ("24", "168", "168")


def test_a_key_added_to_kctl_yaml_is_not_applied_yet() -> None:
    assert drifts(obs(spec={**FILE, "log.cleaner.threads": "2"})) == {"log.cleaner.threads": [NOT_APPLIED]}


def test_a_dynamic_override_differs_from_the_file_and_the_process_runs_it() -> None:
    o = obs(broker_dyn={"num.io.threads": "4"}, running={**FILE, "num.io.threads": "4"})
    assert drifts(o) == {"num.io.threads": [OVERRIDDEN]}  # running = what the override says: no third finding


def test_a_cluster_default_override_for_a_key_not_in_the_file() -> None:
    o = obs(default_dyn={"log.cleaner.threads": "3"}, running={**FILE, "log.cleaner.threads": "3"})
    assert drifts(o) == {"log.cleaner.threads": [OVERRIDDEN]}


def test_an_override_equal_to_the_file_is_no_drift() -> None:
    assert drifts(obs(broker_dyn={"num.io.threads": "8"})) == {}


def test_the_process_runs_an_earlier_render() -> None:
    o = obs(running={**FILE, "log.retention.hours": "72"})
    assert drifts(o) == {"log.retention.hours": [RUNNING]}


def test_the_per_broker_override_wins_over_the_default() -> None:
    o = obs(broker_dyn={"num.io.threads": "4"}, default_dyn={"num.io.threads": "6"},
            running={**FILE, "num.io.threads": "6"})
    assert drifts(o) == {"num.io.threads": [OVERRIDDEN, RUNNING]}


def test_sensitive_and_unreported_keys_are_not_compared_with_the_process() -> None:
    o = obs(rendered={**FILE, "ssl.key.password": "x"}, spec={**FILE, "ssl.key.password": "x"},
            running={k: v for k, v in FILE.items() if k != "num.io.threads"}, sensitive=frozenset({"ssl.key.password"}))
    assert drifts(o) == {}
    row = next(r for r in compare(o, all_keys=True) if r.key == "num.io.threads")
    assert not row.reported and row.running is None


def test_a_process_that_did_not_answer_compares_files_only() -> None:
    assert drifts(obs(running=None, spec={**FILE, "num.io.threads": "2"})) == {"num.io.threads": [NOT_APPLIED]}


def test_list_values_compare_without_spaces() -> None:
    o = obs(spec={"listeners": "A://x:1,B://y:2"}, rendered={"listeners": "A://x:1,B://y:2"},
            running={"listeners": "A://x:1, B://y:2"})
    assert drifts(o) == {}


def test_zookeeper_conf_is_read_as_zoo_cfg_keys() -> None:
    text = ("clientPort=2181\nsecureClientPort=-1\ndataDir=/var/opt/kctl/zookeeper/snapshots/version-2\n"
            "dataDirSize=1168\ndataLogDir=/var/opt/kctl/zookeeper/txnlogs/version-2\ntickTime=2000\n"
            "maxClientCnxns=60\nserverId=1\ninitLimit=10\nsyncLimit=5\npeerType=0\nmembership: \n"
            "server.1=logger1:2888:3888:participant\nserver.2=logger2:2888:3888:observer;0.0.0.0:2181\nversion=0\n")
    got = drift.parse_zk_conf(text)
    assert got == {"clientPort": "2181", "dataDir": "/var/opt/kctl/zookeeper/snapshots",
                   "dataLogDir": "/var/opt/kctl/zookeeper/txnlogs", "tickTime": "2000", "maxClientCnxns": "60",
                   "initLimit": "10", "syncLimit": "5", "peerType": "participant",
                   "server.1": "logger1:2888:3888", "server.2": "logger2:2888:3888:observer"}
    cfg = {"clientPort": "2181", "tickTime": "3000", "server.1": "logger1:2888:3888"}
    o = NodeObs("logger1", "zookeeper", "zoo.cfg", drift.zk_expected(cfg), drift.zk_expected(cfg), running=got)
    assert {r.key: r.drift for r in compare(o)} == {"tickTime": [RUNNING]}
