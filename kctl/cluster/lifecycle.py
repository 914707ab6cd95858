"""A cluster's lifecycle, in one place: :func:`converge`, :func:`up` and :func:`down`.

``kctl up``/``kctl down``, the node changes (``kctl node add/remove``) and the testing
API (:class:`kctl.testing.KafkaCluster`) all bring containers up and down through here:

- :func:`converge` renders the state dir, decides what to do to each container before
  touching Docker (the pure :func:`kctl.runtime.cluster.convergence_plan`), builds the
  node image when needed, writes the files and secrets, and deploys through the
  cluster's engine (:func:`kctl.runtime.engine.engines.for_spec`);
- :func:`up` converges, then waits through the readiness stages of
  :func:`kctl.cluster.health.readiness_stages`, and records the cluster id the brokers report
  (:func:`kctl.cluster.identity.record`);
- :func:`down` stops Kafka before ZooKeeper on every node (controlled shutdowns while the
  quorum still stands) and removes the containers; ``graceful=False`` removes them at once
  (a throw-away test cluster).

Waiting and judging health are :mod:`kctl.cluster.health`'s; Docker is :mod:`kctl.runtime`'s.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl import contract
from kctl.cluster import features, health, identity
from kctl.errors import KctlError
from kctl.kafka import describe as kmd
from kctl.kraft import config as kc
from kctl.kraft import phases
from kctl.kraft import phases as ph
from kctl.mirror import stack as mirrors
from kctl.model.render import remove_state, render, write
from kctl.model.spec import ClusterSpec
from kctl.monitor import prometheus
from kctl.runtime import cluster as rc
from kctl.runtime.cluster import PlanItem
from kctl.runtime.docker_api import NOT_RUNNING
from kctl.runtime.engine import engines, services
from kctl.runtime.image.build import ensure_image
from kctl.security import store
from kctl.stream import spark, warm
from kctl.wait import POLL_S, StageResult, wait_for_stages

if TYPE_CHECKING:
    from kctl.runtime.docker_api import ContainerInfo

Progress = Callable[[str], None]


@dataclass
class UpResult:
    plan: list[PlanItem]
    stages: list[StageResult]
    seconds: float
    state_dir: str
    started: list[str] = field(default_factory=list)  # host/service of each process `up` started again
    restarted: list[str] = field(default_factory=list)  # host/service of each step of the roll after (kctl.roll.up)


def converge(
    spec: ClusterSpec,
    state_dir: Path,
    *,
    build: bool = True,
    kafka_dist: Path | None = None,
    progress: Progress | None = None,
    strict_spread: bool = False,
) -> UpResult:
    """Render and converge (`docker compose up -d`, or `docker stack deploy`), without waiting for health."""
    say = progress or (lambda _m: None)
    started = time.monotonic()

    if spec.on_kraft and spec.kraft_cluster_id is None:  # made on KRaft (metadata: kraft), first `kctl up`

        record = phases.made_on_kraft(state_dir, spec.versions.kafka)
        spec = spec.with_kraft(record.phase.value, record.cluster_id)
        say(f"metadata: kraft: cluster id {record.cluster_id} (the controllers and brokers format with it)")

    rendered = render(spec, state_dir)  # pure; a template problem fails before anything is touched
    eng = engines.for_spec(spec)
    dc = eng.client()
    existing = {c.name: c for c in eng.containers(spec, dc)}
    plan = rc.convergence_plan(rendered, existing, rc.applied_hashes(state_dir))
    eng.preflight(spec, existing, dc, say, strict_spread)

    if eng.uses_image:
        if build and spec.image.ref is None:
            ensure_image(dc, kafka_version=spec.versions.kafka, scala_version=spec.versions.scala,
                         kafka_dist=kafka_dist, progress=say)
        rc.require_image(dc, spec.local_image_ref)
    if spec.spark is not None:  # the job's driver mounts this machine's files: refused before anything is deployed
        spark.check_engine_sees(spec, state_dir, spark.ensure_image(spec, say))

    write(rendered, state_dir)

    made = store.ensure(spec, state_dir)  # secured clusters: CA, certificates, passwords, JAAS files
    if made:
        say(f"secrets: {len(made)} file(s) written in {store.secrets_dir(state_dir)} (mode 0600)")
    for item in plan:
        say(f"{item.name}: {item.action} ({item.reason})")
    todo = [i.name for i in plan if i.action != "noop"]
    if todo:
        # Only the containers the plan names: compose would otherwise also make again a container whose
        # compose definition changed under it (a node change rewrites every node's ensemble and labels,
        # and records the untouched ones as up to date: see kctl.runtime.cluster.carry_applied).
        eng.deploy(spec, state_dir, say, todo)
    result = UpResult(plan, [], time.monotonic() - started, str(state_dir))
    result.started = start_stopped_processes(spec, eng, skip=set(todo), say=say)
    return result


def start_stopped_processes(spec: ClusterSpec, eng: engines.Engine, *, skip: set[str],
                            say: Progress) -> list[str]:
    """``kctl up`` converges processes too: a running container whose ZooKeeper or Kafka is down (FAILED: its
    supervisor gave up on a crash loop; STOPPED: someone stopped it) gets that process started again, ZooKeeper
    first; the readiness stages that follow wait for it. Returns ``host/service`` of each start."""
    controllers: set[str] = set()
    if spec.on_kraft:  # a controller that is not running shows as no entry (kctl.runtime.docker_api)

        controllers = {spec.zk_host(n) for n in kc.controller_nodes(spec)}
    started: list[str] = []
    for c in eng.observe(spec):
        if c.name in skip or c.state != "running" or c.remote:
            continue
        procs = eng.processes(c)
        if procs and c.name in controllers and "controller" not in procs:
            procs["controller"] = "STOPPED"
        for svc in ("controller", *contract.SERVICES):  # the controller (KRaft) or ZooKeeper first, then Kafka
            if procs.get(svc) in NOT_RUNNING:
                where = "in its running container" if eng.uses_image else "on its host"
                say(f"{c.name}: {svc} is not running {where}; starting it")
                services.start(spec, c.name, svc)
                started.append(f"{c.name}/{svc}")
    return started


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
    strict_spread: bool = False,
) -> UpResult:
    """Converge, then wait through the readiness stages until verified healthy, and record the cluster's id.

    TimeoutReached (with what the stage last saw and the relevant log tail) when ``timeout`` passes first.
    """
    started = time.monotonic()
    if spec.spark is not None:  # refused before anything starts: the workers' memory, the driver's Python
        spark.check_fits(spec)
        spark.check_python()
    result = converge(spec, state_dir, build=build, kafka_dist=kafka_dist, progress=progress,
                      strict_spread=strict_spread)
    if wait:
        # Last, healthy as `kctl status` judges it (the one definition): after a start on kept data, or a
        # process started again, replicas that were behind are in sync before `up` says the cluster is healthy.
        stages = [*health.readiness_stages(spec, state_dir), *health.healthy_stages(spec)[-1:]]
        result.stages = wait_for_stages(stages, timeout=timeout, poll=POLL_S, on_progress=on_stage)
        _record_identity(spec, state_dir)
        _raise_owed_metadata_version(spec, state_dir, progress or (lambda _m: None))
        if _forget_interrupted_roll(state_dir):
            (progress or (lambda _m: None))("every service serves: the record of an interrupted roll's stopped"
                                            f" services ({contract.ROLL_RECORD_FILE}) is cleared")

    if spec.monitoring.prometheus:
        # After the cluster: Prometheus waits for every exporter target up, so the brokers must be serving.
        prometheus.up(spec, state_dir, progress, wait_s=max(30.0, timeout - (time.monotonic() - started))
                      if wait else 0.0)
    elif prometheus.down(spec, state_dir):
        (progress or (lambda _m: None))("monitoring.prometheus is off: stopped Prometheus and Alertmanager")
    if spec.spark is not None:
        # Beside the brokers, on their network: a Spark standalone master and its workers (kctl.stream.spark)
        spark.up(spec, state_dir, progress, wait_s=120.0 if wait else 0.0)
        warm.ensure(spec, state_dir, progress)  # spark.warm_driver: one driver warm for the next job
    elif any((state_dir / "spark" / f).exists() for f in ("compose.yaml", "stack.yaml")) \
            and spark.down(spec, state_dir):
        (progress or (lambda _m: None))("spark is not declared: stopped the Spark cluster")
    elif (state_dir / "spark" / "hosts").exists() and spark.down(spec, state_dir):
        (progress or (lambda _m: None))("spark is not declared: stopped and removed the Spark units on the hosts")
    result.seconds = time.monotonic() - started
    return result


def _raise_owed_metadata_version(spec: ClusterSpec, state_dir: Path, say: Progress) -> None:
    """A raise of metadata.version an interrupted `kctl apply` owes the cluster (kraft.json): done now that every
    node serves; one that fails again is said, with the command, and left owed (the cluster is up as it is)."""
    if not spec.on_kraft:
        return

    if ph.read(state_dir).metadata_version_pending is None:
        return

    try:
        features.raise_and_record(spec, state_dir, say)
    except KctlError as exc:
        say(f"warning: {exc.message} ({exc.hint})")


def _forget_interrupted_roll(state_dir: Path) -> bool:
    """After a healthy ``up``, the services an interrupted roll recorded as stopped run again: drop its record,
    unless a roll holds the lock now (its record is its own). True if a record was dropped."""
    import fcntl

    record = state_dir / contract.ROLL_RECORD_FILE
    if not record.exists():
        return False
    fd = os.open(state_dir / contract.ROLL_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        record.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


def _record_identity(spec: ClusterSpec, state_dir: Path) -> None:
    """Once healthy, the cluster id its brokers report is this state dir's cluster (see kctl.cluster.identity)."""
    try:
        md = kmd.fetch_any(spec.bootstrap_servers, 5.0, store.client_settings(spec, state_dir=state_dir, own=True))
    except kmd.MetadataError:
        # healthy a moment ago: `kctl status` records it at its first answer (kctl.cluster.health.check_identity)
        return
    if md.cluster_id:
        identity.record(spec, state_dir, md.cluster_id)


def down(spec: ClusterSpec, state_dir: Path, *, volumes: bool = False, graceful: bool = True,
         progress: Progress | None = None) -> int:
    """Stop Kafka before ZooKeeper on every node, then remove the containers (and data with ``volumes``).

    ``graceful=False`` skips the controlled shutdowns and removes the containers at once: for a cluster
    whose data is thrown away (a test cluster). Returns how many containers there were.
    """
    say = progress or (lambda _m: None)
    eng = engines.for_spec(spec)
    eng.check_before_down(spec, state_dir, volumes=volumes)  # engine hosts: each one this cluster's node, or bare
    if prometheus.down(spec, state_dir, volumes=volumes):
        say("stopped Prometheus and Alertmanager")
    if any((state_dir / "spark" / p).exists() for p in ("compose.yaml", "stack.yaml", "hosts")) \
            and spark.down(spec, state_dir):
        say("stopped and removed the Spark cluster (master, workers, stream drivers)")
    if mirrors.down(spec, state_dir):
        say("stopped and removed the mirrors into this cluster")
    dc = eng.client()
    infos = eng.containers(spec, dc)
    if graceful and any(c.state == "running" for c in infos) and not _metadata_quorum(spec):
        # A controlled shutdown asks the controller through ZooKeeper: without a quorum each broker would
        # wait out its retries and supervisord's 120 s before being killed anyway.
        say(f"no {'KRaft controller' if spec.on_kraft else 'ZooKeeper'} quorum: a controlled shutdown cannot reach"
            " the controller; stopping every node at once"
            " (the brokers recover their logs at their next start)")
        graceful = False
    if graceful:
        # Kafka first everywhere (controlled shutdown while the quorum is still there), then ZooKeeper.
        kafka_first = [c for c in infos if c.state == "running" and "kafka" in c.services]
        with cf.ThreadPoolExecutor(max_workers=max(1, len(kafka_first))) as pool:
            list(pool.map(lambda c: _stop_kafka(spec, c, dc, say), kafka_first))
    else:
        for c in infos:  # the data stay: `kctl down` removes them only with --volumes (eng.remove below)
            eng.remove_one(spec, c.name, stop_timeout=0, keep_data=True)
    removed = eng.remove(spec, state_dir, volumes=volumes, dc=dc)
    if volumes:
        # Host keys are the operator's trust, not the cluster's data: a known-hosts file in the state dir (named
        # by ssh.known_hosts_file, or where an earlier kctl kept its own) stays.
        hosts_files = [state_dir / "known_hosts"]
        if spec.ssh.known_hosts_file:
            hosts_files.append(Path(spec.ssh.known_hosts_file).expanduser())
        kept = remove_state(state_dir, keep=hosts_files)
        say(f"removed {state_dir}" + (f" but for {', '.join(map(str, kept))} (host keys are never deleted)"
                                      if kept else ""))
    return len(infos) or removed


def _metadata_quorum(spec: ClusterSpec) -> bool:
    """Whether the ensemble (on KRaft: the controllers) has a quorum now, as ``kctl status`` judges it (every
    server asked, 1.5 s at most). On KRaft Docker is asked too: a controller's quorum-state file outlives its
    process, so only a leader whose controller runs counts (health.controller_leader)."""
    obs = health.gather(spec, 1.5, docker=spec.on_kraft, kafka=False)
    return health.check_quorum(spec, obs)[0]


def _stop_kafka(spec: ClusterSpec, c: ContainerInfo, dc: Any, say: Progress) -> None:
    say(f"{c.name}: stopping kafka (controlled shutdown)")
    try:
        engines.for_spec(spec).stop_service(spec, c.name, "kafka", dc)
    except KctlError:
        pass  # its container is not running any more: compose's stop finishes it


# ----- one node's container (kctl node add / remove) ----------------------------------------------------


def start_node(spec: ClusterSpec, state_dir: Path, host: str, progress: Progress | None = None) -> None:
    """Create and start one node's container from the rendered files, touching no other container (engine hosts:
    ``progress`` hears of a host key trusted on first use)."""
    rc.start_one(spec, state_dir, host, progress)


def remove_node(spec: ClusterSpec, host: str, *, stop_timeout: int = 180) -> bool:
    """Stop (SIGTERM, then up to ``stop_timeout`` s) and remove one node's container; False if there was none."""
    return rc.remove_one(spec, host, stop_timeout=stop_timeout)
