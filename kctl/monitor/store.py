"""The monitor's history: one SQLite database in the cluster's state dir (``monitor/monitor.db``).

Each sampling round is one transaction, in WAL mode: a monitor killed with -9 loses at most the round it was
writing, never one it had written, and readers (``kctl lag``, ``kctl lag history``, ``kctl alerts``) read while
it writes. Rows older than the retention are deleted as the monitor goes, so the file stays bounded.

Tables:

- ``samples``: the committed-offset samples of every group partition (what the lag windows are made of);
- ``groups``: each group's evaluation per round (status, total lag): ``kctl lag history``;
- ``metrics``: each round's ``kctl metrics`` report, as JSON;
- ``alerts``: the alert tracker's state (pending and open alerts), and ``alert_log`` every open, repeat and
  close that was notified;
- ``outbox``: notifications not yet delivered, each with the name of its notifier (a stable identity, not a
  position in kctl.yaml's list), its attempts, its last error (redacted), when it is tried next, and its state:
  ``pending`` (to be sent) or ``failed`` (refused for good: kept for ``kctl alerts`` until the retention ends).

A round's alert state, alert log, outbox rows and samples are one transaction: when it cannot commit (the
database locked past the busy timeout, a full disk, an I/O error) none of it is written, and the monitor keeps
its previous alert state in memory, so the next round makes the same transition again and queues its
notification then.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kctl.monitor.lag import Sample

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
  grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
  offset INTEGER NOT NULL, ts_ms INTEGER NOT NULL, lag INTEGER, end_offset INTEGER);
CREATE INDEX IF NOT EXISTS samples_by_partition ON samples (grp, topic, part, ts_ms);
CREATE INDEX IF NOT EXISTS samples_by_time ON samples (ts_ms);
CREATE TABLE IF NOT EXISTS groups (
  grp TEXT NOT NULL, ts_ms INTEGER NOT NULL, status TEXT NOT NULL, total_lag INTEGER NOT NULL,
  state TEXT, complete REAL NOT NULL);
CREATE INDEX IF NOT EXISTS groups_by_group ON groups (grp, ts_ms);
CREATE INDEX IF NOT EXISTS groups_by_time ON groups (ts_ms);
CREATE TABLE IF NOT EXISTS metrics (ts_ms INTEGER NOT NULL, report TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_by_time ON metrics (ts_ms);
CREATE TABLE IF NOT EXISTS alerts (rule TEXT NOT NULL, subject TEXT NOT NULL, row TEXT NOT NULL,
  PRIMARY KEY (rule, subject));
CREATE TABLE IF NOT EXISTS alert_log (
  ts REAL NOT NULL, kind TEXT NOT NULL, rule TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS alert_log_by_time ON alert_log (ts);
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT, notifier TEXT NOT NULL, body TEXT NOT NULL,
  created REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
  next_at REAL NOT NULL DEFAULT 0, permanent INTEGER NOT NULL DEFAULT 0, refusals INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'pending');
CREATE INDEX IF NOT EXISTS outbox_by_notifier ON outbox (state, notifier, id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def db_path(state_dir: Path) -> Path:
    return state_dir / "monitor" / "monitor.db"


class Store:
    """The monitor's database; ``readonly`` opens it for the reading commands (no schema, no writes)."""

    def __init__(self, path: Path, *, readonly: bool = False, timeout: float = 10.0) -> None:
        """``timeout``: how long a write waits for another connection's lock before it fails (SQLite's busy
        timeout)."""
        self.path = path
        if readonly:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.parent.chmod(0o700)
            self.db = sqlite3.connect(path, timeout=timeout)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._set_aside_old_outbox()
            self.db.executescript(SCHEMA)
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def round(self) -> Iterator[sqlite3.Connection]:
        """One round's writes, committed together (or not at all)."""
        with self.db:
            yield self.db

    # ----- writes (inside a round) -------------------------------------------------------------------

    def add_samples(self, group: str, rows: Iterable[tuple[tuple[str, int], Sample, int | None]]) -> None:
        self.db.executemany(
            "INSERT INTO samples (grp, topic, part, offset, ts_ms, lag, end_offset) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(group, t, p, s.offset, s.timestamp_ms, s.lag, end) for (t, p), s, end in rows])

    def add_group(self, group: str, ts_ms: int, status: str, total_lag: int, state: str | None,
                  complete: float) -> None:
        self.db.execute("INSERT INTO groups (grp, ts_ms, status, total_lag, state, complete) VALUES (?, ?, ?, ?, ?, ?)",
                        (group, ts_ms, status, total_lag, state, complete))

    def add_metrics(self, ts_ms: int, report: Mapping[str, Any]) -> None:
        self.db.execute("INSERT INTO metrics (ts_ms, report) VALUES (?, ?)", (ts_ms, json.dumps(report)))

    def save_alerts(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self.db.execute("DELETE FROM alerts")
        self.db.executemany("INSERT INTO alerts (rule, subject, row) VALUES (?, ?, ?)",
                            [(r["rule"], r["subject"], json.dumps(dict(r))) for r in rows])

    def log_alert(self, ts: float, kind: str, rule: str, subject: str, body: Mapping[str, Any]) -> None:
        self.db.execute("INSERT INTO alert_log (ts, kind, rule, subject, body) VALUES (?, ?, ?, ?, ?)",
                        (ts, kind, rule, subject, json.dumps(dict(body))))

    def enqueue(self, notifier: str, body: Mapping[str, Any], created: float | None = None) -> None:
        """Queue ``body`` for the notifier named ``notifier`` (its :attr:`NotifierSpec.key`)."""
        self.db.execute("INSERT INTO outbox (notifier, body, created) VALUES (?, ?, ?)",
                        (notifier, json.dumps(dict(body)), time.time() if created is None else created))

    def delivered(self, outbox_id: int) -> None:
        self.db.execute("DELETE FROM outbox WHERE id = ?", (outbox_id,))

    def failed(self, outbox_id: int, error: str, *, next_at: float = 0.0, permanent: bool = False,
               give_up: bool = False) -> None:
        """One more failed attempt: tried again from ``next_at``; ``permanent``: the receiver refused this one
        notification (the ones behind it go on; counted in ``refusals``); ``give_up``: no more attempts (state
        ``failed``)."""
        self.db.execute("UPDATE outbox SET attempts = attempts + 1, last_error = ?, next_at = ?, permanent = ?,"
                        " refusals = refusals + ?, state = ? WHERE id = ?",
                        (error, next_at, int(permanent), int(permanent), "failed" if give_up else "pending",
                         outbox_id))

    def expire_outbox(self, created_before: float) -> list[dict[str, Any]]:
        """Remove the notifications queued before ``created_before`` (the retention), returning them, so that the
        monitor says which it gives up."""
        gone = self._outbox_rows("WHERE created < ?", (created_before,))
        self.db.execute("DELETE FROM outbox WHERE created < ?", (created_before,))
        return gone

    def retry_failed(self) -> int:
        """Put every ``failed`` notification back in the queue (after the receiver or kctl.yaml was fixed)."""
        return self.db.execute("UPDATE outbox SET state = 'pending', attempts = 0, next_at = 0, permanent = 0,"
                               " refusals = 0 WHERE state = 'failed'").rowcount

    def _set_aside_old_outbox(self) -> None:
        # A store from before notifier names: its outbox pointed at notifiers by list position. Renamed here
        # (the new table is made by SCHEMA); migrate_outbox moves its rows once the notifiers' names are known.
        cols = [r[1] for r in self.db.execute("PRAGMA table_info(outbox)")]
        if cols and "state" not in cols:
            with self.db:
                self.db.execute("DROP INDEX IF EXISTS outbox_by_notifier")
                self.db.execute("ALTER TABLE outbox RENAME TO outbox_v1")

    def migrate_outbox(self, names: Sequence[str], scrub: Callable[[str], str]) -> int:
        """Move an old store's queued notifications to the named outbox: list position ``i`` becomes ``names[i]``
        (the notifiers as kctl.yaml lists them now; a position past its end becomes ``#i``, which no notifier has,
        so it is reported, never sent elsewhere); their last errors go through ``scrub`` (no URL kept whole)."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'outbox_v1'").fetchone():
            return 0
        rows = self.db.execute("SELECT id, notifier, body, created, attempts, last_error FROM outbox_v1"
                               " ORDER BY id").fetchall()
        with self.db:
            self.db.executemany(
                "INSERT INTO outbox (notifier, body, created, attempts, last_error) VALUES (?, ?, ?, ?, ?)",
                [(names[r[1]] if 0 <= r[1] < len(names) else f"#{r[1]}", r[2], r[3], r[4],
                  scrub(r[5]) if r[5] else None) for r in rows])
            self.db.execute("DROP TABLE outbox_v1")
        return len(rows)

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def prune(self, older_than_ms: int) -> int:
        """Delete history (and undelivered notifications) older than ``older_than_ms``; the alert state stays."""
        n = 0
        for table in ("samples", "groups", "metrics"):
            n += self.db.execute(f"DELETE FROM {table} WHERE ts_ms < ?", (older_than_ms,)).rowcount  # noqa: S608
        n += self.db.execute("DELETE FROM alert_log WHERE ts < ?", (older_than_ms / 1000,)).rowcount
        # The outbox is not pruned here: the delivery gives up its expired notifications itself, with a log line
        # for each (expire_outbox).
        return n

    # ----- reads ------------------------------------------------------------------------------------

    def last_samples(self, window: int) -> list[tuple[str, tuple[str, int], Sample, int | None]]:
        """The last ``window`` samples of every group partition, oldest first: the windows after a restart."""
        rows = self.db.execute(
            "SELECT grp, topic, part, offset, ts_ms, lag, end_offset FROM ("
            " SELECT *, ROW_NUMBER() OVER (PARTITION BY grp, topic, part ORDER BY ts_ms DESC, rowid DESC) AS n"
            " FROM samples) WHERE n <= ? ORDER BY grp, topic, part, ts_ms, rowid", (window,)).fetchall()
        return [(r["grp"], (r["topic"], r["part"]), Sample(r["offset"], r["ts_ms"], r["lag"]), r["end_offset"])
                for r in rows]

    def group_history(self, group: str, since_ms: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT ts_ms, status, total_lag, state, complete FROM groups"
                               " WHERE grp = ? AND ts_ms >= ? ORDER BY ts_ms", (group, since_ms)).fetchall()
        return [dict(r) for r in rows]

    def latest_groups(self) -> dict[str, dict[str, Any]]:
        rows = self.db.execute("SELECT g.* FROM groups g JOIN (SELECT grp, MAX(ts_ms) AS ts FROM groups"
                               " GROUP BY grp) l ON g.grp = l.grp AND g.ts_ms = l.ts").fetchall()
        return {r["grp"]: dict(r) for r in rows}

    def groups_known(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT grp FROM samples ORDER BY grp")]

    def latest_metrics(self) -> dict[str, Any] | None:
        row = self.db.execute("SELECT report FROM metrics ORDER BY ts_ms DESC LIMIT 1").fetchone()
        return json.loads(row[0]) if row else None

    def metrics_history(self, since_ms: int) -> list[tuple[int, dict[str, Any]]]:
        """Every metrics report since ``since_ms``, oldest first: (ts_ms, report)."""
        rows = self.db.execute("SELECT ts_ms, report FROM metrics WHERE ts_ms >= ? ORDER BY ts_ms", (since_ms,))
        return [(int(r[0]), json.loads(r[1])) for r in rows]

    def alert_rows(self) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in self.db.execute("SELECT row FROM alerts ORDER BY rule, subject")]

    def alert_log(self, since: float = 0.0) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT ts, kind, rule, subject, body FROM alert_log WHERE ts >= ? ORDER BY ts",
                               (since,)).fetchall()
        return [{**dict(r), "body": json.loads(r["body"])} for r in rows]

    def outbox(self, state: str | None = None) -> list[dict[str, Any]]:
        """The queued notifications in order (``state``: only ``pending`` or ``failed`` ones). A store from before
        notifier names (read by ``kctl alerts`` before the monitor migrated it) reads with ``notifier`` ``#i``."""
        return self._outbox_rows("WHERE state = ?" if state else "", (state,) if state else ())

    def _outbox_rows(self, where: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        cols = [r[1] for r in self.db.execute("PRAGMA table_info(outbox)")]
        if "state" not in cols:  # the old layout, read-only
            rows = self.db.execute("SELECT id, notifier, body, created, attempts, last_error FROM outbox"
                                   " ORDER BY id").fetchall()
            return [{**dict(r), "notifier": f"#{r['notifier']}", "body": json.loads(r["body"]), "next_at": 0.0,
                     "permanent": False, "refusals": 0, "state": "pending"} for r in rows
                    if not where or args == ("pending",)]
        rows = self.db.execute("SELECT id, notifier, body, created, attempts, last_error, next_at, permanent,"
                               " refusals, state"
                               f" FROM outbox {where} ORDER BY id", args).fetchall()  # noqa: S608 - fixed clauses
        return [{**dict(r), "body": json.loads(r["body"]), "permanent": bool(r["permanent"])} for r in rows]

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None
