"""kctl group: consumer groups: list, describe with lag, reset offsets, delete."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import BootstrapOpt, OutputOpt, SpecOpt, connect
from kctl.errors import UsageError
from kctl.output import Format


def register(app: typer.Typer) -> None:
    group_app = typer.Typer(help="Consumer groups: list, describe with lag, reset offsets, delete.",
                            no_args_is_help=True)
    group_app.command("list")(group_list)
    group_app.command("describe")(group_describe)
    group_app.command("reset-offsets")(group_reset)
    group_app.command("delete")(group_delete)
    app.add_typer(group_app, name="group")


def group_list(bootstrap: str | None = BootstrapOpt, file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """List consumer groups and their state."""
    from kctl.kafka import groups

    res = groups.list_groups(connect(file, bootstrap))
    output.emit(res, fmt, columns=["group", "state"], wide_columns=["type", "simple"],
                raw="\n".join(g.group for g in res))


def group_describe(
    group: str = typer.Argument(..., help="Group id."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """State, members, and per partition: committed offset, log-end offset and lag."""
    from kctl.kafka import groups

    d = groups.describe(connect(file, bootstrap), group)
    members = "; ".join(f"{m.client_id}@{m.host} [{', '.join(m.assignment) or '-'}]" for m in d.members)
    footer = (f"group {d.group} ({d.type}): {d.state}, coordinator {d.coordinator}, {len(d.members)} member(s), "
              f"total lag {d.total_lag}" + (f"\nmembers: {members}" if members else ""))
    output.emit(d, fmt, rows=[output.to_plain(p) for p in d.partitions],
                columns=["topic", "partition", "committed", "log_end", "lag", "client_id"],
                wide_columns=["consumer_id", "host"], title=f"group {d.group}", footer=footer)


def group_reset(
    group: str = typer.Argument(..., help="Group id."),
    topic: str = typer.Option(..., "--topic", "-t", help="Topic whose partitions are reset."),
    to_earliest: bool = typer.Option(False, "--to-earliest"),
    to_latest: bool = typer.Option(False, "--to-latest"),
    to_offset: int | None = typer.Option(None, "--to-offset", help="Absolute offset (clamped to the log)."),
    to_datetime: str | None = typer.Option(None, "--to-datetime", help="ISO 8601; naive means UTC."),
    execute: bool = typer.Option(False, "--execute", help="Apply; without it this is a dry run."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Move a group's committed offsets on one topic (dry run unless --execute)."""
    from kctl.kafka import groups

    chosen = [s for s, on in (("earliest", to_earliest), ("latest", to_latest),
                              ("offset", to_offset is not None), ("datetime", to_datetime is not None)) if on]
    if len(chosen) != 1:
        raise UsageError("pick exactly one of --to-earliest, --to-latest, --to-offset N, --to-datetime ISO",
                         hint=f"e.g. `kctl group reset-offsets {group} --topic {topic} --to-earliest` (a dry run"
                              " until --execute)")
    target = connect(file, bootstrap, write=True)
    plan = groups.reset_offsets(target, group, topic, chosen[0], to_offset, to_datetime, execute)
    footer = ("applied" if plan.executed else "dry run: nothing changed; pass --execute to apply")
    output.emit(plan, fmt, rows=[output.to_plain(m) for m in plan.moves],
                columns=["topic", "partition", "current", "target", "earliest", "latest", "note"],
                title=f"group {plan.group}: reset to {plan.strategy}", footer=footer)


def group_delete(
    group: str = typer.Argument(..., help="Group id."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
) -> None:
    """Delete a consumer group and its committed offsets (it must have no members)."""
    from kctl.kafka import groups

    groups.delete(connect(file, bootstrap, write=True), group)
    output.info(f"deleted consumer group {group}")
