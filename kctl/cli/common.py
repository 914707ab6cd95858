"""Options shared by many commands, and the loading of the cluster spec."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl.output import Format

SpecOpt = typer.Option(
    Path("kctl.yaml"), "--file", "-f", help="Cluster spec to use.", envvar="KCTL_FILE", show_default=True
)
OutputOpt = typer.Option(Format.table, "--output", "-o", help="Output format: table, wide, json or yaml.")
