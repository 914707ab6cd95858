"""The monitor's history: one SQLite database in the cluster's state dir (``monitor/monitor.db``).

Each sampling round is one transaction, in WAL mode: a monitor killed with -9 loses at most the round it was
writing, never one it had written, and readers (``kctl lag``, ``kctl lag history``, ``kctl alerts``) read while
it writes. Rows older than the retention are deleted as the monitor goes, so the file stays bounded.

Tables:

- ``samples``: the committed-offset samples of every group partition (what the lag windows are made of);
- ``ends``: every sampling's end offset and lag of every group partition, a commit or not (Burrow's recent
  broker offsets, and what the current lag is measured against);
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

Reads are bounded whatever the history holds: a group's window is at most ``window`` rows per partition
through the indexes (the partitions are those of the group's latest snapshot), a history is bounded by its
time range and thinned to at most ``max_points`` rows, and the lists of groups skip through the indexes
instead of scanning the rows (docs/benchmarks.md, "Monitor store reads": 1 M samples).

The file is opened by its ``file:`` URI with the path percent-encoded, so a ``#``, ``?`` or ``%`` in the
state dir is part of the name; a read-only open (``mode=ro``) never creates a database.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kctl.errors import KctlError
from kctl.monitor.lag import EndOffset, PartitionRows, Sample

SEVERITY = ("OK", "WARN", "ERR", "STOP", "STALL", "REWIND")  # Burrow's order (kctl.monitor.lag.Status)
MAX_HISTORY_POINTS = 2000

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
  grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
  offset INTEGER NOT NULL, ts_ms INTEGER NOT NULL, lag INTEGER, end_offset INTEGER);
CREATE INDEX IF NOT EXISTS samples_by_partition ON samples (grp, topic, part, ts_ms);
CREATE INDEX IF NOT EXISTS samples_by_time ON samples (ts_ms);
CREATE TABLE IF NOT EXISTS ends (
  grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL, ts_ms INTEGER NOT NULL,
  end_offset INTEGER, lag INTEGER, PRIMARY KEY (grp, topic, part, ts_ms)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS groups (
  grp TEXT NOT NULL, ts_ms INTEGER NOT NULL, status TEXT NOT NULL, total_lag INTEGER NOT NULL,
  state TEXT, complete REAL NOT NULL, type TEXT);
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


def uri(path: Path, mode: str) -> str:
    """The database's ``file:`` URI: the absolute path percent-encoded (a ``#``, ``?`` or ``%`` in it is part
    of the name, never a fragment or a query), and ``mode`` (ro, rw, rwc)."""
    return f"{path.resolve().as_uri()}?mode={mode}"


@dataclass(frozen=True)
class StoredGroup:
    """A group as the store holds it at its latest snapshot: that moment, its state then, and per partition
    of that snapshot its last samples and end offsets (at most a window of each)."""

    group: str
    at_ms: int
    state: str | None
    rows: tuple[PartitionRows, ...]
    type: str | None = None  # classic, consumer, share, streams (None: a store from before types)


# Distinct values of an index's first column, one index seek each (a loose index scan): the groups without
# reading their rows.
_DISTINCT_GROUPS = """
WITH RECURSIVE g(grp) AS (
  SELECT MIN(grp) FROM {table}
  UNION ALL
  SELECT (SELECT MIN(grp) FROM {table} WHERE grp > g.grp) FROM g WHERE g.grp IS NOT NULL)
SELECT grp FROM g WHERE grp IS NOT NULL"""


class Store:
    """The monitor's database; ``readonly`` opens it for the reading commands (no schema, no writes)."""

    def __init__(self, path: Path, *, readonly: bool = False, timeout: float = 10.0) -> None:
        """``timeout``: how long a write waits for another connection's lock before it fails (SQLite's busy
        timeout)."""
        self.path = path
        if readonly:
            if not path.is_file():
                raise KctlError(f"no monitor store at {path}", hint="`kctl monitor start --detach` records one")
            self.db = sqlite3.connect(uri(path, "ro"), uri=True, timeout=timeout)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.parent.chmod(0o700)
            self.db = sqlite3.connect(uri(path, "rwc"), uri=True, timeout=timeout)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._set_aside_old_outbox()
            self.db.executescript(SCHEMA)
            self._add_group_type()
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def round(self) -> Iterator[sqlite3.Connection]:
        """One round's writes, committed together (or not at all)."""
        with self.db:
            yield self.db

    # ----- writes (inside a round) -------------------------------------------------------------------

    def add_samples(self, group: str,
                    rows: Iterable[tuple[tuple[str, int], Sample | None, EndOffset | int | None]]) -> None:
        """A snapshot's rows of ``group`` (:class:`kctl.monitor.sampler.Seen`): each partition's new sample,
        if any, and its end offset and lag at that moment, a commit or not. (A bare end offset beside a sample
        is the sample's own, with no row of its own.)"""
        samples, ends = [], []
        for (t, p), sample, end in rows:
            if isinstance(end, EndOffset):
                ends.append((group, t, p, end.timestamp_ms, end.end, end.lag))
                end = end.end
            if sample is not None:
                samples.append((group, t, p, sample.offset, sample.timestamp_ms, sample.lag, end))
        self.db.executemany(
            "INSERT INTO samples (grp, topic, part, offset, ts_ms, lag, end_offset) VALUES (?, ?, ?, ?, ?, ?, ?)",
            samples)
        self.db.executemany(
            "INSERT OR REPLACE INTO ends (grp, topic, part, ts_ms, end_offset, lag) VALUES (?, ?, ?, ?, ?, ?)", ends)

    def add_group(self, group: str, ts_ms: int, status: str, total_lag: int, state: str | None,
                  complete: float, type: str | None = None) -> None:  # noqa: A002 - the group's type
        self.db.execute("INSERT INTO groups (grp, ts_ms, status, total_lag, state, complete, type)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)", (group, ts_ms, status, total_lag, state, complete, type))

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

    def _add_group_type(self) -> None:
        # A store from before group types (share and streams groups): its groups table gets the column.
        cols = [r[1] for r in self.db.execute("PRAGMA table_info(groups)")]
        if "type" not in cols:
            with self.db:
                self.db.execute("ALTER TABLE groups ADD COLUMN type TEXT")

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
        n += self._prune_ends(older_than_ms)
        n += self.db.execute("DELETE FROM alert_log WHERE ts < ?", (older_than_ms / 1000,)).rowcount
        # The outbox is not pruned here: the delivery gives up its expired notifications itself, with a log line
        # for each (expire_outbox).
        return n

    def _prune_ends(self, older_than_ms: int) -> int:
        """The end-offset rows older than ``older_than_ms``, partition by partition through the primary key (the
        table keeps no index by time: one row per group partition per round, it is the store's largest)."""
        n = 0
        for group in self.groups_known("ends"):
            for t, p in self._partitions(group):
                n += self.db.execute("DELETE FROM ends WHERE grp = ? AND topic = ? AND part = ? AND ts_ms < ?",
                                     (group, t, p, older_than_ms)).rowcount
        return n

    # ----- reads ------------------------------------------------------------------------------------

    def last_samples(self, window: int) -> list[tuple[str, tuple[str, int], Sample, int | None]]:
        """The last ``window`` samples of every group partition, oldest first (at most ``window`` rows read per
        partition)."""
        out: list[tuple[str, tuple[str, int], Sample, int | None]] = []
        for group in self.groups_known("samples"):
            for key in self._partitions(group, "samples"):
                out.extend((group, key, s, end) for s, end in self._samples(group, key, window))
        return out

    def _samples(self, group: str, key: tuple[str, int], window: int) -> list[tuple[Sample, int | None]]:
        rows = self.db.execute(
            "SELECT offset, ts_ms, lag, end_offset FROM samples WHERE grp = ? AND topic = ? AND part = ?"
            " ORDER BY ts_ms DESC, rowid DESC LIMIT ?", (group, key[0], key[1], window)).fetchall()
        return [(Sample(r[0], r[1], r[2]), r[3]) for r in reversed(rows)]

    def _ends(self, group: str, key: tuple[str, int], window: int) -> list[EndOffset]:
        rows = self.db.execute(
            "SELECT ts_ms, end_offset, lag FROM ends WHERE grp = ? AND topic = ? AND part = ?"
            " ORDER BY ts_ms DESC LIMIT ?", (group, key[0], key[1], window)).fetchall()
        return [EndOffset(r[0], r[1], r[2]) for r in reversed(rows)]

    def _partitions(self, group: str, table: str = "ends") -> list[tuple[str, int]]:
        """The partitions ``group`` has rows of in ``table`` (ends, samples), one seek of its (grp, topic, part,
        ts_ms) key each: a loose index scan, whatever the number of rows."""
        if table not in ("ends", "samples"):
            raise ValueError(table)
        out: list[tuple[str, int]] = []
        row = self.db.execute(f"SELECT topic, part FROM {table} WHERE grp = ? ORDER BY topic, part LIMIT 1",  # noqa: S608
                              (group,)).fetchone()
        while row is not None:
            out.append((row[0], row[1]))
            # The next partition of the same topic, else the first of the next topic: each a seek of the key
            # (a row-value comparison on (topic, part) would walk the rows of the partition passed).
            row = self.db.execute(f"SELECT topic, part FROM {table} WHERE grp = ? AND topic = ? AND part > ?"  # noqa: S608
                                  " ORDER BY part LIMIT 1", (group, row[0], row[1])).fetchone() \
                or self.db.execute(f"SELECT topic, part FROM {table} WHERE grp = ? AND topic > ?"  # noqa: S608
                                   " ORDER BY topic, part LIMIT 1", (group, row[0])).fetchone()
        return out

    def _has(self, table: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                               (table,)).fetchone() is not None

    def group_rows(self, group: str, window: int) -> StoredGroup | None:
        """``group`` at its latest stored snapshot: per partition of that snapshot, its last ``window`` samples
        and end offsets (what :func:`kctl.monitor.sampler.stored_status` judges); None when the store has no
        snapshot of it. At most ``2 * window`` rows read per partition, through the indexes; the moment is the
        latest end offset's, and the snapshot's partitions those with an end offset then."""
        if not self._has("ends"):
            return None  # a store written before end offsets were kept: no moment to judge
        ends = {key: self._ends(group, key, window) for key in self._partitions(group)}
        if not ends:
            return None
        at_ms = max(e[-1].timestamp_ms for e in ends.values())
        parts = tuple(PartitionRows(t, p, tuple(s for s, _ in self._samples(group, (t, p), window)), tuple(e))
                      for (t, p), e in ends.items() if e[-1].timestamp_ms == at_ms)
        st = self.db.execute("SELECT * FROM groups WHERE grp = ? ORDER BY ts_ms DESC LIMIT 1", (group,)).fetchone()
        kind = st["type"] if st is not None and "type" in st.keys() else None  # noqa: SIM118 - a Row: in tests values
        kind = kind.lower() if kind else None  # a store written when types were spelled in capitals
        return StoredGroup(group, at_ms, st["state"] if st else None, parts, kind)

    def stored_windows(self, window: int) -> list[StoredGroup]:
        """Every group the store has a snapshot of, as :meth:`group_rows` (the monitor's windows after a
        restart)."""
        if not self._has("ends"):
            return []
        found = (self.group_rows(g, window) for g in self.groups_known("ends"))
        return [g for g in found if g is not None]

    def lag_parameters(self, window: int, allowed_lag: int) -> tuple[int, int]:
        """The window and allowed lag the monitor judges with (recorded at its start); the arguments when it
        recorded none."""
        w, a = self.meta("lag_window"), self.meta("lag_allowed")
        return (int(w) if w else window), (int(a) if a is not None else allowed_lag)

    def record_lag_parameters(self, window: int, allowed_lag: int) -> None:
        """What the monitor judges with, for the readers of its store to judge the same (committed at once)."""
        with self.db:
            self.set_meta("lag_window", str(window))
            self.set_meta("lag_allowed", str(allowed_lag))

    def group_history(self, group: str, since_ms: int, max_points: int = MAX_HISTORY_POINTS) -> list[dict[str, Any]]:
        """The group's evaluations since ``since_ms``, oldest first; more than ``max_points`` of them are
        thinned to ``max_points`` spans of equal time, each its last time, worst status, highest total lag,
        last state and lowest completeness."""
        n = self.db.execute("SELECT COUNT(*) FROM groups WHERE grp = ? AND ts_ms >= ?", (group, since_ms)).fetchone()[0]
        if n <= max_points:
            rows = self.db.execute("SELECT ts_ms, status, total_lag, state, complete FROM groups"
                                   " WHERE grp = ? AND ts_ms >= ? ORDER BY ts_ms", (group, since_ms)).fetchall()
            return [dict(r) for r in rows]
        first, last = self.db.execute("SELECT MIN(ts_ms), MAX(ts_ms) FROM groups WHERE grp = ? AND ts_ms >= ?",
                                      (group, since_ms)).fetchone()
        span = max(1, -(-(last - first + 1) // max_points))
        severity = " ".join(f"WHEN '{name}' THEN {i}" for i, name in enumerate(SEVERITY))
        rows = self.db.execute(
            "WITH b AS (SELECT MAX(ts_ms) AS ts_ms, MAX(total_lag) AS total_lag, MIN(complete) AS complete,"
            f" MAX(CASE status {severity} ELSE 0 END) AS worst FROM groups"  # noqa: S608 - constants
            " WHERE grp = :g AND ts_ms >= :s GROUP BY (ts_ms - :s) / :w)"
            " SELECT b.ts_ms, b.worst, b.total_lag, (SELECT state FROM groups WHERE grp = :g AND ts_ms = b.ts_ms"
            " LIMIT 1) AS state, b.complete FROM b ORDER BY b.ts_ms",
            {"g": group, "s": since_ms, "w": span}).fetchall()
        return [{"ts_ms": r[0], "status": SEVERITY[r[1]], "total_lag": r[2], "state": r[3], "complete": r[4]}
                for r in rows]

    def latest_groups(self) -> dict[str, dict[str, Any]]:
        """Each group's latest evaluation (one index seek per group)."""
        out: dict[str, dict[str, Any]] = {}
        for group in self.groups_known():
            row = self.db.execute("SELECT * FROM groups WHERE grp = ? ORDER BY ts_ms DESC LIMIT 1",
                                  (group,)).fetchone()
            if row is not None:
                out[group] = dict(row)
        return out

    def round_groups(self) -> list[str]:
        """The groups the latest round judged (what the monitor's API lists)."""
        rows = self.db.execute("SELECT grp FROM groups WHERE ts_ms = (SELECT MAX(ts_ms) FROM groups) ORDER BY grp")
        return [r[0] for r in rows]

    def groups_known(self, table: str = "groups") -> list[str]:
        """Every group with rows in ``table`` (groups: an evaluation; samples; ends), skipping through its
        index."""
        if table not in ("groups", "samples", "ends"):
            raise ValueError(table)
        return [r[0] for r in self.db.execute(_DISTINCT_GROUPS.format(table=table))]

    def knows_group(self, group: str) -> bool:
        return self.db.execute("SELECT 1 FROM groups WHERE grp = ? LIMIT 1", (group,)).fetchone() is not None

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
