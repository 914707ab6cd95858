"""The logs of a cluster's nodes, read on the host where the containers write them.

Each container bind-mounts ``<state dir>/<host>/logs`` on its log root, so a
node's ZooKeeper, Kafka and supervisord logs are plain files on the host:
readable whether the container runs, stopped or crashed, without Docker.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kctl import contract
from kctl.errors import KctlError, UsageError
from kctl.files import follow_lines, tail_start
from kctl.kraft import config as kc
from kctl.model.properties import services_of, spark_placement
from kctl.model.spec import ClusterSpec, Engine
from kctl.runtime.engine import engines, swarm
from kctl.runtime.engine.base import Capability

SERVICES = tuple(contract.LOG_FILES)
SPARK_ON_SWARM = "spark-swarm"  # NodeLog.service of a Spark daemon's task log (engine swarm)
SPARK_ON_HOST = "spark-host"  # NodeLog.service of a Spark master's or worker's log on its host (engine hosts)


@dataclass(frozen=True)
class NodeLog:
    """One service's log file of one container."""

    node: str  # the spec's hostname of the node
    container: str  # the container (host) that writes the log
    service: str
    path: Path
    logs_dir: Path  # <state dir>/<host>/logs: exists once the cluster has been rendered or started here


def locate(spec: ClusterSpec, state: Path, node: str, service: str) -> NodeLog:
    """Where ``service``'s log of ``node`` (a hostname, a node id, or zkN/kafkaN) is on the host."""
    if spec.spark is not None and spec.engine is Engine.hosts and (
            node == "spark-master" or node.startswith("spark-worker-")):
        # engine hosts: the master's and each worker's unit writes its log on its own host
        master, workers = spark_placement(spec)
        idx = node.removeprefix("spark-worker-")
        if node != "spark-master" and not (idx.isdigit() and 1 <= int(idx) <= len(workers)):
            raise UsageError(f"no Spark worker {node}", hint=f"spark-worker-1 to spark-worker-{len(workers)}")
        host = master if node == "spark-master" else workers[int(idx) - 1]
        role = "spark-master" if node == "spark-master" else "spark-worker"
        return NodeLog(node=node, container=host, service=SPARK_ON_HOST, path=Path(f"{contract.LOG_ROOT}/{role}.log"),
                       logs_dir=Path(contract.LOG_ROOT))
    if spec.spark is not None and engines.supports(spec, Capability.SPARK_ON_SWARM) and (
            node == "spark-master" or node.startswith("spark-worker-")):
        # engine swarm: a daemon's task logs to Docker on the Swarm node that runs it (kctl.stream.spark_swarm)
        if node != "spark-master" and not node.removeprefix("spark-worker-").isdigit():
            raise UsageError(f"no Spark worker {node}", hint=f"spark-worker-1 to spark-worker-{spec.spark.workers}")
        return NodeLog(node=node, container=f"{spec.project}-spark_{node}", service=SPARK_ON_SWARM, path=Path(node),
                       logs_dir=Path("."))
    if spec.spark is not None and (node == "spark-master" or node.startswith(("spark-worker-", "stream-"))):
        # the Spark cluster's master, a worker, a stream job's driver (kctl.stream.spark): one log each
        d = state.resolve() / "spark" / "logs"
        return NodeLog(node=node, container=node, service="spark", path=d / f"{node}.log", logs_dir=d)
    if service not in contract.LOG_FILES:
        raise UsageError(f"unknown service {service!r}",
                         hint=f"use --service {', '.join(SERVICES[:-1])} or {SERVICES[-1]}")

    n = spec.node(node)
    hosts = [(host, services) for host, nd, services in services_of(spec) if nd.id == n.id]
    named = [h for h in hosts if h[0] == node]
    candidates = named or hosts
    # supervisord runs in every container; a ZooKeeper or Kafka log only where that service runs, a KRaft
    # controller's on a controller's node once the cluster has controllers (on KRaft, or migrating to it).
    controllers = {spec.zk_host(c) for c in kc.controller_nodes(spec)} if spec.kraft_phase != "zookeeper" else set()
    match = [h for h, services in candidates if service == "supervisor" or service in services
             or (service == "controller" and h in controllers)]
    if not match:
        runs = ", ".join(f"{h} runs {' and '.join(s)}" for h, s in candidates)
        raise UsageError(f"{node} has no {service} log ({runs})",
                         hint="name the node by its hostname, or pick the container that runs that service")
    # With two containers per node (split topology), supervisor means the Kafka side, as the default service.
    host = match[-1]
    logs_dir = state / host / contract.HOST_LOGS
    return NodeLog(node=n.hostname, container=host, service=service, path=logs_dir / contract.LOG_FILES[service],
                   logs_dir=logs_dir)


def lines(log: NodeLog, *, tail: int, follow: bool, max_seconds: float = math.inf) -> Iterator[str]:
    """The last ``tail`` lines of the log; with ``follow``, then every new line (tail -F) until stopped.

    Raises at once (not on the first line) when there is no log to read: never
    started here, or no such file yet and not following.
    """
    if not log.path.exists():
        never = not log.logs_dir.is_dir()
        if never or not follow:
            raise KctlError(
                f"no {log.service} log for {log.container} yet: {log.path} does not exist",
                hint="has the cluster been started from this directory? `kctl up` starts it"
                + ("" if never else f"; `kctl logs {log.container} --service {log.service} -F` waits for the log"))
    return _read(log, tail=tail, follow=follow, max_seconds=max_seconds)


def _read(log: NodeLog, *, tail: int, follow: bool, max_seconds: float) -> Iterator[str]:
    try:
        try:
            start = tail_start(log.path, tail)
        except FileNotFoundError:  # rotated away just now, or not written yet: follow reads the new one whole
            if not follow:
                raise
            start = 0
        for _, line in follow_lines(log.path, follow=follow, max_seconds=max_seconds, max_lines=None,
                                    start=start, skip_blank=False):
            yield line
    except FileNotFoundError:
        raise KctlError(f"{log.path} disappeared while reading it (rotated?)", hint="run the command again") from None
    except PermissionError as exc:
        raise KctlError(f"cannot read {exc.filename or log.path}: permission denied",
                        hint="the log belongs to the container's user; read it as that user or root") from None


def in_container(spec: ClusterSpec, log: NodeLog, *, tail: int, follow: bool) -> Iterator[str] | None:
    """engine swarm: the log read in the node's container (its logs are on a volume of the Swarm node that
    runs it, not in the state dir); None where the state dir has it (engine compose)."""
    if log.service == SPARK_ON_SWARM:  # the Spark stack's service (kctl.stream.spark_swarm.service_name)
        return swarm.service_logs(log.container, tail, follow)
    eng = engines.for_spec(spec)
    if log.service == SPARK_ON_HOST:  # a Spark daemon's log on its host (engine hosts)
        if follow:
            return eng.follow_lines(spec, log.container, str(log.path), tail)
        return iter(eng.log_lines(spec, log.container, str(log.path), tail) or [])
    if eng.logs_in_state_dir or log.service == "spark":
        return None
    followed = eng.follow_lines(spec, log.container, contract.container_log(log.service), tail) if follow else None
    if followed is not None:
        return followed
    if follow:
        raise UsageError(f"--follow is not available on engine {eng.kind}",
                         hint=f"`kctl logs {log.node} --tail N` shows the last lines; `docker service logs -f"
                              f" {spec.project}_{log.container}` follows supervisord's output")
    got = eng.log_lines(spec, log.container, contract.container_log(log.service), tail)
    return iter(got or [])
