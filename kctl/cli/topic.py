"""kctl topic: create, list, describe, add partitions, delete."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import BootstrapOpt, OutputOpt, SpecOpt, connect
from kctl.errors import UsageError
from kctl.output import Format


def register(app: typer.Typer) -> None:
    topic_app = typer.Typer(help="Topics: create, list, describe, add partitions, delete.", no_args_is_help=True)
    topic_app.command("create")(topic_create)
    topic_app.command("list")(topic_list)
    topic_app.command("describe")(topic_describe)
    topic_app.command("alter")(topic_alter)
    topic_app.command("delete")(topic_delete)
    app.add_typer(topic_app, name="topic")


def topic_create(
    name: str = typer.Argument(..., help="Topic name."),
    partitions: int | None = typer.Option(None, "--partitions", "-p",
                                          help="Number of partitions [default: the cluster's num.partitions]."),
    replication_factor: int | None = typer.Option(
        None, "--replication-factor", "-r", help="Replicas per partition [default: the cluster's"
                                                 " default.replication.factor]."),
    config: list[str] = typer.Option(None, "--config", "-c", help="Topic config key=value (repeatable)."),
    if_not_exists: bool = typer.Option(False, "--if-not-exists", help="Succeed if the topic exists."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Create a topic (kafka-topics.sh --create)."""
    from kctl.kafka import topics
    from kctl.kafka.configs import parse_pairs

    target = connect(file, bootstrap, write=True)
    res = topics.create(target, name, partitions, replication_factor, parse_pairs(config or []), if_not_exists)
    output.emit_change(res, fmt, f"{res.action} topic {res.topic}: {res.detail}")


def topic_list(
    internal: bool = typer.Option(False, "--internal", help="Include internal topics (__consumer_offsets...)."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """List topics (kafka-topics.sh --list)."""
    from kctl.kafka import topics

    res = topics.list_topics(connect(file, bootstrap), internal)
    output.emit(res, fmt, columns=["name", "partitions", "replication_factor", "under_replicated"],
                wide_columns=["internal"], raw="\n".join(t.name for t in res))


def topic_describe(
    name: str = typer.Argument(..., help="Topic name."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Partitions (leader, replicas, ISR, offline, under-replicated) and non-default configs."""
    from kctl.kafka import topics

    d = topics.describe(connect(file, bootstrap), name)
    data = {**output.to_plain(d), "under_replicated": d.under_replicated, "offline": d.offline}
    rows = [output.to_plain(p) for p in d.partitions]
    configs = ", ".join(f"{c.key}={c.value} ({c.source})" for c in d.configs) or "-"
    footer = (f"topic {d.name}: {d.partition_count} partition(s), replication factor {d.replication_factor}, "
              f"{d.under_replicated} under-replicated, {d.offline} offline\nconfigs: {configs}")
    output.emit(data, fmt, rows=rows,
                columns=["partition", "leader", "replicas", "isr", "under_replicated", "offline"],
                title=f"topic {d.name} (id {d.topic_id})", footer=footer)


def topic_alter(
    name: str = typer.Argument(..., help="Topic name."),
    partitions: int = typer.Option(..., "--partitions", "-p", help="New total number of partitions (only up)."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Add partitions to a topic (kafka-topics.sh --alter --partitions)."""
    from kctl.kafka import topics

    res = topics.add_partitions(connect(file, bootstrap, write=True), name, partitions)
    output.emit_change(res, fmt, f"{res.topic}: {res.detail}")


def topic_delete(
    name: str = typer.Argument(..., help="Topic name."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Delete a topic and its data."""
    from kctl.kafka import topics

    target = connect(file, bootstrap, write=True)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"refusing to delete {name!r} without confirmation", hint="pass --yes")
        typer.confirm(f"delete topic {name!r} and all its data?", abort=True)
    res = topics.delete(target, name)
    output.emit_change(res, fmt, f"deleted topic {res.topic}")
