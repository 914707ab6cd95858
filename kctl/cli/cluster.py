"""kctl image build, up, down, status, logs: the cluster's lifecycle."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kctl import contract, output
from kctl.cli.common import OutputOpt, SpecOpt, load


def register(app: typer.Typer) -> None:
    image_app = typer.Typer(help="The node image (Java 17, ZooKeeper and Kafka).", no_args_is_help=True)
    image_app.command("build")(image_build)
    app.add_typer(image_app, name="image")
    app.command()(up)
    app.command()(down)
    app.command()(status)
    app.command()(logs)
    app.command("support-bundle")(support_bundle)


def image_build(
    kafka_dist: Path | None = typer.Option(None, "--kafka-dist", help="Your own Kafka .tgz or extracted dir."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build even if the image is up to date."),
    file: Path = SpecOpt,
) -> None:
    """Build the node image (up also builds it when missing)."""
    from kctl.model.spec import ClusterSpec
    from kctl.runtime.engine import engines
    from kctl.runtime.image.build import ensure_image

    spec = load(file) if file.exists() else ClusterSpec()
    info = ensure_image(engines.client(spec, timeout=600), kafka_version=spec.versions.kafka,
                        scala_version=spec.versions.scala, kafka_dist=kafka_dist, rebuild=rebuild,
                        progress=output.info)
    word = "built" if info.built else "up to date"
    output.info(f"{info.tag} {word}: {info.size_bytes / 1e6:.0f} MB, Kafka {info.kafka_version},"
                f" {f'ZooKeeper {info.zookeeper_version}' if info.zookeeper_version else 'no ZooKeeper'},"
                f" dist from {info.dist_source}")


def up(
    file: Path = SpecOpt,
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once containers are started."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Overall seconds to wait for health."),
    kafka_dist: Path | None = typer.Option(None, "--kafka-dist", help="Kafka .tgz or dir for the image build."),
    engine: str | None = typer.Option(None, "--engine", help="compose or swarm: overrides kctl.yaml's `engine` for"
                                                             " this cluster (recorded in its state dir until"
                                                             " `kctl down --volumes`)."),
    strict_spread: bool = typer.Option(False, "--strict-spread", help="engine swarm: refuse to deploy when two"
                                                                      " kctl nodes would share a Swarm node."),
    accept_new_host_keys: bool = typer.Option(
        False, "--accept-new-host-keys", help="engine hosts: trust each host whose key is in no known-hosts file"
                                              " on first use (its fingerprint printed), this once; as"
                                              " ssh.trust_on_first_use. A changed key is still refused."),
    fmt: output.Format = OutputOpt,
) -> None:
    """Render, start the ensemble, and wait until it is verified healthy."""
    from kctl.cluster import identity
    from kctl.errors import UsageError
    from kctl.model.spec import Engine, record_engine, state_dir_for
    from kctl.runtime.engine import engines
    from kctl.runtime.engine.engines import Capability

    spec = load(file)
    state = state_dir_for(spec, file)
    if engine is not None:
        try:
            kind = Engine(engine)
        except ValueError:
            raise UsageError(f"unknown engine {engine!r}", hint="--engine compose or --engine swarm") from None
        fixed = [k for k in (kind, spec.engine) if not engines.implementation(k).supports(Capability.CHOSEN_BY_FLAG)]
        if fixed and kind is not spec.engine:
            raise UsageError(f"--engine {kind.value}: a cluster moves to or from engine {fixed[0].value} in kctl.yaml,"
                             " where each node's address is", hint=f"set `engine: {fixed[0].value}` and"
                             " nodes[].advertised_host in kctl.yaml (docs/bare-metal.md)")
        running = [c for c in engines.observe(spec) if c.state == "running"] if kind is not spec.engine else []
        if running:
            raise UsageError(f"cluster {spec.name} runs on engine {spec.engine.value}: it cannot move to {kind.value}"
                             " while it runs", hint="`kctl down` first (data on the old engine is not moved)")
        spec = spec.model_copy(update={"engine": kind})
    if accept_new_host_keys:
        if not engines.supports(spec, Capability.SSH_HOSTS):
            raise UsageError("--accept-new-host-keys is for engine hosts (the hosts kctl logs in to over ssh)",
                             hint=f"cluster {spec.name} runs on engine {spec.engine.value}: leave it out")
        spec = spec.model_copy(update={"ssh": spec.ssh.model_copy(update={"trust_on_first_use": True})})
    identity.check_containers(spec, state)  # same name, other directory: never touch its containers
    identity.check_ports(spec, state)
    from kctl.roll import up as rolling

    with output.waiting() as (stage, say):
        # engine hosts: the services whose files changed under them restarted through the roll afterwards
        result = rolling.up(spec, state, wait=not no_wait, timeout=timeout, kafka_dist=kafka_dist,
                            progress=say, on_stage=stage, strict_spread=strict_spread)
    if engine is not None:
        record_engine(state, spec.engine)
    for s in result.stages:
        output.info(f"ok  {s.name} ({s.seconds:.1f}s): {s.saw}")
    if result.restarted:
        output.info(f"restarted one at a time through the roll's gates: {', '.join(result.restarted)}")
    if no_wait:
        output.info(f"{spec.name}: started in {result.seconds:.1f}s (not waiting; see `kctl status`)")
    else:
        output.info(f"{spec.name}: healthy in {result.seconds:.1f}s; bootstrap servers {spec.bootstrap_servers}")
    if fmt in (output.Format.json, output.Format.yaml):
        output.emit(result, fmt)


def down(
    file: Path = SpecOpt,
    volumes: bool = typer.Option(False, "--volumes", "-v", help="Also delete data, logs and rendered files."),
) -> None:
    """Stop Kafka, then ZooKeeper, and remove the containers; data is kept unless --volumes."""
    from kctl.cluster import identity, lifecycle
    from kctl.model.spec import state_dir_for

    spec = load(file)
    state = state_dir_for(spec, file)
    identity.check_containers(spec, state)
    from kctl.monitor import process

    if process.running(state) is not None:
        rec = process.stop(state, spec.name)  # it would report a cluster that is gone as down
        output.info(f"stopped the monitor of {spec.name} (pid {rec.pid}); its history stays in {state}")
    n = lifecycle.down(spec, state, volumes=volumes, progress=output.info)
    from kctl.runtime.engine import engines
    from kctl.runtime.engine.engines import Capability

    if not engines.supports(spec, Capability.CONTAINERS):
        output.info(f"{spec.name}: uninstalled from {n} host(s)" + (
            "; data removed" if volumes else f"; data kept in {contract.DATA_ROOT} on each host (--volumes"
                                            " removes it)"))
        return
    output.info(f"{spec.name}: removed {n} container(s)" + ("" if volumes else f"; data kept in {state}"))


def status(
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
    wait: float = typer.Option(0, "--wait", min=0, help="Up to this many seconds, wait until healthy (quorum,"
                                                       " every broker, no under-replicated partition) first."),
) -> None:
    """One view of the ensemble. Exit 0 healthy, 1 degraded, 2 not running (or another cluster answers)."""
    from kctl.cluster import health
    from kctl.errors import TimeoutReached
    from kctl.model.spec import state_dir_for
    from kctl.wait import Deadline

    spec = load(file)
    state_dir = state_dir_for(spec, file)
    # Raises (exit 2) when the cluster is not running, or what answers on its ports is another one.
    st = None if wait else health.status(spec, state_dir)
    deadline = Deadline(wait)
    while st is None:  # --wait: the reading shown is a healthy one, unless the time ran out
        try:
            health.wait_for(spec, lambda s: s.health == "healthy", timeout=max(deadline.left(), 0.1),
                            description="healthy")
        except TimeoutReached:
            output.warn(f"not healthy after {wait:g}s")
            st = health.status(spec, state_dir)
            break
        st = health.status(spec, state_dir)
        if st.health != "healthy":
            if not deadline.passed():
                st = None  # healthy a moment ago, not now (an election under way): wait on
            else:
                output.warn(f"not healthy after {wait:g}s")
    from kctl.runtime.engine import engines
    from kctl.runtime.engine.engines import Capability

    where = "container" if engines.supports(spec, Capability.CONTAINERS) else "host"  # engine hosts: a host's state
    rows = []
    quorum = {c["node"]: c for c in st.controllers}
    for n in st.nodes:
        z, b = n.zookeeper, n.broker
        c = quorum.get(n.node)
        rows.append({
            "node": n.node,
            where: n.container + (f" ({n.health})" if n.health else ""),
            "processes": " ".join(f"{k}={v}" for k, v in n.processes.items()) or "-",
            "kraft": (None if c is None else c["error"] or f"{c['id']}: " + (
                "leader" if c["leader"] == c["id"] else f"follows {c['leader']}") + f" (epoch {c['epoch']})"),
            "zk_mode": z.mode if z else None,
            "zxid": z.zxid if z else None,
            "outstanding": z.outstanding if z else None,
            "latency_ms": z.latency_avg if z else None,
            "connections": z.connections if z else None,
            "broker": b.id if b else None,
            "registered": b.registered if b else None,
            "controller": b.controller if b else None,
            "urp": b.under_replicated if b else None,
        })
    footer = (f"{st.health.upper()}: quorum {st.quorum}"
              + (f" (leader {st.leader})" if st.leader else "")
              + f", brokers {st.brokers_registered}/{st.brokers_expected}"
              + f", controller {st.controller if st.controller is not None else '-'}"
              + f", URP {st.under_replicated_partitions if st.under_replicated_partitions is not None else '?'}"
              + (f"\nproblems: {'; '.join(st.problems)}" if st.problems else "")
              + ("\nmetadata: KRaft (the controller quorum; ZooKeeper retired)" if st.metadata == "kraft" else
                 f"\nmetadata: ZooKeeper, migrating to KRaft: phase {st.kraft_migration} (`kctl migrate kraft"
                 " status`)" if st.kraft_migration else ""))
    if st.spark is not None:
        sp = st.spark
        footer += (f"\nspark: master {sp['master']} {sp['status']} (UI {sp['ui']}); workers: "
                   + (", ".join(f"{w['name']} {w['state']} ({w['ui']})" for w in sp["workers"]) or "none")
                   + (f"; {sp['error']}" if sp.get("error") else "")
                   + ("" if "warm_drivers" not in sp else "; warm driver: " + (", ".join(
                       f"{w['container']} {w['state']}" for w in sp["warm_drivers"]) or "none waiting")))
    metadata_columns = ["kraft"] if st.metadata == "kraft" else ["zk_mode", "zxid"]
    output.emit(st, fmt, rows=rows,
                columns=["node", where, *metadata_columns, "broker", "registered", "controller", "urp"],
                wide_columns=["processes", "outstanding", "latency_ms", "connections"],
                title=f"cluster {st.cluster}", footer=footer)
    if st.running is False:
        from kctl.cluster.identity import NotRunning

        raise NotRunning(f"cluster {spec.name!r} is not running: none of its containers runs",
                         hint="`kctl up` starts it")
    raise typer.Exit(st.exit_code)


def logs(
    node: str = typer.Argument(..., help="Node (logger2, or its id) or container (zk2/kafka2 when split)."),
    service: str = typer.Option("kafka", "--service", "-s", help="zookeeper, kafka, controller (KRaft) or"
                                                                  " supervisor (engine hosts: the units' journal)."),
    follow: bool = typer.Option(False, "--follow", "-F", help="Keep printing new lines (tail -F: survives "
                                                              "log rotation); Ctrl-C stops."),
    lines: int = typer.Option(100, "--tail", "-n", min=0, help="Lines to show from the end (0: only new ones)."),
    file: Path = SpecOpt,
) -> None:
    """Show a node's ZooKeeper, Kafka, KRaft controller or supervisord log, read from the state dir (stopped nodes
    too; engines swarm and hosts: read on the node)."""
    from kctl.model.spec import state_dir_for
    from kctl.runtime import logs as node_logs
    from kctl.runtime.faults import interruptible

    spec = load(file)
    log = node_logs.locate(spec, state_dir_for(spec, file), node, service)
    text = node_logs.in_container(spec, log, tail=lines, follow=follow)
    local = text is None  # the state dir has the log (engine compose), not the node
    if text is None:
        text = node_logs.lines(log, tail=lines, follow=follow)
    if follow and local and not log.path.exists():
        output.info(f"waiting for {log.path}")
    out = sys.stdout
    try:
        with interruptible():  # SIGTERM too: what follows on the node (ssh, docker service logs) is ended with it
            for line in text:
                out.write(line + "\n")
                if follow:
                    out.flush()
            out.flush()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the way to stop --follow
        pass
    finally:
        close = getattr(text, "close", None)
        if close is not None:
            close()


def support_bundle(
    out: Path = typer.Option(..., "--out", "-o", help="The archive to write (.tar.gz), mode 0600."),
    lines: int = typer.Option(2000, "--log-lines", min=0, help="Lines from the end of each node's log."),
    force: bool = typer.Option(False, "--force", help="Replace an existing archive of that name."),
    file: Path = SpecOpt,
) -> None:
    """One archive for a support request: kctl.yaml, the rendered files and records, each node's logs, status,
    topics, groups, ACLs, the monitor's alerts, the engine's view and versions; every password, key and token
    redacted. Made also when the cluster is down (errors.txt says what could not be read)."""
    from kctl.cluster import support
    from kctl.model.spec import state_dir_for

    spec = load(file)
    b = support.make(spec, file, state_dir_for(spec, file), out, log_lines=lines, force=force, say=output.info)
    output.info(f"{out}: {len(b.files)} file(s), {b.redacted} value(s) redacted"
                + (f"; not read: {len(b.errors)} part(s), listed in errors.txt" if b.errors else ""))
