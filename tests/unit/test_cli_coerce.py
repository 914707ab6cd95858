"""kctl.cli.coerce gives the values and error messages of Typer's own (pydantic) coercion."""

from __future__ import annotations

import enum
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer._coercion import build_runtime_param as typer_build
from typer.testing import CliRunner

from kctl.cli import coerce
from kctl.output import Format


class Color(str, enum.Enum):
    red = "red"
    blue = "blue"


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def cmd(name: str = typer.Argument(...), n: int | None = typer.Option(None, "--n"),
            x: float = typer.Option(30.0, "--x"), f: Path = typer.Option(Path("kctl.yaml"), "--f"),
            o: Format = typer.Option(Format.table, "--o"), c: Color = typer.Option(Color.red, "--c"),
            r: int = typer.Option(1, "--r", min=1, max=5), w: float = typer.Option(0, "--w", min=0),
            h: float = typer.Option(1.5, "--h", max=2.5), cl: int = typer.Option(3, "--cl", min=1, max=5, clamp=True),
            tags: list[str] | None = typer.Option(None, "--tag"),
            flag: bool = typer.Option(False, "--flag")) -> None:
        typer.echo(repr((name, n, x, f, o, c, r, w, h, cl, tags, flag)))

    return app


CASES = [[], ["--n", "5"], ["--n", " 7 "], ["--n", "1_000"], ["--n", "5.0"], ["--n", "+3"], ["--n", "-2"],
         ["--n", "5.5"], ["--n", "x"], ["--n", "0x10"], ["--n", ""], ["--x", "1e3"], ["--x", "inf"],
         ["--x", "x"], ["--x", " 2 "], ["--x", ""], ["--f", "a/b.yaml"], ["--f", "-"], ["--o", "json"],
         ["--o", "JSON"], ["--o", "nope"], ["--c", "blue"], ["--c", "green"], ["--r", "9"], ["--r", "3"],
         ["--r", "0"], ["--r", "x"], ["--w", "-1"], ["--w", "0.5"], ["--w", "nan"], ["--h", "3"], ["--h", "2.5"],
         ["--cl", "9"], ["--tag", "a", "--tag", "b"], ["--flag"], ["--n", "٣"], ["--x", "٣"]]


def _run(args: list[str], plain: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    import typer.core

    with monkeypatch.context() as m:
        m.setattr(typer.core, "build_runtime_param", typer_build)
        if plain:
            assert coerce.install()
        r = CliRunner().invoke(_app(), ["nm", *args])
    return r.exit_code, r.output


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) or "defaults" for c in CASES])
def test_same_values_and_messages_as_typer(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(args, True, monkeypatch) == _run(args, False, monkeypatch)


@pytest.mark.parametrize("value,want", [("5", 5), (" 5 ", 5), ("5.00", 5), (5.0, 5), (b"12", 12), (True, 1)])
def test_to_int(value: Any, want: int) -> None:
    assert coerce.to_int(value) == want


@pytest.mark.parametrize("value", ["5.5", "x", "", "1e3", 2.5])
def test_to_int_refuses(value: Any) -> None:
    with pytest.raises(ValueError, match="valid integer"):
        coerce.to_int(value)


@pytest.mark.parametrize("value", [True, False, 0, 1, 2, "", " ", "yes", "No", " TRUE ", "off", "t", "x", "2",
                                   b"on", None, 1.0])
def test_to_bool_as_typer(value: Any) -> None:
    from typer._adapters import build_adapter
    from typer.models import OptionInfo

    adapter = build_adapter(bool, OptionInfo())
    try:
        want: Any = adapter.validate_python(value)
    except ValueError as exc:
        want = exc.errors()[0]["msg"]  # type: ignore[attr-defined]
    try:
        got: Any = coerce.to_bool(value)
    except ValueError as exc:
        got = str(exc)
    assert got == want


def test_to_float() -> None:
    assert coerce.to_float("1e3") == 1000.0 and coerce.to_float(3) == 3.0
    with pytest.raises(ValueError, match="valid number"):
        coerce.to_float("x")


def test_a_command_run_imports_no_pydantic() -> None:
    # Click converts the options in command-line order and stops at the bad --max, before the command
    # runs: str, float, enum and Path options were converted, and Typer's pydantic adapters never built.
    code = ("import contextlib, io, sys\nfrom kctl.cli.main import main\nerr = io.StringIO()\n"
            "with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):\n"
            "    main(['consume', 'T', '--timeout', '1.5', '-o', 'json', '-f', 'x.yaml', '--max', 'x'])\n"
            "assert 'valid integer' in err.getvalue(), err.getvalue()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic' or m == 'typer._adapters'))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(coerce.__file__).parents[2])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"
