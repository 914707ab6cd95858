"""kctl group: consumer groups: list, describe with lag, reset offsets, delete."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kctl import output
from kctl.cli.common import BootstrapOpt, OutputOpt, SpecOpt, connect
from kctl.errors import KctlError, UsageError
from kctl.output import Format

if TYPE_CHECKING:
    from kctl.kafka.client import Target
    from kctl.model.spec import ClusterSpec


def register(app: typer.Typer) -> None:
    group_app = typer.Typer(help="Consumer, share and streams groups: list, describe with lag, reset offsets,"
                                 " delete.",
                            no_args_is_help=True)
    group_app.command("list")(group_list)
    group_app.command("describe")(group_describe)
    group_app.command("reset-offsets")(group_reset)
    group_app.command("delete")(group_delete)
    app.add_typer(group_app, name="group")


def _share_spec(bootstrap: str | None, target: Target) -> ClusterSpec | None:
    """The cluster's spec when this command also covers share groups: kctl's own cluster (Kafka's tool runs in one
    of its nodes), on a release that has them (Kafka 4.1+ on KRaft); else None."""
    from kctl.kafka import share_groups

    spec = target.spec
    return spec if bootstrap is None and spec is not None and share_groups.supported(spec) else None


def _tool_kind(bootstrap: str | None, target: Target, group: str) -> tuple[str, ClusterSpec] | None:
    """("share" | "streams", spec) when ``group`` is a share or a streams group of kctl's own cluster; else None."""
    from kctl.monitor import sources

    spec = _share_spec(bootstrap, target)
    kind = sources.tool_kind(spec, group)
    return (kind, spec) if kind is not None and spec is not None else None


def _not_streams(bootstrap: str | None, target: Target, group: str, verb: str) -> ClusterSpec | None:
    """The cluster's spec when ``group`` is one of its share groups, None for a classic or consumer group; a
    streams group is refused: its offsets and its application's internal topics (changelogs, repartition topics)
    go together, which Kafka's own tool does and kctl does not yet. A group the AdminClient describes as live is a
    classic or consumer group: Kafka's tools are not asked (two JVMs in a node)."""
    from kctl.kafka import groups

    if _share_spec(bootstrap, target) is None:
        return None
    try:
        if groups.describe(target, group).state != "DEAD":
            return None
    except KctlError:
        pass  # not a group the AdminClient knows: a share or streams group, or none
    kind = _tool_kind(bootstrap, target, group)
    if kind is not None and kind[0] == "streams":
        what = ("--reset-offsets --input-topic TOPIC --to-earliest --dry-run (then --execute, which also deletes"
                " the application's internal topics)" if verb == "reset-offsets" else "--delete")
        raise UsageError(f"{group!r} is a streams group: kctl describes it but does not "
                         + ("reset its offsets" if verb == "reset-offsets" else "delete it") + " yet",
                         hint=f"stop the Kafka Streams application, then run Kafka's own tool in a node:"
                              f" kafka-streams-groups.sh --bootstrap-server ... --group {group} {what}")
    return kind[1] if kind is not None else None


def group_list(bootstrap: str | None = BootstrapOpt, file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """List groups (classic, consumer and, on Kafka 4.1+ on KRaft, share and streams groups) and their state."""
    from kctl.kafka import groups
    from kctl.monitor import sources

    target = connect(file, bootstrap)
    res = groups.list_groups(target)
    spec = _share_spec(bootstrap, target)
    if spec is not None:  # librdkafka's ListGroups leaves share and streams groups out: Kafka's tools list them
        found = sources.list_all(target, spec)
        res = sorted([*res, *(groups.GroupSummary(g, found.states[g], kind, False) for g, kind in found.types.items()
                              if kind in (sources.SHARE, sources.STREAMS))], key=lambda g: g.group)
    output.emit(res, fmt, columns=["group", "state"], wide_columns=["type", "simple"],
                raw="\n".join(g.group for g in res))


def group_describe(
    group: str = typer.Argument(..., help="Group id."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """State, members, and per partition: committed offset, log-end offset and lag (a share group: each
    share-partition's start offset and lag; a streams group: its members' tasks)."""
    from kctl.kafka import consumer_epochs, groups, streams_groups
    from kctl.monitor import sources

    target = connect(file, bootstrap)
    found = sources.describe_typed(target, _share_spec(bootstrap, target), group)
    if isinstance(found, streams_groups.StreamsGroupDescription):
        st = found
        tasks = "; ".join(f"{m.client_id}@{m.process} [{', '.join(m.active) or '-'}]"
                          + (f" standby [{', '.join(m.standby)}]" if m.standby else "") for m in st.members)
        output.emit(st, fmt, rows=[output.to_plain(p) for p in st.partitions],
                    columns=["topic", "partition", "committed", "log_end", "lag"], title=f"streams group {st.group}",
                    footer=f"group {st.group} (streams): {st.state}, coordinator {st.coordinator}, {len(st.members)}"
                           f" member(s), total lag {st.total_lag}" + (f"\nmembers (active tasks): {tasks}" if tasks
                                                                      else ""))
        return
    if not isinstance(found, groups.GroupDescription):
        s = found
        members = "; ".join(f"{m.client_id}@{m.host} [{', '.join(m.assignment) or '-'}]" for m in s.members)
        output.emit(s, fmt, rows=[output.to_plain(p) for p in s.partitions],
                    columns=["topic", "partition", "start_offset", "lag"], title=f"share group {s.group}",
                    footer=f"group {s.group} (share): {s.state}, coordinator {s.coordinator}, {len(s.members)}"
                           f" member(s), total lag {s.total_lag}" + (f"\nmembers: {members}" if members else ""))
        return
    d = found
    own = target.spec if bootstrap is None else None
    if d.type == "consumer" and own is not None and consumer_epochs.supported(own):
        try:
            consumer_epochs.attach(own, d)
        except KctlError as exc:
            output.warn(f"the group's epochs are not known: {exc.message}")
    members = "; ".join(f"{m.client_id}@{m.host} [{', '.join(m.assignment) or '-'}]"
                        + (f" epoch {m.member_epoch}" if m.member_epoch is not None else "") for m in d.members)
    epochs = (f", group epoch {d.group_epoch}, target assignment epoch {d.target_assignment_epoch}"
              if d.group_epoch is not None else "")
    footer = (f"group {d.group} ({d.type}): {d.state}, coordinator {d.coordinator}, {len(d.members)} member(s), "
              f"total lag {d.total_lag}{epochs}" + (f"\nmembers: {members}" if members else ""))
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
    spec = _not_streams(bootstrap, target, group, "reset-offsets")
    if spec is not None:
        from kctl.kafka import share_groups

        sp = share_groups.reset_offsets(spec, group, topic, chosen[0], to_offset, to_datetime, execute)
        output.emit(sp, fmt, rows=sp.moves, columns=["topic", "partition", "target"],
                    title=f"share group {sp.group}: start offsets reset to {sp.strategy}",
                    footer="applied" if sp.executed else "dry run: nothing changed; pass --execute to apply")
        return
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
    """Delete a consumer or share group and its offsets (it must have no members)."""
    from kctl.kafka import groups

    target = connect(file, bootstrap, write=True)
    spec = _not_streams(bootstrap, target, group, "delete")
    if spec is not None:
        from kctl.kafka import share_groups

        share_groups.delete(spec, group)
        output.info(f"deleted share group {group}")
        return
    groups.delete(target, group)
    output.info(f"deleted consumer group {group}")
