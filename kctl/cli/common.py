"""Options shared by many commands, and the loading of the cluster spec.

Command modules import this, never ``kctl.cli.main``. Nothing here imports the
domain at module level: building the command tree stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kctl.output import Format, warn

if TYPE_CHECKING:
    from kctl.spec import ClusterSpec

SpecOpt = typer.Option(
    Path("kctl.yaml"), "--file", "-f", help="Cluster spec to use.", envvar="KCTL_FILE", show_default=True
)
OutputOpt = typer.Option(Format.table, "--output", "-o", help="Output format: table, wide, json or yaml.")
BootstrapOpt = typer.Option(None, "--bootstrap-server", help="host:port,... instead of the spec's EXTERNAL listeners.")


def load(path: Path) -> ClusterSpec:
    """Load the spec and print its warnings to stderr."""
    from kctl.spec import load_spec

    spec, warnings = load_spec(path)
    for w in warnings:
        warn(w)
    return spec
