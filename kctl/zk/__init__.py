"""ZooKeeper: four-letter words, znodes, dynamic reconfiguration, storage, the migration's znodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kctl.errors import UsageError

if TYPE_CHECKING:
    from kctl.model.spec import ClusterSpec


def require_zookeeper(spec: ClusterSpec, what: str = "this command") -> ClusterSpec:
    """``spec``, or UsageError (exit 2, nothing asked) for a cluster on KRaft: its ZooKeeper is retired."""
    if spec.on_kraft:
        raise UsageError(f"cluster {spec.name!r} is on KRaft: it has no ZooKeeper for {what}",
                         hint="its metadata is in its KRaft controllers (`kctl status` shows the quorum); the"
                              " retired ZooKeeper's data stays on each node until you remove it")
    return spec
