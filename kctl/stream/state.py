"""`kctl stream status` and `stop`: read the job's state files and the checkpoint, compute lag.

The checkpoint is the record of what the job has processed (the job also copies
each committed batch's end offsets to its consumer group, for Kafka's tools).
Lag is computed here from the checkpoint: Kafka's latest offsets minus the end
offsets of the last *committed* batch in ``<checkpoint>/offsets/<batch>`` (a
batch is committed once ``<checkpoint>/commits/<batch>`` exists). The tables'
versions and last batch ids come from their Delta logs (delta-rs, no JVM).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.errors import KctlError, TimeoutReached
from kctl.kafka.client import Target, consumer, kafka_error
from kctl.stream import s3, spark
from kctl.stream import tables as delta_tables
from kctl.stream.config import JobConfig, state_dir
from kctl.stream.preflight import check_topics
from kctl.stream.record import pid_alive, read_json
from kctl.wait import wait_until


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    latest: int | None
    lag: int | None


@dataclass
class StreamStatus:
    checkpoint: str
    state: str
    pid: int | None
    alive: bool
    query_id: str | None
    last_committed_batch: int | None
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    batch_duration_ms: int | None
    num_input_rows: int | None
    watermark: str | None
    archived: int | None
    deadletter: int | None
    total_lag: int | None
    group: str | None = None
    partitions: list[PartitionLag] = field(default_factory=list)
    tables: list[Any] = field(default_factory=list)
    # A job on kctl.yaml's Spark cluster: its driver's container and state, the master and its workers.
    spark: dict[str, Any] | None = None
    # Why a failed job stopped (its query's error, one line; for a store that did not answer, what to do).
    error: str | None = None


def _latest_batch(names: list[str]) -> int | None:
    ids = [int(n) for n in names if n.isdigit()]
    return max(ids) if ids else None


def committed_offsets(checkpoint: str | Path, files: s3.Files | None = None) -> tuple[int | None,
                                                                                     dict[str, dict[int, int]]]:
    """(last committed batch id, {topic: {partition: next offset}}) from a Spark checkpoint (``files`` reads one
    on S3; KctlError when the store does not answer)."""
    files = files or s3.Files()
    cp = str(checkpoint)
    b = _latest_batch(files.names(s3.join(cp, "commits")))
    if b is None:
        return None, {}
    return b, batch_end_offsets(cp, b, files) or {}


def batch_end_offsets(checkpoint: str | Path, b: int,
                      files: s3.Files | None = None) -> dict[str, dict[int, int]] | None:
    """{topic: {partition: end offset}} of batch ``b`` as the checkpoint's offset log holds it (Spark writes it
    before it runs the batch); None when it has no such file."""
    files = files or s3.Files()
    try:
        text = files.read_text(s3.join(s3.join(str(checkpoint), "offsets"), str(b)))
    except OSError:
        return None
    if text is None:
        return None
    offsets: dict[str, dict[int, int]] = {}
    lines = text.splitlines()
    for line in lines[2:]:  # "v1", the batch metadata, then one line per source
        try:
            src = json.loads(line)
        except ValueError:
            continue
        if isinstance(src, dict):
            for topic, parts in src.items():
                if isinstance(parts, dict):
                    offsets.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    return offsets


def batch_records(checkpoint: str | Path, b: int, files: s3.Files | None = None) -> int | None:
    """How many Kafka records batch ``b`` covers at most (its end offsets minus the previous batch's; fewer when
    a topic is compacted or transactional), from the offset log; None when that cannot be known (the first
    batch, a partition the previous batch did not have, a file that is not there)."""
    if b <= 0:
        return None
    end = batch_end_offsets(checkpoint, b, files)
    start = batch_end_offsets(checkpoint, b - 1, files)
    if not end or start is None:
        return None
    n = 0
    for topic, parts in end.items():
        for p, o in parts.items():
            s = start.get(topic, {}).get(p)
            if s is None:
                return None
            n += max(0, o - s)
    return n


def latest_offsets(target: Target, topics: list[str], timeout_s: float = 5.0) -> dict[str, dict[int, tuple[int, int]]]:
    """{topic: {partition: (low, high)}} watermarks from Kafka."""
    from confluent_kafka import KafkaException, TopicPartition

    parts = check_topics(target, topics, timeout_s)
    c = consumer(target)
    out: dict[str, dict[int, tuple[int, int]]] = {}
    try:
        for t, n in parts.items():
            for p in range(n):
                try:
                    lo, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s, cached=False)
                except KafkaException as exc:
                    raise kafka_error(exc, f"cannot read offsets of {t}[{p}] from {target.bootstrap_servers}",
                                      topic=t) from None
                out.setdefault(t, {})[p] = (int(lo), int(hi))
    finally:
        c.close()
    return out


def status(checkpoint: str | Path, bootstrap: str | None = None, record: str | Path | None = None) -> StreamStatus:
    """``record``: the job's :attr:`JobConfig.record_dir`, if it names one (kctl.cli.stream finds it by name)."""
    sd = state_dir(checkpoint, record)
    job = read_json(sd / "job.json")
    if job is None and (s3.is_s3(str(checkpoint)) or not (Path(checkpoint) / "offsets").exists()):
        where = f" (kctl's record of it would be in {sd})" if s3.is_s3(str(checkpoint)) else ""
        raise KctlError(f"no stream job has run with checkpoint {checkpoint}{where}",
                        hint="start one with `kctl stream submit`, or pass --checkpoint (for one on S3, from the "
                             "directory it was submitted from)")
    job = job or {}
    prog = read_json(sd / "progress.json") or job.get("last_progress") or {}
    counters = read_json(sd / "counters.json") or job.get("counters") or {}
    pid = job.get("pid")
    cfg = job.get("config") or {}
    container = cfg.get("container")
    spark_cluster: dict[str, Any] | None = None
    if container:  # a driver in its container on the Spark cluster: Docker knows whether it runs
        driver = spark.driver_state(container)
        alive = driver in ("running", "restarting")
        spark_cluster = {"driver": container, "driver_state": driver or "gone"}
        if cfg.get("spark_ui_port"):
            spark_cluster.update(spark.status_at(int(cfg["spark_ui_port"]),
                                                 host=cfg.get("spark_ui_host") or "127.0.0.1"))
    else:
        alive = pid_alive(pid)
    st = job.get("state", "unknown")
    if st in ("running", "starting") and not alive:
        st = "dead"  # killed without a chance to record it
    files = s3.Files.of(cfg.get("s3")) if s3.is_s3(str(checkpoint)) else s3.Files()
    b, committed = committed_offsets(checkpoint, files)
    bootstrap = bootstrap or cfg.get("host_bootstrap_servers") or cfg.get("bootstrap_servers")
    topics = sorted(set(cfg.get("topics") or []) | set(committed))
    rows: list[PartitionLag] = []
    total: int | None = None
    if bootstrap and topics:
        secured = JobConfig("", [], "", "", spec_file=cfg.get("spec_file") or cfg.get("host_spec_file")).secured_spec()
        latest = latest_offsets(Target.of(secured, bootstrap), topics)
        total = 0
        for t in topics:
            for p, (lo, hi) in sorted(latest.get(t, {}).items()):
                done = committed.get(t, {}).get(p)
                lag = hi - (done if done is not None else lo)
                rows.append(PartitionLag(t, p, done, hi, lag))
                total += lag
    dur = (prog.get("durationMs") or {}).get("triggerExecution")
    tables: list[Any] = []
    out = cfg.get("out")
    if out and (s3.is_s3(out) or Path(out).is_dir()):
        try:
            store = s3.Settings(**cfg["s3"]) if cfg.get("s3") else None
            tables = list(delta_tables.info(out, job.get("query_id"), store=store))
        except KctlError:
            tables = []  # no deltalake here (`kctl[tables]`): the rest of the status stands
    return StreamStatus(
        checkpoint=str(checkpoint), state=st, pid=pid, alive=alive, query_id=job.get("query_id"),
        last_committed_batch=b,
        input_rows_per_second=_num(prog.get("inputRowsPerSecond")),
        processed_rows_per_second=_num(prog.get("processedRowsPerSecond")),
        batch_duration_ms=int(dur) if dur is not None else None,
        num_input_rows=prog.get("numInputRows"),
        watermark=(prog.get("eventTime") or {}).get("watermark"),
        archived=counters.get("archived"), deadletter=counters.get("deadletter"),
        total_lag=total, group=job.get("group"), partitions=rows, tables=tables, spark=spark_cluster,
        error=job.get("error") if st == "failed" else None,
    )


def _num(v: Any) -> float | None:
    try:
        return round(float(v), 1)
    except (TypeError, ValueError):
        return None


SIGTERM_GRACE = 30.0  # seconds a job that ignored its stop marker gets after SIGTERM


def stop(checkpoint: str | Path, timeout_s: float = 120.0, record: str | Path | None = None) -> dict[str, Any]:
    """Ask the job to stop after its current batch (stop marker + SIGTERM); wait for it to exit."""
    sd = state_dir(checkpoint, record)
    job = read_json(sd / "job.json") or {}
    pid: int | None = job.get("pid")
    container = (job.get("config") or {}).get("container")
    if container:
        return _stop_driver(checkpoint, sd, container, timeout_s)
    if pid is None or not pid_alive(pid):
        return {"checkpoint": str(checkpoint), "pid": pid, "stopped": False, "state": job.get("state", "not running")}
    (sd / "stop").write_text("stop\n")

    def exited() -> tuple[bool, str]:
        return not pid_alive(pid), f"pid {pid} " + ("running" if pid_alive(pid) else "exited")

    try:
        wait_until(f"stream job {pid} to stop after its batch", exited, timeout_s, poll=0.3)
    except TimeoutReached:
        os.kill(pid, signal.SIGTERM)  # it did not act on the stop marker: SIGTERM, then a little more
        try:
            wait_until(f"stream job {pid} to exit on SIGTERM", exited, SIGTERM_GRACE, poll=0.3)
        except TimeoutReached as exc:
            raise KctlError(f"stream job {pid} did not stop within {timeout_s:.0f}s: {exc.message}",
                            hint=f"kill it with `kill -9 {pid}`: resubmitting with the same checkpoint loses"
                                 " nothing") from None
    job = read_json(sd / "job.json") or {}
    return {"checkpoint": str(checkpoint), "pid": pid, "stopped": True, "state": job.get("state")}


def _stop_driver(checkpoint: str | Path, sd: Path, container: str, timeout_s: float) -> dict[str, Any]:
    """Stop a driver in its container: the stop marker (the job stops after its batch and exits 0, which Docker's
    on-failure policy leaves stopped), then `docker stop` if it does not act on it."""
    job = read_json(sd / "job.json") or {}
    if spark.driver_state(container) not in ("running", "restarting"):
        return {"checkpoint": str(checkpoint), "container": container, "stopped": False,
                "state": job.get("state", "not running")}
    (sd / "stop").write_text("stop\n")

    def exited() -> tuple[bool, str]:
        s = spark.driver_state(container)
        return s not in ("running", "restarting"), f"container {container} {s}"

    try:
        wait_until(f"stream job driver {container} to stop after its batch", exited, timeout_s, poll=0.3)
    except TimeoutReached:
        spark.stop_driver(container, int(SIGTERM_GRACE))
    job = read_json(sd / "job.json") or {}
    return {"checkpoint": str(checkpoint), "container": container, "stopped": True, "state": job.get("state")}
