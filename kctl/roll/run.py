"""Walk a rolling-restart plan through health gates: every wait is a probe of the cluster, never a sleep.

Each gate is a :class:`kctl.wait.Stage` whose probe asks Docker,
ZooKeeper or Kafka (through :mod:`kctl.cluster.health` and the modules it builds on);
a gate that times out stops the roll with what it last saw, and the nodes not
yet reached are left untouched. A lock file in the state dir keeps a second
roll of the same cluster from starting meanwhile.

Interruptions: Ctrl-C, SIGTERM or any error between a service's stop and its start puts that service back
(started again, further signals held until it is) before the roll gives up. A record in the state dir
(``roll.json``) names every service the roll has down, written before each stop and after each start, so that a
roll killed outright (SIGKILL, a lost terminal) is put back by the next ``kctl restart`` or ``kctl apply``
before its pre-checks, and any other change of the cluster is refused until then with what to run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.cluster import health
from kctl.cluster.lock import clear_record, down_text, holder_text, lock_record, read_record, roll_lock, write_record
from kctl.cluster.quorum import quorum_ready
from kctl.errors import ClusterError, KctlError, TimeoutReached
from kctl.kafka import controllers, leaders
from kctl.kafka import describe as kmd
from kctl.kafka.client import Target
from kctl.kraft import config as kc
from kctl.model.spec import ClusterSpec
from kctl.roll import plan as rp
from kctl.runtime import cluster as runtime_cluster
from kctl.runtime.docker_api import NOT_RUNNING
from kctl.runtime.engine import engines
from kctl.runtime.engine import services as node_services
from kctl.runtime.faults import deferred_interrupts, interruptible
from kctl.security.store import client_settings  # a secured cluster: SASL_SSL as its admin user
from kctl.wait import POLL_S, Probe, wait_until
from kctl.zk import znodes

Progress = Callable[[str], None]
PRE_CHECK_TIMEOUT = 30.0


@dataclass
class GateRecord:
    step: str
    gate: str
    seconds: float
    saw: str


@dataclass
class StepRecord:
    host: str
    service: str
    why: str
    seconds: float


@dataclass
class RollResult:
    plan: rp.RollPlan
    steps: list[StepRecord] = field(default_factory=list)
    gates: list[GateRecord] = field(default_factory=list)
    seconds: float = 0.0
    election: Any = None  # kctl.kafka.leaders.ElectionResult


class RollStopped(ClusterError):
    """A gate timed out: the roll stopped there; the nodes after it were not touched."""


class RollInterrupted(ClusterError):
    """Ctrl-C or SIGTERM during a roll: what the step had down was started again; the nodes after it were not
    touched."""

    exit_code = 130


def start_gates(spec: ClusterSpec, host: str, service: str) -> list[tuple[str, Probe]]:
    """The gates that say a service the roll started again serves (its start gates in the roll's plan)."""
    if service == "kafka":
        return [(rp.GATE_REGISTERED, registered_gate(spec))]
    if service == "zookeeper":
        return [(rp.GATE_ZK_MODE, zk_mode_gate(spec, host)), (rp.GATE_ONE_LEADER, one_leader_gate(spec))]
    return [(rp.GATE_QUORUM, quorum_gate(spec))]  # a KRaft controller


def put_back_left(spec: ClusterSpec, state_dir: Path, timeout: float, say: Progress) -> list[tuple[str, str]]:
    """Start what an interrupted roll's record names as down (controllers and ZooKeepers before brokers), wait
    for each one's start gates, then drop the record. What was put back; [] without a record."""
    rec = read_record(state_dir)
    if rec is None:
        return []
    down = sorted(rec["down"], key=lambda hs: hs[1] == "kafka")
    if not down:
        clear_record(state_dir)
        return []
    say(f"an interrupted roll ({holder_text(rec)}) left {down_text(rec)} stopped: starting it again first")
    runner = _Runner(spec, RollResult(rp.RollPlan(spec.name, "put back", [], [])), timeout, GATE_POLL_S, say,
                     state_dir)
    runner.down = list(down)
    runner.record = {k: v for k, v in rec.items() if k != "down"}
    try:
        for host, service in down:
            runner.start("put back", host, service)
        for host, service in down:
            for name, probe in start_gates(spec, host, service):
                runner.gate(f"put back {host} {service}", name, probe)
    except TimeoutReached as exc:
        raise ClusterError(f"the services an interrupted roll left stopped ({down_text(rec)}) were started"
                           f" again but did not come back: {exc.message}",
                           hint="see `kctl status` and `kctl logs HOST --service SERVICE`; run the roll again"
                                " once they serve") from None
    clear_record(state_dir)
    return down


# ----- planning from the live cluster ---------------------------------------------------------------


def plan(spec: ClusterSpec, service: str | None, nodes: list[str], recreate: tuple[str, ...] = ()) -> rp.RollPlan:
    """The plan for the cluster as it is now (ZooKeeper modes and controller decide the order)."""
    obs = health.gather(spec, 1.5, docker=False)
    zk_modes = {h: z.mode for h, z in (obs.zookeeper or {}).items()}
    controller = obs.kafka.controller if obs.kafka else None
    if spec.on_kraft:  # the node whose controller leads the quorum goes last (a broker names a random one)
        leader = controllers.controller_leader(spec, obs.controllers or {})
        controller = next((n.id for n in kc.controller_nodes(spec) if kc.controller_id(n) == leader), None)
    out = rp.plan_roll(spec, service=service, nodes=nodes, zk_modes=zk_modes, controller=controller,
                       recreate=recreate)
    if obs.kafka is None:
        out.notes.append(f"Kafka did not answer ({obs.kafka_error}): the controller is not known")
    return out


# ----- probes: each one observation of the cluster, each returning (done, what it saw) ---------------


def pre_checks(spec: ClusterSpec) -> Probe:
    """Healthy as kctl.cluster.health judges it, Docker aside (the containers may be on other hosts)."""
    return health.healthy(spec, docker=False)


def min_isr_gate(spec: ClusterSpec, broker: int) -> Probe:
    cluster = Target.of(spec)
    known: dict[str, int] = {}
    default = int(spec.kafka.overrides.get("min.insync.replicas", spec.kafka.min_insync_replicas))

    def run() -> tuple[bool, str]:
        md = kmd.fetch_any(spec.bootstrap_servers, 3.0, client_settings(spec, own=True))
        mine = [p for p in md.partitions if broker in p.replicas]
        missing = {p.topic for p in mine} - set(known)
        known.update(leaders.min_insync_replicas(cluster, missing))
        blocking = rp.blocking_partitions(mine, broker, known, default)
        if blocking:
            more = f" (+{len(blocking) - 5} more)" if len(blocking) > 5 else ""
            return False, "; ".join(blocking[:5]) + more
        bare = rp.unprotectable_partitions(mine, broker, known, default)
        if bare:
            more = f" +{len(bare) - 5} more" if len(bare) > 5 else ""
            return True, (f"{len(mine) - len(bare)} partitions with a replica on broker {broker} each keep their"
                          f" ISR at min.insync.replicas or above; {len(bare)} with no more replicas than"
                          f" min.insync.replicas stop taking acks=all writes while it restarts, whatever the"
                          f" order ({', '.join(bare[:5])}{more})")
        return True, f"{len(mine)} partitions with a replica on broker {broker}, each ISR above min.insync.replicas"
    return run


def process_gate(spec: ClusterSpec, host: str, service: str, want: str) -> Probe:
    def run() -> tuple[bool, str]:
        st = node_services.process_state(spec, host, service)
        # a stop that ended in its supervisor's SIGKILL leaves a failed unit on a host: exited all the same
        return st == want or (want == "STOPPED" and st in NOT_RUNNING), f"{host} {service} {st}"
    return run


def unregistered_gate(spec: ClusterSpec, broker: int) -> Probe:
    """The broker's registration is gone: its ZooKeeper session's znode, or on KRaft (no ZooKeeper) its place
    among the live brokers of Kafka's metadata (a fenced broker is not listed)."""
    if spec.on_kraft:
        if [n.id for n in spec.brokers] == [broker]:
            # The only broker: no other one lists the live brokers, and its process has exited (the gate before,
            # after a controlled shutdown, which fenced it in the controllers).
            return lambda: (True, f"broker {broker} is the cluster's only broker, and its process has exited")
        return health.broker_registered(spec, broker, want=False)
    path = f"/brokers/ids/{broker}"

    def run() -> tuple[bool, str]:
        with znodes.connect(spec, timeout=3.0) as zk:
            st = zk.exists(path)
        return st is None, f"{path} " + ("gone" if st is None else f"still there (session {hex(st.ephemeralOwner)})")
    return run


def controller_exited_gate(spec: ClusterSpec, host: str) -> Probe:
    """The node's KRaft controller JVM is gone from its process table."""
    def run() -> tuple[bool, str]:
        st = node_services.process_state(spec, host, "controller")
        return st != "RUNNING", f"{host} controller {'RUNNING' if st == 'RUNNING' else 'not running'}"
    return run


def quorum_gate(spec: ClusterSpec) -> Probe:
    return quorum_ready(spec, spec.kraft_cluster_id)


def zk_mode_gate(spec: ClusterSpec, host: str) -> Probe:
    return health.zk_serving(spec, host)


def one_leader_gate(spec: ClusterSpec) -> Probe:
    def run() -> tuple[bool, str]:
        obs = health.gather(spec, 1.0, docker=False, kafka=False)
        ok_modes, saw = health.check_zk_modes(spec, obs)
        ok_leader, _ = health.check_one_leader(spec, obs)
        return ok_modes and ok_leader, saw
    return run


def registered_gate(spec: ClusterSpec) -> Probe:
    return health.probe(spec, health.check_brokers, kafka=True, timeout=2.0)


def urp_gate(spec: ClusterSpec, stable_s: float = rp.URP_STABLE_S) -> Probe:
    """kctl.cluster.health's check_replicated at every check for ``stable_s`` seconds (a partition may drop out of the
    ISR again while its follower catches up)."""
    since: list[float | None] = [None]
    replicated = health.probe(spec, health.check_replicated, kafka=True, timeout=3.0)

    def run() -> tuple[bool, str]:
        ok, saw = replicated()
        now = time.monotonic()
        if not ok:
            since[0] = None
        elif since[0] is None:
            since[0] = now
        held = 0.0 if since[0] is None else now - since[0]
        return since[0] is not None and held >= stable_s, f"{saw}; 0 for {held:.1f} of {stable_s:g} s"
    return run


# ----- the roll ------------------------------------------------------------------------------------

# How often a gate asks: kctl.wait's period for the waits a cluster's start and change go through.
GATE_POLL_S = POLL_S


class _Runner:
    def __init__(self, spec: ClusterSpec, result: RollResult, timeout: float, poll: float, say: Progress,
                 state_dir: Path | None = None) -> None:
        self.spec, self.result, self.timeout, self.poll, self.say = spec, result, timeout, poll, say
        self.state_dir = state_dir
        self.dc: Any = None
        self.down: list[tuple[str, str]] = []  # (host, service) this roll stopped and has not started again
        self.record: dict[str, Any] = {}  # what the roll's record says besides what is down (who, what, when)
        self._lock = threading.Lock()  # start_together's starts record from two threads

    def _saved(self) -> None:
        if self.state_dir is not None:
            write_record(self.state_dir, {**self.record, "down": self.down})

    def going_down(self, host: str, services: tuple[str, ...]) -> None:
        """Recorded before the stop is asked for: a kill between the two leaves the service named as down (a
        later start of a running service changes nothing)."""
        with self._lock:
            self.down = self.down + [(host, s) for s in services if (host, s) not in self.down]
            self._saved()

    def back_up(self, host: str, services: tuple[str, ...] | None = None) -> None:
        """Recorded once the start returned (``services`` None: every service of the host, a new container)."""
        with self._lock:
            self.down = [(h, s) for h, s in self.down if h != host or (services is not None and s not in services)]
            self._saved()

    def put_back(self, label: str) -> None:
        """Start again what this roll has down, with Ctrl-C and SIGTERM held until every start has returned
        (then raised); a start that fails leaves its service in the record for the next roll."""
        with deferred_interrupts():
            for host, service in reversed(list(self.down)):
                try:
                    self.start(label, host, service)
                except KctlError as exc:
                    self.say(f"{label}: {host} {service} not started again ({exc.message}); the next"
                             " `kctl restart` or `kctl apply` starts it first")

    def gate(self, label: str, name: str, probe: Probe) -> None:
        last: list[str] = []

        def seen(stage: str, saw: str) -> None:
            if not last or last[0] != saw:
                last[:] = [saw]
                self.say(f"{label}: waiting for {stage}: {saw}")

        started = time.monotonic()
        res = wait_until(name, probe, self.timeout, poll=self.poll, on_progress=seen)
        self.result.gates.append(GateRecord(label, name, time.monotonic() - started, res.saw))
        self.say(f"{label}: ok  {name} ({time.monotonic() - started:.1f}s)")

    def docker(self) -> Any:
        if self.dc is None:
            self.dc = engines.client(self.spec)
        return self.dc

    def stop(self, label: str, host: str, service: str) -> None:
        self.going_down(host, (service,))
        self.say(f"{label}: stopping {service}" + (" (SIGTERM: controlled shutdown)" if service == "kafka" else ""))
        node_services.stop(self.spec, host, service, self.docker())

    def start(self, label: str, host: str, service: str) -> None:
        self.say(f"{label}: starting {service}")
        node_services.start(self.spec, host, service, self.docker())
        self.back_up(host, (service,))

    def start_together(self, label: str, host: str, services: tuple[str, ...]) -> None:
        """Start ``services`` at once (each start returns after its supervisor's start time); the first
        failure is raised once every start has returned (a start of a running service changes nothing)."""
        from concurrent.futures import ThreadPoolExecutor

        self.docker()  # made once, before the threads share it
        with ThreadPoolExecutor(len(services)) as pool:
            starts = [pool.submit(self.start, label, host, service) for service in services]
        for started in starts:
            started.result()

    def zk_down(self, label: str, host: str) -> None:
        self.stop(label, host, "zookeeper")
        self.gate(label, rp.GATE_ZK_EXITED, process_gate(self.spec, host, "zookeeper", "STOPPED"))

    def recreate(self, label: str, host: str) -> None:
        assert self.state_dir is not None
        self.say(f"{label}: making the container again from the new render")
        runtime_cluster.recreate_one(self.spec, self.state_dir, host)
        self.back_up(host)  # the new container starts every process of the node

    def zk_up(self, label: str, host: str, start: bool = True) -> None:
        if start:
            self.start(label, host, "zookeeper")
        self.gate(label, rp.GATE_ZK_MODE, zk_mode_gate(self.spec, host))
        self.gate(label, rp.GATE_ONE_LEADER, one_leader_gate(self.spec))

    def kafka_up(self, label: str, host: str, start: bool = True) -> None:
        if start:
            self.start(label, host, "kafka")
        self.gate(label, rp.GATE_REGISTERED, registered_gate(self.spec))
        self.gate(label, rp.GATE_URP.format(s=rp.URP_STABLE_S), urp_gate(self.spec))

    def kraft_node(self, label: str, s: rp.Step) -> None:
        """A node on KRaft: broker down (its gates), controller down, [container made again,] controller up and
        the quorum whole again, then the broker up (its gates)."""
        assert s.broker is not None
        self.gate(label, rp.GATE_MIN_ISR, min_isr_gate(self.spec, s.broker))
        self.stop(label, s.host, "kafka")
        self.gate(label, rp.GATE_EXITED, process_gate(self.spec, s.host, "kafka", "STOPPED"))
        self.gate(label, rp.GATE_BROKER_GONE.format(id=s.broker), unregistered_gate(self.spec, s.broker))
        self.stop(label, s.host, "controller")
        self.gate(label, rp.GATE_CONTROLLER_EXITED, controller_exited_gate(self.spec, s.host))
        if s.recreate:
            self.recreate(label, s.host)  # the new container starts every process of the node
        else:
            self.start(label, s.host, "controller")
        self.gate(label, rp.GATE_QUORUM, quorum_gate(self.spec))
        if self.down:
            self.start(label, s.host, "kafka")
        self.kafka_up(label, s.host, start=False)

    def controller(self, label: str, s: rp.Step) -> None:
        """A KRaft controller alone: down, up, the quorum whole again."""
        self.stop(label, s.host, "controller")
        self.gate(label, rp.GATE_CONTROLLER_EXITED, controller_exited_gate(self.spec, s.host))
        self.start(label, s.host, "controller")
        self.gate(label, rp.GATE_QUORUM, quorum_gate(self.spec))

    def step(self, label: str, s: rp.Step) -> None:
        """One step of the plan. Whatever ends it early (a gate that timed out, an error, Ctrl-C, SIGTERM), what
        it stopped is started again first, so that a stuck gate or an interruption costs no capacity."""
        try:
            if s.service == "controller":
                self.controller(label, s)
            elif s.service == "node" and self.spec.on_kraft:
                self.kraft_node(label, s)
            else:
                self.zk_step(label, s)
        except BaseException:
            self.put_back(label)
            raise

    def zk_step(self, label: str, s: rp.Step) -> None:
        if s.service in ("kafka", "node"):
            assert s.broker is not None
            self.gate(label, rp.GATE_MIN_ISR, min_isr_gate(self.spec, s.broker))
            self.stop(label, s.host, "kafka")
            self.gate(label, rp.GATE_EXITED, process_gate(self.spec, s.host, "kafka", "STOPPED"))
            self.gate(label, rp.GATE_UNREGISTERED.format(id=s.broker), unregistered_gate(self.spec, s.broker))
        if s.recreate:
            if s.service in ("zookeeper", "node"):
                self.zk_down(label, s.host)
            self.recreate(label, s.host)  # the new container starts every process of the node
            if s.service == "node" and self.spec.kraft_phase in ("dual-write", "kraft-brokers"):
                # a migration's node (engine swarm): its KRaft controller back in a whole quorum first
                self.gate(label, rp.GATE_QUORUM, quorum_gate(self.spec))
            if s.service in ("zookeeper", "node"):
                self.zk_up(label, s.host, start=False)
            if s.service in ("kafka", "node"):
                self.kafka_up(label, s.host, start=False)
            return
        if s.service == "node":
            # ZooKeeper goes down once its broker is gone and the ISR changes of its going are done, never
            # while ISRs grow: restarting it during the broker's catch-up instead (tried, to overlap the two)
            # got one roll stuck. The ZooKeeper leader's restart expired the controller's 4 s session, its
            # conditional ISR write came back "bad ZK version", the partition's leader gave up its
            # AlterPartition, and the partition stayed under-replicated until its leader epoch changed
            # (Kafka 3.9, ZooKeeper mode). Nor was that order quicker, with two JVMs starting on two cores.
            self.zk_down(label, s.host)
            # Both processes start at once: the broker's wrapper waits for a ZooKeeper quorum, which the
            # other ZooKeepers hold meanwhile, so the broker's start overlaps its ZooKeeper's instead of
            # following it; the ZooKeeper's gates come first, then the broker's.
            self.start_together(label, s.host, ("zookeeper", "kafka"))
            self.zk_up(label, s.host, start=False)
            self.kafka_up(label, s.host, start=False)
            return
        if s.service == "zookeeper":
            self.zk_down(label, s.host)
            self.zk_up(label, s.host)
        if s.service == "kafka":
            self.kafka_up(label, s.host)


def _still_down(runner: _Runner) -> str:
    if not runner.down:
        return ""
    return (f"\nstill stopped: {', '.join(f'{h} {sv}' for h, sv in runner.down)} (recorded in"
            f" {contract.ROLL_RECORD_FILE}: the next `kctl restart` or `kctl apply` starts it first)")


def check_before_roll(spec: ClusterSpec, timeout: float = PRE_CHECK_TIMEOUT, progress: Progress | None = None) -> None:
    """The roll's pre-checks on their own: ClusterError (nothing touched) unless the cluster is healthy."""
    runner = _Runner(spec, RollResult(rp.RollPlan(spec.name, "all", list(rp.PRE_CHECKS), [])), timeout, 1.0,
                     progress or (lambda _m: None))
    try:
        runner.gate("pre-checks", "cluster healthy before the roll", pre_checks(spec))
    except TimeoutReached as exc:
        raise ClusterError(f"refused, nothing was touched: {exc.message}",
                           hint="fix what `kctl status` shows first") from None


def roll(spec: ClusterSpec, state_dir: Path, *, service: str | None = None, nodes: list[str] | None = None,
         gate_timeout: float = 300.0, poll: float = GATE_POLL_S, elect: bool = True,
         progress: Progress | None = None, lock: bool = True, recreate: tuple[str, ...] = (),
         command: str = "kctl restart") -> RollResult:
    """Restart ``service`` on ``nodes`` (all) one at a time through the health gates; then a preferred
    leader election. RollStopped when a gate times out (nothing after that step was touched).
    ``lock=False``: the caller holds the state dir's roll lock already (``kctl apply``); ``recreate``: the
    container hosts whose container is made again from the state dir's compose.yaml (``kctl apply``);
    ``command``: who the roll's record names (the command the operator ran)."""
    say = progress or (lambda _m: None)
    started = time.monotonic()
    with interruptible(), roll_lock(state_dir, command) if lock else contextlib.nullcontext(state_dir):
        engines.containers(spec)  # WrongEngine (nothing touched) when the other engine made the containers
        put_back_left(spec, state_dir, gate_timeout, say)  # what an earlier roll, killed mid-step, left down
        the_plan = plan(spec, service, nodes or [], recreate)
        result = RollResult(the_plan)
        runner = _Runner(spec, result, gate_timeout, poll, say, state_dir)
        runner.record = lock_record(command)
        n = len(the_plan.steps)
        say(f"{spec.name}: restarting {n} service(s): "
            + ", ".join(f"{s.host} {s.service}" for s in the_plan.steps))
        try:
            # A short wait: a partition catching up after a recent change is fine, a broken cluster is not.
            runner.timeout = min(gate_timeout, PRE_CHECK_TIMEOUT)
            runner.gate("pre-checks", "cluster healthy before the roll", pre_checks(spec))
            runner.timeout = gate_timeout
        except TimeoutReached as exc:
            raise ClusterError(f"restart refused, nothing was touched: {exc.message}",
                               hint="fix what `kctl status` shows first") from None
        for i, s in enumerate(the_plan.steps, 1):
            label = f"[{i}/{n}] {s.host} {s.service}"
            step_started = time.monotonic()
            done = ", ".join(f"{x.host} {x.service}" for x in the_plan.steps[:i - 1]) or "none"
            left = ", ".join(f"{x.host} {x.service}" for x in the_plan.steps[i:]) or "none"
            try:
                runner.step(label, s)
            except TimeoutReached as exc:
                raise RollStopped(
                    f"restart stopped at {label}: {exc.message}\nrestarted: {done}\nnot touched: {left}"
                    + _still_down(runner),
                    hint=f"see `kctl status` and `kctl logs {s.host} --service "
                         f"{s.service if s.service in ('zookeeper', 'controller') else 'kafka'}`; run the restart"
                         " again once"
                         " the cluster is healthy") from None
            except KeyboardInterrupt as exc:
                how = "SIGTERM" if exc.__class__.__name__ == "Terminated" else "Ctrl-C"
                raise RollInterrupted(
                    f"restart interrupted ({how}) at {label}: what it had stopped was started again"
                    f"\nrestarted: {done}\nnot touched: {left}" + _still_down(runner),
                    hint="`kctl status` shows the cluster; run the same command again to restart every node"
                         " (it starts first whatever is still down)") from None
            finally:
                if not runner.down:
                    clear_record(state_dir)
            result.steps.append(StepRecord(s.host, s.service, s.why, time.monotonic() - step_started))
            say(f"{label}: done in {time.monotonic() - step_started:.1f}s")
        if elect and any(s.service in ("kafka", "node") for s in the_plan.steps):
            try:
                result.election = leaders.elect(Target.of(spec), "preferred")
            except KctlError as exc:
                # Every restart passed its gates: the roll is done. The election only moves leadership back to
                # the preferred replicas (Kafka's own leader rebalance, auto.leader.rebalance.enable, does it later).
                say(f"preferred leader election not done ({exc.message}); the roll is complete:"
                    " `kctl elect-leaders --type preferred` runs it again")
            else:
                e = result.election
                say(f"preferred leader election: {len(e.elected)} moved, {e.not_needed} already preferred"
                    + (f", {len(e.failed)} failed: {e.failed[:3]}" if e.failed else ""))
    result.seconds = time.monotonic() - started
    return result
