"""The console's server-drawn SVG charts: escaped text, the extremes labelled, a note when there is no data."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kctl.console import charts


def test_a_line_chart_is_valid_svg_with_its_last_value_and_no_unescaped_text() -> None:
    svg = charts.line([(1000.0, 0.0), (1060.0, 1500.0), (1120.0, 250.0)], title="lag <of> 'g'")
    root = ET.fromstring(str(svg))
    assert root.tag.endswith("svg")
    texts = [t.text for t in root.iter() if t.tag.endswith("text")]
    assert "lag <of> 'g'" in texts and "1.5k" in texts and "250" in texts  # the top of the axis, the last value
    points = root.find("{http://www.w3.org/2000/svg}polyline").get("points").split()  # type: ignore[union-attr]
    assert len(points) == 3
    ys = [float(p.split(",")[1]) for p in points]
    assert ys[1] < ys[2] < ys[0]  # higher values are drawn higher


def test_no_points_is_a_note_not_a_chart() -> None:
    out = str(charts.line([], title="total <lag>"))
    assert "<svg" not in out and "total &lt;lag&gt;" in out and "kctl monitor start" in out
