"""`kctl gen logs` (the log agent) and `kctl stream ...` (the PySpark job)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kctl.cli.common import OutputOpt, SpecOpt, connect, load
from kctl.errors import KctlError, UsageError
from kctl.output import Format, emit, info

if TYPE_CHECKING:
    from kctl.kafka.client import Target


def register(app: typer.Typer) -> None:
    gen_app = typer.Typer(help="Generate or ship data into the cluster.", no_args_is_help=True)
    gen_app.command("logs")(gen_logs)
    app.add_typer(gen_app, name="gen")
    stream_app = typer.Typer(help="The PySpark Structured Streaming job that consumes the cluster.",
                             no_args_is_help=True)
    stream_app.command("submit")(submit)
    stream_app.command("status")(status)
    stream_app.command("stop")(stop)
    stream_app.command("metrics")(metrics)
    stream_app.command("query")(query)
    stream_app.command("optimize")(optimize)
    app.add_typer(stream_app, name="stream")

BootstrapOpt = typer.Option(None, "--bootstrap-servers", "-b", envvar="KCTL_BOOTSTRAP_SERVERS",
                            help="Kafka bootstrap servers; default: from kctl.yaml.")
CheckpointOpt = typer.Option(None, "--checkpoint", help="Checkpoint dir or s3a://BUCKET/PREFIX"
                                                        " [default: .kctl/stream/checkpoint].")
TablesOutOpt = typer.Option(None, "--out",
                            help="The job's output: a dir, or s3a://BUCKET/PREFIX (with the --s3-* options)"
                                 " [default: .kctl/stream/out; with kctl.yaml's Spark cluster: the --name job's].")
S3EndpointOpt = typer.Option(None, "--s3-endpoint", help="S3-compatible endpoint, http(s)://HOST[:PORT]; "
                                                         "default: AWS S3 of --s3-region.")
S3RegionOpt = typer.Option("us-east-1", "--s3-region", help="The store's region.")
S3PathStyleOpt = typer.Option(True, "--s3-path-style/--s3-virtual-hosted",
                              help="Path-style requests (most S3-compatible stores) or virtual-hosted (AWS).")
S3CredentialsOpt = typer.Option(None, "--s3-credentials",
                                help="File of mode 0600 with the S3 keys: access_key=... and secret_key=... "
                                     "lines, or an AWS shared-credentials file.")
S3ProfileOpt = typer.Option("default", "--s3-profile", help="The section of an AWS shared-credentials file.")


def _store(out: str, endpoint: str | None, region: str, path_style: bool, credentials: Path | None,
           profile: str) -> Any:
    """kctl.stream.s3.Settings for an s3a:// --out (None for a local dir; --s3-* options then refused)."""
    from kctl.stream import s3

    if not s3.is_s3(out):
        if endpoint or credentials:
            raise UsageError("--s3-endpoint and --s3-credentials apply to an s3a:// --out only",
                             hint="write --out s3a://BUCKET/PREFIX, or leave the --s3-* options out")
        return None
    return s3.Settings(endpoint=endpoint, region=region, path_style=path_style,
                       credentials_file=str(credentials.expanduser().resolve()) if credentials else None,
                       profile=profile)


def _bootstrap(flag: str | None, spec: Path) -> str:
    """The bootstrap servers: the flag's (saying which cluster id answers there), or those of the
    kctl.yaml's own cluster, checked to be that cluster (kctl.cluster.identity)."""
    if flag:
        from kctl.cluster import identity

        cid = identity.answering(flag, spec=load(spec) if spec.exists() else None)
        info(f"talking to Kafka cluster id {cid or 'unknown (no answer yet)'} at {flag}"
             " (--bootstrap-servers: not checked against kctl.yaml)")
        return flag
    if not spec.exists():
        raise KctlError("no bootstrap servers", hint=f"pass --bootstrap-servers, or run where {spec} exists")
    return connect(spec).bootstrap_servers


def _secured(spec: Path) -> Any:
    """The kctl.yaml's spec when its cluster is secured (clients log in as its admin user), else None."""
    if not spec.exists():
        return None
    loaded = load(spec)
    return loaded if loaded.security.enabled else None


def _target(flag: str | None, spec: Path) -> Target:
    """Where the log agent writes: :func:`_bootstrap`'s servers, as a secured kctl.yaml's admin user."""
    from kctl.kafka.client import Target

    servers = _bootstrap(flag, spec)
    return Target.of(_secured(spec), servers)


def gen_logs(
    topic: str = typer.Option("access-logs", "--topic", "-t", help="Topic to produce to."),
    rate: float = typer.Option(100.0, "--rate", "-r", help="Events per second (request time and pacing)."),
    count: int = typer.Option(1000, "--count", "-n", help="Number of events."),
    seed: int = typer.Option(0, "--seed", help="Random seed: same seed and --start, same events."),
    hosts: int = typer.Option(3, "--hosts", help="Number of simulated web hosts (one Kafka key each)."),
    start: str = typer.Option(None, "--start", help="Request time of the first event (ISO-8601) [default: now]."),
    malformed: int = typer.Option(0, "--malformed", help="Also send this many malformed events."),
    from_file: Path = typer.Option(None, "--from-file", help="Ship this access log instead of generating."),
    follow: bool = typer.Option(False, "--follow", "-F", help="With --from-file: keep following (tail -F)."),
    host_name: str = typer.Option(None, "--host-name", help="With --from-file: host.name [default: hostname]."),
    duration: float = typer.Option(600.0, "--duration", help="Stop after this many seconds in any case."),
    bootstrap: str = BootstrapOpt,
    spec: Path = SpecOpt,
    output: Format = OutputOpt,
) -> None:
    """Produce nginx access-log lines as filebeat JSON events, keyed by host."""
    from kctl.agent import produce as agent

    # Every option is checked before anything connects: bad input reaches no cluster.
    bad = [f"{flag} must be {rule}, not {v}" for flag, v, ok, rule in (
        ("--count", count, count >= 0, "0 or more"), ("--rate", rate, rate > 0, "above 0"),
        ("--hosts", hosts, hosts >= 1, "at least 1"), ("--malformed", malformed, malformed >= 0, "0 or more"),
        ("--duration", duration, duration > 0, "above 0")) if not ok]
    if follow and from_file is None:
        bad.append("--follow needs --from-file")
    if from_file is not None and not follow and not from_file.exists():
        bad.append(f"--from-file {from_file}: no such file")
    t0 = None
    if start:
        try:
            t0 = dt.datetime.fromisoformat(start)
        except ValueError:
            bad.append(f"--start {start!r} is not an ISO-8601 time")
    if bad:
        raise UsageError("; ".join(bad), hint="`kctl gen logs --help` describes the options")
    target = _target(bootstrap, spec)
    if from_file is not None:
        res = agent.ship_file(target, topic, from_file, follow=follow, host=host_name, max_seconds=duration)
    else:
        from kctl.agent.nginx import generate, malformed_records

        if t0 is not None and t0.tzinfo is None:
            t0 = t0.replace(tzinfo=dt.timezone.utc)
        events = ((e.key, e.value) for e in generate(count, seed=seed, hosts=hosts, start=t0, rate=rate, topic=topic))
        res = agent.produce(target, topic, malformed_records(events, malformed, seed=seed), rate=rate,
                            max_seconds=duration)
    emit(res, output)


def submit(
    topic: list[str] = typer.Option(["access-logs"], "--topic", "-t", help="Topic(s) to read (repeatable)."),
    out: str = typer.Option(None, "--out", help="Output dir, or s3a://BUCKET/PREFIX with the --s3-* options:"
                                                " archive, deadletter, metrics [default: .kctl/stream/out; with"
                                                " kctl.yaml's Spark cluster: its shared dir's JOB/out]."),
    checkpoint: str = typer.Option(None, "--checkpoint", help="Checkpoint dir, or s3a://BUCKET/PREFIX [default:"
                                                              " .kctl/stream/checkpoint; with kctl.yaml's Spark"
                                                              " cluster: its shared dir's JOB/checkpoint]."),
    master: str = typer.Option(None, "--master", help="local[N] or spark://HOST:PORT [default: kctl.yaml's Spark"
                                                      " cluster (its `spark` section), else local[2]]."),
    trigger: str = typer.Option("1s", "--trigger", help="Micro-batch interval."),
    available_now: bool = typer.Option(False, "--available-now", help="Process what is in Kafka, then exit."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background; see `kctl stream status`."),
    starting_offsets: str = typer.Option("earliest", "--starting-offsets", help="earliest, latest, or JSON."),
    fail_on_data_loss: bool = typer.Option(False, "--fail-on-data-loss/--no-fail-on-data-loss",
                                           help="Fail when Kafka deleted offsets the job had not read."),
    max_offsets: int = typer.Option(200_000, "--max-offsets-per-trigger",
                                    help="Cap on records per micro-batch (0: none)."),
    small_batch_rows: int = typer.Option(5_000, "--small-batch-rows",
                                         help="A micro-batch of at most this many records is written by delta-rs"
                                              " from the driver, not by Spark's Delta appends, and so are a larger"
                                              " batch's bad rows when at most this many (0: never)."),
    jars: list[str] = typer.Option(None, "--jars", help="Kafka source jars (offline); default: resolved and cached."),
    driver_memory: str = typer.Option("768m", "--driver-memory"),
    name: str = typer.Option("main", "--name", help="Job name: offsets are committed to group kctl-stream-NAME."),
    optimize_every: int = typer.Option(0, "--optimize-every",
                                       help="Compact and VACUUM the tables every N micro-batches (0: never)."),
    retain_hours: float = typer.Option(168.0, "--retain-hours", help="VACUUM keeps files younger than this."),
    conf: list[str] = typer.Option(None, "--conf", help="A Spark setting, spark.KEY=VALUE (repeatable), as with"
                                                        " spark-submit: e.g. spark.driver.extraJavaOptions."),
    s3_endpoint: str = S3EndpointOpt,
    s3_region: str = S3RegionOpt,
    s3_path_style: bool = S3PathStyleOpt,
    s3_credentials: Path = S3CredentialsOpt,
    s3_profile: str = S3ProfileOpt,
    bootstrap: str = BootstrapOpt,
    spec: Path = SpecOpt,
    output: Format = OutputOpt,
) -> None:
    """Run the streaming job (foreground unless --detach); its tables and checkpoint in local dirs or on an
    S3-compatible store."""
    import dataclasses

    from kctl.stream import s3
    from kctl.stream.config import DEFAULT_CHECKPOINT, DEFAULT_OUT, JobConfig, parse_conf
    from kctl.stream.submit import check_s3, trigger_interval
    from kctl.stream.submit import submit as do_submit
    from kctl.stream.tables import MIN_RETAIN_HOURS

    bad = [m for m, ok in ((f"--optimize-every must be 0 or more, not {optimize_every}", optimize_every >= 0),
                           (f"--max-offsets-per-trigger must be 0 or more, not {max_offsets}", max_offsets >= 0),
                           (f"--small-batch-rows must be 0 or more, not {small_batch_rows}", small_batch_rows >= 0),
                           (f"--retain-hours must be at least {MIN_RETAIN_HOURS}, not {retain_hours}",
                            retain_hours >= MIN_RETAIN_HOURS),
                           (f"--name {name!r} must be non-empty, without spaces", bool(name) and " " not in name))
           if not ok]
    try:
        extra_conf = parse_conf(conf or [])
    except ValueError as exc:
        bad.append(str(exc))
    if bad:
        raise UsageError("; ".join(bad), hint="`kctl stream submit --help` describes the options")
    jar_list = [j for spec_ in (jars or []) for j in spec_.split(",") if j]
    if (s3.is_s3(out) or s3.is_s3(checkpoint)) and jar_list and not any("hadoop-aws" in Path(j).name
                                                                         for j in jar_list):
        raise UsageError("--jars names no hadoop-aws jar, which Spark needs to write to s3a://",
                         hint="add hadoop-aws (the version of pyspark's hadoop-client jars) and its "
                              "software.amazon.awssdk bundle to --jars, or leave --jars out (kctl resolves them)")
    loaded = load(spec) if spec.exists() else None
    on_cluster = master is None and loaded is not None and loaded.spark is not None
    store = s3.Settings(endpoint=s3_endpoint, region=s3_region, path_style=s3_path_style,
                        credentials_file=str(s3_credentials.expanduser().resolve()) if s3_credentials else None,
                        profile=s3_profile)
    if on_cluster and loaded is not None:
        # kctl.yaml declares a Spark cluster: the job's driver in a container of its own, executors on the workers
        from kctl.model.spec import state_dir_for
        from kctl.stream.submit import cluster_paths, submit_to_cluster

        cluster_dir = state_dir_for(loaded, spec)
        # The store, its buckets and the credentials file, before Kafka is asked anything and before any JVM starts.
        s3_store = check_s3(out or "", checkpoint or "", store, None)
        o, c = cluster_paths(cluster_dir, name, out, checkpoint)
        cfg = JobConfig(
            bootstrap_servers="", topics=list(topic), out=o, checkpoint=c,
            s3=dataclasses.asdict(s3_store) if s3_store else None,
            trigger="available-now" if available_now else trigger_interval(trigger),
            starting_offsets=starting_offsets, fail_on_data_loss=fail_on_data_loss,
            max_offsets_per_trigger=max_offsets, jars=jar_list, driver_memory=driver_memory,
            name=name, optimize_every=optimize_every, vacuum_retain_hours=retain_hours, extra_conf=extra_conf,
            host_bootstrap_servers=_bootstrap(bootstrap, spec), small_batch_rows=small_batch_rows,
            host_spec_file=str(spec.resolve()))
        if not detach:
            info(f"starting the stream job on the Spark cluster of {spec} ({cfg.trigger}); its driver runs in a"
                 " container: Ctrl-C stops it after the current batch")
        emit(submit_to_cluster(cfg, loaded, cluster_dir, detach=detach), output)
        return
    master = master or "local[2]"
    out = out or str(DEFAULT_OUT)
    cp = checkpoint or str(DEFAULT_CHECKPOINT)
    # The store, its buckets and the credentials file, before Kafka is asked anything and before any JVM starts.
    s3_store = check_s3(out, cp, store, master)
    cfg = JobConfig(
        bootstrap_servers=_bootstrap(bootstrap, spec), topics=list(topic), out=_abs(out),
        checkpoint=_abs(cp), master=master, s3=dataclasses.asdict(s3_store) if s3_store else None,
        trigger="available-now" if available_now else trigger_interval(trigger),
        starting_offsets=starting_offsets, fail_on_data_loss=fail_on_data_loss,
        max_offsets_per_trigger=max_offsets, jars=jar_list, driver_memory=driver_memory,
        name=name, optimize_every=optimize_every, vacuum_retain_hours=retain_hours,
        spec_file=str(spec.resolve()) if spec.exists() else None,  # a secured one: its credentials
        extra_conf=extra_conf, small_batch_rows=small_batch_rows,
    )
    if not detach:
        info(f"starting the stream job on {master} ({cfg.trigger}); Ctrl-C stops it after the current batch")
    emit(do_submit(cfg, detach=detach), output)


def _abs(path: str) -> str:
    """A local dir made absolute (the job runs in a process of its own); an s3a:// URL as it is."""
    from kctl.stream import s3

    return path if s3.is_s3(path) else str(Path(path).resolve())


JobNameOpt = typer.Option("main", "--name", help="The job's name (with kctl.yaml's Spark cluster: where its"
                                                 " checkpoint is, when --checkpoint is left out).")


def _checkpoint(checkpoint: str | None, name: str, spec: Path) -> tuple[str, Path | None]:
    """The job's checkpoint and, where it names one, kctl's record dir of it (JobConfig.record_dir): on
    kctl.yaml's Spark cluster (when it declares one) the --name job's (kctl.stream.submit.find_job), else
    --checkpoint or the default."""
    if spec.exists():
        loaded = load(spec)
        if loaded.spark is not None:
            from kctl.model.spec import state_dir_for
            from kctl.stream.submit import find_job

            return find_job(state_dir_for(loaded, spec), name, checkpoint)
    return (checkpoint if checkpoint is not None else ".kctl/stream/checkpoint"), None


def _out(name: str, spec: Path) -> str:
    """The job's output dir when --out is left out: the --name job's on kctl.yaml's Spark cluster, else the
    default."""
    if spec.exists():
        loaded = load(spec)
        if loaded.spark is not None:
            from kctl.model.spec import state_dir_for
            from kctl.stream.submit import cluster_paths

            return cluster_paths(state_dir_for(loaded, spec), name, None, None)[0]
    return ".kctl/stream/out"


def status(
    checkpoint: str = CheckpointOpt,
    bootstrap: str = typer.Option(None, "--bootstrap-servers", "-b", help="Override the job's bootstrap servers."),
    name: str = JobNameOpt,
    spec: Path = SpecOpt,
    output: Format = OutputOpt,
) -> None:
    """Progress of the job and its lag per partition (Kafka latest minus checkpointed offsets); on a Spark
    cluster, its driver's container, the master and the workers."""
    from kctl.output import to_plain
    from kctl.stream.state import status as get_status

    cp, record = _checkpoint(checkpoint, name, spec)
    st = get_status(cp, bootstrap, record)
    if output in (Format.json, Format.yaml):
        emit(st, output)
        return
    d = to_plain(st)
    parts = d.pop("partitions")
    tables = d.pop("tables")
    sp = d.pop("spark")
    if sp is not None:
        d.update(driver=f"{sp['driver']} ({sp['driver_state']})",
                 spark_master=f"{sp.get('master')} {sp.get('status')} (UI {sp.get('ui')})")
    emit(d, output)
    if sp is not None and sp.get("workers"):
        emit(sp["workers"], output, columns=["name", "state", "cores", "cores_used", "memory_mb", "ui"])
    emit(parts, output, columns=["topic", "partition", "committed", "latest", "lag"])
    if tables:
        emit(tables, output, columns=["table", "version", "files", "rows", "last_batch"])


def stop(
    checkpoint: str = CheckpointOpt,
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for the current batch to finish."),
    name: str = JobNameOpt,
    spec: Path = SpecOpt,
    output: Format = OutputOpt,
) -> None:
    """Stop the job gracefully, after its current micro-batch (on a Spark cluster: its driver's container stays
    stopped)."""
    from kctl.stream.state import stop as do_stop

    cp, record = _checkpoint(checkpoint, name, spec)
    res = do_stop(cp, timeout, record)
    loaded = load(spec) if spec.exists() else None
    if loaded is not None and loaded.spark is not None and loaded.spark.warm_driver:
        # the job gave the workers' cores back: the next job's warm driver starts (kctl.stream.warm)
        from kctl.model.spec import state_dir_for
        from kctl.stream import warm

        got = warm.ensure(loaded, state_dir_for(loaded, spec))
        res["warm_driver"] = got["container"] if got else None
    emit(res, output)


def metrics(
    out: str = TablesOutOpt,
    s3_endpoint: str = S3EndpointOpt,
    s3_region: str = S3RegionOpt,
    s3_path_style: bool = S3PathStyleOpt,
    s3_credentials: Path = S3CredentialsOpt,
    s3_profile: str = S3ProfileOpt,
    name: str = JobNameOpt,
    spec: Path = SpecOpt,
    output: Format = OutputOpt,
) -> None:
    """Requests and bytes per 1-minute event-time window, host and HTTP status."""
    from kctl.stream.metrics import FIELDS, read_metrics

    out = out or _out(name, spec)
    rows = read_metrics(out, store=_store(out, s3_endpoint, s3_region, s3_path_style, s3_credentials, s3_profile))
    emit(rows, output, rows=rows, columns=FIELDS)


def query(
    sql: str = typer.Argument(..., help="SQL over the tables archive, deadletter and metrics (DuckDB dialect)."),
    out: str = TablesOutOpt,
    limit: int = typer.Option(1000, "--limit", help="At most this many rows (0: all)."),
    s3_endpoint: str = S3EndpointOpt,
    s3_region: str = S3RegionOpt,
    s3_path_style: bool = S3PathStyleOpt,
    s3_credentials: Path = S3CredentialsOpt,
    s3_profile: str = S3ProfileOpt,
    name: str = JobNameOpt,
    spec: Path = SpecOpt,
    output: Format = OutputOpt,
) -> None:
    """Ask the job's Delta tables a question in SQL (DuckDB over delta-rs; no JVM)."""
    from kctl.stream.tables import query as run_query

    if limit < 0:
        raise UsageError(f"--limit must be 0 or more, not {limit}")
    out = out or _out(name, spec)
    res = run_query(out, sql, limit or None,
                    store=_store(out, s3_endpoint, s3_region, s3_path_style, s3_credentials, s3_profile))
    emit(res.rows, output, rows=res.rows, columns=res.columns)


def optimize(
    out: str = TablesOutOpt,
    checkpoint: str = CheckpointOpt,
    retain_hours: float = typer.Option(168.0, "--retain-hours",
                                       help="VACUUM keeps files unreferenced for less than this (at least 1)."),
    s3_endpoint: str = S3EndpointOpt,
    s3_region: str = S3RegionOpt,
    s3_path_style: bool = S3PathStyleOpt,
    s3_credentials: Path = S3CredentialsOpt,
    s3_profile: str = S3ProfileOpt,
    name: str = JobNameOpt,
    spec: Path = SpecOpt,
    output: Format = OutputOpt,
) -> None:
    """Compact the tables' small files and VACUUM old ones (by the running job itself, if it runs)."""
    from kctl.stream.tables import optimize as do_optimize

    out = out or _out(name, spec)
    store = _store(out, s3_endpoint, s3_region, s3_path_style, s3_credentials, s3_profile)
    cp, record = _checkpoint(checkpoint, name, spec)
    emit(do_optimize(out, cp, retain_hours, store=store, record=record), output)
