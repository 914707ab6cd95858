"""Pipeline benchmark: the job against a bare consumer (the floor), per-output throughput, latency, batch cost.

    python -m kctl.bench.stream --bootstrap-servers 127.0.0.1:19092 [--events 200000] [--no-write]

1. Produces ``--events`` generated events to a fresh 3-partition topic.
2. Floor: a confluent-kafka consumer that only reads and JSON-decodes them all.
3. The job over the same topic with ``--available-now`` and ``maxOffsetsPerTrigger``, so that it runs
   several micro-batches; throughput = rows / trigger time summed over the StreamingQueryProgress
   events, the first batch (JIT warm-up) reported on its own. Then the same with the archive alone and
   with the metrics alone (which output costs what).
4. A sweep of ``maxOffsetsPerTrigger`` over a smaller topic (the choice of the default).
5. Latency: the job detached at each ``--latency-trigger`` on a fresh topic; events are produced at
   ``--latency-rate`` for ``--latency-seconds``; an event is visible once the metrics table's last
   transaction (its batch id, read with delta-rs) is a batch whose end offset lies past it.
6. Per-batch cost of the writer (parse, archive, dead-letter, metrics MERGE) on identical batches
   when the metrics table holds 10 vs 10,000 earlier windows, in one Spark session, interleaved;
   and the same batch at 1, 2 and 4 shuffle partitions.
Then prints the figures and rewrites the "## Pipeline" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kctl.agent.nginx import generate
from kctl.agent.produce import produce, producer
from kctl.bench.doc import add_output_args, publish, table
from kctl.kafka.client import Target, wait_for_topic
from kctl.stream.config import JobConfig
from kctl.stream.jars import delta_version, jars_for_job
from kctl.stream.job import BatchWriter, build_session, create_tables, kafka_schema, new_counters, parse, query_id
from kctl.stream.progress import job_progress
from kctl.stream.sinks import METRICS_PARTITION, metrics_arrow_schema
from kctl.stream.state import stop
from kctl.stream.submit import submit
from kctl.wait import ticks


def _topic(bootstrap: str, partitions: int = 3) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    name = f"kctl-bench-{uuid.uuid4().hex[:8]}"
    a = AdminClient({"bootstrap.servers": bootstrap})
    rf = min(3, len(a.list_topics(timeout=10).brokers))
    for f in a.create_topics([NewTopic(name, partitions, rf)]).values():
        f.result(timeout=30)
    wait_for_topic(a, name, partitions, timeout=30)
    return name


def _drop(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    for f in AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic]).values():
        try:
            f.result(timeout=30)
        except Exception:  # noqa: BLE001 - best-effort cleanup
            pass


def floor(bootstrap: str, topic: str, n: int, max_seconds: float = 300) -> float:
    """Events/s of a consumer that only reads and JSON-decodes ``n`` events."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kctl-bench-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    t0: float | None = None
    deadline = time.monotonic() + max_seconds
    try:
        while got < n and time.monotonic() < deadline:
            batch = c.consume(1000, timeout=1.0)
            if batch and t0 is None:
                t0 = time.monotonic()
            for m in batch:
                if m.error() is None:
                    json.loads(m.value() or b"null")
                    got += 1
        secs = time.monotonic() - (t0 or time.monotonic())
    finally:
        c.close()
    if got < n:
        raise RuntimeError(f"floor consumer read only {got}/{n} events")
    return got / secs


def spark_read(cfg: JobConfig, events: int, reps: int = 3) -> dict[str, float]:
    """Events/s of Spark's Kafka source alone (a batch read of the topic, nothing parsed or written), and of the
    read + the job's parse (every column evaluated, nothing cached or written); best of ``reps`` after a first
    round that warms the JVM up: what Spark costs before the job writes anything."""
    spark = build_session(cfg, app_name="kctl-bench-kafka-read")
    try:
        best = {"read": 0.0, "parse": 0.0}
        for rep in range(reps + 1):
            for what in best:
                df = (spark.read.format("kafka").option("kafka.bootstrap.servers", cfg.bootstrap_servers)
                      .option("subscribe", ",".join(cfg.topics)).option("startingOffsets", "earliest").load())
                if rep == 0 and what == "read" and df.count() != events:
                    raise RuntimeError(f"Spark did not read the {events} events of the topic")
                t0 = time.monotonic()
                (parse(df) if what == "parse" else df).write.format("noop").mode("overwrite").save()
                if rep:
                    best[what] = max(best[what], events / (time.monotonic() - t0))
        return best
    finally:
        spark.stop()


def job_throughput(cfg: JobConfig, events: int) -> dict[str, Any]:
    """Rows / trigger time over the run's micro-batches; ``cfg`` must keep a progress event per batch."""
    submit(cfg)
    progs = [p for p in job_progress(cfg.checkpoint) if p.get("numInputRows")]
    if sum(int(p["numInputRows"]) for p in progs) != events:
        raise RuntimeError(f"the job's progress history does not cover the {events} events of the run "
                           f"(kept {cfg.progress_history} progress events)")
    steady = progs[1:] or progs
    rows = sum(int(p["numInputRows"]) for p in steady)
    ms = sum(int(p["durationMs"]["triggerExecution"]) for p in steady)
    return {"rows": rows, "batches": len(steady), "events_per_s": rows / (ms / 1000.0),
            "first_batch_s": int(progs[0]["durationMs"]["triggerExecution"]) / 1000.0,
            "first_batch_rows": int(progs[0]["numInputRows"]),
            "batch_s": statistics.median(int(p["durationMs"]["triggerExecution"]) for p in steady) / 1000.0}


def _variant(base: JobConfig, tag: str, **changes: Any) -> JobConfig:
    root = Path(base.out).parent
    return JobConfig(**{**base.__dict__, "out": str(root / f"{tag}-out"), "checkpoint": str(root / f"{tag}-cp"),
                        **changes})


def latency(bootstrap: str, base: JobConfig, rate: float, seconds: float, trigger: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    topic = _topic(bootstrap)
    cfg = _variant(base, f"lat-{trigger.replace(' ', '')}", topics=[topic], trigger=trigger,
                   max_offsets_per_trigger=None)
    submit(cfg, detach=True)
    metrics = Path(cfg.out) / "metrics"
    no_linger: dict[str, Any] = {"linger.ms": 0}
    p = producer(Target.of(None, bootstrap), **no_linger)
    sent: dict[int, float] = {}
    delivered: dict[tuple[int, int], float] = {}
    seen: list[tuple[float, dict[int, int]]] = []
    state: dict[str, Any] = {"qid": None, "batch": None, "table": None}

    def poll() -> None:
        """Record the moment the metrics table's last batch changes, with that batch's end offsets."""
        if state["qid"] is None:
            state["qid"] = query_id(cfg.checkpoint)
            if state["qid"] is None:
                return
        try:
            if state["table"] is None:
                state["table"] = DeltaTable(str(metrics))
            else:
                state["table"].update_incremental()
            b = state["table"].transaction_version(state["qid"])
        except Exception:  # noqa: BLE001 - the table is not there yet
            return
        if b is None or b == state["batch"]:
            return
        state["batch"] = b
        now = time.time()
        line = (Path(cfg.checkpoint) / "offsets" / str(b)).read_text().splitlines()[2]
        seen.append((now, {int(pa): int(o) for pa, o in json.loads(line)[topic].items()}))

    def cb(err: Any, msg: Any) -> None:
        if err is None:
            delivered[(msg.partition(), msg.offset())] = sent[int(msg.key().split(b"#")[1])]

    # Warm-up, not measured: the first micro-batches with data pay for JIT compilation and Spark's first jobs.
    warm_ends: dict[int, int] = {}

    def warm_cb(err: Any, msg: Any) -> None:
        if err is None:
            warm_ends[msg.partition()] = max(warm_ends.get(msg.partition(), -1), msg.offset())

    for e in generate(int(rate * 3), seed=98, hosts=4, rate=rate):
        p.produce(topic, key=f"{e.key}#-1".encode(), value=e.value.encode(), on_delivery=warm_cb)
    p.flush(30)
    for _ in ticks(0.05, until=time.monotonic() + 180):
        poll()
        if seen and all(seen[-1][1].get(pa, -1) > off for pa, off in warm_ends.items()):
            break
    events = generate(int(rate * seconds), seed=99, hosts=4, rate=rate)
    t0 = time.monotonic()
    next_poll = 0.0
    for i, e in enumerate(events):
        while time.monotonic() - t0 < i / rate:
            if time.monotonic() >= next_poll:
                poll()
                next_poll = time.monotonic() + 0.05
            p.poll(0.002)
        sent[i] = time.time()
        p.produce(topic, key=f"{e.key}#{i}".encode(), value=e.value.encode(), on_delivery=cb)
        p.poll(0)
    p.flush(30)
    for _ in ticks(0.05, until=time.monotonic() + 60):
        poll()
        if seen and all(seen[-1][1].get(pa, -1) > off for (pa, off) in delivered):
            break
    stop(cfg.checkpoint)
    _drop(bootstrap, topic)
    first = next((p for p in job_progress(cfg.checkpoint) if p.get("numInputRows")), None)
    lat: list[float] = []
    for (pa, off), t_sent in delivered.items():
        vis = next((t for t, offs in seen if offs.get(pa, -1) > off), None)
        if vis is not None:
            lat.append(vis - t_sent)
    if not lat:
        raise RuntimeError("no event became visible in the metrics table")
    lat.sort()
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return {"events": len(delivered), "measured": len(lat), "p50_s": q[49], "p99_s": q[98], "rate": rate,
            "trigger": trigger,
            "first_batch_s": int(first["durationMs"]["triggerExecution"]) / 1000.0 if first else None,
            "first_batch_rows": int(first["numInputRows"]) if first else None}


def batch_cost(tmp: Path, master: str, reps: int = 6, windows: tuple[int, ...] = (10, 10_000)) -> dict[str, Any]:
    """Median seconds of the writer on identical 2,000-event batches, per size of the metrics table's
    history, and per shuffle-partition count; one Spark session, interleaved."""
    import pyarrow as pa
    from deltalake import write_deltalake

    cfg0 = JobConfig("", ["t"], "", "", master=master, jars=jars_for_job(None))
    spark = build_session(cfg0, app_name="kctl-bench-batch-cost")
    try:
        start = dt.datetime(2024, 1, 10, tzinfo=dt.timezone.utc)
        writers: dict[Any, BatchWriter] = {}
        for n in windows:
            out = tmp / f"cost-{n}"
            create_tables(spark, out)
            ws = [start - dt.timedelta(minutes=n - i) for i in range(n)]
            hist = pa.Table.from_pydict({"window_start": ws, "window_end": [w + dt.timedelta(minutes=1) for w in ws],
                                         "host": ["h0"] * n, "status": [200] * n, "requests": [1] * n,
                                         "bytes": [100] * n}, schema=metrics_arrow_schema())
            write_deltalake(str(out / "metrics"), hist, mode="append", partition_by=[METRICS_PARTITION])
            writers[n] = BatchWriter(JobConfig("", ["t"], str(out), str(tmp / f"cost-cp-{n}")), _counters(), "bench")
        for sp in (1, 2, 4):
            out = tmp / f"cost-sp{sp}"
            create_tables(spark, out)
            writers[f"sp{sp}"] = BatchWriter(JobConfig("", ["t"], str(out), str(tmp / f"cost-cp-sp{sp}")),
                                             _counters(), "bench")
        times: dict[Any, list[float]] = {k: [] for k in writers}
        for rep in range(reps + 1):  # the first round warms the JVM up and is not counted
            t = start + dt.timedelta(minutes=5 * rep)
            recs = [(e.key.encode(), e.value.encode(), "t", i % 3, rep * 2000 + i, t, 0)
                    for i, e in enumerate(generate(2000, seed=rep, hosts=4, start=t, rate=20.0))]
            batch = spark.createDataFrame(recs, kafka_schema()).cache()
            batch.count()
            for key, w in writers.items():
                sp = int(key[2:]) if isinstance(key, str) else cfg0.shuffle_partitions
                spark.conf.set("spark.sql.shuffle.partitions", str(sp))
                spark.conf.set("spark.databricks.delta.snapshotPartitions", str(sp))
                t0 = time.monotonic()
                w(batch, rep)
                if rep:
                    times[key].append(time.monotonic() - t0)
            batch.unpersist()
        return {str(k): statistics.median(v) for k, v in times.items()}
    finally:
        spark.stop()


def _counters() -> dict[str, int]:
    return new_counters()


def render(fig: dict[str, Any]) -> str:
    j, a, m = fig["job"], fig["archive_only"], fig["metrics_only"]
    rows = [
        ("plain confluent-kafka consumer, read + `json.loads` (the floor)", f"{fig['floor']:,.0f} events/s"),
        (f"the job, all three tables, sustained ({j['batches']} micro-batches of ≤{fig['cap']:,}, first excluded;"
         f" median batch {j['batch_s']:.2f} s)", f"{j['events_per_s']:,.0f} events/s"),
        ("**ratio job / floor**", f"**{j['events_per_s'] / fig['floor']:.2f}**"),
        ("Spark's Kafka source alone: a batch read of the same topic, nothing parsed or written (best of 3)",
         f"{fig['spark_read']['read']:,.0f} events/s ({fig['spark_read']['read'] / fig['floor']:.2f} of the floor)"),
        ("the same read + the job's parse, every column evaluated, nothing cached or written (best of 3)",
         f"{fig['spark_read']['parse']:,.0f} events/s ({fig['spark_read']['parse'] / fig['floor']:.2f} of the floor)"),
        ("the job, archive table only", f"{a['events_per_s']:,.0f} events/s"),
        ("the job, metrics table only", f"{m['events_per_s']:,.0f} events/s"),
        (f"first batch of the throughput run ({j['first_batch_rows']:,} rows; JVM and Spark start excluded)",
         f"{j['first_batch_s']:.1f} s"),
    ]
    rows += [(f"first batch with data of a live stream (trigger {lat['trigger']}, {lat['first_batch_rows']:,} rows;"
              " JVM and Spark start excluded)", f"{lat['first_batch_s']:.1f} s")
             for lat in fig["latency"] if lat.get("first_batch_s") is not None]
    for cap, r in fig["sweep"]:
        rows.append((f"sweep, {fig['sweep_events']:,} events: maxOffsetsPerTrigger {cap:,}",
                     f"{r['events_per_s']:,.0f} events/s (median batch {r['batch_s']:.2f} s)"))
    for lat in fig["latency"]:
        rows.append((f"end-to-end latency, trigger {lat['trigger']}, {lat['rate']:.0f} events/s: p50 / p99"
                     f" ({lat['measured']} events)", f"{lat['p50_s']:.2f} s / {lat['p99_s']:.2f} s"))
    bc = fig["batch_cost"]
    rows += [
        ("one 2,000-event batch, metrics table holding 10 windows (median)", f"{bc['10']:.2f} s"),
        ("the same batch, metrics table holding 10,000 windows (median)", f"{bc['10000']:.2f} s"),
        ("**ratio 10,000 / 10 windows**", f"**{bc['10000'] / bc['10']:.2f}**"),
    ]
    rows += [(f"the same batch at {sp} shuffle partition{'s' if sp > 1 else ''}", f"{bc[f'sp{sp}']:.2f} s")
             for sp in (1, 2, 4)]
    body = "\n".join(table(("measure", "value"), rows))
    return f"""## Pipeline

Measured by `python -m kctl.bench.stream` on {fig['when']} ({fig['machine']}); Spark {fig['spark']} with
Delta Lake {fig['delta']} in `{fig['master']}`, driver {fig['driver_memory']}, {fig['shuffle']} shuffle
partitions, topic with 3 partitions, {fig['events']:,} generated filebeat events (~{fig['avg_bytes']} bytes
each). Load average during the run: {fig['load']} (other work shared the machine; figures are only comparable
within one run, and every pair below comes from this one).

{body}

The job's figure includes everything one micro-batch does: Kafka fetch, parsing (JSON envelope + nginx regex,
once, cached), the batch's aggregation collected to the driver (the MERGE source and the counters), the
archive and dead-letter Delta appends (Spark) and, beside them in a thread of its own, the metrics MERGE
(delta-rs, in the driver), each an atomic Delta commit. The floor does no parsing beyond `json.loads` and
writes nothing. Latency is measured from the producer's send to the moment the metrics table's last
transaction is a batch that covers the event (a warm-up batch first). The batch-cost rows run the job's own
writer on identical batches in one Spark session, interleaved; the metrics table's history is windows older
than the batch's, one partition each, as in a running stream; the MERGE reads and rewrites only the
partitions of the batch's windows (docs/pipeline.md).
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.stream")
    ap.add_argument("--bootstrap-servers", "-b", default=os.environ.get("KCTL_BOOTSTRAP_SERVERS"))
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--cap", type=int, default=50_000,
                    help="maxOffsetsPerTrigger of the throughput runs (several batches, the first one excluded)")
    ap.add_argument("--sweep", default="20000,100000", help="maxOffsetsPerTrigger values to compare")
    ap.add_argument("--sweep-events", type=int, default=200_000)
    ap.add_argument("--latency-rate", type=float, default=200.0)
    ap.add_argument("--latency-seconds", type=float, default=30.0)
    ap.add_argument("--latency-trigger", default="0.5 seconds,1 seconds")
    ap.add_argument("--master", default="local[2]")
    add_output_args(ap)
    a = ap.parse_args(argv)
    if not a.bootstrap_servers:
        ap.error("--bootstrap-servers (or KCTL_BOOTSTRAP_SERVERS) is required")
    bs = a.bootstrap_servers
    topic, sweep_topic = _topic(bs), _topic(bs)
    caps = [int(c) for c in a.sweep.split(",") if c]
    try:
        events = [(e.key, e.value) for e in generate(a.events, seed=1, hosts=8, rate=1000.0)]
        avg = sum(len(v) for _, v in events) // max(1, len(events))
        produce(Target.of(None, bs), topic, events, max_seconds=600)
        if caps:
            produce(Target.of(None, bs), sweep_topic, events[:a.sweep_events], max_seconds=600)
        print(f"produced {len(events)} events to {topic}", file=sys.stderr)
        fl = floor(bs, topic, len(events))
        print(f"floor: {fl:,.0f} events/s", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="kctl-bench-") as tmp:
            cfg = JobConfig(bootstrap_servers=bs, topics=[topic], out=f"{tmp}/out", checkpoint=f"{tmp}/cp",
                            master=a.master, trigger="available-now", max_offsets_per_trigger=a.cap,
                            jars=jars_for_job(None),
                            # one progress event per micro-batch, plus the empty ones around them
                            progress_history=len(events) // min([a.cap, *caps]) + 10)
            sread = spark_read(cfg, len(events))
            print(f"Spark's Kafka source alone, and with the parse: {sread}", file=sys.stderr)
            job = job_throughput(cfg, len(events))
            print(f"job: {job}", file=sys.stderr)
            arch = job_throughput(_variant(cfg, "archive", outputs=["archive", "deadletter"]), len(events))
            print(f"archive only: {arch}", file=sys.stderr)
            met = job_throughput(_variant(cfg, "metrics", outputs=["metrics"]), len(events))
            print(f"metrics only: {met}", file=sys.stderr)
            sweep = []
            for cap in caps:
                r = job_throughput(_variant(cfg, f"cap{cap}", topics=[sweep_topic], max_offsets_per_trigger=cap),
                                   a.sweep_events)
                print(f"cap {cap}: {r}", file=sys.stderr)
                sweep.append((cap, r))
            lats = []
            for trig in [t.strip() for t in a.latency_trigger.split(",") if t.strip()]:
                try:
                    lats.append(latency(bs, cfg, a.latency_rate, a.latency_seconds, trig))
                except Exception as exc:  # noqa: BLE001 - report the others
                    print(f"latency at {trig} failed: {exc!r}", file=sys.stderr)
                    continue
                print(f"latency: {lats[-1]}", file=sys.stderr)
            bc = batch_cost(Path(tmp), a.master)
            print(f"batch cost: {bc}", file=sys.stderr)
    finally:
        _drop(bs, topic)
        _drop(bs, sweep_topic)
    import pyspark

    fig = {
        "when": dt.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "spark": pyspark.__version__, "delta": delta_version(), "master": a.master,
        "driver_memory": cfg.driver_memory, "shuffle": cfg.shuffle_partitions, "events": len(events),
        "avg_bytes": avg, "floor": fl, "spark_read": sread, "job": job, "archive_only": arch, "metrics_only": met,
        "cap": a.cap,
        "sweep": sweep, "sweep_events": a.sweep_events, "latency": lats, "batch_cost": bc,
        "load": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    publish(render(fig), a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
