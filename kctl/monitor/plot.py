"""A consumer group's lag over time as a PNG (`kctl lag history GROUP --plot FILE`), with matplotlib (the optional
``plot`` extra, loaded when a chart is drawn)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kctl.extras import require

COLORS = {"OK": "tab:green", "WARN": "tab:orange", "ERR": "tab:red", "STOP": "tab:red", "STALL": "tab:purple",
          "REWIND": "tab:brown"}


def plot_history(group: str, rows: list[dict[str, Any]], path: Path) -> None:
    """Total lag per stored sample, the samples judged other than OK marked in their status's colour."""
    matplotlib = require("matplotlib", "plot")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times: list[Any] = [datetime.fromtimestamp(r["ts_ms"] / 1000, tz=timezone.utc) for r in rows]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot(times, [r["total_lag"] for r in rows], color="tab:blue", linewidth=1.2, label="total lag")
    for status, color in COLORS.items():
        pts = [(t, r["total_lag"]) for t, r in zip(times, rows, strict=True) if r["status"] == status]
        if pts and status != "OK":
            ax.scatter([t for t, _ in pts], [v for _, v in pts], color=color, s=12, label=status, zorder=3)
    ax.set_title(f"consumer group {group}: total lag")
    ax.set_ylabel("records")
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
