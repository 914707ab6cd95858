"""kctl init, render, doctor: the spec and what it renders to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, load
from kctl.errors import KctlError, SpecError


def register(app: typer.Typer) -> None:
    app.command()(init)
    app.command("render")(render_cmd)
    app.command()(bundle)
    app.command()(doctor)


def init(
    file: Path = SpecOpt,
    name: str | None = typer.Option(None, "--name", help="Cluster name [default: logger]; with a name, the"
                                                         " ports are chosen free of running clusters."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    secure: bool = typer.Option(False, "--secure", help="The secured profile: TLS, SASL/SCRAM, ACLs, ZooKeeper"
                                                        " authentication (security.enabled: true); with --kraft"
                                                        " the KRaft controllers' listener too."),
    kraft: bool = typer.Option(False, "--kraft", help="Metadata in a KRaft controller quorum from the start"
                                                      " (metadata: kraft): controller N beside broker N on each"
                                                      " node, no ZooKeeper."),
) -> None:
    """Write a kctl.yaml with every default spelled out (cluster "logger", nodes logger1..logger3)."""
    import yaml

    from kctl.cluster import identity
    from kctl.model.spec import ClusterSpec, default_spec_yaml, parse_spec, state_dir_for

    if file.exists() and not force:
        raise KctlError(f"{file} already exists", hint="pass --force to overwrite it, or -f OTHER.yaml")
    if name is not None:
        ClusterSpec(name=name)  # a bad name fails before anything is looked at
    cluster = name or "logger"
    plan = identity.plan_init(cluster, state_dir_for(ClusterSpec(name=cluster), file), pick_ports=name is not None)
    for w in plan.warnings:
        output.warn(w)
    settings: dict[str, Any] = dict(plan.settings)
    if secure:
        settings["security"] = {"enabled": True}
    if kraft:
        settings["metadata"] = "kraft"
    text = default_spec_yaml(cluster, settings)
    spec, _ = parse_spec(yaml.safe_load(text))  # what we write must load
    try:
        file.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise KctlError(f"cannot write {file}: {exc.strerror}") from None
    output.info(f"wrote {file} (cluster {cluster!r}, 3 nodes, bootstrap servers {spec.bootstrap_servers}"
                + (f", secured: SASL_SSL, ACLs{'' if kraft else ', ZooKeeper authentication'}" if secure else "")
                + (", metadata in KRaft controllers" if kraft else "")
                + "); next: `kctl render` or `kctl up`")


def render_cmd(
    file: Path = SpecOpt,
    out: Path | None = typer.Option(None, "--out", help="Directory to write to; default .kctl/<name>."),
) -> None:
    """Render zoo.cfg, myid, server.properties, log4j and the Compose file into the state dir."""
    from kctl.model.render import COMPOSE_FILE, render, write
    from kctl.model.spec import state_dir_for

    spec = load(file)
    target = out or state_dir_for(spec, file)
    rendered = render(spec, target)
    changed = write(rendered, target)
    for c in rendered.containers:
        output.info(f"{c.name}: {', '.join(c.services)} (config {c.config_hash})")
    output.info(f"rendered {len(rendered.files)} files into {target} ({len(changed)} changed)")
    typer.echo(str(target / COMPOSE_FILE))


def bundle(
    file: Path = SpecOpt,
    out: Path | None = typer.Option(None, "--out", help="Directory to write to; default <state dir>/bundle."),
) -> None:
    """engine hosts: each node as a directory that installs it on its host (systemd units, install.sh)."""
    from kctl.model.spec import state_dir_for
    from kctl.runtime.engine.bundle import require_hosts, write_bundles

    spec = load(file)
    require_hosts(spec)
    state = state_dir_for(spec, file)
    target = out or state / "bundle"
    made = write_bundles(spec, state, target, progress=output.info)
    for b in made:
        output.info(f"{b.host}: {', '.join(b.services)} ({b.files} files)")
    output.info("copy each directory to its host and run `sudo ./install.sh --start` there, or let `kctl up`"
                " install them over ssh")
    for b in made:
        typer.echo(str(b.path))


def doctor(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Check the prerequisites: Docker engine, Compose, Java, free ports, disk, memory."""
    from kctl.model.spec import ClusterSpec, state_dir_for
    from kctl.runtime import doctor as doctor_mod

    spec: ClusterSpec | None = None
    problems: list[str] = []
    if file.exists():
        try:
            spec = load(file)
        except SpecError as exc:
            problems = exc.problems
    state = state_dir_for(spec, file) if spec else Path.cwd()
    owned: list[int] = []
    if spec is not None:
        from kctl.runtime.engine.engines import running_host_ports

        owned = running_host_ports(spec)
    checks = doctor_mod.run_checks(spec, state, owned)
    if problems:
        checks.append(doctor_mod.Check("spec", False, "; ".join(problems), hint=f"fix {file}"))
    elif spec is not None:
        checks.append(doctor_mod.Check("spec", True, f"{file} is valid"))
    rows = [{"check": c.name, "ok": c.ok, "detail": c.detail, "hint": c.hint or ""} for c in checks]
    output.emit(checks, fmt, rows=rows, columns=["check", "ok", "detail", "hint"])
    if any(not c.ok and c.required for c in checks):
        raise typer.Exit(1)
