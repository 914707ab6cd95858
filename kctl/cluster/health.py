"""Cluster health in one place: gather observations, then assess them with a pure function.

:func:`gather` asks Docker (containers and their process tables, over the
Engine API socket), every ZooKeeper (``srvr`` over a socket) and Kafka (librdkafka:
Metadata and DescribeCluster) in parallel, each bounded by a timeout. :func:`assess` turns
those observations and the spec into a :class:`ClusterStatus` without any I/O,
so tests feed it constructed observations. ``kctl status``, the readiness
stages of ``kctl up`` and the testing API's waits all go through both.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.cluster import identity
from kctl.deferred import defer_import
from kctl.errors import KctlError
from kctl.kafka import describe as kmd
from kctl.kafka.client import round_trip
from kctl.kafka.controllers import ControllerView, controller_leader, controller_view
from kctl.kafka.controllers import problems as controllers_problems
from kctl.kraft import config as kc
from kctl.model.properties import services_of
from kctl.model.spec import ClusterSpec, ZkRole
from kctl.runtime import docker_api
from kctl.runtime.engine import engines
from kctl.security import store
from kctl.wait import POLL_S, Stage, StageResult, wait_for_stages, wait_until
from kctl.zk import fourlw

# `kctl status` observes; the log tails and the root znode's check are `kctl up`'s stages only.
defer_import("kctl.runtime.cluster")
defer_import("kctl.zk.znodes")
defer_import("kctl.stream.spark")  # asked only of a cluster with a Spark cluster: its driver's imports stay out
defer_import("kctl.stream.warm")  # asked only with spark.warm_driver

from kctl.runtime import cluster as rc  # noqa: E402
from kctl.stream import spark as spark_cluster  # noqa: E402
from kctl.stream import warm  # noqa: E402
from kctl.zk import znodes  # noqa: E402

SERVING = ("leader", "follower", "observer", "standalone")
VOTING = ("leader", "follower", "standalone")


# ----- observations ---------------------------------------------------------------


@dataclass
class ZkState:
    node: str
    host_port: int
    mode: str  # leader, follower, observer, standalone, not-serving, unknown, down
    zxid: str | None = None
    outstanding: int | None = None
    latency_avg: float | None = None
    connections: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class ContainerObs:
    name: str
    state: str  # running, exited, paused, restarting, created, dead
    health: str | None  # Docker's healthcheck verdict
    processes: dict[str, str] = field(default_factory=dict)  # read only for running containers
    config_hash: str | None = None
    state_dir: str | None = None  # the state dir it belongs to (its label)


@dataclass
class Observations:
    """What Docker, ZooKeeper (or, on KRaft, the controllers) and Kafka said; ``None`` where that source was not
    asked."""

    containers: dict[str, ContainerObs] | None = None
    docker_error: str | None = None
    zookeeper: dict[str, ZkState] | None = None
    controllers: dict[str, ControllerView] | None = None
    kafka: kmd.Metadata | None = None
    kafka_error: str | None = None
    # Readiness only: every broker's own answer (they agree only once the controller has told each).
    kafka_views: list[kmd.Metadata] | None = None
    # kctl.yaml's Spark cluster, as its master says (kctl.stream.spark.status_at); None when not asked or none.
    spark: dict[str, Any] | None = None
    elapsed_ms: float = 0.0


def zk_state(node_name: str, port: int, timeout: float, address: str = "127.0.0.1") -> ZkState:
    """``srvr`` of one ZooKeeper on its published client port (at ``address``: the node's host on Swarm)."""
    try:
        ans = fourlw.ask(address, port, "srvr", timeout=timeout)
    except fourlw.FourLetterError as exc:
        return ZkState(node_name, port, "down", error=str(exc))
    if not ans.serving:
        return ZkState(node_name, port, "not-serving", error="running but not serving: no quorum")
    s = fourlw.parse_srvr(ans.text)
    if s.mode is None:
        return ZkState(node_name, port, "unknown", error=ans.text.strip()[:200] or "empty answer")
    return ZkState(node_name, port, s.mode, zxid=s.zxid, outstanding=s.outstanding,
                   latency_avg=s.latency_avg, connections=s.connections)


def _docker(spec: ClusterSpec, timeout: float) -> dict[str, ContainerObs]:
    eng = engines.for_spec(spec)
    found = eng.observe(spec, timeout=timeout)
    running = [c for c in found if c.state == "running"]
    with cf.ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
        procs = dict(zip([c.name for c in running],
                         pool.map(lambda c: eng.processes(c, timeout), running), strict=True))
    return {c.name: ContainerObs(c.name, c.state, c.health, procs.get(c.name, {}), c.config_hash, c.state_dir)
            for c in found}


def gather(spec: ClusterSpec, timeout: float = 1.5, *, docker: bool = True, zookeeper: bool = True,
           kafka: bool = True, every_broker: bool = False, spark: bool = False) -> Observations:
    """Ask every source in parallel; each answer is bounded by ``timeout`` (a dead node never hangs this).

    Kafka: the first broker to answer (:func:`kctl.kafka.describe.fetch_any`), or with ``every_broker``
    each broker's own view. ``zookeeper``: the metadata quorum, which on a cluster on KRaft is its controllers.
    """
    started = time.monotonic()
    obs = Observations()
    auth: dict[str, str] = {}
    if kafka and spec.security.enabled:
        try:
            auth = store.client_settings(spec, own=True)
        except KctlError as exc:
            obs.kafka_error, kafka = exc.message, False
    zk_nodes = [(h, spec.zk_host_port(n), spec.node_address(n)) for h, n, s in services_of(spec) if "zookeeper" in s]
    ctrl_nodes: list[tuple[str, int]] = []
    if spec.on_kraft:
        zk_nodes, ctrl_nodes = [], [(spec.zk_host(n), kc.controller_id(n)) for n in kc.controller_nodes(spec)]
    if docker or (ctrl_nodes and zookeeper):
        docker_api.sdk()  # imported here, before the threads that use it (see docker_api.sdk)
    with cf.ThreadPoolExecutor(max_workers=len(zk_nodes) + len(ctrl_nodes) + 2) as pool:
        docker_f = pool.submit(_docker, spec, max(timeout, 3.0)) if docker else None
        kafka_f = pool.submit(kmd.fetch_any, spec.bootstrap_servers, max(timeout, 2.0), auth) \
            if kafka and not every_broker else None
        views_f = pool.submit(kmd.fetch_each, spec.bootstrap_servers, max(timeout, 2.0), auth) \
            if kafka and every_broker else None
        zk_f = {h: pool.submit(zk_state, h, port, timeout, addr) for h, port, addr in zk_nodes} if zookeeper else {}
        ctrl_f = {h: pool.submit(controller_view, spec, h, cid, timeout) for h, cid in ctrl_nodes} \
            if zookeeper else {}
        spark_f = pool.submit(spark_cluster.status_of, spec, max(timeout, 5.0)) \
            if spark and spec.spark is not None else None
        if docker_f is not None:
            try:
                obs.containers = docker_f.result()
            except KctlError as exc:
                obs.docker_error = exc.message
        if kafka_f is not None:
            try:
                obs.kafka = kafka_f.result()
            except kmd.MetadataError as exc:
                obs.kafka_error = str(exc)
        if views_f is not None:
            views, errors = views_f.result()
            obs.kafka_views = views
            obs.kafka = views[0] if views else None
            obs.kafka_error = "; ".join(errors) or None
        if zookeeper and spec.on_kraft:
            obs.controllers = {h: f.result() for h, f in ctrl_f.items()}
        elif zookeeper:
            obs.zookeeper = {h: f.result() for h, f in zk_f.items()}
        if spark_f is not None:
            obs.spark = spark_f.result()
    obs.elapsed_ms = (time.monotonic() - started) * 1000
    return obs


# ----- assessment -------------------------------------------------------------------


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
    container: str  # running, exited, paused, missing, unknown (Docker did not answer)
    health: str | None
    processes: dict[str, str]  # zookeeper/kafka/controller -> RUNNING, STOPPED, FAILED, WAITING-FOR-QUORUM, RETIRED
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
    offline_partitions: int | None = None
    registered_ids: list[int] = field(default_factory=list)
    running: bool | None = None  # any of its containers running (None: Docker not asked)
    # Every exporter (monitoring.enabled): {node, service, url}, what Prometheus or `kctl metrics` scrapes.
    metrics_endpoints: list[dict[str, Any]] = field(default_factory=list)
    metadata: str = "zookeeper"  # where the cluster's metadata lives
    # the phase of a migration to KRaft (the state dir's record: the one reached, or the one a step under way is
    # moving to), None when there is none (`kctl migrate kraft status`)
    kraft_migration: str | None = None
    # On KRaft: each controller's view of the quorum {node, id, leader, epoch, error}.
    controllers: list[dict[str, Any]] = field(default_factory=list)
    # kctl.yaml's Spark cluster (its `spark` section): {master, ui, status, workers: [{name, state, ui, ...}]}
    spark: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return {"healthy": 0, "degraded": 1}.get(self.health, 2)


def quorum_ok(spec: ClusterSpec, zks: dict[str, ZkState]) -> bool:
    """Exactly one leader and a majority of the participants serving."""
    leaders = [z for z in zks.values() if z.mode in ("leader", "standalone")]
    voting = sum(1 for z in zks.values() if z.mode in VOTING)
    return len(leaders) == 1 and voting > len(spec.participants) // 2


def process_problems(spec: ClusterSpec, host: str, procs: dict[str, str]) -> list[str]:
    """The processes of a running container ``host`` that are not as the cluster's metadata mode wants them:
    every one RUNNING; on KRaft, ZooKeeper RETIRED and each controller node's controller RUNNING. Pure."""
    def said(proc: str, st: str) -> str:
        if st == "FAILED":  # kctl.runtime.docker_api.GAVE_UP
            return (f"{proc} FAILED: its supervisor gave up restarting it (see `kctl logs {host} --service {proc}`;"
                    f" `kctl up` starts it again)")
        if st == "UNFORMATTED":  # the image's `unformatted`
            return (f"{proc} UNFORMATTED: its KRaft storage is empty and kctl did not make it (a lost, wiped or"
                    f" unmounted disk?), so it is not formatted: mount or restore the disk, or `kctl node"
                    f" format-storage {host} --service {proc}` (docs/runbooks/replace-failed-node.md, \"KRaft"
                    f" storage\")")
        return f"{proc} {st}"


    if not spec.on_kraft:
        # a node's controller runs only in a migration's phases, and only on the controller nodes
        wants_controller = (spec.kraft_phase != "zookeeper"
                            and host in {spec.zk_host(n) for n in kc.controller_nodes(spec)})
        return [said(proc, st) for proc, st in procs.items()
                if st != "RUNNING" and (proc != "controller" or wants_controller)]

    out = [said(proc, st) for proc, st in procs.items() if st != ("RETIRED" if proc == "zookeeper" else "RUNNING")]
    if procs and "controller" not in procs and host in {spec.zk_host(n) for n in kc.controller_nodes(spec)}:
        out.append("controller STOPPED")
    return out


def away_nodes(spec: ClusterSpec, obs: Observations) -> set[str]:
    """Hosts of the nodes that are not all there: container not running, a process not running, ZooKeeper
    not serving, or broker not registered (only the sources that were asked count). Pure."""
    ids = set(obs.kafka.brokers) if obs.kafka else set()
    zks = obs.zookeeper or {}
    away: set[str] = set()
    kafka_asked = obs.kafka is not None or obs.kafka_error is not None
    for host, node, svcs in services_of(spec):
        c = obs.containers.get(host) if obs.containers is not None else None
        container_down = obs.containers is not None and (c is None or c.state != "running")
        process_down = c is not None and bool(process_problems(spec, host, c.processes))
        zk_down = host in zks and zks[host].mode not in SERVING
        zk_down = zk_down or (obs.controllers is not None and host in obs.controllers
                              and obs.controllers[host].error is not None)
        broker_gone = "kafka" in svcs and kafka_asked and node.id not in ids
        if container_down or process_down or zk_down or broker_gone:
            away.add(host)
    return away


def assess(spec: ClusterSpec, obs: Observations, allow_missing: int = 0) -> ClusterStatus:
    """Observations + spec -> status; pure (no I/O, no clock). The one definition of "healthy": no problems.

    ``allow_missing``: up to that many nodes may be away (a node killed on purpose, a broker restarting)
    without it being a problem: their container, processes, ZooKeeper and broker, and the partitions
    under-replicated only for want of their brokers. The quorum, a controller and a leader for every
    partition are still required.
    """
    plan = services_of(spec)
    zks = obs.zookeeper or {}
    md = obs.kafka
    ids = list(md.brokers) if md else []
    ctrl = md.controller if md else None
    away = away_nodes(spec, obs)
    excused = away if 0 < len(away) <= allow_missing else set()
    excused_ids = {n.id for h, n, s in plan if h in excused and "kafka" in s}
    urp: dict[int, int] | None = None
    offline: int | None = None
    urp_total: int | None = None
    urp_excused = 0
    if md is not None:
        urp = {i: 0 for i in ids}
        offline = urp_total = 0
        for p in md.partitions:
            if p.under_replicated:
                urp_total += 1
                if p.leader >= 0:
                    urp[p.leader] = urp.get(p.leader, 0) + 1
                if set(p.replicas) - set(p.isr) <= excused_ids:
                    urp_excused += 1
            if p.leader < 0:
                offline += 1

    problems: list[str] = []
    if obs.docker_error:
        problems.append(f"docker: {obs.docker_error}")
    nodes: list[NodeState] = []
    for host, node, svcs in plan:
        c = obs.containers.get(host) if obs.containers is not None else None
        state = c.state if c else ("missing" if obs.containers is not None else "unknown")
        broker = None
        if "kafka" in svcs:
            broker = BrokerState(id=node.id, node=host, registered=node.id in ids, controller=ctrl == node.id,
                                 under_replicated=urp.get(node.id) if urp is not None else None)
        procs = dict(c.processes) if c else {}
        nodes.append(NodeState(node=host, container=state, health=c.health if c else None, processes=procs,
                               zookeeper=zks.get(host), broker=broker))
        if host in excused:
            continue
        if obs.containers is not None and state != "running":
            problems.append(f"{host}: container {state}")
        if c is not None and state == "running":
            problems += [f"{host}: {p}" for p in process_problems(spec, host, procs)]
        # Docker's healthcheck verdict (NodeState.health) is shown, not judged: it checks what the probes here
        # check, every 30 s, and stays "unhealthy" until its next pass after a fault has healed.

    observers = {spec.zk_host(n) for n in spec.nodes if n.role is ZkRole.observer}
    for host, z in zks.items():
        if host in excused:
            continue
        if z.mode not in SERVING:
            problems.append(f"{host}: zookeeper {z.mode}")
        elif host in observers and z.mode != "observer":
            problems.append(f"{host}: zookeeper is {z.mode}, the spec makes it an observer")
    q_ok = quorum_ok(spec, zks) if obs.zookeeper is not None else False
    if obs.zookeeper is not None and not q_ok:
        problems.append("zookeeper quorum lost")
    views = obs.controllers or {}
    ctrl_leader = controller_leader(spec, views, obs.containers) if obs.controllers is not None else None
    if obs.controllers is not None:
        q_ok = ctrl_leader is not None
        problems += controllers_problems(spec, views, ctrl_leader, excused)
    expected = len(spec.brokers)  # a ZooKeeper-only node (`broker: false`) has none
    if obs.kafka is None and obs.kafka_error is None:
        pass  # Kafka was not asked
    elif len(ids) < expected - len(excused_ids & {n.id for n in spec.brokers}):
        why = f" ({obs.kafka_error})" if obs.kafka_error else ""
        missing = sorted({n.id for n in spec.brokers} - set(ids))
        problems.append(f"brokers registered {len(ids)}/{expected}" + (f", missing {missing}" if md else "") + why)
    if ids and ctrl is None:
        problems.append("no controller")
    if offline:
        problems.append(f"{offline} partitions without a leader")
    if urp_total and urp_total > urp_excused:
        problems.append(f"{urp_total} under-replicated partitions"
                        + (f" ({urp_excused} only for want of {sorted(excused)})" if urp_excused else ""))
    if obs.spark is not None and spec.spark is not None:  # the job's executors run on its workers
        problems += spark_cluster.problems(spec, obs.spark)

    anything = any(z.mode in SERVING for z in zks.values()) or bool(ids) or ctrl_leader is not None
    health = "healthy" if not problems else ("degraded" if anything else "down")
    leaders = [h for h, z in zks.items() if z.mode in ("leader", "standalone")]
    leaders += [v.node for v in views.values() if v.id == ctrl_leader]
    zk_hosts = [h for h, _, s in plan if "zookeeper" in s and h in zks]
    return ClusterStatus(
        cluster=spec.name,
        health=health,
        quorum="ok" if q_ok else "lost",
        leader=leaders[0] if len(leaders) == 1 else None,
        brokers_registered=len(ids),
        brokers_expected=expected,
        controller=ctrl_leader if spec.on_kraft else ctrl,  # on KRaft a broker names a random broker
        under_replicated_partitions=urp_total,
        bootstrap_servers=spec.bootstrap_servers,
        zookeeper_connect=spec.zookeeper_connect_host,
        internal_bootstrap_servers=spec.internal_bootstrap_servers,
        nodes=nodes,
        zookeeper=[{"node": h, "mode": zks[h].mode, "zxid": zks[h].zxid, "outstanding": zks[h].outstanding,
                    "latency_avg_ms": zks[h].latency_avg, "connections": zks[h].connections}
                   for h in zk_hosts],
        brokers=[{"id": n.broker.id, "node": n.node, "registered": n.broker.registered,
                  "controller": n.broker.controller, "under_replicated": n.broker.under_replicated}
                 for n in nodes if n.broker is not None],
        elapsed_ms=obs.elapsed_ms,
        problems=problems,
        offline_partitions=offline,
        registered_ids=ids,
        metrics_endpoints=[{"node": n.hostname, "service": svc, "url": url}
                           for n, svc, url in spec.metrics_endpoints()],
        metadata="kraft" if spec.on_kraft else "zookeeper",
        kraft_migration=spec.kraft_phase if spec.kraft_phase != "zookeeper" else None,
        controllers=[{"node": v.node, "id": v.id, "leader": v.leader, "epoch": v.epoch, "error": v.error}
                     for v in views.values()],
        spark=obs.spark,
    )


def status(spec: ClusterSpec, state_dir: Path | None = None, timeout: float = 1.5) -> ClusterStatus:
    """Every node queried in parallel with bounded timeouts, assessed.

    With ``state_dir``, the observations must be this cluster's own (no extra round trip:
    the containers' state dir labels and the cluster id of the Metadata answer already
    came back): a KctlError (exit 2) when its containers, or what answers on its ports while
    none of its containers runs, or the Kafka answering there, belong to another cluster.
    """
    obs = gather(spec, timeout, spark=True)
    if state_dir is not None:
        check_identity(spec, state_dir, obs)
    st = assess(spec, obs)
    if obs.containers is not None:
        st.running = any(c.state == "running" for c in obs.containers.values())
    if state_dir is not None and st.health != "healthy":
        st.problems += interrupted_roll(state_dir, obs)
    if state_dir is not None and st.spark is not None and spec.spark is not None and spec.spark.warm_driver:
        st.spark = {**st.spark, "warm_drivers": warm.describe(spec, state_dir)}
    return st


def interrupted_roll(state_dir: Path, obs: Observations) -> list[str]:
    """The services an interrupted roll recorded as down (kctl.roll.run's record) that still do not run, as one
    problem saying what to run; [] without such a record."""
    import json

    try:
        rec = json.loads((state_dir / contract.ROLL_RECORD_FILE).read_text())
        down = [(str(h), str(s)) for h, s in rec.get("down", [])]
    except FileNotFoundError:
        return []
    except (ValueError, TypeError, AttributeError):
        return [f"{contract.ROLL_RECORD_FILE} in {state_dir} cannot be read: an interrupted roll may have left"
                " services stopped; `kctl restart --rolling` names them"]
    still = [(h, s) for h, s in down
             if obs.containers is None or h not in obs.containers
             or obs.containers[h].processes.get(s) != "RUNNING"]
    if not still:
        return []
    who = " ".join(str(x) for x in (f"`{rec.get('argv')}`" if rec.get("argv") else rec.get("command"),
                                    f"pid {rec['pid']}" if rec.get("pid") else None) if x)
    return [f"an interrupted roll ({who or 'an earlier roll'}) left {', '.join(f'{h} {s}' for h, s in still)}"
            " stopped: `kctl restart --rolling` (or `kctl apply`) starts it first and finishes the roll"]


def check_identity(spec: ClusterSpec, state_dir: Path, obs: Observations) -> None:
    if obs.containers is None:
        return  # Docker did not answer: the status itself says so
    identity.check_state_dirs(spec, state_dir, [(c.name, c.state_dir) for c in obs.containers.values()])
    md = obs.kafka
    zk_answered = any(z.mode != "down" for z in (obs.zookeeper or {}).values())
    if not any(c.state == "running" for c in obs.containers.values()):
        if md is not None or zk_answered:  # another cluster answers on its ports: show nothing of it
            raise identity.not_running(spec, state_dir, md, answered=True)
        return  # nothing answers: the report itself says down (exit 2), and that no container runs
    recorded = identity.read(state_dir)
    expected = spec.cluster_id or (recorded.cluster_id if recorded else None)
    if md is not None and md.cluster_id:
        if expected and expected != md.cluster_id:
            raise identity.mismatch(spec, state_dir, expected, md)
        if recorded is None or not recorded.cluster_id:
            identity.record(spec, state_dir, md.cluster_id)


# ----- readiness: the stages of `kctl up`, and the testing API's waits -------------------


def _modes(zks: dict[str, ZkState]) -> str:
    return ", ".join(f"{h}={z.mode}" for h, z in zks.items())


def check_containers(spec: ClusterSpec, obs: Observations) -> tuple[bool, str]:
    if obs.containers is None:
        return False, obs.docker_error or "Docker not asked"
    states = {h: (obs.containers[h].state if h in obs.containers else "missing") for h, _, _ in services_of(spec)}
    return all(s == "running" for s in states.values()), ", ".join(f"{h}={s}" for h, s in states.items())


def _controllers_saw(obs: Observations) -> str:
    return ", ".join(f"{h}: " + (v.error or f"leader {v.leader} (epoch {v.epoch})")
                     for h, v in (obs.controllers or {}).items()) or "no controller asked"


def check_zk_modes(spec: ClusterSpec, obs: Observations) -> tuple[bool, str]:
    """Every ZooKeeper serves; on KRaft, every controller follows a leader."""
    if spec.on_kraft:
        views = obs.controllers or {}
        return bool(views) and all(v.error is None for v in views.values()), _controllers_saw(obs)
    zks = obs.zookeeper or {}
    return bool(zks) and all(z.mode in SERVING for z in zks.values()), _modes(zks)


def check_one_leader(spec: ClusterSpec, obs: Observations) -> tuple[bool, str]:
    if spec.on_kraft:
        return check_quorum(spec, obs)
    zks = obs.zookeeper or {}
    leaders = [h for h, z in zks.items() if z.mode in ("leader", "standalone")]
    observers = {spec.zk_host(n) for n in spec.nodes if n.role is ZkRole.observer}
    obs_ok = all(zks[h].mode == "observer" for h in observers if h in zks)
    return len(leaders) == 1 and obs_ok, _modes(zks)


def check_quorum(spec: ClusterSpec, obs: Observations) -> tuple[bool, str]:
    """The metadata quorum: ZooKeeper's, or on KRaft the controllers' (a leader that a majority follows)."""
    if spec.on_kraft:
        leader = controller_leader(spec, obs.controllers or {}, obs.containers)
        return leader is not None, f"controller quorum: leader {leader}; {_controllers_saw(obs)}"
    zks = obs.zookeeper or {}
    return quorum_ok(spec, zks), f"zookeeper modes: {_modes(zks)}"


def _views(obs: Observations) -> list[kmd.Metadata]:
    return obs.kafka_views if obs.kafka_views is not None else ([obs.kafka] if obs.kafka else [])


def check_brokers(spec: ClusterSpec, obs: Observations, allow_missing: int = 0) -> tuple[bool, str]:
    """Enough live brokers, in the view of every broker that answered (not just the first one)."""
    views = _views(obs)
    if not views:
        return False, obs.kafka_error or "Kafka not asked"
    want = sorted({n.id for n in spec.brokers})
    seen = {v.brokers for v in views}
    have = sorted(set.intersection(*(set(v.brokers) for v in views)))
    ok = len(seen) == 1 and set(have) <= set(want) and len(have) >= len(want) - allow_missing
    saw = f"live brokers {have} (want {want})"
    if len(seen) > 1:
        saw += "; brokers disagree: " + ", ".join(f"{v.answered_by or '?'} sees {list(v.brokers)}" for v in views)
    return ok, saw


def check_controller(spec: ClusterSpec, obs: Observations) -> tuple[bool, str]:
    views = _views(obs)
    if not views:
        return False, obs.kafka_error or "Kafka not asked"
    if spec.on_kraft:
        # A KRaft broker names a random live broker as the "controller" (KIP-590: clients cannot reach the
        # controllers), so the brokers need not agree; the active controller is check_quorum's question.
        named = {v.answered_by or "?": v.controller for v in views}
        ok = all(v.controller is not None and v.controller in v.brokers for v in views)
        return ok, "brokers name a live broker (KRaft: the quorum's leader is the controller): " + ", ".join(
            f"{b} -> {c}" for b, c in named.items())
    ctrls = {v.controller for v in views}
    ctrl = views[0].controller
    ok = len(ctrls) == 1 and ctrl is not None and all(ctrl in v.brokers for v in views)
    return ok, f"controller {ctrl}" + (f" (brokers disagree: {sorted(map(str, ctrls))})" if len(ctrls) > 1 else "")


def check_leaders(spec: ClusterSpec, obs: Observations) -> tuple[bool, str]:
    if obs.kafka is None:
        return False, obs.kafka_error or "Kafka not asked"
    offline = [f"{p.topic}-{p.partition}" for p in obs.kafka.partitions if p.leader < 0]
    return not offline, f"partitions without a leader: {offline[:10]}" if offline else "every partition has a leader"


def check_replicated(spec: ClusterSpec, obs: Observations) -> tuple[bool, str]:
    """No under-replicated and no leaderless partition, in the view of every broker that answered."""
    views = _views(obs)
    if not views or (obs.kafka_views is not None and obs.kafka_error):
        return False, obs.kafka_error or "Kafka not asked"  # a broker that did not answer may lag behind
    urp = max(sum(1 for p in v.partitions if p.under_replicated) for v in views)
    offline = max(sum(1 for p in v.partitions if p.leader < 0) for v in views)
    return urp == 0 and offline == 0, f"URP {urp}, offline {offline} (every broker's view)"


def check_healthy(spec: ClusterSpec, obs: Observations, allow_missing: int = 0) -> tuple[bool, str]:
    """Healthy as :func:`assess` judges it (the one definition), and what stands in the way."""
    st = assess(spec, obs, allow_missing)
    if st.health == "healthy":
        return True, (f"healthy: quorum {st.quorum}, leader {st.leader}, brokers {st.brokers_registered}/"
                      f"{st.brokers_expected}, controller {st.controller}")
    return False, f"{st.health}: {'; '.join(st.problems)}"


Check = Callable[[ClusterSpec, Observations], tuple[bool, str]]


def probe(spec: ClusterSpec, check: Check, *, docker: bool = False, zookeeper: bool = False,
          kafka: bool = False, timeout: float = 1.0) -> Callable[[], tuple[bool, str]]:
    """A readiness probe: gather only the sources ``check`` reads (Kafka: every broker's view), then assess."""
    def run() -> tuple[bool, str]:
        return check(spec, gather(spec, timeout, docker=docker, zookeeper=zookeeper, kafka=kafka,
                                  every_broker=kafka))
    return run


def healthy(spec: ClusterSpec, *, docker: bool = True, allow_missing: int = 0,
            timeout: float = 1.5) -> Callable[[], tuple[bool, str]]:
    """A probe of :func:`check_healthy`: every source asked (``docker=False``: Docker aside, as the roll's and
    the node changes' gates, which also run where the containers are on other hosts)."""
    def run() -> tuple[bool, str]:
        return check_healthy(spec, gather(spec, timeout, docker=docker), allow_missing)
    return run


def zk_serving(spec: ClusterSpec, ref: int | str) -> Callable[[], tuple[bool, str]]:
    """A probe: the ZooKeeper of node ``ref`` (id or host) serves (leader, follower, observer or standalone)."""
    node = spec.node(ref)
    host = spec.zk_host(node)

    def run() -> tuple[bool, str]:
        z = zk_state(host, spec.zk_host_port(node), 1.0, spec.node_address(node))
        return z.mode in SERVING, f"{host} mode {z.mode}" + (f" ({z.error})" if z.error else "")
    return run


def broker_registered(spec: ClusterSpec, broker: int, want: bool = True) -> Callable[[], tuple[bool, str]]:
    """A probe: broker ``broker`` is registered (``want=False``: it is not), in Kafka's own metadata."""
    def run() -> tuple[bool, str]:
        obs = gather(spec, 1.5, docker=False, zookeeper=False)
        if obs.kafka is None:
            return False, obs.kafka_error or "no broker answered"
        ids = sorted(obs.kafka.brokers)
        return (broker in ids) == want, f"registered brokers {ids}"
    return run


def _round_trip(spec: ClusterSpec) -> Callable[[], tuple[bool, str]]:
    def run() -> tuple[bool, str]:
        return round_trip(spec, timeout=5.0)
    return run


def readiness_stages(spec: ClusterSpec, state_dir: Path | None = None, *, round_trip: bool = True) -> list[Stage]:
    """The stages `kctl up` waits through, in order; a timeout shows the relevant log tail."""
    plan = services_of(spec)
    first_zk = next(h for h, _, s in plan if "zookeeper" in s)
    first_kafka = next(h for h, _, s in plan if "kafka" in s)

    def zk_log(_: str) -> str:
        return rc.log_tail(spec, first_zk, "controller" if spec.on_kraft else "zookeeper")

    def kafka_log(_: str) -> str:
        return rc.log_tail(spec, first_kafka, "kafka")

    def compose_log(_: str) -> str:
        return rc.compose_ps(spec, state_dir) if state_dir is not None else ""

    metadata = [
        Stage("every ZooKeeper answers srvr with a Mode", probe(spec, check_zk_modes, zookeeper=True), zk_log),
        Stage("exactly one ZooKeeper leader", probe(spec, check_one_leader, zookeeper=True), zk_log),
    ]
    if spec.on_kraft:
        metadata = [Stage("every KRaft controller follows a leader", probe(spec, check_zk_modes, zookeeper=True),
                          zk_log),
                    Stage("the KRaft controller quorum has a leader", probe(spec, check_quorum, zookeeper=True,
                                                                            docker=True), zk_log)]
    stages = [
        Stage("containers running", probe(spec, check_containers, docker=True), compose_log),
        *metadata,
        Stage("every broker registered", probe(spec, check_brokers, kafka=True, timeout=2.0), kafka_log),
        Stage("a controller elected", probe(spec, check_controller, kafka=True, timeout=2.0), kafka_log),
    ]
    stages += secure_root_stages(spec, zk_log)
    if round_trip:
        stages.append(Stage("produce/consume round trip on the external listener", _round_trip(spec), kafka_log))
    return stages


def secure_root_stages(spec: ClusterSpec, log: Callable[[str], str] | None = None) -> list[Stage]:
    """A secured cluster with znode ACLs: the stage that gives "/" Kafka's secure ACL (kctl.zk.znodes)."""
    sec = spec.security
    if spec.on_kraft or not (sec.zookeeper.sasl and sec.zookeeper.set_acl and spec.security_phase >= 3):
        return []
    return [Stage("root znode writable by the brokers only", _secure_root(spec), log)]


def _secure_root(spec: ClusterSpec) -> Callable[[], tuple[bool, str]]:
    def run() -> tuple[bool, str]:
        try:
            return znodes.secure_root(spec)
        except Exception as exc:  # noqa: BLE001 - kazoo's errors: the stage retries until its deadline
            return False, f"{type(exc).__name__}: {exc}"
    return run


def healthy_stages(spec: ClusterSpec, allow_missing: int = 0, round_trip: bool = False) -> list[Stage]:
    """The way to healthy: quorum, brokers (all but ``allow_missing``, every broker agreeing) with a
    controller, a leader for every partition, then healthy as :func:`assess` judges it with ``allow_missing``
    (Docker aside: ``kctl status`` adds the containers' and processes' view)."""
    def brokers(s: ClusterSpec, o: Observations) -> tuple[bool, str]:
        ok_b, saw_b = check_brokers(s, o, allow_missing)
        ok_c, saw_c = check_controller(s, o)
        return ok_b and ok_c, f"{saw_b}, {saw_c}"

    stages = [
        Stage("KRaft controller quorum" if spec.on_kraft else "zookeeper quorum",
              probe(spec, check_quorum, zookeeper=True)),
        Stage("brokers registered and a controller", probe(spec, brokers, kafka=True, timeout=2.0)),
        Stage("every partition has a leader", probe(spec, check_leaders, kafka=True, timeout=2.0)),
        Stage("healthy" + (f" but for up to {allow_missing} node(s)" if allow_missing else ""),
              healthy(spec, docker=False, allow_missing=allow_missing)),
    ]
    if round_trip:
        stages.append(Stage("produce/consume round trip", _round_trip(spec)))
    return stages


def wait_until_healthy(spec: ClusterSpec, timeout: float = 120, allow_missing: int = 0,
                       round_trip: bool = False) -> list[StageResult]:
    """Through :func:`healthy_stages`; TimeoutReached with the stage it stopped at and what it last saw."""
    return wait_for_stages(healthy_stages(spec, allow_missing, round_trip), timeout=timeout, poll=POLL_S)


def wait_for(spec: ClusterSpec, condition: Callable[[ClusterStatus], bool], timeout: float = 60,
             description: str = "condition") -> ClusterStatus:
    """Poll the status until ``condition(status)`` holds; returns that status."""
    last: list[ClusterStatus] = []

    def run() -> tuple[bool, str]:
        st = status(spec)
        last[:] = [st]
        return condition(st), f"{st.health}: {'; '.join(st.problems) or 'no problems'}"

    wait_until(description, run, timeout, poll=0.5)
    return last[0]
