"""The seam every Docker call for a cluster's containers goes through: Compose or Swarm.

``for_spec(spec)`` picks the implementation of the abstract :class:`Engine` from ``spec.engine``; the rest of
kctl asks it for the cluster's containers, runs commands in them, deploys and removes them, injects faults into
them, and never knows which one runs.

- :class:`kctl.runtime.engine.compose.ComposeEngine`: every container on this Docker engine, through
  ``docker compose``.
- :class:`kctl.runtime.engine.swarm.SwarmEngine`: one Swarm service per container host, deployed as a stack with
  ``docker stack deploy`` from the same rendered file (its ``deploy:`` sections), each pinned to a
  Swarm node by a node label.
- :class:`kctl.runtime.engine.hosts.HostsEngine`: every node a host of its own, its systemd units installed from
  kctl's bundle over ssh; no Docker.

What a caller needs that not every engine does (containers, Swarm labels, a KRaft controller beside each
broker, ...) it asks with ``supports(spec, capability)`` (:class:`kctl.runtime.engine.base.Capability`), answered
by the class of ``spec.engine`` without a client: no code above the seam compares ``spec.engine`` to a kind.

The direction: :mod:`kctl.runtime.docker_api` (the SDK) <- :mod:`kctl.runtime.engine.base` (the abstract
Engine) <- compose, swarm, hosts <- this module. Swarm's and the hosts' modules are put off through
:mod:`kctl.deferred` (imported at the top, loaded when ``implementation`` first reads their class), so a command
on a Compose cluster never loads ssh, the bundles and the image builder the hosts' engine brings; no
implementation imports this module.

No docker SDK import at module level: the status path imports this module.
"""

from __future__ import annotations

from typing import Any

from kctl.deferred import defer_import
from kctl.model.spec import ClusterSpec
from kctl.model.spec import Engine as EngineKind
from kctl.runtime import docker_api as api
from kctl.runtime.docker_api import Container, ContainerInfo, engine_of, state_dir_of
from kctl.runtime.engine.base import Capability, Engine, Progress, WrongEngine, check_engine
from kctl.runtime.engine.compose import ComposeEngine

defer_import("kctl.runtime.engine.hosts")
defer_import("kctl.runtime.engine.swarm")

from kctl.runtime.engine import hosts, swarm  # noqa: E402

__all__ = ["Capability", "Container", "ContainerInfo", "Engine", "Progress", "WrongEngine", "check_engine",
           "engine_of", "for_spec", "implementation", "process_states", "state_dir_of", "supports"]


def implementation(kind: EngineKind) -> type[Engine]:
    """The :class:`Engine` class of an engine kind. Its module is imported here, when first asked for: the
    status path loads the one implementation its cluster runs on (its start-up budget, docs/benchmarks.md)."""
    if kind is EngineKind.swarm:
        return swarm.SwarmEngine
    if kind is EngineKind.hosts:
        return hosts.HostsEngine

    return ComposeEngine


def for_spec(spec: ClusterSpec) -> Engine:
    """The engine implementation of ``spec.engine``."""
    return implementation(spec.engine)()


def supports(spec: ClusterSpec, capability: Capability) -> bool:
    """Whether the engine ``spec`` runs on supports ``capability``: asked of its class (no Docker, no ssh, no
    client made). What callers outside the engine seam ask instead of comparing ``spec.engine`` to a kind."""
    return implementation(spec.engine).supports(capability)


# ----- the calls the rest of kctl makes (each dispatches on spec.engine) -------------------------


def client(spec: ClusterSpec, timeout: int = 30) -> Any:
    return for_spec(spec).client(timeout)


def containers(spec: ClusterSpec, dc: Any | None = None) -> list[ContainerInfo]:
    return for_spec(spec).containers(spec, dc)


def observe(spec: ClusterSpec, timeout: float = 5.0) -> list[Container]:
    return for_spec(spec).observe(spec, timeout)


def exec_in(spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
            timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
    return for_spec(spec).exec_in(spec, name, argv, user=user, timeout=timeout, dc=dc, stderr=stderr)


def process_states(spec: ClusterSpec, host: str, timeout: float = 30.0) -> dict[str, str]:
    return for_spec(spec).process_states(spec, host, timeout)


def running_host_ports(spec: ClusterSpec) -> list[int]:
    return for_spec(spec).running_host_ports(spec)


def every_kctl_container(timeout: float = 5.0) -> list[Container]:
    """The containers of every kctl cluster on this engine (which cluster holds which port)."""
    return api.listed(None, api.StatusClient(timeout))

