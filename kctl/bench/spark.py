"""The job on kctl's Spark cluster (kctl.yaml's ``spark`` section) beside the same job in ``local[2]``, one run.

    python -m kctl.bench.spark [--events-first 200] [--small 5] [--rounds 8] [--no-write]

Starts a one-node Kafka cluster with a Spark cluster of one worker (1 core, 1g) through kctl's testing API
(removed at the end), then for each master (the Spark cluster, then ``local[2]``), on a fresh topic holding
``--events-first`` events:

1. **submit to first batch**: wall time from the start of ``kctl stream submit --detach`` (the command, as an
   operator runs it: the JVM, the session, the jars, the warm-up writer, and on the Spark cluster the driver's
   container and the executor on the worker) to the moment the job's progress history holds a batch with data;
2. **a small batch**: ``--rounds`` times ``--small`` events, each round once the previous one is in; the
   median of those batches' own duration (StreamingQueryProgress ``triggerExecution``).

Then prints the figures and rewrites the "## Pipeline on kctl's Spark cluster" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kctl.agent.nginx import generate
from kctl.agent.produce import produce
from kctl.bench.doc import add_output_args, publish, table
from kctl.kafka.client import Target
from kctl.stream.progress import job_progress
from kctl.wait import ticks

KCTL = [str(Path(sys.executable).parent / "kctl")]


def _kctl(spec: Path, *args: str) -> dict[str, Any]:
    r = subprocess.run([*KCTL, *args, "-f", str(spec), "-o", "json"], capture_output=True, text=True, check=False,
                       cwd=spec.parent, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"kctl {' '.join(args)}: {r.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _with_data(cp: Path) -> list[dict[str, Any]]:
    return [p for p in job_progress(cp) if int(p.get("numInputRows") or 0) > 0]


def _wait(what: str, cond: Any, timeout: float = 600) -> Any:
    for _ in ticks(0.1, until=time.monotonic() + timeout):
        got = cond()
        if got:
            return got
    raise RuntimeError(f"timed out waiting for {what}")


def run_one(spec: Path, bs: str, master: str | None, tmp: Path, first: int, small: int, rounds: int,
            *more: str) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"kctl-bench-spark-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(timeout=30)
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    evs = [(e.key, e.value) for e in generate(first + small * rounds, seed=2, hosts=4, start=start, rate=50.0)]
    produce(Target.of(None, bs), topic, evs[:first])
    job = f"bench{uuid.uuid4().hex[:6]}"
    args = ["stream", "submit", "-d", "-t", topic, "--name", job, "--trigger", "1s", *more]
    if master:
        args += ["--master", master, "--out", str(tmp / job / "out"), "--checkpoint", str(tmp / job / "cp")]
    t0 = time.monotonic()
    res = _kctl(spec, *args)
    submitted = time.monotonic() - t0
    cp = Path(res["checkpoint"])
    _wait("the first batch with data", lambda: _with_data(cp))
    first_s = time.monotonic() - t0
    durations = []
    sent = first
    for i in range(rounds):
        produce(Target.of(None, bs), topic, evs[sent:sent + small])
        sent += small
        have = sum(int(p["numInputRows"]) for p in _with_data(cp))
        _wait(f"round {i}", lambda have=have: sum(int(p["numInputRows"]) for p in _with_data(cp)) >= have + small)
    batches = _with_data(cp)[1:]  # the first one is the catch-up of the first events
    durations = [int(p["durationMs"]["triggerExecution"]) / 1000.0 for p in batches]
    rows = [int(p["numInputRows"]) for p in batches]
    _kctl(spec, "stream", "stop", "--name", job, *(["--checkpoint", str(cp)] if master else []))
    label = master or "the Spark cluster"
    return {"master": label + (" with Spark's Delta appends for every batch (--small-batch-rows 0)" if more else ""),
            "submit_returned_s": round(submitted, 1),
            "first_batch_s": round(first_s, 1), "small_batch_median_s": round(statistics.median(durations), 2),
            "small_batches": len(durations), "small_rows": f"{min(rows)}-{max(rows)}"}


def _warm_ready(state_dir: Path) -> dict[str, Any] | None:
    from kctl.stream import warm
    from kctl.stream.record import read_json

    d = warm.slots_dir(state_dir)
    for slot in sorted(d.iterdir()) if d.is_dir() else []:
        ready = read_json(slot / "ready.json")
        if ready and not (slot / "claim.json").exists():
            return dict(ready)
    return None


def _warm_off(spec: Path) -> None:
    """kctl.yaml's spark.warm_driver off, and `kctl up`: the warm driver that waits goes."""
    import yaml

    data = yaml.safe_load(spec.read_text())
    data["spark"]["warm_driver"] = False
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    _kctl(spec, "up")


def _free_pair(start: int = 46300, stop: int = 49000) -> int:
    """A port whose next one is free too (the master's UI and the worker's), on 127.0.0.1."""
    from kctl.runtime.ports import port_free

    return next(p for p in range(start, stop, 10) if port_free(p) and port_free(p + 1))


def render(fig: dict[str, Any]) -> str:
    rows: list[tuple[str, str]] = []
    for r in fig["runs"]:
        rows.append((f"{r['master']}: `kctl stream submit --detach` to the first batch with data ({fig['first']}"
                     f" events waiting; submit itself returned after {r['submit_returned_s']:.1f} s)",
                     f"{r['first_batch_s']:.1f} s"))
        rows.append((f"{r['master']}: a small batch ({r['small_rows']} events; median of {r['small_batches']})",
                     f"{r['small_batch_median_s']:.2f} s"))
    return "\n".join([
        "## Pipeline on kctl's Spark cluster", "",
        f"Measured by `python -m kctl.bench.spark` on {fig['when']} ({fig['machine']}); Spark {fig['spark']}; one",
        "Kafka node; kctl.yaml's `spark` section with 1 worker (1 core, worker_memory 1g), the driver in its own",
        "container, its executor on the worker (512m); beside it the same job in `local[2]` on this host, in the",
        f"same run, against the same cluster. Load average during the run: {fig['load']} (other work shared the",
        "machine: compare the rows with each other, not with other runs).", "",
        *table(("measure", "value"), rows), "",
        "The first figure is what an operator waits for: the `kctl stream submit` command (preflight, jars, the",
        "driver's JVM and session, the warm-up writer; on the Spark cluster also the driver's container and an",
        "executor on the worker) until the job's progress history shows a batch with data. With kctl.yaml's",
        "`spark.warm_driver` (the first rows) a driver started by `kctl up` has done all of that before the",
        "submit, which hands it the job; the next rows are the same cluster without it (`warm_driver: false`",
        "and `kctl up`), the job's own driver started by the submit. A small batch is",
        "StreamingQueryProgress's `triggerExecution` of batches holding only a few events, each sent after the",
        "previous one was in. A batch of at most `--small-batch-rows` records (5,000 by default) is written by one",
        "Spark job that brings its parsed rows to the driver and delta-rs commits there; the last row is the same",
        "job with every batch through Spark's Delta appends (a Spark job and a JVM commit per table), as before.",
        "",
        *(f"Against issue #46's targets (the first batch within 10 s of `kctl stream submit` against a running Spark"
          f" cluster, a batch of a few events under 0.5 s): {r['first_batch_s']:.1f} s with the warm driver"
          f" ({'met' if r['first_batch_s'] <= 10 else 'not met'}; {fig['runs'][1]['first_batch_s']:.1f} s"
          f" without it, in this run), and {r['small_batch_median_s']:.2f} s for a small batch"
          f" ({'met' if r['small_batch_median_s'] < 0.5 else 'not met'}). In a small batch the writer's one"
          f" Spark job (the Kafka fetch, the parse, the rows to the driver) took about 0.1 s in local[2], the"
          f" delta-rs commits tens of milliseconds, and the streaming query's own steps (offset log, commit log,"
          f" Kafka's latest offsets) the rest; two levers took it there from 1.4-1.6 s (docs/pipeline.md): the"
          f" executors' Kafka fetches no longer wait 500 ms for more data at the end of the log"
          f" (`kafka.fetch.max.wait.ms` 10), and the parse is built once into the stream's plan instead of from"
          f" Python for each batch (about 0.2 s). Spark's Delta appends take"
          f" {fig['runs'][-1]['small_batch_median_s']:.2f} s in the same run (the last rows)."
          for r in fig["runs"][:1]), ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.spark")
    ap.add_argument("--events-first", type=int, default=200)
    ap.add_argument("--small", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=8)
    add_output_args(ap)
    a = ap.parse_args(argv)
    from kctl.testing.cluster import KafkaCluster

    base = _free_pair()
    runs = []
    with tempfile.TemporaryDirectory(prefix="kctl-bench-spark-") as tmp, \
            KafkaCluster(1, workdir=tmp, spark={"workers": 1, "worker_cores": 1, "worker_memory": "1g",
                                                 "ui_port": base, "warm_driver": True}) as c:
        for master, more in (("warm", ()), (None, ()), ("local[2]", ()), ("local[2]", ("--small-batch-rows", "0"))):
            if master == "warm":
                ready = _wait("the warm driver ready", lambda: _warm_ready(c.state_dir), timeout=300)
                print(f"warm driver ready: {ready}", file=sys.stderr)
            elif master is None:
                _warm_off(c.spec_file)  # the cold figure: the job's own driver
            r = run_one(c.spec_file, c.bootstrap_servers, None if master == "warm" else master, Path(tmp),
                        a.events_first, a.small, a.rounds, *more)
            if master == "warm":
                r["master"] = "the Spark cluster, its warm driver (spark.warm_driver)"
            print(f"{r}", file=sys.stderr)
            runs.append(r)
    import pyspark

    fig = {"when": dt.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "spark": pyspark.__version__, "first": a.events_first, "runs": runs,
           "load": " / ".join(f"{x:.1f}" for x in os.getloadavg())}
    publish(render(fig), a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
