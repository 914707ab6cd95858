"""The PySpark Structured Streaming job: Kafka -> parse -> archive, dead-letter, metrics.

Runs in its own process (``python -m kctl.stream.job --config FILE``), started
by :mod:`kctl.stream.submit`. One streaming query reads the topics; each
micro-batch is parsed once and written to the three Delta tables by ``foreachBatch``
through the (query id, batch id)-idempotent writes of :mod:`kctl.stream.sinks`.
After each committed batch, its end offsets go to the consumer group
``kctl-stream-<job name>`` so that Kafka's own tools show the job's lag.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kctl import cache
from kctl.errors import KctlError, TimeoutReached
from kctl.kafka import groups
from kctl.stream import login, s3, sinks
from kctl.stream.config import JobConfig
from kctl.stream.progress import HISTORY, ProgressHistory
from kctl.stream.state import batch_records, committed_offsets, latest_offsets
from kctl.wait import wait_until

# nginx "combined" + "$http_x_forwarded_for" (optional, so plain combined parses too).
# $remote_addr may be empty, as in the seed's record (" - - [17/Apr/2019:...").
# nginx writes a '"' inside a field as \x22, so a quoted field never holds a bare quote: "([^"]*)" is exact,
# and much cheaper for Java's regex engine than an escape-aware alternation.
_Q = r'"([^"]*)"'
NGINX_RE = (
    r"^\s*(\S*) - (\S*) \[([^\]]*)\] " + _Q + r" (\d{3}) (\d+|-) " + _Q + " " + _Q + "(?: " + _Q + r")?\s*$"
)
REQUEST_RE = r"^(\S+) (\S+)(?: (\S+))?$"
_SEP = "\u0001"
TIME_LOCAL_FORMAT = "dd/MMM/yyyy:HH:mm:ss Z"

ARCHIVE_COLUMNS = [
    "event_time", "host", "remote_addr", "remote_user", "time_local", "method", "path", "protocol",
    "status", "bytes", "referer", "user_agent", "x_forwarded_for", "message", "timestamp", "log_file_path",
    "log_offset", "topic", "partition", "offset", "kafka_timestamp", "date",
]
DEADLETTER_COLUMNS = ["topic", "partition", "offset", "kafka_timestamp", "key", "value", "reason", "date"]


def envelope_schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    # Only the fields the job takes: Spark's JSON reader skips the others (filebeat's @metadata, agent, ecs, ...)
    # without building them.
    return StructType([
        StructField("@timestamp", StringType()),
        StructField("message", StringType()),
        StructField("host", StructType([StructField("name", StringType())])),
        StructField("log", StructType([
            StructField("offset", LongType()),
            StructField("file", StructType([StructField("path", StringType())])),
        ])),
    ])


def parse(df: Any) -> Any:
    """Parse Kafka records (key, value, topic, partition, offset, timestamp) into events.

    Returns one row per record with the parsed fields, ``ok`` and ``reason``
    (null when ok). Nothing raises on bad input: every failure becomes a reason.

    Each costly function (``from_json``, the nginx regex, the request regex, ``split``) appears once, in a
    projection of its own, and later projections only take fields of its result: written as one projection
    with ``when(...)`` around each field, the plan held 5 ``from_json`` and 91 ``regexp_replace`` calls
    (Spark's common-subexpression elimination skips conditional branches), and the counting job, which parses a
    batch into the cache, took 2.84 s of CPU for 100,000 rows instead of 1.87 s. The archive and dead-letter
    rows are selected from the cached result of this function, never from a plan of their own: a filter above
    it would be pushed below these projections and duplicate them again.
    """
    from pyspark.sql import functions as F

    df = df.select("topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"),
                   F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"))
    # ltrim copies the whole value: only for a value that does not start with "{" (Or skips its right side).
    is_json = F.col("value").startswith("{") | F.ltrim(F.col("value")).startswith("{")
    df = df.select("*", is_json.alias("_is_json"), F.when(is_json, F.from_json("value", envelope_schema())).alias("_e"))
    e, js = F.col("_e"), F.col("_is_json")
    message = F.when(js, e.getField("message")).otherwise(F.col("value"))
    df = df.select(
        "topic", "partition", "offset", "kafka_timestamp", "key", "value", "_is_json",
        # Only an envelope without a message needs telling apart from text that is not JSON at all (a second
        # parse, so not for every row); the session parses no partial results (build_session), so an invalid
        # envelope never yields a message.
        F.when(js & e.getField("message").isNull(), F.json_object_keys("value").isNotNull()).alias("_valid_json"),
        message.alias("message"),
        F.when(js, e.getField("host").getField("name")).otherwise(F.col("key")).alias("_host"),
        e.getField("@timestamp").alias("timestamp"),
        e.getField("log").getField("file").getField("path").alias("log_file_path"),
        e.getField("log").getField("offset").alias("log_offset"),
    )
    m = F.col("message")
    # One regex pass per line: regexp_replace rewrites a matching line into its groups joined by \x01
    # (Java fills a group that did not take part with ""), split takes them apart. nginx writes control
    # characters as \xHH, so \x01 never occurs in a real line; a line that holds one anyway splits into
    # the wrong count and goes to the dead-letter output rather than into wrong fields.
    joined = F.regexp_replace(m, NGINX_RE, _SEP.join(f"${i}" for i in range(1, 10)))
    df = df.select("*", F.when(joined != m, F.split(joined, _SEP)).alias("_p"))
    df = df.select("*", F.coalesce(F.size("_p") == 9, F.lit(False)).alias("_matched"))
    p, ok_line = F.col("_p"), F.col("_matched")
    g = [F.lit("")] + [F.when(ok_line, p.getItem(i - 1)).otherwise(F.lit("")) for i in range(1, 10)]
    req = g[4]
    rj = F.regexp_replace(req, REQUEST_RE, "$1" + _SEP + "$2" + _SEP + "$3")
    df = df.select(
        "*",
        g[1].alias("remote_addr"), g[2].alias("remote_user"), g[3].alias("time_local"),
        F.when(rj != req, F.split(rj, _SEP)).alias("_r"),
        g[5].try_cast("int").alias("status"),
        F.when(g[6] == "-", F.lit(0).cast("long")).otherwise(g[6].try_cast("long")).alias("bytes"),
        g[7].alias("referer"), g[8].alias("user_agent"),
        F.when(ok_line, F.nullif(g[9], F.lit(""))).alias("x_forwarded_for"),
    )
    r = F.col("_r")
    req_ok = F.coalesce(F.size(r) == 3, F.lit(False))
    request_time = F.try_to_timestamp(F.col("time_local"), F.lit(TIME_LOCAL_FORMAT))
    beat_time = F.try_to_timestamp(F.col("timestamp"))
    df = df.select(
        "*",
        *(F.when(req_ok, F.nullif(r.getItem(i), F.lit(""))).alias(name)
          for i, name in enumerate(("method", "path", "protocol"))),
        F.coalesce(request_time, beat_time).alias("event_time"),
        F.coalesce(F.nullif(F.col("_host"), F.lit("")), F.lit("-")).alias("host"),
    )
    reason = (
        F.when(F.col("value").isNull() | (~F.col("_is_json") & (F.trim(F.col("value")) == "")), F.lit("empty value"))
        .when(F.col("_is_json") & ~F.col("_valid_json"), F.lit("invalid JSON"))
        .when(F.col("_is_json") & F.col("message").isNull(), F.lit("JSON event without a message field"))
        .when(~F.col("_matched"), F.lit("message is not an nginx access-log line"))
        .when(F.col("event_time").isNull(), F.lit("no parsable request time nor @timestamp"))
        .when(F.col("bytes").isNull(), F.lit("bytes sent out of range"))
    )
    df = df.withColumn("reason", reason).withColumn("ok", F.col("reason").isNull())
    return df.drop("_is_json", "_valid_json", "_host", "_matched", "_p", "_r")


def archive_rows(parsed: Any) -> Any:
    from pyspark.sql import functions as F

    return parsed.where("ok").withColumn("date", F.to_date("event_time")).select(*ARCHIVE_COLUMNS)


def deadletter_rows(parsed: Any) -> Any:
    from pyspark.sql import functions as F

    return parsed.where(~F.col("ok")).withColumn("date", F.to_date("kafka_timestamp")).select(*DEADLETTER_COLUMNS)


def batch_counts(parsed: Any) -> list[Any]:
    """One pass over a parsed batch: per (1-minute event-time window, host, status) of the good rows, requests
    and bytes; the bad rows collapse into one row (ok false) whose count is the dead-letter total.

    The result is small (the batch's windows x hosts x statuses) and comes back to the driver: it is the
    source of the metrics MERGE and the batch's counters, so no other job counts the batch.
    """
    from pyspark.sql import functions as F

    ok = F.col("ok")
    rows: list[Any] = (
        parsed.groupBy(
            ok.alias("ok"),
            F.when(ok, F.unix_seconds(F.date_trunc("minute", "event_time"))).alias("ws"),
            F.when(ok, F.col("host")).alias("host"),
            F.when(ok, F.col("status")).alias("status"),
        )
        .agg(F.count(F.lit(1)).alias("requests"), F.sum(F.when(ok, F.col("bytes"))).alias("bytes"))
        .collect()
    )
    return rows


def to_cache(parsed: Any) -> Any:
    """What a large batch caches: the parsed rows, each record's raw ``value`` kept only where the dead-letter table
    takes it (a good row's fields and ``message`` are archived, not its envelope). The envelope is the widest
    column, so the cache is about half the size: a 200,000-event batch no longer overflows the default driver's
    storage memory onto disk (Spark's "Not enough space to cache" warning), which cost CPU to write and read."""
    from pyspark.sql import functions as F

    return parsed.withColumn("value", F.when(~F.col("ok"), F.col("value")))


def small_batch(parsed: Any) -> tuple[Any, Any, list[tuple[int, str, int, int, int]]]:
    """A small batch in one Spark job: its parsed rows come to the driver as Arrow, and the archive's rows, the
    dead-letter rows and the metrics' counts (as :func:`batch_counts` makes them: per 1-minute event-time window,
    host and status of the good rows, requests and bytes) are taken from them with pyarrow."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    rows = parsed.select("*", F.to_date("event_time").alias("_archive_date"),
                         F.to_date("kafka_timestamp").alias("_deadletter_date")).toArrow()
    ok = rows["ok"]
    good, bad = rows.filter(ok), rows.filter(pc.invert(ok))

    def pick(t: Any, columns: list[str], date: str) -> Any:
        return t.select([date if c == "date" else c for c in columns]).rename_columns(columns)

    micros = pc.cast(pc.floor_temporal(good["event_time"], unit="minute"), pa.int64())
    keyed = pa.table({"ws": pc.divide(micros, 1_000_000), "host": good["host"], "status": good["status"],
                      "bytes": good["bytes"]})
    agg = keyed.group_by(["ws", "host", "status"]).aggregate([("bytes", "sum"), ("bytes", "count")]).to_pylist()
    counts = [(int(r["ws"]), str(r["host"]), int(r["status"]), int(r["bytes_count"]), int(r["bytes_sum"] or 0))
              for r in agg]
    return pick(good, ARCHIVE_COLUMNS, "_archive_date"), pick(bad, DEADLETTER_COLUMNS, "_deadletter_date"), counts


def new_counters() -> dict[str, int]:
    """The counters a :class:`BatchWriter` keeps (counters.json), before the first batch."""
    return {"batches": 0, "archived": 0, "deadletter": 0, "last_batch_id": -1, "last_batch_seconds_x1000": 0}


class BatchWriter:
    """The foreachBatch function: write one micro-batch to the three Delta tables, idempotently by
    (query id, batch id)."""

    def __init__(self, cfg: JobConfig, counters: dict[str, int], app_id: str, parsed: bool = False) -> None:
        """``parsed``: the batches come parsed (the job's stream is :func:`parse` of Kafka's, built once), else
        as Kafka's records, parsed here."""
        self.cfg = cfg
        self.parsed = parsed
        self.archive = cfg.table("archive")
        self.deadletter = cfg.table("deadletter")
        self.metrics = cfg.table("metrics")
        # delta-rs's options for tables on S3 (the keys, read from the credentials file in this process)
        self.options = cfg.storage_options()
        self.counters = counters
        self.app_id = app_id
        self.state = cfg.state()
        self.first = True
        self.metrics_table = sinks.MetricsTable(self.metrics, self.options)
        # Seconds of the last batch's steps (parse + counts, appends, merge), kept in counters.json.
        self.timings: dict[str, float] = {}

    def __call__(self, batch: Any, batch_id: int, records: int | None = None) -> None:
        """``records``: the batch's record count when the caller knows it (the warm-up); else the checkpoint's
        offset log says (:func:`kctl.stream.state.batch_records`)."""
        t0 = time.monotonic()
        if not self.app_id:  # a new checkpoint: Spark wrote the query id before running batch 0
            self.app_id = query_id(self.cfg.checkpoint, self.cfg.files()) or ""
            if not self.app_id:
                raise RuntimeError(f"no query id in {self.cfg.checkpoint}/metadata")
        small = self.cfg.small_batch_rows
        n = records if records is not None else (
            batch_records(self.cfg.checkpoint, batch_id, self.cfg.files()) if small else None)
        rows = batch if self.parsed else parse(batch)
        if n is not None and n <= small:
            self._write_small(rows, batch_id)
        else:
            cached = to_cache(rows).persist()
            try:
                self._write(cached, batch_id)
            finally:
                cached.unpersist()
        self.counters["batches"] += 1
        self.counters["last_batch_id"] = batch_id
        self.counters["last_batch_seconds_x1000"] = int((time.monotonic() - t0) * 1000)
        for step, secs in self.timings.items():
            self.counters[f"last_{step}_ms"] = int(secs * 1000)
        every = self.cfg.optimize_every
        if (every and self.counters["batches"] % every == 0) or _take_request(self.state):
            optimize_tables(batch.sparkSession, self.cfg, self.state)
        _write_json(self.state / "counters.json", self.counters)

    def _done(self, table: str, b: int) -> bool:
        """Whether batch ``b`` is already in ``table`` (only a run's first batch can be a replay)."""
        if not self.first:
            return False
        v = sinks.last_txn_version(table, self.app_id, self.options)
        return v is not None and v >= b

    def _write(self, parsed: Any, b: int) -> None:
        """One Spark job counts the batch (and fills the cache of the parsed rows); then the metrics MERGE
        (delta-rs, in this process, on the counts) and the archive (+ dead-letter) appends (Spark) run at the
        same time, each its own atomic, idempotent Delta commit. The MERGE takes milliseconds, so the metrics
        table shows the batch before its archive rows are written."""
        t0 = time.monotonic()
        counts = batch_counts(parsed)
        self.timings = {"counts": time.monotonic() - t0}
        good_rows = [(int(r["ws"]), r["host"], int(r["status"]), int(r["requests"]), int(r["bytes"] or 0))
                     for r in counts if r["ok"]]
        good = sum(r[3] for r in good_rows)
        bad = sum(int(r["requests"]) for r in counts if not r["ok"])
        self._merge_beside(good_rows, b, lambda: self._appends(parsed, b, good, bad))

    def _write_small(self, parsed: Any, b: int) -> None:
        """A batch of at most ``small_batch_rows`` records: one Spark job brings its parsed rows to the driver
        (:func:`small_batch`), and delta-rs appends them, with the same transaction identifiers as Spark's
        appends, beside the metrics MERGE."""
        t0 = time.monotonic()
        archive, deadletter, good_rows = small_batch(parsed)
        self.timings = {"counts": time.monotonic() - t0}

        def appends() -> None:
            t1 = time.monotonic()
            want = self.cfg.outputs
            if archive.num_rows and "archive" in want and not self._done(self.archive, b):
                sinks.append_arrow(archive, self.archive, app_id=self.app_id, version=b, partition_by=["date"],
                                   storage_options=self.options)
                self.counters["archived"] += archive.num_rows
            if deadletter.num_rows and "deadletter" in want and not self._done(self.deadletter, b):
                sinks.append_arrow(deadletter, self.deadletter, app_id=self.app_id, version=b,
                                   storage_options=self.options)
                self.counters["deadletter"] += deadletter.num_rows
            self.timings["appends"] = time.monotonic() - t1

        self._merge_beside(good_rows, b, appends)

    def _merge_beside(self, good_rows: list[tuple[int, str, int, int, int]], b: int,
                      appends: Callable[[], None]) -> None:
        """The metrics MERGE of ``good_rows`` (delta-rs, on a thread) while ``appends`` runs here; the MERGE's error
        raised after both."""
        merge = None
        if good_rows and "metrics" in self.cfg.outputs:
            merge = threading.Thread(target=self._merge, args=(good_rows, b), name=f"kctl-merge-{b}", daemon=True)
            merge.start()
        try:
            appends()
        finally:
            if merge is not None:
                merge.join()
        if self._merge_error is not None:
            err, self._merge_error = self._merge_error, None
            raise err
        self.first = False

    _merge_error: BaseException | None = None

    def _appends(self, parsed: Any, b: int, good: int, bad: int) -> None:
        t0 = time.monotonic()
        want = self.cfg.outputs
        if good and "archive" in want and not self._done(self.archive, b):
            sinks.append(archive_rows(parsed), self.archive, app_id=self.app_id, version=b, partition_by=["date"])
            self.counters["archived"] += good
        if bad and "deadletter" in want and not self._done(self.deadletter, b):
            if bad <= self.cfg.small_batch_rows:
                # Few bad rows (the batch's counts say how many): to the driver as Arrow and one delta-rs commit
                # with the same transaction identifiers, as a small batch writes them. Spark's Delta append cost
                # about 1 CPU-s per batch whatever it wrote (its job over the cache, the log's replay, the
                # commit): 4.9 against 0.7 CPU-s per million events, 200,000-event batches of 50 bad rows
                # (kctl.bench.batch). Spark's append skips a version its table has seen; delta-rs's does not, so
                # the table's transaction version is asked for every such batch (not the first one only).
                done = sinks.last_txn_version(self.deadletter, self.app_id, self.options)
                if done is None or done < b:
                    sinks.append_arrow(deadletter_rows(parsed).toArrow(), self.deadletter, app_id=self.app_id,
                                       version=b, storage_options=self.options)
            else:
                sinks.append(deadletter_rows(parsed), self.deadletter, app_id=self.app_id, version=b)
            self.counters["deadletter"] += bad
        self.timings["appends"] = time.monotonic() - t0

    def _merge(self, good_rows: list[tuple[int, str, int, int, int]], b: int) -> None:
        t0 = time.monotonic()
        try:
            self.metrics_table.merge_counts(good_rows, app_id=self.app_id, version=b)
        except BaseException as exc:  # noqa: BLE001 - re-raised by _write in the batch's thread
            self._merge_error = exc
        self.timings["merge"] = time.monotonic() - t0


REQUEST = "optimize.request"
RESULT = "optimize.json"


def _take_request(sd: Path) -> bool:
    """A pending `kctl stream optimize` request for the running job (taken once)."""
    try:
        (sd / REQUEST).unlink()
    except FileNotFoundError:
        return False
    return True


def optimize_tables(spark: Any, cfg: JobConfig, sd: Path) -> dict[str, Any]:
    """Compact the three tables' small files and VACUUM files unreferenced for ``cfg.vacuum_retain_hours``.

    Runs between micro-batches in the job itself, so it never races the writer.
    """
    from delta.tables import DeltaTable

    t0 = time.monotonic()
    res: dict[str, Any] = {"retain_hours": cfg.vacuum_retain_hours, "tables": {}}
    for name in ("archive", "deadletter", "metrics"):
        path = cfg.table(name)
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        t = DeltaTable.forPath(spark, path)
        m = t.optimize().executeCompaction().collect()[0]["metrics"]
        t.vacuum(cfg.vacuum_retain_hours)
        res["tables"][name] = {"files_removed": int(m["numFilesRemoved"]), "files_added": int(m["numFilesAdded"])}
    res["seconds"] = round(time.monotonic() - t0, 2)
    res["at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    _write_json(sd / RESULT, res)
    return res


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


JVM_GC = "-XX:+UseParallelGC"


MAX_OPEN_WRITERS = 4


def build_session(cfg: JobConfig, app_name: str = "kctl-stream") -> Any:
    from pyspark.sql import SparkSession

    # Bind a driver on this host to loopback: kctl talks only to 127.0.0.1 (a driver in its container listens on
    # the cluster network, cfg.driver_host).
    if not cfg.driver_host:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    b = (
        SparkSession.builder.appName(app_name).master(cfg.master)
        .config("spark.driver.host", cfg.driver_host or "127.0.0.1")
        # in its container, the driver listens on the cluster network (its executors connect to it there); on
        # engine hosts, on the one address of this machine the hosts reach (cfg.driver_bind)
        .config("spark.driver.bindAddress", cfg.driver_bind or ("0.0.0.0" if cfg.driver_host else "127.0.0.1"))
        .config("spark.driver.memory", cfg.driver_memory)
        .config("spark.executor.memory", cfg.executor_memory)
        .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "true" if cfg.ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # Delta rebuilds a table's state from its log with this many tasks (50 by default): the tables here
        # have a log of small commits, and 50 tasks per batch on two cores cost more than the work.
        .config("spark.databricks.delta.snapshotPartitions", str(max(1, cfg.shuffle_partitions)))
        # Adaptive execution runs each shuffle stage as a Spark job of its own and re-plans between them: on a
        # micro-batch's small shuffles that doubled the jobs of a batch (16 -> 8 for a 200-row batch, counted
        # in Spark's UI), each with its own scheduling cost, for no better plan.
        .config("spark.sql.adaptive.enabled", "false")
        # A malformed envelope parses to no fields at all rather than to the fields before the error, so it is
        # always "invalid JSON" (parse() relies on it).
        .config("spark.sql.json.enablePartialResults", "false")
        # A batch's parsed rows are cached for three readers (counts, archive, dead-letter) and dropped after it:
        # compressing them cost more CPU than it saved (100,000-row batch: 3.16 s -> 2.64 s uncompressed).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        # The archive is partitioned by date: Spark sorts every row of a task by its partition before writing, unless
        # it may keep a writer open per partition; a micro-batch holds one date, two around midnight, so up to
        # MAX_OPEN_WRITERS dates per task are written without the sort (more: the rest sorted, as before).
        .config("spark.sql.maxConcurrentOutputFileWriters", str(MAX_OPEN_WRITERS))
        # VACUUM (the job's optimize) lists a table's directories in a Spark job of this many tasks per level of the
        # tree (10,000 by default): on a few cores that took minutes of CPU for a table of a few files, every time.
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", str(max(2, cfg.shuffle_partitions)))
    )
    if cfg.master.startswith("spark://"):
        b = b.config("spark.cores.max", str(cfg.cores_max)).config("spark.executor.cores", "1")
        if cfg.container:  # executors on the Spark cluster's workers: the same mounted Python packages
            b = b.config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    if cfg.jars:

        # Spark reads the jars for as long as the session lives: their cache entries (kctl.cache) are held for
        # reading until this process ends, so another kctl's refill of one waits instead of swapping it out.
        cache.hold_for_process(cfg.jars)
        b = b.config("spark.jars", ",".join(cfg.jars))
    if cfg.packages:
        b = b.config("spark.jars.packages", ",".join(cfg.packages))
    # The parallel collector instead of G1 in the driver's and the executors' JVMs: 10-25% less CPU per event at
    # steady state (python -m kctl.bench.cost, three runs: 52.4 against 57.7, 59.7 against 66.6, 48.5 against
    # 64.3 CPU-s per million; two runs of three rounds: medians 50.4 against 54.0, 48.0 against 58.5); a --conf that
    # sets the JVM's options replaces it (two collectors refuse to start).
    for k in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        if k not in cfg.extra_conf:
            b = b.config(k, JVM_GC)
    for k, v in cfg.extra_conf.items():
        b = b.config(k, v)
    store = cfg.s3_settings()
    creds = s3.read_credentials(str(store.credentials_file), profile=store.profile) if store else None
    if store is not None:
        for k, v in s3.hadoop_conf(store, creds).items():  # no secret: these go on spark-submit's command line
            b = b.config(k, v)
    spark = b.getOrCreate()
    if creds is not None:
        # The keys go to the JVM's hadoop configuration from here, over py4j: never on a command line or in the
        # environment (`ps` of the driver shows none; docs/pipeline.md).
        hconf = spark.sparkContext._jsc.hadoopConfiguration()
        for k, v in s3.hadoop_secrets(creds).items():
            hconf.set(k, v)
    spark.sparkContext.setLogLevel(os.environ.get("KCTL_SPARK_LOG_LEVEL", "WARN"))
    return spark


FETCH_MAX_WAIT_MS = 10


def read_kafka(spark: Any, cfg: JobConfig) -> Any:
    r = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
        .option("subscribe", ",".join(cfg.topics))
        .option("startingOffsets", cfg.starting_offsets)
        .option("failOnDataLoss", "true" if cfg.fail_on_data_loss else "false")
        # The executors' consumers fetch a micro-batch's offsets and stop there, at the end of the log: with the
        # broker's default wait for more data (500 ms) a batch of a few events spent about 0.5 s in its one
        # Spark job waiting on that fetch (a 5-event batch: 590 ms in the writer's job, 100 ms with 10 ms).
        # A batch that reads more than one fetch's worth is not slowed (the broker answers at once then).
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
    )
    if cfg.max_offsets_per_trigger:
        r = r.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for k, v in cfg.kafka_security().items():  # a secured cluster: security.protocol, sasl.*, the truststore
        r = r.option(f"kafka.{k}", v)
    if cfg.kafka_login:
        # the job's own user may read its own groups only: Spark's consumers take theirs under the job's group
        r = r.option("groupIdPrefix", login.spark_group_prefix(cfg.name))
    return r.load()


def _check_owner(cfg: JobConfig, files: s3.Files) -> None:
    """Refuse an --out already filled from another checkpoint: batch ids would collide."""
    text = files.read_text(cfg.table("_kctl_owner.json"))
    if text is not None:
        want = json.loads(text)["query_id"]
        have = query_id(cfg.checkpoint, files)
        if have != want:
            raise SystemExit(
                f"kctl: {cfg.out} holds the output of checkpoint query {want}, but {cfg.checkpoint} is "
                f"{'new' if have is None else have}; use a fresh --out, or the original --checkpoint")


def kafka_schema() -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

    return StructType([
        StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
        StructField("partition", IntegerType()), StructField("offset", LongType()),
        StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
    ])


def create_tables(spark: Any, out: str | Path, storage_options: dict[str, str] | None = None) -> None:
    """The three Delta tables, empty, with the columns the parser gives (readers find them from the start); an
    s3a:// ``out`` with delta-rs's ``storage_options``."""
    empty = parse(spark.createDataFrame([], kafka_schema()))
    # statistics on event_time (archive) and topic, partition, offset, kafka_timestamp (dead-letter)
    sinks.create_table(spark, s3.join(str(out), "archive"), archive_rows(empty).schema, ["date"], stats_columns=1)
    sinks.create_table(spark, s3.join(str(out), "deadletter"), deadletter_rows(empty).schema, stats_columns=4)
    sinks.create_metrics_table(s3.join(str(out), "metrics"), storage_options)


def warm_up(spark: Any, cfg: JobConfig) -> tuple[float, dict[str, int]]:
    """Run the writer once on 20 access-log records and a malformed one, into a throwaway directory, before the
    query starts: the first micro-batch with data then finds the code paths compiled (Spark's generated code,
    the JIT, Delta's and delta-rs's first calls) instead of paying for them while data waits.
    Seconds, and the writer's counters (20 archived and 1 dead-letter per batch: two batches, one of each way of
    writing, unless ``small_batch_rows`` is 0)."""
    import tempfile

    t0 = time.monotonic()
    # On a Spark cluster the executors write the tables: a directory they see too (beside the checkpoint's).
    where = str(cfg.state()) if cfg.container else None
    with tempfile.TemporaryDirectory(prefix="kctl-warm-up-", dir=where) as tmp:
        out = Path(tmp) / "out"
        w_cfg = JobConfig(**{**cfg.__dict__, "out": str(out), "checkpoint": str(Path(tmp) / "cp"), "optimize_every": 0})
        create_tables(spark, out)
        when = dt.datetime(2000, 1, 1)
        recs: list[tuple[Any, ...]] = []
        for i in range(20):
            line = (f'10.0.0.{i} - - [01/Jan/2000:00:{i // 10:02d}:{i:02d} +0000] "GET /warm-up/{i} HTTP/1.1" '
                    f'{(200, 304, 404, 500)[i % 4]} {100 + i} "-" "kctl-warm-up" "-"')
            envelope = {"@timestamp": "2000-01-01T00:00:00.000Z", "message": line, "host": {"name": f"warm-up-{i % 2}"},
                        "log": {"offset": 100 * i, "file": {"path": "/var/log/nginx/access.log"}}}
            recs.append((f"warm-up-{i % 2}".encode(), json.dumps(envelope).encode(), "warm-up", 0, i, when, 0))
        recs.append((None, b"not an access log", "warm-up", 0, len(recs), when, 0))
        counters = new_counters()
        writer = BatchWriter(w_cfg, counters, "warm-up")
        # both ways of writing a batch: through Spark's Delta appends, and a small one through delta-rs
        writer(spark.createDataFrame(recs, kafka_schema()), 0)
        if cfg.small_batch_rows:
            writer(spark.createDataFrame(recs, kafka_schema()), 1, records=len(recs))
    return time.monotonic() - t0, counters


def records_waiting(cfg: JobConfig, files: s3.Files) -> int | None:
    """Records in the job's topics past its checkpoint now (from its start offsets for a new checkpoint); None when
    not known (Kafka or the checkpoint not answering, start offsets given per partition)."""
    try:
        committed = committed_offsets(cfg.checkpoint, files)[1]
        if not committed and cfg.starting_offsets != "earliest":
            return 0 if cfg.starting_offsets == "latest" else None
        latest = latest_offsets(cfg.target(cfg.bootstrap_servers), cfg.topics)
    except Exception:  # noqa: BLE001 - only a shortcut depends on it: the warm-up then runs
        return None
    waiting = 0
    for t, parts in latest.items():
        for p, (lo, hi) in parts.items():
            done = committed.get(t, {}).get(p)
            waiting += max(0, hi - (lo if done is None else max(done, lo)))
    return waiting


def query_id(checkpoint: str | Path, files: s3.Files | None = None) -> str | None:
    """The streaming query's id, from the checkpoint (Spark writes it before the first batch); ``files`` reads a
    checkpoint on S3."""
    try:
        text = (files or s3.Files()).read_text(s3.join(str(checkpoint), "metadata"))
        return str(json.loads((text or "").splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def group_name(cfg: JobConfig) -> str:
    return login.group(cfg.name)


def end_offsets(progress: dict[str, Any]) -> dict[str, dict[int, int]]:
    """{topic: {partition: next offset}} of a StreamingQueryProgress's Kafka sources."""
    out: dict[str, dict[int, int]] = {}
    for src in progress.get("sources") or []:
        end = src.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, dict):
            for topic, parts in end.items():
                if isinstance(parts, dict):
                    out.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    return out


class OffsetPublisher:
    """Commits each committed batch's end offsets to the job's consumer group (never consumes).

    The checkpoint stays the source of truth: a failed commit is logged and retried with the next batch.
    """

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.last: dict[str, dict[int, int]] = {}
        self._committer: Any = None

    def publish(self, offsets: dict[str, dict[int, int]]) -> None:
        if not offsets or offsets == self.last:
            return
        try:
            if self._committer is None:
                self._committer = groups.GroupCommitter(
                    self.cfg.target(self.cfg.bootstrap_servers), group_name(self.cfg))
            self._committer.commit(offsets)
            self.last = offsets
        except Exception as exc:  # noqa: BLE001 - lag reporting must never stop the pipeline
            print(f"kctl: warning: cannot commit offsets to group {group_name(self.cfg)}: {exc}", file=sys.stderr)

    def close(self) -> None:
        if self._committer is not None:
            self._committer.close()


class _Listener:
    """Writes the last query progress (read by `kctl stream status`) and a bounded history of them, and
    publishes the committed offsets to the job's consumer group.

    Spark's listener interface is spoken over py4j as PySpark's own StreamingQueryListener speaks it (the same
    wrapper class, the same callback server), but each progress is taken as its JSON in one call. PySpark's
    listener converts every event into Python objects first, field by field: about forty calls into the JVM,
    each looking its name up among the jars, 77 ms per event against 1.5 ms this way (median of 25 events each,
    local[2]): time of the listener thread for every micro-batch, beside the batches on the same cores."""

    def __init__(self, path: Path, history: ProgressHistory, watermark: dict[str, str],
                 offsets: OffsetPublisher) -> None:
        self.path, self.history, self.watermark, self.offsets = path, history, watermark, offsets

    def add_to(self, spark: Any) -> None:
        from pyspark import SparkContext
        from pyspark.java_gateway import ensure_callback_server_started

        gw = SparkContext._gateway
        if gw is None:
            raise RuntimeError("no Spark session in this process to listen to")
        ensure_callback_server_started(gw)
        spark._jsparkSession.streams().addListener(
            gw.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(self))

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 - Spark's interface
        pass

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        prog = json.loads(jevent.progress().json())
        self.watermark["value"] = (prog.get("eventTime") or {}).get("watermark", "")
        _write_json(self.path, prog)
        self.history.append(prog)
        # A progress event follows the batch's commit to the checkpoint: its end offsets are done.
        self.offsets.publish(end_offsets(prog))

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def run(cfg: JobConfig, spark: Any = None) -> int:
    """The job until it stops, finishes or fails; its exit code. ``spark``: a session a warm driver built and
    warmed before the job came (kctl.stream.warm), else one is built here."""
    sd = cfg.state()
    sd.mkdir(parents=True, exist_ok=True)
    (sd / "stop").unlink(missing_ok=True)
    files = cfg.files()
    _check_owner(cfg, files)
    status: dict[str, Any] = {"pid": os.getpid(), "state": "starting", "config": json.loads(cfg.to_json()),
                              "started_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    _write_json(sd / "job.json", status)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    warm = spark is not None
    spark = spark if warm else build_session(cfg)
    create_tables(spark, cfg.out, cfg.storage_options())
    # The warm-up pays the writer's first-call costs before data arrives; with records already waiting the first
    # batch pays them itself, and the warm-up would only come before it (docs/pipeline.md, docs/benchmarks.md).
    # A warm driver ran it before the job came.
    waiting = None if warm else records_waiting(cfg, files)
    if warm:
        status.update(warm_up_s=0.0, warm_up="done by the warm driver before the job came")
    elif waiting:
        status.update(warm_up_s=0.0, warm_up=f"skipped: {waiting} records waiting")
    else:
        status["warm_up_s"] = round(warm_up(spark, cfg)[0], 2)
    watermark: dict[str, str] = {}
    history = ProgressHistory(sd / HISTORY, keep=cfg.progress_history)
    offsets = OffsetPublisher(cfg)
    offsets.publish(committed_offsets(cfg.checkpoint, files)[1])  # what an earlier run committed
    _Listener(sd / "progress.json", history, watermark, offsets).add_to(spark)
    counters = new_counters()
    # The watermark tracks event-time progress (shown by `kctl stream status`) on the Kafka record time (when
    # filebeat shipped the line: seconds after the request), which costs no parsing per row; it drops nothing:
    # foreachBatch merges every row into its window, so totals stay exact (see docs/pipeline.md).
    events = read_kafka(spark, cfg).withWatermark("timestamp", cfg.watermark)
    # The parse is part of the stream's plan, built once here: Spark plans it again for each micro-batch (its
    # queryPlanning, tens of milliseconds), where building it from Python for each batch took about 0.2 s.
    writer = BatchWriter(cfg, counters, query_id(cfg.checkpoint, files) or "", parsed=True)
    w = parse(events).writeStream.foreachBatch(writer).option("checkpointLocation", cfg.checkpoint)
    w = w.trigger(availableNow=True) if cfg.available_now else w.trigger(processingTime=cfg.trigger)
    q = w.queryName("kctl-stream").start()
    owner = cfg.table("_kctl_owner.json")
    if files.read_text(owner) is None:
        files.write_text(owner, json.dumps({"query_id": str(q.id), "checkpoint": cfg.checkpoint}, indent=2))
    status.update(state="running", query_id=str(q.id), run_id=str(q.runId), group=group_name(cfg))
    _write_json(sd / "job.json", status)

    rc = 0
    try:
        while q.isActive:
            try:
                q.awaitTermination(0.5)
            except Exception:  # noqa: BLE001 - the query failed (StreamingQueryException): q.exception() says why
                break
            if stop.is_set() or (sd / "stop").exists():
                _graceful_stop(q)
                status["state"] = "stopped"
                break
        exc = q.exception()
        if exc is not None:
            status.update(state="failed", error=failure(cfg, exc))
            rc = 1
        elif status["state"] != "stopped":
            status["state"] = "finished"
    finally:
        status.update(ended_at=dt.datetime.now(dt.timezone.utc).isoformat(), counters=counters,
                      last_progress=q.lastProgress)
        _write_json(sd / "job.json", status)
        (sd / "stop").unlink(missing_ok=True)
        # The listener bus may not deliver the last progress before the session stops: publish what the
        # checkpoint holds as committed now.
        try:
            offsets.publish(committed_offsets(cfg.checkpoint, files)[1])
        except KctlError as e:  # a checkpoint on a store that does not answer: the next run publishes them
            print(f"kctl: warning: {e.message}", file=sys.stderr)
        offsets.close()
        spark.stop()
    return rc


def failure(cfg: JobConfig, exc: Any) -> str:
    """The one line job.json records for a failed query (no key of the store in it): for tables or a checkpoint on
    S3, a store that does not answer now is named as the cause, with what to do."""
    first = str(exc).splitlines()[0][:2000] if str(exc) else type(exc).__name__
    store = cfg.s3_settings()
    if store is None:
        return first
    files = cfg.files()
    first = s3.scrub(first, files.credentials)
    for url in (cfg.out, cfg.checkpoint):
        if s3.is_s3(url) and files.credentials is not None:
            try:
                s3.check_store(store, files.credentials, s3.parse_url(url))
            except KctlError as e:
                then = ("Docker starts its driver again, and it resumes from the checkpoint once the store answers"
                        if cfg.container else
                        "submit it again with the same --checkpoint and --out once the store answers")
                return f"{e.message}; the job stopped ({first[:300]}). Nothing is lost: {then}"
    return first


def _graceful_stop(q: Any, timeout_s: float = 120.0) -> None:
    """Let the running micro-batch finish, then stop (a cut batch would be replayed anyway)."""
    def between_batches() -> tuple[bool, str]:
        busy = q.isActive and q.status.get("isTriggerActive")
        return not busy, "a micro-batch running" if busy else "between micro-batches"

    try:
        wait_until("the running micro-batch to finish", between_batches, timeout_s, poll=0.2)
    except TimeoutReached:
        pass  # stop it anyway: the cut batch is not committed, so the next run replays it and loses nothing
    q.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.stream.job")
    ap.add_argument("--config", required=True, help="JobConfig JSON written by `kctl stream submit`")
    args = ap.parse_args(argv)
    return run_config(JobConfig.from_json(Path(args.config).read_text(encoding="utf-8")))


def run_config(cfg: JobConfig, spark: Any = None) -> int:
    """:func:`run`, a KctlError said in one line on stderr (exit code 1)."""
    try:
        return run(cfg, spark)
    except KctlError as e:  # e.g. the S3 store stopped answering before the query started: one line, no traceback
        print(f"kctl: {e.message}" + (f" ({e.hint})" if e.hint else ""), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
