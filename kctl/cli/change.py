"""kctl diff and kctl apply: what differs between kctl.yaml, the state dir and the running processes,
and bringing the running cluster to kctl.yaml (dynamically where Kafka allows, else a gated roll)."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect
from kctl.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)
    app.command("apply")(apply)
    app.command("export")(export)


def diff(
    all_keys: bool = typer.Option(False, "--all", help="Every compared key, not only those that differ."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Per node and key: kctl.yaml, the rendered file, dynamic overrides, what the process runs.

    Exit 1 when anything differs (or a node cannot be asked), 0 when all agree: fit for a cron job.
    """
    from kctl.cluster import drift
    from kctl.console.audit import who_changed
    from kctl.kafka import converge
    from kctl.model.spec import state_dir_for

    spec = connect(file).kctl_spec
    res = drift.diff(spec, state_dir_for(spec, file), all_keys=all_keys)
    declared = converge.plan(spec) if converge.declares(spec) else None
    if declared is not None:  # who last changed what differs, where the console's audit log knows it
        declared.who = who_changed(declared.plan.actions, state_dir_for(spec, file) / "console" / "audit.jsonl",
                                   spec.name)
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
    if declared is not None:
        footer += "\n" + _declared_lines(declared)
    if res.drifted or res.containers or (declared is not None and not declared.clean):
        footer += "\n`kctl apply` brings the cluster to kctl.yaml (`--dry-run` first)"
    data = res if declared is None else {**output.to_plain(res), "declared": _declared_doc(declared)}
    output.emit(data, fmt, rows=rows,
                columns=["node", "service", "key", "kctl.yaml", "rendered", "dynamic", "running", "drift"],
                title=f"diff of {spec.name}", footer=footer)
    if not res.clean or (declared is not None and not declared.clean):
        raise typer.Exit(1)


def _declared_doc(c: object) -> dict[str, object]:
    from kctl.kafka.converge import Convergence

    assert isinstance(c, Convergence)
    return {"clean": c.clean, "actions": [{"kind": a.kind.value, "subject": a.subject, "description": a.description,
                                           "last_changed_by": c.who.get(a.description)} for a in c.plan.actions],
            "next": c.next_steps, "done": c.done}


def _declared_lines(c: object) -> str:
    from kctl.kafka.converge import Convergence

    assert isinstance(c, Convergence)
    if c.clean:
        return "declared topics, users, ACLs and quotas: the cluster has what kctl.yaml declares"
    lines = [f"declared topics, users, ACLs and quotas: {len(c.plan.actions)} difference(s):"]
    lines += [f"  {a.description}" + (f" [last changed by {c.who[a.description]}]" if a.description in c.who else "")
              for a in c.plan.actions]
    lines += [f"  then: {n}" for n in c.next_steps]
    return "\n".join(lines)


def _dynamic(broker: str | None, default: str | None) -> str | None:
    parts = ([f"broker={broker}"] if broker is not None else []) + \
        ([f"default={default}"] if default is not None else [])
    return ", ".join(parts) or None


def apply(
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (dynamic changes, restarts in order"
                                                         " with their gates); change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds each restart gate may wait."),
    prune: bool = typer.Option(False, "--prune", help="Also delete the topics, users, ACLs and quotas of the"
                                                      " sections kctl.yaml declares that it does not name."),
    reassign_rf: bool = typer.Option(False, "--reassign", help="Change declared replication factors too: a"
                                                               " partition reassignment, throttled, waited for."),
    throttle: str = typer.Option(None, "--throttle", help="--reassign's replication rate limit: 50MB/s."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Bring the running cluster to kctl.yaml: dynamic broker configs at run time (no restart), a gated rolling
    restart of only the services whose start-time config changed, then the declared topics, users, ACLs and
    quotas (deletions only with --prune)."""
    from kctl.cluster.lock import roll_lock
    from kctl.kafka import converge
    from kctl.kafka.balance import parse_rate
    from kctl.model.spec import state_dir_for
    from kctl.roll import apply as ap
    from kctl.roll import migration, run

    # A skipped step towards the secured profile is refused from the files alone, before kctl talks to the
    # cluster with credentials the skipped steps would have made.
    spec = connect(file, write=not dry_run,
                   before=lambda wanted: migration.check_step(wanted, state_dir_for(wanted, file))).kctl_spec
    if throttle and not reassign_rf:
        raise UsageError("--throttle goes with --reassign", hint="kctl apply --reassign --throttle 50MB/s")
    rate = parse_rate(throttle) if throttle else None
    state = state_dir_for(spec, file)
    declares = converge.declares(spec)
    if dry_run or not yes:
        plan, _ = ap.plan(spec, state)
        for service, nodes, hosts in ap.phases(spec, plan):
            plan.roll.append(run.plan(spec, service, nodes, hosts))
        declared = converge.plan(spec, prune=prune) if declares else None
        if declared is not None:
            plan.notes.append(_declared_lines(declared).replace("difference(s)", "change(s) planned"
                                                                + ("" if prune else "; without --prune nothing"
                                                                   " is deleted")))
        _show_plan(plan, fmt, dry_run)
        if dry_run or (plan.nothing_to_do and (declared is None or declared.clean)):
            return
        typer.confirm(f"apply kctl.yaml to {spec.name}?", abort=True)
    result = ap.apply(spec, state, gate_timeout=timeout, progress=output.info)
    restarted = [f"{s.host} {s.service}" for r in result.rolls for s in r.steps]
    line = (f"{spec.name}: applied in {result.seconds:.1f}s: {len(result.dynamic_applied)} dynamic change(s)"
            f" without restart, {len(result.files_written)} file(s) written, restarted "
            + (", ".join(restarted) or "nothing"))
    if declares:
        with roll_lock(state, "kctl apply"):  # not beside a roll, a reassignment or a node change
            conv = converge.apply(spec, file, prune=prune, progress=output.info, reassign_rf=reassign_rf,
                                  throttle=rate, state_dir=state)
        line += f"; {len(conv.done)} declared change(s)"
        for n in conv.next_steps:
            output.warn(f"a replication factor changes by a reassignment (`kctl apply --reassign`, or: {n})")
        output.emit_change({**output.to_plain(result), "declared": _declared_doc(conv)}, fmt, line)
        return
    output.emit_change(result, fmt, line)


def export(
    out: Path = typer.Option(None, "--out", help="Write to this file (default: print)."),
    file: Path = SpecOpt,
) -> None:
    """The live topics, users (without passwords), ACLs and quotas in kctl.yaml's shape: paste them into kctl.yaml
    and `kctl diff` finds nothing to do (users and ACLs on the secured profile only)."""
    from kctl.kafka import converge

    spec = connect(file).kctl_spec
    text = converge.export_yaml(spec)
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text)
    output.info(f"wrote {out}: the live topics, users, ACLs and quotas of {spec.name}")


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
