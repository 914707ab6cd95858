"""Options shared by many commands, and the loading of the cluster spec.

Command modules import this, never ``kctl.cli.main``. Nothing here imports the
domain at module level: building the command tree stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kctl.output import Format, info, warn

if TYPE_CHECKING:
    from kctl.spec import ClusterSpec

SpecOpt = typer.Option(
    Path("kctl.yaml"), "--file", "-f", help="Cluster spec to use.", envvar="KCTL_FILE", show_default=True
)
OutputOpt = typer.Option(Format.table, "--output", "-o", help="Output format: table, wide, json or yaml.")
BootstrapOpt = typer.Option(None, "--bootstrap-server", help="host:port,... instead of the spec's EXTERNAL listeners.")


def connect(path: Path, bootstrap: str | None = None, *, write: bool = False) -> ClusterSpec:
    """Load the spec and make sure the cluster that answers is the one it names (exit 2 if not).

    With ``--bootstrap-server`` a read-only command talks to whatever cluster is there
    (a kctl.yaml is then optional) and says on stderr which cluster id answered; a
    command that changes something must reach this kctl.yaml's own recorded cluster
    (:func:`kctl.identity.check_write`).
    """
    from kctl import identity
    from kctl.spec import ClusterSpec, state_dir_for

    if bootstrap:
        # A secured kctl.yaml's credentials go with --bootstrap-server too (identity check and command).
        known = load(path) if path.exists() else None
        cid = identity.answering(bootstrap, spec=known)
        if write:
            identity.check_write(bootstrap, cid, known, path)
        info(f"talking to Kafka cluster id {cid or 'unknown (no answer yet)'} at {bootstrap}"
             + (f" (the cluster of {path})" if write else " (--bootstrap-server: not checked against kctl.yaml)"))
        return known or ClusterSpec()
    spec = load(path)
    identity.verify(spec, state_dir_for(spec, path))
    return spec


def load(path: Path) -> ClusterSpec:
    """The cluster of ``path`` (:func:`kctl.spec.load_cluster`); its warnings go to stderr."""
    from kctl.spec import load_cluster

    spec, warnings = load_cluster(path)
    for w in warnings:
        warn(w)
    return spec
