"""The ``kctl`` command: the root Typer app and the one list of command modules.

Each command module ``kctl/cli/<noun>.py`` defines ``register(app)``, which adds
its commands or sub-apps; it never imports this module. Command modules import
only typer, kctl.cli.common, kctl.output and kctl.errors at module level: the
domain (Docker, kazoo, confluent-kafka, the spec model...) is imported inside
the command that uses it, so that a command pays only for its own imports.
``tests/unit/test_cli_imports.py`` holds that line.
"""

from __future__ import annotations

import copy
import os
import sys
from types import ModuleType

# pydantic looks for plugins in every installed distribution's entry points when the
# first model is built (~30 ms with pyspark and friends installed); kctl uses none.
# A user who does want a plugin can set the variable themselves.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer  # noqa: E402

from kctl import __version__
from kctl.cli import (
    change,
    clients,
    cluster,
    config,
    console,
    drill,
    features,
    group,
    migrate,
    mirror,
    monitor,
    node,
    quorum,
    reassign,
    restart,
    security,
    spec,
    stream,
    swarm,
    topic,
    zk,
)
from kctl.cli.coerce import install as _plain_coercion
from kctl.errors import KctlError

_plain_coercion()  # str/int/float/Path/enum options without Typer's per-parameter pydantic adapters

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


# The order of ``kctl --help``.
COMMAND_MODULES: tuple[ModuleType, ...] = (spec, cluster, zk, topic, config, group, monitor, console, clients,
                                           security, stream,
                                           restart, change, reassign, node, migrate, features, quorum, mirror, drill,
                                           swarm)

for _module in COMMAND_MODULES:
    _module.register(app)


def invoked(args: list[str]) -> typer.Typer:
    """The app with only the command that runs, when the arguments name one.

    Typer turns every registered command into a Click command on each call (about 70
    signatures read and converted); the one that runs is enough. No command, help or a
    name that matches none keeps the whole tree, for the listing and Click's suggestions.
    """
    from typer.main import get_command_name

    name = next((a for a in args if not a.startswith("-")), None)
    if name is None or "--help" in args[:args.index(name)] or "-h" in args[:args.index(name)]:
        return app
    commands = [c for c in app.registered_commands
                if (c.name or get_command_name(c.callback.__name__ if c.callback else "")) == name]
    groups = [g for g in app.registered_groups
              if (g.name or (g.typer_instance.info.name if g.typer_instance else None)) == name]
    if not commands and not groups:
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


# Start-up builds tens of thousands of long-lived objects (modules, classes, the command tree, the
# spec model) and no garbage: collecting while it runs finds nothing and costs about a tenth of a
# quick command's time. Collection comes back after half a second, for the commands that run longer.
GC_BACK_AFTER = 0.5


def quiet_gc() -> None:
    import gc
    import threading

    gc.disable()
    back = threading.Timer(GC_BACK_AFTER, gc.enable)
    back.daemon = True
    back.start()


# How long the process waits, after the command, for librdkafka clients still asking in the
# background (kctl.kafka.describe's hedged asks) to be destroyed before it exits. A healthy cluster's asks end
# within some 10-30 ms of the answer; an ask to a stopped broker runs on to its timeout, which the command no
# longer needs (the answer came from another broker, or the failure early): past this, os._exit. At 2 s, a
# `kctl status` with one broker stopped ended 1.8 s after its answer.
SETTLE = 0.5


def entry() -> None:
    """The ``kctl`` program: :func:`main`, then an exit that no live librdkafka client can crash.

    The interpreter's exit handlers (OpenSSL's among them) must not run while a client's threads still
    work: when an ask outlasts :data:`SETTLE`, the process leaves with ``os._exit`` and the command's code.
    """
    try:
        main()
        code: str | int | None = 0
    except SystemExit as exc:
        code = exc.code
    describe = sys.modules.get("kctl.kafka.describe")
    if describe is not None and not describe.settle(SETTLE):
        if isinstance(code, str):
            print(code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    quiet_gc()
    try:
        args = list(sys.argv[1:] if argv is None else argv)
        rv = invoked(args)(args=args, standalone_mode=False)
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
    except BrokenPipeError:
        # The reader went away (`kctl logs ... | head`): nothing more to say, and nowhere to say it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
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
