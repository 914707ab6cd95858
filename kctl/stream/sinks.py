"""Exactly-once Delta Lake outputs for a foreachBatch sink, keyed by (query id, batch id).

Spark writes a micro-batch's offsets to the checkpoint *before* running it and
replays that same batch (same id, same offsets, same rows) after a crash, until
its commit is recorded. So an output is exactly-once if writing batch ``b``
twice leaves the same result as writing it once. Delta gives that per table:
every commit here carries a transaction identifier ``(app id, version)`` =
``(the streaming query's id, the batch id)``, recorded in the table's log in the
same atomic commit as the data. Delta skips a write whose version is not above
the one recorded for its app id, so a replayed batch changes nothing, and a
batch cut by kill -9 either committed to a table (skipped on replay) or left
nothing visible there (its orphan files are never referenced, VACUUM removes
them).

* :func:`append` (archive, dead-letter): ``DataFrameWriter`` options
  ``txnAppId``/``txnVersion``.
* :meth:`MetricsTable.merge_counts` (metrics): a delta-rs ``MERGE`` (``deltalake``, in the driver, no Spark job)
  of the batch's counts, which the driver holds already (a few hundred rows), adding them to the rows of
  the same (window_start, host, status). The commit carries the same transaction identifier
  (``CommitProperties(app_transactions=...)``) and is skipped when the table's version for the app id is
  not below the batch id. The table is partitioned by ``window_start``: a MERGE rewrites the files of the
  batch's windows only (one small file per minute), never a file that holds other windows, so its cost
  does not grow with the job's history (a Spark MERGE cost 2-3 s of driver work per batch here).

Readers see one table version at a time (snapshot isolation): never part of a batch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kctl.errors import KctlError

METRIC_KEYS = ("window_start", "host", "status")


def append(df: Any, path: str, *, app_id: str, version: int, partition_by: Sequence[str] = ()) -> None:
    """Append ``df`` to the Delta table at ``path`` once per (app_id, version)."""
    w = df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", str(version))
    if partition_by:
        w = w.partitionBy(*partition_by)
    w.save(path)


def append_arrow(data: Any, path: str, *, app_id: str, version: int, partition_by: Sequence[str] = (),
                 storage_options: dict[str, str] | None = None) -> None:
    """:func:`append` of an Arrow table by delta-rs (no Spark job): the same (app_id, version) transaction
    identifier in the commit, so Spark's appends and these skip the same replays."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    write_deltalake(_rs(path), data, mode="append", partition_by=list(partition_by) or None,
                    storage_options=storage_options,
                    commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]))


METRICS_PARTITION = "window_start"


def metrics_arrow_schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([("window_start", ts), ("window_end", ts), ("host", pa.string()), ("status", pa.int32()),
                      ("requests", pa.int64()), ("bytes", pa.int64())])


def _rs(path: str | Path) -> str:
    """The path as delta-rs names it (s3:// for Spark's s3a://)."""
    p = str(path)
    return "s3://" + p[len("s3a://"):] if p.startswith("s3a://") else p


def check_metrics_table(path: str | Path, storage_options: dict[str, str] | None = None) -> bool:
    """Whether a metrics table is at ``path``; refuse one the job's MERGE cannot write (an earlier kctl's:
    deletion vectors, not partitioned by ``window_start``). ``storage_options``: delta-rs's, for a table on S3."""
    from deltalake import DeltaTable

    if storage_options is not None:
        if not DeltaTable.is_deltatable(_rs(path), storage_options=storage_options):
            return False
        t = DeltaTable(_rs(path), storage_options=storage_options)
    else:
        log = Path(path) / "_delta_log"
        if not log.is_dir() or not any(log.glob("*.json")):
            return False
        t = DeltaTable(str(path))
    parts = list(t.metadata().partition_columns)
    features = set(t.protocol().writer_features or [])
    if parts != [METRICS_PARTITION] or "deletionVectors" in features:
        raise KctlError(f"{path} is a metrics table of an earlier kctl (partitioned by {parts or 'nothing'}, "
                        f"writer features {sorted(features) or 'none'}); this job writes one partitioned by "
                        f"{METRICS_PARTITION}", hint="pass a fresh --out and --checkpoint (the old tables stay "
                        "readable with `kctl stream query --out OLD`)")
    return True


def create_metrics_table(path: str, storage_options: dict[str, str] | None = None) -> None:
    """The empty metrics table, partitioned by ``window_start``, unless a usable one is there."""
    from deltalake import DeltaTable

    if check_metrics_table(path, storage_options):
        return
    DeltaTable.create(_rs(path), schema=metrics_arrow_schema(), partition_by=[METRICS_PARTITION], mode="ignore",
                      name="metrics", description="requests and bytes per 1-minute window, host and status",
                      storage_options=storage_options)


class MetricsTable:
    """The metrics table, kept open by the job (delta-rs reads only the new log entries before a MERGE)."""

    def __init__(self, path: str, storage_options: dict[str, str] | None = None) -> None:
        self.path = path
        self.storage_options = storage_options
        self._t: Any = None

    def _table(self) -> Any:
        from deltalake import DeltaTable

        if self._t is None:
            self._t = DeltaTable(_rs(self.path), storage_options=self.storage_options)
        else:
            self._t.update_incremental()
        return self._t

    def merge_counts(self, rows: Sequence[tuple[int, str, int, int, int]], *, app_id: str, version: int) -> bool:
        """MERGE the batch's (window start in epoch seconds, host, status, requests, bytes) rows: add the counts
        to an existing row, insert a new one; once per (app_id, version). False when the batch was there."""
        import pyarrow as pa
        from deltalake import CommitProperties, Transaction

        if not rows:
            return False
        t = self._table()
        done = t.transaction_version(app_id)
        if done is not None and int(done) >= version:
            return False
        utc = dt.timezone.utc
        starts = [dt.datetime.fromtimestamp(int(r[0]), utc) for r in rows]
        source = pa.Table.from_pydict({
            "window_start": starts, "window_end": [w + dt.timedelta(minutes=1) for w in starts],
            "host": [r[1] for r in rows], "status": [r[2] for r in rows],
            "requests": [r[3] for r in rows], "bytes": [r[4] for r in rows]}, schema=metrics_arrow_schema())
        windows = ", ".join(sorted({f"'{w.strftime('%Y-%m-%dT%H:%M:%SZ')}'" for w in starts}))
        # The literal list prunes the MERGE to the batch's window partitions before any file is read.
        cond = f"t.window_start IN ({windows}) AND " + " AND ".join(f"t.{k} = s.{k}" for k in METRIC_KEYS)
        (
            t.merge(source, predicate=cond, source_alias="s", target_alias="t",
                    commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]))
            .when_matched_update({"requests": "t.requests + s.requests", "bytes": "t.bytes + s.bytes"})
            .when_not_matched_insert_all()
            .execute()
        )
        return True


CHECKPOINT_INTERVAL = 100


def create_table(spark: Any, path: str, schema: Any, partition_by: Sequence[str] = (),
                 stats_columns: int | None = None) -> None:
    """Create an empty Delta table at ``path`` unless one is there (readers find a table from the start).

    ``stats_columns``: Delta keeps min/max statistics for the first N columns only (32 by default); each
    costs work at every write, so a wide table keeps them for the columns readers filter on.

    A checkpoint of the log every ``CHECKPOINT_INTERVAL`` commits rather than Delta's 10: writing one is a Spark
    job inside the commit that makes it (about 1 s here), so at one batch a second every tenth batch took
    twice as long; a reader replays at most that many small JSON commits after the checkpoint.
    """
    from delta.tables import DeltaTable

    b = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    b = b.property("delta.checkpointInterval", str(CHECKPOINT_INTERVAL))
    if stats_columns is not None:
        b = b.property("delta.dataSkippingNumIndexedCols", str(stats_columns))
    if partition_by:
        b = b.partitionedBy(*partition_by)
    b.execute()


def last_txn_version(path: str, app_id: str, storage_options: dict[str, str] | None = None) -> int | None:
    """The last batch id committed to the Delta table at ``path`` by ``app_id``, read from its log (no JVM)."""
    from deltalake import DeltaTable

    try:
        t = DeltaTable(_rs(path), storage_options=storage_options)
    except Exception:  # noqa: BLE001 - no table yet
        return None
    v = t.transaction_version(app_id)
    return int(v) if v is not None else None
