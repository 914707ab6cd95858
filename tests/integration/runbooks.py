"""Run a runbook of docs/runbooks/ as written: every `kctl` line of its ```sh blocks, in order.

A line ``# expect: TEXT`` after a command is text that command must print (stdout or stderr);
a command may end in ``> FILE`` (its stdout is written to FILE in the working directory).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"


def runbook_steps(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected texts) for every `kctl` line in the runbook's ```sh blocks, in order."""
    steps: list[tuple[str, list[str]]] = []
    in_block = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = line.strip() == "```sh"
            continue
        if not in_block or not line.strip():
            continue
        if line.startswith("# expect:"):
            steps[-1][1].append(line.removeprefix("# expect:").strip())
        else:
            assert line.startswith("kctl "), f"runbook command not run by the test: {line!r}"
            steps.append((line, []))
    return steps


def run_runbook(name: str, spec_file: Path, cwd: Path, timeout: float = 600) -> list[str]:
    """Run docs/runbooks/NAME step by step; assert each exits 0 and prints what it expects. Returns the outputs."""
    env = {**os.environ, "KCTL_FILE": str(spec_file), "COLUMNS": "200"}
    outputs = []
    for command, expected in runbook_steps((RUNBOOKS / name).read_text()):
        argv = shlex.split(command)[1:]
        target = None
        if len(argv) >= 2 and argv[-2] == ">":
            argv, target = argv[:-2], argv[-1]
        p = subprocess.run([sys.executable, "-m", "kctl", *argv], capture_output=True, text=True, timeout=timeout,
                           env=env, cwd=cwd)
        said = p.stdout + p.stderr
        assert p.returncode == 0, f"{name}: {command}: exit {p.returncode}\n{said}"
        if target:
            (cwd / target).write_text(p.stdout)
        for text in expected:
            assert text in said, f"{name}: {command}: {text!r} not in its output:\n{said}"
        outputs.append(said)
    return outputs
