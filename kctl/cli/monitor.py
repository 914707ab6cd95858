"""kctl metrics and kctl lag: the exporters' figures over a window, and Burrow's consumer-lag evaluation."""

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
    Exit 0 when every exporter answered, 1 when one did not."""
    from kctl.monitor import metrics as m

    spec = load(file)
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
    groups: list[str] = typer.Argument(None, help="Consumer groups (default: every group)."),
    samples: int = typer.Option(3, "--samples", min=1, max=1000, help="Snapshots of the committed offsets to take."),
    interval: float = typer.Option(1.0, "--interval", min=0.1, max=600, help="Seconds between snapshots."),
    window: int = typer.Option(10, "--window", min=2, max=1000, help="Samples per partition that the"
                                                                     " evaluation looks at (Burrow's intervals)."),
    watch: bool = typer.Option(False, "--watch", "-w", help="Keep sampling and report after each snapshot;"
                                                            " Ctrl-C stops."),
    count: int = typer.Option(0, "--count", min=0, help="With --watch: stop after this many reports (0: until"
                                                        " Ctrl-C)."),
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Each group judged as Burrow does: OK, WARN (lag never decreasing), STOP (no commits), STALL (committing
    without progress), REWIND (an offset moved back), over a window of committed offsets. Exit 0 when every
    group is OK, 1 otherwise."""
    import time

    from kctl.kafka import groups as kgroups
    from kctl.monitor import sampler

    spec = connect(file, bootstrap)
    names = list(groups or []) or [g.group for g in kgroups.list_groups(spec, bootstrap)]
    if not names:
        output.info("no consumer groups")
        raise typer.Exit(0)
    if samples > window:
        raise UsageError(f"--samples {samples} is more than the window of {window}",
                         hint="raise --window, or take fewer samples")
    windows = sampler.Windows(size=window)
    taken = 0
    reports = 0
    while True:
        started = time.monotonic()
        for g in names:
            windows.observe(sampler.snapshot_of(kgroups.describe(spec, g, bootstrap), int(time.time() * 1000)))
        taken += 1
        if taken >= samples:
            results = [windows.evaluate(g, time.time()) for g in names]
            _emit_lag(results, windows, window, fmt, single=len(groups or []) == 1, watch=watch)
            reports += 1
            if not watch or (count and reports >= count):
                break
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    raise typer.Exit(0 if all(r.status is r.status.OK for r in results) else 1)


def _emit_lag(results: list[Any], windows: Any, window: int, fmt: Format, *, single: bool, watch: bool) -> None:
    from kctl.monitor import sampler

    docs = [sampler.to_json(r, state=windows.states.get(r.group), window=window, source="fresh sampling")
            for r in results]
    if watch and fmt is Format.json:
        _json_line(docs[0] if single else docs)
        return
    if fmt in (Format.json, Format.yaml, Format.raw):
        output.emit(docs[0] if single else docs, fmt)
        return
    rows = [{"group": d["group"], "state": d["state"], "status": d["status"], "total_lag": d["total_lag"],
             "max_lag": (f"{d['max_lag']['topic']}-{d['max_lag']['partition']}={d['max_lag']['lag']}"
                         if d["max_lag"] else "-"),
             "window": f"{int(d['complete_fraction'] * 100)}%",
             "problems": ", ".join(f"{p['topic']}-{p['partition']} {p['status']}" for p in d["problems"]) or "-"}
            for d in docs]
    incomplete = [d["group"] for d in docs if not d["complete"]]
    footer = (f"window incomplete for {', '.join(incomplete)}: a fresh sampling of {window} snapshots or the"
              " monitor gives the full evaluation" if incomplete else None)
    output.emit(docs, fmt, rows=rows, columns=["group", "state", "status", "total_lag", "max_lag", "window"],
                wide_columns=["problems"], title="consumer lag", footer=footer)
