"""Run one failure drill: load, faults on a schedule, heal, an independent read, a verdict.

1. pre-checks (nothing injected when one fails: exit 2): a known scenario, a positive rate and
   duration, a topic with RF >= 2 for a scenario that takes a replica away, a healthy cluster;
2. the drill's own topic (3 partitions, RF 3, min.insync.replicas=2) unless ``topic`` is given;
3. the load (:mod:`kctl.drill.load`) and a monitor of partition and ZooKeeper leaders;
4. ``bounces`` faults spread over ``duration``, each healed and followed by a wait, through
   :mod:`kctl.cluster.health`, until the cluster is healthy and the topic fully replicated again;
   every fault still in place is removed on the way out, Ctrl-C and SIGTERM included;
5. the load stops, a fresh consumer reads every partition back (:mod:`kctl.drill.check`), and the
   :class:`Verdict` compares the two.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.cluster import health
from kctl.drill import check
from kctl.drill.load import Load
from kctl.drill.scenarios import SCENARIOS, Scenario
from kctl.errors import KctlError, TimeoutReached, UsageError
from kctl.kafka import describe as kmd
from kctl.kafka.client import Target, admin, kafka_error, wait_for_topic
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import engines
from kctl.runtime.engine.engines import Capability
from kctl.runtime.faults import Faults, HostFaults, interruptible, open_faults
from kctl.security.store import client_settings  # a secured cluster: SASL_SSL as its admin user
from kctl.wait import Probe, pause_until, ticks, wait_until

Progress = Callable[[str], None]
PRE_CHECK_TIMEOUT = 20.0
WARM_UP_TIMEOUT = 30.0
SETTLE_TIMEOUT = 60.0  # how long the high watermarks may take to cover what was acknowledged (check.settle)
DEFAULT_PARTITIONS = 3


class DrillNotRun(KctlError):
    """The drill could not run (bad input, an unhealthy cluster): nothing was injected."""

    exit_code = 2


@dataclass
class Verdict:
    scenario: str
    topic: str
    acks: str
    idempotent: bool
    rate: float
    duration_seconds: float
    bounces: int
    holds: bool = False
    failures: list[str] = field(default_factory=list)  # why the verdict does not hold
    produced: int = 0
    acked: int = 0
    read: int = 0
    lost: int = 0
    duplicates: int = 0
    reordered: int = 0
    unacked_present: int = 0
    unfinished: int = 0  # neither acknowledged nor failed when the final flush ended
    offset_mismatches: int = 0
    lost_sample: list[int] = field(default_factory=list)
    duplicate_sample: list[int] = field(default_factory=list)
    reordered_sample: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    recovery_seconds: float | None = None  # the longest, fault healed -> healthy
    recoveries: list[float] = field(default_factory=list)
    # fault -> the process running and serving again by itself (its supervisor restarted it; no command)
    self_heal_seconds: list[float] = field(default_factory=list)
    # fault -> its role elsewhere (the kill drills): the killed broker out of the cluster's view (ZooKeeper: its
    # session expired; KRaft: fenced), or another KRaft controller leading the quorum
    failover_seconds: list[float] = field(default_factory=list)
    longest_stall_seconds: float = 0.0
    leader_changes: int = 0
    zk_leader_changes: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)  # [{start, end, what}] seconds since the start
    events: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    healed_on_exit: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.holds else 1


# ----- pre-checks ---------------------------------------------------------------------------


def validate(scenario: str, rate: float, duration: float, bounces: int, hold: float) -> Scenario:
    if scenario not in SCENARIOS:
        raise DrillNotRun(f"unknown scenario {scenario!r}; nothing was injected",
                          hint=f"one of {', '.join(SCENARIOS)} (`kctl drill list`)")
    for name, value in (("--rate", rate), ("--duration", duration), ("--bounces", bounces)):
        if not value > 0:
            raise DrillNotRun(f"{name} {value:g} is not positive; nothing was injected",
                              hint="e.g. --rate 1000 --duration 60s --bounces 5")
    if hold < 0:
        raise DrillNotRun(f"--hold {hold:g} is negative; nothing was injected", hint="e.g. --hold 10s")
    return SCENARIOS[scenario]


def parse_seconds(text: str) -> float:
    """``60``, ``60s``, ``2m``, ``1.5h`` -> seconds; UsageError (exit 2) otherwise."""
    t = str(text).strip().lower()
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for suffix in ("ms", "s", "m", "h"):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], scale[suffix]
            break
    else:
        mult = 1.0
    try:
        return float(t) * mult
    except ValueError:
        raise UsageError(f"{text!r} is not a duration", hint="e.g. 60s, 2m, 90") from None


def pre_check_cluster(spec: ClusterSpec) -> None:
    try:
        wait_until("cluster healthy before the drill", health.healthy(spec), PRE_CHECK_TIMEOUT)
    except TimeoutReached as exc:
        raise DrillNotRun(f"the cluster is not healthy, so no drill was run and nothing was injected:"
                          f" {exc.message.splitlines()[-1]}", hint="fix what `kctl status` shows first") from None


def topic_replication(spec: ClusterSpec, topic: str) -> tuple[int, int] | None:
    """(partitions, smallest replication factor) of an existing topic; None if it does not exist."""
    md = kmd.fetch_any(spec.bootstrap_servers, 3.0, client_settings(spec, own=True))
    parts = [p for p in md.partitions if p.topic == topic]
    if not parts:
        return None
    return len(parts), min(len(p.replicas) for p in parts)


def create_topic(spec: ClusterSpec, name: str, brokers: int, unclean: bool) -> tuple[int, int]:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    rf = min(3, brokers)
    config = {"min.insync.replicas": str(min(2, rf))}
    if unclean:
        config["unclean.leader.election.enable"] = "true"
    client = admin(Target.of(spec))
    try:
        client.create_topics([NewTopic(name, DEFAULT_PARTITIONS, rf, config=config)])[name].result(30)
    except Exception as exc:  # noqa: BLE001 - confluent-kafka raises KafkaException
        raise kafka_error(exc, f"creating the drill topic {name}", topic=name) from None
    try:
        wait_for_topic(client, name, DEFAULT_PARTITIONS, 30)
    except TimeoutReached as exc:
        raise DrillNotRun(f"the drill topic {name} is not usable: {exc.message}",
                          hint="`kctl topic describe " + name + "`") from None
    return DEFAULT_PARTITIONS, rf


def delete_topic(spec: ClusterSpec, name: str) -> None:
    client = admin(Target.of(spec))
    try:
        client.delete_topics([name])[name].result(30)
    except Exception:  # noqa: BLE001 - a leftover drill topic is harmless; the verdict is what matters
        pass


# ----- the monitor ----------------------------------------------------------------------------


class Monitor:
    """Polls partition leaders of the drill topic and the ZooKeeper leader once a second."""

    def __init__(self, spec: ClusterSpec, topic: str, clock: Callable[[], float]) -> None:
        self.spec, self.topic, self.clock = spec, topic, clock
        self.leaders: dict[int, int] = {}
        self.zk_leader: str | None = None
        self.leader_changes = 0
        self.zk_leader_changes = 0
        self.events: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kctl-drill-monitor", daemon=True)

    def start(self) -> Monitor:
        self._observe()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _observe(self) -> None:
        obs = health.gather(self.spec, 1.0, docker=False)
        if obs.kafka is not None:
            for p in obs.kafka.partitions:
                if p.topic != self.topic or p.leader < 0:
                    continue
                before = self.leaders.get(p.partition)
                if before is not None and before != p.leader:
                    self.leader_changes += 1
                    self.events.append((self.clock(), f"partition {p.partition} leader {before} -> {p.leader}"))
                self.leaders[p.partition] = p.leader
        leaders = [h for h, z in (obs.zookeeper or {}).items() if z.mode in ("leader", "standalone")]
        if len(leaders) == 1:
            if self.zk_leader is not None and leaders[0] != self.zk_leader:
                self.zk_leader_changes += 1
                self.events.append((self.clock(), f"ZooKeeper leader {self.zk_leader} -> {leaders[0]}"))
            self.zk_leader = leaders[0]

    def _run(self) -> None:
        for n in ticks(1.0, stop=self._stop):
            if not n:
                continue  # the first observation a second after the start, as each after it
            try:
                self._observe()
            except Exception:  # noqa: BLE001 - a missed observation is not a drill failure
                continue


# ----- one bounce's context ----------------------------------------------------------------------


class _Bounce:
    def __init__(self, spec: ClusterSpec, state_dir: Path, faults: Faults, topic: str, hold: float,
                 gate_timeout: float, clock: Callable[[], float], say: Progress) -> None:
        self.spec, self.state_dir, self.faults, self.topic, self.hold = spec, state_dir, faults, topic, hold
        self.gate_timeout, self.clock, self.say = gate_timeout, clock, say
        self.marks: list[tuple[float, str]] = []
        self.windows: list[dict[str, Any]] = []
        self.recoveries: list[float] = []
        self.self_heals: list[float] = []
        self.failovers: list[float] = []
        self._healed_at: float | None = None

    def mark(self, what: str) -> None:
        t = self.clock()
        self.marks.append((t, f"fault: {what}"))
        self.windows.append({"start": round(t, 2), "end": None, "what": what})
        self.say(f"[{t:6.1f}s] fault: {what}")

    def gate(self, name: str, probe: Probe, timeout: float | None = None, *, failover: bool = False) -> str:
        """Wait until ``probe`` holds. ``failover``: what it waits for is the fault's role taken over elsewhere;
        the time from the fault's mark to then is the bounce's failover time (to the 0.2 s of the poll)."""
        res = wait_until(name, probe, timeout or self.gate_timeout, poll=0.2 if failover else 0.5)
        t = self.clock()
        self.say(f"[{t:6.1f}s] ok: {name} ({res.seconds:.1f}s)")
        if failover and self.windows:
            self.failovers.append(t - self.windows[-1]["start"])
            self.marks.append((t, f"failover: {name}"))
        return res.saw

    def wait_hold(self) -> None:
        # The fault's planned length (a schedule, not a wait for a state of the cluster).
        pause_until(time.monotonic() + self.hold)

    def healed(self, what: str, *, by_itself: bool = False) -> None:
        """The fault is over: healed by the drill, or (``by_itself``) the process's supervisor restarted it
        and it serves again, which the drill only waited for."""
        t = self.clock()
        self._healed_at = t
        if by_itself and self.windows:
            took = t - self.windows[-1]["start"]
            self.self_heals.append(took)
            what = f"{what} after {took:.1f}s"
        self.marks.append((t, f"healed: {what}"))
        if self.windows and self.windows[-1]["end"] is None:
            self.windows[-1]["end"] = round(t, 2)
        self.say(f"[{t:6.1f}s] healed: {what}")

    def recover(self, *, outlast_session: bool = False) -> None:
        """Wait until healthy (as kctl.cluster.health judges it: no under-replicated partition left, the drill topic's
        included). ``outlast_session``: a broker cut off or paused for less than its ZooKeeper session timeout
        looks healthy at once, and its session can still expire a moment later if it reconnects late; then it
        must also stay healthy until that session would have expired, counted from the fault's start."""
        started = self._healed_at if self._healed_at is not None else self.clock()
        health.wait_until_healthy(self.spec, timeout=self.gate_timeout)
        took = self.clock() - started
        if outlast_session and self.windows:
            until = self.windows[-1]["start"] + self.spec.kafka.zookeeper_session_timeout_ms / 1000 + 2.0
            probe = health.healthy(self.spec, docker=False)
            for _ in ticks(0.5, until=until, clock=self.clock):
                ok, why = probe()
                if not ok:
                    self.marks.append((self.clock(), f"unhealthy again: {why}"))
                    self.say(f"[{self.clock():6.1f}s] unhealthy again: {why}")
                    health.wait_until_healthy(self.spec, timeout=self.gate_timeout)
                    took = self.clock() - started
        self.recoveries.append(took)
        self.marks.append((self.clock(), "healthy"))
        self.say(f"[{self.clock():6.1f}s] healthy again ({took:.1f}s after the heal)")

    def _metadata(self) -> kmd.Metadata:
        return kmd.fetch_any(self.spec.bootstrap_servers, 3.0, client_settings(self.spec, own=True))

    def leader_of_partition0(self) -> int:
        p0 = next((p for p in self._metadata().partitions if p.topic == self.topic and p.partition == 0), None)
        if p0 is None or p0.leader < 0:
            raise KctlError(f"partition 0 of {self.topic} has no leader", hint="`kctl topic describe`")
        return p0.leader

    def controller(self) -> int:
        ctrl = self._metadata().controller
        if ctrl is None or ctrl < 0:
            raise KctlError("the cluster has no controller", hint="`kctl status`")
        return ctrl

    def zk_leader(self) -> str:
        st = health.status(self.spec)
        if st.leader is None:
            raise KctlError("no ZooKeeper leader", hint="`kctl status`")
        return st.leader


# ----- the drill -------------------------------------------------------------------------------------


def run(spec: ClusterSpec, state_dir: Path, scenario: str, *, duration: float = 60.0, rate: float = 1000.0,
        acks: str = "all", bounces: int = 5, hold: float = 10.0, topic: str | None = None,
        unclean: bool = False, keep_topic: bool = False, gate_timeout: float = 180.0,
        progress: Progress | None = None) -> Verdict:
    """Run a drill and return its verdict (``holds``: nothing acknowledged was lost, no duplicates or
    reordering with idempotence, every fault recovered from). DrillNotRun (exit 2) when it could not run."""
    say = progress or (lambda _m: None)
    if scenario == "mirror-failover":
        raise DrillNotRun("mirror-failover is a drill of two clusters (kctl.drill.mirror.run); nothing was"
                          " injected", hint="`kctl drill run mirror-failover` on the replica's kctl.yaml")
    if acks not in ("all", "-1", "1"):
        raise DrillNotRun(f"--acks {acks!r}: all or 1", hint="acks=0 has no acknowledgement to check")
    sc = validate(scenario, rate, duration, bounces, hold)
    if not engines.supports(spec, Capability.NODE_FAULTS) and scenario in HostFaults.UNSUPPORTED:
        raise DrillNotRun(f"{scenario} does not run on engine {spec.engine.value}: it"
                          f" {HostFaults.UNSUPPORTED[scenario]}, which kctl does not do to a host; nothing was"
                          " injected",
                          hint="the process drills run there: leader-kill, leader-term, controller-kill,"
                               " zk-leader-kill, zk-quorum-loss, broker-pause, rolling-restart, baseline")
    if spec.on_kraft and scenario.startswith("zk-"):
        raise DrillNotRun(f"{scenario} acts on ZooKeeper, and cluster {spec.name!r} is on KRaft (its ZooKeeper is"
                          " retired); nothing was injected",
                          hint="controller-kill kills the active KRaft controller there")
    # The containers the faults act on (WrongEngine when the other engine made them): before anything is done.
    open_faults(spec, state_dir=state_dir).containers()
    pre_check_cluster(spec)
    brokers = len(health.status(spec).registered_ids)
    own_topic = topic is None
    name = topic or f"kctl-drill-{scenario}-{uuid.uuid4().hex[:6]}"
    if own_topic:
        if sc.kills_broker and brokers < 2:
            raise DrillNotRun(f"{scenario} takes a replica away, and this cluster has {brokers} broker(s):"
                              " no topic can have RF >= 2; nothing was injected", hint="run it on 3 brokers")
        partitions, rf = create_topic(spec, name, brokers, unclean)
    else:
        found = topic_replication(spec, name)
        if found is None:
            raise DrillNotRun(f"topic {name!r} does not exist; nothing was injected",
                              hint="create it, or leave --topic out: the drill makes its own")
        partitions, rf = found
        if sc.kills_broker and rf < 2:
            raise DrillNotRun(f"topic {name} has replication factor {rf}: {scenario} takes a replica away, so"
                              " acknowledged records would be lost by design; nothing was injected",
                              hint="use a topic with RF >= 2, or leave --topic out")
        if unclean:
            say("note: --unclean applies only to the drill's own topic; the given topic keeps its config")
    verdict = Verdict(scenario, name, acks, acks in ("all", "-1"), rate, 0.0, bounces)
    say(f"drill {scenario} on {spec.name}: topic {name} ({partitions} partitions, RF {rf}), {rate:g} records/s"
        f" acks={acks} for {duration:g}s, {bounces} bounce(s)")
    load = Load(spec, name, partitions, rate=rate, acks=acks, max_seconds=duration + 30 * bounces + 600)
    clock = load.elapsed
    monitor: Monitor | None = None
    bounce: _Bounce | None = None
    try:
        with interruptible():
            load.start()
            wait_until("the load acknowledged", lambda: (load.acked_count() > 0,
                                                         f"{load.acked_count()} acknowledged"),
                       WARM_UP_TIMEOUT, poll=0.2)
            monitor = Monitor(spec, name, clock).start()
            with open_faults(spec, state_dir=state_dir) as faults:
                bounce = _Bounce(spec, state_dir, faults, name, hold, gate_timeout, clock, say)
                try:
                    for i in range(bounces):
                        pause_until(duration * (i + 0.5) / bounces - hold / 2, clock=clock)
                        say(f"[{clock():6.1f}s] bounce {i + 1}/{bounces}")
                        sc.bounce(bounce)
                except TimeoutReached as exc:
                    verdict.failures.append(f"did not recover: {exc.message.splitlines()[0]}"
                                            f" ({exc.message.splitlines()[-1]})")
                report = faults.heal()
                verdict.healed_on_exit = report.undone + [f"FAILED: {f}" for f in report.failed]
            if verdict.failures:
                # Healed on the way out: give the cluster its chance before reading back.
                try:
                    health.wait_until_healthy(spec, timeout=gate_timeout)
                except TimeoutReached as exc:
                    verdict.failures.append(f"still not healthy after healing: {exc.message.splitlines()[-1]}")
            pause_until(duration, clock=clock)
    finally:
        if monitor is not None:
            monitor.stop()
        record = load.stop() if load.record.started else None
    assert record is not None
    verdict.duration_seconds = round(record.stopped - record.started, 2)
    say(f"[{clock():6.1f}s] load stopped: {len(record.acked)} acknowledged; reading {name} back")
    settled = check.settle(spec, name, check.acked_ends(record.acked),
                           timeout=SETTLE_TIMEOUT if verdict.idempotent else 5.0)
    if settled.seconds > 1:
        verdict.notes.append(f"the high watermarks covered every acknowledged offset {settled.seconds:g}s after"
                             " the load stopped")
    read = check.read_topic(spec, name)
    cmp = check.compare(record.acked, read, produced=record.produced)
    _fill(verdict, record, cmp, bounce, monitor)
    if cmp.lost and settled.short:
        verdict.failures.append("high watermark below the acknowledged records after "
                                f"{settled.seconds:g}s: " + ", ".join(
                                    f"p{p} at {high}, acknowledged up to {need - 1}"
                                    for p, (high, need) in sorted(settled.short.items())))
    if own_topic and not keep_topic and verdict.holds:
        delete_topic(spec, name)
    elif own_topic:
        verdict.notes.append(f"topic {name} kept for inspection")
    return verdict


def _fill(v: Verdict, record: Any, cmp: check.Comparison, bounce: _Bounce | None, monitor: Monitor | None) -> None:
    v.produced, v.acked, v.read = record.produced, cmp.acked, cmp.read
    v.lost, v.duplicates, v.reordered = cmp.lost, cmp.duplicates, cmp.reordered
    v.unacked_present, v.offset_mismatches, v.unfinished = cmp.unacked_present, cmp.offset_mismatches, record.unfinished
    v.lost_sample, v.duplicate_sample, v.reordered_sample = cmp.lost_sample, cmp.duplicate_sample, cmp.reordered_sample
    v.errors = dict(sorted(record.errors.items()))
    v.longest_stall_seconds = round(check.longest_gap(record.ack_times, 0.0, record.stopped - record.started), 2)
    marks: list[tuple[float, str]] = []
    if bounce is not None:
        v.recoveries = [round(r, 2) for r in bounce.recoveries]
        v.recovery_seconds = max(v.recoveries) if v.recoveries else None
        v.self_heal_seconds = [round(r, 2) for r in bounce.self_heals]
        v.failover_seconds = [round(r, 2) for r in bounce.failovers]
        v.faults = bounce.windows
        marks += bounce.marks
    if monitor is not None:
        v.leader_changes, v.zk_leader_changes = monitor.leader_changes, monitor.zk_leader_changes
        marks += monitor.events
    marks.sort()
    v.events = [{"second": round(t, 2), "event": what} for t, what in marks]
    v.timeline = check.timeline_rows(record.seconds, marks, int(v.duration_seconds) + 1)
    if cmp.lost:
        v.failures.append(f"{cmp.lost} acknowledged record(s) not in the topic (e.g. seq {cmp.lost_sample[:5]})")
    if v.idempotent and cmp.duplicates:
        v.failures.append(f"{cmp.duplicates} duplicate(s) with an idempotent producer")
    if v.idempotent and cmp.reordered:
        v.failures.append(f"{cmp.reordered} record(s) out of order within a partition")
    if any(h.startswith("FAILED") for h in v.healed_on_exit):
        v.failures.append("a fault could not be removed: " + "; ".join(v.healed_on_exit))
    if v.unacked_present:
        v.notes.append(f"{v.unacked_present} record(s) written although their acknowledgement failed (allowed)")
    v.holds = not v.failures
