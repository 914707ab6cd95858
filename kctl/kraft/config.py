"""What the KRaft controllers run, and how each broker's server.properties changes, in each migration phase.

The layout: one KRaft controller in each node's container (or host), beside its broker, as a process of its
own (Kafka supports the migration with dedicated controllers only, not combined broker+controller servers).
Controller N has node id ``CONTROLLER_ID_BASE + N``: KRaft brokers and controllers share one id space, and
the brokers keep their ids. The quorum is static (``controller.quorum.voters``), formatted with the cluster's
existing id: Kafka 3.9 migrates a static quorum, and 4.x runs it.

Pure: spec and phase in, properties out. Following Kafka's "ZooKeeper to KRaft Migration":

- controllers, while migrating: ``process.roles=controller``, ``node.id``, the voters, the CONTROLLER listener,
  ``zookeeper.metadata.migration.enable=true`` and ``zookeeper.connect``, and the brokers' inter-broker
  listener (the controllers send the ZooKeeper-mode brokers their RPCs on it); after finalizing, without the
  migration flag and without ZooKeeper.
- brokers entering the migration (``dual-write``): the voters, ``controller.listener.names``, CONTROLLER in
  their protocol map, ``inter.broker.protocol.version`` pinned, and the migration flag.
- brokers in KRaft mode (``kraft-brokers``, ``kraft``): ``process.roles=broker`` and ``node.id`` instead of
  ``broker.id``, no ZooKeeper setting, no migration flag, no inter-broker protocol version.

On the secured profile the CONTROLLER listener is SASL_SSL (SASL_PLAINTEXT without TLS) with SASL/PLAIN, whose
one user, the admin, is in the nodes' JAAS file (``controller.KafkaServer``, a secret): SCRAM credentials live in
the metadata the controllers replicate, so the controllers cannot log in to each other with them (Kafka's
advice: PLAIN on the controller listener). The controllers reach the ZooKeeper-mode brokers over the brokers'
inter-broker listener with the brokers' own SCRAM login, log in to ZooKeeper as the brokers do, and authorize
with the StandardAuthorizer, the admin their super user; the brokers' TLS stores serve the controllers too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kctl.kraft.phases import Phase, rank
from kctl.model.properties import security_protocol, server_properties
from kctl.model.spec import ClusterSpec, NodeSpec

CONTROLLER_ID_BASE = 3000
CONTROLLER_LISTENER = "CONTROLLER"
# Inside the node: 9092 is INTERNAL, 9093 INTERNAL_SECURE while a security.migration runs.
CONTROLLER_PORT = 9095
METADATA_DIR = "/var/opt/kctl/controller/metadata"
# Where a KRaft node keeps its view of the quorum (Kafka's own file: the leader it follows and the epoch),
# rewritten at every election: the cheap way to ask a controller who leads, without starting a JVM tool.
QUORUM_STATE = f"{METADATA_DIR}/__cluster_metadata-0/quorum-state"
# The broker protocol version pinned while brokers of both modes may meet (Kafka requires 3.9 to migrate).
INTER_BROKER_PROTOCOL = "3.9"
MIGRATION_FLAG = "zookeeper.metadata.migration.enable"
ZOOKEEPER_KEYS = ("zookeeper.connect", "zookeeper.connection.timeout.ms", "zookeeper.session.timeout.ms",
                  "zookeeper.set.acl", "zookeeper.ssl.client.enable", "zookeeper.clientCnxnSocket")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The secured profile's controller listener: SASL/PLAIN (see above).
CONTROLLER_SASL_MECHANISM = "PLAIN"
CONTROLLER_MECHANISM_KEY = "sasl.mechanism.controller.protocol"
# What a secured broker's render has that its controller needs as well: the TLS stores (the same keystore: the
# controller listens in the same container, by the same name), the inter-broker SCRAM mechanism (its RPCs to the
# ZooKeeper-mode brokers; Kafka wants it among the enabled mechanisms, which the CONTROLLER listener overrides
# with its own), the super user, znode ACLs while it writes to ZooKeeper.
CONTROLLER_SECURITY_PREFIXES = ("ssl.", "config.providers")
CONTROLLER_SECURITY_KEYS = ("sasl.mechanism.inter.broker.protocol", "sasl.enabled.mechanisms", "super.users",
                            "allow.everyone.if.no.acl.found")
# Settings a KRaft controller applies itself, which the brokers applied in ZooKeeper mode: the defaults of a new
# topic (a CreateTopics without partitions or replication factor; the controller decides them once it is active,
# from dual-write on), the ISR rules of its elections, and leader rebalancing. Copied from the brokers' own render.
CONTROLLER_SHARED_KEYS = ("num.partitions", "default.replication.factor", "min.insync.replicas",
                          "unclean.leader.election.enable", "auto.leader.rebalance.enable",
                          "leader.imbalance.check.interval.seconds", "leader.imbalance.per.broker.percentage",
                          "delete.topic.enable")


def parse_quorum_state(text: str) -> tuple[int | None, int | None]:
    """Pure: (leader id, leader epoch) of a quorum-state file's JSON; leader None while there is none (-1)."""
    import json

    try:
        data = json.loads(text)
        leader, epoch = int(data.get("leaderId", -1)), int(data.get("leaderEpoch", -1))
    except (ValueError, TypeError, AttributeError):
        return None, None
    return (leader if leader >= 0 else None), (epoch if epoch >= 0 else None)


def controller_id(node: NodeSpec) -> int:
    return CONTROLLER_ID_BASE + node.id


def controller_nodes(spec: ClusterSpec) -> list[NodeSpec]:
    """The nodes that run a controller: every ZooKeeper participant's node (three or five: the quorum's size
    is the ensemble's); observers and added brokers run none."""
    return [n for n in spec.participants]


def voters(spec: ClusterSpec) -> str:
    """``controller.quorum.voters``: id@host:port of every controller, by container (or host) name."""
    return ",".join(f"{controller_id(n)}@{spec.zk_host(n)}:{CONTROLLER_PORT}" for n in controller_nodes(spec))


def bootstrap_servers(spec: ClusterSpec) -> str:
    """``controller.quorum.bootstrap.servers``: host:port of every controller kctl.yaml names (a dynamic quorum's
    nodes find the quorum through them; its voters are the ones its metadata log records)."""
    return ",".join(f"{spec.zk_host(n)}:{CONTROLLER_PORT}" for n in controller_nodes(spec))


def quorum_properties(spec: ClusterSpec) -> dict[str, str]:
    """How a node names the controller quorum: a static quorum by its voters (``controller.quorum.voters``), a
    dynamic one (KIP-853, kraft.version 1: `kctl quorum make-dynamic`) by ``controller.quorum.bootstrap.servers``,
    the voters set being the metadata log's (Kafka's "Update KRaft Config" after the kraft.version upgrade)."""
    if spec.dynamic_quorum:
        return {"controller.quorum.bootstrap.servers": bootstrap_servers(spec)}
    return {"controller.quorum.voters": voters(spec)}


def controller_protocol(spec: ClusterSpec) -> str:
    """The CONTROLLER listener's security protocol: the brokers' on the secured profile, else PLAINTEXT."""
    return security_protocol(spec) if spec.security.enabled else "PLAINTEXT"


def _protocol_map(spec: ClusterSpec, broker: dict[str, str]) -> dict[str, str]:
    return {**_parse_map(broker), CONTROLLER_LISTENER: controller_protocol(spec)}


def _map_text(protocols: dict[str, str]) -> str:
    return ",".join(f"{name}:{proto}" for name, proto in sorted(protocols.items()))


BROKER_SESSION_TIMEOUT = "broker.session.timeout.ms"  # the controllers': a silent broker is fenced after it
BROKER_HEARTBEAT_INTERVAL = "broker.heartbeat.interval.ms"  # the brokers': how often they tell the controllers


def heartbeat_interval_ms(spec: ClusterSpec) -> int:
    """A broker heartbeats four times per session timeout (Kafka's defaults: 2000 per 9000)."""
    return max(250, spec.kafka.broker_session_timeout_ms // 4)


def controller_properties(spec: ClusterSpec, node: NodeSpec, phase: Phase) -> dict[str, str]:
    """controller.properties of ``node``'s KRaft controller in ``phase`` (from ``controllers`` on)."""
    if rank(phase) < rank(Phase.controllers):
        raise ValueError(f"no controller runs in phase {phase.value}")
    props = {
        "process.roles": "controller",
        "node.id": str(controller_id(node)),
        **quorum_properties(spec),
        "controller.listener.names": CONTROLLER_LISTENER,
        "listeners": f"{CONTROLLER_LISTENER}://0.0.0.0:{CONTROLLER_PORT}",
        "inter.broker.listener.name": spec.kafka.inter_broker_listener,
        "log.dirs": METADATA_DIR,
        BROKER_SESSION_TIMEOUT: str(spec.kafka.broker_session_timeout_ms),
    }
    if spec.dynamic_quorum:
        # the endpoint add-controller records for this voter (what the others reach it by)
        props["advertised.listeners"] = f"{CONTROLLER_LISTENER}://{spec.zk_host(node)}:{CONTROLLER_PORT}"
    broker = server_properties(spec, node)
    props["listener.security.protocol.map"] = _map_text(_protocol_map(spec, broker))
    props.update({k: broker[k] for k in CONTROLLER_SHARED_KEYS if k in broker})
    if phase is not Phase.kraft:
        props[MIGRATION_FLAG] = "true"
        props["zookeeper.connect"] = spec.zookeeper_connect
        if "zookeeper.set.acl" in broker:  # the znodes it writes in dual-write get the brokers' ACLs
            props["zookeeper.set.acl"] = broker["zookeeper.set.acl"]
    if spec.security.enabled:
        props.update({k: v for k, v in broker.items()
                      if k in CONTROLLER_SECURITY_KEYS or k.startswith(CONTROLLER_SECURITY_PREFIXES)})
        props[f"listener.name.{CONTROLLER_LISTENER.lower()}.sasl.enabled.mechanisms"] = CONTROLLER_SASL_MECHANISM
        props[CONTROLLER_MECHANISM_KEY] = CONTROLLER_SASL_MECHANISM
        if spec.security.authorizer:
            props["authorizer.class.name"] = STANDARD_AUTHORIZER
    return dict(sorted(props.items()))


@dataclass(frozen=True)
class BrokerChange:
    """How a broker's server.properties differs from its ZooKeeper-mode render in a phase."""

    set: dict[str, str] = field(default_factory=dict)
    remove: tuple[str, ...] = ()

    def apply(self, props: dict[str, str]) -> dict[str, str]:
        out = {k: v for k, v in props.items() if k not in self.remove}
        out.update(self.set)
        return dict(sorted(out.items()))


def broker_change(spec: ClusterSpec, node: NodeSpec, phase: Phase, zookeeper_props: dict[str, str]) -> BrokerChange:
    """What ``phase`` changes in the broker of ``node``, given its ZooKeeper-mode ``zookeeper_props``."""
    if rank(phase) < rank(Phase.dual_write):
        return BrokerChange()
    quorum = {
        **quorum_properties(spec),
        "controller.listener.names": CONTROLLER_LISTENER,
        "listener.security.protocol.map": _map_text(_protocol_map(spec, zookeeper_props)),
    }
    if spec.security.enabled:
        quorum[CONTROLLER_MECHANISM_KEY] = CONTROLLER_SASL_MECHANISM
    if phase is Phase.dual_write:
        return BrokerChange(set={**quorum, MIGRATION_FLAG: "true", "inter.broker.protocol.version":
                                 INTER_BROKER_PROTOCOL})
    kraft = {**quorum, "process.roles": "broker", "node.id": str(node.id),
             BROKER_HEARTBEAT_INTERVAL: str(heartbeat_interval_ms(spec))}
    if "authorizer.class.name" in zookeeper_props:
        kraft["authorizer.class.name"] = STANDARD_AUTHORIZER
    gone = ("broker.id", MIGRATION_FLAG, "inter.broker.protocol.version", *ZOOKEEPER_KEYS)
    return BrokerChange(set=kraft, remove=tuple(k for k in gone if k in zookeeper_props or k == MIGRATION_FLAG))


def _parse_map(props: dict[str, str]) -> dict[str, str]:
    text = props.get("listener.security.protocol.map", "")
    return dict(pair.split(":", 1) for pair in text.split(",") if ":" in pair)
