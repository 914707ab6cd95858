"""kctl reassign: plan a balanced assignment, move partitions with Kafka's own tool, follow, cancel."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect
from kctl.errors import UsageError

PlanFileArg = typer.Argument(..., help="Kafka's reassignment JSON (`kctl reassign plan -o json > plan.json`).")


def register(app: typer.Typer) -> None:
    ra = typer.Typer(help="Move partitions between brokers: plan (balanced), execute (Kafka's tool, throttled),"
                          " status, verify, cancel.", no_args_is_help=True)
    ra.command("plan")(reassign_plan)
    ra.command("execute")(reassign_execute)
    ra.command("status")(reassign_status)
    ra.command("verify")(reassign_verify)
    ra.command("cancel")(reassign_cancel)
    app.add_typer(ra, name="reassign")


def _read_plan(path: Path) -> tuple[str, str]:
    try:
        return path.read_text(), str(path)
    except OSError as exc:
        raise UsageError(f"cannot read plan file {path}: {exc.strerror}",
                         hint="`kctl reassign plan --brokers 1,2,3 -o json > plan.json` writes one") from None


def reassign_plan(
    brokers: str = typer.Option(None, "--brokers", "-b", help="Broker ids to spread the replicas over: 1,2,4"
                                                              " [default: every registered broker]."),
    topics: str = typer.Option(None, "--topics", "-t", help="Only these topics (comma-separated)."),
    all_topics: bool = typer.Option(False, "--all", help="Every topic, internal ones included (the default)."),
    by: str = typer.Option("replicas", "--by", help="What to even out: replicas (their count per broker) or bytes"
                                                    " (each broker's bytes on disk, from kafka-log-dirs.sh)."),
    replication_factor: int = typer.Option(None, "--replication-factor", "-r", min=1,
                                           help="Give --topics this many replicas per partition instead (new ones"
                                                " on the brokers holding the fewest bytes; the leader kept)."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """A balanced assignment over --brokers, moving as little as possible; -o json prints Kafka's plan file."""
    from kctl.kafka import balance, reassign

    if topics and all_topics:
        raise UsageError("--topics and --all exclude each other")
    ids = balance.parse_brokers(brokers) if brokers else None
    names = [t.strip() for t in topics.split(",") if t.strip()] if topics else None
    spec = connect(file).kctl_spec
    res = reassign.plan(spec, ids, names, by=by, replication_factor=replication_factor)
    if output.Format(fmt) is output.Format.json:
        output.emit(res.kafka_json, fmt)
        return
    if output.Format(fmt) is output.Format.yaml:
        output.emit(res, fmt)
        return
    rows = [{"partition": m["partition"], "current": ",".join(map(str, m["current"])),
             "target": ",".join(map(str, m["target"])), "adding": ",".join(map(str, m["adding"])) or "-",
             "removing": ",".join(map(str, m["removing"])) or "-"} for m in res.moves]
    def counts(c: dict[str, dict[int, int]]) -> str:
        return "  ".join(f"{b}: {c['current'].get(b, 0)}->{c['target'].get(b, 0)}"
                         for b in sorted(set(c["current"]) | set(c["target"])))

    per, lead = counts(res.replicas_per_broker), counts(res.leaders_per_broker)
    footer = (f"{len(res.moves)} partition(s) change, {res.replicas_moved} replica(s) move,"
              if res.replication_factor is None else
              f"{len(res.moves)} partition(s) go to {res.replication_factor} replica(s), {res.replicas_moved}"
              " replica(s) added,")
    footer += (
              f" {res.leaders_changed} preferred leader(s) change\nreplicas per broker  {per}\n"
              f"leaders per broker   {lead}")
    if res.bytes_per_broker is not None:
        footer += f"\nbytes per broker     {counts(res.bytes_per_broker)}\nbytes the move copies {res.bytes_moved}"
    if res.moves:
        rf = res.replication_factor
        footer += ("\nnext: kctl reassign plan" + (f" --brokers {brokers}" if brokers else "")
                   + (f" --topics {topics}" if topics else "") + (" --by bytes" if by == "bytes" and not rf else "")
                   + (f" --replication-factor {rf}" if rf else "")
                   + " -o json > plan.json && kctl reassign execute plan.json"
                   + (" --replication-factor-change" if rf else "") + " --wait")
    else:
        footer += "\nalready balanced: nothing to move"
    output.emit(res, fmt, rows=rows, columns=["partition", "current", "target", "adding", "removing"],
                title=f"reassignment plan over brokers {','.join(map(str, res.brokers))}", footer=footer)


def reassign_execute(
    plan_file: Path = PlanFileArg,
    throttle: str = typer.Option(None, "--throttle", help="Replication rate limit while moving: 50MB/s, 10MiB/s."),
    wait: bool = typer.Option(False, "--wait", help="Follow until done, then verify (removes the throttle) and"
                                                     " elect preferred leaders."),
    timeout: float = typer.Option(900, "--timeout", min=1, help="Seconds --wait may take."),
    change_rf: bool = typer.Option(False, "--replication-factor-change",
                                   help="The plan changes replication factors on purpose (a plan from `kctl reassign"
                                        " plan --replication-factor`); never below min.insync.replicas."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Start moving partitions as the plan says (Kafka's kafka-reassign-partitions.sh in a node)."""
    from kctl.kafka import balance, reassign

    rate = balance.parse_rate(throttle) if throttle else None
    spec = connect(file, write=True).kctl_spec  # never move the partitions of a cluster this kctl.yaml did not make
    text, source = _read_plan(plan_file)
    target = reassign.load_plan(text, source)  # a malformed file stops here, before anything changes
    from kctl.cluster.lock import roll_lock
    from kctl.model.spec import state_dir_for

    # not while a rolling restart or a node change runs
    state = state_dir_for(spec, file)
    with roll_lock(state, "kctl reassign execute"):
        res = reassign.execute(spec, target, throttle=rate, wait=wait, timeout=timeout, progress=output.info,
                               change_rf=change_rf, state_dir=state)
    output.emit_change(res, fmt, f"reassignment of {res.partitions} partition(s) "
                                 + (f"done in {res.seconds:.1f}s" if wait else
                                    "started: `kctl reassign status` follows it; `kctl reassign verify "
                                    f"{plan_file}` removes the throttle when it is done"))


def reassign_status(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Partitions being moved now: replicas being added and removed, bytes the new replicas still lack."""
    from kctl.kafka import reassign
    from kctl.model.spec import state_dir_for

    spec = connect(file).kctl_spec
    st = reassign.status(spec, state_dir=state_dir_for(spec, file))
    rows = [{"partition": m.partition, "replicas": ",".join(map(str, m.replicas)),
             "adding": ",".join(map(str, m.adding)) or "-", "removing": ",".join(map(str, m.removing)) or "-",
             "bytes_left": m.bytes_left if m.bytes_left is not None else "?"} for m in st.moving]
    if st.moving:
        footer = f"{len(st.moving)} partition(s) moving" + (
            f", {st.bytes_left} bytes left" if st.bytes_left is not None else "") + (
            f", about {reassign.about(st.seconds_left)} left" if st.seconds_left is not None else "") + (
            f" (throttled to {st.throttle} B/s per broker)" if st.throttle else "")
    else:
        footer = "no reassignment in progress"
    if st.throttled_brokers:
        footer += (f"\nreplication throttle set on broker(s) {','.join(map(str, st.throttled_brokers))}"
                   + ("" if st.moving else ": `kctl reassign verify plan.json` removes it"))
    output.emit(st, fmt, rows=rows, columns=["partition", "replicas", "adding", "removing", "bytes_left"],
                title="partition reassignments", footer=footer)


def reassign_verify(plan_file: Path = PlanFileArg, file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Kafka's --verify of a plan: each partition's state; removes the throttle once all are done."""
    from kctl.kafka import reassign

    spec = connect(file, write=True).kctl_spec
    text, source = _read_plan(plan_file)
    target = reassign.load_plan(text, source)
    out = reassign.verify(spec, target)
    output.emit({"output": out}, fmt, raw=out) if output.Format(fmt) is not output.Format.table \
        else output.info(out.strip())


def reassign_cancel(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Cancel every ongoing reassignment: partitions go back to their original replicas; throttle removed."""
    from kctl.kafka import reassign
    from kctl.model.spec import state_dir_for

    spec = connect(file, write=True).kctl_spec
    moving = reassign.cancel(spec, state_dir_for(spec, file))
    output.emit_change(moving, fmt, f"cancelled the reassignment of {len(moving)} partition(s)"
                       + (f" ({', '.join(m.partition for m in moving[:5])})" if moving else
                          ": none was in progress"))
