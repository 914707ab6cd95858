"""Read the metrics table (the version named by ``DIR/metrics/CURRENT``); times as ISO UTC strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kctl.errors import KctlError
from kctl.stream.sinks import SnapshotTable

FIELDS = ["window_start", "window_end", "host", "status", "requests", "bytes"]


def read_metrics(out: str | Path, spark: Any = None) -> list[dict[str, Any]]:
    cur = SnapshotTable(Path(out) / "metrics").current()
    if cur is None:
        if not Path(out).exists():
            raise KctlError(f"{out}: no such output dir", hint="pass the job's --out")
        return []
    own = spark is None
    if own:
        from kctl.stream.config import JobConfig
        from kctl.stream.job import build_session

        spark = build_session(JobConfig("", [], str(out), "", master="local[1]", driver_memory="512m",
                                        shuffle_partitions=1), app_name="kctl-stream-metrics")
    try:
        from pyspark.sql import functions as F

        iso = "yyyy-MM-dd'T'HH:mm:ss'Z'"
        df = spark.read.parquet(str(cur.path)).orderBy("window_start", "host", "status")
        df = df.withColumn("window_start", F.date_format("window_start", iso)) \
            .withColumn("window_end", F.date_format("window_end", iso))
        rows = df.collect()
        return [{k: r[k] for k in FIELDS} for r in rows]
    finally:
        if own:
            spark.stop()
