"""A deliberate start of a node's service: its preparation and supervisorctl in one exec, run here by a real sh
against a stand-in supervisorctl (no container)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kctl import contract
from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec
from kctl.runtime import supervisor
from kctl.runtime.engine.compose import ComposeEngine


class LocalEngine(ComposeEngine):
    """exec_in runs the argv here, with ``bin`` first on PATH."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.argvs: list[list[str]] = []

    def exec_in(self, spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
                timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
        self.argvs.append(argv)
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ['PATH']}"}
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        return p.returncode, p.stdout + p.stderr


@pytest.fixture()
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalEngine:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ctl = bin_dir / "supervisorctl"
    ctl.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/ctl.log\necho "$4: started"\n')
    ctl.chmod(0o755)
    monkeypatch.setattr(contract, "starts_file", lambda service: str(tmp_path / f"starts-{service}"))
    return LocalEngine(bin_dir)


def test_a_start_clears_the_crash_record_and_starts_in_one_exec(engine: LocalEngine, tmp_path: Path) -> None:
    (tmp_path / "starts-kafka").write_text("1700000000 3\n")
    out = engine.start_service(ClusterSpec(), "logger1", "kafka")
    assert out == "kafka: started" and len(engine.argvs) == 1
    assert not (tmp_path / "starts-kafka").exists()
    assert (tmp_path / "ctl.log").read_text().split() == [*supervisor.argv("start", "kafka")[1:]]


def test_a_preparation_that_fails_says_what_and_starts_nothing(engine: LocalEngine, tmp_path: Path) -> None:
    (tmp_path / "starts-kafka").mkdir()  # rm -f cannot remove a directory
    (tmp_path / "starts-kafka" / "x").write_text("")
    with pytest.raises(KctlError) as exc:
        engine.start_service(ClusterSpec(), "logger1", "kafka")
    assert "cannot clear" in exc.value.message and "before starting kafka" in exc.value.message
    assert "supervisor" in (exc.value.hint or "")
    assert not (tmp_path / "ctl.log").exists()  # supervisorctl never ran
