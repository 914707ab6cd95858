"""A ZooKeeper-only node (`broker: false`, `kctl node add --no-broker`): spec, render, status, roll plan."""

from __future__ import annotations

from typing import Any

import pytest

from kctl.cluster import nodes
from kctl.cluster.health import ContainerObs, Observations, ZkState, assess, check_brokers
from kctl.errors import SpecError
from kctl.kafka import describe as kmd
from kctl.model.properties import services_of
from kctl.model.render import render
from kctl.model.spec import ClusterSpec, parse_spec
from kctl.roll import plan as rp

THREE = [{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)]
RAW: dict[str, Any] = {"nodes": [*THREE, {"id": 4, "hostname": "logger4", "role": "observer", "broker": False}]}


def spec_of(raw: dict[str, Any]) -> ClusterSpec:
    return parse_spec(raw)[0]


def test_a_zookeeper_only_node_runs_no_broker() -> None:
    spec = spec_of(RAW)
    assert [n.id for n in spec.brokers] == [1, 2, 3] and len(spec.nodes) == 4
    assert services_of(spec)[3] == ("logger4", spec.nodes[3], ("zookeeper",))
    # clients and the brokers never point at it; the ensemble and zookeeper.connect include it
    assert spec.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert "logger4:19092" not in spec.internal_bootstrap_servers
    assert "logger4:2181" in spec.zookeeper_connect
    files = render(spec).files
    assert "logger4/conf/server.properties" not in files and "logger4/conf/zoo.cfg" in files
    assert "server.4=logger4:2888:3888:observer;2181" in files["logger1/conf/zoo.cfg.dynamic"]
    compose = files["compose.yaml"]
    assert '127.0.0.1:19095:19095' not in compose  # no Kafka port published for it


def test_split_topology_makes_no_kafka_container_for_it() -> None:
    spec = spec_of({**RAW, "topology": "split"})
    hosts = [h for h, _, _ in services_of(spec)]
    assert "zk4" in hosts and "kafka4" not in hosts and "kafka3" in hosts


def test_its_kafka_port_is_not_claimed() -> None:
    # a ZooKeeper-only node's Kafka port may repeat another's: it publishes none
    raw = {"nodes": [*THREE, {"id": 4, "hostname": "logger4", "broker": False, "role": "observer",
                              "kafka_port": 19092}]}
    assert [n.id for n in spec_of(raw).brokers] == [1, 2, 3]


def test_at_least_one_broker() -> None:
    with pytest.raises(SpecError, match="at least one node must run a broker"):
        parse_spec({"nodes": [{**n, "broker": False} for n in THREE]})


def test_replication_factors_count_only_brokers() -> None:
    raw = {"nodes": [THREE[0], {**THREE[1], "broker": False}, {**THREE[2], "broker": False}]}
    with pytest.raises(SpecError, match="default_replication_factor: 3 is above the 1 broker"):
        parse_spec(raw)


def test_status_expects_no_broker_on_it() -> None:
    spec = spec_of(RAW)
    hosts = ("logger1", "logger2", "logger3", "logger4")
    procs = {"logger4": {"zookeeper": "RUNNING"}}
    obs = Observations(
        containers={h: ContainerObs(h, "running", "healthy", procs.get(h, {"zookeeper": "RUNNING",
                                                                            "kafka": "RUNNING"}), "x")
                    for h in hosts},
        zookeeper={h: ZkState(h, 2181 + i, "observer" if h == "logger4" else "leader" if i == 1 else "follower")
                   for i, h in enumerate(hosts)},
        kafka=kmd.Metadata((1, 2, 3), 2, (kmd.Partition("orders", 0, 1, (1, 2, 3), (1, 2, 3)),)),
    )
    st = assess(spec, obs)
    assert st.health == "healthy", st.problems
    assert (st.brokers_registered, st.brokers_expected) == (3, 3)
    assert [n.broker is None for n in st.nodes] == [False, False, False, True]
    assert check_brokers(spec, obs)[0]


def test_roll_plan_skips_it_in_the_kafka_phase() -> None:
    spec = spec_of(RAW)
    p = rp.plan_roll(spec, service=None, zk_modes={"logger2": "leader"}, controller=1)
    assert [(s.host, s.service) for s in p.steps if s.service == "kafka"] == \
        [("logger2", "kafka"), ("logger3", "kafka"), ("logger1", "kafka")]
    assert ("logger4", "zookeeper") in [(s.host, s.service) for s in p.steps]
    node = rp.plan_roll(spec, service="node", zk_modes={"logger2": "leader"}, controller=1)
    assert [(s.host, s.service) for s in node.steps if s.host == "logger4"] == [("logger4", "zookeeper")]


def test_node_add_no_broker_writes_broker_false_and_pins_no_kafka_port() -> None:
    raw = {"nodes": [{**n, "zookeeper_port": 30000 + i, "kafka_port": 31000 + i} for i, n in enumerate(THREE)]}
    spec = spec_of(raw)
    new_raw, entry = nodes.with_node_added(raw, spec, None, "observer", lambda n: [40001, 40002][:n], broker=False)
    assert entry == {"id": 4, "hostname": "logger4", "role": "observer", "broker": False, "zookeeper_port": 40001}
    assert [n.broker for n in spec_of(new_raw).nodes] == [True, True, True, False]
    _, with_broker = nodes.with_node_added(raw, spec, None, "observer", lambda n: [40001, 40002][:n])
    assert "broker" not in with_broker and with_broker["kafka_port"] == 40002
