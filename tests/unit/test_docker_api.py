"""Docker through the SDK (kctl.runtime.docker_api) and the engine seam, with autospec mocks of the SDK's client:
no test here opens the Docker socket."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import docker
import pytest
from docker.errors import APIError

from kctl import contract
from kctl.errors import DockerUnavailable, KctlError, TimeoutReached
from kctl.model.spec import ClusterSpec, Engine
from kctl.runtime import docker_api, supervisor
from kctl.runtime.engine import engines
from kctl.runtime.engine.compose import ComposeEngine
from kctl.runtime.engine.swarm import SwarmEngine

RUNTIME = Path(__file__).resolve().parents[2] / "kctl" / "runtime"


def sdk_client() -> Any:
    """An autospec DockerClient whose low-level ``api`` is an autospec APIClient."""
    dc = mock.create_autospec(docker.DockerClient, instance=True)
    dc.api = mock.create_autospec(docker.APIClient, instance=True)
    return dc


def listing(name: str, state: str = "running", status: str = "Up 2 minutes (healthy)",
            swarm: bool = False) -> dict[str, Any]:
    labels = {contract.LABEL_CLUSTER: "logger", contract.LABEL_SERVICE: name, contract.LABEL_SERVICES:
              "zookeeper,kafka", contract.LABEL_STATE_DIR: "/srv/logger/.kctl/logger"}
    if swarm:
        labels[contract.LABEL_STACK_NAMESPACE] = "kctl-logger"
    return {"Id": f"id-{name}", "Names": [f"/kctl-logger-{name}-1"], "Labels": labels, "State": state,
            "Status": status, "Ports": [{"PrivatePort": 9092, "PublicPort": 19092, "Type": "tcp"},
                                        {"PrivatePort": 9092, "PublicPort": 19092, "Type": "tcp"}]}


def test_the_status_path_pins_the_api_version_and_lists_once(monkeypatch: pytest.MonkeyPatch) -> None:
    dc = sdk_client()
    dc.api.containers.return_value = [listing("logger2", "exited", "Exited (137) 5 seconds ago"), listing("logger1")]
    dc.api.top.return_value = {"Titles": ["PID", "COMMAND"],
                               "Processes": [["1", "java -cp x org.apache.zookeeper.server.quorum.QuorumPeerMain z"],
                                             ["2", "java -cp y kafka.Kafka /opt/kafka/config/server.properties"]]}
    from_env = mock.create_autospec(docker.from_env, return_value=dc)
    monkeypatch.setattr(docker, "from_env", from_env)
    eng = engines.for_spec(ClusterSpec())
    found = eng.observe(ClusterSpec(), timeout=3)
    assert [(c.name, c.state, c.health, c.host_ports) for c in found] == [
        ("logger1", "running", "healthy", (19092,)), ("logger2", "exited", None, (19092,))]
    assert found[0].state_dir == "/srv/logger/.kctl/logger" and found[0].engine == "compose"
    assert eng.processes(found[0], 3) == {"zookeeper": "RUNNING", "kafka": "RUNNING"}
    # one client for the observation and its process tables, with a pinned version: no GET /version, no ping
    from_env.assert_called_once_with(timeout=3, version=docker_api.PINNED_API_VERSION)
    dc.api.containers.assert_called_once_with(all=True, filters={"label": [f"{contract.LABEL_CLUSTER}=logger"]})
    dc.api.top.assert_called_once_with("id-logger1", ps_args="-eo pid,args")
    dc.ping.assert_not_called()
    dc.version.assert_not_called()


def test_an_engine_that_refuses_the_pinned_version_is_asked_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = sdk_client(), sdk_client()
    old.api.containers.side_effect = APIError("400 Client Error", explanation="client version 1.41 is too old."
                                              " Minimum supported API version is 1.44")
    new.api.containers.return_value = [listing("logger1")]
    from_env = mock.create_autospec(docker.from_env, side_effect=[old, new])
    monkeypatch.setattr(docker, "from_env", from_env)
    assert [c.name for c in docker_api.listed("logger")] == ["logger1"]
    assert [c.kwargs["version"] for c in from_env.call_args_list] == [docker_api.PINNED_API_VERSION, "auto"]


def test_an_engine_that_does_not_answer_is_one_error_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    dc = sdk_client()
    dc.api.containers.side_effect = docker.errors.DockerException("Error while fetching server API version:"
                                                                  " Connection aborted")
    monkeypatch.setattr(docker, "from_env", mock.create_autospec(docker.from_env, return_value=dc))
    with pytest.raises(DockerUnavailable) as err:
        docker_api.listed("logger")
    assert "not reachable" in err.value.message and "dockerd" in (err.value.hint or "")
    # a process table that cannot be read is "no answer", not a crash of `kctl status`
    dc.api.top.side_effect = docker.errors.DockerException("gone")
    assert docker_api.processes(docker_api.StatusClient(dc=dc), "id-logger1", ("kafka",)) == {}


def test_creating_a_deploy_client_sends_no_ping(monkeypatch: pytest.MonkeyPatch) -> None:
    dc = sdk_client()
    from_env = mock.create_autospec(docker.from_env, return_value=dc)
    monkeypatch.setattr(docker, "from_env", from_env)
    assert ComposeEngine().client(timeout=7) is dc
    from_env.assert_called_once_with(timeout=7, version="auto")  # the negotiation proves the engine answers
    dc.ping.assert_not_called()
    from_env.side_effect = docker.errors.DockerException("Error while fetching server API version")
    with pytest.raises(DockerUnavailable):
        docker_api.client()


def test_swarm_observes_the_tasks_of_other_nodes_without_a_process_table(monkeypatch: pytest.MonkeyPatch) -> None:
    dc = sdk_client()
    dc.api.containers.return_value = [listing("logger1", swarm=True)]
    dc.api.info.return_value = {"Swarm": {"ControlAvailable": True, "NodeID": "me"}}
    labels = {contract.LABEL_CLUSTER: "logger", contract.LABEL_SERVICE: "logger2", contract.LABEL_SERVICES: "kafka"}
    dc.api.tasks.return_value = [
        {"ID": "t1", "NodeID": "me", "Spec": {"ContainerSpec": {"Labels": labels}}, "Status": {"State": "running"}},
        {"ID": "t2", "NodeID": "other", "Spec": {"ContainerSpec": {"Labels": labels}},
         "Status": {"State": "running", "ContainerStatus": {"ContainerID": "c2"}}}]
    monkeypatch.setattr(docker, "from_env", mock.create_autospec(docker.from_env, return_value=dc))
    spec = ClusterSpec(engine=Engine.swarm)
    eng = engines.for_spec(spec)
    found = eng.observe(spec)
    assert [(c.name, c.id, c.remote) for c in found] == [("logger1", "id-logger1", False), ("logger2", "c2", True)]
    assert eng.processes(found[1]) == {}
    dc.api.top.assert_not_called()
    dc.api.tasks.assert_called_once_with(filters={"desired-state": "running"})


# ----- the seam --------------------------------------------------------------------------------------


def test_the_engine_is_abstract_and_for_spec_picks_an_implementation() -> None:
    with pytest.raises(TypeError, match="abstract"):
        engines.Engine()  # type: ignore[abstract]
    assert isinstance(engines.for_spec(ClusterSpec()), ComposeEngine)
    assert isinstance(engines.for_spec(ClusterSpec(engine=Engine.swarm)), SwarmEngine)


def _kctl_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function-level imports included
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kctl"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


# Where naming engine swarm is the point: the Swarm engine, the pick (for_spec), the labels that tell which engine
# made a container and the refusal that says so; the spec and what renders it; `kctl swarm`; its benchmark.
SWARM_NAMED = {"runtime/engine/swarm.py", "runtime/engine/engines.py", "runtime/docker_api.py",
               "runtime/engine/base.py", "model/spec.py", "model/render.py", "model/properties.py", "cli/swarm.py",
               "bench/swarm.py"}


def test_the_seam_points_one_way() -> None:
    # docker_api <- engine_base <- compose, swarm <- engines: no module imports one above it, even in a function
    above = {"docker_api.py": {"base", "compose", "swarm", "engines", "faults"},
             "engine/base.py": {"compose", "swarm", "engines", "faults"},
             "engine/compose.py": {"swarm", "engines", "faults"},
             "engine/swarm.py": {"compose", "engines", "faults"}}
    for name, forbidden in above.items():
        bad = {m for m in _kctl_imports(RUNTIME / name) if m.split(".")[-1] in forbidden}
        assert not bad, f"{name} imports {sorted(bad)}"
    # faults act through the Engine: no engine-specific module, and no branch on the engine's kind
    assert not {m for m in _kctl_imports(RUNTIME / "faults.py") if m.split(".")[-1] in ("compose", "swarm")}
    for path in sorted(RUNTIME.parent.rglob("*.py")):
        if str(path.relative_to(RUNTIME.parent)) in SWARM_NAMED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        branches = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "swarm"
                    or isinstance(n, ast.Constant) and n.value == "swarm"]
        assert not branches, f"{path.relative_to(RUNTIME.parent)} names engine swarm at lines {branches}"


# ----- faults through the engine -------------------------------------------------------------------


class Box:
    """An SDK container object, as far as faults use it."""

    def __init__(self, cid: str, host: str, status: str = "running", swarm: bool = False) -> None:
        self.id = self.short_id = cid
        self.name = f"kctl-logger-{host}-1"
        self.status = status
        self.labels = {contract.LABEL_CLUSTER: "logger", contract.LABEL_SERVICE: host,
                       contract.LABEL_SERVICES: "zookeeper,kafka"}
        if swarm:
            self.labels[contract.LABEL_STACK_NAMESPACE] = "kctl-logger"
        self.attrs: dict[str, Any] = {"Created": cid, "NetworkSettings": {"Networks": {"kctl-logger": {}}}}
        self.calls: list[str] = []

    def reload(self) -> None:
        pass

    def stop(self, timeout: int = 0) -> None:
        self.calls.append("stop")
        self.status = "exited"

    def start(self) -> None:
        self.calls.append("start")
        self.status = "running"

    def kill(self, signal: str = "SIGKILL") -> None:
        self.calls.append(f"kill {signal}")
        self.status = "exited"


def faults_on(spec: ClusterSpec, boxes: list[Box]) -> tuple[Any, Any]:
    from kctl.runtime.faults import Faults

    dc = sdk_client()
    dc.containers = mock.Mock()
    dc.containers.list.side_effect = lambda **_k: list(boxes)
    dc.networks = mock.Mock()
    return Faults(spec, dc=dc), dc


def test_on_compose_a_node_is_stopped_started_and_cut_off_by_docker() -> None:
    box = Box("a", "logger1")
    f, dc = faults_on(ClusterSpec(), [box])
    f.stop("logger1", "node")
    assert box.calls == ["stop"] and list(f.pending) == [("container", "logger1")]
    f.disconnect("logger1")
    dc.networks.get.assert_called_with("kctl-logger")
    dc.networks.get.return_value.disconnect.assert_called_once_with(box)
    box.attrs["NetworkSettings"]["Networks"] = {}
    report = f.heal()
    assert report.failed == [] and sorted(report.undone) == ["logger1 disconnected", "logger1 stopped"]
    dc.networks.get.return_value.connect.assert_called_once_with(box, aliases=["logger1"])
    assert box.calls == ["stop", "start"] and f.pending == {}


def test_on_swarm_a_killed_node_is_healed_by_its_replacement_task(monkeypatch: pytest.MonkeyPatch) -> None:
    old = Box("a", "logger1", swarm=True)
    boxes = [old]
    f, _dc = faults_on(ClusterSpec(engine=Engine.swarm), boxes)
    f.kill("logger1", "node")
    assert old.calls == ["kill SIGKILL"]
    boxes.append(Box("b", "logger1", swarm=True))  # Swarm's new task
    f.heal()
    assert old.calls == ["kill SIGKILL"] and f.pending == {}  # waited for the new task; never started the old one


def test_on_swarm_a_replacement_that_never_comes_says_what_it_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.runtime import faults

    monkeypatch.setattr(faults, "REPLACE_TIMEOUT", 0.0)
    old = Box("a", "logger1", swarm=True)
    f, _dc = faults_on(ClusterSpec(engine=Engine.swarm), [old])
    f.kill("logger1", "node")
    with pytest.raises(TimeoutReached) as err:
        f.start_container("logger1")
    assert "Swarm runs a new task" in err.value.message and "task container a exited" in err.value.message


def test_on_swarm_a_network_cut_is_iptables_in_the_container(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def exec_in(self: Any, spec: ClusterSpec, name: str, argv: list[str], **_k: Any) -> tuple[int, str]:
        ran.append(argv[-1])
        return 0, "removed\n" if "iptables -D" in argv[-1] else ""

    monkeypatch.setattr(SwarmEngine, "exec_in", exec_in)
    box = Box("a", "logger1", swarm=True)
    f, dc = faults_on(ClusterSpec(engine=Engine.swarm), [box])
    f.disconnect("logger1")
    assert "iptables -I INPUT -j KCTL_CUT" in ran[0]
    f.connect("logger1")
    assert "iptables -D INPUT -j KCTL_CUT" in ran[1] and f.pending == {}
    dc.networks.get.assert_not_called()  # a task's container stays on the stack's network


def test_a_host_on_another_swarm_node_is_refused_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec(engine=Engine.swarm)
    remote = docker_api.Container(id="c2", name="logger2", node="2", services=("kafka",), state="running",
                                  health=None, config_hash=None, remote=True, engine="swarm")
    monkeypatch.setattr(SwarmEngine, "_remote_tasks", lambda self, spec, timeout: [remote])
    f, _dc = faults_on(spec, [Box("a", "logger1", swarm=True)])
    with pytest.raises(KctlError) as err:
        f.pause("logger2")
    assert "another Swarm node" in err.value.message and "DOCKER_HOST" in (err.value.hint or "")
    assert f.pending == {}


def test_a_kraft_controllers_jvm_is_not_the_broker() -> None:
    import re

    from kctl.runtime.faults import JVM_PATTERN

    controller = "java -Xmx256m -cp /opt/kafka/libs/* kafka.Kafka /etc/kctl/controller.properties"
    broker = "java -Xmx512m -cp /opt/kafka/libs/* kafka.Kafka /etc/kctl/server.properties"
    assert docker_api.process_states([controller], ("zookeeper", "kafka"))["kafka"] == "STOPPED"
    assert docker_api.process_states([controller, broker], ("kafka",))["kafka"] == "RUNNING"
    # what pkill -f matches when a drill kills the broker, or the controller
    assert [bool(re.search(JVM_PATTERN["kafka"], c)) for c in (controller, broker)] == [False, True]
    assert [bool(re.search(JVM_PATTERN["controller"], c)) for c in (controller, broker)] == [True, False]


def test_a_container_removed_between_the_list_and_its_inspect_is_left_out() -> None:
    """The SDK lists ids, then inspects each: another run's container removed in between answered 404 and
    failed a test cluster's start (CI, 2026-11-28: remove_orphans while a neighbour worker tore its cluster
    down). Here the SDK's own ContainerCollection over a stand-in engine API whose second container is gone."""
    import os
    import socket

    from docker.errors import NotFound
    from docker.models.containers import ContainerCollection

    from kctl.testing import cluster as tc

    mine = {contract.LABEL_TESTING: "true", contract.LABEL_CLUSTER: "kt-mine",
            contract.LABEL_TESTING_OWNER: f"{socket.gethostname()}:{os.getpid()}"}
    api = mock.Mock()
    api.containers.return_value = [{"Id": "a" * 64}, {"Id": "b" * 64}]

    def inspect(cid: str) -> dict[str, Any]:
        if cid.startswith("b"):
            raise NotFound("No such container")
        return {"Id": cid, "Config": {"Labels": mine}, "State": {"Status": "running"}, "Name": "/kt-mine-logger1-1"}

    api.inspect_container.side_effect = inspect
    client = mock.Mock(api=api)
    client.containers = ContainerCollection(client=client)
    with pytest.raises(NotFound):  # what the SDK does by default
        client.containers.list(all=True)
    assert tc.remove_orphans(client) == []  # the live owner's cluster kept, the vanished one not an error
    listed = docker_api.sdk_containers("kt-mine", client)
    assert [c.id for c in listed] == ["a" * 64]


def test_a_service_its_supervisor_gave_up_on_is_failed_not_stopped() -> None:
    """supervisord's FATAL (the wrapper's crash-loop limit) is asked only when a process is missing (one exec);
    a host's failed systemd unit arrives in the process table as kctl's observe script prints it."""
    from kctl.cluster import health
    from kctl.runtime.engine import hosts

    zk = "java -cp /opt/zookeeper/lib/* org.apache.zookeeper.server.quorum.QuorumPeerMain /etc/kctl/zoo.cfg"
    broker = "java -Xmx512m -cp /opt/kafka/libs/* kafka.Kafka /etc/kctl/server.properties"
    sc = docker_api.StatusClient(dc=sdk_client())
    api = sc._dc.api
    api.top.return_value = {"Processes": [["1", zk], ["2", broker]]}
    assert docker_api.processes(sc, "c1", ("zookeeper", "kafka")) == {"zookeeper": "RUNNING", "kafka": "RUNNING"}
    api.exec_create.assert_not_called()  # all there: no exec on the status path

    api.top.return_value = {"Processes": [["1", zk]]}
    api.exec_create.return_value = {"Id": "e1"}
    api.exec_start.return_value = (b"kafka                FATAL     Exited too quickly (process log may have details)\n"
                                   b"zookeeper            RUNNING   pid 7, uptime 0:10:00\n")
    assert docker_api.processes(sc, "c1", ("zookeeper", "kafka")) == {"zookeeper": "RUNNING", "kafka": "FAILED"}
    assert api.exec_create.call_args.args == ("c1", supervisor.argv("status"))
    api.exec_start.return_value = b"kafka                            STOPPED   Nov 28 08:36 PM\n"
    assert docker_api.processes(sc, "c1", ("zookeeper", "kafka"))["kafka"] == "STOPPED"  # stopped by someone

    # a GAVE_UP line does not override a process that runs (a start since), nor name a service not there
    gave_up = f"{docker_api.GAVE_UP}kafka"
    assert docker_api.process_states([gave_up, broker], ("kafka",)) == {"kafka": "RUNNING"}
    assert docker_api.process_states([f"{docker_api.GAVE_UP}zookeeper"], ("kafka",)) == {"kafka": "STOPPED"}
    # a controller its supervisor gave up on is FAILED (whether the node should run one is the phase's question)
    assert docker_api.process_states([f"{docker_api.GAVE_UP}controller"], ("kafka",)) == {
        "kafka": "STOPPED", "controller": "FAILED"}
    # the shell that printed the lines shows in the host's table too, and is no GAVE_UP line
    assert docker_api.process_states([f"sh -c {hosts._OBSERVE}"], ("zookeeper", "kafka")) == {
        "zookeeper": "STOPPED", "kafka": "STOPPED"}
    assert "systemctl is-failed --quiet kctl-kafka.service && echo 'kctl: supervisor gave up on kafka'" in \
        hosts._OBSERVE

    spec = ClusterSpec.model_validate({"name": "logger"})
    said = health.process_problems(spec, "logger2", {"zookeeper": "RUNNING", "kafka": "FAILED"})
    assert said == ["kafka FAILED: its supervisor gave up restarting it (see `kctl logs logger2 --service kafka`;"
                    " `kctl up` starts it again)"]


def test_a_controller_its_supervisor_gave_up_on_is_failed_where_the_phase_runs_one() -> None:
    from kctl.cluster import health

    procs = docker_api.process_states(["x QuorumPeerMain", f"{docker_api.GAVE_UP}controller"],
                                      ("zookeeper", "kafka"))
    assert procs["controller"] == "FAILED"
    failed = ("controller FAILED: its supervisor gave up restarting it (see `kctl logs logger1 --service"
              " controller`; `kctl up` starts it again)")
    spec = ClusterSpec.model_validate({"name": "logger"})
    assert failed in health.process_problems(spec.with_kraft("kraft", "id"), "logger1", {**procs,
                                                                                         "zookeeper": "RETIRED"})
    assert failed in health.process_problems(spec.with_kraft("dual-write", "id"), "logger1", procs)
    # on ZooKeeper, no migration: the node runs no controller, so its program's state is no problem
    assert [p for p in health.process_problems(spec, "logger1", procs) if "controller" in p] == []


def test_nodes_made_before_the_restart_policy_get_it_in_place_and_nothing_else_is_touched() -> None:
    """`kctl up` on a cluster whose node containers have no restart policy (made by an older kctl): each gets
    unless-stopped through `docker update`, no recreate; a node that has it and a non-node container are left."""
    from kctl.runtime.engine import compose

    def container(host: str, policy: str, node: bool = True) -> Any:
        c = mock.create_autospec(docker.models.containers.Container, instance=True)
        c.labels = {contract.LABEL_CLUSTER: "logger", contract.LABEL_SERVICE: host,
                    **({contract.LABEL_NODE: host} if node else {})}
        c.attrs = {"HostConfig": {"RestartPolicy": {"Name": policy, "MaximumRetryCount": 0}}}
        return c

    old, new, other = container("logger1", ""), container("logger2", "unless-stopped"), container("prom", "no", False)
    dc = sdk_client()
    dc.containers.list.return_value = [old, new, other]
    assert compose.keep_restarting(ClusterSpec(), dc) == ["logger1"]
    old.update.assert_called_once_with(restart_policy={"Name": "unless-stopped"})
    new.update.assert_not_called()
    other.update.assert_not_called()
    old.restart.assert_not_called()
    old.stop.assert_not_called()


def test_stream_lines_gives_each_line_as_printed_and_ends_the_command_when_the_reader_stops() -> None:
    stream_lines = docker_api.stream_lines
    assert list(stream_lines(["sh", "-c", "echo one; echo two >&2; echo three"], with_stderr=True)) == \
        ["one", "two", "three"]
    assert list(stream_lines(["sh", "-c", "echo one; echo two >&2"], with_stderr=False)) == ["one"]
    # a command that never ends (`tail -F`, `docker service logs --follow`): the reader takes two lines and stops
    lines = stream_lines(["sh", "-c", "echo $$; while :; do echo tick; sleep 0.05; done"], with_stderr=False)
    pid = int(next(lines))
    assert next(lines) == "tick"
    lines.close()  # what Ctrl-C of `kctl logs -F` does to the generator
    gone = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    assert gone.returncode != 0, f"the command still runs: {gone.stdout}"
