"""The monitor as a process: one per cluster, found through ``monitor/monitor.json`` in the state dir.

``start`` runs it in the foreground (``kctl monitor start``) or as a detached child (``--detach``: a new
session, its output in ``monitor/monitor.log``); ``stop`` sends SIGTERM (SIGKILL after a grace period);
``status`` reads the record and asks the process's API. A record whose process is gone, or whose pid now
belongs to another program, counts as not running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kctl.errors import KctlError
from kctl.wait import ticks

STOP_GRACE_S = 15.0
START_TIMEOUT_S = 60.0


def monitor_dir(state_dir: Path) -> Path:
    return state_dir / "monitor"


def record_path(state_dir: Path) -> Path:
    return monitor_dir(state_dir) / "monitor.json"


def log_path(state_dir: Path) -> Path:
    return monitor_dir(state_dir) / "monitor.log"


@dataclass(frozen=True)
class Running:
    pid: int
    port: int
    started: float
    interval_seconds: float
    window: int


def _is_monitor(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the signal
    return b"kctl" in b" ".join(cmdline) and b"monitor" in cmdline


def running(state_dir: Path) -> Running | None:
    try:
        data = json.loads(record_path(state_dir).read_text())
        rec = Running(int(data["pid"]), int(data["port"]), float(data["started"]),
                      float(data["interval_seconds"]), int(data["window"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rec if _is_monitor(rec.pid) else None


def write_record(state_dir: Path, rec: Running) -> None:
    path = record_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec.__dict__))
    tmp.replace(path)


def clear_record(state_dir: Path, pid: int) -> None:
    path = record_path(state_dir)
    try:
        if int(json.loads(path.read_text())["pid"]) == pid:
            path.unlink()
    except (OSError, ValueError, KeyError, TypeError):
        pass


def health(port: int, timeout_s: float = 3.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout_s) as resp:  # noqa: S310
            doc: dict[str, Any] = json.loads(resp.read())
            return doc
    except (OSError, urllib.error.URLError, ValueError):
        return None


def not_running_error(name: str) -> KctlError:
    """Exit 1, as `kctl monitor status` documents for a monitor that does not run."""
    return KctlError(f"the monitor of cluster {name!r} is not running",
                     hint="`kctl monitor start --detach` starts it")


def start_detached(spec_file: Path, state_dir: Path, args: list[str]) -> Running:
    """``kctl monitor start ARGS`` as a detached child; returns once its API answers."""
    log = log_path(state_dir)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "kctl", "monitor", "start", "-f", str(spec_file), *args],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    for _ in ticks(0.2, until=time.monotonic() + START_TIMEOUT_S):
        if child.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:])
            raise KctlError(f"the monitor exited at once (exit {child.returncode}):\n{tail}",
                            hint=f"its log: {log}")
        rec = running(state_dir)
        if rec is not None and rec.pid == child.pid and health(rec.port, 1.0) is not None:
            return rec
    child.terminate()
    raise KctlError(f"the monitor did not answer within {START_TIMEOUT_S:.0f} s; stopped it", hint=f"its log: {log}")


def stop(state_dir: Path, name: str) -> Running:
    rec = running(state_dir)
    if rec is None:
        raise not_running_error(name)
    os.kill(rec.pid, signal.SIGTERM)
    for _ in ticks(0.1, until=time.monotonic() + STOP_GRACE_S):
        if not _is_monitor(rec.pid):
            break
    if _is_monitor(rec.pid):
        os.kill(rec.pid, signal.SIGKILL)
    clear_record(state_dir, rec.pid)
    return rec
