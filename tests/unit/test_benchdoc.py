"""docs/benchmarks.md sections: each benchmark rewrites its own section and leaves the others."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kctl.bench.doc import DOC, add_output_args, publish, replace_section, table, write_section


def test_replace_keeps_other_sections_in_place() -> None:
    doc = "# Benchmarks\n\n## Pipeline\n\npipeline text\n\n## Node image\n\nold\n\n## Later\n\nlater text\n"
    new = replace_section(doc, "## Node image\n\nnew numbers\n")
    assert "old" not in new and "new numbers" in new
    assert new.index("## Pipeline") < new.index("## Node image") < new.index("## Later")
    assert "pipeline text" in new and "later text" in new


def test_append_and_create(tmp_path: Path) -> None:
    appended = replace_section("# Benchmarks\n\n## Pipeline\n\nx\n", "## Node image\n\ny\n")
    assert appended.endswith("## Node image\n\ny\n") and "## Pipeline\n\nx\n" in appended
    assert replace_section("", "## Node image\n\ny\n").startswith("# Benchmarks\n\n## Node image")
    p = tmp_path / "b.md"
    write_section("## Produce and consume\n\nn\n", p)
    write_section("## Produce and consume\n\nm\n", p)
    assert p.read_text() == "# Benchmarks\n\n## Produce and consume\n\nm\n"


def test_every_benchmark_publishes_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ap = argparse.ArgumentParser()
    add_output_args(ap)
    doc = tmp_path / "b.md"
    publish("## Node image\n\nfirst\n", ap.parse_args(["--docs", str(doc), "--no-write"]))
    assert not doc.exists() and "first" in capsys.readouterr().out
    publish("## Node image\n\nsecond\n", ap.parse_args(["--docs", str(doc)]))
    assert doc.read_text() == "# Benchmarks\n\n## Node image\n\nsecond\n"
    assert ap.parse_args([]).docs == DOC


def test_benchmark_tables_are_markdown_tables() -> None:
    from kctl.bench import stream, up

    run = {"events_per_s": 500.0, "batches": 4, "batch_s": 1.5, "first_batch_s": 3.0, "first_batch_rows": 20000}
    fig = {"when": "d", "machine": "m", "spark": "4.0.0", "delta": "4.0.0", "master": "local[2]",
           "driver_memory": "768m", "shuffle": 4, "events": 10, "avg_bytes": 300, "load": "1.0", "floor": 1000.0,
           "spark_read": {"read": 900.0, "parse": 600.0}, "job": run, "archive_only": run, "metrics_only": run,
           "cap": 20000, "sweep": [(5000, run)],
           "sweep_events": 60000,
           "latency": [{"trigger": "1 seconds", "rate": 200.0, "measured": 6000, "p50_s": 2.0, "p99_s": 3.5,
                        "first_batch_s": 2.5, "first_batch_rows": 600}],
           "batch_cost": {"10": 1.0, "10000": 1.2, "sp1": 1.0, "sp2": 1.1, "sp4": 1.3}}
    from kctl.bench import jvm

    lifecycle = {"kctl_up": 20.0, "ups": [19.0, 20.0, 21.0], "floor": 16.0, "peak_mb": 900.0, "status_up_ms": 40.0,
                 "status_down_ms": 90.0, "jvm_floor": 4.0, "quick_up": 15.0, "quick_ups": [14.0, 15.0, 16.0],
                 "bare_up": 18.0, "bare_ups": [17.0, 18.0, 19.0],
                 "stages": {"every ZooKeeper answers srvr with a Mode": 2.0, "every broker registered": 3.0}}
    starts = {"zookeeper on": [0.7, 0.8, 0.6], "zookeeper off": [1.0, 0.9, 1.1], "kafka on": [2.0, 2.2, 2.4],
              "kafka off": [4.0, 3.8, 4.2]}
    for section in (stream.render(fig), up.render_section(lifecycle), jvm.render_section(starts)):
        rows = [line for line in section.splitlines() if line.startswith("|")]
        assert rows[:2] == ["| measure | value |", "|---|---|"]
        assert len(rows) >= 6 and all(line == "|---|---|" or (line.count(" | ") == 1 and line.endswith(" |"))
                                      for line in rows[2:])
    assert "| **ratio job / floor** | **0.50** |" in stream.render(fig)
    assert "| 900 events/s (0.90 of the floor) |" in stream.render(fig)
    assert "trigger 1 seconds, 600 rows; JVM and Spark start excluded) | 2.5 s |" in stream.render(fig)
    assert "| **ratio 10,000 / 10 windows** | **1.20** |" in stream.render(fig)
    assert "| ratio kctl / floor | 1.25 |" in up.render_section(lifecycle)
    assert "| ratio `kctl up` / one node's JVMs alone | 5.00 |" in up.render_section(lifecycle)
    assert "| each `kctl up` | 19.0, 20.0, 21.0 s |" in up.render_section(lifecycle)
    assert "| ratio C1-only / default | 0.75 |" in up.render_section(lifecycle)
    assert "| ratio monitoring off / default | 0.90 |" in up.render_section(lifecycle)
    assert "| stage | median |\n|---|---|\n| every ZooKeeper answers srvr with a Mode | 2.00 s |" in \
        up.render_section(lifecycle)
    assert "| ratio with / without (kafka) | 0.55 |" in jvm.render_section(starts)
    assert "| the same without archives | 5.00 s |" in jvm.render_section(starts)
    assert table(("a", "b"), [("x", "1")]) == ["| a | b |", "|---|---|", "| x | 1 |"]


def test_the_console_section_says_which_pages_miss_the_target() -> None:
    from kctl.bench import console

    rows = [{"path": "/clusters/C/topics", "median_ms": 120.0, "max_ms": 150.0, "bytes": 90_000},
            {"path": "/clusters/C", "median_ms": 420.0, "max_ms": 500.0, "bytes": 5_000}]
    text = console.render_section(rows, {"load": "1.0 / 1.0 / 1.0"}, 5)
    assert text.startswith("## Console\n")
    assert "| `/clusters/C/topics` | 120 | 150 | 90,000 | yes |" in text
    assert "| `/clusters/C` | 420 | 500 | 5,000 | **no** |" in text
    assert "1 of 2 pages within 300 ms (median); the slowest is `/clusters/C` at 420 ms." in text


def test_the_degraded_commands_section_shows_both_sides_and_their_ratio() -> None:
    from kctl.bench import degraded

    section = degraded.render_section({"status": {"now": 0.9, "old": 2.25, "rc": 1}}, 7)
    assert section.startswith("## Commands on a cluster with a broker stopped\n")
    assert "median of 7 runs" in section
    assert "| `kctl status` (exit 1), exit wait 0.5 s / 2 s | 0.900 s / 2.250 s (ratio 0.40) |" in section
