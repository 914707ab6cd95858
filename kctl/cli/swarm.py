"""kctl swarm label: pin each node's Swarm service to a Swarm node (engine swarm)."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, load


def register(app: typer.Typer) -> None:
    swarm_app = typer.Typer(help="engine swarm: the Swarm nodes each kctl node runs on.", no_args_is_help=True)
    swarm_app.command("label")(label)
    app.add_typer(swarm_app, name="swarm")


def label(
    strict_spread: bool = typer.Option(False, "--strict-spread", help="Refuse when two kctl nodes would share a"
                                                                      " Swarm node."),
    file: Path = SpecOpt,
    fmt: output.Format = OutputOpt,
) -> None:
    """Label the Swarm's nodes for this cluster (nodes[].swarm_node, else round-robin); `up` does it too."""
    from kctl import contract
    from kctl.errors import UsageError
    from kctl.runtime.engine import engines, swarm
    from kctl.runtime.engine.engines import Capability

    spec = load(file)
    if not engines.supports(spec, Capability.SWARM_LABELS):
        raise UsageError(f"cluster {spec.name} runs on engine {spec.engine.value}: Swarm labels are for engine swarm",
                         hint="set `engine: swarm` in kctl.yaml (or `kctl up --engine swarm`, which labels too)")
    placement = swarm.label(spec, strict_spread=strict_spread, say=output.info)
    for w in placement.warnings:
        output.warn(w)
    rows = [{"container": host, "swarm_node": n.hostname, "node_id": n.id, "address": n.addr,
             "label": f"{contract.swarm_placement_label(spec.name, host)}=true"}
            for host, n in placement.hosts.items()]
    output.emit(rows, fmt, rows=rows, columns=["container", "swarm_node", "address", "label"],
                title=f"cluster {spec.name} on the Swarm")
