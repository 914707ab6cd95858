"""kctl restart and kctl elect-leaders: change a running cluster one gated step at a time."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect
from kctl.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command()(restart)
    app.command("elect-leaders")(elect_leaders)


def restart(
    nodes: list[str] = typer.Argument(None, help="Nodes to restart (loggerN or id); none with --rolling: all."),
    service: str = typer.Option(None, "--service", "-s",
                                help="kafka, zookeeper or node (both at once, colocated); on KRaft: kafka,"
                                     " controller or node (controller and broker); default: the ZooKeeper"
                                     " phase, then the Kafka phase."),
    rolling: bool = typer.Option(False, "--rolling", help="Every node, one at a time (needed without NODE)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (order and gates); change nothing."),
    recreate: bool = typer.Option(False, "--recreate", help="With --service node: make each node's container again"
                                                            " between the stop and start gates (engine swarm: a new"
                                                            " task of the node's service, `docker service update"
                                                            " --force`) instead of restarting its processes."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds each gate may wait before the roll stops."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Restart nodes one at a time, each step gated on the cluster's health (never on sleeps)."""
    from kctl.model.spec import state_dir_for
    from kctl.roll import plan as rp
    from kctl.roll import run

    if not nodes and not rolling:
        raise UsageError("name the nodes to restart, or pass --rolling to restart every node",
                         hint="`kctl restart --rolling --dry-run` shows the plan")
    if recreate and service != "node":
        raise UsageError("--recreate makes the whole container again: it needs --service node",
                         hint="`kctl restart NODE --service node --recreate`")
    # never roll a cluster this kctl.yaml did not make; a bad service or node is named first, whatever its state
    spec = connect(file, write=not dry_run, before=lambda s: rp.check_request(s, service, nodes or [])).kctl_spec
    again = tuple(spec.node(n).hostname for n in nodes) if nodes else tuple(n.hostname for n in spec.nodes)
    again = again if recreate else ()
    if dry_run:
        plan = run.plan(spec, service, nodes or [], again)
        rows = [{"step": i, "host": s.host, "service": s.service, "order": s.why, "gates": "; ".join(s.gates)}
                for i, s in enumerate(plan.steps, 1)]
        footer = (f"before: {', '.join(plan.pre_checks)}\nafter: {plan.finish}"
                  + "".join(f"\nnote: {n}" for n in plan.notes))
        output.emit(plan, fmt, rows=rows, columns=["step", "host", "service", "order", "gates"],
                    title=f"restart plan for {spec.name} (dry run)", footer=footer)
        return
    if not yes:
        typer.confirm(f"restart {'all nodes' if not nodes else ', '.join(nodes)} of {spec.name}"
                      f" ({service or 'zookeeper, then kafka'})?", abort=True)
    result = run.roll(spec, state_dir_for(spec, file), service=service, nodes=nodes or [], gate_timeout=timeout,
                      progress=output.info, recreate=again)
    output.emit_change(result, fmt, f"{spec.name}: restarted {len(result.steps)} service(s) in"
                                    f" {result.seconds:.1f}s")


def elect_leaders(
    topic: str = typer.Option(None, "--topic", "-t", help="Only this topic's partitions."),
    partition: int = typer.Option(None, "--partition", "-p", min=0, help="Only this partition (needs --topic)."),
    election: str = typer.Option("preferred", "--type", help="preferred, or unclean (may lose acknowledged"
                                                             " records: an out-of-sync replica becomes leader)."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Move partition leadership back to the preferred replicas (Kafka's own election, via the AdminClient)."""
    from kctl.kafka import leaders

    res = leaders.elect(connect(file, write=True), election, topic, partition)
    output.emit_change(res, fmt, f"{res.type} election ({res.scope}): {len(res.elected)} moved"
                                 + (f" ({', '.join(res.elected[:10])})" if res.elected else "")
                                 + f", {res.not_needed} already in place"
                                 + (f", {len(res.failed)} failed" if res.failed else ""))
    for f in res.failed:
        output.warn(f"{f['partition']}: {f['error']}")
    if res.failed:
        raise typer.Exit(1)
