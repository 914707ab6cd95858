"""kctl.cluster.lifecycle (converge, up, down) and the testing API on top of it, against a fake engine: no Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kctl.cluster import health, lifecycle
from kctl.errors import TimeoutReached
from kctl.model.render import render
from kctl.model.spec import ClusterSpec
from kctl.runtime import cluster as rc
from kctl.runtime import docker_api
from kctl.runtime.engine import engines
from kctl.runtime.engine.compose import ContainerInfo
from kctl.wait import Stage

SPEC = ClusterSpec()  # logger1..3


def info(name: str, state: str = "running", config_hash: str | None = None) -> ContainerInfo:
    return ContainerInfo(id=f"id-{name}", name=name, container_name=name, node=name, services=("zookeeper", "kafka"),
                         state=state, health=None, config_hash=config_hash, ports={})


class FakeEngine:
    """Records what lifecycle asks of the engine, in order."""

    def __init__(self, existing: list[ContainerInfo]) -> None:
        self.existing = existing
        self.calls: list[tuple[Any, ...]] = []
        self.procs: dict[str, dict[str, str]] = {}  # host -> service -> state; RUNNING where not given
        self.quorum = True  # what lifecycle._metadata_quorum answers

    def observe(self, spec: ClusterSpec, timeout: float = 5.0) -> list[docker_api.Container]:
        return [docker_api.Container(c.id, c.name, c.node, c.services, c.state, None, c.config_hash)
                for c in self.existing]

    def processes(self, c: docker_api.Container, timeout: float = 5.0) -> dict[str, str]:
        return {svc: self.procs.get(c.name, {}).get(svc, "RUNNING") for svc in c.services}

    uses_image = True

    def client(self, timeout: int = 30) -> object:
        return "dc"

    def stop_service(self, spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
        self.calls.append(("exec", host, ["stop", service]))
        return ""

    def start_service(self, spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
        self.calls.append(("exec", host, ["start", service]))
        return ""

    def containers(self, spec: ClusterSpec, dc: Any = None) -> list[ContainerInfo]:
        return list(self.existing)

    def preflight(self, spec: ClusterSpec, existing: dict[str, ContainerInfo], dc: Any, say: Any,
                  strict_spread: bool = False) -> None:
        self.calls.append(("preflight", sorted(existing)))

    def deploy(self, spec: ClusterSpec, state_dir: Path, say: Any, services: list[str]) -> None:
        self.calls.append(("deploy", tuple(services)))

    def check_before_down(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool) -> None:
        return None

    def remove_one(self, spec: ClusterSpec, host: str, *, stop_timeout: int = 180, keep_data: bool = False) -> bool:
        assert keep_data, "kctl down removes a node's data only through remove(volumes=True)"
        self.calls.append(("remove_one", host, stop_timeout))
        return True

    def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: Any) -> int:
        self.calls.append(("remove", volumes))
        return 0


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    eng = FakeEngine([info(h) for h in ("logger1", "logger2", "logger3")])
    monkeypatch.setattr(engines, "for_spec", lambda _spec: eng)
    monkeypatch.setattr(engines, "exec_in", lambda spec, name, argv, **_k: eng.calls.append(("exec", name, argv[-2:]))
                        or (0, ""))
    monkeypatch.setattr(rc, "require_image", lambda dc, ref: eng.calls.append(("image", ref)))
    monkeypatch.setattr(lifecycle, "_metadata_quorum", lambda spec: eng.quorum)
    return eng


def test_down_stops_kafka_everywhere_before_removing(fake: FakeEngine, tmp_path: Path) -> None:
    said: list[str] = []
    assert lifecycle.down(SPEC, tmp_path, progress=said.append) == 3
    execs = [c for c in fake.calls if c[0] == "exec"]
    assert sorted(c[1] for c in execs) == ["logger1", "logger2", "logger3"]
    assert all(c[2] == ["stop", "kafka"] for c in execs)
    assert fake.calls[-1] == ("remove", False) and tmp_path.exists()
    assert "logger2: stopping kafka (controlled shutdown)" in said


def test_down_not_graceful_removes_at_once_and_the_state_dir_with_volumes(fake: FakeEngine, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    lifecycle.down(SPEC, state, volumes=True, graceful=False)
    assert not [c for c in fake.calls if c[0] == "exec"]  # no controlled shutdown
    assert fake.calls == [("remove_one", "logger1", 0), ("remove_one", "logger2", 0), ("remove_one", "logger3", 0),
                          ("remove", True)]
    assert not state.exists()


def test_down_without_a_metadata_quorum_stops_at_once_and_says_why(fake: FakeEngine, tmp_path: Path) -> None:
    # a controlled shutdown needs the controller, through ZooKeeper: without a quorum each broker would wait
    # out supervisord's 120 s
    fake.quorum = False
    said: list[str] = []
    lifecycle.down(SPEC, tmp_path, progress=said.append)
    assert not [c for c in fake.calls if c[0] == "exec"]
    assert [c[0] for c in fake.calls] == ["remove_one", "remove_one", "remove_one", "remove"]
    assert any("no ZooKeeper quorum" in m for m in said)


def test_down_of_stopped_containers_asks_no_quorum(fake: FakeEngine, tmp_path: Path) -> None:
    fake.existing = [info(h, state="exited") for h in ("logger1", "logger2", "logger3")]
    fake.quorum = False  # not asked: nothing runs, nothing to shut down
    said: list[str] = []
    lifecycle.down(SPEC, tmp_path, progress=said.append)
    assert fake.calls == [("remove", False)] and not said


def test_converge_deploys_only_what_the_plan_changes(fake: FakeEngine, tmp_path: Path) -> None:
    hashes = {c.name: c.config_hash for c in render(SPEC, tmp_path).containers}
    fake.existing = [info("logger1", config_hash=hashes["logger1"]), info("logger2", "exited", hashes["logger2"])]
    res = lifecycle.converge(SPEC, tmp_path, build=False)
    assert [(i.name, i.action) for i in res.plan] == [("logger1", "noop"), ("logger2", "start"),
                                                      ("logger3", "create")]
    assert fake.calls == [("preflight", ["logger1", "logger2"]), ("image", SPEC.local_image_ref),
                          ("deploy", ("logger2", "logger3"))]
    assert (tmp_path / "compose.yaml").exists() and res.stages == []


def test_converge_starts_a_process_that_is_down_in_a_running_container(fake: FakeEngine, tmp_path: Path) -> None:
    # Self-healing's last resort: the supervisor gave up on logger2's broker (a crash loop), or someone
    # stopped it; `kctl up` starts it again through supervisorctl, ZooKeeper before Kafka, in no other node.
    hashes = {c.name: c.config_hash for c in render(SPEC, tmp_path).containers}
    fake.existing = [info(h, config_hash=hashes[h]) for h in ("logger1", "logger2", "logger3")]
    fake.procs = {"logger2": {"zookeeper": "STOPPED", "kafka": "FAILED"}, "logger3": {"kafka": "WAITING-FOR-QUORUM"}}
    res = lifecycle.converge(SPEC, tmp_path, build=False)
    assert [i.action for i in res.plan] == ["noop"] * 3 and res.started == ["logger2/zookeeper", "logger2/kafka"]
    execs = [c for c in fake.calls if c[0] == "exec"]
    assert [c[1:] for c in execs if c[2][0] == "start"] == [("logger2", ["start", "zookeeper"]),
                                                            ("logger2", ["start", "kafka"])]
    assert not any(c[0] == "deploy" for c in fake.calls)


def test_up_waits_through_the_readiness_stages_then_records_the_identity(
        fake: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([False, True])
    monkeypatch.setattr(health, "readiness_stages", lambda spec, state: [
        Stage("containers running", lambda: (next(answers), "logger3=created"))])
    # last, healthy as `kctl status` judges it (here: the stage that says so, after the readiness stages)
    monkeypatch.setattr(health, "healthy_stages", lambda spec: [
        Stage("zookeeper quorum", lambda: (False, "not asked by up")), Stage("healthy", lambda: (True, "healthy"))])
    recorded: list[Path] = []
    monkeypatch.setattr(lifecycle, "_record_identity", lambda spec, state: recorded.append(state))
    res = lifecycle.up(SPEC, tmp_path, build=False, timeout=5)
    assert [s.name for s in res.stages] == ["containers running", "healthy"] and recorded == [tmp_path]
    assert ("deploy", ("logger1", "logger2", "logger3")) in fake.calls  # none was made from this render

    monkeypatch.setattr(health, "readiness_stages", lambda spec, state: [
        Stage("exactly one ZooKeeper leader", lambda: (False, "logger1=looking"))])
    recorded.clear()
    with pytest.raises(TimeoutReached, match="exactly one ZooKeeper leader") as err:
        lifecycle.up(SPEC, tmp_path, build=False, timeout=0.2)
    assert "logger1=looking" in err.value.message and recorded == []

    assert lifecycle.up(SPEC, tmp_path, build=False, wait=False).stages == []


def test_the_testing_api_comes_up_and_goes_down_through_the_lifecycle(
        fake: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.testing import cluster as tc

    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(tc, "remove_orphans", lambda dc: calls.append(("orphans", dc)) or [])
    monkeypatch.setattr(lifecycle, "up", lambda spec, state, **kw: calls.append(("up", kw)))
    monkeypatch.setattr(lifecycle, "down", lambda spec, state, **kw: calls.append(("down", kw)))
    monkeypatch.setattr(tc.rc, "remove_by_label", lambda name, dc=None, volumes=True: calls.append(("label", name)))
    monkeypatch.setattr(engines, "client", lambda spec, timeout=30: "dc")
    cluster = tc.KafkaCluster(nodes=3, workdir=tmp_path, startup_timeout=42)
    with cluster:
        assert cluster.spec_file.exists()
        assert calls == [("orphans", "dc"), ("up", {"timeout": 42})]
    assert calls[2:] == [("down", {"volumes": True, "graceful": False}), ("label", cluster.spec.name)]


def test_a_failed_start_removes_what_it_made(fake: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.testing import cluster as tc

    calls: list[str] = []

    def fail(*_a: Any, **_k: Any) -> None:
        raise TimeoutReached("timed out after 1s waiting for: containers running")

    monkeypatch.setattr(tc, "remove_orphans", lambda dc: [])
    monkeypatch.setattr(lifecycle, "up", fail)
    monkeypatch.setattr(lifecycle, "down", lambda spec, state, **kw: calls.append("down"))
    monkeypatch.setattr(tc.rc, "remove_by_label", lambda name, dc=None, volumes=True: calls.append("label"))
    monkeypatch.setattr(engines, "client", lambda spec, timeout=30: "dc")
    with pytest.raises(TimeoutReached), tc.KafkaCluster(nodes=1):
        pass
    assert calls == ["down", "label"]


def test_the_testing_api_never_picks_a_brokers_secured_migration_port_for_another_port(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kctl.testing import cluster as tc

    # First draw: the broker's 30001 + migration_port_offset 100 is the ZooKeeper exporter's 30101.
    draws = iter([[30000, 30001, 30101, 30003, 30004, 30005, 30006],
                  [31000, 31001, 31002, 31003, 31004, 31005, 31006]])
    monkeypatch.setattr(tc, "free_ports", lambda n: next(draws)[:n])
    cluster = tc.KafkaCluster(nodes=1, workdir=tmp_path)
    ports = [p for p, _, _ in cluster.spec.published_ports(cluster.spec.nodes[0])]
    assert cluster.spec.kafka_host_port(cluster.spec.nodes[0]) == 31001
    assert 31101 not in ports and cluster.spec.monitoring.monitor_port == 31004


def test_the_testing_api_never_picks_a_port_the_caller_chose_for_jmx(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kctl.testing import cluster as tc

    # First draw: the ZooKeeper port is the JMX port the caller freed a moment ago (as CI once drew).
    draws = iter([[54877, 30001, 30002, 30003, 30004, 30005, 30006],
                  [31000, 31001, 31002, 31003, 31004, 31005, 31006]])
    monkeypatch.setattr(tc, "free_ports", lambda n: next(draws)[:n])
    cluster = tc.KafkaCluster(nodes=1, workdir=tmp_path, kafka={"jmx": True, "jmx_port_base": 54877})
    node = cluster.spec.nodes[0]
    assert cluster.spec.jmx_host_port(node) == 54877
    assert cluster.spec.zk_host_port(node) == 31000


def test_the_testing_api_stops_the_jit_at_c1_unless_told_otherwise(tmp_path: Path) -> None:
    from kctl.testing import cluster as tc

    quick = tc.KafkaCluster(nodes=1, workdir=tmp_path).spec
    assert quick.kafka.jvm_options == quick.zookeeper.jvm_options == ["-XX:TieredStopAtLevel=1"]
    full = tc.KafkaCluster(nodes=1, workdir=tmp_path, quick_jit=False).spec
    assert full.kafka.jvm_options == full.zookeeper.jvm_options == []
    own = tc.KafkaCluster(nodes=1, workdir=tmp_path, kafka={"jvm_options": ["-XX:+AlwaysPreTouch"]}).spec
    assert own.kafka.jvm_options == ["-XX:+AlwaysPreTouch"]
    assert own.zookeeper.jvm_options == ["-XX:TieredStopAtLevel=1"]
    # mirrors given as settings get it too, unless they name flags of their own
    source = {"bootstrap_servers": "127.0.0.1:1"}
    mirrored = tc.KafkaCluster(nodes=1, workdir=tmp_path, mirrors=[
        {"name": "a", "source": source}, {"name": "b", "source": source, "jvm_options": ["-XX:+UseSerialGC"]}]).spec
    assert [m.jvm_options for m in mirrored.mirrors] == [["-XX:TieredStopAtLevel=1"], ["-XX:+UseSerialGC"]]
    assert tc.KafkaCluster(nodes=1, workdir=tmp_path, quick_jit=False, mirrors=[
        {"name": "a", "source": source}]).spec.mirrors[0].jvm_options == []


def test_the_quick_jit_rule_fills_kctl_inits_empty_flags_and_keeps_named_ones() -> None:
    from kctl.testing.cluster import with_quick_jit

    written = {"name": "x", "zookeeper": {"jvm_options": [], "host_port_base": 12181},
               "kafka": {"jvm_options": ["-XX:+UseSerialGC"]},
               "mirrors": [{"name": "a", "jvm_options": []}, {"name": "b"}]}
    before = repr(written)
    quick = with_quick_jit(written)
    assert quick["zookeeper"] == {"jvm_options": ["-XX:TieredStopAtLevel=1"], "host_port_base": 12181}
    assert quick["kafka"]["jvm_options"] == ["-XX:+UseSerialGC"]
    assert quick["kafka"]["controller_jvm_options"] == ["-XX:TieredStopAtLevel=1"]  # a KRaft controller's
    assert [m["jvm_options"] for m in quick["mirrors"]] == [["-XX:TieredStopAtLevel=1"]] * 2
    assert repr(written) == before  # the caller's data as it was
    assert with_quick_jit({})["kafka"] == {"jvm_options": ["-XX:TieredStopAtLevel=1"],
                                           "controller_jvm_options": ["-XX:TieredStopAtLevel=1"]}
    named = with_quick_jit({"kafka": {"controller_jvm_options": ["-XX:+UseSerialGC"]}})
    assert named["kafka"]["controller_jvm_options"] == ["-XX:+UseSerialGC"]


def test_a_kraft_controller_gets_its_own_jvm_flags_not_the_brokers() -> None:
    """kafka.controller_jvm_options go to each controller's JVM file (controller-start reads it) after the
    secured profile's and the engine's; kafka.jvm_options stay the brokers'."""
    from kctl import contract
    from kctl.model import properties
    from kctl.model.render import node_files

    spec = ClusterSpec.model_validate({"name": "k", "kafka": {"jvm_options": ["-XX:+UseSerialGC"],
                                                             "controller_jvm_options": ["-XX:TieredStopAtLevel=1"]}})
    assert properties.controller_jvm_options(spec) == "-XX:TieredStopAtLevel=1"
    assert "UseSerialGC" not in properties.controller_jvm_options(spec)
    kraft = spec.with_kraft("kraft", "AAAAAAAAAAAAAAAAAAAAAA")
    files = node_files(kraft, "logger1", kraft.nodes[0], ("zookeeper", "kafka"))
    assert files["conf/" + contract.CONTROLLER_JVM_FILE] == "-XX:TieredStopAtLevel=1\n"
    plain = ClusterSpec.model_validate({"name": "k"}).with_kraft("kraft", "AAAAAAAAAAAAAAAAAAAAAA")
    assert "conf/" + contract.CONTROLLER_JVM_FILE not in node_files(plain, "logger1", plain.nodes[0],
                                                                     ("zookeeper", "kafka"))
    for bad in (["-XX:+UseG1GC -Xmx1g"], ["-Xmx1g"], ["-Dsasl.password=x"]):  # checked as the brokers' are
        with pytest.raises(ValueError):
            ClusterSpec.model_validate({"kafka": {"controller_jvm_options": bad}})
    with pytest.raises(ValueError, match="use the `controller_heap` setting"):  # the controller's own, not heap
        ClusterSpec.model_validate({"kafka": {"controller_jvm_options": ["-Xmx1g"]}})
    with pytest.raises(ValueError, match="use the `heap` setting"):
        ClusterSpec.model_validate({"kafka": {"jvm_options": ["-Xmx1g"]}})


def test_a_kraft_controllers_heap_is_its_own_setting() -> None:
    """kafka.controller_heap after every other flag in the controller's JVM file: controller-start puts that
    file after the image's -Xmx256m, and the JVM takes the last -Xmx; unset, no file on a plain cluster."""
    from kctl import contract
    from kctl.model.render import node_files

    spec = ClusterSpec.model_validate({"name": "k", "kafka": {"heap": "768m", "controller_heap": "384m",
                                                             "controller_jvm_options": ["-XX:+UseSerialGC"]}})
    kraft = spec.with_kraft("kraft", "AAAAAAAAAAAAAAAAAAAAAA")
    files = node_files(kraft, "logger1", kraft.nodes[0], ("zookeeper", "kafka"))
    assert files["conf/" + contract.CONTROLLER_JVM_FILE] == "-XX:+UseSerialGC -Xms384m -Xmx384m\n"
    for bad in ("384", "1.5g", "-Xmx1g"):
        with pytest.raises(ValueError, match="is not a JVM heap size"):
            ClusterSpec.model_validate({"kafka": {"controller_heap": bad}})


def test_the_testing_api_lets_followers_wait_2_s_for_data_unless_told_otherwise(tmp_path: Path) -> None:
    from kctl.model.properties import server_properties
    from kctl.testing import cluster as tc

    quiet = tc.KafkaCluster(nodes=1, workdir=tmp_path, kafka={"overrides": {"auto.leader.rebalance.enable": "false"}})
    props = server_properties(quiet.spec, quiet.spec.nodes[0])
    assert props["replica.fetch.wait.max.ms"] == "2000" and props["auto.leader.rebalance.enable"] == "false"
    assert "replica.fetch.wait.max.ms" not in tc.KafkaCluster(nodes=1, workdir=tmp_path,
                                                              follower_wait_ms=None).spec.kafka.overrides
    for key in ("replica.fetch.wait.max.ms", "replica.lag.time.max.ms", "replica.socket.timeout.ms"):
        own = tc.KafkaCluster(nodes=1, workdir=tmp_path, kafka={"overrides": {key: "1000"}}).spec.kafka.overrides
        assert own == {key: "1000"}  # a bound of the wait named by the caller: Kafka's default wait
