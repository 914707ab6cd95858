"""Bring a cluster up and down, wait until it is really healthy, and report its status."""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import contract, doctor
from kctl.errors import KctlError
from kctl.render import Rendered, render, write
from kctl.runtime import compose
from kctl.runtime.readiness import Stage, StageResult, wait_for_stages
from kctl.spec import ClusterSpec, ZkRole
from kctl.zk import fourlw, znodes

Progress = Callable[[str], None]

SUPERVISORCTL = contract.SUPERVISORCTL


# ----- status ---------------------------------------------------------------------


@dataclass
class ZkState:
    node: str
    host_port: int
    mode: str  # leader, follower, observer, standalone, not-serving, down
    zxid: str | None = None
    outstanding: int | None = None
    latency_avg: float | None = None
    connections: int | None = None
    error: str | None = None


@dataclass
class BrokerState:
    id: int
    node: str
    registered: bool
    controller: bool
    under_replicated: int | None


@dataclass
class NodeState:
    node: str
    container: str  # running, exited, paused, missing, ...
    health: str | None
    processes: dict[str, str]  # zookeeper/kafka -> RUNNING, STOPPED or WAITING-FOR-QUORUM
    zookeeper: ZkState | None
    broker: BrokerState | None


@dataclass
class ClusterStatus:
    cluster: str
    health: str  # healthy, degraded, down
    quorum: str  # ok, lost
    leader: str | None
    brokers_registered: int
    brokers_expected: int
    controller: int | None
    under_replicated_partitions: int | None
    bootstrap_servers: str
    zookeeper_connect: str
    internal_bootstrap_servers: str
    nodes: list[NodeState]
    zookeeper: list[dict[str, Any]] = field(default_factory=list)
    brokers: list[dict[str, Any]] = field(default_factory=list)
    elapsed_ms: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"healthy": 0, "degraded": 1}.get(self.health, 2)


def zk_state(spec: ClusterSpec, node_name: str, port: int, timeout: float) -> ZkState:
    try:
        ans = fourlw.ask("127.0.0.1", port, "srvr", timeout=timeout)
    except fourlw.FourLetterError as exc:
        return ZkState(node_name, port, "down", error=str(exc))
    if not ans.serving:
        return ZkState(node_name, port, "not-serving", error="running but not serving: no quorum")
    s = fourlw.parse_srvr(ans.text)
    if s.mode is None:
        return ZkState(node_name, port, "unknown", error=ans.text.strip()[:200] or "empty answer")
    return ZkState(node_name, port, s.mode, zxid=s.zxid, outstanding=s.outstanding,
                   latency_avg=s.latency_avg, connections=s.connections)


def processes(dc: Any, container_id: str, services: tuple[str, ...]) -> dict[str, str]:
    """Process state per service from the container's process table (one cheap API call, no exec)."""
    try:
        top = dc.api.top(container_id, ps_args="-eo pid,args")
    except Exception:  # noqa: BLE001 - no answer: leave the processes unknown
        return {}
    cmdlines = [p[-1] for p in top.get("Processes") or []]
    procs: dict[str, str] = {}
    if "zookeeper" in services:
        procs["zookeeper"] = "RUNNING" if any("QuorumPeerMain" in c for c in cmdlines) else "STOPPED"
    if "kafka" in services:
        if any(" kafka.Kafka " in f"{c} " for c in cmdlines):
            procs["kafka"] = "RUNNING"
        elif any("kafka-start" in c for c in cmdlines):
            procs["kafka"] = "WAITING-FOR-QUORUM"
        else:
            procs["kafka"] = "STOPPED"
    return procs


def _kafka_view(spec: ClusterSpec, timeout: float) -> tuple[list[int], int | None, dict[int, int] | None, str | None]:
    """(registered broker ids, controller, URP per leader broker, error) from ZooKeeper and metadata."""
    try:
        with znodes.connect(spec, timeout=timeout) as zk:
            ids = znodes.registered_brokers(zk)
            ctrl = znodes.controller(zk)
    except KctlError as exc:
        return [], None, None, exc.message
    except Exception as exc:  # noqa: BLE001
        return [], None, None, f"{type(exc).__name__}: {exc}"
    urp: dict[int, int] | None = None
    if ids:
        try:
            from kctl.kafka.client import admin

            md = admin(spec).list_topics(timeout=timeout)
            urp = {i: 0 for i in ids}
            for t in md.topics.values():
                for p in t.partitions.values():
                    if len(p.isrs) < len(p.replicas) or p.leader < 0:
                        urp[p.leader] = urp.get(p.leader, 0) + 1
        except Exception:  # noqa: BLE001 - metadata unavailable: URP unknown
            urp = None
    return ids, ctrl, urp, None


def status(spec: ClusterSpec, timeout: float = 1.5) -> ClusterStatus:
    """Query every node in parallel with bounded timeouts; a dead node never makes this hang."""
    started = time.monotonic()
    try:
        dc = compose.client(timeout=10)
        infos = {c.name: c for c in compose.containers(spec, dc)}
    except KctlError:
        dc, infos = None, {}
    from kctl.properties import services_of

    plan = services_of(spec)
    with cf.ThreadPoolExecutor(max_workers=2 * len(plan) + 1) as pool:
        zk_f = {
            host: pool.submit(zk_state, spec, host, spec.zk_host_port(node), timeout)
            for host, node, svcs in plan if "zookeeper" in svcs
        }
        proc_f = {
            host: pool.submit(processes, dc, infos[host].id, svcs)
            for host, _, svcs in plan if dc is not None and host in infos and infos[host].state == "running"
        }
        kafka_f = pool.submit(_kafka_view, spec, max(timeout, 2.0))
        ids, ctrl, urp, kafka_err = kafka_f.result()
        zks = {h: f.result() for h, f in zk_f.items()}
        procs = {h: f.result() for h, f in proc_f.items()}

    nodes: list[NodeState] = []
    for host, node, svcs in plan:
        info = infos.get(host)
        broker = None
        if "kafka" in svcs:
            broker = BrokerState(id=node.id, node=host, registered=node.id in ids, controller=ctrl == node.id,
                                 under_replicated=(urp or {}).get(node.id) if urp is not None else None)
        nodes.append(NodeState(node=host, container=info.state if info else "missing",
                               health=info.health if info else None, processes=procs.get(host, {}),
                               zookeeper=zks.get(host), broker=broker))

    modes = [z.mode for z in zks.values()]
    leaders = [z.node for z in zks.values() if z.mode in ("leader", "standalone")]
    participants = len(spec.participants)
    serving_participants = sum(1 for z in zks.values() if z.mode in ("leader", "follower", "standalone"))
    quorum_ok = len(leaders) == 1 and serving_participants > participants // 2
    expected = len(spec.nodes)
    urp_total = sum(urp.values()) if urp is not None else None

    problems: list[str] = []
    for n in nodes:
        if n.container != "running":
            problems.append(f"{n.node}: container {n.container}")
        for proc, st in n.processes.items():
            if st != "RUNNING":
                problems.append(f"{n.node}: {proc} {st}")
    for z in zks.values():
        if z.mode not in ("leader", "follower", "observer", "standalone"):
            problems.append(f"{z.node}: zookeeper {z.mode}")
    if not quorum_ok:
        problems.append("zookeeper quorum lost")
    if len(ids) < expected:
        problems.append(f"brokers registered {len(ids)}/{expected}" + (f" ({kafka_err})" if kafka_err else ""))
    if ids and ctrl is None:
        problems.append("no controller")
    if urp_total:
        problems.append(f"{urp_total} under-replicated partitions")

    anything = any(m not in ("down",) for m in modes) or bool(ids)
    health = "healthy" if not problems else ("degraded" if anything else "down")
    ordered_hosts = [h for h, _, s in plan if "zookeeper" in s]
    return ClusterStatus(
        cluster=spec.name,
        health=health,
        quorum="ok" if quorum_ok else "lost",
        leader=leaders[0] if len(leaders) == 1 else None,
        brokers_registered=len(ids),
        brokers_expected=expected,
        controller=ctrl,
        under_replicated_partitions=urp_total,
        bootstrap_servers=spec.bootstrap_servers,
        zookeeper_connect=spec.zookeeper_connect_host,
        internal_bootstrap_servers=spec.internal_bootstrap_servers,
        nodes=nodes,
        zookeeper=[{"node": h, "mode": zks[h].mode, "zxid": zks[h].zxid, "outstanding": zks[h].outstanding,
                    "latency_avg_ms": zks[h].latency_avg, "connections": zks[h].connections}
                   for h in ordered_hosts],
        brokers=[{"id": n.broker.id, "node": n.node, "registered": n.broker.registered,
                  "controller": n.broker.controller, "under_replicated": n.broker.under_replicated}
                 for n in nodes if n.broker is not None],
        elapsed_ms=(time.monotonic() - started) * 1000,
        problems=problems,
    )


# ----- up / down --------------------------------------------------------------------


@dataclass(frozen=True)
class PlanItem:
    name: str
    action: str  # create, recreate, start, noop
    reason: str


def convergence_plan(rendered: Rendered, existing: dict[str, compose.ContainerInfo]) -> list[PlanItem]:
    """What `up` will do to each container, decided before touching Docker (compose's convergence plan)."""
    items = []
    for c in rendered.containers:
        info = existing.get(c.name)
        if info is None:
            items.append(PlanItem(c.name, "create", "no container yet"))
        elif info.config_hash != c.config_hash:
            items.append(PlanItem(c.name, "recreate", f"config changed ({info.config_hash} -> {c.config_hash})"))
        elif info.state != "running":
            items.append(PlanItem(c.name, "start", f"container is {info.state}"))
        else:
            items.append(PlanItem(c.name, "noop", "up to date"))
    return items


def preflight_ports(spec: ClusterSpec, existing: dict[str, compose.ContainerInfo]) -> None:
    owned = set(compose.running_host_ports(spec)) if existing else set()
    chk = doctor.check_ports(spec, owned)
    if not chk.ok:
        raise KctlError(f"cannot start {spec.name}: host ports {chk.detail}", hint=chk.hint)


def log_tail(spec: ClusterSpec, name: str, service: str, lines: int = 30) -> str:
    path = contract.container_log("zookeeper" if service == "zookeeper" else "kafka")
    try:
        _, out = compose.exec_in(spec, name, ["tail", "-n", str(lines), path], timeout=5)
    except KctlError as exc:
        return f"({name}: {exc.message})"
    return f"[{name} {path}]\n{out}"


def readiness_stages(spec: ClusterSpec, state_dir: Path) -> list[Stage]:
    from kctl.properties import services_of

    plan = services_of(spec)
    hosts = [h for h, _, _ in plan]
    zk_hosts = [(h, n) for h, n, s in plan if "zookeeper" in s]
    kafka_hosts = [(h, n) for h, n, s in plan if "kafka" in s]

    def containers_running() -> tuple[bool, str]:
        infos = {c.name: c for c in compose.containers(spec)}
        states = {h: (infos[h].state if h in infos else "missing") for h in hosts}
        bad = {h: s for h, s in states.items() if s != "running"}
        return not bad, ", ".join(f"{h}={s}" for h, s in states.items())

    def zk_modes() -> dict[str, str]:
        with cf.ThreadPoolExecutor(max_workers=len(zk_hosts)) as pool:
            futs = {h: pool.submit(zk_state, spec, h, spec.zk_host_port(n), 1.0) for h, n in zk_hosts}
            return {h: f.result().mode for h, f in futs.items()}

    def every_zk_mode() -> tuple[bool, str]:
        modes = zk_modes()
        ok = all(m in ("leader", "follower", "observer", "standalone") for m in modes.values())
        return ok, ", ".join(f"{h}={m}" for h, m in modes.items())

    def one_leader() -> tuple[bool, str]:
        modes = zk_modes()
        leaders = [h for h, m in modes.items() if m in ("leader", "standalone")]
        expected_obs = {spec.zk_host(n) for n in spec.nodes if n.role is ZkRole.observer}
        obs_ok = all(modes.get(h) == "observer" for h in expected_obs)
        return len(leaders) == 1 and obs_ok, ", ".join(f"{h}={m}" for h, m in modes.items())

    def brokers_registered() -> tuple[bool, str]:
        with znodes.connect(spec, timeout=2.0) as zk:
            ids = znodes.registered_brokers(zk)
        want = sorted(n.id for _, n in kafka_hosts)
        return ids == want, f"/brokers/ids = {ids} (want {want})"

    def controller_elected() -> tuple[bool, str]:
        with znodes.connect(spec, timeout=2.0) as zk:
            ctrl = znodes.controller(zk)
        return ctrl is not None, f"/controller = {ctrl}"

    def round_trip() -> tuple[bool, str]:
        from kctl.kafka.client import round_trip as rt

        return rt(spec, timeout=5.0)

    first_zk = zk_hosts[0][0]
    first_kafka = kafka_hosts[0][0]

    def zk_log(_: str) -> str:
        return log_tail(spec, first_zk, "zookeeper")

    def kafka_log(_: str) -> str:
        return log_tail(spec, first_kafka, "kafka")

    def compose_log(_: str) -> str:
        proc = compose.run_compose(spec, state_dir, "ps", "-a", check=False)
        return proc.stdout

    return [
        Stage("containers running", containers_running, compose_log),
        Stage("every ZooKeeper answers srvr with a Mode", every_zk_mode, zk_log),
        Stage("exactly one ZooKeeper leader", one_leader, zk_log),
        Stage("every broker registered under /brokers/ids", brokers_registered, kafka_log),
        Stage("a controller elected", controller_elected, kafka_log),
        Stage("produce/consume round trip on the external listener", round_trip, kafka_log),
    ]


@dataclass
class UpResult:
    plan: list[PlanItem]
    stages: list[StageResult]
    seconds: float
    state_dir: str


def up(
    spec: ClusterSpec,
    state_dir: Path,
    *,
    wait: bool = True,
    timeout: float = 300,
    build: bool = True,
    kafka_dist: Path | None = None,
    progress: Progress | None = None,
    on_stage: Callable[[str, str], None] | None = None,
) -> UpResult:
    """Render, converge with `docker compose up -d`, and wait until verified healthy."""
    say = progress or (lambda _m: None)
    started = time.monotonic()
    rendered = render(spec)  # pure; a template problem fails before anything is touched
    dc = compose.client()
    compose.compose_binary()
    existing = {c.name: c for c in compose.containers(spec, dc)}
    plan = convergence_plan(rendered, existing)
    preflight_ports(spec, existing)

    if build:
        from kctl.runtime.image import ensure_image

        if spec.image is None:
            ensure_image(dc, kafka_version=spec.versions.kafka, scala_version=spec.versions.scala,
                         kafka_dist=kafka_dist, progress=say)
    _require_image(dc, spec.image_ref)

    write(rendered, state_dir)
    for item in plan:
        say(f"{item.name}: {item.action} ({item.reason})")
    if any(i.action != "noop" for i in plan):
        compose.run_compose(spec, state_dir, "up", "-d", "--remove-orphans", "--no-build", "--pull", "never")
    results: list[StageResult] = []
    if wait:
        results = wait_for_stages(readiness_stages(spec, state_dir), timeout=timeout, poll=0.5,
                                  on_progress=on_stage)
    return UpResult(plan, results, time.monotonic() - started, str(state_dir))


def _require_image(dc: Any, ref: str) -> None:
    import docker.errors

    try:
        dc.images.get(ref)
    except docker.errors.ImageNotFound:
        raise KctlError(f"image {ref} is not present",
                        hint="run `kctl image build` (or `kctl up`, which builds it)") from None


def down(spec: ClusterSpec, state_dir: Path, *, volumes: bool = False, progress: Progress | None = None) -> int:
    """Stop Kafka before ZooKeeper on every node, then remove the containers (and data with --volumes)."""
    say = progress or (lambda _m: None)
    dc = compose.client()
    infos = compose.containers(spec, dc)
    # Kafka first everywhere (controlled shutdown while the quorum is still there), then ZooKeeper.
    running = [c for c in infos if c.state == "running"]
    kafka_first = [c for c in running if "kafka" in c.services]
    with cf.ThreadPoolExecutor(max_workers=max(1, len(kafka_first))) as pool:
        list(pool.map(lambda c: _stop_kafka(spec, c, dc, say), kafka_first))
    compose_file = state_dir / "compose.yaml"
    if compose_file.exists():
        args = ["down", "--remove-orphans", "--timeout", "120"]
        if volumes:
            args.append("--volumes")
        compose.run_compose(spec, state_dir, *args, check=False)
    removed = compose.remove_by_label(spec.name, dc, volumes=True)
    if volumes:
        from kctl.render import remove_state

        remove_state(state_dir)
        say(f"removed {state_dir}")
    return len(infos) or removed


def _stop_kafka(spec: ClusterSpec, c: compose.ContainerInfo, dc: Any, say: Progress) -> None:
    say(f"{c.name}: stopping kafka (controlled shutdown)")
    try:
        compose.exec_in(spec, c.name, [*SUPERVISORCTL, "stop", "kafka"],
                        timeout=130, dc=dc)
    except KctlError:
        pass
