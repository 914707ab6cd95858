"""kctl diff and kctl apply: what differs between kctl.yaml, the state dir and the running processes,
and bringing the running cluster to kctl.yaml (dynamically where Kafka allows, else a gated roll)."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)
    app.command("apply")(apply)


def diff(
    all_keys: bool = typer.Option(False, "--all", help="Every compared key, not only those that differ."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Per node and key: kctl.yaml, the rendered file, dynamic overrides, what the process runs.

    Exit 1 when anything differs (or a node cannot be asked), 0 when all agree: fit for a cron job.
    """
    from kctl.cluster import drift
    from kctl.model.spec import state_dir_for

    spec = connect(file).kctl_spec
    res = drift.diff(spec, state_dir_for(spec, file), all_keys=all_keys)
    rows = [{"node": r.node, "service": r.service, "key": r.key, "kctl.yaml": r.spec, "rendered": r.rendered,
             "dynamic": _dynamic(r.broker_override, r.default_override),
             "running": r.running if r.reported else "(not reported)", "drift": "; ".join(r.drift) or "-"}
            for r in res.rows]
    verdict = (f"{res.drifted} difference(s) in {res.compared} compared keys" if res.drifted
               else f"no drift: {res.compared} keys agree across kctl.yaml, the rendered files and the processes")
    footer = verdict + "".join(f"\nproblem: {p}" for p in res.problems)
    footer += "".join(f"\ncontainer {host} to make again: {'; '.join(what)}" for host, what in res.containers.items())
    if spec.on_kraft:
        footer += "\nmetadata: KRaft (the controller quorum; ZooKeeper retired)"
    elif spec.kraft_phase != "zookeeper":
        footer += (f"\nmetadata: migrating to KRaft, phase {spec.kraft_phase}: the rendered files are that phase's"
                   " (`kctl migrate kraft status`)")
    if res.drifted or res.containers:
        footer += "\n`kctl apply` brings the cluster to kctl.yaml (`--dry-run` first)"
    output.emit(res, fmt, rows=rows,
                columns=["node", "service", "key", "kctl.yaml", "rendered", "dynamic", "running", "drift"],
                title=f"diff of {spec.name}", footer=footer)
    if not res.clean:
        raise typer.Exit(1)


def _dynamic(broker: str | None, default: str | None) -> str | None:
    parts = ([f"broker={broker}"] if broker is not None else []) + \
        ([f"default={default}"] if default is not None else [])
    return ", ".join(parts) or None


def apply(
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (dynamic changes, restarts in order"
                                                         " with their gates); change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds each restart gate may wait."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Bring the running cluster to kctl.yaml: dynamic broker configs at run time (no restart), and a gated
    rolling restart of only the services whose start-time config changed."""
    from kctl.model.spec import state_dir_for
    from kctl.roll import apply as ap
    from kctl.roll import migration, run

    # A skipped step towards the secured profile is refused from the files alone, before kctl talks to the
    # cluster with credentials the skipped steps would have made.
    spec = connect(file, write=not dry_run,
                   before=lambda wanted: migration.check_step(wanted, state_dir_for(wanted, file))).kctl_spec
    state = state_dir_for(spec, file)
    if dry_run or not yes:
        plan, _ = ap.plan(spec, state)
        for service, nodes, hosts in ap.phases(spec, plan):
            plan.roll.append(run.plan(spec, service, nodes, hosts))
        _show_plan(plan, fmt, dry_run)
        if dry_run or plan.nothing_to_do:
            return
        typer.confirm(f"apply kctl.yaml to {spec.name}?", abort=True)
    result = ap.apply(spec, state, gate_timeout=timeout, progress=output.info)
    restarted = [f"{s.host} {s.service}" for r in result.rolls for s in r.steps]
    output.emit_change(result, fmt, f"{spec.name}: applied in {result.seconds:.1f}s:"
                                    f" {len(result.dynamic_applied)} dynamic change(s) without restart,"
                                    f" {len(result.files_written)} file(s) written, restarted "
                                    + (", ".join(restarted) or "nothing"))


def _show_plan(plan: object, fmt: output.Format, dry_run: bool) -> None:
    from kctl.roll.apply import ApplyPlan

    assert isinstance(plan, ApplyPlan)
    rows: list[dict[str, object]] = []
    for d in plan.dynamic:
        rows.append({"node": f"broker {d.broker}", "service": "kafka",
                     "action": "set dynamically (no restart)" if d.value is not None else "remove dynamic override",
                     "detail": f"{d.key}: {d.running} -> {d.value if d.value is not None else '(file/default)'}"})
    for r in plan.restarts:
        rows.append({"node": r.node, "service": r.service, "action": "rolling restart",
                     "detail": "; ".join(r.reasons)})
    for host, what in plan.recreate.items():
        rows.append({"node": host, "service": "container", "action": "make the container again (rolling)",
                     "detail": "; ".join(what)})
    lines = []
    if plan.files:
        lines.append(f"files to write: {', '.join(plan.files)}")
    for p in plan.roll:
        if p.steps:
            lines.append(f"restart order ({p.service}): "
                         + ", ".join(f"{s.host} ({s.why}{', recreate' if s.recreate else ''})" for s in p.steps)
                         + f"; gates per step: {'; '.join(p.steps[0].gates)}")
    lines += [f"config hash {h.host}: {h.running or '-'} -> {h.new}" for h in plan.hashes if h.running != h.new]
    lines += [f"note: {n}" for n in plan.notes]
    if plan.nothing_to_do:
        lines.append("nothing to apply: the cluster runs what kctl.yaml says")
    if dry_run or output.Format(fmt) not in (output.Format.json, output.Format.yaml):
        output.emit(plan, fmt if dry_run else output.Format.table, rows=rows,
                    columns=["node", "service", "action", "detail"],
                    title=f"apply plan for {plan.cluster}" + (" (dry run)" if dry_run else ""),
                    footer="\n".join(lines))
