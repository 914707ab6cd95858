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
* :func:`merge_counts` (metrics): ``MERGE`` adding the batch's counts to the
  rows of the same (window_start, host, status), made idempotent by the session
  confs ``spark.databricks.delta.write.txnAppId``/``txnVersion`` (Delta applies
  them to DML commands). The merge condition names the batch's window starts as
  literals, so Delta's data skipping reads only the files whose min/max
  window_start can hold one of them. The metrics table has deletion vectors:
  a MERGE marks the old versions of the rows it updates as deleted instead of
  copying every other row of their files, so it writes only the batch's rows
  (without them each rewritten file would carry all older windows along, and
  grow with the job's history).

Readers see one table version at a time (snapshot isolation): never part of a batch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
METRIC_KEYS = ("window_start", "host", "status")


def append(df: Any, path: str, *, app_id: str, version: int, partition_by: Sequence[str] = ()) -> None:
    """Append ``df`` to the Delta table at ``path`` once per (app_id, version)."""
    w = df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", str(version))
    if partition_by:
        w = w.partitionBy(*partition_by)
    w.save(path)


def _ts(t: dt.datetime) -> str:
    return f"TIMESTAMP'{t.strftime('%Y-%m-%d %H:%M:%S')}'"


def merge_counts(spark: Any, source: Any, path: str, windows: Iterable[dt.datetime], *, app_id: str,
                 version: int) -> None:
    """MERGE ``source`` (window_start, window_end, host, status, requests, bytes) into the metrics table:
    add the counts to an existing row, insert a new one; once per (app_id, version).

    ``windows`` are the distinct window starts of ``source`` (UTC, naive): the condition lists them as
    literals so that only files that may hold them are read and rewritten.
    """
    from delta.tables import DeltaTable

    ws = sorted(set(windows))
    if not ws:
        return
    cond = " AND ".join(f"t.{k} = s.{k}" for k in METRIC_KEYS)
    cond = f"t.window_start IN ({', '.join(_ts(w) for w in ws)}) AND {cond}"
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(version))
    try:
        (
            DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), cond)
            .whenMatchedUpdate(set={"requests": "t.requests + s.requests", "bytes": "t.bytes + s.bytes"})
            .whenNotMatchedInsertAll()
            .execute()
        )
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def create_table(spark: Any, path: str, schema: Any, partition_by: Sequence[str] = (),
                 stats_columns: int | None = None, deletion_vectors: bool = False) -> None:
    """Create an empty Delta table at ``path`` unless one is there (readers find a table from the start).

    ``stats_columns``: Delta keeps min/max statistics for the first N columns only (32 by default); each
    costs work at every write, so a wide table keeps them for the columns readers filter on.
    """
    from delta.tables import DeltaTable

    b = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    if stats_columns is not None:
        b = b.property("delta.dataSkippingNumIndexedCols", str(stats_columns))
    if deletion_vectors:
        b = b.property("delta.enableDeletionVectors", "true")
    if partition_by:
        b = b.partitionedBy(*partition_by)
    b.execute()


def last_txn_version(path: str, app_id: str) -> int | None:
    """The last batch id committed to the Delta table at ``path`` by ``app_id``, read from its log (no JVM)."""
    from deltalake import DeltaTable

    try:
        t = DeltaTable(path)
    except Exception:  # noqa: BLE001 - no table yet
        return None
    v = t.transaction_version(app_id)
    return int(v) if v is not None else None
