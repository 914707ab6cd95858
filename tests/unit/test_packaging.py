"""`pip install kctl` is the core CLI; pyspark and pyarrow come only with the extras.

The fast tests read pyproject.toml and run the CLI in a subprocess where the optional
packages cannot be imported. The slow one (`make package`) installs kctl without extras
into a fresh virtualenv and runs the commands an operator would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import tomllib

from kctl.errors import KctlError
from kctl.extras import EXTRAS, require

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = {"pyspark", "delta-spark", "pyarrow", "deltalake", "duckdb"}
# their import names
MODULES = {"delta" if d == "delta-spark" else d for d in OPTIONAL}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def _project() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    assert isinstance(project, dict)
    return project


def test_core_dependencies_exclude_the_heavy_optional_ones() -> None:
    core = {_name(r) for r in _project()["dependencies"]}  # type: ignore[union-attr]
    assert {"typer", "docker", "confluent-kafka", "kazoo"} <= core
    assert not core & OPTIONAL


def test_extras_in_pyproject_match_kctl_extras() -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    for extra, packages in EXTRAS.items():
        assert {_name(r) for r in extras[extra]} == set(packages), extra


def test_require_names_the_extra() -> None:
    with pytest.raises(KctlError) as err:
        require("kctl_absent_optional_module.sub", "stream")
    assert "kctl_absent_optional_module" in err.value.message
    assert err.value.hint and "pip install 'kctl[stream]'" in err.value.hint
    assert require("json", "stream") is json


# Runs the CLI in a child whose imports of the optional packages fail, as after `pip install kctl`.
_BLOCKED = """
import sys
for name in {optional!r}:
    sys.modules[name] = None  # import raises ImportError
from kctl.cli.main import main
sys.argv = ["kctl", *sys.argv[1:]]
main()
"""


def _cli_without_extras(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = _BLOCKED.format(optional=sorted(MODULES))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_core_cli_works_without_the_extras(tmp_path: Path) -> None:
    for args in (["--help"], ["init"], ["render"], ["stream", "--help"], ["topic", "--help"]):
        proc = _cli_without_extras(tmp_path, *args)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert (tmp_path / ".kctl" / "logger" / "compose.yaml").is_file()


def test_stream_submit_without_pyspark_says_which_extra(tmp_path: Path) -> None:
    proc = _cli_without_extras(tmp_path, "stream", "submit", "-b", "127.0.0.1:1", "--topic", "t")
    assert proc.returncode == 1
    assert "pyspark is not installed" in proc.stderr and "kctl[stream]" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_fresh_install_without_extras(tmp_path: Path) -> None:
    """A real `pip install` of this checkout, no extras (pip's cache keeps it to about half a minute)."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], env=env, check=True, timeout=600)
    installed = json.loads(subprocess.run([str(py), "-m", "pip", "list", "--format", "json"], env=env,
                                          capture_output=True, text=True, check=True).stdout)
    assert not {p["name"].lower() for p in installed} & OPTIONAL
    kctl = str(env_dir / "bin" / "kctl")
    work = tmp_path / "work"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kctl, *args], cwd=work, env={**env, "NO_COLOR": "1"}, capture_output=True,
                              text=True, timeout=120, check=False)

    for args in (["--help"], ["init"], ["render"], ["stream", "--help"]):
        proc = run(*args)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert (work / ".kctl" / "logger" / "logger1" / "conf" / "server.properties").is_file()
    doctor = run("doctor", "-o", "json")
    assert doctor.returncode in (0, 1), doctor.stderr  # 1: a prerequisite missing here, still an answer
    assert json.loads(doctor.stdout)
    submit = run("stream", "submit", "-b", "127.0.0.1:1", "--topic", "t")
    assert submit.returncode == 1
    assert "kctl[stream]" in submit.stderr and "Traceback" not in submit.stderr
