"""A roll interrupted between a stop and its start (Ctrl-C, SIGTERM, an error, a kill of kctl) puts back what it
stopped, or leaves a record the next roll puts back first; every other change is refused meanwhile. The cluster
is faked here (services.stop/start record their calls, gates answer at once); tests/integration/test_restart.py
interrupts a real roll of a real cluster."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest

from kctl.cluster import lock as state_lock
from kctl.errors import ClusterError
from kctl.model.spec import ClusterSpec, NodeSpec
from kctl.roll import plan as rp
from kctl.roll import run
from kctl.runtime.engine import engines, services

SPEC = ClusterSpec(nodes=[NodeSpec(id=i, hostname=f"logger{i}") for i in (1, 2, 3)])


class Cluster:
    """services.stop/start faked: what was asked, and what the roll's record said at each stop."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, state_dir: Path, service: str = "kafka") -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.recorded_at_stop: list[list[list[str]]] = []
        self.on_start: Callable[[str, str], None] = lambda host, svc: None
        self.state_dir = state_dir
        the_plan = rp.plan_roll(SPEC, service=service, zk_modes={"logger1": "follower", "logger2": "follower",
                                                                 "logger3": "leader"}, controller=3)
        monkeypatch.setattr(run, "plan", lambda *_a: the_plan)
        monkeypatch.setattr(engines, "containers", mock.create_autospec(engines.containers, return_value=[]))
        for name in ("pre_checks", "min_isr_gate", "process_gate", "registered_gate", "urp_gate",
                     "unregistered_gate", "zk_mode_gate", "one_leader_gate"):
            monkeypatch.setattr(run, name, lambda *_a: lambda: (True, "fine"))
        monkeypatch.setattr(run._Runner, "docker", lambda self: None)
        monkeypatch.setattr(services, "stop", self.stop)
        monkeypatch.setattr(services, "start", self.start)

    def stop(self, spec: object, host: str, svc: str, dc: object = None) -> str:
        self.recorded_at_stop.append(json.loads(state_lock.record_path(self.state_dir).read_text())["down"])
        self.calls.append(("stop", host, svc))
        return ""

    def start(self, spec: object, host: str, svc: str, dc: object = None) -> str:
        self.calls.append(("start", host, svc))
        self.on_start(host, svc)
        return ""

    def interrupt_at(self, monkeypatch: pytest.MonkeyPatch, broker: int, how: Callable[[], None]) -> None:
        """``how`` runs inside the gate that waits for ``broker``'s registration to go: its process is stopped."""
        def gate(_spec: object, b: int) -> run.Probe:
            def probe() -> tuple[bool, str]:
                if b == broker:
                    how()
                return True, "gone"
            return probe
        monkeypatch.setattr(run, "unregistered_gate", gate)


def ctrl_c() -> None:
    raise KeyboardInterrupt


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # a real signal: kctl's handler turns it into an interruption


@pytest.mark.parametrize(("how", "said"), [(ctrl_c, "Ctrl-C"), (sigterm, "SIGTERM")])
def test_an_interrupt_between_stop_and_start_starts_the_broker_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: Callable[[], None], said: str) -> None:
    c = Cluster(monkeypatch, tmp_path)
    c.interrupt_at(monkeypatch, 2, how)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(run.RollInterrupted) as err:
        run.roll(SPEC, tmp_path, service="kafka", gate_timeout=5, poll=0.01)
    assert c.calls == [("stop", "logger1", "kafka"), ("start", "logger1", "kafka"),
                       ("stop", "logger2", "kafka"), ("start", "logger2", "kafka")]
    msg = err.value.message
    assert msg.startswith(f"restart interrupted ({said}) at [2/3] logger2 kafka: what it had stopped was started")
    assert "restarted: logger1 kafka" in msg and "not touched: logger3 kafka" in msg and "still" not in msg
    assert err.value.exit_code == 130
    assert not state_lock.record_path(tmp_path).exists()  # nothing is down: no record
    assert signal.getsignal(signal.SIGTERM) == before  # kctl's SIGTERM handler went with the roll
    # each stop was recorded before it was asked for
    assert c.recorded_at_stop == [[["logger1", "kafka"]], [["logger2", "kafka"]]]


def test_a_second_ctrl_c_during_the_put_back_waits_for_the_start(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    c = Cluster(monkeypatch, tmp_path)
    c.interrupt_at(monkeypatch, 1, ctrl_c)

    def impatient(host: str, svc: str) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the operator presses Ctrl-C again while the broker starts

    c.on_start = impatient
    with pytest.raises(run.RollInterrupted) as err:  # the held Ctrl-C comes once the start has returned
        run.roll(SPEC, tmp_path, service="kafka", gate_timeout=5, poll=0.01)
    assert "still" not in err.value.message
    assert c.calls == [("stop", "logger1", "kafka"), ("start", "logger1", "kafka")]
    assert not state_lock.record_path(tmp_path).exists()


def test_a_zookeeper_mode_node_step_puts_back_zookeeper_and_then_kafka(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    c = Cluster(monkeypatch, tmp_path, service="node")

    def zk_stuck(_spec: object, host: str, svc: str, want: str) -> run.Probe:
        if svc == "zookeeper":
            return ctrl_c  # type: ignore[return-value]
        return lambda: (True, "STOPPED")

    monkeypatch.setattr(run, "process_gate", zk_stuck)
    with pytest.raises(run.RollInterrupted):
        run.roll(SPEC, tmp_path, service="node", gate_timeout=5, poll=0.01)
    assert c.calls == [("stop", "logger1", "kafka"), ("stop", "logger1", "zookeeper"),
                       ("start", "logger1", "zookeeper"), ("start", "logger1", "kafka")]
    assert c.recorded_at_stop[-1] == [["logger1", "kafka"], ["logger1", "zookeeper"]]


def test_a_start_that_fails_in_the_put_back_stays_recorded_and_blocks_other_changes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    c = Cluster(monkeypatch, tmp_path)
    c.interrupt_at(monkeypatch, 1, ctrl_c)

    def refuses(host: str, svc: str) -> None:
        raise ClusterError("the engine is gone")

    c.on_start = refuses
    with pytest.raises(run.RollInterrupted) as err:
        run.roll(SPEC, tmp_path, service="kafka", gate_timeout=5, poll=0.01)
    assert "still stopped: logger1 kafka" in err.value.message
    assert json.loads(state_lock.record_path(tmp_path).read_text())["down"] == [["logger1", "kafka"]]
    with state_lock.roll_lock(tmp_path, "kctl migrate kraft"):  # a migration puts it back itself (migrate.kraft.run)
        pass
    for other in ("kctl node add", "kctl reassign execute", "kctl zk reconfig"):
        with pytest.raises(ClusterError) as refused, state_lock.roll_lock(tmp_path, other):
            pass
        assert refused.value.message.startswith(f"{other} refused, nothing was changed: an interrupted roll")
        assert "left logger1 kafka stopped" in refused.value.message
        assert "kctl restart --rolling" in (refused.value.hint or "")


def test_the_next_roll_starts_what_a_killed_roll_left_down_before_its_pre_checks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # what a roll killed (SIGKILL) right after its stop of logger2's broker leaves
    state_lock.write_record(tmp_path, {**state_lock.lock_record("kctl apply", ["kctl", "apply"], pid=4242, now=0),
        "down": [["logger2", "kafka"]]})
    c = Cluster(monkeypatch, tmp_path)
    healthy: list[bool] = []
    monkeypatch.setattr(run, "pre_checks", lambda _s: lambda: (healthy.append(("start", "logger2", "kafka")
                                                                              in c.calls) or True, "fine"))
    said: list[str] = []
    result = run.roll(SPEC, tmp_path, service="kafka", gate_timeout=5, poll=0.01, progress=said.append,
                      elect=False)
    assert c.calls[0] == ("start", "logger2", "kafka") and healthy and all(healthy)
    assert len(result.steps) == 3 and not state_lock.record_path(tmp_path).exists()
    assert any(s.startswith("an interrupted roll (`kctl apply`, pid 4242, started 1970-01-01T00:00:00Z) left"
                            " logger2 kafka stopped: starting it again first") for s in said), said


def test_an_unreadable_record_is_one_clear_error(tmp_path: Path) -> None:
    state_lock.record_path(tmp_path).write_text("")
    with pytest.raises(ClusterError) as err:
        state_lock.read_record(tmp_path)
    assert "cannot be read" in err.value.message and "kctl status" in (err.value.hint or "")


def test_the_record_is_replaced_whole(tmp_path: Path) -> None:
    state_lock.write_record(tmp_path, {"down": [["logger1", "kafka"]]})
    state_lock.write_record(tmp_path, {"down": []})
    assert json.loads(state_lock.record_path(tmp_path).read_text()) == {"down": []}
    assert [p.name for p in tmp_path.iterdir()] == [state_lock.RECORD_FILE]  # no temporary file left


def test_status_says_what_an_interrupted_roll_left_down_and_what_to_run(tmp_path: Path) -> None:
    from kctl.cluster import health

    def obs(kafka: str) -> health.Observations:
        return health.Observations(containers={"logger2": health.ContainerObs(
            "logger2", "running", None, {"zookeeper": "RUNNING", "kafka": kafka})})

    assert health.interrupted_roll(tmp_path, obs("STOPPED")) == []  # no record
    state_lock.write_record(tmp_path, {
        **state_lock.lock_record("kctl restart", ["kctl", "restart", "--rolling"], pid=9),
        "down": [["logger2", "kafka"]]})
    assert health.interrupted_roll(tmp_path, obs("STOPPED")) == [
        "an interrupted roll (`kctl restart --rolling` pid 9) left logger2 kafka stopped: `kctl restart --rolling`"
        " (or `kctl apply`) starts it first and finishes the roll"]
    assert health.interrupted_roll(tmp_path, obs("RUNNING")) == []  # started since (by hand): nothing to say
