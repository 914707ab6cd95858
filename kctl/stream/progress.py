"""The job's recent StreamingQueryProgress events, on disk and bounded.

The job records every progress event (``kctl stream status`` shows the last one,
the benchmark sums a run's micro-batches), but a job that runs for weeks at a 1 s
trigger must not grow a file without end. The history is two files: ``NAME.jsonl``
takes appends; when it holds ``keep`` lines it replaces ``NAME.1.jsonl`` and a new
one starts. So the disk holds at most ``2 * keep`` events, and the last ``keep``
are always there. Appending costs one line, never a rewrite.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kctl.stream.config import state_dir

HISTORY = "progress.jsonl"


class ProgressHistory:
    """Append-only, bounded to the last ``keep`` events (up to ``2 * keep`` on disk)."""

    def __init__(self, path: Path, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, not {keep}")
        self.path = path
        self.previous = _previous(path)
        self.keep = keep
        self._lines = _count_lines(path)

    def append(self, event: dict[str, Any]) -> None:
        if self._lines >= self.keep:
            os.replace(self.path, self.previous)
            self._lines = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._lines += 1

    def read(self, last: int | None = None) -> list[dict[str, Any]]:
        """The recorded events, oldest first: the last ``last`` of them (at most ``keep``)."""
        return read_history(self.path, self.keep if last is None else min(last, self.keep))


def _previous(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".jsonl") + ".1.jsonl")


def read_history(path: Path, last: int | None = None) -> list[dict[str, Any]]:
    """The events on disk under ``path``, oldest first; only the last ``last`` when given."""
    events: list[dict[str, Any]] = []
    for f in (_previous(path), path):
        try:
            text = f.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a crash mid-write
    if last is None:
        return events
    return events[-last:] if last > 0 else []


def job_progress(checkpoint: str | Path, last: int | None = None,
                 record: str | Path | None = None) -> list[dict[str, Any]]:
    """The recent progress events of the job that runs (or ran) with ``checkpoint`` (``record``: its
    :attr:`JobConfig.record_dir`, if it names one)."""
    return read_history(state_dir(checkpoint, record) / HISTORY, last)


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
