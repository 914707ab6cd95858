"""kctl console: the web console (pages and JSON API), and its users."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt
from kctl.errors import KctlError, UsageError

ConfigOpt = typer.Option(None, "--config", help="A console file naming several clusters (docs/console.md);"
                                                " without it, the console serves the cluster of --file.")


def register(app: typer.Typer) -> None:
    console_app = typer.Typer(help="The web console: clusters, topics, groups, audit log, with roles.",
                              invoke_without_command=True)
    console_app.callback()(console_run)
    user_app = typer.Typer(help="The console's users (argon2 hashes in its users file).", no_args_is_help=True)
    user_app.command("add")(user_add)
    user_app.command("remove")(user_remove)
    user_app.command("list")(user_list)
    console_app.add_typer(user_app, name="user")
    app.add_typer(console_app, name="console")


def _requires() -> None:
    try:
        import argon2  # noqa: F401
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise KctlError(f"the console needs {exc.name}, which is not installed",
                        hint="pip install 'kctl[console]'") from None


def console_run(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (other than loopback: TLS only)."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port to listen on."),
    config: Path | None = ConfigOpt,
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="PEM certificate (with --tls-key): HTTPS."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="PEM private key of --tls-cert."),
    file: Path = SpecOpt,
) -> None:
    """Serve the console (pages and /api/) until interrupted."""
    if ctx.invoked_subcommand is not None:
        return
    _requires()
    from kctl.console import server
    from kctl.console.config import load_config
    from kctl.console.users import UserStore
    from kctl.runtime.ports import port_free

    server.check_listen(host, tls_cert, tls_key)
    cfg = load_config(config, file)
    if not UserStore(cfg.users_file).users():
        raise UsageError(f"the console has no users yet ({cfg.users_file})",
                         hint="add an admin first: echo PASSWORD | kctl console user add NAME --role admin")
    if server.loopback(host) and not port_free(port):
        raise UsageError(f"port {port} is in use on 127.0.0.1", hint="pick another with --port")
    app = server.build(cfg, tls=tls_cert is not None)
    scheme = "https" if tls_cert else "http"
    output.info(f"kctl console on {scheme}://{host}:{port}/ ({len(cfg.cluster_files)} cluster(s) configured;"
                f" users {cfg.users_file}; audit log {cfg.audit_file})")
    server.serve(app, host, port, tls_cert, tls_key)


def _password() -> str:
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass("password: ")
    line = sys.stdin.readline().rstrip("\n")
    if not line:
        raise UsageError("no password on standard input", hint="echo PASSWORD | kctl console user add NAME")
    return line


def user_add(
    name: str = typer.Argument(..., help="The user's name."),
    role: str = typer.Option("viewer", "--role", help="viewer, operator or admin."),
    cluster: list[str] = typer.Option(None, "--cluster", help="Limit to this cluster (repeatable; default all)."),
    topic_prefix: list[str] = typer.Option(None, "--topic-prefix",
                                           help="Limit to topics starting with this (repeatable; default all)."),
    config: Path | None = ConfigOpt,
    file: Path = SpecOpt,
) -> None:
    """Add a console user, or change one (the password is read from standard input)."""
    _requires()
    from kctl.console.config import load_config
    from kctl.console.users import Role, UserStore, new_user

    Role.parse(role)
    cfg = load_config(config, file)
    user = new_user(name, role, _password(), cluster or [], topic_prefix or [])
    old = UserStore(cfg.users_file).put(user)
    _audit(cfg, "user.change" if old else "user.add", name, "done",
           {"role": role, "clusters": list(user.clusters), "topic_prefixes": list(user.topic_prefixes)})
    output.info(f"{'changed' if old else 'added'} console user {name} ({role}) in {cfg.users_file}"
                + ("; their sessions end" if old else ""))


def user_remove(name: str = typer.Argument(..., help="The user's name."), config: Path | None = ConfigOpt,
                file: Path = SpecOpt) -> None:
    """Remove a console user (their sessions end at their next request)."""
    _requires()
    from kctl.console.config import load_config
    from kctl.console.users import UserStore

    cfg = load_config(config, file)
    if not UserStore(cfg.users_file).remove(name):
        _audit(cfg, "user.remove", name, "failed", {}, "no such user")
        raise KctlError(f"no console user {name!r}", hint="`kctl console user list` shows them")
    _audit(cfg, "user.remove", name, "done", {})
    output.info(f"removed console user {name}")


def _audit(cfg: Any, action: str, target: str, result: str, params: dict[str, Any], message: str = "") -> None:
    """The console's audit log records the CLI's changes of its users too, as ``cli:OS-USER`` from ``cli``."""
    import getpass

    from kctl.console.audit import AuditLog

    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = str(os.getuid())
    AuditLog(cfg.audit_file).append(user=f"cli:{who}", action=action, result=result, target=target,
                                    params=params, message=message, client="cli")


def user_list(config: Path | None = ConfigOpt, file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """List the console's users (never their hashes)."""
    _requires()
    from kctl.console.config import load_config
    from kctl.console.users import UserStore

    cfg = load_config(config, file)
    rows = [u.public() for u in UserStore(cfg.users_file).users().values()]
    output.emit(rows, fmt, columns=["name", "role", "clusters", "topic_prefixes"])
