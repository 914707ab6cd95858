"""`make drills`: every failure drill in its long form on a fresh three-node cluster, on ZooKeeper and on KRaft,
written to docs/reliability.md (one table per metadata mode, one row per scenario) with the plot of the ZooKeeper
leader-kill run.

    python -m kctl.bench.drills [--duration 60] [--rate 1000] [--only leader-kill,...]
                                [--metadata zookeeper|kraft|both] [--no-write]

Each drill is `kctl drill run` itself (kctl.drill.run.run), against a cluster with kctl's default
settings (ZooKeeper session 4 s; on KRaft broker.session.timeout.ms 4 s; RF 3, min.insync.replicas 2). A drill
that does not hold is a row that says so; the run goes on with the next scenario. A run of one metadata mode
keeps the other mode's table of the document as it was.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kctl.model.spec import KafkaSpec

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = DOCS / "reliability.md"
PLOT = DOCS / "reliability-leader-kill.png"

# scenario -> bounces in the long form (a kill waits for the broker's ZooKeeper session to expire each time)
BOUNCES: dict[str, int] = {
    "leader-kill": 5, "leader-term": 3, "controller-kill": 3, "zk-leader-kill": 3, "zk-quorum-loss": 2,
    "broker-pause": 3, "broker-partition": 2, "slow-network": 2, "rolling-restart": 1, "baseline": 1,
}


MODES = {"zookeeper": "ZooKeeper", "kraft": "KRaft"}
# Sections another test writes (kept as they are by `make drills`): the quorum changes measured by
# tests/integration/test_kraft_quorum.py (`make test-long`).
KEPT = ("quorum",)
# On KRaft: no ZooKeeper to kill or lose; controller-kill kills the active KRaft controller (the quorum's leader).
ZOOKEEPER_ONLY = ("zk-leader-kill", "zk-quorum-loss")
HEADER = ("| scenario | rate | duration | bounces | acked | lost | duplicates | reordered | unacked present |"
          " producer errors | recovery | failover | back by itself | longest stall | leader / ZK leader changes |"
          " verdict |")


def row(v: Any) -> str:
    rec = f"{v.recovery_seconds:.1f} s" if v.recovery_seconds is not None else "-"
    back = ", ".join(f"{s:.1f} s" for s in v.self_heal_seconds) or "-"
    failover = ", ".join(f"{s:.1f} s" for s in v.failover_seconds) or "-"
    errors = ", ".join(f"{k} {n}" for k, n in v.errors.items()) or "0"
    verdict = "holds" if v.holds else "**does not hold**: " + "; ".join(v.failures)
    return (f"| {v.scenario} | {v.rate:g}/s | {v.duration_seconds:.0f} s | {v.bounces} | {v.acked} | {v.lost} |"
            f" {v.duplicates} | {v.reordered} | {v.unacked_present} | {errors} | {rec} | {failover} | {back} |"
            f" {v.longest_stall_seconds:.1f} s | {v.leader_changes} / {v.zk_leader_changes} | {verdict} |")


def _marker(mode: str) -> tuple[str, str]:
    return f"<!-- drills: {mode} -->", f"<!-- /drills: {mode} -->"


def kept_section(text: str, mode: str) -> str | None:
    """The table section of ``mode`` in an earlier document, between its markers (None if it has none)."""
    start, end = _marker(mode)
    m = re.search(re.escape(start) + r"\n(.*?)\n" + re.escape(end), text, re.S)
    return m.group(1) if m else None


def section(mode: str, rows: list[str], notes: list[str], args: argparse.Namespace) -> str:
    kafka = KafkaSpec()
    timing = (f"zookeeper.session.timeout.ms {kafka.zookeeper_session_timeout_ms / 1000:g} s: a SIGKILLed broker"
              " leaves `/brokers/ids` when its session expires"
              if mode == "zookeeper" else
              f"broker.session.timeout.ms {kafka.broker_session_timeout_ms / 1000:g} s: a silent broker is fenced"
              " then; an election among the three controllers when the active one dies")
    lines = [f"## {MODES[mode]}", "",
             f"{dt.date.today().isoformat()}, `--duration {args.duration:g} --rate {args.rate:g}` ({timing}).", "",
             HEADER, "|" + "---|" * 16, *rows, ""]
    if notes:
        lines += ["Notes:", "", *(f"- {n}" for n in dict.fromkeys(notes)), ""]
    return "\n".join(lines)


def render(sections: dict[str, str], plotted: bool) -> str:
    lines = [
        "# Reliability: failure drills",
        "",
        "Written by `make drills` (`python -m kctl.bench.drills`): every `kctl drill run` scenario in its long",
        "form against a fresh three-node cluster with kctl's default settings, on ZooKeeper and on KRaft, on this"
        f" machine ({platform.machine()}, {os.cpu_count()} cores).",
        "Each drill creates its own topic (3 partitions, RF 3, `min.insync.replicas=2`), produces with",
        "`acks=all` and idempotence, injects its fault on a schedule, heals it, waits",
        "for a healthy cluster, then reads every partition back with a fresh consumer. **lost** = acknowledged",
        "but not read back; duplicates and reordering are counted within partitions; *unacked present* =",
        "written although the producer saw no acknowledgement (allowed). Recovery = fault healed -> cluster",
        "healthy and the topic fully replicated (the longest of the bounces); failover = fault -> the killed",
        "process's role taken over (the broker out of the live brokers: ZooKeeper session expired or KRaft",
        "fencing; another KRaft controller leading), each bounce; stall = the longest time",
        "without an acknowledgement. Back by itself = fault -> the killed process serving again, started by",
        "its node's supervisor with no command run (the kill drills). A drill lasts longer than its `--duration`",
        "when its bounces do.",
        "",
    ]
    for mode in (*MODES, *KEPT):
        if mode in sections:
            start, end = _marker(mode)
            lines += [start, sections[mode], end, ""]
    if plotted:
        lines += ["## One leader-kill run (ZooKeeper)", "",
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
    ap.add_argument("--metadata", choices=["zookeeper", "kraft", "both"], default="both",
                    help="the clusters' metadata mode (default: both, ZooKeeper first)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    args = ap.parse_args(argv)
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

    from kctl.drill.scenarios import SCENARIOS

    earlier = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    sections = {m: text for m in (*MODES, *KEPT) if (text := kept_section(earlier, m)) is not None}
    plotted = PLOT.exists() and "zookeeper" in sections
    # mirror-failover needs a primary and a replica cluster: test_mirror.py runs it, not this one-cluster run.
    names = [n for n in args.only.split(",") if n] or [n for n in SCENARIOS if n != "mirror-failover"]
    modes = list(MODES) if args.metadata == "both" else [args.metadata]
    for mode in modes:
        todo = [n for n in names if mode == "zookeeper" or n not in ZOOKEEPER_ONLY]

        def write(rows: list[str], notes: list[str], drew: bool, mode: str = mode) -> None:
            nonlocal plotted
            sections[mode] = section(mode, rows, notes, args)
            plotted = plotted or drew
            if not args.no_write:  # after every scenario: an interrupted run keeps what it measured
                DOC.write_text(render(sections, plotted), encoding="utf-8")

        run_mode(mode, todo, args, write)
    text = render(sections, plotted)
    print(text)
    if not args.no_write:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC}", file=sys.stderr)
    return 0


def run_mode(mode: str, names: list[str], args: argparse.Namespace,
             write: Callable[[list[str], list[str], bool], None]) -> None:
    """The drills ``names`` on a fresh cluster of ``mode``; ``write`` gets the rows and notes so far after every
    scenario, and whether the leader-kill plot was drawn."""
    from kctl.drill import report
    from kctl.drill import run as drill
    from kctl.errors import KctlError
    from kctl.testing import KafkaCluster

    rows: list[str] = []
    notes: list[str] = []
    plotted = False
    settings: dict[str, Any] = {"metadata": "kraft"} if mode == "kraft" else {}
    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None, **settings) as cluster:
        for name in names:
            print(f"== {MODES[mode]}: {name}", file=sys.stderr)
            try:
                v = drill.run(cluster.spec, cluster.state_dir, name, duration=args.duration, rate=args.rate,
                              bounces=BOUNCES.get(name, 2), hold=10.0,
                              progress=lambda m: print(m, file=sys.stderr))
            except KctlError as exc:
                rows.append(f"| {name} | {args.rate:g}/s | - | - | - | - | - | - | - | - | - | - | - | - | - |"
                            f" could not run: {exc.message.splitlines()[0]} |")
                cluster.faults.restore()
                cluster.wait_until_healthy(timeout=300)
                write(rows, notes, plotted)
                continue
            rows.append(row(v))
            notes += [f"{name}: {n}" for n in v.notes if "kept for inspection" not in n]
            notes += [f"{name}: {e['event']}" for e in v.events if e["event"].startswith("fault: iptables")]
            print(rows[-1])
            if name == "leader-kill" and mode == "zookeeper" and not args.no_write:
                report.plot(v, PLOT)
                plotted = True
            write(rows, notes, plotted)


if __name__ == "__main__":
    sys.exit(main())
