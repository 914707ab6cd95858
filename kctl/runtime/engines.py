"""The one interface every Docker call for a cluster's containers goes through: Compose or Swarm.

``for_spec(spec)`` picks the implementation from ``spec.engine``; the rest of kctl asks it for the
cluster's containers, runs commands in them, deploys and removes them, and never knows which one runs.

- :class:`ComposeEngine`: every container on this Docker engine, through ``docker compose``
  (:mod:`kctl.runtime.compose`).
- :class:`SwarmEngine`: one Swarm service per container host, deployed as a stack with
  ``docker stack deploy`` from the same rendered file (its ``deploy:`` sections), each pinned to a
  Swarm node by a node label (:mod:`kctl.runtime.swarm`).

No docker SDK import at module level: the status path imports this module.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl.errors import KctlError
from kctl.runtime import engine as api
from kctl.spec import ClusterSpec
from kctl.spec import Engine as EngineKind

if TYPE_CHECKING:
    from kctl.runtime.compose import ContainerInfo

Progress = Callable[[str], None]


class Engine:
    """What kctl needs from Docker for one cluster's containers."""

    kind = "?"
    # Whether a file written into the state dir reaches the node's processes when they restart (Compose: the
    # conf dir is a bind mount). Swarm delivers them as Swarm configs, which only a deploy replaces.
    files_reach_a_restart = True

    # ----- clients and containers --------------------------------------------------------

    def client(self, timeout: int = 30) -> Any:
        """A docker SDK client of the engine kctl talks to (a Swarm manager on Swarm)."""
        from kctl.runtime import compose

        return compose.client(timeout)

    def containers(self, spec: ClusterSpec, dc: Any | None = None) -> list[ContainerInfo]:
        """Every container of the cluster this engine can see, running or not, in service-name order;
        :class:`WrongEngine` when the cluster's containers were made by the other engine."""
        from kctl.runtime import compose

        found = compose.containers(spec, dc)
        check_engine(spec, [(c.name, c.engine) for c in found])
        return found

    def observe(self, spec: ClusterSpec, timeout: float = 5.0) -> list[api.Container]:
        """The status path's cheap view of the cluster's containers (no SDK)."""
        return api.containers(spec.name, timeout=timeout)

    def processes(self, c: api.Container, timeout: float = 5.0) -> dict[str, str]:
        return api.processes(c.id, c.services, timeout)

    def running_host_ports(self, spec: ClusterSpec) -> list[int]:
        from kctl.runtime import compose

        return compose.running_host_ports(spec)

    def exec_in(self, spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
                timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
        from kctl.runtime import compose

        return compose.exec_in(spec, name, argv, user=user, timeout=timeout, dc=dc, stderr=stderr)

    # ----- lifecycle --------------------------------------------------------------------

    def preflight(self, spec: ClusterSpec, existing: dict[str, ContainerInfo], dc: Any, say: Progress,
                  strict_spread: bool = False) -> None:
        """Everything checked before anything is deployed (KctlError: nothing was touched)."""
        raise NotImplementedError

    def deploy(self, spec: ClusterSpec, state_dir: Path, say: Progress, services: list[str]) -> None:
        """Converge the rendered files in ``state_dir`` (already written): create or make again
        ``services``, the nodes the plan names; the others stay as they run."""
        raise NotImplementedError

    def ps(self, spec: ClusterSpec, state_dir: Path) -> str:
        """The engine's own view of the cluster, for a readiness timeout's report."""
        raise NotImplementedError

    def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: Any) -> int:
        """Remove the cluster's containers (and its volumes with ``volumes``); processes already stopped."""
        raise NotImplementedError

    def start_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        raise NotImplementedError

    def recreate_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        """Make one container again from the rendered files (the others untouched)."""
        raise NotImplementedError

    def remove_one(self, spec: ClusterSpec, host: str, *, stop_timeout: int = 180) -> bool:
        raise NotImplementedError

    def log_lines(self, spec: ClusterSpec, host: str, path: str, tail: int) -> list[str] | None:
        """The last lines of a log file in a container, or None where the state dir has it on this host."""
        return None


class ComposeEngine(Engine):
    """Every container on this Docker engine, through Docker Compose (the project ``kctl-<name>``)."""

    kind = EngineKind.compose.value

    def preflight(self, spec: ClusterSpec, existing: dict[str, ContainerInfo], dc: Any, say: Progress,
                  strict_spread: bool = False) -> None:
        from kctl import doctor
        from kctl.errors import KctlError
        from kctl.runtime import compose

        compose.compose_binary()
        owned = set(self.running_host_ports(spec)) if existing else set()
        chk = doctor.check_ports(spec, owned)
        if not chk.ok:
            raise KctlError(f"cannot start {spec.name}: host ports {chk.detail}", hint=chk.hint)

    def deploy(self, spec: ClusterSpec, state_dir: Path, say: Progress, services: list[str]) -> None:
        from kctl.runtime import compose

        compose.run_compose(spec, state_dir, "up", "-d", "--no-deps", "--remove-orphans", "--no-build",
                            "--pull", "never", *services)

    def ps(self, spec: ClusterSpec, state_dir: Path) -> str:
        from kctl.runtime import compose

        return compose.run_compose(spec, state_dir, "ps", "-a", check=False).stdout

    def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: Any) -> int:
        from kctl.render import COMPOSE_FILE
        from kctl.runtime import compose

        if (state_dir / COMPOSE_FILE).exists():
            args = ["down", "--remove-orphans", "--timeout", "120"]
            if volumes:
                args.append("--volumes")
            compose.run_compose(spec, state_dir, *args, check=False)
        return compose.remove_by_label(spec.name, dc, volumes=True)

    def start_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        from kctl.runtime import compose

        compose.run_compose(spec, state_dir, "up", "-d", "--no-deps", "--no-build", "--pull", "never", host)

    def recreate_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        from kctl.runtime import compose

        compose.run_compose(spec, state_dir, "up", "-d", "--no-deps", "--force-recreate", "--no-build",
                            "--pull", "never", host)

    def remove_one(self, spec: ClusterSpec, host: str, *, stop_timeout: int = 180) -> bool:
        from kctl.runtime import compose

        dc = compose.client()
        found = [c for c in self.containers(spec, dc) if c.name == host]
        if not found:
            return False
        container = dc.containers.get(found[0].id)
        if found[0].state == "running":
            container.stop(timeout=stop_timeout)
        container.remove(v=True)
        return True


class WrongEngine(KctlError):
    """The cluster's containers were made by the other engine than the spec names; nothing was changed."""

    exit_code = 2


def check_engine(spec: ClusterSpec, found: list[tuple[str, str]]) -> None:
    """WrongEngine when any (container host, engine that made it) of the cluster is not ``spec.engine``'s:
    a Compose command never touches a Swarm stack's containers, nor the reverse."""
    other = sorted({host for host, kind in found if kind != spec.engine.value})
    if not other:
        return
    theirs = next(kind for _host, kind in found if kind != spec.engine.value)
    how = f"as the Swarm stack {spec.project}" if theirs == EngineKind.swarm.value else \
        f"as the Compose project {spec.project}"
    raise WrongEngine(
        f"cluster {spec.name!r} runs on engine {theirs} ({how}: {', '.join(other)}), but this kctl.yaml says engine"
        f" {spec.engine.value}; nothing was changed",
        hint=f"set `engine: {theirs}` in kctl.yaml (or leave `engine:` out: the state dir records what `kctl up"
             f" --engine` chose); to move the cluster, `kctl down` it with engine {theirs} first")


def for_spec(spec: ClusterSpec) -> Engine:
    """The engine implementation of ``spec.engine``."""
    if spec.engine is EngineKind.swarm:
        from kctl.runtime.swarm import SwarmEngine

        return SwarmEngine()
    return ComposeEngine()


# ----- the calls the rest of kctl makes (each dispatches on spec.engine) -------------------------


def client(spec: ClusterSpec, timeout: int = 30) -> Any:
    return for_spec(spec).client(timeout)


def containers(spec: ClusterSpec, dc: Any | None = None) -> list[ContainerInfo]:
    return for_spec(spec).containers(spec, dc)


def observe(spec: ClusterSpec, timeout: float = 5.0) -> list[api.Container]:
    return for_spec(spec).observe(spec, timeout)


def exec_in(spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
            timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
    return for_spec(spec).exec_in(spec, name, argv, user=user, timeout=timeout, dc=dc, stderr=stderr)


def running_host_ports(spec: ClusterSpec) -> list[int]:
    return for_spec(spec).running_host_ports(spec)


def run_docker(argv: list[str], *, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``docker ARGV`` (the CLI: stack deploy has no Engine API call); KctlError on a timeout."""
    from kctl.errors import KctlError
    from kctl.runtime import compose

    compose.compose_binary()  # the docker client on PATH, or DockerUnavailable
    try:
        return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise KctlError(f"`docker {' '.join(argv[:3])}` did not finish in {timeout:.0f}s",
                        hint="see `kctl status`") from None
