"""Faults and container lookups across engines: which container is a host's, which engine made it, and the
refusals on engine swarm (no Docker: fake containers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from kctl import contract
from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec, Engine
from kctl.runtime.docker_api import current_containers
from kctl.runtime.engine import engines
from kctl.runtime.engine.engines import WrongEngine, check_engine
from kctl.runtime.faults import Faults


@dataclass
class FakeContainer:
    id: str
    host: str
    status: str
    created: str
    swarm: bool = False
    calls: list[str] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        out = {contract.LABEL_CLUSTER: "logger", contract.LABEL_SERVICE: self.host, contract.LABEL_SERVICES:
               "zookeeper,kafka"}
        if self.swarm:
            out[contract.LABEL_STACK_NAMESPACE] = "kctl-logger"
            out[contract.LABEL_SWARM_SERVICE_NAME] = f"kctl-logger_{self.host}"
        return out

    @property
    def attrs(self) -> dict[str, Any]:
        return {"Created": self.created}

    name = "x"

    def stop(self, timeout: int = 0) -> None:
        self.calls.append("stop")

    def reload(self) -> None:
        pass


class FakeDocker:
    def __init__(self, found: list[FakeContainer]) -> None:
        self.found = found
        self.containers = self

    def list(self, all: bool = False, filters: dict[str, str] | None = None,  # noqa: A002
             ignore_removed: bool = False) -> list[FakeContainer]:
        return self.found


def test_a_hosts_current_container_is_the_running_task_else_the_newest() -> None:
    old = FakeContainer("a", "logger1", "exited", "2026-01-01T00:00:00")
    new = FakeContainer("b", "logger1", "running", "2026-01-01T00:01:00")
    gone = FakeContainer("c", "logger2", "exited", "2026-01-01T00:00:00")
    later = FakeContainer("d", "logger2", "exited", "2026-01-01T00:02:00")
    assert [c.id for c in current_containers([new, old, later, gone])] == ["b", "d"]
    assert [c.id for c in current_containers([old, new])] == ["b"]


def test_engine_of_a_container_is_read_from_swarms_labels() -> None:
    assert engines.engine_of(FakeContainer("a", "logger1", "running", "", swarm=True).labels) == "swarm"
    assert engines.engine_of(FakeContainer("a", "logger1", "running", "").labels) == "compose"


@pytest.mark.parametrize("spec_engine,found_engine", [("compose", "swarm"), ("swarm", "compose")])
def test_a_command_never_touches_the_other_engines_containers(spec_engine: str, found_engine: str) -> None:
    spec = ClusterSpec(engine=Engine(spec_engine))
    check_engine(spec, [("logger1", spec_engine)])  # its own: fine
    with pytest.raises(WrongEngine) as err:
        check_engine(spec, [("logger1", found_engine), ("logger2", found_engine)])
    e = err.value
    assert e.exit_code == 2 and "nothing was changed" in e.message
    assert f"runs on engine {found_engine}" in e.message and f"says engine {spec_engine}" in e.message
    assert "logger1, logger2" in e.message and f"engine: {found_engine}" in (e.hint or "")


def test_faults_refuse_the_other_engines_containers() -> None:
    spec = ClusterSpec(engine=Engine.compose)
    f = Faults(spec, dc=FakeDocker([FakeContainer("a", "logger1", "running", "", swarm=True)]))
    with pytest.raises(WrongEngine):
        f.container("logger1")


def test_on_swarm_a_node_container_is_not_stopped_and_nothing_is_done() -> None:
    c = FakeContainer("a", "logger1", "running", "", swarm=True)
    f = Faults(ClusterSpec(engine=Engine.swarm), dc=FakeDocker([c]))
    with pytest.raises(KctlError) as err:
        f.stop("logger1", "node")
    assert "cannot stay stopped" in err.value.message and "nothing was done" in err.value.message
    assert "kill" in (err.value.hint or "")
    assert c.calls == [] and f.pending == {}


@pytest.mark.parametrize("hold", [True, False])
def test_a_killed_process_is_held_down_or_left_to_its_supervisor(hold: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # The node's supervisor starts a killed process again: a hold file keeps it down until start() releases
    # it; without a hold, the wrapper's start record goes (an injected kill is no crash loop: no back-off).
    ran: list[list[str]] = []
    f = Faults(ClusterSpec(), dc=FakeDocker([]))
    monkeypatch.setattr(f, "exec", lambda host, argv, timeout=60: ran.append(argv) or (0, ""))
    waited: list[bool] = []
    monkeypatch.setattr(f, "wait_process", lambda host, service, running, timeout=30: waited.append(running))
    f.kill("logger2", "kafka", hold=hold)
    first = ["touch", contract.hold_file("kafka")] if hold else ["rm", "-f", contract.starts_file("kafka")]
    assert ran[0] == first and ran[1][:2] == ["pkill", "-KILL"]
    assert waited == ([False] if hold else [])  # held: gone for good; not held: it may already be back
    assert ("kafka", "logger2") in f.pending  # an interrupted drill still starts it
    f.wait_back("logger2", "kafka")
    assert waited[-1] is True and f.pending == {}


class FreezerRefuses(FakeContainer):
    """A container whose pause the freezer refuses ``refusals`` times (cgroup v1 on a busy machine)."""

    refusals: int = 0

    def pause(self) -> None:
        from docker.errors import APIError

        self.calls.append("pause")
        if self.calls.count("pause") <= self.refusals:
            raise APIError("500 Server Error", explanation="Cannot pause container a: OCI runtime pause failed:"
                                                           " unable to freeze: unknown")
        self.status = "paused"

    def unpause(self) -> None:
        self.calls.append("unpause")
        self.status = "running"


@pytest.mark.parametrize(("refusals", "paused"), [(0, True), (2, True), (5, False)])
def test_a_pause_the_freezer_refuses_is_tried_again_and_never_left_half_done(
        refusals: int, paused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(time, "sleep", lambda s: None)
    c = FreezerRefuses("a", "logger1", "running", "")
    c.refusals = refusals
    f = Faults(ClusterSpec(), dc=FakeDocker([c]))
    if paused:
        f.pause("logger1")
        assert c.status == "paused" and c.calls.count("pause") == refusals + 1 and ("pause", "logger1") in f.pending
        f.unpause("logger1")
        assert c.status == "running" and f.pending == {}
    else:
        with pytest.raises(KctlError) as err:
            f.pause("logger1")
        assert "unable to freeze" in err.value.message and "left running" in (err.value.hint or "")
        assert c.calls.count("pause") == 5 and c.status == "running" and f.pending == {}
