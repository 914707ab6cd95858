"""Read the metrics Delta table (one committed version); times as ISO UTC strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kctl.stream import s3
from kctl.stream.tables import open_table, require_out, to_arrow

FIELDS = ["window_start", "window_end", "host", "status", "requests", "bytes"]


def read_metrics(out: str | Path, spark: Any = None, store: s3.Settings | None = None) -> list[dict[str, Any]]:
    """Every row of ``OUT/metrics``: with delta-rs (no JVM) unless a Spark session is given."""
    root = require_out(out, store)
    if spark is not None:
        from pyspark.sql import functions as F

        iso = "yyyy-MM-dd'T'HH:mm:ss'Z'"
        df = spark.read.format("delta").load(str(root / "metrics")).orderBy("window_start", "host", "status")
        df = df.withColumn("window_start", F.date_format("window_start", iso)) \
            .withColumn("window_end", F.date_format("window_end", iso))
        return [{k: r[k] for k in FIELDS} for r in df.collect()]
    t = open_table(root / "metrics")
    if t is None:
        return []
    rows: list[dict[str, Any]] = to_arrow(t, f"SELECT {', '.join(FIELDS)} FROM t").to_pylist()
    for r in rows:
        for k in ("window_start", "window_end"):
            r[k] = r[k].strftime("%Y-%m-%dT%H:%M:%SZ")  # UTC instants
    rows.sort(key=lambda r: (r["window_start"], r["host"], r["status"]))
    return [{k: r[k] for k in FIELDS} for r in rows]
