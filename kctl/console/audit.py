"""The console's audit log: one JSON object per line, appended under a lock, never rewritten (0600).

Every mutating request is recorded, whether it was done, failed or refused (401, 403, 404 for what the user may
not see, 409, 422, 500), the login attempts (bounded: see below), and the CLI's changes of console users: time
(UTC, ISO 8601), user, client (the address it came from; ``cli`` for the command line), cluster, action, target,
parameters (passwords never: the handlers pass only what identifies the change), result and a message.

What a record may cost is bounded, since anyone may cause one (a failed login): each text field is cut at
:data:`LIMITS` (marked with ``…``), the parameters at :data:`PARAMS_LIMIT` bytes of JSON, and the records of
requests without a session (a failed login among them) are counted per address: beyond :data:`ANON_BURST` in a
minute, they are no longer written one by one, and the next one written says how many were left out. A login
refused unchecked because its name or address is locked is not written at all (:meth:`AuditLog.locked_attempt`):
the failure that set the lock was (``always``, whatever the budget: the back-off itself spaces those out), and
the next record of that address says how many locked attempts came since.

Reading is bounded too: :meth:`AuditLog.query` reads the file backwards from its end, block by block, and stops
at ``limit`` matching records or after :data:`SCAN_LIMIT` bytes.

Lines written before the ``client`` field existed read as they are (``client`` absent).
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FIELDS = ("time", "user", "client", "cluster", "action", "target", "params", "result", "message")
RESULTS = ("done", "failed", "refused")
LIMITS = {"user": 128, "client": 64, "cluster": 128, "action": 64, "target": 512, "message": 1000}
PARAMS_LIMIT = 4000
SCAN_LIMIT = 64 * 1024 * 1024
BLOCK = 64 * 1024
ANON_BURST = 60  # records of requests without a session, per address and minute, written one by one


def _cut(value: Any, limit: int) -> Any:
    if value is None:
        return None
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Budget:
    """One address's records without a session: this minute's, and what was not written since the last one."""

    start: float  # the minute's start
    n: int = 0  # records written in it
    left: int = 0  # records left out (beyond the budget) since the last one written
    locked: int = 0  # login attempts refused while locked since the last one written


@dataclass
class AuditLog:
    path: Path
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _anon: dict[str, _Budget] = field(default_factory=dict)  # by address

    def append(self, *, user: str | None, action: str, result: str, cluster: str | None = None,
               target: str | None = None, params: Mapping[str, Any] | None = None, message: str = "",
               client: str | None = None, anonymous: bool = False, always: bool = False) -> dict[str, Any] | None:
        """Write one record (None when an anonymous one is left out: see the module's docstring). ``anonymous``:
        a request without a session, counted against its address's budget; ``always``: written even beyond it
        (a lockout, which the back-off makes rare), still counted and still saying what was left out."""
        assert result in RESULTS, result
        if anonymous:
            note = self._anonymous(client or "?", always)
            if note is None:
                return None
            if note:
                message = f"{message} ({note})"
        p = json.dumps(dict(params or {}), default=str)
        rec = {"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
               "user": _cut(user, LIMITS["user"]), "client": _cut(client, LIMITS["client"]),
               "cluster": _cut(cluster, LIMITS["cluster"]), "action": _cut(action, LIMITS["action"]),
               "target": _cut(target, LIMITS["target"]),
               "params": json.loads(p) if len(p) <= PARAMS_LIMIT else {"cut": _cut(p, PARAMS_LIMIT)},
               "result": result, "message": _cut(message, LIMITS["message"])}
        line = (json.dumps(rec, sort_keys=False, default=str) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # another console, or the CLI, on the same file
                os.write(fd, line)
            finally:
                os.close(fd)
        return rec

    def _anonymous(self, addr: str, always: bool = False) -> str | None:
        """None: leave this record out; else what its message adds (what was left out before it, or "")."""
        now = self.clock()
        with self._lock:
            b = self._budget(addr, now)
            if b.n >= ANON_BURST and not always:
                b.left += 1
                return None
            b.n += 1
            notes = []
            if b.left:
                notes.append(f"{b.left} similar record(s) from {addr} left out before this one")
            if b.locked:
                notes.append(f"{b.locked} login attempt(s) from {addr} refused unchecked while locked since the last"
                             " record")
            b.left = b.locked = 0
            return "; ".join(notes)

    def locked_attempt(self, client: str | None) -> None:
        """A login refused unchecked while its name or address is locked: not written, counted; the next record
        of the address says how many."""
        with self._lock:
            self._budget(client or "?", self.clock()).locked += 1

    def _budget(self, addr: str, now: float) -> _Budget:
        b = self._anon.get(addr)
        if b is None:
            if len(self._anon) >= 10_000:  # addresses quiet for a minute are forgotten (with nothing owed first)
                quiet = [a for a, v in self._anon.items() if now - v.start >= 60]
                for a in sorted(quiet, key=lambda a: bool(self._anon[a].left or self._anon[a].locked)):
                    del self._anon[a]
                    if len(self._anon) < 5_000:
                        break
            b = self._anon[addr] = _Budget(now)
        elif now - b.start >= 60:
            b.start, b.n = now, 0
        return b

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record, oldest first (the whole file: for tests and tools, not for the pages)."""
        try:
            fh = self.path.open(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        with fh:
            for line in fh:
                rec = _parse(line)
                if rec is not None:
                    yield rec

    def newest(self, scan_limit: int = SCAN_LIMIT) -> Iterator[dict[str, Any]]:
        """Records newest first, read backwards from the end of the file, at most ``scan_limit`` bytes."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            pos = fh.seek(0, os.SEEK_END)
            stop = max(0, pos - scan_limit)
            tail = b""
            while pos > stop:
                step = min(BLOCK, pos - stop)
                pos -= step
                fh.seek(pos)
                chunk = fh.read(step) + tail
                lines = chunk.split(b"\n")
                tail = lines[0]  # maybe the end of a line that starts in the block before
                for line in reversed(lines[1:]):
                    rec = _parse(line.decode("utf-8", "replace"))
                    if rec is not None:
                        yield rec
            if pos == 0 and tail:
                rec = _parse(tail.decode("utf-8", "replace"))
                if rec is not None:
                    yield rec

    def query(self, *, user: str | None = None, cluster: str | None = None, action: str | None = None,
              result: str | None = None, keep: Callable[[dict[str, Any]], bool] | None = None,
              limit: int = 200, scan_limit: int = SCAN_LIMIT) -> list[dict[str, Any]]:
        """Newest first, at most ``limit``; ``keep``: which records the asking user may read."""
        out = []
        for r in self.newest(scan_limit):
            if user and r.get("user") != user or cluster and r.get("cluster") != cluster:
                continue
            if action and not str(r.get("action", "")).startswith(action) or result and r.get("result") != result:
                continue
            if keep is not None and not keep(r):
                continue
            out.append(r)
            if len(out) >= limit:
                break
        return out


def last_changes(path: Path, cluster: str, targets: Iterable[str], scan_limit: int = SCAN_LIMIT
                 ) -> dict[str, dict[str, Any]]:
    """Of ``targets`` (topics, groups, users), the newest change the console made to each on ``cluster`` (a record
    whose result is done), read from the end of the audit log: what `kctl diff` tells of who changed what."""
    want = set(targets)
    out: dict[str, dict[str, Any]] = {}
    if not want:
        return out
    for rec in AuditLog(path).newest(scan_limit):
        t = rec.get("target")
        if rec.get("result") == "done" and rec.get("cluster") == cluster and t in want and t not in out:
            out[t] = rec
            if len(out) == len(want):
                break
    return out


def who_changed(actions: Iterable[Any], path: Path, cluster: str) -> dict[str, str]:
    """For `kctl diff` of kctl.yaml's declared resources: each action's line (``description``) -> who last changed
    its subject (``subject``: a topic, a user, an ACL's principal) in the console, when the audit log knows."""
    acts = list(actions)
    names = {a.subject for a in acts} | {a.subject.removeprefix("User:") for a in acts}
    known = last_changes(path, cluster, names)
    out = {}
    for a in acts:
        rec = known.get(a.subject) or known.get(a.subject.removeprefix("User:"))
        if rec:
            out[a.description] = f"{rec.get('user')} in the console ({rec.get('action')}, {rec.get('time')})"
    return out


def _parse(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None  # a line cut by a crash mid-write: skip it, keep the rest
    return rec if isinstance(rec, dict) else None


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A cell a spreadsheet shows as text: one starting with = + - @ tab or CR gets a leading ``'`` (OWASP's
    advice on CSV injection), so ``=HYPERLINK(...)`` in a user name or a topic is never run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def to_csv(records: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(FIELDS)
    for r in records:
        w.writerow([csv_cell(json.dumps(r.get(f), sort_keys=True) if f == "params" else r.get(f) or "")
                    for f in FIELDS])
    return buf.getvalue()
