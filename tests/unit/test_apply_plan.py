"""kctl apply's planning (kctl/roll/apply.py) without Docker: dynamic where Kafka allows, a restart of
exactly the services whose start-time config changed, and a refusal for container settings."""

from __future__ import annotations

from kctl.cluster.drift import NodeObs, recreate_needed
from kctl.kafka.configs import update_mode
from kctl.roll.apply import DynamicChange, plan_apply

FILE = {"broker.id": "1", "log.retention.hours": "168", "log.retention.bytes": "-1"}
ZK = {"tickTime": "2000", "initLimit": "10", "autopurge.purgeInterval": "24", "peerType": "participant"}
IDS = {"logger1": 1, "logger2": 2, "logger3": 3}


def kafka(node: str, spec: dict[str, str] | None = None, running: dict[str, str] | None = None,
          **kw: object) -> NodeObs:
    f = {**FILE, "broker.id": str(IDS[node])}
    return NodeObs(node, "kafka", "server.properties", spec or dict(f), dict(f),
                   running=running if running is not None else dict(f), host=node, **kw)  # type: ignore[arg-type]


def zk(node: str, spec: dict[str, str] | None = None) -> NodeObs:
    running = {k: v for k, v in ZK.items() if k != "autopurge.purgeInterval"}  # `conf` does not report it
    return NodeObs(node, "zookeeper", "zoo.cfg", spec or dict(ZK), dict(ZK), running=running, host=node)


def plan(observed: list[NodeObs], files: dict[str, list[str]] | None = None) -> object:
    return plan_apply("c", observed, changed_files=files or {}, hashes=[], recreate={}, broker_ids=IDS,
                      update_mode=update_mode)


def test_nothing_changed_is_nothing_to_do() -> None:
    p = plan([kafka(n) for n in IDS] + [zk(n) for n in IDS])
    assert p.nothing_to_do and not p.restarts and not p.dynamic  # type: ignore[attr-defined]


def test_a_read_only_change_on_one_node_restarts_that_broker_only() -> None:
    changed = kafka("logger2", spec={**FILE, "broker.id": "2", "log.retention.hours": "100"})
    p = plan([kafka("logger1"), changed, kafka("logger3")], {"logger2": ["conf/server.properties"]})
    assert [(r.node, r.service) for r in p.restarts] == [("logger2", "kafka")]  # type: ignore[attr-defined]
    assert "log.retention.hours: 168 -> 100" in p.restarts[0].reasons[0]  # type: ignore[attr-defined]
    assert p.dynamic == []  # type: ignore[attr-defined]


def test_a_dynamic_change_is_set_per_broker_without_restart() -> None:
    obs = [kafka(n, spec={**FILE, "broker.id": str(i), "log.retention.bytes": "1000"}) for n, i in IDS.items()]
    p = plan(obs, {n: ["conf/server.properties"] for n in IDS})
    assert p.restarts == []  # type: ignore[attr-defined]
    assert p.dynamic == [DynamicChange(i, "log.retention.bytes", "1000", "-1")  # type: ignore[attr-defined]
                         for i in (1, 2, 3)]


def test_a_dynamic_key_new_to_kctl_yaml_and_its_removal_later() -> None:
    added = kafka("logger1", spec={**FILE, "log.cleaner.threads": "2"}, running={**FILE, "log.cleaner.threads": "1"})
    assert [d.value for d in plan([added]).dynamic] == ["2"]  # type: ignore[attr-defined]
    # kctl.yaml no longer names it; the override the earlier apply set is dropped, nothing restarts
    removed = NodeObs("logger1", "kafka", "server.properties", dict(FILE), {**FILE, "log.cleaner.threads": "2"},
                      broker_dyn={"log.cleaner.threads": "2"}, running={**FILE, "log.cleaner.threads": "2"},
                      host="logger1")
    p = plan([removed])
    assert [(d.key, d.value) for d in p.dynamic] == [("log.cleaner.threads", None)]  # type: ignore[attr-defined]
    assert p.restarts == []  # type: ignore[attr-defined]


def test_a_process_that_runs_the_new_value_already_needs_no_restart() -> None:
    # the file was rendered and the broker restarted earlier (`kctl render` + `kctl restart`)
    o = NodeObs("logger1", "kafka", "server.properties", {**FILE, "log.retention.hours": "100"},
                {**FILE, "log.retention.hours": "100"}, running={**FILE, "log.retention.hours": "100"}, host="logger1")
    assert plan([o]).restarts == []  # type: ignore[attr-defined]


def test_a_zookeeper_change_restarts_zookeeper_whether_conf_reports_the_key_or_not() -> None:
    p = plan([zk("logger1", {**ZK, "tickTime": "3000"}), zk("logger2", {**ZK, "autopurge.purgeInterval": "1"}),
              zk("logger3")])
    assert [(r.node, r.service) for r in p.restarts] == [("logger1", "zookeeper"),  # type: ignore[attr-defined]
                                                         ("logger2", "zookeeper")]


def test_a_changed_log4j_file_restarts_its_service() -> None:
    p = plan([kafka("logger1"), zk("logger1")], {"logger1": ["conf/log4j-kafka.properties"]})
    assert [(r.node, r.service, r.reasons) for r in p.restarts] == [  # type: ignore[attr-defined]
        ("logger1", "kafka", ["conf/log4j-kafka.properties changed"])]


def test_an_unobserved_broker_restarts_when_its_file_changes() -> None:
    o = kafka("logger1", spec={**FILE, "log.retention.bytes": "5"}, running=None)
    o.running, o.error = None, "no answer"
    assert [(r.node, r.service) for r in plan([o]).restarts] == [("logger1", "kafka")]  # type: ignore[attr-defined]


def test_container_settings_that_need_the_container_made_again() -> None:
    old = ("services:\n  logger1:\n    image: kctl/node:3.9.1\n    environment: {KAFKA_HEAP_OPTS: -Xmx1g}\n"
           "    labels: {io.kctl.config-hash: a}\n")
    same_but_labels = old.replace("hash: a", "hash: b")
    heap = same_but_labels.replace("-Xmx1g", "-Xmx2g")
    assert recreate_needed(old, same_but_labels) == {}
    assert recreate_needed(old, heap) == {"logger1": ["environment.KAFKA_HEAP_OPTS: -Xmx1g -> -Xmx2g"]}
    assert recreate_needed(None, heap) == {}


def test_phases_remake_a_colocated_node_with_both_services_last() -> None:
    from kctl.model.spec import ClusterSpec
    from kctl.roll.apply import ApplyPlan, Restart, phases

    p = ApplyPlan("c", [], [], restarts=[Restart("logger1", "kafka", ["x"]), Restart("logger2", "kafka", ["x"])],
                  recreate={"logger2": ["environment.KAFKA_JMX_PORT: None -> 19999"]})
    assert phases(ClusterSpec(), p) == [("kafka", ["logger1"], ()), ("node", ["logger2"], ("logger2",))]


def test_engine_hosts_restarts_only_the_service_whose_environment_changed() -> None:
    """Each systemd unit reads the node's environment at its own start: a broker's new heap or JVM options
    restart the broker alone, not its ZooKeeper (a container's environment makes the whole node again)."""
    from kctl.model.spec import ClusterSpec
    from kctl.roll.apply import ApplyPlan, Restart, by_units, phases

    spec = ClusterSpec.model_validate({"name": "h", "engine": "hosts", "nodes": [
        {"id": i, "hostname": f"logger{i}", "advertised_host": f"10.0.0.{i}"} for i in (1, 2, 3)]})
    p = ApplyPlan("h", [], [], restarts=[Restart("logger1", "kafka", ["server.properties changed"])],
                  recreate={"logger1": ["environment.KAFKA_HEAP_OPTS: -Xms512m -Xmx512m -> -Xms1g -Xmx1g"],
                            "logger2": ["environment.ZK_OPTS: None -> -XX:+UseSerialGC",
                                        "environment.KAFKA_OPTS: None -> -XX:+UseSerialGC"],
                            "logger3": ["environment.KAFKA_HEAP_OPTS: a -> b",
                                        "environment.KCTL_ZK_SERVERS: x -> y"]})
    out = by_units(spec, p)
    assert [(r.node, r.service) for r in out.restarts] == [("logger1", "kafka"), ("logger2", "zookeeper"),
                                                           ("logger2", "kafka")]
    assert out.restarts[0].reasons == ["server.properties changed", "environment.KAFKA_HEAP_OPTS: -Xms512m"
                                       " -Xmx512m -> -Xms1g -Xmx1g (read at start)"]
    assert out.recreate == {"logger3": p.recreate["logger3"]}  # a variable both read: the node again
    assert phases(spec, out) == [("zookeeper", ["logger2"], ()), ("kafka", ["logger1", "logger2"], ()),
                                 ("node", ["logger3"], ("logger3",))]
    assert p.recreate["logger1"] and p.restarts[0].reasons == ["server.properties changed"]  # left as it was
