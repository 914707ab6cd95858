"""Benchmark of monitoring's costs: the monitor process at 1,000 partitions and 50 groups, and the exporters'
cost on produce throughput.

1. The monitor: one three-node cluster with 50 topics of 20 partitions (replication factor 1: the monitor's
   work depends on partitions and groups, not replicas) and 50 consumer groups, each with committed offsets
   on every partition of its topic; `kctl monitor start` as a process of its own at a 5 s interval for
   ``--seconds``; its CPU time and resident memory from /proc, its rounds' and group samplings' durations
   from its API, the store's size.
2. The exporters: the same produce load (``--records`` records of 100 bytes, acks=all, the Python client
   alone) on a cluster with monitoring off and on one with it on (the agent loaded, and scraped every 5 s as
   a Prometheus would), both clusters up at once and the runs alternating between them, medians.

Figures are printed and written to docs/benchmarks.md ("## Monitoring").
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
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from kctl.bench.doc import add_output_args, publish, table
from kctl.wait import ticks

SECTION = "## Monitoring"
TOPICS, PARTITIONS, GROUPS = 50, 20, 50


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def _proc(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, RSS bytes, peak RSS bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return cpu, int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024


def _health(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as resp:  # noqa: S310
        doc: dict[str, Any] = json.loads(resp.read())
        return doc


def monitor_cost(seconds: float) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    from kctl.testing.cluster import KafkaCluster

    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as c:
        _log(f"{TOPICS} topics of {PARTITIONS} partitions, {GROUPS} groups")
        for t in range(TOPICS):
            c.create_topic(f"bench-mon-{t:02d}", partitions=PARTITIONS, replication_factor=1)
        for g in range(GROUPS):
            consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"bench-group-{g:02d}",
                                 "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition(f"bench-mon-{g % TOPICS:02d}", p, 0) for p in range(PARTITIONS)],
                            asynchronous=False)
            consumer.close()
        log = c.workdir / "monitor-bench.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "kctl", "monitor", "start", "--interval", "5",
                                     "-f", str(c.spec_file)], stdout=out, stderr=subprocess.STDOUT)
        port = c.spec.monitoring.monitor_port
        try:
            deadline = time.monotonic() + 120
            for _ in ticks(0.5):  # bounded: two minutes for the first full round
                try:
                    if _health(port)["groups"] >= GROUPS:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"the monitor did not judge {GROUPS} groups in time: {log.read_text()[-2000:]}")
            cpu0, _, _ = _proc(proc.pid)
            h0 = _health(port)
            t0 = time.monotonic()
            rounds, groups_s = [], []
            for n in ticks(5.0, until=t0 + seconds + 5):
                if not n:
                    continue  # a reading every 5 s, the first 5 s in
                h = _health(port)
                rounds.append(h["round_seconds"])
                groups_s.append(h["groups_seconds"])
            cpu1, rss, peak = _proc(proc.pid)
            h1 = _health(port)
            wall = time.monotonic() - t0
        finally:
            proc.terminate()
            proc.wait(30)
        db = c.state_dir / "monitor" / "monitor.db"
        size = sum(p.stat().st_size for p in db.parent.glob("monitor.db*"))
    n = h1["rounds"] - h0["rounds"]
    return {"cpu_pct": 100 * (cpu1 - cpu0) / wall, "rss_mb": rss / 1e6, "peak_mb": peak / 1e6, "rounds": n,
            "wall": wall, "round_s": statistics.median(rounds), "groups_s": statistics.median(groups_s),
            "db_mb": size / 1e6, "db_mb_per_round": size / 1e6 / max(1, h1["rounds"])}


def _produce(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import Producer

    from kctl.bench.load import produce_all

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 262144})
    return records / produce_all(p, topic, records, b"x" * 100)


def exporter_cost(records: int, rounds: int) -> dict[str, list[float]]:
    """Both clusters up at once, the runs alternating between them (off, on, off, on...): the idle one costs
    both the same, and a drift of the machine's load falls on both."""
    from contextlib import ExitStack

    from kctl.monitor import metrics as mx
    from kctl.monitor.service import endpoints_of
    from kctl.testing.cluster import KafkaCluster

    got: dict[str, list[float]] = {"off": [], "on": [], "scrape_s": []}
    stop = threading.Event()
    with ExitStack() as stack:
        clusters = {name: stack.enter_context(KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None,
                                                           monitoring={"enabled": name == "on"}))
                    for name in ("off", "on")}
        for c in clusters.values():
            c.create_topic("bench-exp", partitions=6, replication_factor=3)
            _produce(c.bootstrap_servers, "bench-exp", records // 10)  # warm-up
        eps = endpoints_of(clusters["on"].spec)

        def scrape() -> None:
            for n in ticks(5.0, stop=stop):
                if not n:
                    continue
                t = time.monotonic()
                mx.scrape_all(eps)
                got["scrape_s"].append(time.monotonic() - t)

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        try:
            for r in range(rounds):
                for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    rate = _produce(clusters[name].bootstrap_servers, "bench-exp", records)
                    got[name].append(rate)
                    _log(f"monitoring {name}, run {r + 1}: {rate:,.0f} records/s")
        finally:
            stop.set()
            scraper.join(10)
    return got


def render_section(mon: dict[str, Any], exp: dict[str, list[float]], records: int) -> str:
    host = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    off, on = statistics.median(exp["off"]), statistics.median(exp["on"])
    rows_m = [
        ("partitions watched / groups", f"{TOPICS * PARTITIONS} / {GROUPS} ({GROUPS * PARTITIONS} group partitions)"),
        ("rounds measured (5 s interval)", f"{mon['rounds']} in {mon['wall']:.0f} s"),
        ("monitor CPU (share of one core)", f"{mon['cpu_pct']:.1f} %"),
        ("monitor resident memory at the end / peak", f"{mon['rss_mb']:.0f} MB / {mon['peak_mb']:.0f} MB"),
        ("a round (exporters, ZooKeeper, disks, rules, store), median", f"{mon['round_s']:.2f} s"),
        ("a sampling of the 50 groups, median", f"{mon['groups_s']:.2f} s"),
        ("store size at the end / per round", f"{mon['db_mb']:.1f} MB / {mon['db_mb_per_round'] * 1000:.0f} kB"),
    ]
    rows_e = [
        (f"produce, {records:,} records of 100 bytes, acks=all: monitoring off (median)", f"{off:,.0f} records/s"),
        ("the same with the exporters on and scraped every 5 s (median)", f"{on:,.0f} records/s"),
        ("ratio on / off", f"{on / off:.2f}"),
        ("runs' range off / on", f"{min(exp['off']):,.0f}-{max(exp['off']):,.0f} / "
                                  f"{min(exp['on']):,.0f}-{max(exp['on']):,.0f} records/s"),
        ("one scrape of all six exporters, median", f"{statistics.median(exp['scrape_s']):.2f} s"),
    ]
    return "\n".join([
        SECTION,
        "",
        f"Measured by `python -m kctl.bench.monitor` on {dt.date.today().isoformat()} ({host}; load average at the"
        f" end {load}).",
        "",
        "The monitor (`kctl monitor start`, a process of its own) watching a three-node cluster:",
        "",
        *table(("measure", "value"), rows_m),
        "",
        "The store grows by the samples of every group partition (a moved offset, or an owned one), every group",
        "partition's end offset and one metrics report per round; `monitoring.retention_hours` bounds it. Memory",
        "is bounded by the windows (`monitoring.window` samples and end offsets per group partition) and the last",
        "report.",
        "",
        f"The exporters' cost on produce throughput (two clusters up at once, runs alternating; {len(exp['off'])} runs"
        " each):",
        "",
        *table(("measure", "value"), rows_e),
        "",
        "On two shared cores the runs' spread is wider than any difference between the two sides: the exporters'",
        "cost on throughput is below what this machine can measure. A broker's exporter answers with about 5,000",
        "samples (most of them per-partition gauges and per-request percentiles); the cost is in the scrapes,",
        "which Prometheus' default 15 s interval makes a third of this.",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.monitor", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to watch the monitor")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per produce run")
    ap.add_argument("--rounds", type=int, default=5, help="produce runs per cluster")
    add_output_args(ap)
    args = ap.parse_args(argv)
    mon = monitor_cost(args.seconds)
    _log(f"monitor: {mon}")
    exp = exporter_cost(args.records, args.rounds)
    publish(render_section(mon, exp, args.records), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
