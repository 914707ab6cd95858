"""kctl config: dynamic configs of brokers, topics, clients and users (kafka-configs)."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import BootstrapOpt, OutputOpt, SpecOpt, connect
from kctl.output import Format

_BROKER = typer.Option(None, "--broker", help="A broker id (kafka-configs --entity-type brokers --entity-name).")
_BROKER_DEFAULT = typer.Option(False, "--broker-default", help="The cluster-wide broker default (--entity-default).")
_TOPIC = typer.Option(None, "--topic", help="A topic.")
_CLIENT = typer.Option(None, "--client", help="A client id (quotas).")
_USER = typer.Option(None, "--user", help="A user principal (quotas).")


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Dynamic configs of brokers, topics, clients and users (kafka-configs).",
                             no_args_is_help=True)
    config_app.command("describe")(config_describe)
    config_app.command("set")(config_set)
    config_app.command("delete")(config_delete)
    app.add_typer(config_app, name="config")


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

    target = connect(file, bootstrap)
    ent = configs.entity_from(broker, broker_default, topic, client, user)
    d = configs.describe(target, ent, all_keys, key or None)
    rows = [{"key": r.key, "value": "(sensitive)" if r.sensitive else r.value, "source": r.source,
             "update_mode": r.update_mode,
             "precedence": " > ".join(f"{configs.source_name(la.source)}={_null(la.value)}" for la in r.layers)}
            for r in d.rows]
    cols = ["key", "value", "source"] + (["update_mode"] if ent.kind.startswith("broker") else [])
    output.emit(d, fmt, rows=rows, columns=cols, wide_columns=["precedence"], title=d.entity,
                footer=None if d.rows else f"no {'dynamic ' if ent.kind == 'broker-default' else ''}configs"
                                           f" set on {d.entity}")
    for w in d.warnings:  # stderr, so -o json stays parseable; the JSON carries them too
        output.warn(w)


def config_set(
    pairs: list[str] = typer.Argument(..., help="key=value ..."),
    broker: int | None = _BROKER, broker_default: bool = _BROKER_DEFAULT, topic: str | None = _TOPIC,
    client: str | None = _CLIENT, user: str | None = _USER,
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Set dynamic configs (incremental: other dynamic keys are kept)."""
    _change("set", pairs, broker, broker_default, topic, client, user, bootstrap, file, fmt)


def config_delete(
    keys: list[str] = typer.Argument(..., help="Keys to remove; the next level of precedence applies again."),
    broker: int | None = _BROKER, broker_default: bool = _BROKER_DEFAULT, topic: str | None = _TOPIC,
    client: str | None = _CLIENT, user: str | None = _USER,
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Delete dynamic configs (kafka-configs --alter --delete-config)."""
    _change("delete", keys, broker, broker_default, topic, client, user, bootstrap, file, fmt)


def _change(what: str, args: list[str], broker: int | None, broker_default: bool, topic: str | None,
            client: str | None, user: str | None, bootstrap: str | None, file: Path, fmt: Format) -> None:
    from kctl.kafka import configs

    target = connect(file, bootstrap, write=True)
    ent = configs.entity_from(broker, broker_default, topic, client, user)
    if what == "set":
        res = configs.set_configs(target, ent, configs.parse_pairs(args))
    else:
        res = configs.delete_configs(target, ent, args)
    keys = ", ".join(k if v is None else f"{k}={v}" for k, v in res.keys.items())
    output.emit_change(res, fmt, f"{res.entity}: {res.action} {keys}")


def _null(v: str | None) -> str:
    return "null" if v is None else v
