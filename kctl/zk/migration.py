"""ZooKeeper's side of a migration to KRaft (kctl.migrate.kraft): the cluster id the controllers format with, and the
znodes a rollback deletes (Kafka's "Reverting to ZooKeeper mode During the Migration")."""

from __future__ import annotations

import json

from kctl.errors import ClusterError
from kctl.model.spec import ClusterSpec
from kctl.zk import znodes

CLUSTER_ID = "/cluster/id"
# The KRaft controller's claim on the ZooKeeper-mode controller role, and the migration's own state: deleted on a
# rollback, so that a ZooKeeper-mode broker becomes the controller again and a later migration starts afresh.
CONTROLLER = "/controller"
MIGRATION = "/migration"


def cluster_id(spec: ClusterSpec) -> str:
    """The id the ZooKeeper-mode cluster registered at its first broker's start (``/cluster/id``)."""
    with znodes.connect(spec, timeout=10.0) as zk:
        if not zk.exists(CLUSTER_ID):
            raise ClusterError(f"{CLUSTER_ID} is missing in ZooKeeper: no broker has started in this cluster yet",
                               hint="`kctl up` first; `kctl status` shows the brokers")
        raw, _ = zk.get(CLUSTER_ID)
    try:
        value = json.loads(raw.decode())["id"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ClusterError(f"{CLUSTER_ID} holds {raw[:100]!r}, not Kafka's {{\"version\", \"id\"}}",
                           hint="is this ZooKeeper a Kafka cluster's? `kctl zk get /cluster/id`") from None
    return str(value)


def migration_state(spec: ClusterSpec) -> dict[str, object] | None:
    """The ``/migration`` znode's JSON (the KRaft controllers' record of what they migrated), None if absent."""
    with znodes.connect(spec, timeout=10.0) as zk:
        if not zk.exists(MIGRATION):
            return None
        raw, _ = zk.get(MIGRATION)
    try:
        data = json.loads(raw.decode())
    except ValueError:
        return {"raw": raw.decode(errors="replace")}
    return data if isinstance(data, dict) else {"raw": data}


def migrated_by(state: dict[str, object] | None) -> str | None:
    """Pure: who migrated ZooKeeper's metadata, as the ``/migration`` znode says, or None while none has. The
    active controller creates the znode with ``kraft_metadata_offset`` -1 when it claims the migration, and sets
    it to the offset of the metadata log after the migration's records only once it has written them all (Kafka:
    "Finished initial migration of ZK metadata to KRaft"); dual-write moves it on. A rollback deletes the znode,
    so a migration after one starts from none: unlike a log line, this cannot be an earlier migration's."""
    if not isinstance(state, dict):
        return None
    try:
        offset = int(str(state.get("kraft_metadata_offset")))
    except ValueError:
        return None
    if offset < 0:
        return None
    controller = state.get("kraft_controller_id")
    return f"controller {controller}, ZooKeeper in step with the metadata log at offset {offset}"


def delete_controller_and_migration(spec: ClusterSpec) -> list[str]:
    """Delete ``/controller`` and ``/migration`` (each if present); the paths deleted."""
    gone = []
    # On a secured cluster Kafka's znodes are the brokers' principal's (zookeeper.set.acl): delete as it.
    with znodes.connect(spec, timeout=10.0, principal=znodes.guarded_reader(spec)) as zk:
        for path in (CONTROLLER, MIGRATION):
            if zk.exists(path):
                zk.delete(path, recursive=True)
                gone.append(path)
    return gone



def controller_broker(spec: ClusterSpec) -> int | None:
    """The broker id ``/controller`` names (Kafka's {"brokerid": N}), None while no broker holds it (the znode is
    absent, or a KRaft controller's claim, whose id is no broker's)."""
    with znodes.connect(spec, timeout=10.0) as zk:
        if not zk.exists(CONTROLLER):
            return None
        raw, _ = zk.get(CONTROLLER)
    try:
        broker = int(json.loads(raw.decode())["brokerid"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return broker if broker in {n.id for n in spec.brokers} else None
