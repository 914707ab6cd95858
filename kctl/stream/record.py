"""The stream job's own record, read by the submitter, ``kctl stream status``/``stop`` and ``optimize``:
its files in the state dir beside Spark's checkpoint (:func:`kctl.stream.config.state_dir`) and whether
the process they name still runs. The lowest module of kctl.stream's state: it imports none of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def pid_alive(pid: int | None) -> bool:
    """Whether the job's process (the pid its job.json records) still runs."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def read_json(p: Path) -> Any:
    """A JSON file of the job's state dir; None when it is missing or half-written."""
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
