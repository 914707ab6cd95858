"""kctl features: Kafka's finalized features on a cluster on KRaft (kafka-features.sh), each node's release levels,
and their raise one feature at a time, kraft.version held unless asked for (docs/cluster.md, "Features")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect

IncludeOpt = typer.Option(None, "--include", help="A held feature to plan too: kraft.version (turns a static"
                                                  " controller quorum dynamic, KIP-853; raised by `kctl quorum"
                                                  " make-dynamic`).")


def register(app: typer.Typer) -> None:
    fa = typer.Typer(help="Kafka's finalized features (KRaft): show, plan and apply their raise.",
                     invoke_without_command=True)
    fa.callback()(features_show)
    fa.command("plan")(features_plan)
    fa.command("apply")(features_apply)
    app.add_typer(fa, name="features")


def _rows(p: Any) -> list[dict[str, Any]]:
    names = list(dict.fromkeys([*p.features, *(f for n in p.nodes for f in n.levels)]))
    change = {c.feature: c for c in p.changes}
    rows = []
    for name in names:
        f = p.features.get(name)
        c = change.get(name)
        row: dict[str, Any] = {
            "feature": name, "finalized": (f.finalized if f else None) or "-",
            "supported": f"{f.supported_min}..{f.supported_max}" if f and f.supported_max else "-"}
        for n in p.nodes:
            row[n.host] = n.levels.get(name, "-")
        row["plan"] = (f"{c.finalized} -> {c.target}" + (" (held: --include)" if c.held else "")) if c else "-"
        rows.append(row)
    return rows


def _show(p: Any, fmt: output.Format, title: str, footer: str) -> None:
    columns = ["feature", "finalized", "supported", *[n.host for n in p.nodes], "plan"]
    output.emit(p, fmt, rows=_rows(p), columns=columns, title=title, footer=footer)


def _footer(p: Any) -> str:
    lines = ["releases: " + ", ".join(f"{n.host} {n.release or '?'}" for n in p.nodes)]
    if p.refused:
        lines.append(f"refused: {p.refused}")
    if p.to_apply:
        lines.append(f"{len(p.to_apply)} feature(s) to raise: `kctl features apply --yes`")
    held = [c for c in p.changes if c.held]
    if held:
        lines.append("held: " + ", ".join(f"{c.feature} {c.finalized} -> {c.target}" for c in held)
                     + " (raising kraft.version makes the controller quorum dynamic: `kctl quorum make-dynamic`)")
    if not p.to_apply and not p.refused:
        lines.append("nothing to raise: every feature is at the newest level every node's release maps to"
                     + (", but the held" if held else ""))
    return "\n".join(lines)


def features_show(ctx: typer.Context, file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Every finalized feature, its supported range, and the level each node's release maps it to."""
    if ctx.invoked_subcommand is not None:
        return
    from kctl.cluster import features

    spec = connect(file).kctl_spec
    p = features.plan(spec)
    _show(p, fmt, f"features of {spec.name}", _footer(p))


def features_plan(include: list[str] = IncludeOpt, file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """What `kctl features apply` would raise, in order (metadata.version first); nothing is changed."""
    from kctl.cluster import features

    spec = connect(file).kctl_spec
    p = features.plan(spec, include=include or ())
    _show(p, fmt, f"features plan for {spec.name}", _footer(p))


def features_apply(include: list[str] = IncludeOpt,
                   yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
                   file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Raise every feature to the newest level every node's release maps to, one at a time; refused while the nodes
    run different releases. A raised feature is not lowered again by kctl."""
    from kctl.cluster import features
    from kctl.cluster.lock import roll_lock
    from kctl.model.spec import state_dir_for

    spec = connect(file, write=True).kctl_spec
    if not yes:
        p = features.plan(spec, include=include or ())
        _show(p, output.Format.table, f"features plan for {spec.name}", _footer(p))
        if not p.to_apply or p.refused:
            if p.refused:
                raise typer.Exit(1)
            return
        typer.confirm(f"raise {len(p.to_apply)} feature(s) of {spec.name}? (not lowered again)", abort=True)
    with roll_lock(state_dir_for(spec, file), "kctl features apply"):  # not during a roll or a node change
        p = features.apply(spec, include=include or (), say=output.info)
    output.emit_change(p, fmt, f"{spec.name}: {len(p.to_apply)} feature(s) raised"
                               + (": " + ", ".join(f"{c.feature}={c.target}" for c in p.to_apply) if p.to_apply
                                  else " (every feature already at its newest level)"))
