"""The job's progress history stays bounded however long the job runs (no JVM: the writer alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kctl.stream.config import JobConfig, state_dir
from kctl.stream.progress import HISTORY, ProgressHistory, job_progress, read_history


def _event(i: int) -> dict[str, object]:
    return {"batchId": i, "numInputRows": i * 10, "durationMs": {"triggerExecution": 5}}


def test_history_keeps_the_last_events_and_bounds_the_disk(tmp_path: Path) -> None:
    path = tmp_path / HISTORY
    h = ProgressHistory(path, keep=5)
    for i in range(23):
        h.append(_event(i))
    assert [e["batchId"] for e in h.read()] == [18, 19, 20, 21, 22]
    assert [e["batchId"] for e in h.read(last=2)] == [21, 22]
    lines_on_disk = sum(len(f.read_text().splitlines()) for f in tmp_path.iterdir())
    assert lines_on_disk <= 10
    assert sorted(f.name for f in tmp_path.iterdir()) == ["progress.1.jsonl", "progress.jsonl"]


def test_history_survives_a_restart_of_the_job(tmp_path: Path) -> None:
    path = tmp_path / HISTORY
    first = ProgressHistory(path, keep=4)
    for i in range(3):
        first.append(_event(i))
    again = ProgressHistory(path, keep=4)  # a restarted job counts what the file already holds
    for i in range(3, 10):
        again.append(_event(i))
    assert [e["batchId"] for e in again.read()] == [6, 7, 8, 9]
    assert len(path.read_text().splitlines()) <= 4


def test_reader_skips_a_line_cut_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / HISTORY
    ProgressHistory(path, keep=10).append(_event(1))
    with path.open("a") as f:
        f.write('{"batchId": 2, "numIn')
    assert [e["batchId"] for e in read_history(path)] == [1]
    assert read_history(tmp_path / "missing.jsonl") == []


def test_job_progress_reads_the_state_dir_of_a_checkpoint(tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    h = ProgressHistory(state_dir(cp) / HISTORY, keep=3)
    for i in range(7):
        h.append(_event(i))
    assert [e["batchId"] for e in job_progress(cp)] == [3, 4, 5, 6]  # what the two files hold
    assert [e["batchId"] for e in job_progress(cp, last=3)] == [4, 5, 6]


def test_keep_is_part_of_the_job_config() -> None:
    cfg = JobConfig("b:1", ["t"], "out", "cp", progress_history=42)
    assert JobConfig.from_json(cfg.to_json()).progress_history == 42
    assert JobConfig("b:1", ["t"], "out", "cp").progress_history >= 100
    with pytest.raises(ValueError):
        ProgressHistory(Path("x"), keep=0)
