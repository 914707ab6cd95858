"""Options shared by many commands, and the loading of the cluster spec."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kctl.output import Format

if TYPE_CHECKING:
    from kctl.spec import ClusterSpec

SpecOpt = typer.Option(
    Path("kctl.yaml"), "--file", "-f", help="Cluster spec to use.", envvar="KCTL_FILE", show_default=True
)
OutputOpt = typer.Option(Format.table, "--output", "-o", help="Output format: table, wide, json or yaml.")


def load(path: Path) -> ClusterSpec:
    """Load the spec and print its warnings to stderr."""
    from kctl.cli.spec_cmds import load as load_spec

    return load_spec(path)
