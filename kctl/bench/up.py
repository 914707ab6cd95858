"""Benchmark of the cluster lifecycle: `kctl up` to verified healthy beside the Compose floor.

On an already built image, in one run:
- the time from `kctl up` (render, converge, staged readiness) to verified healthy;
- the floor: `docker compose up -d` of the same rendered file, then a produce/consume
  round trip tried every 100 ms until the first one succeeds;
- the peak memory of the running ensemble (docker stats, sampled);
- `kctl status` latency with all nodes up and with one node down.
Figures are printed and written to docs/benchmarks.md ("## Cluster lifecycle").
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kctl.bench.doc import add_output_args, publish, table
from kctl.cluster import health, lifecycle
from kctl.kafka.client import round_trip
from kctl.model.render import render, write
from kctl.model.spec import ClusterSpec, parse_spec
from kctl.runtime import docker_api
from kctl.runtime.engine import compose
from kctl.wait import ticks

SECTION = "## Cluster lifecycle"


def _spec(quick_jit: bool = False, monitoring: bool = True) -> ClusterSpec:
    jit = {"jvm_options": ["-XX:TieredStopAtLevel=1"]} if quick_jit else {}
    return parse_spec({"name": "bench", "zookeeper": {"host_port_base": 42181, **jit},
                       "kafka": {"external_port_base": 49092, **jit}, "monitoring": {"enabled": monitoring}})[0]


def _peak_memory(dc: Any, spec: ClusterSpec, seconds: float = 10.0) -> float:
    """Peak of the summed container memory usage (MB), sampled for ``seconds``."""
    peak = 0.0
    deadline = time.monotonic() + seconds
    ids = [c.id for c in docker_api.infos(spec.name, dc)]
    while time.monotonic() < deadline:
        total = 0.0
        for cid in ids:
            s = dc.api.stats(cid, stream=False)
            mem = s.get("memory_stats", {})
            usage = mem.get("usage", 0) - (mem.get("stats", {}) or {}).get("cache", 0)
            total += usage / 1e6
        peak = max(peak, total)
    return peak


def _status_ms(spec: ClusterSpec, n: int = 5) -> float:
    samples = []
    for _ in range(n):
        t = time.monotonic()
        health.status(spec)
        samples.append((time.monotonic() - t) * 1000)
    return statistics.median(samples)


def measure(log: Any, rounds: int = 5) -> dict[str, Any]:
    spec = _spec()
    dc = docker_api.client()
    with tempfile.TemporaryDirectory(prefix="kctl-bench-") as tmp:
        state = Path(tmp) / ".kctl" / spec.name
        docker_api.remove_by_label(spec.name, dc)
        try:
            # Rounds alternate the JVMs' default flags with the testing API's C1-only JIT (quick_jit) and with
            # monitoring off (no exporter in any JVM), so that all sides see the same machine; the last round
            # (the defaults) stays up for the figures below.
            ups: list[float] = []
            quick: list[float] = []
            bare: list[float] = []
            stage_runs: list[dict[str, float]] = []  # the default side's stages, each up's seconds
            quick_spec = _spec(quick_jit=True)
            bare_spec = _spec(monitoring=False)
            for i in range(rounds):
                for side, s, times in (("quick JIT", quick_spec, quick), ("monitoring off", bare_spec, bare),
                                       ("default JIT", spec, ups)):
                    log(f"kctl up from nothing, {side} ({i + 1}/{rounds})")
                    t = time.monotonic()
                    res = lifecycle.up(s, state, wait=True, timeout=300)
                    times.append(time.monotonic() - t)
                    if s is spec:
                        stage_runs.append({st.name: st.seconds for st in res.stages})
                    log(f"  {times[-1]:.1f} s")
                    if not (i == rounds - 1 and s is spec):
                        lifecycle.down(s, state, volumes=True)
            kctl_up = statistics.median(ups)
            log(f"median {kctl_up:.1f} s (default), {statistics.median(quick):.1f} s (quick JIT),"
                f" {statistics.median(bare):.1f} s (monitoring off)")
            log("peak memory")
            peak = _peak_memory(dc, spec)
            status_up = _status_ms(spec)
            victim = next(c for c in docker_api.infos(spec.name, dc) if c.name == "logger3")
            dc.containers.get(victim.id).kill()
            status_down = _status_ms(spec)
            lifecycle.down(spec, state, volumes=True)

            log("floor: docker compose up -d + round trip every 100 ms")
            write(render(spec), state)
            t = time.monotonic()
            compose.run_compose(spec, state, "up", "-d")
            for _ in ticks(0.1, until=t + 300):
                try:
                    ok, _ = round_trip(spec, timeout=2.0)
                except Exception:  # noqa: BLE001 - not ready yet
                    ok = False
                if ok:
                    break
            floor = time.monotonic() - t
            log(f"  {floor:.1f} s")
        finally:
            docker_api.remove_by_label(spec.name, dc)
            lifecycle.down(spec, state, volumes=True)
    from kctl.bench import jvm

    log("JVMs alone (python -m kctl.bench.jvm)")
    jvms = jvm.medians(jvm.measure(3, log))
    stages = {name: statistics.median(run.get(name, 0.0) for run in stage_runs) for name in stage_runs[0]}
    return {"kctl_up": kctl_up, "ups": ups, "stages": stages, "quick_up": statistics.median(quick), "quick_ups": quick,
            "bare_up": statistics.median(bare), "bare_ups": bare,
            "floor": floor, "peak_mb": peak, "status_up_ms": status_up,
            "status_down_ms": status_down, "jvm_floor": jvms["zookeeper on"] + jvms["kafka on"]}


def render_section(r: dict[str, Any]) -> str:
    host = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return "\n".join([
        SECTION,
        "",
        f"Measured by `python -m kctl.bench.up` on {dt.date.today().isoformat()} ({host};"
        f" load average at the end {load}), image already built, 3 colocated nodes.",
        "",
        *table(("measure", "value"), [
            (f"`kctl up` from nothing to verified healthy (all six stages), median of {len(r['ups'])}",
             f"{r['kctl_up']:.1f} s"),
            ("each `kctl up`", ", ".join(f"{u:.1f}" for u in r["ups"]) + " s"),
            ("the same with the testing API's C1-only JIT (`jvm_options: [-XX:TieredStopAtLevel=1]`, both"
             f" services), median of {len(r['quick_ups'])}", f"{r['quick_up']:.1f} s"),
            ("each `kctl up` with the C1-only JIT", ", ".join(f"{u:.1f}" for u in r["quick_ups"]) + " s"),
            ("ratio C1-only / default", f"{r['quick_up'] / r['kctl_up']:.2f}"),
            ("the same with `monitoring.enabled: false` (no JMX exporter in the brokers, no metrics provider in"
             f" ZooKeeper; default JIT), median of {len(r['bare_ups'])}", f"{r['bare_up']:.1f} s"),
            ("each `kctl up` with monitoring off", ", ".join(f"{u:.1f}" for u in r["bare_ups"]) + " s"),
            ("ratio monitoring off / default", f"{r['bare_up'] / r['kctl_up']:.2f}"),
            ("one node's JVMs alone, one after the other (ZooKeeper, then Kafka; \"## JVM start\", median of 3)",
             f"{r['jvm_floor']:.1f} s"),
            ("ratio `kctl up` / one node's JVMs alone", f"{r['kctl_up'] / r['jvm_floor']:.2f}"),
            ("floor: `docker compose up -d` + first successful round trip (polled every 100 ms)",
             f"{r['floor']:.1f} s"),
            ("ratio kctl / floor", f"{r['kctl_up'] / r['floor']:.2f}"),
            ("peak memory of the running ensemble (3 containers, sampled 10 s after healthy)",
             f"{r['peak_mb']:.0f} MB"),
            ("`kctl status` latency, all nodes up (median of 5, in-process)", f"{r['status_up_ms']:.0f} ms"),
            ("`kctl status` latency, one node killed (median of 5)", f"{r['status_down_ms']:.0f} ms"),
        ]),
        "",
        "Where the default side's time goes (each stage's median over its rounds; before the first, kctl",
        "renders the files, plans and creates the containers):",
        "",
        *table(("stage", "median"), [(name, f"{sec:.2f} s") for name, sec in r["stages"].items()]),
        "",
        "`kctl up` checks more than the floor does (every ZooKeeper's mode, one leader, every broker",
        "registered, a controller) before the same round trip, and includes rendering and the",
        "convergence plan. Its stages poll every 0.2 s and pass as soon as the cluster gets there, so a",
        "ratio near 1 means the verification costs next to nothing; the floor's failed round trips",
        "each wait up to their 2 s timeout, so the floor is exact only to within about 2 s.",
        "",
        "The C1-only rows alternate with the default ones in the same run. Without C2, the JIT compiles",
        "sooner and on less CPU, and three nodes' six JVMs start faster on two cores; the compiled code is",
        "slower at peak, so it is for short-lived clusters (the testing API's default), not production",
        "(docs/configs.md).",
        "",
        "The monitoring-off rows alternate with them too. An exporter is work done in every JVM before it",
        "serves: the JMX exporter agent runs before the broker's main (about 0.3 s of one core each, its",
        "classes loaded from its own jar: the JVM does not share a Java agent's classes from the archive),",
        "and ZooKeeper's metrics provider starts its HTTP server (about 0.25 s each); six JVMs on two",
        "cores pay that once more each start. docs/monitoring.md has the trade-off.",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.up", description=__doc__.splitlines()[0])
    add_output_args(ap)
    args = ap.parse_args(argv)
    r = measure(lambda m: print(f"bench: {m}", file=sys.stderr, flush=True))
    publish(render_section(r), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
