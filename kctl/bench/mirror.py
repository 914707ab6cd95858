"""Benchmark: MirrorMaker 2 between two clusters of this machine (`kctl mirror`).

Two one-node clusters (as the tests use); the target mirrors `bench-mm` from the source. In one run:

- ``--records`` records of 100 bytes are produced to the source with `kctl produce` (timed as a process,
  like the clients benchmark), then the time until the target's replica holds all of them (its end offsets,
  asked every 0.2 s) gives the replication throughput, beside `kctl produce`'s own;
- then a steady ``--rate`` records/s for ``--seconds`` s on the source, each record carrying its send time;
  a consumer on the target reads the replica as it arrives, and each record's replication lag is the time it
  was read on the target minus the time it was sent (p50, p99, max).

Rewrites the "MirrorMaker 2" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from kctl.bench.doc import add_output_args, publish
from kctl.wait import ticks

TOPIC = "bench-mm"
ALIAS = "src"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _ends(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kctl-bench-mm-ends", "log_level": 0})
    try:
        md = c.list_topics(topic, timeout=5).topics.get(topic)
        if md is None or md.error is not None:
            return 0
        total = 0
        for p in md.partitions:
            try:
                total += c.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
            except KafkaException:
                return 0
        return total
    finally:
        c.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000, help="records for the throughput part")
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s of the latency part")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the latency part")
    add_output_args(ap)
    args = ap.parse_args(argv)
    from confluent_kafka import Consumer, Producer

    from kctl.testing.cluster import KafkaCluster

    with KafkaCluster(nodes=1, quick_jit=False, follower_wait_ms=None) as source:
        source.create_topic(TOPIC, partitions=3, replication_factor=1)
        mirror = {"name": ALIAS, "source": {"spec": str(source.spec_file)}, "topics": TOPIC,
                  "refresh_topics_seconds": 2}
        with KafkaCluster(nodes=1, quick_jit=False, follower_wait_ms=None, mirrors=[mirror]) as target:
            up = subprocess.run([sys.executable, "-m", "kctl", "mirror", "up", "-f", str(target.spec_file)],
                                capture_output=True, text=True, timeout=600)
            if up.returncode != 0:
                raise SystemExit(f"kctl mirror up failed:\n{up.stderr}")
            remote = f"{ALIAS}.{TOPIC}"
            # ---- throughput: kctl produce on the source, then the replica catching up
            lines = "".join(f"{i:0100d}"[-100:] + "\n" for i in range(args.records))
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "kctl", "produce", TOPIC, "--acks", "all", "-f",
                                str(source.spec_file)], input=lines, capture_output=True, text=True, timeout=900,
                               env={**os.environ})
            produced_s = time.monotonic() - t0
            if p.returncode != 0:
                raise SystemExit(f"kctl produce failed:\n{p.stderr}")
            for _ in ticks(0.2, until=time.monotonic() + 900):
                if _ends(target.bootstrap_servers, remote) >= args.records:
                    break
            else:
                raise SystemExit("the replica did not catch up within 900 s")
            replicated_s = time.monotonic() - t0
            # ---- latency at a steady rate
            lags: list[float] = []
            stop = threading.Event()

            def read() -> None:
                c = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": "kctl-bench-mm-lat",
                              "auto.offset.reset": "latest", "enable.auto.commit": False, "log_level": 0})
                c.subscribe([remote])
                while not stop.is_set():
                    for m in c.consume(500, timeout=0.2):
                        v = m.value() if m.error() is None else None
                        if v and v.startswith(b"t="):
                            lags.append(time.time() - float(v[2:]))
                c.close()

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            time.sleep(5)  # the reader's assignment, before the first timed record
            prod = Producer({"bootstrap.servers": source.bootstrap_servers, "acks": "all", "linger.ms": 5})
            n = int(args.rate * args.seconds)
            start = time.monotonic()
            for i in range(n):  # bounded: rate * seconds records
                due = start + i / args.rate
                while time.monotonic() < due:
                    prod.poll(min(0.01, max(0.0, due - time.monotonic())))
                prod.produce(TOPIC, value=f"t={time.time():.6f}".encode())
            prod.flush(60)
            for _ in ticks(0.2, until=time.monotonic() + 60):  # every timed record read, or a minute
                if len(lags) >= n:
                    break
            stop.set()
            reader.join(10)
            status = json.loads(subprocess.run([sys.executable, "-m", "kctl", "mirror", "status", "-o", "json", "-f",
                                                str(target.spec_file)], capture_output=True, text=True,
                                               timeout=120).stdout or "[]")
    rate_mm = args.records / replicated_s
    rate_produce = args.records / produced_s
    ms = [x * 1000 for x in lags]
    print(f"produce {produced_s:.1f}s, replicated {replicated_s:.1f}s; lag p50 {_pct(ms, .5):.0f} ms"
          f" p99 {_pct(ms, .99):.0f} ms ({len(ms)}/{n} records seen)", file=sys.stderr)
    tasks: Any = status[0]["tasks"] if status else {}
    section = f"""## MirrorMaker 2

`python -m kctl.bench.mirror` (part of `make bench`), {time.strftime('%Y-%m-%d')}, this machine (2 cores): two
one-node clusters, the target mirroring `{TOPIC}` (3 partitions) from the source with `kctl mirror` (MirrorMaker 2
in dedicated mode, one task, defaults otherwise; tasks at the end: {", ".join(f"{k} {v}" for k, v in
sorted(tasks.items())) or "unknown"}).

| | records | seconds | records/s |
|---|---:|---:|---:|
| `kctl produce --acks all` into the source (a process) | {args.records} | {produced_s:.1f} | {rate_produce:,.0f} |
| the same records in the target's replica (same start) | {args.records} | {replicated_s:.1f} | {rate_mm:,.0f} |

Replication lag at a steady {args.rate:g} records/s for {args.seconds:g} s (each record's send time on the
source to the moment a consumer of the target's replica read it; {len(ms)} of {n} records read within a minute of
the last send):

| p50 | p99 | max |
|---:|---:|---:|
| {_pct(ms, .5):.0f} ms | {_pct(ms, .99):.0f} ms | {max(ms, default=float('nan')):.0f} ms |

The replica is written by MirrorMaker's producer (acks=all) as the source connector polls the source; the
throughput row includes the time `kctl produce` itself took, since MirrorMaker replicates while it runs.
"""
    publish(section, args)


if __name__ == "__main__":
    main()
