"""Docker and Docker Compose: the only module that runs ``docker compose`` or lists containers.

Containers are found by label (``io.kctl.cluster``), never by name, so that a
cluster left by a crashed run is still found and removed.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kctl.contract import LABEL_CLUSTER, LABEL_HASH, LABEL_NODE, LABEL_SERVICE, LABEL_SERVICES
from kctl.errors import DockerUnavailable, KctlError
from kctl.runtime.engine import engine_of
from kctl.spec import ClusterSpec

ENGINE_HINT = "is dockerd running? start it (`dockerd &` as root) or run `make setup`; `kctl doctor` checks"


def client(timeout: int = 30) -> Any:
    """A docker SDK client, or DockerUnavailable with a hint."""
    import docker

    try:
        c = docker.from_env(timeout=timeout)
        c.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means the engine is not reachable
        raise DockerUnavailable(f"Docker engine not reachable: {type(exc).__name__}", hint=ENGINE_HINT) from None
    return c


@dataclass(frozen=True)
class ContainerInfo:
    """One container of a cluster as Docker sees it."""

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


def _info(c: Any) -> ContainerInfo:
    labels = c.labels or {}
    attrs = c.attrs or {}
    st = attrs.get("State", {})
    health = (st.get("Health") or {}).get("Status")
    return ContainerInfo(
        id=c.id,
        name=labels.get(LABEL_SERVICE, c.name),
        container_name=c.name,
        node=labels.get(LABEL_NODE, ""),
        services=tuple(s for s in labels.get(LABEL_SERVICES, "").split(",") if s),
        state=st.get("Status", c.status),
        health=health,
        config_hash=labels.get(LABEL_HASH),
        ports=(attrs.get("NetworkSettings") or {}).get("Ports") or {},
        engine=engine_of(labels),
    )


def containers(spec: ClusterSpec, dc: Any | None = None) -> list[ContainerInfo]:
    """Every container of the cluster, running or not, in service-name order."""
    dc = dc or client()
    found = dc.containers.list(all=True, filters={"label": f"{LABEL_CLUSTER}={spec.name}"})
    return sorted((_info(c) for c in found), key=lambda i: i.name)


def running_host_ports(spec: ClusterSpec) -> list[int]:
    """Host ports published by this cluster's own running containers (they are not 'taken')."""
    try:
        infos = containers(spec)
    except KctlError:
        return []
    ports: list[int] = []
    for info in infos:
        for bindings in info.ports.values():
            for b in bindings or []:
                if b.get("HostPort"):
                    ports.append(int(b["HostPort"]))
    return ports


def compose_binary() -> list[str]:
    if shutil.which("docker") is None:
        raise DockerUnavailable("the docker client is not on PATH", hint="install Docker, or run `make setup`")
    return ["docker", "compose"]


def run_compose(
    spec: ClusterSpec, state_dir: Path, *args: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``docker compose -p kctl-<name> -f <state>/compose.yaml ARGS``."""
    from kctl.render import COMPOSE_FILE  # jinja2 comes with it: keep it off the status path

    argv = [*compose_binary(), "-p", spec.project, "-f", str(state_dir / COMPOSE_FILE), *args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=state_dir)
    except subprocess.TimeoutExpired:
        raise KctlError(f"`docker compose {' '.join(args)}` did not finish in {timeout:.0f}s",
                        hint="see `kctl status` and `kctl logs NODE`") from None
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip()
        if "docker compose" in err and "is not a docker command" in err or "unknown shorthand flag: 'p'" in err:
            raise DockerUnavailable("the Docker Compose v2 plugin is missing",
                                    hint="install it as ~/.docker/cli-plugins/docker-compose (`make setup`)")
        if "Cannot connect to the Docker daemon" in err:
            raise DockerUnavailable("Docker engine not reachable", hint=ENGINE_HINT)
        raise KctlError(f"`docker compose {' '.join(args)}` failed: {err[-2000:]}",
                        hint="see `kctl status` and `kctl logs NODE`; `kctl down` removes what was created")
    return proc


def remove_by_label(spec_name: str, dc: Any | None = None, volumes: bool = True) -> int:
    """Remove every container and network labelled with this cluster (leftovers of a crashed run)."""
    dc = dc or client()
    n = 0
    for c in dc.containers.list(all=True, filters={"label": f"{LABEL_CLUSTER}={spec_name}"}):
        c.remove(force=True, v=volumes)
        n += 1
    for net in dc.networks.list(filters={"label": f"{LABEL_CLUSTER}={spec_name}"}):
        try:
            net.remove()
        except Exception:  # noqa: BLE001 - already gone or still in use by a foreign container
            pass
    return n


def exec_in(spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
            timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
    """Run a command in a cluster container (by service name, e.g. logger1); returns (exit code, output).

    ``stderr=False`` keeps only stdout: a JVM tool's log lines on stderr would otherwise interleave
    with the table that a caller parses.
    """
    from kctl.runtime.engines import check_engine

    dc = dc or client()
    every = containers(spec, dc)
    check_engine(spec, [(c.name, c.engine) for c in every])  # never a command in the other engine's containers
    # engine swarm: the current task's container first (earlier tasks' exited ones stay behind it)
    found = sorted((c for c in every if c.name == name), key=lambda c: c.state != "running")
    if not found:
        raise KctlError(f"no container {name!r} in cluster {spec.name}", hint="is it up? see `kctl status`")
    if found[0].state != "running":
        raise KctlError(f"container {name} is {found[0].state}", hint=f"start it with `kctl up` ({name})")
    container = dc.containers.get(found[0].id)
    kwargs: dict[str, Any] = {"demux": False, "stderr": stderr}
    if user:
        kwargs["user"] = user
    # The SDK's exec has no timeout: coreutils' timeout bounds it inside the container.
    res = container.exec_run(["timeout", "--kill-after=5", str(max(1, int(timeout))), *argv], **kwargs)
    out = res.output.decode("utf-8", errors="replace") if isinstance(res.output, bytes) else str(res.output)
    return int(res.exit_code if res.exit_code is not None else 1), out
