"""kctl metrics, kctl lag, kctl monitor and kctl alerts: the exporters' figures over a window, Burrow's
consumer-lag evaluation (fresh, or from the monitor's store), the monitor process, and its alerts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kctl import output
from kctl.cli.common import BootstrapOpt, OutputOpt, SpecOpt, connect, load
from kctl.errors import UsageError
from kctl.output import Format


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics)
    app.command("lag")(lag)
    app.command("alerts")(alerts)
    monitor_app = typer.Typer(help="The monitor: samples offsets and exporters into a history, judges lag, sends"
                                   " alerts, serves Burrow's API.", no_args_is_help=True)
    monitor_app.command("start")(monitor_start)
    monitor_app.command("stop")(monitor_stop)
    monitor_app.command("status")(monitor_status)
    app.add_typer(monitor_app, name="monitor")


def metrics(
    node: int | None = typer.Option(None, "--node", "-n", help="Only this node's exporters (its id)."),
    window: float = typer.Option(5.0, "--window", min=0.5, max=300, help="Seconds between the two scrapes that"
                                                                       " rates are taken over."),
    watch: bool = typer.Option(False, "--watch", "-w", help="Repeat, each window starting where the last ended;"
                                                            " Ctrl-C stops. With -o json, one JSON document per"
                                                            " line."),
    count: int = typer.Option(0, "--count", min=0, help="With --watch: stop after this many reports (0: until"
                                                        " Ctrl-C)."),
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Per broker and per ZooKeeper, from the exporters: rates over a window, latencies, partitions at risk.
    Exit 0 when every exporter answered (with --watch: in the last window), 1 when one did not."""
    from kctl.monitor import metrics as m

    spec = connect(file).kctl_spec  # the cluster of this kctl.yaml answers on its ports, or a clear refusal
    if not spec.monitoring.enabled:
        raise UsageError(f"monitoring is off in {file}: no exporter runs",
                         hint="set `monitoring.enabled: true` and run `kctl up` (the nodes restart once)")
    endpoints = [m.Endpoint(n.id, n.hostname, svc, url) for n, svc, url in spec.metrics_endpoints()
                 if node is None or n.id == node]
    if not endpoints:
        raise UsageError(f"no node {node} in {file}",
                         hint="node ids: " + ", ".join(str(n.id) for n in spec.nodes))
    failed = False
    for rep in m.measure(endpoints, window, reports=(count if watch else 1)):
        _emit_metrics(rep, fmt, watch=watch)
        failed = bool(rep["errors"])
    raise typer.Exit(1 if failed else 0)


def _json_line(doc: Any) -> None:
    """One compact JSON document per line (--watch -o json), flushed: a reader takes each as it comes."""
    import json
    import sys

    sys.stdout.write(json.dumps(output.to_plain(doc), default=str) + "\n")
    sys.stdout.flush()


def _emit_metrics(rep: dict[str, Any], fmt: Format, *, watch: bool) -> None:
    from kctl.monitor.metrics import BROKER_COLUMNS, ZOOKEEPER_COLUMNS

    if watch and fmt is Format.json:
        _json_line(rep)
        return
    if fmt in (Format.json, Format.yaml, Format.raw):
        output.emit(rep, fmt)
        return
    errors = "; ".join(f"{e['node']} {e['service']}: {e['error']}" for e in rep["errors"])
    output.emit(rep["brokers"], fmt, rows=rep["brokers"], columns=["id", "node", *BROKER_COLUMNS[:7]],
                wide_columns=list(BROKER_COLUMNS[7:]), title=f"brokers over {rep['window_seconds']} s")
    output.emit(rep["zookeepers"], fmt, rows=rep["zookeepers"], columns=["id", "node", *ZOOKEEPER_COLUMNS],
                title="zookeepers", footer=(f"not answering: {errors}" if errors else None))


def lag(
    groups: list[str] = typer.Argument(None, help="Groups of any type (default: every group); `history GROUP`: the"
                                                  " group's lag over time from the monitor's store."),
    samples: int = typer.Option(3, "--samples", min=1, max=1000, help="Snapshots of the committed offsets to take."),
    interval: float = typer.Option(1.0, "--interval", min=0.1, max=600, help="Seconds between snapshots."),
    window: int = typer.Option(10, "--window", min=2, max=1000, help="Samples per partition that the"
                                                                     " evaluation looks at (Burrow's intervals)."),
    watch: bool = typer.Option(False, "--watch", "-w", help="Keep sampling and report after each snapshot;"
                                                            " Ctrl-C stops."),
    count: int = typer.Option(0, "--count", min=0, help="With --watch: stop after this many reports (0: until"
                                                        " Ctrl-C)."),
    since: str = typer.Option("1h", "--since", help="history: how far back (30m, 1h, 2d; s m h d)."),
    plot: Path | None = typer.Option(None, "--plot", help="history: also draw lag over time into this PNG."),
    fresh: bool = typer.Option(False, "--fresh", help="Sample now even when the monitor runs."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Each group judged as Burrow (v1.9.5) does: OK, WARN (lag never decreasing), STOP (no commits), STALL
    (committing without progress), REWIND (an offset moved back, not recovered), over a window of committed
    offsets; a lag up to monitoring.allowed_lag counts as none. Groups of every type: classic, consumer, streams,
    and share groups (their start offset stands for the committed offset, their lag is Kafka's: records not yet
    acknowledged). While the monitor runs, its answer for its latest sampling. Exit 0 when every group is OK, 1
    otherwise."""
    from kctl.model.spec import state_dir_for
    from kctl.monitor import judge

    if groups and groups[0] == "history":
        _lag_history(groups[1:], since, plot, file, fmt)
        return
    target = connect(file, bootstrap)
    spec = target.kctl_spec
    own = target.spec if bootstrap is None else None  # share and streams groups: Kafka's tools in its nodes
    if not fresh and bootstrap is None:
        stored = judge.from_monitor(target, state_dir_for(spec, file), list(groups or []), spec.monitoring.allowed_lag,
                                    own)
        if stored is not None:
            _emit_lag(stored, stored[0]["window"], fmt, single=len(groups or []) == 1, watch=False)
            raise typer.Exit(0 if all(d["status"] == "OK" for d in stored) else 1)
    listing = judge.group_names(target, own)
    names = list(groups or []) or sorted(listing.types)
    if not names:
        output.info("no groups")
        raise typer.Exit(0)
    docs: list[dict[str, Any]] = []
    for docs in judge.fresh(target, names, samples=samples, interval=interval, window=window,
                            allowed_lag=spec.monitoring.allowed_lag, watch=watch, count=count, spec=own,
                            listing=listing):
        _emit_lag(docs, window, fmt, single=len(groups or []) == 1, watch=watch)
    raise typer.Exit(0 if all(d["status"] == "OK" for d in docs) else 1)


def _emit_lag(docs: list[dict[str, Any]], window: int, fmt: Format, *, single: bool, watch: bool) -> None:
    import time

    if watch and fmt is Format.json:
        _json_line(docs[0] if single else docs)
        return
    if fmt in (Format.json, Format.yaml, Format.raw):
        output.emit(docs[0] if single else docs, fmt)
        return
    rows = [{"group": d["group"], "type": d.get("type") or "-", "state": d["state"], "status": d["status"],
             "total_lag": d["total_lag"],
             "max_lag": (f"{d['max_lag']['topic']}-{d['max_lag']['partition']}={d['max_lag']['lag']}"
                         if d["max_lag"] else "-"),
             "window": f"{int(d['complete_fraction'] * 100)}%",
             "problems": ", ".join(f"{p['topic']}-{p['partition']} {p['status']}" for p in d["problems"]) or "-"}
            for d in docs]
    incomplete = [d["group"] for d in docs if not d["complete"]]
    source = docs[0]["source"] if docs else "fresh sampling"
    if source == "the monitor":
        oldest = min((d["at_ms"] for d in docs), default=0) / 1000
        footer = (f"from the monitor, as of {time.strftime('%H:%M:%SZ', time.gmtime(oldest))}"
                  f" ({max(0.0, time.time() - oldest):.0f} s ago)")
        if incomplete:
            footer += (f"; window not full yet for {', '.join(incomplete)} (a partition whose consumer is gone gets"
                       " no new samples)")
    elif not incomplete:
        footer = f"from {source}"
    else:
        footer = (f"window incomplete for {', '.join(incomplete)} ({source}): --samples {window}, or the monitor"
                  " (`kctl monitor start --detach`), gives the full evaluation")
    output.emit(docs, fmt, rows=rows, columns=["group", "type", "state", "status", "total_lag", "max_lag", "window"],
                wide_columns=["problems"], title="group lag", footer=footer)


def _open_store(file: Path) -> tuple[Any, Any, Path]:
    from kctl.model.spec import state_dir_for
    from kctl.monitor.store import Store, db_path

    spec = load(file)
    path = db_path(state_dir_for(spec, file))
    if not path.exists():
        raise UsageError(f"no monitor history for cluster {spec.name!r} ({path} does not exist)",
                         hint="`kctl monitor start --detach` records it")
    return spec, Store(path, readonly=True), path


def _lag_history(args: list[str], since: str, plot: Path | None, file: Path, fmt: Format) -> None:
    from kctl.model.spec import state_dir_for
    from kctl.monitor import judge

    if len(args) != 1:
        raise UsageError("`kctl lag history` takes one group", hint="kctl lag history GROUP --since 1h")
    group = args[0]
    seconds = judge.parse_since(since)
    spec = load(file)
    rows = judge.history(state_dir_for(spec, file), spec.name, group, seconds)
    if plot is not None:
        from kctl.monitor.plot import plot_history

        plot_history(group, rows, plot)
    doc = {"group": group, "cluster": spec.name, "since_seconds": seconds, "points": rows}
    output.emit(doc, fmt, rows=rows, columns=["time", "status", "total_lag", "state"], wide_columns=["complete"],
                title=f"lag of {group} over the last {since}",
                footer=(f"plot: {plot}" if plot is not None else f"{len(rows)} samples"))


def monitor_start(
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background (log: the state dir's"
                                                               " monitor/monitor.log)."),
    interval: float | None = typer.Option(None, "--interval", min=1, max=3600,
                                          help="Seconds between rounds (default monitoring.interval_seconds)."),
    window: int | None = typer.Option(None, "--window", min=2, max=1000,
                                      help="Samples per partition judged (default monitoring.window)."),
    file: Path = SpecOpt,
) -> None:
    """Sample offsets and exporters every interval into the state dir's history, judge every group, send alerts,
    and serve Burrow's consumer API and /metrics on 127.0.0.1:monitoring.monitor_port."""
    import os
    import signal
    import time

    from kctl.model.spec import state_dir_for
    from kctl.monitor import process

    spec = connect(file).kctl_spec
    if not spec.monitoring.enabled:
        raise UsageError("monitoring is off in kctl.yaml", hint="set `monitoring.enabled: true`")
    state_dir = state_dir_for(spec, file)
    rec = process.running(state_dir)
    if rec is not None:
        raise UsageError(f"the monitor of {spec.name!r} already runs (pid {rec.pid}, port {rec.port})",
                         hint="`kctl monitor stop` stops it")
    from kctl.runtime.ports import port_free

    if not port_free(spec.monitoring.monitor_port):
        raise UsageError(f"port {spec.monitoring.monitor_port} (monitoring.monitor_port) is in use on 127.0.0.1",
                         hint="set another monitoring.monitor_port in kctl.yaml")
    args = [*(["--interval", f"{interval:g}"] if interval else []), *(["--window", str(window)] if window else [])]
    if detach:
        rec = process.start_detached(file, state_dir, args)
        output.info(f"monitor of {spec.name} started (pid {rec.pid}): every {rec.interval_seconds:g} s, window"
                    f" {rec.window}; API http://127.0.0.1:{rec.port}; log {process.log_path(state_dir)}")
        return
    from kctl.monitor.service import Monitor

    mon = Monitor(spec, state_dir, interval_s=interval, window=window, spec_file=file,
                  log=lambda line: print(time.strftime("%Y-%m-%dT%H:%M:%S ") + line, flush=True))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: mon.stopping.set())
    process.write_record(state_dir, process.Running(os.getpid(), spec.monitoring.monitor_port, time.time(),
                                                    mon.interval_s, mon.window))
    try:
        mon.run()
    finally:
        process.clear_record(state_dir, os.getpid())


def monitor_stop(file: Path = SpecOpt) -> None:
    """Stop the cluster's monitor (SIGTERM; its history stays in the state dir)."""
    from kctl.model.spec import state_dir_for
    from kctl.monitor import process

    spec = load(file)
    rec = process.stop(state_dir_for(spec, file), spec.name)
    output.info(f"monitor of {spec.name} stopped (pid {rec.pid})")


def monitor_status(file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """Whether the monitor runs, its last round, groups and open alerts. Exit 0 running, 1 not."""
    from kctl.model.spec import state_dir_for
    from kctl.monitor import process
    from kctl.monitor.store import db_path

    spec = load(file)
    state_dir = state_dir_for(spec, file)
    rec = process.running(state_dir)
    doc: dict[str, Any] = {"cluster": spec.name, "running": rec is not None, "store": str(db_path(state_dir))}
    if rec is not None:
        doc.update({"pid": rec.pid, "api": f"http://127.0.0.1:{rec.port}", "interval_seconds": rec.interval_seconds,
                    "window": rec.window})
        h = process.health(rec.port)
        if h is not None:
            doc.update({k: h[k] for k in ("rounds", "last_round", "groups", "open_alerts")})
    output.emit(doc, fmt, rows=[{"key": k, "value": v} for k, v in doc.items()], columns=["key", "value"],
                title=f"monitor of {spec.name}")
    if rec is None:
        raise process.not_running_error(spec.name)


def alerts(
    since: str = typer.Option("24h", "--since", help="Recent notifications from this far back."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Queue the notifications marked failed (refused"
                                                                    " by their receiver) again, after fixing it."),
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Open alerts and recent notifications (open, repeat, resolved) from the monitor's store, and what waits
    in its outbox: pending (retried), failed (refused by the receiver for good) or for a notifier that kctl.yaml
    no longer has. No URL is shown whole (a webhook's path often carries its token)."""
    import time

    from kctl.monitor.judge import parse_since
    from kctl.monitor.notify import clean, redact

    seconds = parse_since(since)
    spec, store, path = _open_store(file)
    try:
        if retry_failed:
            from kctl.monitor.store import Store

            store.close()
            store = Store(path)
            store.migrate_outbox([n.key for n in spec.monitoring.notifiers], redact)
            with store.round():
                requeued = store.retry_failed()
            output.info(f"{requeued} failed notification(s) queued again")
        held = store.alert_rows()
        log = store.alert_log(time.time() - seconds)
        outbox = store.outbox()
    finally:
        store.close()
    known = {n.key for n in spec.monitoring.notifiers}
    open_ = [{"alert": a["rule"], "subject": a["subject"], "details": a["details"], "opened_at": a["opened"],
              "last_sent": a["last_sent"]} for a in held if a.get("opened") is not None]
    recent = [{"at": r["ts"], "kind": r["kind"], "alert": r["rule"], "subject": r["subject"],
               "details": r["body"].get("details")} for r in log]
    pending = [{"id": o["id"], "notifier": o["notifier"],
                "delivery": o["state"] if o["notifier"] in known else "no such notifier",
                "attempts": o["attempts"], "next_try_at": o["next_at"] or None,
                # Redacted again: a store written before redaction may hold a whole URL.
                "last_error": redact(o["last_error"]) if o["last_error"] else None,
                "alert": o["body"].get("alert"), "subject": o["body"].get("subject"), "state": o["body"].get("state")}
               for o in outbox]
    doc = {"cluster": spec.name, "open": open_, "recent": recent, "undelivered": pending}
    for r in open_:
        r["since"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["opened_at"]))
    # The table on one line a row: a group id may hold line breaks or a terminal's escape codes (JSON escapes them).
    rows = [{**r, "subject": clean(str(r["subject"]), 200), "details": clean(str(r["details"] or ""), 200)}
            for r in open_]
    parts = [f"{len(recent)} notification(s) in the last {since}"]
    for delivery, what in (("pending", "not delivered yet (retried)"), ("failed", "failed (refused; --retry-failed"
                                                                            " queues them again)"),
                           ("no such notifier", "for a notifier kctl.yaml no longer has (not sent)")):
        these = [p for p in pending if p["delivery"] == delivery]
        if these:
            first = these[0]
            parts.append(f"{len(these)} {what}: {first['notifier']}: {clean(first['last_error'] or 'not tried yet')}")
    output.emit(doc, fmt, rows=rows, columns=["alert", "subject", "since", "details"],
                title=f"open alerts of {spec.name}", footer="; ".join(parts))
