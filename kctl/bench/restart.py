"""Benchmark: a full rolling restart of a 3-node cluster under a steady acks=all load.

On a cluster of its own (kctl.testing): a topic of 6 partitions, replication factor 3,
``min.insync.replicas=2``; the drill's producer (:mod:`kctl.drill.load`: acks=all, idempotence on,
every acknowledgement's produce-to-ack latency kept) writes ``--rate`` records/s; after a quiet
``--settle`` seconds, `kctl restart --rolling --yes` (ZooKeeper followers then the leader, brokers by id
then the controller, every step through the health gates, a preferred election at the end) runs from
the CLI and is timed; after ``--settle`` seconds more, `kctl restart --rolling --service node --yes` (each
node's ZooKeeper and broker in one step, the ZooKeeper leader's node last) on the same cluster under the same
load. The load runs on for ``--settle`` seconds, stops and flushes; then a fresh
consumer of its own reads every partition from the beginning (:func:`kctl.drill.check.read_topic`) and
every acknowledged record must be there (:func:`kctl.drill.check.compare`). Beside each roll's wall time,
the brokers' own share of it, read from the nodes' logs of the same run: each broker's stop (supervisord's
SIGTERM to the process's exit), its start (supervisord's spawn to the broker's "started" line) and its replicas'
catch-up (kctl's under-replicated check until it first saw none): the floor under any rolling restart that
keeps one broker down at a time. Rewrites the "Rolling restart under load" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from kctl.bench.doc import add_output_args, publish
from kctl.drill.load import Second
from kctl.roll.plan import GATE_URP, URP_STABLE_S
from kctl.wait import pause_until

TOPIC = "bench-roll"
PARTITIONS = 6


def _window_ms(seconds: Mapping[int, Second], start: float, end: float) -> list[float]:
    """Every acknowledgement latency (ms) of the whole seconds that overlap [start, end]."""
    out: list[float] = []
    for s, sec in seconds.items():
        if s + 1 > start and s <= end:
            out.extend(sec.latencies_ms)
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _roll(spec_file: Any, workdir: Any, *extra: str) -> tuple[float, dict[str, Any]]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kctl", "restart", "--rolling", *extra, "--yes", "-o", "json",
                        "-f", str(spec_file)], capture_output=True, text=True, cwd=workdir,
                       timeout=1800, env={**os.environ, "COLUMNS": "200"})
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"kctl restart {' '.join(extra)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return wall, dict(json.loads(p.stdout))


def _gate_seconds(result: Mapping[str, Any]) -> dict[str, float]:
    """Seconds spent in each gate, summed over the steps (the gate names without their step)."""
    out: dict[str, float] = {}
    for g in result["gates"]:
        if g["step"] == "pre-checks":
            continue
        out[g["gate"]] = out.get(g["gate"], 0.0) + float(g["seconds"])
    return out


MODES = (("services", ()), ("nodes", ("--service", "node")))

# supervisord's log (its first "waiting for kafka to stop" follows its SIGTERM at once) and the broker's.
_SUPERVISOR_EVENT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ "
                               r"(waiting for kafka to stop|stopped: kafka|spawned: 'kafka')")
_BROKER_STARTED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO \[KafkaServer id=\d+\] started ")


def _stamp(text: str) -> float:
    """Epoch seconds of a log time stamp (the nodes log in UTC)."""
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=datetime.timezone.utc).timestamp()


def broker_phases(supervisor_log: str, server_log: str, start: float, end: float) -> tuple[float, float]:
    """(stop, start) seconds of the one restart of a broker within [start, end] (epoch seconds): supervisord's
    SIGTERM to the process's exit, and supervisord's spawn to the broker's "started" line. SystemExit when the
    logs do not hold the whole restart."""
    events: list[tuple[float, str]] = []
    for line in supervisor_log.splitlines():
        m = _SUPERVISOR_EVENT.match(line)
        if m:
            events.append((_stamp(m[1]), m[2].split()[0].rstrip(":")))  # waiting, stopped, spawned
    for line in server_log.splitlines():
        m = _BROKER_STARTED.match(line)
        if m:
            events.append((_stamp(m[1]), "started"))
    marks: dict[str, float] = {}
    for t, what in sorted(events):
        if not start <= t <= end:
            continue
        want = {"waiting": None, "stopped": "waiting", "spawned": "stopped", "started": "spawned"}[what]
        if what not in marks and (want is None or want in marks):
            marks[what] = t
    if len(marks) < 4:
        raise SystemExit(f"the nodes' logs hold no whole broker restart between {start:.3f} and {end:.3f}:"
                         f" found {sorted(marks)}")
    return marks["stopped"] - marks["waiting"], marks["started"] - marks["spawned"]


def catch_up_seconds(result: Mapping[str, Any], stable_s: float = URP_STABLE_S) -> float:
    """Seconds kctl's under-replicated gates waited until their first check saw none (less their hold)."""
    name = GATE_URP.format(s=stable_s)
    return sum(max(0.0, float(g["seconds"]) - stable_s) for g in result["gates"] if g["gate"] == name)


def _brokers_own(spec: Any, window: tuple[float, float]) -> tuple[float, float]:
    """The summed (stop, start) seconds of every broker's restart within ``window``, from its node's logs."""
    from kctl.runtime.engine import engines

    stop = start = 0.0
    for node in spec.brokers:
        logs = []
        for path in ("/var/log/kctl/supervisord.log", "/var/log/kctl/kafka/server.log"):
            # the file rolled last before the current one too: either may have rolled during the run (10 MB)
            code, out = engines.exec_in(spec, node.hostname, [
                "sh", "-c", 'for f in "$1.1" "$1"; do if [ -r "$f" ]; then tail -n 20000 "$f" || exit; fi; done',
                "sh", path], timeout=60, stderr=False)
            if code != 0:
                raise SystemExit(f"cannot read {path} of {node.hostname} (exit {code})")
            logs.append(out)
        one_stop, one_start = broker_phases(logs[0], logs[1], *window)
        stop, start = stop + one_stop, start + one_start
    return stop, start


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="records per second produced throughout")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds of load before, between and after the restarts")
    add_output_args(ap)
    args = ap.parse_args(argv)
    from kctl.drill import check
    from kctl.drill.load import Load
    from kctl.testing.cluster import KafkaCluster

    runs: dict[str, dict[str, Any]] = {}
    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        load = Load(c.spec, TOPIC, PARTITIONS, rate=args.rate, acks="all").start()
        try:
            time.sleep(args.settle)
            first = load.elapsed()
            for mode, extra in MODES:
                start, since = load.elapsed(), time.time()
                wall, result = _roll(c.spec_file, c.workdir, *extra)
                runs[mode] = {"start": start, "end": load.elapsed(), "wall": wall, "result": result,
                              "window": (since, time.time())}
                pause_until(time.monotonic() + args.settle)
        finally:
            rec = load.stop()
        for r in runs.values():
            r["own"] = _brokers_own(c.spec, r["window"])
        read = check.read_topic(c.spec, TOPIC)  # a fresh consumer of its own, from the beginning
        cmp = check.compare(rec.acked, read, rec.produced)
    before = _window_ms(rec.seconds, 0, first - 1)
    rows = {}
    for mode, r in runs.items():
        during = _window_ms(rec.seconds, r["start"], r["end"])
        rows[mode] = {
            "steps": ", ".join(f"{s['host']} {s['service']}" for s in r["result"]["steps"]),
            "n": len(r["result"]["steps"]),
            "wall": r["wall"],
            "acks": len(during),
            "p50": _pct(during, 0.5), "p99": _pct(during, 0.99), "max": max(during, default=float("nan")),
            "stall": check.longest_gap(rec.ack_times, r["start"], r["end"]),
            "gates": _gate_seconds(r["result"]),
            "stop": r["own"][0], "startup": r["own"][1], "catch": catch_up_seconds(r["result"]),
        }
        own = rows[mode]["stop"] + rows[mode]["startup"] + rows[mode]["catch"]
        rows[mode].update(own=own, rest=r["wall"] - own)
    errors = ", ".join(f"{k} {v}" for k, v in sorted(rec.errors.items())) or "none"
    s, n = rows["services"], rows["nodes"]
    print(f"roll by service {s['wall']:.1f}s (brokers' own {s['own']:.1f}s), by node {n['wall']:.1f}s (brokers' own"
          f" {n['own']:.1f}s); acked {cmp.acked}, read {cmp.read},"
          f" lost {cmp.lost}, errors {errors}", file=sys.stderr)
    own_rows = "\n".join(f"| {label} | {s[k]:.1f} s | {n[k]:.1f} s |" for label, k in (
        ("brokers stopping: supervisord's SIGTERM to the process's exit (controlled shutdown included)", "stop"),
        ("brokers starting: supervisord's spawn to the broker's \"started\" line", "startup"),
        ("replicas catching up: kctl's under-replicated check until it first saw none", "catch")))
    own_rows += "\n| **the brokers' own time** | " + " | ".join(
        f"**{r['own']:.1f} s** ({r['own'] / r['wall']:.0%} of {r['wall']:.1f} s)" for r in (s, n)) + " |"
    own_rows += (f"\n| the rest: ZooKeeper's restarts, kctl's commands and gates, the held checks, the election |"
                 f" {s['rest']:.1f} s | {n['rest']:.1f} s |")
    gate_names = list(dict.fromkeys([*s["gates"], *n["gates"]]))
    gate_rows = "\n".join(f"| {g} | {s['gates'].get(g, 0.0):.1f} s | {n['gates'].get(g, 0.0):.1f} s |"
                          for g in gate_names)
    section = f"""## Rolling restart under load

`python -m kctl.bench.restart --rate {args.rate:g}` (part of `make bench`), on this machine,
{time.strftime('%Y-%m-%d')}: a 3-node colocated cluster, topic `{TOPIC}` ({PARTITIONS} partitions, replication
factor 3, `min.insync.replicas=2`), one producer with `acks=all` and idempotence on writing {args.rate:g}
records/s throughout, every acknowledgement's latency recorded in its delivery callback. After {args.settle:g} s
of load, `kctl restart --rolling --yes` restarts the {s['n']} services one at a time through the health gates
({s['steps']}); {args.settle:g} s later, on the same cluster under the same load,
`kctl restart --rolling --service node --yes` restarts each node's ZooKeeper and broker in one step
({n['steps']}); each ends with a preferred leader election. The load runs {args.settle:g} s more, then a
fresh consumer reads every partition from the beginning and looks for every acknowledged record.

| | before the restarts | by service (default) | by node (`--service node`) |
|---|---|---|---|
| wall time | {first:.0f} s of load | **{s['wall']:.1f} s** | **{n['wall']:.1f} s** |
| acknowledgements | {len(before)} | {s['acks']} | {n['acks']} |
| produce latency p50 | {_pct(before, 0.5):.1f} ms | {s['p50']:.1f} ms | {n['p50']:.1f} ms |
| produce latency p99 | {_pct(before, 0.99):.1f} ms | {s['p99']:.1f} ms | {n['p99']:.1f} ms |
| produce latency max | {max(before, default=float('nan')):.1f} ms | {s['max']:.1f} ms | {n['max']:.1f} ms |
| longest stretch without an acknowledgement | | {s['stall']:.1f} s | {n['stall']:.1f} s |

The brokers' own share of each wall time, from the nodes' logs of this run (summed over the three brokers): the
floor under any rolling restart that keeps one broker down at a time, whatever drives it.

| | by service | by node |
|---|---|---|
{own_rows}

Where the time goes (seconds in each gate, summed over the steps; the rest is stopping and starting):

| gate | by service | by node |
|---|---|---|
{gate_rows}

Over the whole run: {rec.produced} records produced, {cmp.acked} acknowledged, {cmp.read} read back;
**records lost: {cmp.lost}** (acknowledged but not read back), duplicates {cmp.duplicates}, out of order
{cmp.reordered}, acknowledged at an offset holding another value {cmp.offset_mismatches}; producer errors:
{errors}; still unacknowledged after the final flush: {rec.unfinished}.
"""
    publish(section, args)
    if cmp.lost or cmp.offset_mismatches:
        raise SystemExit(f"records lost: {cmp.lost} (sample {cmp.lost_sample}); offset mismatches"
                         f" {cmp.offset_mismatches}")


if __name__ == "__main__":
    main()
