"""Benchmark: commands as whole processes on a cluster with one broker stopped, against the same commands with
the exit's old wait for every librdkafka ask (``kctl.cli.main.SETTLE`` 2.0 s).

A three-node test cluster (kctl.testing), logger1's broker stopped through its supervisor (its container runs,
so its published port still takes connections); `kctl status` and `kctl topic list` timed from the host,
medians of N runs, the two sides alternating: ``python -m kctl`` as it is, and the same program with SETTLE
set back to 2.0 s before it runs. Each pair's exit code and output are compared: only the time may differ.
``python -m kctl.bench.degraded [-n N] [--no-write]`` rewrites its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from kctl.bench.doc import add_output_args, publish, table

SECTION = "## Commands on a cluster with a broker stopped"
OLD_SETTLE = 2.0
COMMANDS = (("status",), ("topic", "list"))


def _timed(argv: list[str]) -> tuple[float, int, str]:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return time.monotonic() - started, done.returncode, done.stdout


def measure(n: int, log: Callable[[str], None]) -> dict[str, dict[str, float]]:
    from kctl.runtime.engine import services
    from kctl.testing.cluster import KafkaCluster

    out: dict[str, dict[str, float]] = {}
    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as c:
        services.stop(c.spec, "logger1", "kafka")
        for command in COMMANDS:
            now_argv = [sys.executable, "-m", "kctl", *command, "-f", str(c.spec_file)]
            old_argv = [sys.executable, "-c", f"import sys, kctl.cli.main as m; m.SETTLE = {OLD_SETTLE};"
                        f" sys.argv[0] = 'kctl'; m.entry()", *command, "-f", str(c.spec_file)]
            now: list[float] = []
            old: list[float] = []
            for _ in range(n):
                t_now, rc_now, text_now = _timed(now_argv)
                t_old, rc_old, text_old = _timed(old_argv)
                if (rc_now, text_now) != (rc_old, text_old):
                    raise SystemExit(f"kctl {' '.join(command)}: the two sides differ beyond their time:"
                                     f" exit {rc_now} vs {rc_old}\n{text_now}\n---\n{text_old}")
                now.append(t_now)
                old.append(t_old)
            out[" ".join(command)] = {"now": statistics.median(now), "old": statistics.median(old), "rc": rc_now}
            log(f"kctl {' '.join(command)}: {out[' '.join(command)]}")
    return out


def render_section(r: dict[str, dict[str, float]], n: int) -> str:
    from kctl.cli.main import SETTLE

    host = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = []
    for command, m in r.items():
        rows.append((f"`kctl {command}` (exit {int(m['rc'])}), exit wait {SETTLE:g} s / {OLD_SETTLE:g} s",
                     f"{m['now']:.3f} s / {m['old']:.3f} s (ratio {m['now'] / m['old']:.2f})"))
    return "\n".join([
        SECTION,
        "",
        f"`python -m kctl.bench.degraded` on {dt.date.today().isoformat()} ({host}; load average at the end {load}):"
        f" a three-node cluster with logger1's broker stopped (its container running), each command as a whole"
        f" process from the host, median of {n} runs, the sides alternating; each pair's exit code and output"
        f" compared equal.",
        "",
        *table(("command", "time (now / with the old exit wait)"), rows),
        "",
        "A command asks the first bootstrap server, then the others when it has not answered within 0.15 s. The ask",
        "of the stopped broker's address runs on to its timeout (2 s for status), although the command had its",
        "answer from another broker within some 0.2 s: the exit waited for that ask's client to be destroyed.",
        "It now waits at most `kctl.cli.main.SETTLE`, then leaves with `os._exit` (kctl/kafka/describe.py says",
        "why no exit handler may run under a live client); a healthy cluster's asks end 10-30 ms after the answer,",
        "so its commands still leave the ordinary way.",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.degraded", description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=7, help="runs of each command on each side")
    add_output_args(ap)
    args = ap.parse_args(argv)
    r = measure(args.n, lambda m: print(f"bench: {m}", file=sys.stderr, flush=True))
    publish(render_section(r, args.n), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
