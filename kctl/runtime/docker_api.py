"""The Docker Engine API through the Docker SDK: the one client factory, a cluster's containers as data, their
process tables, commands run in them, and the ``docker`` CLI for the deploys that have no API call.

The lowest module of the engine seam: :mod:`kctl.runtime.engine.engines` (the abstract Engine),
:mod:`kctl.runtime.engine.compose` and :mod:`kctl.runtime.engine.swarm` build on it; it imports none of them.

``docker`` is imported inside the functions (it costs ~100 ms): the status path imports this module.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kctl.contract import (
    LABEL_CLUSTER,
    LABEL_COMPOSE_WORKING_DIR,
    LABEL_HASH,
    LABEL_NODE,
    LABEL_SERVICE,
    LABEL_SERVICES,
    LABEL_STACK_NAMESPACE,
    LABEL_STATE_DIR,
    LABEL_SWARM_SERVICE_NAME,
)
from kctl.errors import DockerUnavailable, KctlError
from kctl.runtime import supervisor

ENGINE_HINT = "is dockerd running? start it (`dockerd &` as root) or run `make setup`; `kctl doctor` checks"
# The Engine API version the read-only status calls ask for, so that making a client costs no version
# negotiation (a GET /version). 1.41 is Docker 20.10's; every call kctl makes exists in it. An engine that
# no longer serves it (Docker 29 serves 1.44 and later) says "too old", and the client then negotiates.
PINNED_API_VERSION = "1.41"


_IMPORT_LOCK = threading.Lock()


def sdk() -> Any:
    """The Docker SDK, imported lazily (start-up time) and under one lock: threads that import it at once (the
    status path asks every node in parallel) can meet in the import system's deadlock detection, since the
    ``docker`` package and ``docker.errors`` import each other (seen: `_DeadlockError ... docker.errors`)."""
    with _IMPORT_LOCK:
        import docker
        import docker.errors
    return docker


def client(timeout: float = 30, *, version: str = "auto") -> Any:
    """A docker SDK client from the environment (``DOCKER_HOST`` with tls or ssh, else the Docker CLI's
    context, else the local socket), or DockerUnavailable with a hint.

    With ``version="auto"`` the SDK asks the engine its API version (one GET /version, which also proves
    the engine answers); with a pinned version nothing is sent until the first call.
    """
    docker = sdk()
    try:
        return docker.from_env(timeout=int(max(1, timeout)), version=version)
    except Exception as exc:  # noqa: BLE001 - any failure here means the engine is not reachable
        raise unavailable(exc) from None


def unavailable(exc: BaseException) -> DockerUnavailable:
    """The operator's error for an engine that did not answer (or answered an error)."""
    import os

    where = os.environ.get("DOCKER_HOST") or "the local socket"
    return DockerUnavailable(f"Docker engine not reachable at {where}: {reason(exc)}", hint=ENGINE_HINT)


def reason(exc: BaseException) -> str:
    """The cause an operator can act on: the OS error under requests' and urllib3's wrappers
    ("Connection refused"), else the engine's own explanation, else the exception's text."""
    todo, seen = [exc], 0
    while todo and seen < 20:
        e = todo.pop(0)
        seen += 1
        if isinstance(e, OSError) and e.strerror:
            return str(e.strerror)
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [v for v in (getattr(e, "reason", None), e.__cause__, e.__context__) if isinstance(v, BaseException)]
    detail = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return str(detail)[:300]


def too_old(exc: BaseException) -> bool:
    """Whether the engine refused the pinned API version (it serves only newer ones)."""
    return "too old" in str(getattr(exc, "explanation", None) or exc)


class StatusClient:
    """A client for the status path's read-only calls: pinned API version first (no negotiation), the
    negotiated one when the engine refuses it. One per observation, shared by its threads."""

    def __init__(self, timeout: float = 5.0, dc: Any | None = None) -> None:
        self.timeout = timeout
        self._dc = dc

    def call(self, fn: Any) -> Any:
        """``fn(low-level APIClient)``; DockerUnavailable when the engine does not answer."""
        APIError = sdk().errors.APIError  # noqa: N806 - the SDK's class

        if self._dc is None:
            self._dc = client(self.timeout, version=PINNED_API_VERSION)
        try:
            return fn(self._dc.api)
        except APIError as exc:
            if not too_old(exc):
                raise unavailable(exc) from None
        except Exception as exc:  # noqa: BLE001 - requests' connection errors: the engine is not reachable
            raise unavailable(exc) from None
        self._dc = client(self.timeout)
        try:
            return fn(self._dc.api)
        except Exception as exc:  # noqa: BLE001
            raise unavailable(exc) from None


# ----- containers as data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Container:
    """One container as the Engine API's container list shows it (no inspect per container)."""

    id: str
    name: str  # the Compose service == hostname (logger1)
    node: str
    services: tuple[str, ...]
    state: str  # running, exited, paused, restarting, created, dead
    health: str | None  # healthy, unhealthy, starting or None
    config_hash: str | None
    cluster: str = ""
    state_dir: str | None = None  # the absolute state dir it belongs to (None: not known)
    host_ports: tuple[int, ...] = ()
    remote: bool = False  # engine swarm: a task on another Swarm node (its state from the Swarm, no process table)
    engine: str = "compose"  # which engine made it: compose, or swarm (a stack's task)


@dataclass(frozen=True)
class ContainerInfo:
    """One container of a cluster as Docker's inspect sees it (the deploy paths)."""

    id: str
    name: str  # the Compose service == hostname (logger1)
    container_name: str
    node: str
    services: tuple[str, ...]
    state: str  # running, exited, paused, restarting, created, dead
    health: str | None  # healthy, unhealthy, starting or None
    config_hash: str | None
    ports: dict[str, Any]
    engine: str = "compose"  # which engine made it: compose, or swarm (a stack's task)


def state_dir_of(labels: dict[str, str]) -> str | None:
    """The state dir a container belongs to: kctl's label, else the Compose project's working dir
    (kctl runs Compose in the state dir, so both name the same directory)."""
    return labels.get(LABEL_STATE_DIR) or labels.get(LABEL_COMPOSE_WORKING_DIR) or None


def engine_of(labels: dict[str, str]) -> str:
    """``swarm`` for a container of a Swarm stack's task (Swarm's labels), else ``compose``."""
    return "swarm" if labels.get(LABEL_STACK_NAMESPACE) or labels.get(LABEL_SWARM_SERVICE_NAME) else "compose"


def services_of_labels(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(s for s in labels.get(LABEL_SERVICES, "").split(",") if s)


def health_of_status(status: str) -> str | None:
    # The list endpoint has no State.Health: its Status text ends in "(healthy)",
    # "(unhealthy)" or "(health: starting)".
    if "(health: starting)" in status:
        return "starting"
    if "(unhealthy)" in status:
        return "unhealthy"
    if "(healthy)" in status:
        return "healthy"
    return None


def from_listing(c: dict[str, Any]) -> Container:
    """Pure: a :class:`Container` from one entry of the Engine API's container list."""
    labels = c.get("Labels") or {}
    names = c.get("Names") or ["/?"]
    return Container(
        id=c["Id"],
        name=labels.get(LABEL_SERVICE, names[0].lstrip("/")),
        node=labels.get(LABEL_NODE, ""),
        services=services_of_labels(labels),
        state=c.get("State", "unknown"),
        health=health_of_status(c.get("Status", "")),
        config_hash=labels.get(LABEL_HASH),
        cluster=labels.get(LABEL_CLUSTER, ""),
        state_dir=state_dir_of(labels),
        host_ports=tuple(sorted({int(p["PublicPort"]) for p in c.get("Ports") or [] if p.get("PublicPort")})),
        engine=engine_of(labels),
    )


def listed(cluster: str | None, sc: StatusClient | None = None) -> list[Container]:
    """Every container labelled with ``cluster`` (None: of every kctl cluster), running or not, in
    service-name order: one list call, no inspect."""
    label = LABEL_CLUSTER if cluster is None else f"{LABEL_CLUSTER}={cluster}"
    sc = sc or StatusClient()
    raw = sc.call(lambda api: api.containers(all=True, filters={"label": [label]}))
    return sorted((from_listing(c) for c in raw or []), key=lambda i: i.name)


# A node's process table as kctl reads it may carry one line per service its supervisor gave up on: supervisord's
# FATAL (the wrapper's crash-loop limit reached, or a start that failed every retry), systemd's failed unit (its
# StartLimitBurst reached, or a stop that ended in SIGKILL). Such a service is FAILED, not STOPPED: nothing
# starts it again until someone does (`kctl up`, `kctl restart`).
GAVE_UP = "kctl: supervisor gave up on "
# The states of a service whose process is not there.
NOT_RUNNING = ("STOPPED", "FAILED")


def process_states(cmdlines: list[str], services: tuple[str, ...]) -> dict[str, str]:
    """RUNNING, STOPPED, FAILED (see :data:`GAVE_UP`), WAITING-FOR-QUORUM or UNFORMATTED (KRaft storage kctl did
    not make, refused: the image's ``unformatted``) per service, from a container's command lines; RETIRED for
    a ZooKeeper of a cluster that left it (the image's ``retired``); and
    ``controller`` RUNNING where a KRaft controller's JVM runs (a node without one, or whose controller waits
    idle, has no entry: whether it should run one is the spec's phase, which the health assessment reads)."""
    procs = _states(cmdlines, services)
    for line in cmdlines:
        if line.startswith(GAVE_UP):
            service = line[len(GAVE_UP):].strip()
            if procs.get(service) == "STOPPED":
                procs[service] = "FAILED"
            elif service == "controller" and "controller" not in procs:
                # a controller has no entry while not running (whether it should run is the spec's phase, which
                # kctl.cluster.health reads); one its supervisor gave up on is FAILED, whichever the phase
                procs[service] = "FAILED"
    return procs


def _states(cmdlines: list[str], services: tuple[str, ...]) -> dict[str, str]:
    procs = _states_run(cmdlines, services)
    # the image's `unformatted` SERVICE (/usr/local/lib/kctl/unformatted; a host's /opt/kctl/bin/unformatted):
    # storage without meta.properties that kctl did not make, refused
    for service in ("controller", "kafka"):
        if any(f"/unformatted {service} " in f"{c} " for c in cmdlines):
            procs[service] = "UNFORMATTED"
    return procs


def _states_run(cmdlines: list[str], services: tuple[str, ...]) -> dict[str, str]:
    procs: dict[str, str] = {}
    if "zookeeper" in services:
        procs["zookeeper"] = ("RUNNING" if any("QuorumPeerMain" in c for c in cmdlines) else
                              "RETIRED" if any("retired zookeeper" in c for c in cmdlines) else "STOPPED")
    # The broker's JVM and a KRaft controller's both run kafka.Kafka; the controller's reads controller.properties.
    brokers = [c for c in cmdlines if "controller.properties" not in c]
    if any(" kafka.Kafka " in f"{c} " and "controller.properties" in c for c in cmdlines):
        procs["controller"] = "RUNNING"
    if "kafka" in services:
        if any(" kafka.Kafka " in f"{c} " for c in brokers):
            procs["kafka"] = "RUNNING"
        elif any("kafka-start" in c for c in cmdlines):
            procs["kafka"] = "WAITING-FOR-QUORUM"
        else:
            procs["kafka"] = "STOPPED"
    return procs


def process_table(sc: StatusClient, container_id: str) -> list[str]:
    """Command lines of every process in a container (``docker top``: no exec, no process inside)."""
    top = sc.call(lambda api: api.top(container_id, ps_args="-eo pid,args")) or {}
    return [str(p[-1]) for p in top.get("Processes") or []]


def supervisor_gave_up(sc: StatusClient, container_id: str) -> list[str]:
    """A :data:`GAVE_UP` line per program that supervisord holds FATAL (its status, one exec: the raw Engine API
    call, on the status path's client; the command and the reading of its answer are
    :mod:`kctl.runtime.supervisor`'s)."""
    def run(api: Any) -> bytes:
        made = api.exec_create(container_id, supervisor.argv("status"), user="root")
        return bytes(api.exec_start(made["Id"]) or b"")

    out = sc.call(run) or b""
    return [f"{GAVE_UP}{program}" for program, state in supervisor.parse_status(out.decode(errors="replace")).items()
            if state == "FATAL"]


def processes(sc: StatusClient, container_id: str, services: tuple[str, ...]) -> dict[str, str]:
    """Process state per service of a running container; {} when Docker does not answer. A service whose
    process is not there costs one exec more: its supervisor says whether it gave up on it (FAILED)."""
    try:
        table = process_table(sc, container_id)
        states = process_states(table, services)
        if "STOPPED" in states.values():
            states = process_states(table + supervisor_gave_up(sc, container_id), services)
        return states
    except (DockerUnavailable, ValueError):
        return {}


def inspect(container_id: str, dc: Any | None = None) -> dict[str, Any]:
    """``docker inspect`` of one container."""
    out = StatusClient(dc=dc).call(lambda api: api.inspect_container(container_id))
    return out if isinstance(out, dict) else {}


# ----- containers as SDK objects (the deploy and fault paths) ----------------------------------------


def info_of(c: Any) -> ContainerInfo:
    """Pure: a :class:`ContainerInfo` from an SDK container object."""
    labels = c.labels or {}
    attrs = c.attrs or {}
    st = attrs.get("State", {})
    health = (st.get("Health") or {}).get("Status")
    return ContainerInfo(
        id=c.id,
        name=labels.get(LABEL_SERVICE, c.name),
        container_name=c.name,
        node=labels.get(LABEL_NODE, ""),
        services=services_of_labels(labels),
        state=st.get("Status", c.status),
        health=health,
        config_hash=labels.get(LABEL_HASH),
        ports=(attrs.get("NetworkSettings") or {}).get("Ports") or {},
        engine=engine_of(labels),
    )


def from_sdk(c: Any) -> Container:
    """Pure: a :class:`Container` from an SDK container object (as the list would show it)."""
    labels = c.labels or {}
    return Container(id=c.id, name=host_of(c), node=labels.get(LABEL_NODE, ""), services=services_of_labels(labels),
                     state=c.status, health=None, config_hash=labels.get(LABEL_HASH),
                     cluster=labels.get(LABEL_CLUSTER, ""), state_dir=state_dir_of(labels), engine=engine_of(labels))


def sdk_containers(cluster: str, dc: Any) -> list[Any]:
    """The SDK's container objects labelled with ``cluster``, running or not."""
    # ignore_removed: a container removed between the SDK's list and its inspect of each one (a `kctl down`, a
    # recreate) is left out instead of failing the whole list with a 404
    return list(dc.containers.list(all=True, filters={"label": f"{LABEL_CLUSTER}={cluster}"}, ignore_removed=True))


def infos(cluster: str, dc: Any) -> list[ContainerInfo]:
    """Every container of the cluster, running or not, in service-name order."""
    return sorted((info_of(c) for c in sdk_containers(cluster, dc)), key=lambda i: i.name)


def host_of(c: Any) -> str:
    """The container host (``logger1``) an SDK container object runs."""
    return str((c.labels or {}).get(LABEL_SERVICE, c.name))


def current_containers(found: list[Any]) -> list[Any]:
    """One container per host: a running (or paused) one first, else the newest. On Compose a host has one;
    on Swarm the exited containers of earlier tasks stay behind their replacement."""
    best: dict[str, Any] = {}
    for c in found:
        host = host_of(c)
        rank = (c.status in ("running", "paused"), str((c.attrs or {}).get("Created", "")))
        cur = best.get(host)
        if cur is None or rank > cur[0]:
            best[host] = (rank, c)
    return [best[h][1] for h in sorted(best)]


LABEL_SPARK = "io.kctl.spark"  # kctl.stream.spark.LABEL_SPARK: a cluster's Spark containers


def remove_by_label(cluster: str, dc: Any, volumes: bool = True) -> int:
    """Remove every container and network labelled with this cluster (leftovers of a crashed run)."""
    n = 0
    # the Spark cluster beside it (kctl.stream.spark) first: its containers hold the cluster's network
    for c in dc.containers.list(all=True, filters={"label": f"{LABEL_SPARK}={cluster}"}, ignore_removed=True):
        c.remove(force=True, v=volumes)
        n += 1
    for c in sdk_containers(cluster, dc):
        c.remove(force=True, v=volumes)
        n += 1
    for net in dc.networks.list(filters={"label": f"{LABEL_CLUSTER}={cluster}"}):
        try:
            net.remove()
        except Exception:  # noqa: BLE001 - already gone or still in use by a foreign container
            pass
    return n


def exec_run(dc: Any, container_id: str, argv: list[str], user: str | None = None, timeout: float = 60,
             stderr: bool = True) -> tuple[int, str]:
    """Run a command in a running container; (exit code, output). The SDK's exec has no timeout: coreutils'
    ``timeout`` bounds it inside the container."""
    container = dc.containers.get(container_id)
    kwargs: dict[str, Any] = {"demux": False, "stderr": stderr}
    if user:
        kwargs["user"] = user
    res = container.exec_run(["timeout", "--kill-after=5", str(max(1, int(timeout))), *argv], **kwargs)
    out = res.output.decode("utf-8", errors="replace") if isinstance(res.output, bytes) else str(res.output)
    return int(res.exit_code if res.exit_code is not None else 1), out


# ----- the docker CLI: deploys that have no Engine API call ------------------------------------------


def docker_binary() -> str:
    if shutil.which("docker") is None:
        raise DockerUnavailable("the docker client is not on PATH", hint="install Docker, or run `make setup`")
    return "docker"


def run_docker(argv: list[str], *, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``docker ARGV`` (the CLI: ``compose`` and ``stack deploy`` have no Engine API call); KctlError on a
    timeout."""
    binary = docker_binary()
    try:
        return subprocess.run([binary, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise KctlError(f"`docker {' '.join(argv[:3])}` did not finish in {timeout:.0f}s",
                        hint="see `kctl status`") from None


def stream_lines(argv: list[str], *, with_stderr: bool) -> Iterator[str]:
    """The lines a long-running command (``docker service logs --follow``, ``tail -F`` over ssh) prints, as it
    prints them; the command is ended when the caller stops reading (Ctrl-C of ``kctl logs -F``)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.STDOUT if with_stderr else subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            yield line.rstrip("\n")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
