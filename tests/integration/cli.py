"""Run the kctl CLI as a user does, as a separate process, against a test cluster's spec file."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def kctl(cluster: Any, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`kctl ARGS -f <cluster's kctl.yaml>`; the result with text stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def js(cluster: Any, *args: str) -> Any:
    """`kctl ARGS -o json`, which must succeed; the parsed output."""
    p = kctl(cluster, *args, "-o", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def tool_config(cluster: Any) -> list[str]:
    """``--command-config FILE`` for Kafka's tools in a node of a secured cluster (its admin user); [] otherwise."""
    from kctl import contract

    return ["--command-config", contract.secret_path(contract.ADMIN_CLIENT_FILE)] \
        if cluster.spec.security.enabled else []


def secured(cluster: Any) -> bool:
    return bool(cluster.spec.security.enabled)



def follow_until(spec_file: Any, *args: str, until: str, sig: int = 2,
                 timeout: float = 60) -> tuple[int, list[str], list[int]]:
    """`kctl ARGS -f SPEC_FILE` (a command that follows, such as `logs -F`) read until a line holds ``until``, then
    ``sig`` to kctl alone (SIGINT: Ctrl-C; SIGTERM: a supervisor's stop): (its exit code, the lines it printed, the
    pids of the processes it had started that still run after it exited)."""
    import os
    import queue
    import signal
    import threading
    from pathlib import Path

    def as_at_a_terminal() -> None:
        # A run started in the background (`make test &`, some CI runners) hands SIGINT down ignored, and Python
        # then installs no KeyboardInterrupt for it: kctl gets SIGINT's default, as in a terminal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    p = subprocess.Popen([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, preexec_fn=as_at_a_terminal)
    assert p.stdout is not None
    got: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            got.put(line.rstrip("\n"))
        got.put(None)

    threading.Thread(target=read, daemon=True).start()
    lines: list[str] = []
    try:
        while not any(until in line for line in lines):
            line = got.get(timeout=timeout)  # queue.Empty: nothing printed for that long
            assert line is not None, f"kctl ended (exit {p.wait()}) without a line with {until!r}: {lines[-20:]}"
            lines.append(line)
        children = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                                       text=True).stdout.split()]
        assert children, "kctl started no process to follow with"
        os.kill(p.pid, sig)
        code = p.wait(timeout=20)

        def running(pid: int) -> bool:
            try:
                return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
            except OSError:
                return False

        return code, lines, [pid for pid in children if running(pid)]
    finally:
        if p.poll() is None:
            p.kill()
