"""kctl.bench.cost: the process tree's CPU read from /proc, and the section it renders."""

from __future__ import annotations

import subprocess
import sys
import time

from kctl.bench.cost import median_run, render, tree_cpu

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\ninput()\n"


def test_tree_cpu_counts_a_live_grandchild() -> None:
    """A grandchild's CPU is in this process's tree while it lives, and in its parent's tree."""
    before = tree_cpu()
    # a shell that starts the busy Python and waits for it: the busy one is a grandchild of this process
    p = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{BUSY}'"], stdin=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while tree_cpu(p.pid) < 0.5 and time.monotonic() < deadline:  # the shell's own tree holds the busy child
            time.sleep(0.05)
        assert tree_cpu(p.pid) >= 0.5
        assert tree_cpu() - before >= 0.5
    finally:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.close()
        p.wait(30)


def test_the_section_puts_each_figure_beside_the_floor() -> None:
    tries = [{"tag": "shipped", "what": "the job as it ships", "batches": 4, "first_rows": 100_000,
              "start_cpu_s": 30.0 + i, "start_wall_s": 33.0, "steady_rows": 200_000, "steady_cpu_per_m": cpu,
              "steady_eps": 20_000.0 + 1000 * i, "archive_bytes_per_event": 70.0, "bench_cpu_per_m": 0.1 * (i + 1)}
             for i, cpu in enumerate((55.0, 50.0, 44.0))]
    run = median_run(tries)
    assert (run["steady_cpu_per_m"], run["steady_eps"], run["start_cpu_s"]) == (50.0, 21_000.0, 31.0)
    fig = {"when": "2026-12-05", "machine": "x86_64, 2 cores", "spark": "4.0.0", "delta": "4.0.0",
           "events": 300_000, "load": "1.0 / 1.0 / 1.0", "floor": {"cpu_per_m": 5.0, "eps": 100_000.0},
           "source": {"read": 3.0, "read_eps": 150_000.0, "parse": 15.0, "parse_eps": 80_000.0}, "runs": [run],
           "rounds": 3}
    text = render(fig)
    assert text.startswith("## Pipeline cost\n")
    assert "| the floor: confluent-kafka consumer, read + `json.loads` | 5.0 CPU-s per million (100,000 events/s) |" \
        in text
    assert ("**50.0 CPU-s per million** (median of 55.0, 50.0, 44.0; 10.0x the floor's CPU; 21,000 events/s, 0.21 of"
            " the floor's; the archive 70 bytes per event on disk; this benchmark's own process beside it 0.2, not"
            " counted)") in text
    assert "each lever run 3 times" in text
    assert "50.0 as it ships (median), not met" in text
    assert "45.0 as it ships (median), met" in render({**fig, "runs": [{**run, "steady_cpu_per_m": 45.0}]})


def test_the_batch_steps_section_names_each_step_beside_its_floor() -> None:
    from kctl.bench.batch import render as render_batch

    per = {"floor": 1.8, "counts": 17.1, "archive": 12.4, "dl_spark": 4.6, "dl_rs_jvm": 0.6, "dl_rs_py": 0.1}
    text = render_batch({"events": 200_000, "bad": 50, "rounds": 7, "per_m": per,
                         "each": {k: [v, v] for k, v in per.items()}})
    assert text.startswith("## Pipeline: a large batch's steps\n")
    assert "| the floor: the cached records scanned, their values as strings | 1.8 CPU-s per million" in text
    assert "| dead-letter (50 rows), Spark's Delta append | 4.6 CPU-s per million" in text
    assert "**0.7 CPU-s per million** (the JVM 0.6, Python 0.1; 6.6x less than Spark's append)" in text
