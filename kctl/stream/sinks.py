"""Exactly-once file outputs for a foreachBatch sink, keyed by Spark's batch id.

Spark writes a micro-batch's offsets to the checkpoint *before* running it and
replays that same batch (same id, same offsets, same rows) after a crash, until
its commit is recorded. So an output is exactly-once if writing batch ``b``
twice leaves the same result as writing it once. Two stores give that:

* :class:`BatchAppendLog` (archive, dead-letter): the batch is written to a
  private temp dir, its files are moved into place under names prefixed with
  the batch id, and a marker ``_kctl_commits/<b>`` is written last. A replay
  of a committed batch is skipped; a replay of a half-published batch first
  deletes that batch's files, then publishes again.
* :class:`SnapshotTable` (metrics): each batch writes a whole new version of
  the table (old version + the batch's partial aggregates, summed) into
  ``v<b>/`` and then atomically replaces the ``CURRENT`` pointer. A batch at or
  below the pointer's batch id is skipped. Readers always see one complete
  version with exactly one row per key.

These classes only touch the local filesystem (the driver's view of ``--out``);
Spark writes the data files.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMMITS = "_kctl_commits"
TMP = "_kctl_tmp"
CURRENT = "CURRENT"


def _bid(b: int) -> str:
    return f"{b:012d}"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class BatchAppendLog:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def committed(self, b: int) -> bool:
        return (self.root / COMMITS / _bid(b)).exists()

    def tmp_dir(self, b: int) -> Path:
        return self.root / TMP / _bid(b)

    def _files_of(self, b: int) -> list[Path]:
        prefix = f"b{_bid(b)}-"
        return [p for p in self.root.rglob(f"{prefix}*") if not any(part.startswith("_") for part in
                                                                     p.relative_to(self.root).parts)]

    def begin(self, b: int) -> Path:
        """Undo any partial earlier attempt at batch ``b``; return the temp dir to write it to."""
        for p in self._files_of(b):
            p.unlink()
        tmp = self.tmp_dir(b)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        return tmp

    def publish(self, b: int, info: dict[str, Any]) -> int:
        """Move the batch's data files into place, then write its commit marker."""
        tmp = self.tmp_dir(b)
        moved = 0
        if tmp.exists():
            for f in sorted(tmp.rglob("*.parquet")):
                dest = self.root / f.relative_to(tmp).parent / f"b{_bid(b)}-{f.name}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(f, dest)
                moved += 1
            shutil.rmtree(tmp)
        (self.root / COMMITS).mkdir(parents=True, exist_ok=True)
        _atomic_write(self.root / COMMITS / _bid(b), json.dumps({"batch_id": b, "files": moved, **info}))
        return moved

    def prune(self, below: int) -> None:
        """Forget markers of batches Spark will never replay (older than its retained log)."""
        d = self.root / COMMITS
        if not d.exists():
            return
        for m in d.iterdir():
            if m.name.isdigit() and int(m.name) < below:
                m.unlink()


@dataclass(frozen=True)
class Version:
    batch_id: int
    path: Path


class SnapshotTable:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def current(self) -> Version | None:
        p = self.root / CURRENT
        if not p.exists():
            return None
        data = json.loads(p.read_text(encoding="utf-8"))
        return Version(int(data["batch_id"]), self.root / str(data["dir"]))

    def begin(self, b: int) -> Path:
        d = self.root / f"v{_bid(b)}"
        if d.exists():
            shutil.rmtree(d)  # a half-written earlier attempt at this batch
        self.root.mkdir(parents=True, exist_ok=True)
        return d

    def commit(self, b: int, info: dict[str, Any] | None = None) -> None:
        _atomic_write(self.root / CURRENT, json.dumps({"batch_id": b, "dir": f"v{_bid(b)}", **(info or {})}))
        # keep the previous version too, for a reader that opened it just before the switch
        versions = sorted(d for d in self.root.glob("v*") if d.is_dir() and d.name <= f"v{_bid(b)}")
        for d in versions[:-2]:
            shutil.rmtree(d, ignore_errors=True)
