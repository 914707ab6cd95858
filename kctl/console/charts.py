"""Charts drawn on the server as SVG (no chart library in the page): a line of (time, value) points with its
axes' extremes labelled. The output is safe to put in a page as is: every text in it is escaped here."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from markupsafe import Markup

WIDTH, HEIGHT, PAD = 640, 160, 36


def _fmt(v: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"


def line(points: Sequence[tuple[float, float]], *, title: str, unit: str = "") -> Markup:
    """An SVG line chart of (unix seconds, value); a note instead of a chart when there are no points."""
    t = html.escape(title)
    if not points:
        return Markup(f'<p class="muted chart-empty">{t}: no history (the monitor keeps it: `kctl monitor start`)</p>')
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y1 = max(ys) or 1.0
    span = (x1 - x0) or 1.0
    w, hgt = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def xy(x: float, y: float) -> str:
        return f"{PAD + (x - x0) / span * w:.1f},{PAD + hgt - y / y1 * hgt:.1f}"

    path = " ".join(xy(x, y) for x, y in points)
    u = html.escape(unit)
    left = time.strftime("%H:%M:%S", time.gmtime(x0))
    right = time.strftime("%H:%M:%S", time.gmtime(x1))
    return Markup(
        f'<svg class="chart" role="img" aria-label="{t}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}"'
        f' height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
        f'<title>{t}</title>'
        f'<text x="{PAD}" y="16" font-size="12" fill="#1d2330">{t}</text>'
        f'<line x1="{PAD}" y1="{PAD + hgt}" x2="{PAD + w}" y2="{PAD + hgt}" stroke="#d8dce3"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{PAD + hgt}" stroke="#d8dce3"/>'
        f'<text x="{PAD - 4}" y="{PAD + 4}" font-size="10" text-anchor="end" fill="#5b6475">{_fmt(y1)}{u}</text>'
        f'<text x="{PAD - 4}" y="{PAD + hgt}" font-size="10" text-anchor="end" fill="#5b6475">0</text>'
        f'<text x="{PAD}" y="{HEIGHT - 8}" font-size="10" fill="#5b6475">{left} UTC</text>'
        f'<text x="{PAD + w}" y="{HEIGHT - 8}" font-size="10" text-anchor="end" fill="#5b6475">{right} UTC</text>'
        f'<polyline fill="none" stroke="#2457a6" stroke-width="1.5" points="{path}"/>'
        f'<text class="last" x="{PAD + w}" y="{PAD - 6}" font-size="11" text-anchor="end" fill="#2457a6">'
        f'{_fmt(ys[-1])}{u}</text></svg>')
