"""kctl node: add a node to a running cluster, or remove one, healthy throughout."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect
from kctl.errors import UsageError


def register(app: typer.Typer) -> None:
    node_app = typer.Typer(help="Add a node to the running cluster, or remove one (its partitions moved first).",
                           no_args_is_help=True)
    node_app.command("add")(node_add)
    node_app.command("remove")(node_remove)
    node_app.command("format-storage")(node_format_storage)
    app.add_typer(node_app, name="node")


def _report(change: object, fmt: output.Format, line: str) -> None:
    from kctl.cluster.nodes import NodeChange

    assert isinstance(change, NodeChange)
    for w in change.warnings:
        output.warn(w)
    output.emit_change(change, fmt, line + (f"\nnext: {change.next}" if change.next else ""))


def node_add(
    node_id: int = typer.Option(None, "--id", min=1, max=255, help="Its id (ZooKeeper myid and broker.id);"
                                                                     " default the highest + 1."),
    role: str = typer.Option(None, "--role", help="ZooKeeper role: participant (the default) or observer. On KRaft:"
                                                 " a broker alone (the default), or controller: a controller beside"
                                                 " its broker, made a voter of the dynamic quorum (add-controller)."),
    no_broker: bool = typer.Option(False, "--no-broker", help="A ZooKeeper-only node: no Kafka broker on it"
                                                              " (`broker: false` in kctl.yaml)."),
    force: bool = typer.Option(False, "--force", help="Allow an even number of ZooKeeper participants."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds each wait may take."),
    address: str = typer.Option(None, "--address", help="engine hosts (needed there) and swarm: the new node's"
                                                        " address (its nodes[].advertised_host)."),
    rebalance: bool = typer.Option(False, "--rebalance", help="Once its broker is in and the cluster healthy, move"
                                                              " replicas onto it (throttled, waited for, verified)."),
    by: str = typer.Option("replicas", "--by", help="--rebalance evens out: replicas (count per broker) or bytes."),
    throttle: str = typer.Option(None, "--throttle", help="--rebalance's replication rate limit: 50MB/s."),
    move_timeout: float = typer.Option(900, "--move-timeout", min=1, help="Seconds --rebalance's move may take."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Write a node to kctl.yaml, start it, add its ZooKeeper by dynamic reconfig and wait for its broker."""
    from kctl.cluster import nodes
    from kctl.kafka.balance import parse_rate
    from kctl.model.spec import state_dir_for

    if not rebalance and (throttle or by != "replicas"):
        raise UsageError("--by and --throttle go with --rebalance", hint="kctl node add --rebalance --by bytes")
    rate = parse_rate(throttle) if throttle else None
    spec = connect(file, write=True).kctl_spec
    ch = nodes.add(spec, file, state_dir_for(spec, file), node_id=node_id, role=role, broker=not no_broker,
                   force=force, timeout=timeout, progress=output.info, address=address,
                   rebalance=by if rebalance else None, throttle=rate, move_timeout=move_timeout)
    what = ch.role + ("" if ch.broker else ", ZooKeeper only")
    _report(ch, fmt, f"{spec.name}: node {ch.node_id} ({ch.host}, {what}) added in {ch.seconds:.1f}s")


def node_remove(
    node: str = typer.Argument(..., help="The node to remove (loggerN or id)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask; the node's data directories are removed."),
    force: bool = typer.Option(False, "--force", help="Allow an even number of ZooKeeper participants; on KRaft,"
                                                      " fewer than 3 voters left."),
    throttle: str = typer.Option(None, "--throttle", help="Replication rate limit while moving its replicas."),
    timeout: float = typer.Option(900, "--timeout", min=1, help="Seconds moving its replicas may take."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Move every replica off the node, remove its ZooKeeper from the ensemble (on KRaft its controller from the
    dynamic quorum, remove-controller), then its container and data."""
    from kctl.cluster import nodes
    from kctl.kafka.balance import parse_rate
    from kctl.model.spec import state_dir_for

    rate = parse_rate(throttle) if throttle else None
    spec = connect(file, write=True).kctl_spec
    n = spec.node(node)  # an unknown node stops here
    if not yes:
        typer.confirm(f"move every replica off {n.hostname}, remove it from {spec.name} and delete its data?",
                      abort=True)
    ch = nodes.remove(spec, file, state_dir_for(spec, file), node, force=force, throttle=rate, timeout=timeout,
                      progress=output.info)
    _report(ch, fmt, f"{spec.name}: node {ch.node_id} ({ch.host}) removed in {ch.seconds:.1f}s"
                     f" ({ch.moved_partitions} partition(s) moved off it first)")


def node_format_storage(
    node: str = typer.Argument(..., help="The node (loggerN or id) whose service refused its empty storage."),
    service: str = typer.Option(..., "--service", help="controller or kafka: the service shown UNFORMATTED."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    timeout: float = typer.Option(120, "--timeout", min=1, help="Seconds to wait for the service to run."),
    file: Path = SpecOpt,
) -> None:
    """Format a KRaft controller's or broker's empty storage that kctl refused (UNFORMATTED in `kctl status`)."""
    from kctl.cluster import nodes

    spec = connect(file).kctl_spec
    n = spec.node(node)  # an unknown node stops here
    if not yes:
        typer.confirm(f"format {n.hostname}'s {service} storage empty? It starts with no metadata of its own and"
                      " copies it back from the others (docs/runbooks/replace-failed-node.md)", abort=True)
    output.info(nodes.format_storage(spec, n.hostname, service, timeout=timeout, progress=output.info))
