"""A few read-only Docker Engine API calls over its unix socket, for the status path.

The docker SDK costs ~60-200 ms to import and set up; ``kctl status`` needs two
GETs (the cluster's containers, and each running container's process table),
which a plain HTTP/1.0 request on the engine's socket answers in a few ms.
``DOCKER_HOST`` is honoured for ``unix://`` and ``tcp://`` (plain HTTP) addresses.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.parse
from dataclasses import dataclass
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
from kctl.errors import DockerUnavailable

DEFAULT_SOCKET = "/var/run/docker.sock"
ENGINE_HINT = "is dockerd running? start it (`dockerd &` as root) or run `make setup`; `kctl doctor` checks"


def _connect(timeout: float) -> socket.socket:
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("tcp://"):
        u = urllib.parse.urlsplit(host)
        return socket.create_connection((u.hostname or "localhost", u.port or 2375), timeout=timeout)
    path = host.removeprefix("unix://") if host.startswith("unix://") else DEFAULT_SOCKET
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except OSError:
        s.close()
        raise
    return s


def get(path: str, timeout: float = 5.0) -> Any:
    """GET an Engine API path; the decoded JSON, or DockerUnavailable.

    HTTP/1.0 on purpose: the engine then answers with a plain body and closes the
    connection (no chunked encoding), so no HTTP library is needed (http.client and
    the ssl it pulls in cost ~10 ms of import).
    """
    chunks: list[bytes] = []
    try:
        with _connect(timeout) as s:
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode("ascii"))
            while data := s.recv(65536):
                chunks.append(data)
    except OSError as exc:
        raise DockerUnavailable(f"Docker engine not reachable: {exc.strerror or exc}", hint=ENGINE_HINT) from None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split()
    code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    if code < 200 or code >= 400:
        msg = body.decode("utf-8", "replace").strip()
        try:
            msg = str(json.loads(msg).get("message", msg))
        except (ValueError, AttributeError):
            pass
        raise DockerUnavailable(f"Docker engine answered {status_line!r} to GET {path}: {msg[:300]}",
                                hint=ENGINE_HINT)
    return json.loads(body) if body else None


@dataclass(frozen=True)
class Container:
    """One container as ``GET /containers/json`` lists it."""

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


def state_dir_of(labels: dict[str, str]) -> str | None:
    """The state dir a container belongs to: kctl's label, else the Compose project's working dir
    (kctl runs Compose in the state dir, so both name the same directory)."""
    return labels.get(LABEL_STATE_DIR) or labels.get(LABEL_COMPOSE_WORKING_DIR) or None


def engine_of(labels: dict[str, str]) -> str:
    """``swarm`` for a container of a Swarm stack's task (Swarm's labels), else ``compose``."""
    return "swarm" if labels.get(LABEL_STACK_NAMESPACE) or labels.get(LABEL_SWARM_SERVICE_NAME) else "compose"


def _health(status: str) -> str | None:
    # The list endpoint has no State.Health: its Status text ends in "(healthy)",
    # "(unhealthy)" or "(health: starting)".
    if "(health: starting)" in status:
        return "starting"
    if "(unhealthy)" in status:
        return "unhealthy"
    if "(healthy)" in status:
        return "healthy"
    return None


def containers(cluster: str | None, timeout: float = 5.0) -> list[Container]:
    """Every container labelled with ``cluster`` (None: of every kctl cluster), running or not,
    in service-name order."""
    label = LABEL_CLUSTER if cluster is None else f"{LABEL_CLUSTER}={cluster}"
    filters = urllib.parse.quote(json.dumps({"label": [label]}))
    out = []
    for c in get(f"/containers/json?all=1&filters={filters}", timeout) or []:
        labels = c.get("Labels") or {}
        names = c.get("Names") or ["/?"]
        out.append(Container(
            id=c["Id"],
            name=labels.get(LABEL_SERVICE, names[0].lstrip("/")),
            node=labels.get(LABEL_NODE, ""),
            services=tuple(s for s in labels.get(LABEL_SERVICES, "").split(",") if s),
            state=c.get("State", "unknown"),
            health=_health(c.get("Status", "")),
            config_hash=labels.get(LABEL_HASH),
            cluster=labels.get(LABEL_CLUSTER, ""),
            state_dir=state_dir_of(labels),
            host_ports=tuple(sorted({int(p["PublicPort"]) for p in c.get("Ports") or [] if p.get("PublicPort")})),
            engine=engine_of(labels),
        ))
    return sorted(out, key=lambda i: i.name)


def process_table(container_id: str, timeout: float = 5.0) -> list[str]:
    """Command lines of every process in a container (``docker top``: no exec, no process inside)."""
    args = urllib.parse.quote("-eo pid,args")
    top = get(f"/containers/{container_id}/top?ps_args={args}", timeout) or {}
    return [str(p[-1]) for p in top.get("Processes") or []]


def process_states(cmdlines: list[str], services: tuple[str, ...]) -> dict[str, str]:
    """RUNNING, STOPPED or WAITING-FOR-QUORUM per service, from a container's command lines."""
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


def processes(container_id: str, services: tuple[str, ...], timeout: float = 5.0) -> dict[str, str]:
    """Process state per service of a running container; {} when Docker does not answer."""
    try:
        return process_states(process_table(container_id, timeout), services)
    except (DockerUnavailable, ValueError):
        return {}


def inspect(container_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """``docker inspect`` of one container."""
    out = get(f"/containers/{container_id}/json", timeout)
    return out if isinstance(out, dict) else {}
