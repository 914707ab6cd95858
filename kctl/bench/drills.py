"""`make drills`: every failure drill in its long form on a fresh three-node cluster, written to
docs/reliability.md (one table row per scenario) with the plot of the leader-kill run.

    python -m kctl.bench.drills [--duration 60] [--rate 1000] [--only leader-kill,...] [--no-write]

Each drill is `kctl drill run` itself (kctl.drill.run.run), against a cluster with kctl's default
settings (ZooKeeper session 18 s, RF 3, min.insync.replicas 2). A drill that does not hold is a row
that says so; the run goes on with the next scenario.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = DOCS / "reliability.md"
PLOT = DOCS / "reliability-leader-kill.png"

# scenario -> bounces in the long form (a kill waits for the broker's ZooKeeper session to expire each time)
BOUNCES: dict[str, int] = {
    "leader-kill": 5, "leader-term": 3, "controller-kill": 3, "zk-leader-kill": 3, "zk-quorum-loss": 2,
    "broker-pause": 3, "broker-partition": 2, "slow-network": 2, "rolling-restart": 1, "baseline": 1,
}


def row(v: Any) -> str:
    rec = f"{v.recovery_seconds:.1f} s" if v.recovery_seconds is not None else "-"
    back = ", ".join(f"{s:.1f} s" for s in v.self_heal_seconds) or "-"
    errors = ", ".join(f"{k} {n}" for k, n in v.errors.items()) or "0"
    verdict = "holds" if v.holds else "**does not hold**: " + "; ".join(v.failures)
    return (f"| {v.scenario} | {v.rate:g}/s | {v.duration_seconds:.0f} s | {v.bounces} | {v.acked} | {v.lost} |"
            f" {v.duplicates} | {v.reordered} | {v.unacked_present} | {errors} | {rec} | {back} |"
            f" {v.longest_stall_seconds:.1f} s | {v.leader_changes} / {v.zk_leader_changes} | {verdict} |")


def render(rows: list[str], notes: list[str], args: argparse.Namespace, plotted: bool) -> str:
    lines = [
        "# Reliability: failure drills",
        "",
        "Written by `make drills` (`python -m kctl.bench.drills`): every `kctl drill run` scenario in its long",
        "form against a fresh three-node cluster with kctl's default settings, on this machine"
        f" ({platform.machine()}, {os.cpu_count()} cores, {dt.date.today().isoformat()}).",
        "Each drill creates its own topic (3 partitions, RF 3, `min.insync.replicas=2`), produces with",
        f"`acks=all` and idempotence at {args.rate:g} records/s, injects its fault on a schedule, heals it, waits",
        "for a healthy cluster, then reads every partition back with a fresh consumer. **lost** = acknowledged",
        "but not read back; duplicates and reordering are counted within partitions; *unacked present* =",
        "written although the producer saw no acknowledgement (allowed). Recovery = fault healed -> cluster",
        "healthy and the topic fully replicated (the longest of the bounces); stall = the longest time",
        "without an acknowledgement. Back by itself = fault -> the killed process serving again, started by",
        "its node's supervisor with no command run (the kill drills).",
        f"This run: `--duration {args.duration:g} --rate {args.rate:g}` (a drill lasts longer when its bounces do:"
        " a SIGKILLed broker leaves `/brokers/ids` only when its ZooKeeper session expires).",
        "",
        "| scenario | rate | duration | bounces | acked | lost | duplicates | reordered | unacked present |"
        " producer errors | recovery | back by itself | longest stall | leader / ZK leader changes | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if notes:
        lines += ["Notes:", "", *(f"- {n}" for n in dict.fromkeys(notes)), ""]
    if plotted:
        lines += ["## One leader-kill run", "",
                  "Acknowledged records per second and p99 produce latency; shaded: the broker was down.", "",
                  f"![leader-kill timeline]({PLOT.name})", ""]
    lines += ["Run one yourself: `kctl drill run leader-kill --duration 60s --rate 1000 --bounces 5"
              " --plot drill.png` (`kctl drill list` names the scenarios).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.drills", description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load per drill")
    ap.add_argument("--rate", type=float, default=1000.0, help="records per second")
    ap.add_argument("--only", default="", help="comma-separated scenarios (default: all; the document then"
                                               " lists only those)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    args = ap.parse_args(argv)
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

    from kctl.drill import report
    from kctl.drill import run as drill
    from kctl.drill.scenarios import SCENARIOS
    from kctl.errors import KctlError
    from kctl.testing import KafkaCluster

    # mirror-failover needs a primary and a replica cluster: test_mirror.py runs it, not this one-cluster run.
    names = [n for n in args.only.split(",") if n] or [n for n in SCENARIOS if n != "mirror-failover"]
    rows: list[str] = []
    notes: list[str] = []
    plotted = False
    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as cluster:
        for name in names:
            print(f"== {name}", file=sys.stderr)
            try:
                v = drill.run(cluster.spec, cluster.state_dir, name, duration=args.duration, rate=args.rate,
                              bounces=BOUNCES.get(name, 2), hold=10.0,
                              progress=lambda m: print(m, file=sys.stderr))
            except KctlError as exc:
                rows.append(f"| {name} | {args.rate:g}/s | - | - | - | - | - | - | - | - | - | - | - |"
                            f" could not run: {exc.message.splitlines()[0]} |")
                cluster.faults.restore()
                cluster.wait_until_healthy(timeout=300)
                continue
            rows.append(row(v))
            notes += [f"{name}: {n}" for n in v.notes if "kept for inspection" not in n]
            notes += [f"{name}: {e['event']}" for e in v.events if e["event"].startswith("fault: iptables")]
            print(rows[-1])
            if name == "leader-kill" and not args.no_write:
                report.plot(v, PLOT)
                plotted = True
            if not args.no_write:  # after every scenario: an interrupted run keeps what it measured
                DOC.write_text(render(rows, notes, args, plotted), encoding="utf-8")
    text = render(rows, notes, args, plotted)
    print(text)
    if not args.no_write:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
