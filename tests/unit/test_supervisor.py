"""supervisord's command line, built and read in one module (kctl/runtime/supervisor.py), whichever caller asks a
node's supervisor something: through the Engine (``supervise``, ``process_states``; systemd's view in the same words
on engine hosts), the status path's one exec for FATAL programs, migrate's wait for a settled cluster, the faults'
stop and start."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from kctl.errors import KctlError
from kctl.migrate import kraft as migrate
from kctl.model.spec import ClusterSpec
from kctl.runtime import supervisor
from kctl.runtime.engine import engines, hosts
from kctl.runtime.engine.compose import ComposeEngine

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kctl"

# ----- supervisorctl: one module --------------------------------------------------------------------------------

SUPERVISOR_MODULE = "kctl/runtime/supervisor.py"


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def supervisorctl_mentions(source: str) -> list[int]:
    """Lines where code (not a docstring, not a comment) names supervisorctl: a string, a name, an attribute, a
    definition or an import."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    lines = set()
    for node in ast.walk(tree):
        texts: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            texts.append(node.value)
        elif isinstance(node, ast.Name):
            texts.append(node.id)
        elif isinstance(node, ast.Attribute):
            texts.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            texts.append(node.name)
        elif isinstance(node, ast.alias):
            texts += [node.name, node.asname or ""]
        if any("supervisorctl" in t.lower() for t in texts):
            lines.add(getattr(node, "lineno", 0))
    return sorted(lines)


def test_supervisorctl_is_named_in_code_by_one_module() -> None:
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        lines = supervisorctl_mentions(path.read_text(encoding="utf-8"))
        if lines:
            found[rel] = lines
    assert set(found) == {SUPERVISOR_MODULE}, (
        f"supervisorctl is built or read outside {SUPERVISOR_MODULE} (ask the Engine: supervise, process_states):"
        f" {found}")


def test_the_supervisorctl_check_can_fail() -> None:
    source = ('"""Runs supervisorctl (a docstring: fine)."""\nfrom kctl.contract import SUPERVISORCTL\n'
              "# supervisorctl in a comment: fine\n"
              'def f(run):\n    """supervisorctl status."""\n    run(["supervisorctl", "status"])\n'
              "    run([*SUPERVISORCTL, 'stop'])\n    run(f'`supervisorctl {1}` failed')\n")
    assert supervisorctl_mentions(source) == [2, 6, 7, 8]


# ----- supervisorctl's status, read ------------------------------------------------------------------------------

# `supervisorctl status` in a node (supervisor 4.2, Debian's): the widths are its own.
STATUS = "".join(line + "\n" for line in (
    "controller                       STOPPED   Not started",
    "kafka                            RUNNING   pid 231, uptime 1:02:03",
    "mirrormaker                      STARTING  ",  # nothing after the state, but its column's blanks
    "zookeeper                        FATAL     Exited too quickly (process log may have details)"))


def test_the_status_of_each_program_is_read_from_supervisorctl_status() -> None:
    assert supervisor.parse_status(STATUS) == {"controller": "STOPPED", "kafka": "RUNNING",
                                               "mirrormaker": "STARTING", "zookeeper": "FATAL"}
    lines = ["kafka                            BACKOFF   Exited too quickly (process log may have details)",
             "zookeeper                        STOPPING  ",
             "controller                       EXITED    Nov 28 08:36 PM",
             "kafka2                           STOPPED   Nov 28 08:36 PM",
             "nosuch: ERROR (no such process)",
             "unix:///run/supervisor.sock no such file",
             "", "   "]
    assert supervisor.parse_status("\n".join(lines)) == {"kafka": "BACKOFF", "zookeeper": "STOPPING",
                                                         "controller": "EXITED", "kafka2": "STOPPED"}
    assert supervisor.parse_status("") == {}


def test_the_command_line_and_a_stop_or_start_answer() -> None:
    assert supervisor.argv("status") == ["supervisorctl", "-c", "/etc/supervisor/supervisord.conf", "status"]
    assert supervisor.argv("stop", "kafka")[-2:] == ["stop", "kafka"]
    assert supervisor.checked("logger1", "stop", "kafka", 0, "kafka: stopped") == "kafka: stopped"
    # already as asked: no failure
    assert supervisor.checked("logger1", "start", "kafka", 7, "kafka: ERROR (already started) ALREADY_STARTED")
    assert supervisor.checked("logger1", "stop", "kafka", 7, "kafka: ERROR (not running) NOT_RUNNING")
    with pytest.raises(KctlError) as err:
        supervisor.checked("logger1", "start", "kafka", 7, "kafka: ERROR (spawn error)")
    assert err.value.message == "logger1: `supervisorctl start kafka` failed (exit 7): kafka: ERROR (spawn error)"
    assert "--service supervisor" in (err.value.hint or "") and "--service kafka" in (err.value.hint or "")


class ExecEngine(ComposeEngine):
    """A Compose engine whose exec_in answers from a table (no Docker)."""

    def __init__(self, answers: dict[str, tuple[int, str] | Exception]) -> None:
        super().__init__()
        self.answers = answers
        self.calls: list[tuple[str, list[str], str | None, float]] = []

    def exec_in(self, spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
                timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
        self.calls.append((name, argv, user, timeout))
        answer = self.answers[name]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_process_states_is_one_exec_of_supervisorctl_status() -> None:
    eng = ExecEngine({"logger1": (3, STATUS)})  # exit 3: not every program runs; the states are still read
    assert eng.process_states(ClusterSpec(), "logger1", timeout=12) == supervisor.parse_status(STATUS)
    assert eng.calls == [("logger1", supervisor.argv("status"), "root", 12)]
    eng = ExecEngine({"logger1": KctlError("container logger1 is exited")})
    with pytest.raises(KctlError):
        eng.process_states(ClusterSpec(), "logger1")


def test_a_hosts_units_are_read_in_supervisord_words() -> None:
    show = ("Id=kctl-zookeeper.service\nLoadState=loaded\nActiveState=active\nSubState=running\n\n"
            "Id=kctl-kafka.service\nLoadState=loaded\nActiveState=activating\nSubState=auto-restart\n\n"
            "Id=kctl-controller.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\n")
    assert hosts.systemd_states(show) == {"zookeeper": "RUNNING", "kafka": "BACKOFF"}
    words = {("activating", "start-pre"): "STARTING", ("deactivating", "stop-sigterm"): "STOPPING",
             ("inactive", "dead"): "STOPPED", ("failed", "failed"): "FATAL", ("reloading", "reload"): "RUNNING",
             ("maintenance", "x"): "UNKNOWN"}
    for (active, sub), word in words.items():
        one = f"Id=kctl-kafka.service\nLoadState=loaded\nActiveState={active}\nSubState={sub}\n"
        assert hosts.systemd_states(one) == {"kafka": word}, (active, sub)


# ----- migrate's wait for a settled cluster, through Engine.process_states ---------------------------------------


class StatesEngine(ComposeEngine):
    def __init__(self, states: dict[str, dict[str, str] | Exception]) -> None:
        super().__init__()
        self.states = states
        self.asked: list[str] = []

    def process_states(self, spec: ClusterSpec, host: str, timeout: float = 30.0) -> dict[str, str]:
        self.asked.append(host)
        answer = self.states[host]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_migrate_waits_while_a_process_is_stopping_or_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec()
    eng = StatesEngine({"logger1": {"zookeeper": "RUNNING", "kafka": "STOPPING"},
                        "logger2": {"zookeeper": "STARTING", "kafka": "STOPPED", "controller": "FATAL"},
                        "logger3": {"zookeeper": "RUNNING", "kafka": "EXITED"}})
    monkeypatch.setattr(engines, "for_spec", lambda _spec: eng)
    probe = migrate._settled(spec)
    assert probe() == (False, "logger1 kafka STOPPING, logger2 zookeeper STARTING")
    assert eng.asked == ["logger1", "logger2", "logger3"]
    eng.states["logger1"] = {"zookeeper": "RUNNING", "kafka": "RUNNING"}
    eng.states["logger2"] = {"zookeeper": "RUNNING", "kafka": "BACKOFF"}
    assert probe() == (True, "every process RUNNING, STOPPED or EXITED")
    eng.states["logger2"] = KctlError("container logger2 is exited")
    assert probe() == (False, "container logger2 is exited")


def test_migrate_reads_no_supervisorctl_output_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same wait on a real status answer: the engine's exec, the supervisor module's reading."""
    spec = ClusterSpec()
    busy = STATUS.replace("RUNNING   pid 231, uptime 1:02:03", "STOPPING  ")
    eng = ExecEngine({"logger1": (3, busy), "logger2": (0, STATUS.replace("FATAL", "RUNNING")),
                      "logger3": (0, "")})
    monkeypatch.setattr(engines, "for_spec", lambda _spec: eng)
    assert migrate._settled(spec)() == (False, "logger1 kafka STOPPING, logger1 mirrormaker STARTING,"
                                               " logger2 mirrormaker STARTING")
    assert {argv[-1] for _n, argv, _u, _t in eng.calls} == {"status"}


# ----- faults: a process's stop and start through the engine ----------------------------------------------------


def test_a_faults_stop_and_start_go_through_the_engines_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    """As before: supervisord's stop (130 s) and start (60 s), their answers not judged (the fault's wait is)."""
    from kctl.runtime import faults

    calls: list[tuple[str, list[str], str | None, float]] = []

    def exec_in(self: Any, spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
                timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
        calls.append((name, argv, user, timeout))
        return 7, "kafka: ERROR (abnormal termination)"  # not judged by the fault

    box = mock.Mock(status="running", labels={})
    monkeypatch.setattr(ComposeEngine, "exec_in", exec_in)
    monkeypatch.setattr(ComposeEngine, "processes", lambda self, c, timeout=5.0: {"kafka": "RUNNING"})
    monkeypatch.setattr(faults.Faults, "container", lambda self, host: box)
    monkeypatch.setattr(faults.docker_api, "from_sdk", lambda c: c)
    f = faults.Faults(ClusterSpec(), dc=object())
    f.stop("logger1", "kafka")
    assert calls[-1] == ("logger1", supervisor.argv("stop", "kafka"), "root", 130)
    f.start("logger1", "kafka")
    assert calls[-1] == ("logger1", supervisor.argv("start", "kafka"), "root", 60)
    assert f.pending == {}
