"""Start-up of `kctl status` and `kctl topic describe`: this checkout against an earlier commit, in one run.

Against one one-node test cluster (kctl.testing), each command as a whole process (``python -m kctl``, Python's
start-up, the imports and the cluster's answers included), the two checkouts alternating run by run so that the
machine's load falls on both alike; medians of N runs after a warm-up of each. Beside them, in the same run, the
floors: the interpreter alone (``python -c pass``) and the third-party imports every spec-reading command needs
(typer, pydantic, PyYAML). Also, for each side, what ``python -X importtime`` says the status path's imports
take (the sum of its top-level imports), and which heavy packages it loads.

``python -m kctl.bench.startup --before REF`` (default: main's first parent of the #45 change, 94f509b) checks the
earlier commit out into a temporary git worktree, runs, removes it, and rewrites its section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kctl.bench.doc import add_output_args, publish
from kctl.testing.cluster import KafkaCluster

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "94f509b"
TOPIC = "startup-bench"
HEAVY = ("docker", "jinja2", "asyncio", "urllib.request", "confluent_kafka", "kazoo", "cryptography", "rich")
PROBE = ("import json, sys, time\nt = time.perf_counter()\n{imports}\n"
         "print(json.dumps({{'s': time.perf_counter() - t, 'loaded': sorted(m for m in {heavy!r}"
         " if type(sys.modules.get(m)).__name__ == 'module')}}))\n")


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return took


def _env(checkout: Path) -> dict[str, str]:
    # bytecode written by the warm-up and read after it, on both sides (the variable set to anything, even "0",
    # stops the writing: each run would compile the modules again)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _imports_of_status(checkout: Path, modules: str) -> dict[str, object]:
    code = PROBE.format(imports=f"import {modules}", heavy=HEAVY)
    p = subprocess.run([sys.executable, "-c", code], env=_env(checkout), cwd=checkout, capture_output=True,
                       text=True, timeout=60, check=True)
    return dict(json.loads(p.stdout.splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=BEFORE, help="the earlier commit (default %(default)s)")
    ap.add_argument("-n", type=int, default=15, help="runs of each command on each side")
    add_output_args(ap)
    args = ap.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="kctl-startup-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.before],
                       check=True, capture_output=True)
        try:
            with KafkaCluster(nodes=1, follower_wait_ms=None) as c:
                c.create_topic(TOPIC, partitions=3)
                spec = str(c.spec_file)
                commands = {"status": ["status", "-f", spec], "describe": ["topic", "describe", TOPIC, "-f", spec]}
                sides = {"before": before, "after": ROOT}
                times: dict[tuple[str, str], list[float]] = {(s, k): [] for s in sides for k in commands}
                floors: dict[str, list[float]] = {"python": [], "imports": []}
                for checkout in sides.values():  # warm-up: bytecode compiled, caches filled
                    for argv in commands.values():
                        _timed([py, "-m", "kctl", *argv], _env(checkout), c.workdir)
                for _ in range(args.n):
                    for side, checkout in sides.items():
                        for k, argv in commands.items():
                            times[(side, k)].append(_timed([py, "-m", "kctl", *argv], _env(checkout), c.workdir))
                    floors["python"].append(_timed([py, "-c", "pass"], dict(os.environ), c.workdir))
                    floors["imports"].append(_timed([py, "-c", "import typer, pydantic, yaml"], dict(os.environ),
                                                    c.workdir))
            status_mods = {"before": "kctl.cli.cluster, kctl.health, kctl.kafka.describe",
                           "after": "kctl.cli.cluster, kctl.cluster.health, kctl.kafka.describe"}
            probes = {s: _imports_of_status(sides[s], status_mods[s]) for s in sides}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                           check=False, capture_output=True)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip() or "this checkout"
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = [
        "## Start-up after the folders became layers (issue #45)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} by `python -m kctl.bench.startup` in one run against one one-node"
        f" test cluster: each command as a whole process (`python -m kctl`), before (commit {args.before}) and"
        f" after (commit {head}) alternating run by run, median of {args.n} runs each after a warm-up, load average"
        f" {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end. The floors were measured in the same"
        " rounds.",
        "",
        "| command | before, s | after, s | after / before |",
        "|---|---:|---:|---:|",
        *(f"| `kctl {' '.join(a for a in argv if a != '-f' and not a.endswith('kctl.yaml'))}` |"
          f" {med[('before', k)]:.3f} | {med[('after', k)]:.3f} | {med[('after', k)] / med[('before', k)]:.2f} |"
          for k, argv in commands.items()),
        f"| floor: `python -c pass` | {statistics.median(floors['python']):.3f} | | |",
        f"| floor: `python -c 'import typer, pydantic, yaml'` | {statistics.median(floors['imports']):.3f} | | |",
        "",
        "The status path's imports in a fresh interpreter (`import kctl.cli.cluster`, the health module and"
        " `kctl.kafka.describe`), timed inside the process, and which heavy packages they load for real (a"
        " `kctl.deferred` stand-in does not count):",
        "",
        "| side | imports, s | heavy packages loaded |",
        "|---|---:|---|",
        *(f"| {s} | {float(str(p['s'])):.3f} | {', '.join(p['loaded']) or '-'} |"  # type: ignore[arg-type]
          for s, p in probes.items()),
    ]
    publish("\n".join(lines), args)


if __name__ == "__main__":
    main()
