"""The job's Delta tables read without a JVM: delta-rs (``deltalake``) for snapshots, DuckDB for SQL.

``deltalake`` reads one committed version of a table (snapshot isolation: never part of a batch)
as Arrow; DuckDB queries those Arrow datasets in-process. Both come with ``kctl[tables]`` (and
``kctl[stream]``), so an operator's machine without Java or pyspark can read and query the outputs.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.extras import require
from kctl.stream import s3
from kctl.stream.config import state_dir
from kctl.stream.record import pid_alive, read_json
from kctl.wait import GiveUp, wait_until

TABLES = ("archive", "deadletter", "metrics")


@dataclass(frozen=True)
class S3Dir:
    """A table root on an S3-compatible store: ``root / "metrics"`` names a table as a local Path does."""
    location: s3.Location
    options: dict[str, str] = field(repr=False)
    credentials: s3.Credentials = field(repr=False)

    def __truediv__(self, name: str) -> S3Dir:
        return S3Dir(self.location.child(name), self.options, self.credentials)

    def __str__(self) -> str:
        return self.location.s3


def _open_s3(path: S3Dir) -> Any | None:
    deltalake = require("deltalake", "tables")
    try:
        if not deltalake.DeltaTable.is_deltatable(str(path), storage_options=path.options):
            return None
        return deltalake.DeltaTable(str(path), storage_options=path.options)
    except Exception as exc:  # noqa: BLE001 - delta-rs raises its own error types
        msg = s3.scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, path.credentials)
        raise KctlError(f"{path.location.s3a}: not a readable Delta table ({msg})",
                        hint="is it the --out of a kctl stream job, and does the store answer?") from None


def open_table(path: Path | S3Dir) -> Any | None:
    """The Delta table at ``path`` (latest version), or None when there is none yet."""
    if isinstance(path, S3Dir):
        return _open_s3(path)
    deltalake = require("deltalake", "tables")
    log = path / "_delta_log"
    if not log.is_dir() or not any(log.glob("*.json")):
        return None  # not created yet: the writer makes the log dir before its first commit lands
    try:
        return deltalake.DeltaTable(str(path))
    except Exception as exc:  # noqa: BLE001 - delta-rs raises its own error types
        raise KctlError(f"{path}: not a readable Delta table ({exc})",
                        hint="is it the --out of a kctl stream job?") from None


def has_deletion_vectors(t: Any) -> bool:
    return "deletionVectors" in (t.protocol().reader_features or [])


def to_arrow(t: Any, sql: str = "SELECT * FROM t") -> Any:
    """A pyarrow Table of ``sql`` over the Delta table ``t`` (view ``t``). Through delta-rs's query engine,
    which applies deletion vectors (its pyarrow dataset path refuses such tables)."""
    pa = require("pyarrow", "tables")
    deltalake = require("deltalake", "tables")
    return pa.table(deltalake.QueryBuilder().register("t", t).execute(sql).read_all())


def arrow_source(t: Any) -> Any:
    """What DuckDB scans for table ``t``: a lazy pyarrow dataset, or (deletion vectors) the table read whole."""
    return to_arrow(t) if has_deletion_vectors(t) else t.to_pyarrow_dataset()


def require_out(out: str | Path, store: s3.Settings | None = None) -> Any:
    """The tables' root: a local dir (Path), or an s3a:// URL (S3Dir) with ``store``'s endpoint and the keys of its
    credentials file; one clear error when the dir, the settings, the store or the bucket is missing."""
    if s3.is_s3(out):
        loc = s3.parse_url(str(out))
        store = store or s3.Settings()
        store.validate(str(out))
        creds = s3.read_credentials(str(store.credentials_file), profile=store.profile)
        s3.check_store(store, creds, loc)
        return S3Dir(loc, s3.storage_options(store, creds), creds)
    p = Path(out)
    if not p.is_dir():
        raise KctlError(f"{out}: no such output dir", hint="pass the job's --out")
    return p


@dataclass
class TableInfo:
    table: str
    version: int | None
    files: int
    rows: int | None
    last_batch: int | None


def info(out: str | Path, app_id: str | None = None, store: s3.Settings | None = None) -> list[TableInfo]:
    """Version, file count and rows (from the log's statistics) of each table; the last batch id
    ``app_id`` (the job's query id) committed to it."""
    root = require_out(out, store)
    res = []
    for name in TABLES:
        t = open_table(root / name)
        if t is None:
            res.append(TableInfo(name, None, 0, None, None))
            continue
        pa = require("pyarrow", "tables")
        adds = pa.table(t.get_add_actions(flatten=True))
        if has_deletion_vectors(t):  # files' record counts include rows marked deleted
            rows = int(to_arrow(t, "SELECT count(*) AS n FROM t").column("n")[0].as_py())
        else:
            counts = adds.column("num_records").to_pylist() if "num_records" in adds.column_names else []
            rows = sum(int(r or 0) for r in counts)
        last = t.transaction_version(app_id) if app_id else None
        res.append(TableInfo(name, int(t.version()), adds.num_rows, rows, int(last) if last is not None else None))
    return res


def _iso(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)


def query(out: str | Path, sql: str, limit: int | None = 1000, store: s3.Settings | None = None) -> QueryResult:
    """Run ``sql`` with DuckDB over the tables (views ``archive``, ``deadletter``, ``metrics``)."""
    duckdb = require("duckdb", "tables")
    root = require_out(out, store)
    con = duckdb.connect()
    sources: list[Any] = []  # released before the answer: see the finally
    rel: Any = None
    reader: Any = None
    try:
        views = []
        for name in TABLES:
            t = open_table(root / name)
            if t is not None:
                sources.append(arrow_source(t))
                con.register(name, sources[-1])
                views.append(name)
        if not views:
            raise KctlError(f"{out} holds no Delta table yet", hint="has the stream job run with this --out?")
        data: list[dict[str, Any]] = []
        try:
            rel = con.sql(sql)
            if rel is None:  # a statement without rows
                return QueryResult([], [])
            cols = list(rel.columns)
            # Through Arrow, batch by batch: DuckDB's own conversion of time-zoned timestamps needs pytz.
            to_reader = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader  # duckdb 2 / 1.x
            reader = to_reader(1024)
            for batch in reader:
                data.extend(batch.to_pylist())
                if limit and len(data) >= limit:
                    break
        except duckdb.Error as exc:
            raise UsageError(f"query failed: {str(exc).splitlines()[0]}",
                             hint=f"tables: {', '.join(views)}; e.g. SELECT host, sum(requests) FROM metrics "
                                  "GROUP BY host") from None
        rows = [{c: _iso(r.get(c)) for c in cols} for r in data[:limit] if r is not None]
        return QueryResult(cols, rows)
    finally:
        # Everything that scans is closed and collected here, while Arrow's runtime is whole: a dataset scan's
        # threads left to the interpreter's final teardown can abort the process after the answer was printed
        # ("terminate called without an active exception", exit -6; seen once in CI on an S3 table).
        for open_ in (reader, rel):
            if open_ is not None:
                open_.close()
        con.close()
        del reader, rel, con
        sources.clear()
        gc.collect()


@dataclass
class OptimizeResult:
    out: str
    by: str
    retain_hours: float
    seconds: float
    tables: dict[str, Any]


MIN_RETAIN_HOURS = 1.0


def optimize(out: str | Path, checkpoint: str | Path, retain_hours: float = 168.0,
             timeout_s: float = 600.0, store: s3.Settings | None = None,
             record: str | Path | None = None) -> OptimizeResult:
    """Compact small files and VACUUM what no version younger than ``retain_hours`` references.

    While the job runs, it does the work itself between two micro-batches (a request file in its state
    dir), so compaction never races the writer; otherwise delta-rs does it here, without a JVM.
    """
    if retain_hours < MIN_RETAIN_HOURS:
        raise UsageError(f"--retain-hours {retain_hours} is below {MIN_RETAIN_HOURS}",
                         hint="VACUUM must keep the files a running reader may still open")
    root = require_out(out, store)
    sd = state_dir(checkpoint, record)
    job = read_json(sd / "job.json") or {}
    if pid_alive(job.get("pid")) and job.get("state") in ("starting", "running"):
        if abs(float((job.get("config") or {}).get("vacuum_retain_hours", 168.0)) - retain_hours) > 1e-9:
            raise UsageError("the running job vacuums with its own retention",
                             hint="omit --retain-hours, or stop the job first")
        before = (sd / "optimize.json").stat().st_mtime if (sd / "optimize.json").exists() else 0.0
        (sd / "optimize.request").write_text("optimize\n")

        p = sd / "optimize.json"

        def optimized() -> tuple[bool, str]:
            if p.exists() and p.stat().st_mtime > before:
                return True, f"{p} written"
            if not pid_alive(job.get("pid")):
                raise GiveUp(f"the job (pid {job.get('pid')}) exited before it optimized its tables")
            return False, f"no new {p.name} yet (the job runs, pid {job.get('pid')})"

        try:
            wait_until("the running job to optimize its tables", optimized, timeout_s, poll=0.5)
        except KctlError as exc:  # TimeoutReached or GiveUp: take the request back, nobody will act on it
            (sd / "optimize.request").unlink(missing_ok=True)
            raise KctlError(f"the running job did not optimize its tables in time: {exc.message}",
                            hint="it acts after its next micro-batch with data; see `kctl stream status`") from None
        res = json.loads(p.read_text())
        return OptimizeResult(str(out), f"the running job (pid {job['pid']})", retain_hours,
                              float(res.get("seconds", 0.0)), dict(res.get("tables", {})))
    t0 = time.monotonic()
    tables: dict[str, Any] = {}
    for name in TABLES:
        t = open_table(root / name)
        if t is None:
            continue
        m = t.optimize.compact()
        removed = t.vacuum(retention_hours=int(retain_hours), dry_run=False, enforce_retention_duration=False)
        tables[name] = {"files_removed": int(m.get("numFilesRemoved", 0)),
                        "files_added": int(m.get("numFilesAdded", 0)), "vacuumed": len(removed)}
    return OptimizeResult(str(out), "delta-rs (job not running)", retain_hours, round(time.monotonic() - t0, 2), tables)
