"""Operating a running cluster: zk, topic, config, group (issue 4)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt
from kctl.cli.main import app
from kctl.cli.spec_cmds import load
from kctl.errors import UsageError
from kctl.output import Format

BootstrapOpt = typer.Option(None, "--bootstrap-server", help="host:port,... instead of the spec's EXTERNAL listeners.")

zk_app = typer.Typer(help="ZooKeeper: four-letter words on each server, and znodes through kazoo.",
                     no_args_is_help=True)
topic_app = typer.Typer(help="Topics: create, list, describe, add partitions, delete.", no_args_is_help=True)
config_app = typer.Typer(help="Dynamic configs of brokers, topics, clients and users (kafka-configs).",
                         no_args_is_help=True)
group_app = typer.Typer(help="Consumer groups: list, describe with lag, reset offsets, delete.",
                        no_args_is_help=True)
app.add_typer(zk_app, name="zk")
app.add_typer(topic_app, name="topic")
app.add_typer(config_app, name="config")
app.add_typer(group_app, name="group")


# ----- zk: four-letter words ------------------------------------------------------------


def _word_command(word: str, doc: str) -> Callable[..., None]:
    def cmd(
        node: str = typer.Option("all", "--node", "-n", help="loggerN, a node id, or all."),
        timeout: float = typer.Option(3.0, "--timeout", help="Seconds to wait for each server."),
        file: Path = SpecOpt,
        fmt: Format = typer.Option(Format.table, "--output", "-o", help="table, wide, json, yaml or raw."),
    ) -> None:
        from kctl.zk import words

        spec = load(file)
        results = words.run(spec, word, node, timeout)
        _emit_words(word, results, fmt)
        for r in results:
            if r.explanation:
                output.warn(f"{r.node}: {r.explanation}")
        if any(not r.ok for r in results):
            raise typer.Exit(1)

    cmd.__doc__ = doc
    return cmd


def _emit_words(word: str, results: list[Any], fmt: Format) -> None:
    from kctl.zk import fourlw

    def raw_text() -> str:
        if len(results) == 1:
            return str(results[0].text or results[0].error or "")
        return "\n".join(f"== {r.node} ({r.address}) ==\n{(r.text or r.error or '').rstrip()}" for r in results)

    if fmt in (Format.json, Format.yaml):
        output.emit(results, fmt)
        return
    if fmt is Format.raw or word not in fourlw.PARSED:
        output.emit(results, Format.raw, raw=raw_text())
        return
    if word in ("srvr", "stat"):
        rows = [{"node": r.node, "address": r.address, **r.fields, "error": r.error or r.explanation}
                for r in results]
        output.emit(results, fmt, rows=rows,
                    columns=["node", "mode", "zxid", "node_count", "connections", "outstanding", "latency_avg"],
                    wide_columns=["address", "version", "received", "sent", "latency_min", "latency_max", "error"])
        if word == "stat" and fmt is Format.wide:
            for r in results:
                output.stdout.print(f"{r.node} clients: " + ("; ".join(r.fields.get("clients", [])) or "-"))
        return
    # mntr, conf, envi: one row per key, one column per server
    keys: list[str] = []
    for r in results:
        keys += [k for k in r.fields if k not in keys]
    rows = [{"key": k, **{r.node: r.fields.get(k) for r in results}} for k in keys]
    output.emit(results, fmt, rows=rows, columns=["key", *[r.node for r in results]])


for _w in __import__("kctl.zk.words", fromlist=["DESCRIPTIONS"]).DESCRIPTIONS.items():
    zk_app.command(_w[0])(_word_command(*_w))


# ----- zk: znodes ----------------------------------------------------------------------------


@zk_app.command("ls")
def zk_ls(path: str = typer.Argument("/", help="Znode path."), file: Path = SpecOpt,
          fmt: Format = OutputOpt) -> None:
    """List the children of a znode (zkCli.sh ls)."""
    from kctl.zk import znodes

    spec = load(file)
    with znodes.connect(spec) as zk:
        children = znodes.ls(zk, path)
    output.emit({"path": path, "children": children}, fmt, rows=[{"child": c} for c in children],
                columns=["child"], raw="\n".join(children))


@zk_app.command("get")
def zk_get(path: str = typer.Argument(..., help="Znode path."), file: Path = SpecOpt,
           fmt: Format = OutputOpt) -> None:
    """Data and stat of a znode (zkCli.sh get -s); JSON data is parsed."""
    from kctl.zk import znodes

    spec = load(file)
    with znodes.connect(spec) as zk:
        node = znodes.get(zk, path)
    rows = [{"field": "data", "value": node.data}, *({"field": k, "value": v} for k, v in node.stat.items())]
    output.emit(node, fmt, rows=rows, columns=["field", "value"], raw=node.data or "")


@zk_app.command("tree")
def zk_tree(path: str = typer.Argument("/", help="Where to start."),
            depth: int = typer.Option(3, "--depth", "-d", min=0, max=20, help="Levels below PATH."),
            data: bool = typer.Option(False, "--data", help="Include each znode's data."),
            file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """Walk the znode tree (e.g. /brokers/topics/T/partitions/P/state, /controller, /config)."""
    from kctl.zk import znodes

    spec = load(file)
    with znodes.connect(spec) as zk:
        entries = znodes.tree(zk, path, depth, with_data=data)
    base = entries[0].depth if entries else 0
    rows = [{"znode": "  " * (e.depth - base) + (e.path.rsplit("/", 1)[-1] or "/") if e.depth else e.path,
             "children": e.children, "bytes": e.data_length, "ephemeral": e.ephemeral,
             "data": e.data} for e in entries]
    cols = ["znode", "children", "bytes", "ephemeral"] + (["data"] if data else [])
    output.emit(entries, fmt, rows=rows, columns=cols, raw="\n".join(e.path for e in entries))


# ----- topics ----------------------------------------------------------------------------------


def _pairs(items: list[str] | None) -> dict[str, str]:
    from kctl.kafka.configs import parse_pairs

    return parse_pairs(items or [])


@topic_app.command("create")
def topic_create(
    name: str = typer.Argument(..., help="Topic name."),
    partitions: int = typer.Option(..., "--partitions", "-p", help="Number of partitions."),
    replication_factor: int = typer.Option(..., "--replication-factor", "-r", help="Replicas per partition."),
    config: list[str] = typer.Option(None, "--config", "-c", help="Topic config key=value (repeatable)."),
    if_not_exists: bool = typer.Option(False, "--if-not-exists", help="Succeed if the topic exists."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Create a topic (kafka-topics.sh --create)."""
    from kctl.kafka import topics

    spec = load(file)
    res = topics.create(spec, name, partitions, replication_factor, _pairs(config), if_not_exists, bootstrap)
    _emit_change(res, fmt, f"{res.action} topic {res.topic}: {res.detail}")


def _emit_change(res: Any, fmt: Format, line: str) -> None:
    if fmt in (Format.json, Format.yaml):
        output.emit(res, fmt)
    else:
        output.info(line)


@topic_app.command("list")
def topic_list(
    internal: bool = typer.Option(False, "--internal", help="Include internal topics (__consumer_offsets...)."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """List topics (kafka-topics.sh --list)."""
    from kctl.kafka import topics

    spec = load(file)
    res = topics.list_topics(spec, internal, bootstrap)
    output.emit(res, fmt, columns=["name", "partitions", "replication_factor", "under_replicated"],
                wide_columns=["internal"], raw="\n".join(t.name for t in res))


@topic_app.command("describe")
def topic_describe(
    name: str = typer.Argument(..., help="Topic name."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Partitions (leader, replicas, ISR, offline, under-replicated) and non-default configs."""
    from kctl.kafka import topics

    spec = load(file)
    d = topics.describe(spec, name, bootstrap)
    data = {**output.to_plain(d), "under_replicated": d.under_replicated, "offline": d.offline}
    rows = [output.to_plain(p) for p in d.partitions]
    configs = ", ".join(f"{c.key}={c.value} ({c.source})" for c in d.configs) or "-"
    footer = (f"topic {d.name}: {d.partition_count} partition(s), replication factor {d.replication_factor}, "
              f"{d.under_replicated} under-replicated, {d.offline} offline\nconfigs: {configs}")
    output.emit(data, fmt, rows=rows,
                columns=["partition", "leader", "replicas", "isr", "under_replicated", "offline"],
                title=f"topic {d.name} (id {d.topic_id})", footer=footer)


@topic_app.command("alter")
def topic_alter(
    name: str = typer.Argument(..., help="Topic name."),
    partitions: int = typer.Option(..., "--partitions", "-p", help="New total number of partitions (only up)."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Add partitions to a topic (kafka-topics.sh --alter --partitions)."""
    from kctl.kafka import topics

    spec = load(file)
    res = topics.add_partitions(spec, name, partitions, bootstrap)
    _emit_change(res, fmt, f"{res.topic}: {res.detail}")


@topic_app.command("delete")
def topic_delete(
    name: str = typer.Argument(..., help="Topic name."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Delete a topic and its data."""
    from kctl.kafka import topics

    spec = load(file)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"refusing to delete {name!r} without confirmation", hint="pass --yes")
        typer.confirm(f"delete topic {name!r} and all its data?", abort=True)
    res = topics.delete(spec, name, bootstrap)
    _emit_change(res, fmt, f"deleted topic {res.topic}")


# ----- configs ------------------------------------------------------------------------------------

_BROKER = typer.Option(None, "--broker", help="A broker id (kafka-configs --entity-type brokers --entity-name).")
_BROKER_DEFAULT = typer.Option(False, "--broker-default", help="The cluster-wide broker default (--entity-default).")
_TOPIC = typer.Option(None, "--topic", help="A topic.")
_CLIENT = typer.Option(None, "--client", help="A client id (quotas).")
_USER = typer.Option(None, "--user", help="A user principal (quotas).")


@config_app.command("describe")
def config_describe(
    broker: int | None = _BROKER, broker_default: bool = _BROKER_DEFAULT, topic: str | None = _TOPIC,
    client: str | None = _CLIENT, user: str | None = _USER,
    all_keys: bool = typer.Option(False, "--all", help="Every key, Kafka defaults included."),
    key: list[str] = typer.Option(None, "--key", "-k", help="Only this key (repeatable)."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Per key: effective value, where it comes from, and the broker's dynamic update mode."""
    from kctl.kafka import configs

    spec = load(file)
    ent = configs.entity_from(broker, broker_default, topic, client, user)
    d = configs.describe(spec, ent, all_keys, key or None, bootstrap)
    rows = [{"key": r.key, "value": "(sensitive)" if r.sensitive else r.value, "source": r.source,
             "update_mode": r.update_mode,
             "precedence": " > ".join(f"{configs.source_name(la.source)}={_null(la.value)}" for la in r.layers)}
            for r in d.rows]
    cols = ["key", "value", "source"] + (["update_mode"] if ent.kind.startswith("broker") else [])
    output.emit(d, fmt, rows=rows, columns=cols, wide_columns=["precedence"], title=d.entity,
                footer=None if d.rows else f"no {'dynamic ' if ent.kind in ('broker-default',) else ''}configs"
                                           f" set on {d.entity}")


@config_app.command("set")
def config_set(
    pairs: list[str] = typer.Argument(..., help="key=value ..."),
    broker: int | None = _BROKER, broker_default: bool = _BROKER_DEFAULT, topic: str | None = _TOPIC,
    client: str | None = _CLIENT, user: str | None = _USER,
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Set dynamic configs (incremental: other dynamic keys are kept)."""
    from kctl.kafka import configs

    spec = load(file)
    ent = configs.entity_from(broker, broker_default, topic, client, user)
    res = configs.set_configs(spec, ent, configs.parse_pairs(pairs), bootstrap)
    _emit_change(res, fmt, f"{res.entity}: set " + ", ".join(f"{k}={v}" for k, v in res.keys.items()))


@config_app.command("delete")
def config_delete(
    keys: list[str] = typer.Argument(..., help="Keys to remove; the next level of precedence applies again."),
    broker: int | None = _BROKER, broker_default: bool = _BROKER_DEFAULT, topic: str | None = _TOPIC,
    client: str | None = _CLIENT, user: str | None = _USER,
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Delete dynamic configs (kafka-configs --alter --delete-config)."""
    from kctl.kafka import configs

    spec = load(file)
    ent = configs.entity_from(broker, broker_default, topic, client, user)
    res = configs.delete_configs(spec, ent, keys, bootstrap)
    _emit_change(res, fmt, f"{res.entity}: deleted {', '.join(res.keys)}")


# ----- consumer groups ---------------------------------------------------------------------------


@group_app.command("list")
def group_list(bootstrap: str | None = BootstrapOpt, file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """List consumer groups and their state."""
    from kctl.kafka import groups

    spec = load(file)
    res = groups.list_groups(spec, bootstrap)
    output.emit(res, fmt, columns=["group", "state"], wide_columns=["type", "simple"],
                raw="\n".join(g.group for g in res))


@group_app.command("describe")
def group_describe(
    group: str = typer.Argument(..., help="Group id."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """State, members, and per partition: committed offset, log-end offset and lag."""
    from kctl.kafka import groups

    spec = load(file)
    d = groups.describe(spec, group, bootstrap)
    members = "; ".join(f"{m.client_id}@{m.host} [{', '.join(m.assignment) or '-'}]" for m in d.members)
    footer = (f"group {d.group}: {d.state}, coordinator {d.coordinator}, {len(d.members)} member(s), "
              f"total lag {d.total_lag}" + (f"\nmembers: {members}" if members else ""))
    output.emit(d, fmt, rows=[output.to_plain(p) for p in d.partitions],
                columns=["topic", "partition", "committed", "log_end", "lag", "client_id"],
                wide_columns=["consumer_id", "host"], title=f"group {d.group}", footer=footer)


@group_app.command("reset-offsets")
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
        raise UsageError("pick exactly one of --to-earliest, --to-latest, --to-offset N, --to-datetime ISO")
    spec = load(file)
    plan = groups.reset_offsets(spec, group, topic, chosen[0], to_offset, to_datetime, execute, bootstrap)
    footer = ("applied" if plan.executed else "dry run: nothing changed; pass --execute to apply")
    output.emit(plan, fmt, rows=[output.to_plain(m) for m in plan.moves],
                columns=["topic", "partition", "current", "target", "earliest", "latest", "note"],
                title=f"group {plan.group}: reset to {plan.strategy}", footer=footer)


@group_app.command("delete")
def group_delete(
    group: str = typer.Argument(..., help="Group id."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
) -> None:
    """Delete a consumer group and its committed offsets (it must have no members)."""
    from kctl.kafka import groups

    spec = load(file)
    groups.delete(spec, group, bootstrap)
    output.info(f"deleted consumer group {group}")


def _null(v: str | None) -> str:
    return "null" if v is None else v
