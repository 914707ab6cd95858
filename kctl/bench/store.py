"""Benchmark of the monitor store's reads at 1 M samples (issue 44 point 18), no cluster needed.

A store in a temporary directory is filled through the monitor's own writes (:meth:`Store.add_samples` with
the windows' rows, :meth:`Store.add_group`) with ``--groups`` groups of ``--partitions`` partitions over
``--rounds`` rounds 2 s apart: by default 50 x 20 x 1000 = 1,000,000 samples, as many end-offset rows and
50,000 evaluations. Then, each the median of ``-n`` runs on the open store:

- the group page's read (what the console asks the store on each 2-second refresh of a group's page): the
  group's evaluation from its stored window (:func:`kctl.monitor.sampler.stored_status`) and its last hour of
  history;
- beside it, the floor: the same rows by bare indexed SELECTs (sqlite3 alone, no evaluation);
- `kctl lag` while the monitor runs (every group of the latest round), the console's group list (each
  group's latest evaluation), and a monitor's restart (every window read back);
- and, once, the read as it was before (every sample through a window function), for the record.

Figures are printed and written to docs/benchmarks.md ("## Monitor store reads").
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kctl.bench.doc import add_output_args, publish, table

SECTION = "## Monitor store reads"
WINDOW = 10
INTERVAL_MS = 2000


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def fill(path: Path, groups: int, partitions: int, rounds: int) -> float:
    """The store as a monitor leaves it after ``rounds`` rounds; returns the seconds per round written."""
    from kctl.monitor.sampler import GroupSnapshot, PartitionSnapshot, Windows
    from kctl.monitor.store import Store

    store = Store(path)
    store.record_lag_parameters(WINDOW, 0)
    w = Windows(size=WINDOW)
    t0_ms = int(time.time() * 1000) - rounds * INTERVAL_MS
    started = time.perf_counter()
    batch = 50
    for first in range(0, rounds, batch):
        with store.round():
            for r in range(first, min(rounds, first + batch)):
                at = t0_ms + r * INTERVAL_MS
                for g in range(groups):
                    name = f"bench-group-{g:02d}"
                    snap = GroupSnapshot(name, "STABLE", at, tuple(
                        PartitionSnapshot(f"bench-topic-{g:02d}", p, 100 * r + p, 100 * r + p + (r % 7), True)
                        for p in range(partitions)))
                    store.add_samples(name, w.observe(snap))
                    st = w.evaluate(name)
                    store.add_group(name, at, "OK", st.total_lag, "STABLE", st.complete)
        if first % 200 == 0:
            _log(f"round {first} of {rounds}")
    per_round = (time.perf_counter() - started) / rounds
    store.close()
    return per_round


def _median_ms(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def measure(path: Path, n: int, groups: int, partitions: int) -> dict[str, Any]:
    import sqlite3

    from kctl.monitor.sampler import stored_status
    from kctl.monitor.store import Store, uri

    store = Store(path, readonly=True)
    group = f"bench-group-{groups // 2:02d}"
    now_ms = store.db.execute("SELECT MAX(ts_ms) FROM groups").fetchone()[0]

    def group_page() -> None:
        judged = stored_status(store, group, window=WINDOW)
        if judged is None or len(judged.status.partitions) != partitions:
            raise RuntimeError(f"the store's window of {group} is not its {partitions} partitions: {judged}")
        store.group_history(group, now_ms - 3600 * 1000)

    bare = sqlite3.connect(uri(path, "ro"), uri=True)

    def floor() -> None:
        row = bare.execute("SELECT topic, part FROM ends WHERE grp = ? ORDER BY topic, part LIMIT 1",
                           (group,)).fetchone()
        while row is not None:
            t, p = row
            bare.execute("SELECT offset, ts_ms, lag FROM samples WHERE grp = ? AND topic = ? AND part = ?"
                         " ORDER BY ts_ms DESC LIMIT ?", (group, t, p, WINDOW)).fetchall()
            bare.execute("SELECT ts_ms, end_offset FROM ends WHERE grp = ? AND topic = ? AND part = ?"
                         " ORDER BY ts_ms DESC LIMIT ?", (group, t, p, WINDOW)).fetchall()
            row = bare.execute("SELECT topic, part FROM ends WHERE grp = ? AND topic = ? AND part > ?"
                               " ORDER BY part LIMIT 1", (group, t, p)).fetchone() \
                or bare.execute("SELECT topic, part FROM ends WHERE grp = ? AND topic > ? ORDER BY topic, part"
                                " LIMIT 1", (group, t)).fetchone()
        bare.execute("SELECT ts_ms, status, total_lag FROM groups WHERE grp = ? AND ts_ms >= ?",
                     (group, now_ms - 3600 * 1000)).fetchall()

    def every_group() -> None:
        for g in store.round_groups():
            stored_status(store, g, window=WINDOW)

    out: dict[str, Any] = {
        "samples": store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0],
        "ends": store.db.execute("SELECT COUNT(*) FROM ends").fetchone()[0],
        "evaluations": store.db.execute("SELECT COUNT(*) FROM groups").fetchone()[0],
        "size_mb": sum(f.stat().st_size for f in path.parent.glob(path.name + "*")) / 1e6,
    }
    group_page()
    floor()  # warm
    out["group_page_ms"] = _median_ms(group_page, n)
    out["floor_ms"] = _median_ms(floor, n)
    out["kctl_lag_ms"] = _median_ms(every_group, max(3, n // 4))
    out["group_list_ms"] = _median_ms(store.latest_groups, n)
    out["restart_ms"] = _median_ms(lambda: store.stored_windows(WINDOW), max(3, n // 4))
    _log("the read as it was before (every sample), once")
    t0 = time.perf_counter()
    store.db.execute(
        "SELECT grp, topic, part, offset, ts_ms, lag, end_offset FROM ("
        " SELECT *, ROW_NUMBER() OVER (PARTITION BY grp, topic, part ORDER BY ts_ms DESC, rowid DESC) AS n"
        " FROM samples) WHERE n <= ? ORDER BY grp, topic, part, ts_ms, rowid", (WINDOW,)).fetchall()
    out["before_ms"] = (time.perf_counter() - t0) * 1000
    bare.close()
    store.close()
    return out


def render(fig: dict[str, Any]) -> str:
    rows = [
        ("history in the store", f"{fig['samples']:,} samples, {fig['ends']:,} end-offset rows, "
                                 f"{fig['evaluations']:,} evaluations ({fig['groups']} groups x {fig['partitions']}"
                                 f" partitions x {fig['rounds']:,} rounds); {fig['size_mb']:.0f} MB"),
        ("a group's page: its evaluation and last hour (median)", f"{fig['group_page_ms']:.1f} ms"),
        ("floor: the same rows by bare indexed SELECTs (median)", f"{fig['floor_ms']:.1f} ms"),
        ("`kctl lag` while the monitor runs, every group (median)", f"{fig['kctl_lag_ms']:.0f} ms"),
        ("the console's group list, each group's latest evaluation (median)", f"{fig['group_list_ms']:.1f} ms"),
        ("a monitor's restart, every window read back (median)", f"{fig['restart_ms']:.0f} ms"),
        ("the read before this change: every sample through a window function (once)",
         f"{fig['before_ms'] / 1000:.1f} s"),
        (f"a round written (the benchmark's fill: {fig['groups'] * fig['partitions']:,} group partitions)",
         f"{fig['per_round_ms']:.0f} ms"),
        ("the store per round (a sample and an end offset per group partition, an evaluation per group)",
         f"{fig['size_mb'] * 1000 / fig['rounds']:.0f} kB"),
    ]
    lines = [SECTION, "",
             f"Measured by `python -m kctl.bench.store` on {fig['when']} ({fig['machine']}; load average at the end"
             f" {fig['load']}): a monitor store filled through the monitor's own writes, then read as its readers"
             f" read it, each figure the median of {fig['n']} runs on the open store (the page cache warm).", "",
             *table(("measure", "value"), rows), "",
             "A group's window is read per partition through the indexes (at most a window of samples and of end"
             " offsets each), the group lists skip through an index, and a history is bounded by its time range"
             " and thinned to 2,000 points, so these figures do not grow with the history: the retention"
             " (`monitoring.retention_hours`) bounds the file, not the reads. The group page's read is the"
             " floor's rows plus their evaluation in Python."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.store", description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("-n", type=int, default=20, help="runs per read measured")
    add_output_args(ap)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kctl-bench-store-") as tmp:
        path = Path(tmp) / "monitor.db"
        _log(f"filling {args.groups * args.partitions * args.rounds:,} samples")
        per_round = fill(path, args.groups, args.partitions, args.rounds)
        fig = measure(path, args.n, args.groups, args.partitions)
    fig.update(groups=args.groups, partitions=args.partitions, rounds=args.rounds, n=args.n,
               per_round_ms=per_round * 1000, when=dt.date.today().isoformat(),
               machine=f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
               load=" / ".join(f"{x:.2f}" for x in os.getloadavg()))
    publish(render(fig), args)


if __name__ == "__main__":
    main()
