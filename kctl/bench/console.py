"""Benchmark of the console's pages: the server time of every page and of its JSON twin, on a three-node cluster
with 500 topics and 50 consumer groups (each with committed offsets and a monitor's history), against the
target of 300 ms per page (issue #25).

The console's application runs in this process and is asked through Starlette's TestClient (an ASGI call
without sockets), so each figure is the server's own time: routing, authorisation, the cluster's answers
and the template. Each request is made ``--repeat`` times (after one warm-up); the median and the worst are
reported. Figures are printed and written to docs/benchmarks.md ("## Console").
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kctl.bench.doc import add_output_args, publish
from kctl.wait import ticks

SECTION = "## Console"
TOPICS, GROUPS, TARGET_MS = 500, 50, 300.0
PASSWORD = "bench password"


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def _populate(c: Any) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(c.client_config())
    names = [f"bench-console-{t:03d}" for t in range(TOPICS)]
    for i in range(0, TOPICS, 100):  # bounded batches: the controller takes them in turn
        futures = admin.create_topics([NewTopic(n, 1, 1) for n in names[i:i + 100]], operation_timeout=60)
        for f in futures.values():
            f.result(120)
    p = Producer(c.client_config())
    for n in names[:GROUPS]:
        for i in range(20):
            p.produce(n, f"{n}-{i}".encode())
    p.flush(60)
    for g in range(GROUPS):
        cons = Consumer({**c.client_config(), "group.id": f"bench-console-g{g:02d}", "enable.auto.commit": False})
        cons.commit(offsets=[TopicPartition(names[g], 0, 10)], asynchronous=False)
        cons.close()


def measure(repeat: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from fastapi.testclient import TestClient

    from kctl.console import server
    from kctl.console.config import load_config
    from kctl.console.users import UserStore, new_user
    from kctl.testing.cluster import KafkaCluster

    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as c:
        _log(f"{TOPICS} topics, {GROUPS} groups")
        _populate(c)
        # The monitor at its default interval (monitoring.interval_seconds), as an operator runs it.
        mon = subprocess.run([sys.executable, "-m", "kctl", "monitor", "start", "--detach",
                              "-f", str(c.spec_file)], capture_output=True, text=True, timeout=60)
        if mon.returncode != 0:
            raise SystemExit(f"monitor: {mon.stderr}")
        try:
            home = Path(tempfile.mkdtemp(prefix="kctl-bench-console-"))
            cfg_file = home / "console.yaml"
            cfg_file.write_text(f"clusters:\n  - path: {c.spec_file}\n")
            cfg = load_config(cfg_file)
            UserStore(cfg.users_file).put(new_user("ada", "admin", PASSWORD))
            client = TestClient(server.build(cfg), base_url="http://127.0.0.1")
            assert client.post("/api/login", json={"username": "ada", "password": PASSWORD}).status_code == 200
            n = c.spec.name
            for _ in ticks(1.0, until=time.monotonic() + 120):  # two rounds of history for the groups and brokers pages
                if (r := client.get(f"/api/clusters/{n}/brokers")).status_code == 200 and r.json()["reports"] >= 2:
                    break
            else:
                raise SystemExit(f"the monitor kept no history in 120 s: {r.text[:300]}")
            t, g = "bench-console-000", "bench-console-g00"
            paths = ["/", "/api/clusters", f"/clusters/{n}", f"/api/clusters/{n}", f"/clusters/{n}/topics",
                     f"/api/clusters/{n}/topics", f"/clusters/{n}/topics/{t}", f"/api/clusters/{n}/topics/{t}",
                     f"/clusters/{n}/topics/{t}/messages", f"/clusters/{n}/groups", f"/api/clusters/{n}/groups",
                     f"/clusters/{n}/groups/{g}", f"/api/clusters/{n}/groups/{g}", f"/clusters/{n}/reassignment",
                     f"/clusters/{n}/brokers", f"/clusters/{n}/alerts", "/audit", "/api/audit"]
            sizes: dict[str, int] = {}
            for path in paths:
                r = client.get(path)  # warm-up (and a check that it answers)
                if r.status_code != 200:
                    raise SystemExit(f"{path}: {r.status_code} {r.text[:300]}")
                sizes[path] = len(r.content)
            # Round-robin: a monitor round (its scrapes of six exporters take the CPUs for a moment) falls on
            # every page alike, not on the few asked while it runs.
            times: dict[str, list[float]] = {p: [] for p in paths}
            for _ in range(repeat):
                for path in paths:
                    t0 = time.perf_counter()
                    client.get(path)
                    times[path].append((time.perf_counter() - t0) * 1000)
            rows = [{"path": p.replace(n, "C"), "median_ms": statistics.median(times[p]), "max_ms": max(times[p]),
                     "bytes": sizes[p]} for p in paths]
            for row in rows:
                _log(f"{row['path']}: median {row['median_ms']:.0f} ms")
        finally:
            subprocess.run([sys.executable, "-m", "kctl", "monitor", "stop", "-f", str(c.spec_file)],
                           capture_output=True, timeout=60)
        load = Path("/proc/loadavg").read_text().split()[:3]
    return rows, {"load": " / ".join(load)}


def render_section(rows: list[dict[str, Any]], meta: dict[str, Any], repeat: int) -> str:
    worst = max(rows, key=lambda r: r["median_ms"])
    met = sum(1 for r in rows if r["median_ms"] <= TARGET_MS)
    lines = [
        SECTION, "",
        f"`python -m kctl.bench.console` on {dt.date.today().isoformat()} ({platform.system()} "
        f"{platform.machine()}, 2 CPUs; load average at the end {meta['load']}): a three-node cluster with "
        f"{TOPICS} topics and {GROUPS} consumer groups with committed offsets, its monitor running at its default "
        f"interval; the console's "
        f"application in the benchmark's process, asked through Starlette's TestClient (no sockets), so each "
        f"figure is the server's time. Median and worst of {repeat} requests after a warm-up, the pages asked in "
        f"turn; target "
        f"{TARGET_MS:.0f} ms per page.", "",
        "| page | median ms | worst ms | bytes | within 300 ms |", "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| `{r['path']}` | {r['median_ms']:.0f} | {r['max_ms']:.0f} | {r['bytes']:,} | "
                     f"{'yes' if r['median_ms'] <= TARGET_MS else '**no**'} |")
    lines += ["", f"{met} of {len(rows)} pages within {TARGET_MS:.0f} ms (median); the slowest is "
                  f"`{worst['path']}` at {worst['median_ms']:.0f} ms."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.console", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="requests per page after the warm-up")
    add_output_args(ap)
    args = ap.parse_args(argv)
    rows, meta = measure(args.repeat)
    publish(render_section(rows, meta, args.repeat), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
