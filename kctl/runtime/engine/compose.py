"""engine compose: every container of the cluster on this Docker engine, through Docker Compose (the project
``kctl-<name>``); the only module that runs ``docker compose``.

Containers are found by label (``io.kctl.cluster``), never by name, so that a
cluster left by a crashed run is still found and removed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from kctl.contract import COMPOSE_FILE, LABEL_NODE
from kctl.errors import DockerUnavailable, KctlError
from kctl.model.spec import ClusterSpec
from kctl.model.spec import Engine as EngineKind
from kctl.runtime import docker_api as api
from kctl.runtime import ports
from kctl.runtime.docker_api import ENGINE_HINT, ContainerInfo
from kctl.runtime.engine.base import Capability, Engine, Progress


def compose_binary() -> list[str]:
    return [api.docker_binary(), "compose"]


def run_compose(
    spec: ClusterSpec, state_dir: Path, *args: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``docker compose -p kctl-<name> -f <state>/compose.yaml ARGS``."""
    return compose_project(spec.project, state_dir / COMPOSE_FILE, *args, timeout=timeout, check=check,
                           hint="see `kctl status` and `kctl logs NODE`")


def compose_project(project: str, compose_file: Path, *args: str, timeout: float = 600, check: bool = True,
                    what: str = "", hint: str) -> subprocess.CompletedProcess[str]:
    """``docker compose -p PROJECT -f FILE ARGS`` in the file's directory: the cluster's own project, and those
    kctl runs beside it (Prometheus, the mirrors); ``what`` names the latter in errors."""
    argv = [*compose_binary(), "-p", project, "-f", str(compose_file), *args]
    said = f"`docker compose {' '.join(args)}`" + (f" of {what}" if what else "")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=compose_file.parent)
    except subprocess.TimeoutExpired:
        raise KctlError(f"{said} did not finish in {timeout:.0f}s", hint=hint) from None
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip()
        if "docker compose" in err and "is not a docker command" in err or "unknown shorthand flag: 'p'" in err:
            raise DockerUnavailable("the Docker Compose v2 plugin is missing",
                                    hint="install it as ~/.docker/cli-plugins/docker-compose (`make setup`)")
        if "Cannot connect to the Docker daemon" in err:
            raise DockerUnavailable("Docker engine not reachable", hint=ENGINE_HINT)
        raise KctlError(f"{said} failed: {err[-2000:]}",
                        hint=hint + ("" if what else "; `kctl down` removes what was created"))
    return proc


RESTART_POLICY = "unless-stopped"  # the Compose file's `restart:` of every node (kctl.model.render)


def keep_restarting(spec: ClusterSpec, dc: Any) -> list[str]:
    """The cluster's node containers made before kctl gave them ``restart: unless-stopped`` get it now, in place
    (``docker update``: no restart, no recreate), so a daemon restart or a reboot brings them back; their hosts.
    Nothing else changes them: their config hash leaves the Compose-only keys out."""
    done: list[str] = []
    for c in api.sdk_containers(spec.name, dc):
        if not (c.labels or {}).get(LABEL_NODE):
            continue  # not a node: Prometheus, a mirror (which have their own policy)
        policy = (((c.attrs or {}).get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"
        if policy != RESTART_POLICY:
            c.update(restart_policy={"Name": RESTART_POLICY})
            done.append(api.host_of(c))
    return sorted(done)


def start_left_created(spec: ClusterSpec, dc: Any, services: list[str]) -> None:
    """A node container that `docker compose up -d` left Created (it answered 0, but the engine never started
    the container: a CI run saw one sit so until `kctl up`'s 300 s wait ran out) is started here, so that the
    engine's own reason (a host port another process took since the preflight, most often) is the error the
    operator reads at once."""
    for c in api.sdk_containers(spec.name, dc):
        if api.host_of(c) not in services or c.status != "created":
            continue
        try:
            c.start()
        except api.sdk().errors.APIError as exc:
            reason = str(getattr(exc, "explanation", None) or exc)
            raise KctlError(f"{api.host_of(c)}: the Docker engine did not start its container: {reason}",
                            hint="a host port taken since the preflight? `kctl doctor` checks the ports; then"
                                 " `kctl up` again (or `kctl down` removes what was created)") from None


class ComposeEngine(Engine):
    """Every container on this Docker engine, through Docker Compose (the project ``kctl-<name>``)."""

    kind = EngineKind.compose.value
    capabilities = frozenset({Capability.CONTAINERS, Capability.PORTS_BY_INDEX, Capability.DATA_IN_STATE_DIR,
                              Capability.DYNAMIC_QUORUM,
                              Capability.KRAFT_MIGRATION, Capability.CHOSEN_BY_FLAG, Capability.NODE_FAULTS})

    # ----- lifecycle --------------------------------------------------------------------

    def preflight(self, spec: ClusterSpec, existing: dict[str, ContainerInfo], dc: Any, say: Progress,
                  strict_spread: bool = False) -> None:
        compose_binary()
        owned = set(self.running_host_ports(spec)) if existing else set()
        taken = ports.taken(spec, owned)
        if taken:
            raise KctlError(f"cannot start {spec.name}: host ports in use on 127.0.0.1: {', '.join(taken)}",
                            hint=ports.TAKEN_HINT)
        if existing:
            for host in keep_restarting(spec, dc):
                say(f"{host}: restart policy unless-stopped (docker update; the container keeps running)")

    def deploy(self, spec: ClusterSpec, state_dir: Path, say: Progress, services: list[str]) -> None:
        run_compose(spec, state_dir, "up", "-d", "--no-deps", "--remove-orphans", "--no-build",
                    "--pull", "never", *services)
        start_left_created(spec, self.client(), services)

    def ps(self, spec: ClusterSpec, state_dir: Path) -> str:
        return run_compose(spec, state_dir, "ps", "-a", check=False).stdout

    def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: Any) -> int:
        if (state_dir / COMPOSE_FILE).exists():
            args = ["down", "--remove-orphans", "--timeout", "120"]
            if volumes:
                args.append("--volumes")
            run_compose(spec, state_dir, *args, check=False)
        return api.remove_by_label(spec.name, dc, volumes=True)

    def start_one(self, spec: ClusterSpec, state_dir: Path, host: str, say: Progress | None = None) -> None:
        run_compose(spec, state_dir, "up", "-d", "--no-deps", "--no-build", "--pull", "never", host)

    def recreate_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        run_compose(spec, state_dir, "up", "-d", "--no-deps", "--force-recreate", "--no-build",
                    "--pull", "never", host)

    def remove_one(self, spec: ClusterSpec, host: str, *, stop_timeout: int = 180, keep_data: bool = False) -> bool:
        dc = self.client()
        found = [c for c in self.containers(spec, dc) if c.name == host]
        if not found:
            return False
        container = dc.containers.get(found[0].id)
        if found[0].state == "running":
            container.stop(timeout=stop_timeout)
        container.remove(v=not keep_data)  # the data are bind mounts of the state dir: only anonymous volumes go
        return True

    # ----- faults -----------------------------------------------------------------------

    def stop_node(self, spec: ClusterSpec, host: str, container: Any) -> None:
        container.stop(timeout=120)

    def start_node(self, spec: ClusterSpec, host: str, container: Any, dc: Any, *, killed_id: str | None,
                   timeout: float) -> None:
        container.start()

    def cut_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> None:
        dc.networks.get(spec.project).disconnect(container)

    def mend_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> bool:
        container.reload()
        if spec.project in ((container.attrs.get("NetworkSettings") or {}).get("Networks") or {}):
            return False
        dc.networks.get(spec.project).connect(container, aliases=[host])
        return True
