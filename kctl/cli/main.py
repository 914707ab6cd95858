"""The ``kctl`` command: a thin Typer app; each area registers its own commands."""

from __future__ import annotations

import os
import sys

import typer

from kctl import __version__
from kctl.errors import KctlError

app = typer.Typer(
    name="kctl",
    help="Operate ZooKeeper-based Apache Kafka clusters on Docker Compose, and the Spark job that consumes them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show tracebacks and debug detail."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    if verbose:
        os.environ["KCTL_VERBOSE"] = "1"


def _register() -> None:
    # Each module adds its commands to ``app``; imported here so that a missing
    # optional area never breaks the others.
    from kctl.cli import clients, cluster, spec_cmds  # noqa: F401

    clients.register(app)

    for mod in ("ops", "stream"):
        try:
            __import__(f"kctl.cli.{mod}")
        except ModuleNotFoundError as exc:  # area not built yet
            if exc.name != f"kctl.cli.{mod}":
                raise


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        rv = app(args=argv, standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except KctlError as exc:
        _report(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the one place that turns surprises into a clean exit
        # Usage errors from the CLI parser (Typer vendors Click; match on behaviour, not on the module).
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if os.environ.get("KCTL_VERBOSE"):
            raise
        typer.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        typer.echo("hint: run again with -v for the traceback, and `kctl doctor` to check prerequisites", err=True)
        sys.exit(1)


def _report(exc: KctlError) -> None:
    if os.environ.get("KCTL_VERBOSE"):
        import traceback

        traceback.print_exception(exc)
    typer.echo(f"error: {exc.message}", err=True)
    if exc.hint:
        typer.echo(f"hint: {exc.hint}", err=True)
