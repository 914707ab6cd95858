"""Health assessment from constructed observations (no Docker, no JVM), and the sources it reads
(kctl.kafka.describe has its own tests: test_describe.py)."""

from __future__ import annotations

import pytest

from kctl.cluster import health
from kctl.cluster.health import ContainerObs, Observations, ZkState, assess
from kctl.kafka import describe as kmd
from kctl.model.spec import ClusterSpec, parse_spec
from kctl.runtime import docker_api

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
    assert st.nodes[0].health == "unhealthy"


def test_docker_unhealthy_alone_is_shown_not_judged() -> None:
    # Docker's verdict lags: after a fault heals it says unhealthy until its next check, up to 30 s later, while
    # every probe of kctl's already passes.
    obs = healthy_obs()
    assert obs.containers is not None
    obs.containers["logger3"] = ContainerObs("logger3", "running", "unhealthy",
                                             {"zookeeper": "RUNNING", "kafka": "RUNNING"})
    st = assess(SPEC, obs)
    assert st.health == "healthy" and not st.problems
    assert st.nodes[2].health == "unhealthy"


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


def _node_down(obs: Observations, host: str = "logger3", broker: int = 3) -> Observations:
    assert obs.containers is not None and obs.zookeeper is not None
    obs.containers[host] = ContainerObs(host, "exited", None)
    obs.zookeeper[host] = ZkState(host, 2183, "down", error="refused")
    rest = tuple(b for b in (1, 2, 3) if b != broker)
    obs.kafka = kmd.Metadata(rest, rest[0], tuple(kmd.Partition("orders", i, rest[i % 2], (1, 2, 3), rest)
                                                  for i in range(4)))
    return obs


def test_allow_missing_excuses_one_node_away_and_nothing_else() -> None:
    obs = _node_down(healthy_obs())
    assert assess(SPEC, obs).health == "degraded"
    st = assess(SPEC, obs, allow_missing=1)
    assert (st.health, st.problems) == ("healthy", [])
    assert st.under_replicated_partitions == 4  # still reported, only not a problem
    assert health.away_nodes(SPEC, obs) == {"logger3"}
    # A second node away is more than allowed: every problem counts again.
    assert obs.containers is not None
    obs.containers["logger2"] = ContainerObs("logger2", "running", None, {"zookeeper": "RUNNING", "kafka": "STOPPED"})
    st = assess(SPEC, obs, allow_missing=1)
    assert st.health == "degraded" and "logger3: container exited" in st.problems
    assert "logger2: kafka STOPPED" in st.problems


def test_allow_missing_does_not_excuse_what_the_rest_must_hold() -> None:
    obs = _node_down(healthy_obs())
    # a partition short of a replica on a broker that is there, and one without a leader
    obs.kafka = kmd.Metadata((1, 2), 1, (kmd.Partition("orders", 0, 1, (1, 2, 3), (1,)),
                                         kmd.Partition("orders", 1, -1, (3,), ())))
    problems = assess(SPEC, obs, allow_missing=1).problems
    assert "1 partitions without a leader" in problems
    assert "2 under-replicated partitions (1 only for want of ['logger3'])" in problems
    obs = _node_down(healthy_obs())
    assert obs.kafka is not None
    obs.kafka = kmd.Metadata((1, 2), None, obs.kafka.partitions)
    assert "no controller" in assess(SPEC, obs, allow_missing=1).problems
    obs = _node_down(healthy_obs())
    assert obs.zookeeper is not None
    obs.zookeeper["logger2"] = ZkState("logger2", 2182, "not-serving")
    assert "zookeeper quorum lost" in assess(SPEC, obs, allow_missing=2).problems


def test_check_healthy_is_assess() -> None:
    ok, saw = health.check_healthy(SPEC, healthy_obs())
    assert ok and saw.startswith("healthy: quorum ok, leader logger2, brokers 3/3")
    obs = healthy_obs()
    obs.kafka = kmd.Metadata((1, 2, 3), 2, _partitions(under=1))
    ok, saw = health.check_healthy(SPEC, obs)
    assert not ok and saw == "degraded: 1 under-replicated partitions"
    # Docker not asked (the roll's and the node changes' gates): its view is no problem, nor missing
    obs = healthy_obs()
    obs.containers = None
    assert health.check_healthy(SPEC, obs)[0]
    assert health.check_healthy(SPEC, _node_down(healthy_obs()), allow_missing=1)[0]


def test_the_gates_ask_check_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.cluster import nodes
    from kctl.drill import run as drill
    from kctl.roll import run as roll

    asked: list[bool] = []  # whether each gather asked Docker

    def gather(spec: ClusterSpec, timeout: float = 1.5, *, docker: bool = True, **_k: object) -> Observations:
        asked.append(docker)
        obs = healthy_obs()
        obs.kafka = kmd.Metadata((1, 2, 3), 2, _partitions(under=1))
        return obs

    monkeypatch.setattr(health, "gather", gather)
    for probe in (roll.pre_checks(SPEC), nodes._healthy(SPEC)):
        assert probe() == (False, "degraded: 1 under-replicated partitions")
    monkeypatch.setattr(drill, "PRE_CHECK_TIMEOUT", 0.1)
    with pytest.raises(drill.DrillNotRun, match="1 under-replicated partitions"):
        drill.pre_check_cluster(SPEC)
    assert asked[:2] == [False, False] and asked[2:] and all(asked[2:])  # the drill asks Docker too


def test_check_replicated_in_every_brokers_view() -> None:
    obs = healthy_obs()
    obs.kafka_views = [kmd.Metadata((1, 2, 3), 2, _partitions(), "127.0.0.1:19092"),
                       kmd.Metadata((1, 2, 3), 2, _partitions(under=1), "127.0.0.1:19093")]
    assert health.check_replicated(SPEC, obs) == (False, "URP 1, offline 0 (every broker's view)")
    obs.kafka_views[1] = kmd.Metadata((1, 2, 3), 2, _partitions(), "127.0.0.1:19093")
    assert health.check_replicated(SPEC, obs)[0]
    obs.kafka_error = "127.0.0.1:19094: timed out"  # a broker that did not answer may lag behind
    assert health.check_replicated(SPEC, obs) == (False, "127.0.0.1:19094: timed out")


def test_broker_registered_needs_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([Observations(kafka_error="refused"), Observations(kafka=kmd.Metadata((1, 2), 1, ()))])
    monkeypatch.setattr(health, "gather", lambda *_a, **_k: next(answers))
    gone = health.broker_registered(SPEC, 3, want=False)
    assert gone() == (False, "refused")  # nobody answered: not proof that it is gone
    assert gone() == (True, "registered brokers [1, 2]")


# ----- a cluster on KRaft (the migration finalized) ------------------------------------------------------------

KRAFT = SPEC.with_kraft("kraft", "Xy7kQ2fnT3a1bC9dE0fG1h")
ON_KRAFT = {"zookeeper": "RETIRED", "kafka": "RUNNING", "controller": "RUNNING"}


def kraft_obs(leader: int = 3002, epoch: int = 4) -> Observations:
    return Observations(
        containers={h: ContainerObs(h, "running", "healthy", dict(ON_KRAFT), "abc") for h in HOSTS},
        controllers={h: health.ControllerView(h, 3001 + i, leader, epoch) for i, h in enumerate(HOSTS)},
        kafka=kmd.Metadata((1, 2, 3), 1, _partitions()),
    )


def test_on_kraft_the_controllers_are_the_quorum_and_a_retired_zookeeper_is_no_problem() -> None:
    st = assess(KRAFT, kraft_obs())
    assert (st.health, st.quorum, st.leader, st.controller, st.metadata) == ("healthy", "ok", "logger2", 3002,
                                                                             "kraft")
    assert st.zookeeper == [] and [c["leader"] for c in st.controllers] == [3002] * 3
    # the same processes on a cluster still on ZooKeeper: a retired ZooKeeper is a problem there
    zk_obs = healthy_obs()
    assert zk_obs.containers is not None
    zk_obs.containers["logger1"] = ContainerObs("logger1", "running", "healthy", dict(ON_KRAFT))
    assert "logger1: zookeeper RETIRED" in assess(SPEC, zk_obs).problems


def test_on_kraft_a_stopped_controller_or_no_majority_is_seen() -> None:
    obs = kraft_obs()
    assert obs.containers is not None and obs.controllers is not None
    obs.containers["logger3"] = ContainerObs("logger3", "running", "healthy", {"zookeeper": "RETIRED",
                                                                               "kafka": "RUNNING"})
    st = assess(KRAFT, obs)
    assert st.health == "degraded" and "logger3: controller STOPPED" in st.problems and st.quorum == "ok"
    # the leader's own controller is down: the followers' files still name it, but there is no leader
    obs = kraft_obs(leader=3003)
    assert obs.containers is not None
    obs.containers["logger3"] = ContainerObs("logger3", "running", "healthy", {"zookeeper": "RETIRED",
                                                                               "kafka": "RUNNING"})
    st = assess(KRAFT, obs)
    assert st.quorum == "lost" and "the KRaft controller quorum has no leader" in st.problems
    # a newer epoch named by one controller alone is no majority's leader
    obs = kraft_obs()
    assert obs.controllers is not None
    obs.controllers["logger1"] = health.ControllerView("logger1", 3001, 3001, 5)
    assert health.controller_leader(KRAFT, obs.controllers) is None
    obs.controllers["logger3"] = health.ControllerView("logger3", 3003, 3001, 5)
    assert health.controller_leader(KRAFT, obs.controllers) == 3001


def test_the_quorum_state_file_is_read_for_leader_and_epoch() -> None:
    from kctl.kraft import config as kc

    text = ('{"clusterId":"","leaderId":3002,"leaderEpoch":7,"votedId":-1,"appliedOffset":0,'
            '"currentVoters":[{"voterId":3001},{"voterId":3002},{"voterId":3003}],"data_version":0}')
    assert kc.parse_quorum_state(text) == (3002, 7)
    assert kc.parse_quorum_state('{"leaderId":-1,"leaderEpoch":8,"votedId":3001}') == (None, 8)
    assert kc.parse_quorum_state("cat: no such file") == (None, None)


def test_a_retired_zookeeper_and_a_kraft_controller_are_read_from_the_process_table() -> None:
    retired = "/bin/bash /usr/local/lib/kctl/retired zookeeper"
    controller = "java -Xmx256m -cp /opt/kafka/libs/* kafka.Kafka /etc/kctl/controller.properties"
    broker = "java -Xmx512m -cp /opt/kafka/libs/* kafka.Kafka /etc/kctl/server.properties"
    assert docker_api.process_states([retired, controller, broker], ("zookeeper", "kafka")) == ON_KRAFT
    assert docker_api.process_states([broker], ("zookeeper", "kafka")) == {"zookeeper": "STOPPED",
                                                                           "kafka": "RUNNING"}


def test_zookeeper_commands_and_clients_are_refused_on_kraft() -> None:
    from kctl.errors import UsageError
    from kctl.roll import plan as rp
    from kctl.zk import require_zookeeper, znodes

    with pytest.raises(UsageError, match="on KRaft: it has no ZooKeeper"), znodes.connect(KRAFT):
        pass
    assert require_zookeeper(SPEC) is SPEC
    for service in (None, "zookeeper"):
        with pytest.raises(UsageError, match="on KRaft"):
            rp.plan_roll(KRAFT, service=service, zk_modes={}, controller=None)
    assert rp.plan_roll(KRAFT, service="kafka", zk_modes={}, controller=None).steps


def test_a_node_roll_on_kraft_takes_controller_and_broker_down_together_the_leaders_node_last() -> None:
    from kctl.roll import plan as rp

    p = rp.plan_roll(KRAFT, service="node", zk_modes={}, controller=1, recreate=("logger3",))
    assert [(s.host, s.service, s.why) for s in p.steps] == [
        ("logger2", "node", "node 2"), ("logger3", "node", "node 3"), ("logger1", "node", "controller last")]
    assert [s.recreate for s in p.steps] == [False, True, False]
    gates = p.steps[0].gates
    assert gates == rp.kraft_node_gates(2)
    # the broker goes first and comes back last; between them, the controller and a whole quorum again
    assert gates.index("stop: " + rp.GATE_EXITED) < gates.index("stop: " + rp.GATE_CONTROLLER_EXITED) \
        < gates.index("start: " + rp.GATE_QUORUM) < gates.index("start: " + rp.GATE_REGISTERED)
    assert not any("ZooKeeper" in g or "srvr" in g for g in gates)


def test_on_kraft_the_brokers_need_not_agree_on_a_controller() -> None:
    # KRaft brokers answer clients with a random live broker as "controller" (KIP-590)
    views = [kmd.Metadata((1, 2, 3), c, _partitions()) for c in (1, 2, 3)]
    obs = Observations(kafka=views[0], kafka_views=views)
    assert health.check_controller(KRAFT, obs)[0]
    assert not health.check_controller(SPEC, obs)[0]  # on ZooKeeper they must
    views[2] = kmd.Metadata((1, 2), None, _partitions())
    assert not health.check_controller(KRAFT, Observations(kafka=views[0], kafka_views=views))[0]


def test_a_controller_roll_on_kraft_restarts_the_controllers_alone_the_leader_last() -> None:
    from kctl.errors import UsageError
    from kctl.roll import plan as rp

    p = rp.plan_roll(KRAFT, service="controller", zk_modes={}, controller=2)
    assert [(s.host, s.service, s.why) for s in p.steps] == [
        ("logger1", "controller", "controller of node 1"), ("logger3", "controller", "controller of node 3"),
        ("logger2", "controller", "controller last")]
    assert all(s.gates == rp.controller_gates() and s.broker is None for s in p.steps)
    with pytest.raises(UsageError, match="no KRaft controllers"):
        rp.plan_roll(SPEC, service="controller", zk_modes={}, controller=None)


def test_apply_on_kraft_rolls_the_controllers_whose_files_changed_first() -> None:
    from kctl.roll import apply as ap

    files = [f"logger{i}/conf/controller.properties" for i in (1, 2, 3)] + ["logger1/conf/server.properties"]
    plan = ap.ApplyPlan("k", [], files, restarts=[ap.Restart("logger1", "kafka", ["x changed"])])
    assert ap.phases(KRAFT, plan) == [("controller", ["logger1", "logger2", "logger3"], ()),
                                      ("kafka", ["logger1"], ())]
    # a node made again restarts its controller with it: not twice
    again = ap.ApplyPlan("k", [], files, recreate={"logger2": ["image: a -> b"]})
    assert ap.phases(KRAFT, again) == [("controller", ["logger1", "logger3"], ()), ("node", ["logger2"], ("logger2",))]


def test_a_controller_file_without_a_leader_is_read_again_before_it_is_called_no_leader(monkeypatch) -> None:
    """An election writes the candidate's vote (leaderId -1) a moment before its win: one such read is not a lost
    quorum. A file that still names none after the re-reads is, with what it said in the error."""
    from kctl.kafka import controllers
    from kctl.runtime.engine import engines

    candidate = '{"leaderId":-1,"leaderEpoch":5,"votedId":3001,"data_version":0}'
    leader = '{"leaderId":3001,"leaderEpoch":5,"votedId":-1,"data_version":0}'
    monkeypatch.setattr(controllers, "NO_LEADER_REREADS", (0.0, 0.0))
    for files, want in (([candidate, leader], (3001, 5, None)),
                        ([candidate, candidate, leader], (3001, 5, None)),
                        ([candidate] * 3, (None, 5, "no leader (its quorum-state: " + candidate + ")")),
                        (["", "", ""], (None, None, "no leader (its quorum-state: an empty file)"))):
        reads = iter(files)
        asked: list[list[str]] = []

        def exec_in(_spec, host, argv, timeout, stderr, reads=reads, asked=asked):
            asked.append(argv)
            return 0, next(reads)

        monkeypatch.setattr(engines, "exec_in", exec_in)
        v = controllers.controller_view(KRAFT, "logger1", 3001, 1.0)
        assert (v.leader, v.epoch, v.error) == want and len(asked) == len(files)
    # a file that is not there is said at once, not read again
    calls: list[int] = []
    monkeypatch.setattr(engines, "exec_in", lambda *_a, **_k: calls.append(1) or (1, ""))
    v = controllers.controller_view(KRAFT, "logger1", 3001, 1.0)
    assert v.error == "no quorum-state file (never started?)" and calls == [1]


def test_status_wait_shows_a_healthy_reading_not_one_after_it(monkeypatch, tmp_path) -> None:
    """`kctl status --wait N`: when the reading after the wait is not healthy (an election began in between), it
    waits on, within N, and what it prints and exits with is the healthy reading; past N it says so."""
    import itertools
    import json

    from typer.testing import CliRunner

    from kctl.cli import cluster as cli_cluster
    from kctl.cli.main import app

    healthy = assess(SPEC, healthy_obs())
    obs = healthy_obs()
    obs.zookeeper = {h: ZkState(h, 2181 + i, "down") for i, h in enumerate(HOSTS)}
    sick = assess(SPEC, obs)
    assert (healthy.health, sick.health) == ("healthy", "degraded")
    monkeypatch.setattr(cli_cluster, "load", lambda _f: SPEC)
    for readings, code, waits in (([sick, healthy], 0, 2), ([healthy], 0, 1), (None, 1, None)):
        it = iter(readings) if readings else itertools.repeat(sick)
        waited: list[float] = []
        monkeypatch.setattr(health, "wait_for", lambda *_a, timeout, waited=waited, **_k: waited.append(timeout))
        monkeypatch.setattr(health, "status", lambda *_a, it=it, **_k: next(it))
        run = CliRunner().invoke(app, ["status", "--wait", "0.3" if waits is None else "30", "-o", "json"])
        assert run.exit_code == code, run.output
        assert run.stdout, (readings, run.output, run.exception)
        assert json.loads(run.stdout)["health"] == ("healthy" if code == 0 else "degraded")
        if waits is not None:
            assert len(waited) == waits
        else:
            assert "not healthy after 0.3s" in run.stderr and len(waited) >= 1
