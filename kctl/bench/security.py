"""Benchmark of the secured profile: PLAINTEXT vs SASL_SSL (SCRAM-SHA-512, TLS) on one machine, one run.

For each profile, one after the other (one cluster at a time): the time from start to verified
healthy (KafkaCluster: render, secrets, compose up, the readiness stages and a produce/consume round
trip), then produce throughput (acks=all, idempotent, kctl's client factory) and consume throughput
of the same records read back by a fresh consumer, which also counts them (none lost).
Figures are printed and written to docs/benchmarks.md ("## Security: PLAINTEXT vs SASL_SSL").
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kctl.bench.doc import add_output_args, publish
from kctl.bench.load import produce_all
from kctl.kafka.client import Target, consumer, producer
from kctl.testing import KafkaCluster

SECTION = "## Security: PLAINTEXT vs SASL_SSL"


@dataclass
class Run:
    profile: str
    up_seconds: float
    produce_rps: float
    produce_mbps: float
    consume_rps: float
    consume_mbps: float
    records: int


def _throughput(cluster: Any, records: int, size: int) -> tuple[float, float]:
    from confluent_kafka import TopicPartition

    topic = f"bench-sec-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    value = os.urandom(size // 2).hex().encode()[:size]
    tuning: dict[str, Any] = {"linger.ms": 20, "batch.size": 262144, "queue.buffering.max.messages": 200000}
    target = Target.of(cluster.spec)
    p = producer(target, **tuning)
    produce_s = produce_all(p, topic, records, value)
    fetch: dict[str, Any] = {"fetch.max.bytes": 52428800}
    c = consumer(target, **fetch)
    c.assign([TopicPartition(topic, part, 0) for part in range(3)])
    got, t0 = 0, time.monotonic()
    deadline = t0 + 120
    while got < records and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(10000, timeout=1.0) if m.error() is None)
    consume_s = time.monotonic() - t0
    c.close()
    if got != records:
        raise RuntimeError(f"read back {got} of {records} records")
    return produce_s, consume_s


def run(profile: str, records: int, size: int) -> Run:
    cluster = KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None, security=profile == "SASL_SSL")
    t0 = time.monotonic()
    cluster.start()
    try:
        up = time.monotonic() - t0
        ps, cs = _throughput(cluster, records, size)
    finally:
        cluster.stop()
    mb = records * size / 1e6
    return Run(profile, up, records / ps, mb / ps, records / cs, mb / cs, records)


def section(runs: list[Run], size: int) -> str:
    plain, sec = runs
    lines = [SECTION, "",
             f"Measured {dt.date.today()} on {platform.machine()}, {os.cpu_count()} CPU(s), by"
             " `python -m kctl.bench.security`: three nodes each, one after the other in one run,"
             f" {plain.records} records of {size} bytes, acks=all, 3 partitions, replication factor 3.", "",
             "| | PLAINTEXT | SASL_SSL (SCRAM-SHA-512) | ratio |", "|---|---|---|---|"]

    def row(name: str, a: float, b: float, fmt: str) -> str:
        return f"| {name} | {a:{fmt}} | {b:{fmt}} | {b / a:.2f} |"

    lines += [row("start to verified healthy (s)", plain.up_seconds, sec.up_seconds, ".1f"),
              row("produce (records/s)", plain.produce_rps, sec.produce_rps, ",.0f"),
              row("produce (MB/s)", plain.produce_mbps, sec.produce_mbps, ".1f"),
              row("consume (records/s)", plain.consume_rps, sec.consume_rps, ",.0f"),
              row("consume (MB/s)", plain.consume_mbps, sec.consume_mbps, ".1f"), "",
              "The secured start adds the CA, certificates and keystores, and each broker's SCRAM bootstrap"
              " (one kafka-configs JVM) before it starts; TLS costs the clients and the replication traffic."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.security", description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=200, help="bytes per record")
    add_output_args(ap)
    args = ap.parse_args(argv)
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    runs = []
    for profile in ("PLAINTEXT", "SASL_SSL"):
        r = run(profile, args.records, args.size)
        print(f"{profile}: {r}", file=sys.stderr)
        runs.append(r)
    publish(section(runs, args.size), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
