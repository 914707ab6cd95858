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
    command that changes something must reach this kctl.yaml's own recorded cluster.
    """
    from kctl import identity
    from kctl.spec import ClusterSpec, state_dir_for

    if bootstrap:
        # A secured kctl.yaml's credentials go with --bootstrap-server too (identity check and command).
        known = load(path) if path.exists() else None
        cid = identity.answering(bootstrap, spec=known)
        if write:
            from kctl.errors import UsageError

            if known is None:
                raise UsageError(f"refusing to change the cluster at {bootstrap} (cluster id {cid or 'unknown'}):"
                                 f" no {path} names it; nothing was changed",
                                 hint="changes go through the kctl.yaml of the cluster they change: run this from"
                                      " that cluster's directory, without --bootstrap-server")
            spec = known
            state = state_dir_for(spec, path)
            rec = identity.read(state)
            own = spec.cluster_id or (rec.cluster_id if rec else None)
            if own is None or own != cid:
                mine = f"cluster id {own}" if own else "no recorded cluster id"
                raise UsageError(
                    f"refusing to change the cluster at {bootstrap} (cluster id {cid or 'unknown'}): {path} names"
                    f" cluster {spec.name!r} ({mine}, state dir {state.resolve()}); nothing was changed",
                    hint="changes go through the kctl.yaml of the cluster they change: run this from that"
                         " cluster's directory, without --bootstrap-server")
        else:
            spec = known or ClusterSpec()
        info(f"talking to Kafka cluster id {cid or 'unknown (no answer yet)'} at {bootstrap}"
             + (f" (the cluster of {path})" if write else " (--bootstrap-server: not checked against kctl.yaml)"))
        return spec
    spec = load(path)
    identity.verify(spec, state_dir_for(spec, path))
    return spec


def load(path: Path) -> ClusterSpec:
    """Load the spec and print its warnings to stderr."""
    from kctl.spec import load_spec

    spec, warnings = load_spec(path)
    for w in warnings:
        warn(w)
    if "engine" not in spec.model_fields_set:
        from kctl.runtime.engines import recorded_engine
        from kctl.spec import state_dir_for

        recorded = recorded_engine(state_dir_for(spec, path))
        if recorded is not None and recorded is not spec.engine:
            spec = spec.model_copy(update={"engine": recorded})
    if spec.security.enabled and spec.state_dir is None:
        # Its secrets live in the state dir next to kctl.yaml: every client finds them from any directory.
        from kctl.spec import state_dir_for

        spec = spec.model_copy(update={"state_dir": str(state_dir_for(spec, path))})
    return spec
