"""A kctl.yaml acts only on its own cluster: the identity record and the checks (no Docker, no JVM)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kctl.cluster import health, identity
from kctl.contract import LABEL_STATE_DIR
from kctl.kafka import describe as kmd
from kctl.kafka.client import Target
from kctl.model.render import render
from kctl.model.spec import ClusterSpec
from kctl.runtime import docker_api
from tests.unit.fake_zk import free_port
from tests.unit.test_describe import fake_broker


def _container(name: str, state_dir: str | None, state: str = "running", cluster: str = "logger",
               ports: tuple[int, ...] = ()) -> docker_api.Container:
    return docker_api.Container(id=name, name=name, node=name, services=("zookeeper", "kafka"), state=state,
                            health=None, config_hash=None, cluster=cluster, state_dir=state_dir, host_ports=ports)


def test_render_labels_every_container_with_its_absolute_state_dir(tmp_path: Path) -> None:
    import yaml

    compose = yaml.safe_load(render(ClusterSpec(), tmp_path / "st").files["compose.yaml"])
    labels = {s["labels"][LABEL_STATE_DIR] for s in compose["services"].values()}
    assert labels == {str((tmp_path / "st").resolve())}
    assert LABEL_STATE_DIR not in yaml.safe_load(render(ClusterSpec()).files["compose.yaml"])["services"][
        "logger1"]["labels"]


def test_engine_reads_state_dir_from_kctl_label_then_compose_working_dir() -> None:
    assert docker_api.state_dir_of({LABEL_STATE_DIR: "/a", "com.docker.compose.project.working_dir": "/b"}) == "/a"
    assert docker_api.state_dir_of({"com.docker.compose.project.working_dir": "/b"}) == "/b"
    assert docker_api.state_dir_of({}) is None


def test_record_and_read_round_trip(tmp_path: Path) -> None:
    assert identity.read(tmp_path) is None
    identity.record(ClusterSpec(name="probe"), tmp_path, "abc")
    rec = identity.read(tmp_path)
    assert rec is not None and (rec.cluster, rec.cluster_id, rec.state_dir) == ("probe", "abc", str(tmp_path))


def test_same_name_other_state_dir_is_refused(tmp_path: Path) -> None:
    identity.check_state_dirs(ClusterSpec(), tmp_path, [("logger1", str(tmp_path)), ("logger2", None)])
    with pytest.raises(identity.ForeignCluster) as ei:
        identity.check_state_dirs(ClusterSpec(), tmp_path, [("logger1", "/elsewhere/.kctl/logger")])
    assert ei.value.exit_code == 2
    assert "/elsewhere/.kctl/logger" in ei.value.message and str(tmp_path) in ei.value.message
    assert ei.value.hint and "name" in ei.value.hint and "state_dir" in ei.value.hint


def _spec_on(port: int) -> ClusterSpec:
    return ClusterSpec.model_validate({"nodes": [{"id": 1, "hostname": "logger1", "kafka_port": port}]})


def test_verify_refuses_a_cluster_id_other_than_the_recorded_one(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    with fake_broker() as port:
        spec = _spec_on(port)
        monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [
            _container("logger1", str(other), cluster="logger", ports=(port,))])
        identity.record(spec, tmp_path, "mine")
        with pytest.raises(identity.ForeignCluster) as ei:
            identity.verify(spec, tmp_path)
    msg = ei.value.message
    assert "cluster id mine" in msg and "cluster id c1uSt3r-iD" in msg and str(other) in msg


def test_verify_accepts_its_own_cluster_with_one_metadata_request(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_docker(*_a: object, **_k: object) -> None:
        raise AssertionError("Docker must not be asked when the recorded id matches")

    monkeypatch.setattr(docker_api, "listed", no_docker)
    with fake_broker() as port:
        spec = _spec_on(port)
        identity.record(spec, tmp_path, "c1uSt3r-iD")
        assert identity.verify(spec, tmp_path) == "c1uSt3r-iD"


def test_verify_of_a_stopped_cluster_names_who_holds_its_ports(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_broker() as port:
        spec = _spec_on(port)

        def containers(cluster: str | None, sc: object = None) -> list[docker_api.Container]:
            if cluster is None:  # every kctl container: the owner of the port
                return [_container("logger1", "/srv/a/.kctl/logger", cluster="logger", ports=(port,))]
            return []  # this spec's cluster has no container

        monkeypatch.setattr(docker_api, "listed", containers)
        with pytest.raises(identity.ForeignCluster) as ei:
            identity.verify(spec.model_copy(update={"name": "probe"}), tmp_path)
    assert "'probe'" in ei.value.message and "is not running" in ei.value.message
    assert "cluster 'logger'" in ei.value.message and "/srv/a/.kctl/logger" in ei.value.message


def test_verify_of_a_stopped_cluster_with_free_ports_says_not_running(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [])
    with pytest.raises(identity.NotRunning) as ei:
        identity.verify(_spec_on(free_port()), tmp_path, timeout=0.3)  # nothing listens there
    assert ei.value.exit_code == 2 and ei.value.hint == "`kctl up` starts it"


def test_status_of_a_cluster_without_containers_shows_nothing_of_another(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [])
    obs = health.Observations(containers={}, zookeeper={"logger1": health.ZkState("logger1", 2181, "leader")},
                              kafka=kmd.Metadata((1, 2, 3), 2, (), "127.0.0.1:9092", cluster_id="theirs"))
    with pytest.raises(identity.KctlError) as ei:
        health.check_identity(ClusterSpec(name="probe"), tmp_path, obs)
    assert ei.value.exit_code == 2 and "is not running" in ei.value.message


def test_status_records_the_identity_of_its_own_running_cluster(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Who holds the ports, for the refusal's message: no container (Docker is not asked).
    monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [])
    obs = health.Observations(
        containers={"logger1": health.ContainerObs("logger1", "running", None, state_dir=str(tmp_path))},
        kafka=kmd.Metadata((1,), 1, (), "127.0.0.1:9092", cluster_id="ours"))
    health.check_identity(ClusterSpec(), tmp_path, obs)
    rec = identity.read(tmp_path)
    assert rec is not None and rec.cluster_id == "ours"
    obs.kafka = kmd.Metadata((1,), 1, (), "127.0.0.1:9092", cluster_id="theirs")
    with pytest.raises(identity.ForeignCluster):
        health.check_identity(ClusterSpec(), tmp_path, obs)


def test_init_next_to_a_running_cluster_warns_or_picks_free_ports(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.runtime import ports

    d = ClusterSpec()
    zk0, kafka0 = d.zookeeper.host_port_base, d.kafka.external_port_base
    running = [_container(f"logger{i}", "/srv/a/.kctl/logger", ports=(zk0 + i, kafka0 + i)) for i in (0, 1, 2)]
    monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: running)
    monkeypatch.setattr(ports, "port_free", lambda port: port != kafka0 + 100)  # something else holds it
    plan = identity.plan_init("logger", tmp_path / ".kctl" / "logger", pick_ports=False)
    assert plan.settings == {}
    assert any("already exists in /srv/a/.kctl/logger" in w for w in plan.warnings)
    assert any(str(zk0) in w and "cluster 'logger'" in w and "--name" in w for w in plan.warnings)
    plan = identity.plan_init("probe", tmp_path / ".kctl" / "probe", pick_ports=True)
    assert plan.warnings == []
    # one step up would put Kafka on the busy port: two steps
    assert plan.settings["zookeeper"]["host_port_base"] == zk0 + 200
    assert plan.settings["kafka"]["external_port_base"] == kafka0 + 200
    spec = ClusterSpec.model_validate({**plan.settings, "name": "probe"})
    assert not {p for p, _ in ports.host_ports(spec)} & {p for c in running for p in c.host_ports}


def test_init_on_a_free_machine_keeps_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.runtime import ports

    monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [])
    monkeypatch.setattr(ports, "port_free", lambda port: True)
    assert identity.plan_init("probe", tmp_path, pick_ports=True) == identity.InitPlan("probe", {}, [])


def test_status_of_a_stopped_cluster_with_free_ports_is_its_own_down_report(tmp_path: Path) -> None:
    obs = health.Observations(containers={}, zookeeper={"logger1": health.ZkState("logger1", 1, "down")},
                              kafka=None, kafka_error="no answer")
    health.check_identity(ClusterSpec(name="probe"), tmp_path, obs)  # nothing of another cluster: no error
    assert health.assess(ClusterSpec(name="probe"), obs).exit_code == 2


def test_a_cluster_id_in_kctl_yaml_binds_the_spec_to_that_cluster(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [_container("logger1", str(tmp_path))])
    with fake_broker() as port:
        spec = _spec_on(port).model_copy(update={"cluster_id": "restored"})
        with pytest.raises(identity.ForeignCluster) as ei:
            identity.verify(spec, tmp_path)  # no record in this (fresh) state dir: the spec's id decides
    assert "cluster id restored" in ei.value.message and "c1uSt3r-iD" in ei.value.message
    assert identity.read(tmp_path) is None  # a refused cluster is never recorded


def test_up_on_ports_of_another_cluster_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec(name="probe")
    port = spec.kafka_host_port(spec.nodes[1])
    monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [
        _container("logger2", "/srv/a/.kctl/logger", cluster="logger", ports=(port,))])
    with pytest.raises(identity.ForeignCluster) as ei:
        identity.check_ports(spec, tmp_path)
    assert "cluster 'logger'" in ei.value.message and "/srv/a/.kctl/logger" in ei.value.message
    assert f"host ports {port} are in use on 127.0.0.1" in ei.value.message
    identity.check_ports(ClusterSpec(name="logger"), tmp_path)  # its own ports: `up` converges them


def test_write_guard_refuses_a_cluster_no_kctl_yaml_names(tmp_path: Path) -> None:
    from kctl.errors import UsageError

    with pytest.raises(UsageError, match=r"refusing to change the cluster at h:9 \(cluster id other\): no"
                                         r" .*kctl.yaml names it; nothing was changed") as exc:
        identity.check_write("h:9", "other", None, tmp_path / "kctl.yaml")
    assert exc.value.hint and "without --bootstrap-server" in exc.value.hint


def test_write_guard_lets_a_change_through_only_to_the_recorded_cluster(tmp_path: Path) -> None:
    from kctl.errors import UsageError

    spec = ClusterSpec(name="mine")
    spec_file = tmp_path / "kctl.yaml"
    with pytest.raises(UsageError, match="no recorded cluster id"):  # never up: nothing says which cluster
        identity.check_write("h:9", "abc", spec, spec_file)
    identity.record(spec, tmp_path / ".kctl" / "mine", "abc")
    identity.check_write("h:9", "abc", spec, spec_file)  # its own cluster: no refusal
    with pytest.raises(UsageError, match=r"cluster id other.*names cluster 'mine' \(cluster id abc, state dir"):
        identity.check_write("h:9", "other", spec, spec_file)
    with pytest.raises(UsageError, match=r"cluster id unknown"):  # nothing answered: not known to be this one
        identity.check_write("h:9", None, spec, spec_file)
    pinned = ClusterSpec(name="mine", cluster_id="xyz")  # kctl.yaml's cluster_id wins over the record
    identity.check_write("h:9", "xyz", pinned, spec_file)
    with pytest.raises(UsageError, match="cluster id xyz"):
        identity.check_write("h:9", "abc", pinned, spec_file)


def test_verify_takes_a_commands_own_metadata_answer_when_it_names_the_recorded_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_round_trip(*_a: object, **_k: object) -> None:
        raise AssertionError("neither Kafka nor Docker is asked when the command's own answer matches")

    monkeypatch.setattr(docker_api, "listed", no_round_trip)
    monkeypatch.setattr(kmd, "fetch_any", no_round_trip)
    spec = _spec_on(free_port())
    identity.record(spec, tmp_path, "mine")
    assert identity.verify(spec, tmp_path, seen="mine") == "mine"
    monkeypatch.undo()
    # Another id goes the whole way: the cluster's own answer and its containers decide, as without one.
    with fake_broker() as port:
        spec = _spec_on(port)
        monkeypatch.setattr(docker_api, "listed", lambda cluster, sc=None: [
            _container("logger1", str(tmp_path / "other"), ports=(port,))])
        identity.record(spec, tmp_path, "mine")
        with pytest.raises(identity.ForeignCluster) as ei:
            identity.verify(spec, tmp_path, seen="c1uSt3r-iD")
    assert "cluster id mine" in ei.value.message and "cluster id c1uSt3r-iD" in ei.value.message


class _Consumer:
    """What kctl.kafka.console's consumer is asked, in order."""

    def __init__(self, cluster_id: str | None) -> None:
        self.cluster_id = cluster_id
        self.calls: list[str] = []

    def list_topics(self, timeout: float | None = None) -> Any:
        from confluent_kafka import KafkaException

        self.calls.append("list_topics")
        if self.cluster_id is None:
            raise KafkaException("no broker answered")
        return SimpleNamespace(cluster_id=self.cluster_id,
                               topics={"t": SimpleNamespace(partitions={0: None, 1: None}, error=None)})

    def assign(self, parts: object) -> None:
        self.calls.append("assign")

    def close(self) -> None:
        self.calls.append("close")


def test_the_console_consumer_asks_its_check_before_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.errors import ClusterError
    from kctl.kafka import console

    seen: list[str | None] = []

    def refuse(cid: str | None) -> None:
        seen.append(cid)
        raise identity.ForeignCluster("another cluster", hint="h")

    made = _Consumer("theirs")
    monkeypatch.setattr(console, "consumer", lambda *a, **k: made)
    with pytest.raises(identity.ForeignCluster):
        console.ConsoleConsumer(Target.of(ClusterSpec()), "t", check=refuse)
    assert seen == ["theirs"] and made.calls == ["list_topics", "close"]  # nothing assigned, nothing read

    made = _Consumer("mine")
    monkeypatch.setattr(console, "consumer", lambda *a, **k: made)
    with console.ConsoleConsumer(Target.of(ClusterSpec()), "t", check=seen.append):
        assert made.calls == ["list_topics", "assign"] and seen[-1] == "mine"  # one Metadata answer for both

    def stopped(cid: str | None) -> None:
        raise identity.NotRunning("cluster 'logger' is not running", hint="`kctl up` starts it")

    made = _Consumer(None)  # no broker answered: the check speaks first (not running, another cluster)
    monkeypatch.setattr(console, "consumer", lambda *a, **k: made)
    with pytest.raises(identity.NotRunning):
        console.ConsoleConsumer(Target.of(ClusterSpec()), "t", check=stopped)
    with pytest.raises(ClusterError, match="unreachable"):  # ... and when it has nothing to say, the consumer does
        console.ConsoleConsumer(Target.of(ClusterSpec()), "t", check=seen.append)
    assert seen[-1] is None and made.calls.count("close") == 2
    with pytest.raises(ValueError):  # a group would be looked up on a cluster not yet checked
        console.ConsoleConsumer(Target.of(ClusterSpec()), "t", group="g", check=seen.append)
