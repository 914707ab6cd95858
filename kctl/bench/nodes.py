"""Benchmark: add a fourth node to a loaded 3-node cluster and move its share of the data onto it.

On a cluster of its own (kctl.testing): a topic of 12 partitions, replication factor 3, filled
with ``--mb`` MB; then `kctl node add --role observer` (container start, ZooKeeper reconfig,
broker registered) and `kctl reassign plan --brokers 1,2,3,4` + `execute --wait` (unthrottled,
Kafka's own tool, verify and preferred election included), each timed from the CLI. The bytes
moved come from `kafka-log-dirs.sh` afterwards (the new broker's replicas). Rewrites the
"Add a node and rebalance" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kctl.bench.doc import add_output_args, publish
from kctl.bench.load import produce_all
from kctl.kafka.client import Target, producer
from kctl.runtime.cluster import run_kafka_tool
from kctl.testing.cluster import KafkaCluster

TOPIC = "bench-move"


def _kctl(spec_file: Path, cwd: Path, *args: str) -> tuple[float, str]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], capture_output=True, text=True,
                       cwd=cwd, timeout=1800, env={**os.environ, "COLUMNS": "200"})
    took = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"kctl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return took, p.stdout


def _fill(spec: object, mb: int) -> int:
    p = producer(Target.of(spec), acks="all", **{"linger.ms": 20,  # type: ignore[arg-type]
                                                 "batch.size": 1_000_000, "compression.type": "none"})
    value = os.urandom(10_000)  # incompressible, so bytes on disk are bytes written
    n = mb * 100
    produce_all(p, TOPIC, n, value, key=lambda i: str(i).encode(), flush_s=300)
    return n * len(value)


def _bytes_per_broker(spec: object) -> dict[int, int]:
    run = run_kafka_tool(spec, "kafka-log-dirs.sh", ["--describe", "--topic-list", TOPIC],  # type: ignore[arg-type]
                         stderr=False)
    line = next(ln for ln in run.output.splitlines() if ln.startswith("{"))
    out: dict[int, int] = {}
    for b in json.loads(line)["brokers"]:
        out[int(b["broker"])] = sum(int(p["size"]) for d in b["logDirs"] for p in d["partitions"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=150, help="MB written to the topic before the node is added")
    add_output_args(ap)
    args = ap.parse_args(argv)
    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as c:
        c.create_topic(TOPIC, partitions=12, replication_factor=3)
        t0 = time.monotonic()
        written = _fill(c.spec, args.mb)
        fill_s = time.monotonic() - t0
        add_s, _ = _kctl(c.spec_file, c.workdir, "node", "add", "--role", "observer")
        plan_s, plan = _kctl(c.spec_file, c.workdir, "reassign", "plan", "--brokers", "1,2,3,4", "--topics", TOPIC,
                             "-o", "json")
        (c.workdir / "plan.json").write_text(plan)
        move_s, _ = _kctl(c.spec_file, c.workdir, "reassign", "execute", "plan.json", "--wait")
        per = _bytes_per_broker(c.spec)
        _kctl(c.spec_file, c.workdir, "node", "remove", "4", "--yes")  # leaves it as it was; not timed
    total = sum(per.values())
    moved = per.get(4, 0)
    mb = 1_000_000
    section = f"""## Add a node and rebalance

`python -m kctl.bench.nodes --mb {args.mb}` (part of `make bench`), on this machine, {time.strftime('%Y-%m-%d')}:
a 3-node cluster, topic `{TOPIC}` with 12 partitions, replication factor 3, {written / mb:.0f} MB written
({written * 3 / mb:.0f} MB of replicas; filled in {fill_s:.1f} s); then a fourth node and a balanced
reassignment over brokers 1-4, unthrottled, timed from the CLI.

| step | wall time | what it covers |
|---|---|---|
| `kctl node add --role observer` | {add_s:.1f} s | render, start, ZooKeeper sync + reconfig, broker registered |
| `kctl reassign plan --brokers 1,2,3,4` | {plan_s:.1f} s | metadata read and the balanced plan |
| `kctl reassign execute plan.json --wait` | {move_s:.1f} s | Kafka's tool, followed, verified, leaders elected |
| **add + move** | **{add_s + plan_s + move_s:.1f} s** | |

Moved onto broker 4: {moved / mb:.0f} MB of {total / mb:.0f} MB of replicas ({100 * moved / total:.0f}%: its
balanced share of 4 brokers), {moved / mb / move_s:.1f} MB/s over the move. Replica bytes per broker
afterwards: {", ".join(f"{b}: {v / mb:.0f} MB" for b, v in sorted(per.items()))}.
"""
    publish(section, args)


if __name__ == "__main__":
    main()
