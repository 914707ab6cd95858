"""The drills' faults: each scenario injects one fault per bounce, heals it and waits for the cluster.

A bounce gets a :class:`Bounce` context: the cluster's fault injectors (``kctl.runtime.faults``,
the same ones the testing API uses), ``mark`` for the timeline, ``gate`` to wait on a probe of the
cluster (never a sleep), ``hold`` for how long a timed fault stays in place, and ``healed`` /
``recover`` to measure the time from healing to a healthy cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kctl.cluster import health
from kctl.errors import KctlError
from kctl.kafka import controllers
from kctl.kraft import config as kc
from kctl.model.spec import ClusterSpec
from kctl.roll.run import registered_gate, roll, unregistered_gate
from kctl.runtime.faults import Faults
from kctl.wait import Probe


class Bounce(Protocol):
    spec: ClusterSpec
    state_dir: Path
    faults: Faults
    hold: float
    gate_timeout: float

    def mark(self, what: str) -> None: ...
    def gate(self, name: str, probe: Probe, timeout: float = ..., *, failover: bool = False) -> str: ...
    def wait_hold(self) -> None: ...
    def healed(self, what: str, *, by_itself: bool = False) -> None: ...
    def recover(self, *, outlast_session: bool = False) -> None: ...
    def leader_of_partition0(self) -> int: ...
    def controller(self) -> int: ...
    def zk_leader(self) -> str: ...


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    kills_broker: bool  # a replica goes away: the topic needs RF >= 2
    bounce: Callable[[Bounce], None]


def _host(b: Bounce, broker: int) -> str:
    return b.spec.kafka_host(b.spec.node(broker))


def _unregistered(b: Bounce, broker: int) -> Probe:
    return unregistered_gate(b.spec, broker)


def _registered(b: Bounce, broker: int) -> Probe:
    return registered_gate(b.spec)


def _kill_broker(b: Bounce, broker: int, signal: str, why: str) -> None:
    host = _host(b, broker)
    b.mark(f"{signal} broker {broker} ({why}, {host})")
    b.faults.kill(host, "kafka", signal, hold=False)  # its supervisor starts it again: no command heals it
    gone = "fenced: not among the live brokers" if b.spec.on_kraft else "left /brokers/ids"
    b.gate(f"broker {broker} {gone}", _unregistered(b, broker), failover=True)
    b.faults.wait_back(host, "kafka", timeout=b.gate_timeout)
    b.gate(f"broker {broker} registered again", _registered(b, broker))
    b.healed(f"broker {broker} came back by itself", by_itself=True)
    b.recover()


def leader_kill(b: Bounce) -> None:
    _kill_broker(b, b.leader_of_partition0(), "SIGKILL", "leader of partition 0")


def leader_term(b: Bounce) -> None:
    _kill_broker(b, b.leader_of_partition0(), "SIGTERM", "leader of partition 0, controlled shutdown")


def controller_kill(b: Bounce) -> None:
    if b.spec.on_kraft:
        _kill_kraft_controller(b)
        return
    _kill_broker(b, b.controller(), "SIGKILL", "controller")


def _kraft_leader(spec: ClusterSpec) -> int | None:
    obs = health.gather(spec, 1.0, docker=True, kafka=False)
    return controllers.controller_leader(spec, obs.controllers or {}, obs.containers)


def _another_kraft_leader(b: Bounce, old: int) -> Probe:
    def run() -> tuple[bool, str]:
        leader = _kraft_leader(b.spec)
        return leader is not None and leader != old, f"controller quorum leader {leader}"
    return run


def _kill_kraft_controller(b: Bounce) -> None:
    """On KRaft the controller is the quorum's leader, a controller process of its own: SIGKILL it, wait until
    another controller leads, then until its supervisor has started it again."""
    leader = _kraft_leader(b.spec)
    if leader is None:
        raise KctlError("the KRaft controller quorum has no leader to kill", hint="`kctl status`")
    host = next(b.spec.zk_host(n) for n in kc.controller_nodes(b.spec) if kc.controller_id(n) == leader)
    b.mark(f"SIGKILL KRaft controller {leader} (the quorum's leader, {host})")
    b.faults.kill(host, "controller", "SIGKILL", hold=False)  # its supervisor starts it again
    b.gate(f"another controller than {leader} leads", _another_kraft_leader(b, leader), failover=True)
    b.faults.wait_back(host, "controller", timeout=b.gate_timeout)
    b.healed(f"KRaft controller {leader} came back by itself", by_itself=True)
    b.recover()


def _new_zk_leader(b: Bounce, old: str) -> Probe:
    def run() -> tuple[bool, str]:
        obs = health.gather(b.spec, 1.0, docker=False, kafka=False)
        zks = obs.zookeeper or {}
        leaders = [h for h, z in zks.items() if z.mode in ("leader", "standalone")]
        return len(leaders) == 1 and leaders[0] != old, ", ".join(f"{h}={z.mode}" for h, z in zks.items())
    return run


def zk_leader_kill(b: Bounce) -> None:
    host = b.zk_leader()
    b.mark(f"SIGKILL ZooKeeper leader {host}")
    b.faults.kill(host, "zookeeper", "SIGKILL", hold=False)  # its supervisor starts it again
    b.gate("another ZooKeeper leader", _new_zk_leader(b, host))
    b.faults.wait_back(host, "zookeeper", timeout=b.gate_timeout)
    b.healed(f"ZooKeeper {host} came back by itself", by_itself=True)
    b.recover()


def zk_quorum_loss(b: Bounce) -> None:
    leader = b.zk_leader()
    others = [b.spec.zk_host(n) for n in b.spec.participants if b.spec.zk_host(n) != leader]
    # the quorum needs more than half: stopping ceil(n/2) of n participants (2 of 3) loses it
    victims = [leader, *others][: (len(b.spec.participants) + 1) // 2]
    b.mark(f"stop ZooKeeper on {', '.join(victims)} (quorum lost)")
    for h in victims:
        b.faults.stop(h, "zookeeper")
    b.wait_hold()
    for h in victims:
        b.faults.start(h, "zookeeper")
    b.healed(f"ZooKeeper started on {', '.join(victims)}")
    b.recover()


def broker_pause(b: Bounce) -> None:
    broker = b.leader_of_partition0()
    host = _host(b, broker)
    b.mark(f"SIGSTOP broker {broker} ({host}, leader of partition 0)")
    b.faults.freeze(host, "kafka")
    b.wait_hold()
    b.faults.thaw(host, "kafka")
    b.healed(f"SIGCONT broker {broker}")
    b.recover(outlast_session=True)


def broker_partition(b: Bounce) -> None:
    broker = b.leader_of_partition0()
    host = _host(b, broker)
    b.mark(f"disconnect {host} (broker {broker}, leader of partition 0) from the cluster network")
    b.faults.disconnect(host)
    b.wait_hold()
    b.faults.connect(host)
    b.healed(f"reconnect {host}")
    b.recover(outlast_session=True)


NETEM_DELAY_MS = 100
NETEM_LOSS_PERCENT = 5.0


def slow_network(b: Bounce) -> None:
    broker = b.leader_of_partition0()
    host = _host(b, broker)
    applied = b.faults.netem(host, NETEM_DELAY_MS, NETEM_LOSS_PERCENT)
    b.mark(applied)
    b.wait_hold()
    b.faults.clear_netem(host)
    b.healed(f"netem removed from {host}")
    b.recover()


def rolling_restart(b: Bounce) -> None:
    service = "kafka" if b.spec.on_kraft else None  # on KRaft: the brokers (the controllers' roll is not built)
    b.mark(f"rolling restart of every {'broker' if service else 'node'} (kctl restart --rolling)")
    roll(b.spec, b.state_dir, service=service)
    b.healed("rolling restart done")
    b.recover()


def baseline(b: Bounce) -> None:
    b.mark("no fault (baseline)")
    b.wait_hold()
    b.healed("no fault (baseline)")
    b.recover()


def mirror_failover(b: Bounce) -> None:
    raise KctlError("mirror-failover is a drill of two clusters: kctl.drill.mirror runs it",
                    hint="`kctl drill run mirror-failover` on the replica's kctl.yaml")


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("leader-kill", "SIGKILL the leader of partition 0; restart it once it left /brokers/ids", True,
             leader_kill),
    Scenario("leader-term", "SIGTERM the leader of partition 0 (controlled shutdown); restart it", True,
             leader_term),
    Scenario("controller-kill", "SIGKILL the controller broker and let it come back (on KRaft: the active KRaft"
                                " controller)", True,
             controller_kill),
    Scenario("zk-leader-kill", "SIGKILL the ZooKeeper leader; restart it once another leads", False,
             zk_leader_kill),
    Scenario("zk-quorum-loss", "stop a majority of the ZooKeepers (2 of 3) for --hold, then start them", False,
             zk_quorum_loss),
    Scenario("broker-pause", "SIGSTOP the leader of partition 0 for --hold (a hung broker), then SIGCONT",
             True, broker_pause),
    Scenario("broker-partition", "cut the leader's node off the cluster network for --hold, reconnect it",
             True, broker_partition),
    Scenario("slow-network", f"tc netem on the leader's node ({NETEM_DELAY_MS} ms, {NETEM_LOSS_PERCENT:g}% loss)"
             " for --hold", False, slow_network),
    Scenario("rolling-restart", "the day-2 rolling restart (kctl restart --rolling) under load", True,
             rolling_restart),
    Scenario("baseline", "no fault: the load and the check alone (a control)", False, baseline),
    Scenario("mirror-failover", "on a replica's kctl.yaml: its primary lost under load, a consumer group failed"
                                " over to the replica (kctl.drill.mirror)", False, mirror_failover),
)}
