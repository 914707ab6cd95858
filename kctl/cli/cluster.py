"""kctl image build, up, down, status, logs: the cluster's lifecycle."""

from __future__ import annotations

import subprocess
from pathlib import Path

import typer
from rich.live import Live
from rich.text import Text

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt
from kctl.cli.main import app
from kctl.cli.spec_cmds import load
from kctl.errors import KctlError, UsageError
from kctl.runtime import cluster as rt
from kctl.runtime import compose
from kctl.spec import state_dir_for

image_app = typer.Typer(help="The node image (Java 17, ZooKeeper and Kafka).", no_args_is_help=True)
app.add_typer(image_app, name="image")


@image_app.command("build")
def image_build(
    kafka_dist: Path | None = typer.Option(None, "--kafka-dist", help="Your own Kafka .tgz or extracted dir."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build even if the image is up to date."),
    file: Path = SpecOpt,
) -> None:
    """Build the node image (up also builds it when missing)."""
    from kctl.runtime.image import ensure_image
    from kctl.spec import ClusterSpec

    spec = load(file) if file.exists() else ClusterSpec()
    info = ensure_image(compose.client(timeout=600), kafka_version=spec.versions.kafka,
                        scala_version=spec.versions.scala, kafka_dist=kafka_dist, rebuild=rebuild,
                        progress=lambda m: output.info(m))
    word = "built" if info.built else "up to date"
    output.info(f"{info.tag} {word}: {info.size_bytes / 1e6:.0f} MB, Kafka {info.kafka_version},"
                f" ZooKeeper {info.zookeeper_version}, dist from {info.dist_source}")


@app.command()
def up(
    file: Path = SpecOpt,
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once containers are started."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Overall seconds to wait for health."),
    kafka_dist: Path | None = typer.Option(None, "--kafka-dist", help="Kafka .tgz or dir for the image build."),
    fmt: output.Format = OutputOpt,
) -> None:
    """Render, start the ensemble, and wait until it is verified healthy."""
    spec = load(file)
    state = state_dir_for(spec, file)
    line = Text("")
    with Live(line, console=output.stderr, transient=True, refresh_per_second=8) as live:
        def stage(name: str, saw: str) -> None:
            live.update(Text(f"waiting: {name} — {saw}"[:200]))

        def say(msg: str) -> None:
            live.console.print(msg, highlight=False)

        result = rt.up(spec, state, wait=not no_wait, timeout=timeout, kafka_dist=kafka_dist,
                       progress=say, on_stage=stage)
    for s in result.stages:
        output.info(f"ok  {s.name} ({s.seconds:.1f}s): {s.saw}")
    if no_wait:
        output.info(f"{spec.name}: started in {result.seconds:.1f}s (not waiting; see `kctl status`)")
    else:
        output.info(f"{spec.name}: healthy in {result.seconds:.1f}s; bootstrap servers {spec.bootstrap_servers}")
    if fmt in (output.Format.json, output.Format.yaml):
        output.emit(result, fmt)


@app.command()
def down(
    file: Path = SpecOpt,
    volumes: bool = typer.Option(False, "--volumes", "-v", help="Also delete data, logs and rendered files."),
) -> None:
    """Stop Kafka, then ZooKeeper, and remove the containers; data is kept unless --volumes."""
    spec = load(file)
    state = state_dir_for(spec, file)
    n = rt.down(spec, state, volumes=volumes, progress=output.info)
    output.info(f"{spec.name}: removed {n} container(s)" + ("" if volumes else f"; data kept in {state}"))


@app.command()
def status(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """One view of the ensemble. Exit 0 healthy, 1 degraded, 2 nothing answers."""
    spec = load(file)
    st = rt.status(spec)
    rows = []
    for n in st.nodes:
        z, b = n.zookeeper, n.broker
        rows.append({
            "node": n.node,
            "container": n.container + (f" ({n.health})" if n.health else ""),
            "processes": " ".join(f"{k}={v}" for k, v in n.processes.items()) or "-",
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
              + (f"\nproblems: {'; '.join(st.problems)}" if st.problems else ""))
    output.emit(st, fmt, rows=rows,
                columns=["node", "container", "zk_mode", "zxid", "broker", "registered", "controller", "urp"],
                wide_columns=["processes", "outstanding", "latency_ms", "connections"],
                title=f"cluster {st.cluster}", footer=footer)
    raise typer.Exit(st.exit_code)


@app.command()
def logs(
    node: str = typer.Argument(..., help="Node or container, e.g. logger2."),
    service: str = typer.Option("kafka", "--service", "-s", help="zookeeper, kafka or supervisor."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    lines: int = typer.Option(100, "--tail", "-n", help="Lines to show."),
    file: Path = SpecOpt,
) -> None:
    """Show a node's ZooKeeper or Kafka log."""
    spec = load(file)
    paths = {"zookeeper": "/var/log/kctl/zookeeper/zookeeper.log", "kafka": "/var/log/kctl/kafka/server.log",
             "supervisor": "/var/log/kctl/supervisord.log"}
    if service not in paths:
        raise UsageError(f"unknown service {service!r}", hint="use --service zookeeper, kafka or supervisor")
    n = spec.node(node)
    name = node if node in (spec.zk_host(n), spec.kafka_host(n)) else (
        spec.zk_host(n) if service == "zookeeper" else spec.kafka_host(n))
    infos = {c.name: c for c in compose.containers(spec)}
    if name not in infos:
        raise KctlError(f"no container {name} in cluster {spec.name}", hint="is it up? see `kctl status`")
    argv = ["docker", "exec", infos[name].container_name, "tail", "-n", str(lines)]
    if follow:
        argv.append("-F")
    argv.append(paths[service])
    try:
        rc = subprocess.call(argv)
    except KeyboardInterrupt:
        rc = 0
    if rc not in (0, 130):
        raise KctlError(f"cannot read {paths[service]} in {name}", hint=f"is {name} running? `kctl status`")
