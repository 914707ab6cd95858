"""Run a runbook of docs/runbooks/ as written: its ```sh blocks, line by line, in order.

A runbook's shell blocks are its steps. Each non-empty line is one command, run by ``bash -c`` with
``kctl`` on PATH (this interpreter's ``python -m kctl``) and these variables set:

- ``KCTL_FILE``: the cluster's kctl.yaml (every kctl command picks it up, as ``-f`` would);
- ``KCTL_STATE``: the cluster's state dir (``.kctl/<name>`` next to kctl.yaml), for the Docker Compose
  and file commands a runbook may need.

Comment lines under a command say what the run must show:

- ``# expect: TEXT``: TEXT appears in the command's stdout or stderr (repeatable);
- ``# exit: N``: the command exits N (default 0);
- ``# expect on zookeeper: TEXT`` (or ``on kraft``): TEXT appears when the runbook runs on a cluster with that
  metadata mode (``run(..., metadata=...)``);
- ``# only on zookeeper`` (or ``on kraft``): the command runs only on such a cluster.

Other ``#`` lines are comments. Other fenced blocks (```yaml: a kctl.yaml excerpt) are returned by
:func:`blocks`, so a test can apply exactly what the runbook shows.

    from tests.integration import runbook
    ran = runbook.run(RUNBOOKS / "config-change.md", cluster.spec_file, state_dir=cluster.state_dir)
    ran[-1].output   # stdout + stderr of the last command
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"


@dataclass
class Step:
    command: str
    line: int  # 1-based line of the Markdown file
    expect: list[str] = field(default_factory=list)
    exit_code: int = 0
    expect_on: dict[str, list[str]] = field(default_factory=dict)  # metadata mode: texts
    only_on: str | None = None


@dataclass
class Ran:
    step: Step
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def blocks(text: str, lang: str) -> list[str]:
    """The bodies of the ```LANG fenced blocks of a Markdown text, in order."""
    out: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None and line.strip() == f"```{lang}":
                current = []
            elif current is not None:
                out.append("\n".join(current) + "\n")
                current = None
            continue
        if current is not None:
            current.append(line)
    return out


def steps(text: str) -> list[Step]:
    """The commands of a Markdown text's ```sh blocks, with what each must show."""
    out: list[Step] = []
    in_sh = in_other = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if in_sh or in_other:
                in_sh = in_other = False
            else:
                in_sh, in_other = line.strip() == "```sh", line.strip() != "```sh"
            continue
        s = line.strip()
        if not in_sh or not s:
            continue
        if s.startswith("# expect:"):
            _last(out, line, no).expect.append(s.removeprefix("# expect:").strip())
        elif s.startswith("# expect on "):
            mode, _, text = s.removeprefix("# expect on ").partition(":")
            _last(out, line, no).expect_on.setdefault(mode.strip(), []).append(text.strip())
        elif s.startswith("# only on "):
            _last(out, line, no).only_on = s.removeprefix("# only on ").strip()
        elif s.startswith("# exit:"):
            _last(out, line, no).exit_code = int(s.removeprefix("# exit:").strip())
        elif not s.startswith("#"):
            out.append(Step(s, no))
    return out


def _last(out: list[Step], line: str, no: int) -> Step:
    if not out:
        raise ValueError(f"line {no}: {line.strip()!r} comes before any command")
    return out[-1]


def _shim() -> Path:
    """A directory with a ``kctl`` that runs this interpreter's kctl (the worktree's, via PYTHONPATH)."""
    d = Path(tempfile.mkdtemp(prefix="kctl-runbook-"))
    exe = d / "kctl"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kctl "$@"\n')
    exe.chmod(0o755)
    return d


def run(path: Path, spec_file: Path, *, state_dir: Path | None = None, env: dict[str, str] | None = None,
        before: Callable[[Step], None] | None = None, check: bool = True, timeout: float = 600,
        metadata: str = "zookeeper") -> list[Ran]:
    """Run every command of the runbook at ``path`` in order, in the directory of ``spec_file``, on a cluster
    whose metadata is in ``metadata`` (zookeeper or kraft: the ``on ...`` lines that apply).

    ``before(step)`` runs ahead of each command (a test's own doing between steps, e.g. the edit of
    kctl.yaml a runbook describes). With ``check`` (the default) a command that exits otherwise than
    its ``# exit:`` line says, or misses an ``# expect:`` text, fails the test at once with its output.
    """
    shim = _shim()
    full = {**os.environ, "KCTL_FILE": str(spec_file), "COLUMNS": "200",
            "PATH": f"{shim}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    if state_dir is not None:
        full["KCTL_STATE"] = str(state_dir)
    ran: list[Ran] = []
    try:
        _run_all(path, spec_file, full, before, check, timeout, ran, metadata)
    finally:
        shutil.rmtree(shim, ignore_errors=True)
    return ran


def _run_all(path: Path, spec_file: Path, full: dict[str, str], before: Callable[[Step], None] | None,
             check: bool, timeout: float, ran: list[Ran], metadata: str) -> None:
    for step in steps(path.read_text(encoding="utf-8")):
        if step.only_on not in (None, metadata):
            continue
        if before is not None:
            before(step)
        started = time.monotonic()
        p = subprocess.run(["bash", "-c", step.command], capture_output=True, text=True, timeout=timeout,
                           env=full, cwd=spec_file.parent)
        # each step's time, in the test's captured output (pytest shows it when the test fails; `-s` always)
        print(f"{time.monotonic() - started:7.1f} s  exit {p.returncode}  {path.name}:{step.line} {step.command}")
        r = Ran(step, p.returncode, p.stdout, p.stderr)
        ran.append(r)
        if check:
            where = f"{path.name}:{step.line} `{step.command}`"
            assert r.returncode == step.exit_code, \
                f"{where}: exit {r.returncode}, the runbook says {step.exit_code}\n{r.output}"
            for text in [*step.expect, *step.expect_on.get(metadata, [])]:
                assert text in r.output, f"{where}: {text!r} not in its output:\n{r.output}"
