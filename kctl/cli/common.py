"""Options shared by many commands, and the loading of the cluster spec.

Command modules import this, never ``kctl.cli.main``. Nothing here imports the
domain at module level: building the command tree stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kctl.output import Format, info, warn

if TYPE_CHECKING:
    from kctl.kafka.client import Target
    from kctl.model.spec import ClusterSpec

SpecOpt = typer.Option(
    Path("kctl.yaml"), "--file", "-f", help="Cluster spec to use.", envvar="KCTL_FILE", show_default=True
)
OutputOpt = typer.Option(Format.table, "--output", "-o", help="Output format: table, wide, json or yaml.")
BootstrapOpt = typer.Option(None, "--bootstrap-server", help="host:port,... instead of the spec's EXTERNAL listeners.")


def connect(path: Path, bootstrap: str | None = None, *, write: bool = False,
            before: Callable[[ClusterSpec], object] | None = None) -> Target:
    """Load the spec and make sure the cluster that answers is the one it names (exit 2 if not); the cluster
    as kctl's clients reach it (its ``spec``, the bootstrap servers, the admin user's security settings).

    ``before``: the command's own checks of its input against the spec, run once it is loaded and before
    any cluster is asked (a bad option is named as such, whatever state the cluster is in).

    With ``--bootstrap-server`` a read-only command talks to whatever cluster is there
    (a kctl.yaml is then optional) and says on stderr which cluster id answered; a
    command that changes something must reach this kctl.yaml's own recorded cluster
    (:func:`kctl.cluster.identity.check_write`).
    """
    from kctl.cluster import identity
    from kctl.kafka.client import Target
    from kctl.model.spec import ClusterSpec, state_dir_for

    if bootstrap:
        # A secured kctl.yaml's credentials go with --bootstrap-server too (identity check and command).
        known = load(path) if path.exists() else None
        if before is not None:
            before(known or ClusterSpec())
        cid = identity.answering(bootstrap, spec=known)
        if write:
            identity.check_write(bootstrap, cid, known, path)
        info(f"talking to Kafka cluster id {cid or 'unknown (no answer yet)'} at {bootstrap}"
             + (f" (the cluster of {path})" if write else " (--bootstrap-server: not checked against kctl.yaml)"))
        return Target.of(known or ClusterSpec(), bootstrap)
    spec = load(path)
    if before is not None:
        before(spec)
    identity.verify(spec, state_dir_for(spec, path))
    return Target.of(spec)


def connect_by_metadata(path: Path, bootstrap: str | None = None) -> tuple[Target, Callable[[str | None], object]]:
    """:func:`connect` for a read-only command whose own client asks the cluster's Metadata before it
    reads anything (``kctl consume`` without a group): the target, and the identity check to call with
    the cluster id that Metadata gave (None: no broker answered), before anything is read or printed.

    One Metadata round trip instead of two on the way to the first record; what is refused and how
    it is said are :func:`kctl.cluster.identity.verify`'s, as with :func:`connect`. With ``--bootstrap-server``
    it is :func:`connect` itself, and the check does nothing.
    """
    from kctl.cluster import identity
    from kctl.kafka.client import Target
    from kctl.model.spec import state_dir_for

    if bootstrap:
        return connect(path, bootstrap), lambda _cid: None
    spec = load(path)
    state_dir = state_dir_for(spec, path)
    return Target.of(spec), lambda cid: identity.verify(spec, state_dir, seen=cid)


def load(path: Path) -> ClusterSpec:
    """The cluster of ``path`` (:func:`kctl.model.spec.load_cluster`); its warnings go to stderr."""
    from kctl.model.spec import load_cluster

    spec, warnings = load_cluster(path)
    for w in warnings:
        warn(w)
    return spec
