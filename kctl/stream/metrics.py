"""Read the metrics table (the version named by ``DIR/metrics/CURRENT``); times as ISO UTC strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kctl.errors import KctlError
from kctl.extras import require
from kctl.stream.sinks import SnapshotTable

FIELDS = ["window_start", "window_end", "host", "status", "requests", "bytes"]


def read_metrics(out: str | Path, spark: Any = None) -> list[dict[str, Any]]:
    cur = SnapshotTable(Path(out) / "metrics").current()
    if cur is None:
        if not Path(out).exists():
            raise KctlError(f"{out}: no such output dir", hint="pass the job's --out")
        return []
    if spark is None:
        return _read_with_arrow(cur.path)
    from pyspark.sql import functions as F

    iso = "yyyy-MM-dd'T'HH:mm:ss'Z'"
    df = spark.read.parquet(str(cur.path)).orderBy("window_start", "host", "status")
    df = df.withColumn("window_start", F.date_format("window_start", iso)) \
        .withColumn("window_end", F.date_format("window_end", iso))
    return [{k: r[k] for k in FIELDS} for r in df.collect()]


def _read_with_arrow(path: Path) -> list[dict[str, Any]]:
    """Read one metrics version with pyarrow: no JVM, so `kctl stream metrics` answers at once."""
    pq = require("pyarrow.parquet", "stream")
    rows = pq.read_table(str(path), columns=FIELDS).to_pylist()
    for r in rows:
        for k in ("window_start", "window_end"):
            # Spark wrote session-time-zone UTC timestamps; render them as ISO UTC like the Spark path.
            r[k] = r[k].strftime("%Y-%m-%dT%H:%M:%SZ")
    rows.sort(key=lambda r: (r["window_start"], r["host"], r["status"]))
    return [{k: r[k] for k in FIELDS} for r in rows]
