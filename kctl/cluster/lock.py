"""The one-change-at-a-time lock of a state dir, and the record of what an interrupted roll left stopped.

Every command that changes a running cluster (restart, apply, node add/remove, reassign execute, a migration
step) holds :func:`roll_lock`; a roll writes what it has stopped to the record (:func:`write_record`) before it
stops it, so that the next change refuses (:func:`left_down_refusal`) or, if it rolls, puts it back first.
Files only: no cluster is asked here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.errors import ClusterError

LOCK_FILE = contract.ROLL_LOCK_FILE
RECORD_FILE = contract.ROLL_RECORD_FILE
# The commands that run a roll, and so put back what an interrupted one left down before anything else.
ROLLERS = ("kctl restart", "kctl apply", "kctl migrate kraft")  # each puts back what a killed roll left down


# ----- the lock ------------------------------------------------------------------------------------


@contextlib.contextmanager
def roll_lock(state_dir: Path, what: str = "kctl restart") -> Iterator[Path]:
    """Hold ``<state>/restart.lock`` (flock: released when this process exits, however it exits, so a lock
    left by a killed process is never stale). The file records who holds it (:func:`lock_record`: the
    command, its command line, pid and start time) so that the next one's refusal can name it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise lock_refusal(os.pread(fd, 4096, 0).decode("utf-8", "replace"), what, path) from None
        left = read_record(state_dir)
        if left and left.get("down") and what not in ROLLERS:
            raise left_down_refusal(left, what, state_dir)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(lock_record(what)) + "\n").encode(), 0)
        yield path
    finally:
        os.close(fd)


def lock_record(what: str, argv: list[str] | None = None, pid: int | None = None,
                now: float | None = None) -> dict[str, Any]:
    """What the lock file says about its holder: the command, the command line it was started with
    (``kctl`` and its arguments; kctl takes no secret as an argument), the pid and the start time."""
    args = list(sys.argv if argv is None else argv)
    if args and os.path.basename(args[0]) in ("kctl", "__main__.py"):  # `kctl ...` or `python -m kctl ...`
        args = ["kctl", *args[1:]]
    return {"command": what, "argv": shlex.join(args) if args else what,
            "pid": os.getpid() if pid is None else pid,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))}


def lock_refusal(text: str, wanted: str, path: Path) -> ClusterError:
    """The refusal of a second change while ``text`` (the lock file) names the one holding it. Pure."""
    try:
        rec = json.loads(text)
        if not isinstance(rec, dict):
            raise ValueError(text)
    except ValueError:  # a file written by an older kctl ("kctl restart, pid N, since T") or an empty one
        rec = {"command": text.strip() or "another kctl command"}
    holder = str(rec.get("command") or "another kctl command")
    said = ", ".join(d for d in (f"`{rec['argv']}`" if rec.get("argv") else "",
                                 f"pid {rec['pid']}" if rec.get("pid") else "",
                                 f"started {rec['started']}" if rec.get("started") else "") if d)
    pid = f"pid {rec['pid']}" if rec.get("pid") else "that process"
    return ClusterError(
        f"{wanted} refused: {holder} is changing this cluster" + (f" ({said})" if said else "")
        + "; one change at a time (restart, apply, node add/remove, reassign execute), nothing was changed",
        hint=f"wait for {holder} to finish (`kctl status` shows the cluster meanwhile), then run {wanted} again;"
             f" {path} is released the moment {pid} exits, however it exits")


# ----- the record of what a roll has down -------------------------------------------------------------


def record_path(state_dir: Path) -> Path:
    return state_dir / RECORD_FILE


def read_record(state_dir: Path) -> dict[str, Any] | None:
    """The record an earlier roll left (None: no roll has anything down). A record that cannot be read is an
    error: what it named is unknown, so nothing may assume every service runs."""
    path = record_path(state_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        rec = json.loads(text)
        if not isinstance(rec, dict) or not isinstance(rec.get("down", []), list):
            raise ValueError("not a roll record")
        down = [(str(h), str(s)) for h, s in rec.get("down", [])]
    except (ValueError, TypeError) as exc:
        raise ClusterError(f"{path} cannot be read ({exc}): an interrupted roll may have left services stopped",
                           hint=f"`kctl status` shows every service; once each runs (`kctl up` starts what is"
                                f" stopped), remove {path}") from None
    return {**rec, "down": down}


def write_record(state_dir: Path, rec: dict[str, Any]) -> None:
    """Write the record whole or not at all: a temporary file beside it, flushed to disk, renamed over it, and
    the directory flushed (a crash leaves the old record or the new one, never an empty file)."""
    path = record_path(state_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, (json.dumps(rec, indent=1) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def clear_record(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        record_path(state_dir).unlink()


def down_text(rec: dict[str, Any]) -> str:
    return ", ".join(f"{h} {s}" for h, s in rec["down"])


def holder_text(rec: dict[str, Any]) -> str:
    said = ", ".join(d for d in (f"`{rec['argv']}`" if rec.get("argv") else str(rec.get("command") or ""),
                                 f"pid {rec['pid']}" if rec.get("pid") else "",
                                 f"started {rec['started']}" if rec.get("started") else "") if d)
    return said or "an earlier roll"


def left_down_refusal(rec: dict[str, Any], wanted: str, state_dir: Path) -> ClusterError:
    """The refusal of a change other than a roll while an interrupted roll's services are down. Pure."""
    return ClusterError(
        f"{wanted} refused, nothing was changed: an interrupted roll ({holder_text(rec)}) left {down_text(rec)}"
        " stopped",
        hint="`kctl restart --rolling` (or `kctl apply`, or the migration step under way) starts them first and"
             " finishes the roll; `kctl up`"
             f" starts them without a roll (then remove {record_path(state_dir)})")
