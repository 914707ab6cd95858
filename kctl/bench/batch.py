"""A large micro-batch's steps, each one's CPU: what the stream job does with a batch above ``small_batch_rows``.

    python -m kctl.bench.batch [--events 200000] [--bad 50] [--rounds 7] [--no-write]

No Kafka: ``--events`` generated filebeat events with ``--bad`` malformed records among them, as Kafka's records
(kctl.stream.job.kafka_schema), cached in a Spark session built as the job builds it (local[2], its settings and
jars). Then ``--rounds`` times the job's steps on them, as kctl.stream.job.BatchWriter runs them, into tables
made as the job makes them:

1. **parse, cache and count**: the parse into the cache and the one Spark job that counts the batch
   (kctl.stream.job.to_cache, batch_counts);
2. **archive**: the good rows through Spark's Delta append;
3. **dead-letter, two ways, each into a table of its own**: Spark's Delta append (as every batch above
   ``small_batch_rows`` wrote them before), and the bad rows to the driver as Arrow with one delta-rs commit (as
   the job writes them now when they are at most ``small_batch_rows``).

The floor, measured in the same run: a scan of the cached records (their values as strings, counted). CPU is
the JVM's user + system time (/proc/<pid>/stat) around each step, and this Python process's (delta-rs writes
here) for the delta-rs way; the first two rounds warm the JIT and are left out of the medians.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kctl.agent.nginx import generate, malformed_records
from kctl.bench.doc import add_output_args, publish, table

WARM_ROUNDS = 2


def _python_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return float(r.ru_utime + r.ru_stime)


def measure(events: int, bad: int, rounds: int) -> dict[str, Any]:
    from kctl.stream import job, sinks
    from kctl.stream.config import JobConfig
    from kctl.stream.jars import jars_for_job

    cfg = JobConfig(bootstrap_servers="", topics=["t"], out="", checkpoint="", master="local[2]",
                    jars=jars_for_job(None))
    spark = job.build_session(cfg)
    spark.sparkContext.setLogLevel("ERROR")
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    tick = os.sysconf("SC_CLK_TCK")

    def jvm_cpu() -> float:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    evs = generate(events, seed=5, hosts=4, start=start, rate=100.0)
    recs = list(malformed_records(((e.key, e.value) for e in evs), bad, seed=5))
    rows = [(k.encode() if isinstance(k, str) else k, v.encode() if isinstance(v, str) else v, "t", i % 2, i,
             start, 0) for i, (k, v) in enumerate(recs)]
    src = spark.createDataFrame(rows, job.kafka_schema()).repartition(2).cache()
    src.count()
    del rows, recs
    out = Path(tempfile.mkdtemp(prefix="kctl-bench-batch-"))
    per: dict[str, list[float]] = {k: [] for k in ("floor", "counts", "archive", "dl_spark", "dl_rs_jvm", "dl_rs_py")}
    try:
        job.create_tables(spark, str(out / "spark"))
        job.create_tables(spark, str(out / "rs"))

        def timed(step: Callable[[], Any]) -> tuple[float, float]:
            j0, p0 = jvm_cpu(), _python_cpu()
            step()
            return jvm_cpu() - j0, _python_cpu() - p0

        from pyspark.sql import functions as F

        def one_round(b: int, cached: Any) -> None:
            per["counts"].append(timed(lambda: job.batch_counts(cached))[0])
            per["archive"].append(timed(lambda: sinks.append(
                job.archive_rows(cached), str(out / "spark" / "archive"), app_id="bench", version=b,
                partition_by=["date"]))[0])
            per["dl_spark"].append(timed(lambda: sinks.append(
                job.deadletter_rows(cached), str(out / "spark" / "deadletter"), app_id="bench", version=b))[0])
            jvm, py = timed(lambda: sinks.append_arrow(
                job.deadletter_rows(cached).toArrow(), str(out / "rs" / "deadletter"), app_id="bench", version=b))
            per["dl_rs_jvm"].append(jvm)
            per["dl_rs_py"].append(py)

        for b in range(rounds):
            per["floor"].append(timed(lambda: src.select(F.col("value").cast("string")).count())[0])
            cached = job.to_cache(job.parse(src)).persist()
            try:
                one_round(b, cached)
            finally:
                cached.unpersist()
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
    med = {k: statistics.median(v[WARM_ROUNDS:]) * 1e6 / events for k, v in per.items()}
    return {"events": events, "bad": bad, "rounds": rounds, "per_m": med,
            "each": {k: [round(x * 1e6 / events, 1) for x in v[WARM_ROUNDS:]] for k, v in per.items()}}


def render(fig: dict[str, Any]) -> str:
    m, each = fig["per_m"], fig["each"]
    rs = m["dl_rs_jvm"] + m["dl_rs_py"]

    def cell(key: str) -> str:
        return f"{m[key]:.1f} CPU-s per million (rounds: {', '.join(map(str, each[key]))})"

    rows = [
        ("the floor: the cached records scanned, their values as strings", cell("floor")),
        ("parse into the cache and count the batch (one Spark job)", cell("counts")),
        ("archive: the good rows, Spark's Delta append", cell("archive")),
        (f"dead-letter ({fig['bad']} rows), Spark's Delta append", cell("dl_spark")),
        (f"dead-letter ({fig['bad']} rows), to the driver as Arrow + one delta-rs commit (as shipped)",
         f"**{rs:.1f} CPU-s per million** (the JVM {m['dl_rs_jvm']:.1f}, Python {m['dl_rs_py']:.1f};"
         f" {m['dl_spark'] / rs if rs else 0:.1f}x less than Spark's append)"),
    ]
    return "\n".join([
        "## Pipeline: a large batch's steps",
        "",
        f"Measured by `python -m kctl.bench.batch` on {dt.date.today().isoformat()} ({platform.machine()},"
        f" {os.cpu_count()} cores): {fig['events']:,} generated events with {fig['bad']} malformed records, cached as"
        " Kafka's records in a session built as the job builds it (local[2]); each step as the job runs it on a"
        f" batch above `small_batch_rows`, {fig['rounds']} rounds, the first {WARM_ROUNDS} left out, medians. CPU"
        " per million events of the batch: the JVM's from /proc, and this process's where delta-rs writes.",
        "",
        *table(("step", "CPU"), rows),
        "",
        "A batch's few bad rows cost Spark's Delta append about as much whatever it writes (its job over the cache,"
        " the table's log replayed, the commit): the job sends them to delta-rs when they are at most"
        " `small_batch_rows` (docs/pipeline.md).",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.batch", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000, help="events in the batch (the job's default cap)")
    ap.add_argument("--bad", type=int, default=50, help="malformed records among them")
    ap.add_argument("--rounds", type=int, default=7, help=f"rounds of the steps (the first {WARM_ROUNDS} warm up)")
    add_output_args(ap)
    args = ap.parse_args(argv)
    if args.rounds <= WARM_ROUNDS:
        ap.error(f"--rounds must be above {WARM_ROUNDS}")
    publish(render(measure(args.events, args.bad, args.rounds)), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
