"""kctl mirror: MirrorMaker 2 from the clusters under `mirrors:` into this one (docs/mirroring.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect

MirrorOpt = typer.Option(None, "--mirror", "-m", help="Which mirror (its name under `mirrors:`); default the only"
                                                       " one.")


def register(app: typer.Typer) -> None:
    mirror_app = typer.Typer(help="Replicate other clusters into this one with MirrorMaker 2, watch it, fail"
                                  " consumer groups over.", no_args_is_help=True)
    mirror_app.command("up")(mirror_up)
    mirror_app.command("down")(mirror_down)
    mirror_app.command("status")(mirror_status)
    mirror_app.command("lag")(mirror_lag)
    mirror_app.command("failover")(mirror_failover)
    app.add_typer(mirror_app, name="mirror")


def mirror_up(
    timeout: float = typer.Option(180, "--timeout", min=1, help="Seconds to wait until every mirror replicates."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Start every mirror of kctl.yaml (a changed one restarts) and wait until its tasks run."""
    from kctl.mirror import loops, run
    from kctl.model.spec import state_dir_for

    # a loop: refused before any cluster
    spec = connect(file, write=True, before=lambda s: loops.check(s, file)).kctl_spec
    if not spec.mirrors:
        from kctl.mirror import config

        config.find(spec, None)
    seen = run.up(spec, file, state_dir_for(spec, file), progress=output.info, timeout=timeout)
    output.emit_change(seen, fmt, f"{spec.name}: {len(seen)} mirror(s) replicating")


def mirror_down(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Stop and remove the mirror containers (the replicas and MirrorMaker's topics stay in this cluster)."""
    from kctl.mirror import run
    from kctl.model.spec import state_dir_for

    spec = connect(file, write=True).kctl_spec
    removed = run.down(spec, state_dir_for(spec, file))
    output.emit_change({"removed": removed}, fmt, f"{spec.name}: mirrors " + ("stopped and removed" if removed
                                                                             else "were not running"))


def _statuses(file: Path, name: str | None, *, ages: bool = True) -> tuple[Any, list[Any]]:
    from kctl.mirror import config, run, status

    spec = connect(file).kctl_spec
    chosen = [config.find(spec, name)] if name is not None else (spec.mirrors or [config.find(spec, None)])
    found = run.sources(spec, file)
    return spec, [status.status(spec, m, found[m.name], ages=ages) for m in chosen]


def mirror_status(name: str = MirrorOpt, file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Each mirror: its container, connector and task states, total lag, last heartbeat and checkpoint.
    Exit 1 when one has a problem (stopped, a task failed, the source unreachable, no heartbeat)."""
    spec, sts = _statuses(file, name, ages=False)
    rows = [{"mirror": s.mirror, "health": s.health, "container": s.container,
             "source": s.source + ("" if s.source_reachable else " (unreachable)"),
             "tasks": ", ".join(f"{k} {v}" for k, v in sorted(s.tasks.items())) or "-",
             "lag": "-" if s.total_lag is None else s.total_lag,
             "heartbeat": "-" if s.heartbeat_age_seconds is None else f"{s.heartbeat_age_seconds:.0f}s ago",
             "checkpoint": "-" if s.checkpoint_age_seconds is None else f"{s.checkpoint_age_seconds:.0f}s ago"}
            for s in sts]
    footer = "\n".join(f"{s.mirror}: {p}" for s in sts for p in s.problems) or None
    output.emit(sts, fmt, rows=rows, columns=list(rows[0]) if rows else None,
                title=f"mirrors into {spec.name}", footer=footer)
    if any(s.problems for s in sts):
        raise typer.Exit(1)


def mirror_lag(name: str = MirrorOpt, file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Per replicated partition: the source's end offset, the next offset to replicate, the lag in records and
    in seconds (the age of the oldest record not yet replicated)."""
    spec, sts = _statuses(file, name)
    rows = [{"mirror": s.mirror, "source topic": x.source_topic, "partition": x.partition, "topic here": x.target_topic,
             "source end": "-" if x.source_end is None else x.source_end, "replicated to": x.replicated,
             "lag": "-" if x.lag is None else x.lag,
             "lag s": "-" if x.lag_seconds is None else round(x.lag_seconds, 1)}
            for s in sts for x in s.partitions]
    footer = "\n".join(f"{s.mirror}: {p}" for s in sts for p in s.problems) or None
    output.emit([x for s in sts for x in s.partitions], fmt, rows=rows, columns=list(rows[0]) if rows else None,
                title=f"replication lag into {spec.name}", footer=footer)


def mirror_failover(
    group: str = typer.Argument(..., help="The consumer group to move to this cluster."),
    name: str = MirrorOpt,
    yes: bool = typer.Option(False, "--yes", "-y", help="Apply without asking."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the translated offsets; change nothing."),
    untranslated: str = typer.Option("refuse", "--untranslated",
                                     help="A partition the group needs that has no checkpoint: refuse (the"
                                          " failover is refused, naming it) or earliest (from its first offset"
                                          " here: read again, never skipped)."),
    force: bool = typer.Option(False, "--force", help="Fail over even while the group has members on the source"
                                                      " or partitions without a checkpoint (said in the notes)."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Show, then set on this cluster, GROUP's offsets translated from the source by MirrorMaker's checkpoints,
    so that its consumers resume here where they stopped there. Refused while the group still has members on
    the source, or while a partition it needs has no checkpoint, unless told otherwise; afterwards MirrorMaker
    no longer syncs the group's offsets here."""
    from kctl.errors import UsageError
    from kctl.mirror import config, failover, run
    from kctl.model.spec import state_dir_for

    try:
        how = failover.Untranslated(untranslated)
    except ValueError:
        raise UsageError(f"--untranslated {untranslated!r}: not refuse or earliest",
                         hint="--untranslated earliest starts a partition without a checkpoint at its first"
                              " offset here") from None
    spec = connect(file, write=not dry_run).kctl_spec
    mirror = config.find(spec, name)
    from kctl.errors import KctlError

    try:
        source: Any = run.sources(spec, file)[mirror.name]
    except KctlError as exc:  # the source's kctl.yaml gone with it: the checkpoints alone decide
        output.info(f"the source of mirror {mirror.name} cannot be asked: {exc.message}")
        source = None
    state_dir = state_dir_for(spec, file)
    fp = failover.plan(spec, mirror, group, source=source, force=force, untranslated=how)

    def dash(v: Any) -> Any:
        return "-" if v is None else v

    rows = [{"topic": m.topic, "partition": m.partition, "source offset": dash(m.source_offset),
             "on the source now": dash(m.source_now), "translated": dash(m.translated),
             "current here": dash(m.current), "from": m.why} for m in fp.moves]
    title = f"failover of {group} from {mirror.name} to {spec.name}"
    footer = "\n".join([*(f"refused: {r}" for r in fp.refusals), *fp.notes]) or None
    if dry_run:
        output.emit(fp, fmt, rows=rows, columns=list(rows[0]), title=title + " (dry run)", footer=footer)
        return
    if not yes and not fp.refusals:
        output.emit(fp, output.Format.table, rows=rows, columns=list(rows[0]), title=title, footer=footer)
        typer.confirm(f"set these offsets of {group} on {spec.name}?", abort=True)
    fp = failover.plan(spec, mirror, group, execute=True, source=source, force=force, untranslated=how,
                       state_dir=state_dir)
    if fp.sync_stopped:
        if fp.source_reachable:
            output.info(f"{group} leaves MirrorMaker's offset sync of mirror {mirror.name}: restarting it")
            run.up(spec, file, state_dir, progress=output.info)
        else:
            output.info(f"{group} leaves MirrorMaker's offset sync of mirror {mirror.name} at its next"
                        " `kctl mirror up` (the source does not answer: MirrorMaker has nothing to sync meanwhile)")
    output.emit_change(fp, fmt, f"{spec.name}: {group} set to the translated offsets of"
                                f" {sum(1 for m in fp.moves if m.translated is not None)} partition(s); start its"
                                " consumers on this cluster")
