"""A drill's timeline for people: a compact text strip for the terminal, and a picture (``--plot``).

Both are pure renderings of a :class:`kctl.drill.run.Verdict`'s timeline; the picture needs
matplotlib (``kctl[plot]``), imported only here and only when asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kctl.extras import require

BARS = " ▁▂▃▄▅▆▇█"
WIDTH = 60


def _buckets(rows: Sequence[dict[str, Any]], width: int) -> list[list[dict[str, Any]]]:
    per = max(1, -(-len(rows) // width))
    return [list(rows[i:i + per]) for i in range(0, len(rows), per)]


def in_fault(second: float, faults: Sequence[dict[str, Any]], end: float) -> bool:
    return any(f["start"] <= second + 1 and (f["end"] if f["end"] is not None else end) >= second for f in faults)


def text_timeline(timeline: Sequence[dict[str, Any]], faults: Sequence[dict[str, Any]],
                  width: int = WIDTH) -> str:
    """Four aligned strips, one column per second (or per few seconds on long drills):
    acknowledged records, errors, p99 latency, and where a fault was in place."""
    if not timeline:
        return "(no timeline)"
    buckets = _buckets(timeline, width)
    per = len(buckets[0])
    acked = [sum(r["acked"] for r in b) for b in buckets]
    errors = [sum(r["errors"] for r in b) for b in buckets]
    p99 = [max((r["p99_ms"] or 0.0) for r in b) for b in buckets]
    end = float(len(timeline))
    top_a, top_p = max(acked) or 1, max(p99) or 1.0

    def bar(v: float, top: float) -> str:
        return BARS[0] if v <= 0 else BARS[max(1, round(v / top * (len(BARS) - 1)))]

    fault_row = "".join("#" if any(in_fault(r["second"], faults, end) for r in b) else "." for b in buckets)
    lines = [
        f"acked/{per}s  |{''.join(bar(a, top_a) for a in acked)}| max {max(acked)}",
        f"errors     |{''.join('x' if e else ' ' for e in errors)}| total {sum(errors)}",
        f"p99 ms     |{''.join(bar(p, top_p) for p in p99)}| max {max(p99):.0f}",
        f"fault      |{fault_row}| # = fault in place",
        f"seconds    0{' ' * max(0, len(buckets) - 1 - len(str(len(timeline))))}{len(timeline)}",
    ]
    return "\n".join(lines)


def plot(verdict: Any, path: Path) -> Path:
    """Acknowledged records per second and p99 latency, the faults shaded; written to ``path`` (PNG)."""
    mpl = require("matplotlib", "plot")
    mpl.use("Agg")  # no display
    import matplotlib.pyplot as plt

    rows = verdict.timeline
    xs = [r["second"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(10, 5.5))
    ax1.bar(xs, [r["acked"] for r in rows], width=1.0, color="#3b78b0", label="acknowledged")
    ax1.bar(xs, [r["errors"] for r in rows], width=1.0, color="#c0392b", label="errors",
            bottom=[r["acked"] for r in rows])
    ax1.set_ylabel("records / s")
    ax2.plot(xs, [r["p99_ms"] if r["p99_ms"] is not None else float("nan") for r in rows], color="#8e44ad")
    ax2.set_ylabel("p99 latency (ms)")
    ax2.set_xlabel("seconds since the load started")
    end = float(len(rows))
    for ax in (ax1, ax2):
        for f in verdict.faults:
            ax.axvspan(f["start"], f["end"] if f["end"] is not None else end, color="#f5b041", alpha=0.3)
    ax1.legend(loc="lower left")
    rec = f"{verdict.recovery_seconds:.1f}s" if verdict.recovery_seconds is not None else "-"
    fig.suptitle(f"kctl drill {verdict.scenario}: {verdict.acked} acked, {verdict.lost} lost,"
                 f" {verdict.duplicates} duplicates; recovery {rec}, longest stall {verdict.longest_stall_seconds:.1f}s"
                 " (shaded: fault in place)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
