"""Health assessment from constructed observations (no Docker, no JVM), and the sources it reads
(kctl.kafka.describe has its own tests: test_describe.py)."""

from __future__ import annotations

from kctl import health
from kctl.health import ContainerObs, Observations, ZkState, assess
from kctl.kafka import describe as kmd
from kctl.runtime import docker_api
from kctl.spec import ClusterSpec, parse_spec

SPEC = ClusterSpec()  # three colocated nodes, logger1..3, brokers 1..3
HOSTS = ("logger1", "logger2", "logger3")
UP = {"zookeeper": "RUNNING", "kafka": "RUNNING"}


def _partitions(n: int = 3, under: int = 0, offline: int = 0) -> tuple[kmd.Partition, ...]:
    out = []
    for i in range(n):
        leader = -1 if i < offline else (i % 3) + 1
        isr = (1, 2) if i < under else (1, 2, 3)
        out.append(kmd.Partition("orders", i, leader, (1, 2, 3), isr))
    return tuple(out)


def healthy_obs() -> Observations:
    return Observations(
        containers={h: ContainerObs(h, "running", "healthy", dict(UP), "abc") for h in HOSTS},
        zookeeper={h: ZkState(h, 2181 + i, "leader" if i == 1 else "follower", zxid="0x1")
                   for i, h in enumerate(HOSTS)},
        kafka=kmd.Metadata((1, 2, 3), 2, _partitions()),
    )


def test_all_healthy() -> None:
    st = assess(SPEC, healthy_obs())
    assert (st.health, st.quorum, st.leader, st.controller) == ("healthy", "ok", "logger2", 2)
    assert st.problems == [] and st.exit_code == 0
    assert (st.brokers_registered, st.under_replicated_partitions, st.offline_partitions) == (3, 0, 0)
    assert [n.broker.registered for n in st.nodes if n.broker] == [True, True, True]
    assert [z["mode"] for z in st.zookeeper] == ["follower", "leader", "follower"]


def test_one_container_stopped() -> None:
    obs = healthy_obs()
    assert obs.containers is not None and obs.zookeeper is not None and obs.kafka is not None
    obs.containers["logger3"] = ContainerObs("logger3", "exited", None)
    obs.zookeeper["logger3"] = ZkState("logger3", 2183, "down", error="refused")
    obs.kafka = kmd.Metadata((1, 2), 2, _partitions(under=2))
    st = assess(SPEC, obs)
    assert st.health == "degraded" and st.exit_code == 1 and st.quorum == "ok"
    assert "logger3: container exited" in st.problems
    assert "logger3: zookeeper down" in st.problems
    assert any(p.startswith("brokers registered 2/3, missing [3]") for p in st.problems)
    assert "2 under-replicated partitions" in st.problems
    assert st.nodes[2].container == "exited" and st.nodes[2].broker and not st.nodes[2].broker.registered


def test_process_crashed() -> None:
    obs = healthy_obs()
    assert obs.containers is not None
    obs.containers["logger1"] = ContainerObs("logger1", "running", "unhealthy",
                                             {"zookeeper": "RUNNING", "kafka": "STOPPED"})
    st = assess(SPEC, obs)
    assert st.health == "degraded"
    assert "logger1: kafka STOPPED" in st.problems
    assert "logger1: Docker healthcheck unhealthy" in st.problems


def test_zookeeper_quorum_lost() -> None:
    obs = healthy_obs()
    obs.zookeeper = {
        "logger1": ZkState("logger1", 2181, "not-serving"),
        "logger2": ZkState("logger2", 2182, "down"),
        "logger3": ZkState("logger3", 2183, "down"),
    }
    st = assess(SPEC, obs)
    assert st.quorum == "lost" and st.leader is None
    assert "zookeeper quorum lost" in st.problems and "logger1: zookeeper not-serving" in st.problems
    assert st.health == "degraded"  # the brokers still answer metadata


def test_broker_not_registered() -> None:
    obs = healthy_obs()
    assert obs.containers is not None
    obs.containers["logger2"] = ContainerObs("logger2", "running", "starting",
                                             {"zookeeper": "RUNNING", "kafka": "WAITING-FOR-QUORUM"})
    obs.kafka = kmd.Metadata((1, 3), 1, _partitions())
    st = assess(SPEC, obs)
    assert st.brokers_registered == 2 and st.controller == 1
    assert any(p.startswith("brokers registered 2/3, missing [2]") for p in st.problems)
    assert "logger2: kafka WAITING-FOR-QUORUM" in st.problems
    ok, saw = health.check_brokers(SPEC, obs)
    assert not ok and "[1, 3]" in saw
    assert health.check_brokers(SPEC, obs, allow_missing=1)[0]


def test_under_replicated_and_offline_partitions() -> None:
    obs = healthy_obs()
    obs.kafka = kmd.Metadata((1, 2, 3), 2, _partitions(n=6, under=2, offline=1))
    st = assess(SPEC, obs)
    assert st.health == "degraded"
    assert st.under_replicated_partitions == 2 and st.offline_partitions == 1
    assert "2 under-replicated partitions" in st.problems and "1 partitions without a leader" in st.problems
    assert not health.check_leaders(SPEC, obs)[0]
    # Per broker: only partitions with a leader count against it.
    assert sum(b["under_replicated"] for b in st.brokers) == 1


def test_paused_container() -> None:
    obs = healthy_obs()
    assert obs.containers is not None and obs.zookeeper is not None
    obs.containers["logger2"] = ContainerObs("logger2", "paused", "healthy")
    obs.zookeeper["logger2"] = ZkState("logger2", 2182, "down", error="no answer to 'srvr' in 1.5s")
    st = assess(SPEC, obs)
    assert "logger2: container paused" in st.problems and "logger2: zookeeper down" in st.problems
    assert st.health == "degraded" and st.nodes[1].processes == {}


def test_nothing_answers_is_down() -> None:
    obs = Observations(containers={}, zookeeper={h: ZkState(h, 1, "down") for h in HOSTS},
                       kafka_error="127.0.0.1:9092: Connection refused")
    st = assess(SPEC, obs)
    assert st.health == "down" and st.exit_code == 2
    assert "logger1: container missing" in st.problems
    assert any("Connection refused" in p for p in st.problems)


def test_docker_unreachable_is_reported() -> None:
    obs = healthy_obs()
    obs.containers, obs.docker_error = None, "Docker engine not reachable: No such file or directory"
    st = assess(SPEC, obs)
    assert st.nodes[0].container == "unknown"
    assert st.problems == ["docker: Docker engine not reachable: No such file or directory"]


def test_observer_in_the_wrong_mode() -> None:
    spec = parse_spec({"nodes": [{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)]
                       + [{"id": 4, "hostname": "logger4", "role": "observer"}]})[0]
    obs = healthy_obs()
    assert obs.zookeeper is not None and obs.containers is not None
    obs.containers["logger4"] = ContainerObs("logger4", "running", "healthy", dict(UP))
    obs.zookeeper["logger4"] = ZkState("logger4", 2184, "follower")
    obs.kafka = kmd.Metadata((1, 2, 3, 4), 2, ())
    st = assess(spec, obs)
    assert any("spec makes it an observer" in p for p in st.problems)
    assert not health.check_one_leader(spec, obs)[0]


def test_split_topology_maps_services_to_their_containers() -> None:
    spec = parse_spec({"topology": "split"})[0]
    zk_hosts = [spec.zk_host(n) for n in spec.nodes]
    k_hosts = [spec.kafka_host(n) for n in spec.nodes]
    obs = Observations(
        containers={**{h: ContainerObs(h, "running", "healthy", {"zookeeper": "RUNNING"}) for h in zk_hosts},
                    **{h: ContainerObs(h, "running", "healthy", {"kafka": "RUNNING"}) for h in k_hosts}},
        zookeeper={h: ZkState(h, 1, "leader" if i == 0 else "follower") for i, h in enumerate(zk_hosts)},
        kafka=kmd.Metadata((1, 2, 3), 1, ()),
    )
    st = assess(spec, obs)
    assert st.health == "healthy", st.problems
    assert [n.node for n in st.nodes if n.broker] == k_hosts


# ----- the sources the observations come from ---------------------------------------


def test_docker_list_health_and_process_states() -> None:
    assert docker_api.health_of_status("Up 3 minutes (healthy)") == "healthy"
    assert docker_api.health_of_status("Up 1 second (health: starting)") == "starting"
    assert docker_api.health_of_status("Up 2 minutes (unhealthy)") == "unhealthy"
    assert docker_api.health_of_status("Exited (137) 5 seconds ago") is None
    cmd = ["/usr/bin/python3 /usr/bin/supervisord", "java -cp x org.apache.zookeeper.server.quorum.QuorumPeerMain /etc",
           "/bin/bash /usr/local/lib/kctl/kafka-start"]
    assert docker_api.process_states(cmd, ("zookeeper", "kafka")) == {"zookeeper": "RUNNING",
                                                                  "kafka": "WAITING-FOR-QUORUM"}
    cmd.append("java -Xmx1g kafka.Kafka /etc/kctl/server.properties")
    assert docker_api.process_states(cmd, ("kafka",)) == {"kafka": "RUNNING"}
    assert docker_api.process_states(cmd[:1], ("zookeeper", "kafka")) == {"zookeeper": "STOPPED", "kafka": "STOPPED"}


def test_readiness_waits_until_every_broker_sees_every_broker() -> None:
    # Just after a broker rejoins, the controller has told some brokers and not yet others.
    obs = healthy_obs()
    obs.kafka_views = [kmd.Metadata((1, 2, 3), 1, (), "127.0.0.1:19092"),
                       kmd.Metadata((1, 3), 1, (), "127.0.0.1:19094")]
    ok, saw = health.check_brokers(SPEC, obs)
    assert not ok and "brokers disagree" in saw and "127.0.0.1:19094 sees [1, 3]" in saw
    obs.kafka_views[1] = kmd.Metadata((1, 2, 3), 1, (), "127.0.0.1:19094")
    assert health.check_brokers(SPEC, obs)[0] and health.check_controller(SPEC, obs)[0]
    obs.kafka_views[1] = kmd.Metadata((1, 2, 3), 3, (), "127.0.0.1:19094")
    assert not health.check_controller(SPEC, obs)[0]
