"""The plan of a rolling restart, and the min-ISR check, as pure functions (no I/O).

The order follows what keeps the cluster available: ZooKeeper followers one at a
time and the leader last (a leader restart costs an election, done once); brokers
in ascending id with the active controller last (a controller move costs a
re-election and a metadata push, done once). The executor
(:mod:`kctl.roll.run`) walks the plan through health gates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kctl.errors import UsageError
from kctl.model.spec import ClusterSpec, Topology

SERVICES = ("kafka", "zookeeper", "node", "controller")

# Gate names, as the plan shows them and progress reports them.
PRE_CHECKS = (
    "every broker registered",
    "no offline partitions",
    "no under-replicated partitions",
    "ZooKeeper quorum with one leader",
)
GATE_MIN_ISR = "no partition with a replica here would drop below min.insync.replicas"
GATE_EXITED = "broker process exited"
GATE_UNREGISTERED = "/brokers/ids/{id} gone"
GATE_ZK_EXITED = "zookeeper process exited"
GATE_ZK_MODE = "answers srvr with a mode"
GATE_ONE_LEADER = "every ZooKeeper serving, exactly one leader"
GATE_REGISTERED = "broker registered (every broker sees it)"
GATE_URP = "under-replicated partitions 0 for {s:g} s of consecutive checks"
# A node of a cluster on KRaft: its controller beside its broker (its ZooKeeper is retired).
GATE_BROKER_GONE = "broker {id} gone from the live brokers"
GATE_CONTROLLER_EXITED = "controller process exited"
GATE_QUORUM = "the KRaft controller quorum whole again (a leader, every voter, no lag)"

# A partition back in the ISR may drop out again while its follower catches up: the gate wants the cluster
# without under-replicated partitions at every check for this long, however often it checks.
URP_STABLE_S = 1.0


@dataclass(frozen=True)
class Step:
    """Restart one service (or both, ``node``) on one container host, through its gates."""

    node: str  # the node's hostname (logger1)
    host: str  # the container running the service (logger1, zk1 or kafka1)
    service: str  # zookeeper, kafka or node
    broker: int | None
    why: str  # its place in the order: "follower", "leader last", "broker 2", "controller last"
    gates: tuple[str, ...]
    # Make the container again from the new render (its environment, image or ports changed) between
    # the stop gates and the start gates, instead of starting the stopped processes in the old one.
    recreate: bool = False


@dataclass
class RollPlan:
    cluster: str
    service: str  # kafka, zookeeper, node or all
    pre_checks: list[str]
    steps: list[Step]
    finish: str = "preferred leader election"
    notes: list[str] = field(default_factory=list)


def zk_gates() -> tuple[str, ...]:
    return ("stop: " + GATE_ZK_EXITED, "start: " + GATE_ZK_MODE, "start: " + GATE_ONE_LEADER)


def kafka_gates(broker: int) -> tuple[str, ...]:
    return ("before: " + GATE_MIN_ISR, "stop: " + GATE_EXITED, "stop: " + GATE_UNREGISTERED.format(id=broker),
            "start: " + GATE_REGISTERED, "start: " + GATE_URP.format(s=URP_STABLE_S))


def node_gates(broker: int) -> tuple[str, ...]:
    k = kafka_gates(broker)
    return (k[0], k[1], k[2], "stop: " + GATE_ZK_EXITED, "start: " + GATE_ZK_MODE, "start: " + GATE_ONE_LEADER,
            k[3], k[4])


def kraft_node_gates(broker: int) -> tuple[str, ...]:
    """A node on KRaft: its broker down through the broker's gates, then its controller; the quorum whole again
    before the broker comes back."""
    k = kafka_gates(broker)
    return (k[0], k[1], "stop: " + GATE_BROKER_GONE.format(id=broker), "stop: " + GATE_CONTROLLER_EXITED,
            "start: " + GATE_QUORUM, k[3], k[4])


def controller_gates() -> tuple[str, ...]:
    """A KRaft controller alone (its settings changed): down, up, and the quorum whole again."""
    return ("stop: " + GATE_CONTROLLER_EXITED, "start: " + GATE_QUORUM)


def zk_order(hosts: Sequence[str], ids: Mapping[str, int], modes: Mapping[str, str]) -> list[tuple[str, str]]:
    """(host, why): non-leaders by ascending id, then the leader."""
    leader = [h for h in hosts if modes.get(h) in ("leader", "standalone")]
    rest = sorted((h for h in hosts if h not in leader), key=lambda h: ids[h])
    return [(h, modes.get(h) or "unknown") for h in rest] + [(h, "leader last") for h in leader]


def kafka_order(brokers: Iterable[int], controller: int | None) -> list[tuple[int, str]]:
    """(broker id, why): ascending id, the active controller last."""
    ids = sorted(set(brokers))
    return [(b, f"broker {b}") for b in ids if b != controller] + \
        [(b, "controller last") for b in ids if b == controller]


def node_order(nodes: Sequence[tuple[str, int]], zk_leader: str | None,
               controller: int | None) -> list[tuple[str, int, str]]:
    """(host, id, why) when a node's ZooKeeper and broker go down together: the plain nodes by id, then the
    controller's node, then the ZooKeeper leader's (the election that costs most, once, at the end)."""
    def rank(item: tuple[str, int]) -> tuple[int, int]:
        host, nid = item
        return (2 if host == zk_leader else 1 if nid == controller else 0, nid)

    out = []
    for host, nid in sorted(nodes, key=rank):
        why = "zookeeper leader last" if host == zk_leader else "controller last" if nid == controller \
            else f"node {nid}"
        out.append((host, nid, why))
    return out


def check_request(spec: ClusterSpec, service: str | None, nodes: Sequence[str] = ()) -> None:
    """What a restart of ``service`` on ``nodes`` can be refused for from the spec alone (UsageError): a
    service name, topology or metadata mode that does not fit, an unknown node. ``kctl restart`` asks it
    before it asks the cluster anything, so a typo is named as such on a stopped cluster too."""
    if service is not None and service not in SERVICES:
        raise UsageError(f"unknown service {service!r}", hint="use kafka, zookeeper, node or controller")
    if service == "controller" and not spec.on_kraft:
        raise UsageError(f"cluster {spec.name!r} has no KRaft controllers to restart: its metadata is in"
                         " ZooKeeper (a migration restarts its controllers itself)",
                         hint="`kctl migrate kraft status` shows where a migration stands")
    if service == "node" and spec.topology is not Topology.colocated:
        raise UsageError("--service node needs the colocated topology (each node runs ZooKeeper and Kafka)",
                         hint="with the split topology restart --service zookeeper, then --service kafka")
    if spec.on_kraft and service not in ("kafka", "node", "controller"):
        raise UsageError(f"cluster {spec.name!r} is on KRaft: its ZooKeeper is retired, so a restart of"
                         f" {'every service' if service is None else 'the ' + service} is not one kctl makes",
                         hint="`kctl restart --rolling --service kafka` restarts the brokers, `--service"
                              " controller` the controllers, `--service node` each node's controller and broker;"
                              " the active controller's last")
    for n in nodes:
        spec.node(n)


def plan_roll(spec: ClusterSpec, *, service: str | None, nodes: Sequence[str] = (),
              zk_modes: Mapping[str, str], controller: int | None, recreate: Iterable[str] = ()) -> RollPlan:
    """The steps of a restart of ``service`` (None: ZooKeeper phase, then Kafka phase) on ``nodes``
    (empty: every node), ordered from the current ZooKeeper modes and controller. The steps on the
    container hosts in ``recreate`` make their container again (``kctl apply``)."""
    check_request(spec, service, nodes)
    picked = {spec.node(n).id for n in nodes}
    chosen = [n for n in spec.nodes if not picked or n.id in picked]
    steps: list[Step] = []
    if service == "controller":
        for host, _nid, why in node_order([(n.hostname, n.id) for n in chosen], None, controller):
            steps.append(Step(host, host, "controller", None, why.replace("node ", "controller of node "),
                              controller_gates()))
    elif service == "node":
        hosts = [(n.hostname, n.id) for n in chosen]
        leader = next((h for h, m in zk_modes.items() if m in ("leader", "standalone")), None)
        zk_only = {n.hostname for n in chosen if not n.broker}
        for host, nid, why in node_order(hosts, leader, controller):
            if spec.on_kraft:  # ``controller``: the node whose KRaft controller leads the quorum
                steps.append(Step(host, host, "node", nid, why, kraft_node_gates(nid)))
            elif host in zk_only:  # a ZooKeeper-only node: its ZooKeeper is all there is to restart
                steps.append(Step(host, host, "zookeeper", None, why, zk_gates()))
            else:
                steps.append(Step(host, host, "node", nid, why, node_gates(nid)))
    else:
        if service in (None, "zookeeper"):
            zk_hosts = [spec.zk_host(n) for n in chosen]
            ids = {spec.zk_host(n): n.id for n in chosen}
            by_host = {spec.zk_host(n): n for n in chosen}
            for host, why in zk_order(zk_hosts, ids, zk_modes):
                steps.append(Step(by_host[host].hostname, host, "zookeeper", None, why, zk_gates()))
        if service in (None, "kafka"):
            by_id = {n.id: n for n in chosen if n.broker}
            for bid, why in kafka_order(by_id, controller):
                n = by_id[bid]
                steps.append(Step(n.hostname, spec.kafka_host(n), "kafka", bid, why, kafka_gates(bid)))
    notes = []
    if len(spec.participants) < 3 and any(s.service in ("zookeeper", "node") for s in steps):
        notes.append(f"{len(spec.participants)} ZooKeeper participant(s): restarting one loses the quorum"
                     " until it is back")
    again = set(recreate)
    if again:
        steps = [Step(s.node, s.host, s.service, s.broker, s.why, s.gates, True) if s.host in again else s
                 for s in steps]
        notes.append("container(s) made again from the new render between the stop and start gates: "
                     + ", ".join(s.host for s in steps if s.recreate))
    return RollPlan(spec.name, service or "all", list(PRE_CHECKS), steps, notes=notes)


# ----- can this broker go? ------------------------------------------------------------------


class PartitionView(Protocol):
    """What the min-ISR check reads of a partition (kctl.kafka.describe.Partition is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def leader(self) -> int: ...
    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def isr(self) -> tuple[int, ...]: ...


def blocking_partitions(partitions: Iterable[PartitionView], broker: int, min_isr: Mapping[str, int],
                        default_min_isr: int) -> list[str]:
    """Why ``broker`` cannot stop now: each partition with a replica on it whose ISR is below
    min.insync.replicas, or equals it and holds this broker (stopping it would make acks=all writes fail).
    Empty: the broker may go.

    A partition with no more replicas than min.insync.replicas (replication factor 1, or 2 with
    min.insync.replicas 2) does not hold the broker: acks=all writes to it stop while any of its replicas
    is down, whatever the order of the roll and however long it waits, so waiting would only stop the
    roll (Strimzi's roller and Kafka's controlled shutdown let such a broker go too).
    :func:`unprotectable_partitions` names them. One with no leader, or with its ISR already below, still
    holds it: stopping the broker would take it from read-only to offline.
    """
    out = []
    for p in partitions:
        if broker not in p.replicas:
            continue
        need = min_isr.get(p.topic, default_min_isr)
        where = f"{p.topic}-{p.partition}"
        if p.leader < 0:
            out.append(f"{where} has no leader")
        elif len(p.isr) < need:
            out.append(f"{where} ISR {list(p.isr)} already below min.insync.replicas={need}")
        elif broker in p.isr and len(p.isr) <= need and len(p.replicas) > need:
            out.append(f"{where} ISR {list(p.isr)} would drop below min.insync.replicas={need}")
    return out


def unprotectable_partitions(partitions: Iterable[PartitionView], broker: int, min_isr: Mapping[str, int],
                             default_min_isr: int) -> list[str]:
    """The partitions on ``broker`` that no roll can keep writable with acks=all while it restarts: no more
    replicas than min.insync.replicas (see :func:`blocking_partitions`)."""
    return [f"{p.topic}-{p.partition}" for p in partitions
            if broker in p.replicas and len(p.replicas) <= min_isr.get(p.topic, default_min_isr)]
