"""The console's audit log: one JSON object per line, appended under a lock, never rewritten (0600).

Every mutating request is recorded, whether it was done, failed or refused (a viewer's attempt, a wrong CSRF
token, a read-only console), and every login attempt: time (UTC, ISO 8601), user, cluster, action, target,
parameters (passwords never: the handlers pass only what identifies the change), result and a message.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FIELDS = ("time", "user", "cluster", "action", "target", "params", "result", "message")
RESULTS = ("done", "failed", "refused")


@dataclass
class AuditLog:
    path: Path
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def append(self, *, user: str | None, action: str, result: str, cluster: str | None = None,
               target: str | None = None, params: Mapping[str, Any] | None = None, message: str = "") -> dict[str, Any]:
        assert result in RESULTS, result
        rec = {"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), "user": user,
               "cluster": cluster, "action": action, "target": target, "params": dict(params or {}),
               "result": result, "message": message}
        line = (json.dumps(rec, sort_keys=False, default=str) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # another console on the same file
                os.write(fd, line)
            finally:
                os.close(fd)
        return rec

    def records(self) -> Iterator[dict[str, Any]]:
        try:
            fh = self.path.open(encoding="utf-8")
        except FileNotFoundError:
            return
        with fh:
            for line in fh:
                line = line.strip()
                if line:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue  # a line cut by a crash mid-write: skip it, keep the rest

    def query(self, *, user: str | None = None, cluster: str | None = None, action: str | None = None,
              result: str | None = None, clusters: set[str] | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """Newest first. ``clusters``: only records about these clusters (or none), for a limited user."""
        out = []
        for r in self.records():
            if user and r.get("user") != user or cluster and r.get("cluster") != cluster:
                continue
            if action and not str(r.get("action", "")).startswith(action) or result and r.get("result") != result:
                continue
            if clusters is not None and r.get("cluster") not in clusters and r.get("cluster") is not None:
                continue
            out.append(r)
        out.reverse()
        return out[:limit]


def to_csv(records: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(FIELDS)
    for r in records:
        w.writerow([json.dumps(r.get(f), sort_keys=True) if f == "params" else r.get(f) or "" for f in FIELDS])
    return buf.getvalue()
