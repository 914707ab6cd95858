"""The kctl program ends its librdkafka asks before the interpreter's exit handlers run.

A client alive while the interpreter finalizes crashed `kctl up` with SIGSEGV on a secured cluster
(OpenSSL torn down under librdkafka's broker threads). entry() waits for kctl.kafka.describe's asks,
and leaves with os._exit, skipping every exit handler, when one outlasts SETTLE.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import atexit, sys, time
from kctl.kafka import describe
import kctl.cli.main as cli
cli.SETTLE = {settle}
cli.main = lambda: sys.exit({code!r})
atexit.register(lambda: print("exit handlers ran", flush=True))
describe._spawn(lambda: time.sleep({ask}), "kctl-describe-test")
print("command done", flush=True)
cli.entry()
"""


def _run(code: object, ask: float, settle: str = "0.3") -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    child = CHILD.format(code=code, ask=ask, settle=settle)
    proc = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    return proc, time.monotonic() - started


def test_an_ask_that_ends_in_time_is_waited_for_and_the_exit_is_normal() -> None:
    proc, _ = _run(3, 0.05)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.splitlines() == ["command done", "exit handlers ran"]


def test_an_ask_that_outlasts_the_wait_skips_the_exit_handlers_and_keeps_the_code() -> None:
    proc, took = _run(4, 30)
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout.splitlines() == ["command done"]  # flushed, and no exit handler ran
    assert took < 20  # the 30 s ask was not waited for


def test_an_ask_to_a_stopped_broker_is_not_waited_out() -> None:
    """An ask to a stopped broker runs on to its timeout (kctl status gives the brokers 2 s): the command, which
    had its answer from another broker, leaves without waiting for it (it waited 1.8 s after the answer)."""
    proc, _ = _run(1, 2.0, settle="cli.SETTLE")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == ["command done"]


def test_a_message_exit_is_printed_and_fails() -> None:
    proc, _ = _run("bad spec", 30)
    assert proc.returncode == 1
    assert "bad spec" in proc.stderr


def test_settle_reports_whether_every_ask_ended() -> None:
    from kctl.kafka import describe

    describe._spawn(lambda: time.sleep(0.6), "kctl-describe-test")
    assert describe.settle(0.05) is False
    assert describe.settle(5) is True


def test_any_process_that_asked_waits_for_its_asks_at_exit() -> None:
    # not only the CLI: a test session or a program using the testing API exits through the same handler
    code = ("import time\nfrom kctl.kafka import describe\n"
            "describe._spawn(lambda: (time.sleep(0.5), print('ask ended', flush=True)), 'kctl-describe-test')\n"
            "print('main done', flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["main done", "ask ended"]
