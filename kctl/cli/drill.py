"""kctl drill: break the cluster on purpose under load, and check independently what was lost."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect


def register(app: typer.Typer) -> None:
    drill_app = typer.Typer(help="Failure drills: a fault under load, then an independent read and a verdict.",
                            no_args_is_help=True)
    drill_app.command("list")(drill_list)
    drill_app.command("run")(drill_run)
    app.add_typer(drill_app, name="drill")


def drill_list(fmt: output.Format = OutputOpt) -> None:
    """The scenarios a drill can run."""
    from kctl.drill.scenarios import SCENARIOS

    rows = [{"scenario": s.name, "needs_rf_2": "yes" if s.kills_broker else "no", "fault": s.summary}
            for s in SCENARIOS.values()]
    output.emit(rows, fmt, rows=rows, columns=["scenario", "needs_rf_2", "fault"], title="drill scenarios")


def drill_run(
    scenario: str = typer.Argument(..., help="Scenario (`kctl drill list`)."),
    duration: str = typer.Option("60s", "--duration", "-d", help="How long the load runs (60s, 2m)."),
    rate: float = typer.Option(1000, "--rate", "-r", help="Records per second."),
    acks: str = typer.Option("all", "--acks", help="all (idempotent) or 1."),
    bounces: int = typer.Option(5, "--bounces", "-b", help="How many times the fault is injected and healed."),
    hold: str = typer.Option("10s", "--hold", help="How long a timed fault (pause, partition, quorum loss,"
                                                  " netem) stays in place."),
    topic: str = typer.Option(None, "--topic", "-t", help="An existing topic (default: the drill's own, 3"
                                                         " partitions, RF 3, min.insync.replicas=2)."),
    unclean: bool = typer.Option(False, "--unclean", help="unclean.leader.election.enable=true on the drill's"
                                                         " own topic (a control: may show loss)."),
    keep_topic: bool = typer.Option(False, "--keep-topic", help="Keep the drill's own topic afterwards."),
    plot: Path = typer.Option(None, "--plot", help="Write the timeline as a PNG (needs kctl[plot])."),
    timeout: float = typer.Option(180, "--timeout", help="Seconds each wait for the cluster may take."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Inject a fault under load, heal it, read the topic back and judge: exit 0 holds, 1 fails, 2 not run."""
    from kctl.drill import report, run
    from kctl.model.spec import state_dir_for

    seconds, hold_s = run.parse_seconds(duration), run.parse_seconds(hold)
    run.validate(scenario, rate, seconds, bounces, hold_s)  # before touching anything
    if plot is not None:
        from kctl.extras import require

        require("matplotlib", "plot")  # fail now, not after the drill
    spec = connect(file, write=True).kctl_spec  # faults only on the cluster this kctl.yaml made
    if scenario == "mirror-failover":
        from kctl.drill import mirror

        verdict = mirror.run(spec, file, duration=seconds, rate=rate, gate_timeout=timeout, progress=output.info)
    else:
        verdict = run.run(spec, state_dir_for(spec, file), scenario, duration=seconds, rate=rate, acks=acks,
                          bounces=bounces, hold=hold_s, topic=topic, unclean=unclean, keep_topic=keep_topic,
                          gate_timeout=timeout, progress=output.info)
    if plot is not None:
        report.plot(verdict, plot)
        output.info(f"timeline plotted to {plot}")
    rec = f"{verdict.recovery_seconds:.1f}s" if verdict.recovery_seconds is not None else "-"
    rows: list[dict[str, object]] = [
        {"check": "acknowledged", "value": verdict.acked, "verdict": ""},
        {"check": "read back", "value": verdict.read, "verdict": ""},
        {"check": "lost", "value": verdict.lost, "verdict": "ok" if not verdict.lost else "FAIL"},
        {"check": "duplicates", "value": verdict.duplicates,
         "verdict": "FAIL" if verdict.idempotent and verdict.duplicates else "ok"},
        {"check": "reordered", "value": verdict.reordered,
         "verdict": "FAIL" if verdict.idempotent and verdict.reordered else "ok"},
        {"check": "unacked but present", "value": verdict.unacked_present, "verdict": "allowed"},
        {"check": "producer errors", "value": ", ".join(f"{k} {v}" for k, v in verdict.errors.items()) or "0",
         "verdict": ""},
        {"check": "recovery (healed -> healthy)", "value": rec, "verdict": ""},
        {"check": "came back by itself (fault -> serving)",
         "value": ", ".join(f"{s:.1f}s" for s in verdict.self_heal_seconds) or "-", "verdict": ""},
        {"check": "failover (fault -> role taken over)",
         "value": ", ".join(f"{s:.1f}s" for s in verdict.failover_seconds) or "-", "verdict": ""},
        {"check": "longest produce stall", "value": f"{verdict.longest_stall_seconds:.1f}s", "verdict": ""},
        {"check": "leader / ZooKeeper leader changes",
         "value": f"{verdict.leader_changes} / {verdict.zk_leader_changes}", "verdict": ""},
    ]
    footer = "\n".join([
        report.text_timeline(verdict.timeline, verdict.faults),
        *(f"event {e['second']:6.1f}s  {e['event']}" for e in verdict.events),
        *(f"note: {n}" for n in verdict.notes),
        *(f"FAIL: {f}" for f in verdict.failures),
        f"verdict: {'HOLDS' if verdict.holds else 'DOES NOT HOLD'}",
    ])
    output.emit(verdict, fmt, rows=rows, columns=["check", "value", "verdict"],
                title=f"drill {verdict.scenario} on {spec.name}: topic {verdict.topic}, {verdict.rate:g}/s"
                      f" acks={verdict.acks}, {verdict.duration_seconds:.0f}s, {verdict.bounces} bounce(s)",
                footer=footer)
    if verdict.exit_code:
        raise typer.Exit(verdict.exit_code)
