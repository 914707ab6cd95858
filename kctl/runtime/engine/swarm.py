"""engine swarm: the cluster as a Docker stack, one service per container host, each pinned to a Swarm node.

The stack file is the cluster's rendered ``compose.yaml`` (its ``deploy:`` sections, Swarm configs for the
conf files, named volumes for data and logs); ``docker stack deploy`` deploys it. Every service is pinned by
a placement constraint on a node label (``contract.swarm_placement_label``) that kctl sets: from
``nodes[].swarm_node``, else round-robin over the Swarm's ready nodes.

Reach: kctl talks to one engine, a Swarm manager. It sees (and runs commands in) the containers of the tasks
on that engine; of tasks on other Swarm nodes it sees the Swarm's task state only. ZooKeeper and Kafka are
reached on each node's published ports at ``spec.node_address(node)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kctl import contract
from kctl.contract import COMPOSE_FILE
from kctl.errors import DockerUnavailable, KctlError
from kctl.model.properties import services_of
from kctl.model.spec import ClusterSpec
from kctl.model.spec import Engine as EngineKind
from kctl.runtime import docker_api as api
from kctl.runtime import ports as machine_ports
from kctl.runtime.docker_api import Container, ContainerInfo, run_docker
from kctl.runtime.engine.base import Capability, Engine, Progress
from kctl.security import store
from kctl.wait import Stage, wait_for_stages

INIT_HINT = ("make this engine a Swarm manager: `docker swarm init --advertise-addr <this host's address>` "
             "(a one-node Swarm; others join with `docker swarm join`), or run kctl where DOCKER_HOST names a "
             "manager; `engine: compose` runs the cluster on this engine alone (docs/multi-host.md)")
REMOVE_WAIT = 120.0
START_WAIT = 180.0  # a new service's task running (its image on the Swarm node already: --resolve-image never)
# iptables chain of a network cut (every packet but loopback dropped)
CUT_CHAIN = "KCTL_CUT"
STACK_FILE = "stack.yaml"  # compose.yaml with the secured profile's Swarm secrets (names of files, no content)


@dataclass(frozen=True)
class SwarmNode:
    id: str
    hostname: str
    addr: str
    labels: dict[str, str]
    manager: bool


@dataclass(frozen=True)
class Placement:
    """Which Swarm node runs each container host's service, and what kctl had to say about it."""

    hosts: dict[str, SwarmNode]  # container host -> Swarm node
    warnings: list[str]


def service_name(spec: ClusterSpec, host: str) -> str:
    return f"{spec.project}_{host}"


def local_state(dc: Any) -> tuple[str, bool, str]:
    """(LocalNodeState, ControlAvailable, NodeID) of the engine kctl talks to."""
    info = dc.info()
    sw = info.get("Swarm") or {}
    return str(sw.get("LocalNodeState") or "inactive"), bool(sw.get("ControlAvailable")), str(sw.get("NodeID") or "")


def require_manager(dc: Any) -> str:
    """The local node id; KctlError (nothing touched) when this engine is not a Swarm manager."""
    state, manager, node_id = local_state(dc)
    if state != "active":
        raise KctlError(f"engine swarm: this Docker engine is not in a Swarm (Swarm state: {state})", hint=INIT_HINT)
    if not manager:
        raise KctlError("engine swarm: this Docker engine is a Swarm worker, not a manager: it cannot deploy a stack",
                        hint="run kctl on a manager (`docker node ls` there), or `docker node promote` this node")
    return node_id


def nodes(dc: Any) -> list[SwarmNode]:
    """The Swarm's ready, active nodes, managers first, then by hostname."""
    out = []
    for n in dc.nodes.list():
        a = n.attrs
        if (a.get("Status") or {}).get("State") != "ready" or (a.get("Spec") or {}).get("Availability") != "active":
            continue
        out.append(SwarmNode(id=a["ID"], hostname=(a.get("Description") or {}).get("Hostname", a["ID"]),
                             addr=(a.get("Status") or {}).get("Addr", ""),
                             labels=dict((a.get("Spec") or {}).get("Labels") or {}),
                             manager="ManagerStatus" in a))
    return sorted(out, key=lambda n: (not n.manager, n.hostname))


def plan_placement(spec: ClusterSpec, swarm_nodes: list[SwarmNode], strict_spread: bool = False) -> Placement:
    """Pure: each container host's Swarm node (``nodes[].swarm_node``, else the node already labelled for it,
    else round-robin), and the warnings; KctlError when a named node is not in the Swarm, or with
    ``strict_spread`` when two kctl nodes would share a Swarm node."""
    if not swarm_nodes:
        raise KctlError("engine swarm: the Swarm has no ready, active node", hint="`docker node ls`")
    by_name = {n.hostname: n for n in swarm_nodes} | {n.id: n for n in swarm_nodes}
    hosts: dict[str, SwarmNode] = {}
    node_index = {n.id: i for i, n in enumerate(spec.nodes)}
    for host, node, _services in services_of(spec):
        if node.swarm_node:
            target = by_name.get(node.swarm_node)
            if target is None:
                known = ", ".join(n.hostname for n in swarm_nodes)
                raise KctlError(f"nodes.{node_index[node.id]}.swarm_node: {node.swarm_node!r} is not a ready node of"
                                f" this Swarm", hint=f"ready nodes: {known} (`docker node ls`)")
        else:
            label = contract.swarm_placement_label(spec.name, host)
            labelled = [n for n in swarm_nodes if n.labels.get(label) == "true"]
            # A node labelled by an earlier up keeps its service (its data volume is there).
            target = labelled[0] if len(labelled) == 1 else swarm_nodes[node_index[node.id] % len(swarm_nodes)]
        hosts[host] = target
    warnings = []
    per_kctl_node: dict[str, set[int]] = {}
    for host, node, _s in services_of(spec):
        per_kctl_node.setdefault(hosts[host].id, set()).add(node.id)
    shared = {sid: ids for sid, ids in per_kctl_node.items() if len(ids) > 1}
    if shared:
        names = {n.id: n.hostname for n in swarm_nodes}
        detail = "; ".join(f"{names[sid]} runs nodes {', '.join(map(str, sorted(ids)))}" for sid, ids in shared.items())
        msg = (f"{len(swarm_nodes)} Swarm node(s) for {len(spec.nodes)} kctl nodes: {detail}; the ZooKeeper quorum"
               " then depends on one host")
        if strict_spread:
            raise KctlError(f"engine swarm: {msg}", hint="join more nodes (`docker swarm join`), or deploy without"
                                                         " --strict-spread to accept it")
        warnings.append(msg)
    return Placement(hosts, warnings)


def _published(spec: ClusterSpec) -> dict[str, list[tuple[int, str]]]:
    """container host -> [(published port, what)]."""
    out: dict[str, list[tuple[int, str]]] = {}
    for host, node, services in services_of(spec):
        ports = out.setdefault(host, [])
        ports.extend((port, f"{host} {what.removesuffix('_port').replace('_', ' ')}")
                     for port, service, what in spec.published_ports(node) if service in services)
    return out


def taken_ports(spec: ClusterSpec, dc: Any, placement: Placement, local_id: str, owned: set[int]) -> list[str]:
    """Published ports already used on the Swarm node that would run them: by another Swarm service with a
    host-mode port there, or (on this engine's own node) by anything listening."""
    mine = {service_name(spec, h) for h in placement.hosts}
    used: dict[tuple[str, int], str] = {}  # (node id, port) -> service
    for svc in dc.services.list():
        name = svc.name
        if name in mine:
            continue
        ports = [p for p in ((svc.attrs.get("Endpoint") or {}).get("Ports") or [])
                 if p.get("PublishMode") == "host" and p.get("PublishedPort")]
        ports += [p for p in (((svc.attrs.get("Spec") or {}).get("EndpointSpec") or {}).get("Ports") or [])
                  if p.get("PublishMode") == "host" and p.get("PublishedPort")]
        if not ports:
            continue
        for task in svc.tasks(filters={"desired-state": "running"}):
            for p in ports:
                used[(str(task.get("NodeID")), int(p["PublishedPort"]))] = name
    out = []
    for host, ports in _published(spec).items():
        target = placement.hosts[host]
        for port, what in ports:
            other = used.get((target.id, port))
            if other:
                out.append(f"{port} ({what}) on {target.hostname}: published by service {other}")
            elif target.id == local_id and port not in owned and not machine_ports.port_free(port, "0.0.0.0"):
                out.append(f"{port} ({what}) on {target.hostname}: in use")
    return out


LABEL_UPDATE_WAIT = 30.0  # a node's labels written against a version that another update got in before


def relabel(dc: Any, change: Callable[[str, dict[str, str]], dict[str, str]]) -> list[tuple[str, list[str]]]:
    """Set each Swarm node's labels to ``change(node id, its labels)``; (hostname, labels added) per node changed.

    Swarm takes a node's update only at the version it was read at, and a node's version moves under kctl's
    feet (its own status reports, another manager's or kctl command's update): "update out of sequence". The
    node is read again and the change made again on its fresh labels, until written or ``LABEL_UPDATE_WAIT``.
    """
    changed: list[tuple[str, list[str]]] = []
    refused: list[Exception] = []  # any other refusal ends the wait and is raised as it came
    for n in dc.nodes.list():
        added: list[str] = []

        def write(n: Any = n, added: list[str] = added) -> tuple[bool, str]:
            spec_ = dict(n.attrs.get("Spec") or {})
            labels = dict(spec_.get("Labels") or {})
            new = change(n.id, labels)
            if new == labels:
                return True, "unchanged"
            spec_["Labels"] = new
            try:
                n.update(spec_)
            except api.sdk().errors.APIError as e:
                if "out of sequence" not in str(e):
                    refused.append(e)
                    return True, "refused"
                n.reload()
                return False, f"node {n.id}: {e.explanation or e}"
            added[:] = sorted(set(new) - set(labels))
            changed.append(((n.attrs.get("Description") or {}).get("Hostname", n.id), added))
            return True, "written"

        wait_for_stages([Stage("a Swarm node's labels written", write)], timeout=LABEL_UPDATE_WAIT, poll=0.5)
        if refused:
            raise refused[0]
    return changed


def set_labels(spec: ClusterSpec, dc: Any, placement: Placement, say: Progress) -> None:
    """Label each chosen Swarm node for its container hosts, and unlabel the others (``kctl swarm label``)."""
    wanted: dict[str, set[str]] = {}
    for host, target in placement.hosts.items():
        wanted.setdefault(target.id, set()).add(contract.swarm_placement_label(spec.name, host))
    prefix = f"{contract.LABEL_SWARM_PLACEMENT_PREFIX}.{spec.name}."

    def change(node_id: str, labels: dict[str, str]) -> dict[str, str]:
        keep = {k: v for k, v in labels.items() if not k.startswith(prefix)}
        return keep | {k: "true" for k in wanted.get(node_id, set())}

    for hostname, added in relabel(dc, change):
        if added:
            say(f"swarm node {hostname}: labelled " + ", ".join(k.removeprefix(prefix) for k in added))


def label(spec: ClusterSpec, strict_spread: bool = False, say: Progress | None = None) -> Placement:
    """``kctl swarm label``: place and label, without deploying."""
    eng = SwarmEngine()
    dc = eng.client()
    require_manager(dc)
    placement = plan_placement(spec, nodes(dc), strict_spread)
    set_labels(spec, dc, placement, say or (lambda _m: None))
    return placement


def push_image(spec: ClusterSpec, dc: Any, say: Progress) -> None:
    """Tag the local node image with ``image.registry`` and push it, so every Swarm node can pull it."""
    push_as(dc, spec.local_image_ref, spec.image_ref, say)


def push_as(dc: Any, local: str, remote: str, say: Progress) -> None:
    """Tag the local image ``local`` as ``remote`` (a registry's name) and push it there."""
    repo, _, tag = remote.rpartition(":")
    dc.images.get(local).tag(repo, tag)
    say(f"pushing {remote}")
    proc = run_docker(["push", remote], timeout=900)
    if proc.returncode != 0:
        raise KctlError(f"cannot push {remote}: {(proc.stderr or proc.stdout).strip()[-500:]}",
                        hint="is the registry reachable, and does `docker login` know it? see docs/multi-host.md")


def service_logs(service: str, tail: int, follow: bool) -> Iterator[str]:
    """A service's log as Swarm gathers it from the node that runs its task (``docker service logs``); with
    ``follow``, new lines until stopped."""
    argv = ["service", "logs", "--raw", "--no-task-ids", "--tail", str(tail)]
    if not follow:
        proc = run_docker([*argv, service], timeout=60)
        if proc.returncode != 0:
            raise KctlError(f"no log of {service}: {(proc.stderr or proc.stdout).strip()[-400:]}",
                            hint="is it deployed? `kctl status` lists it, `kctl up` starts it")
        yield from (proc.stdout + proc.stderr).splitlines()
        return
    yield from api.stream_lines([api.docker_binary(), *argv, "--follow", service], with_stderr=True)


def _said(proc: Any) -> str:
    return str(proc.stderr or proc.stdout).strip()[-800:]


def one_service_stack(data: dict[str, Any], host: str) -> dict[str, Any]:
    """Pure: the rendered stack file cut down to ``host``'s service and the configs and volumes it uses."""
    services = data.get("services") or {}
    if host not in services:
        raise KctlError(f"the rendered stack file has no service {host}", hint="`kctl render`")
    svc = services[host]
    used_configs = {c["source"] if isinstance(c, dict) else str(c) for c in svc.get("configs") or []}
    used_volumes = {(v.split(":", 1)[0] if isinstance(v, str) else str(v.get("source"))) for v in
                    svc.get("volumes") or []}
    out = {k: v for k, v in data.items() if k not in ("services", "configs", "volumes")}
    out["services"] = {host: svc}
    configs = {k: v for k, v in (data.get("configs") or {}).items() if k in used_configs}
    volumes = {k: v for k, v in (data.get("volumes") or {}).items() if k in used_volumes}
    if configs:
        out["configs"] = configs
    if volumes:
        out["volumes"] = volumes
    return out


def secret_name(spec: ClusterSpec, host: str, filename: str, data: bytes) -> str:
    """A Swarm secret's name: secrets are immutable, so a changed file is a new secret (its hash in the name)."""
    import hashlib

    digest = hashlib.sha256(data).hexdigest()[:10]
    return f"{spec.project}-{host}-{filename.replace('.', '-')}-{digest}"[-64:].lstrip("-_.")


def with_secrets(spec: ClusterSpec, state_dir: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The stack file with the secured profile's files of each service's container host as Swarm secrets,
    mounted where the Compose engine bind-mounts them (``contract.SECRETS_MOUNT``, mode 0400, root's; the
    entrypoint copies them for the JVMs' user as on Compose). Swarm keeps them encrypted in its Raft log and
    gives each task only its own; the stack file names the files, never their contents."""
    if not spec.security.enabled:
        return data

    root = store.secrets_dir(state_dir)
    top: dict[str, Any] = {}
    out = {**data, "services": {}}
    for host, svc in (data.get("services") or {}).items():
        entries = []
        folder = root / host
        for f in sorted(folder.iterdir()) if folder.is_dir() else []:
            if not f.is_file():
                continue
            key = f"{host}-{f.name.replace('.', '-')}-secret"
            top[key] = {"name": secret_name(spec, host, f.name, f.read_bytes()),
                        "file": str(f.relative_to(state_dir))}
            entries.append({"source": key, "target": f"{contract.SECRETS_MOUNT}/{f.name}", "mode": 0o400})
        if not entries:
            raise store.missing(spec, state_dir)
        out["services"][host] = {**svc, "secrets": entries}
    out["secrets"] = top
    return out


def write_stack(spec: ClusterSpec, state_dir: Path, data: dict[str, Any], name: str) -> Path:
    """Write a stack file (the rendered one, cut or with its secrets) into the state dir for a deploy."""

    path = state_dir / name
    path.write_text(yaml.safe_dump(with_secrets(spec, state_dir, data), sort_keys=False), encoding="utf-8")
    return path


def _dedupe(found: list[Any], name: Any, running: Any) -> list[Any]:
    """One entry per container host: Swarm keeps earlier tasks' exited containers; the running one wins."""
    best: dict[str, Any] = {}
    for c in found:
        cur = best.get(name(c))
        if cur is None or (running(c) and not running(cur)):
            best[name(c)] = c
    return [best[k] for k in sorted(best)]


class SwarmEngine(Engine):
    """The cluster as a Docker stack ``kctl-<name>`` on the Swarm this engine manages."""

    kind = EngineKind.swarm.value
    # Its data is in volumes on the Swarm node that runs each task, not in the state dir.
    capabilities = frozenset({Capability.CONTAINERS, Capability.PORTS_BY_INDEX, Capability.SWARM_LABELS,
                              Capability.KRAFT_MIGRATION, Capability.CHOSEN_BY_FLAG, Capability.NODE_FAULTS,
                              Capability.DYNAMIC_QUORUM, Capability.SPARK_ON_SWARM})
    files_reach_a_restart = False

    logs_in_state_dir = False

    def containers(self, spec: ClusterSpec, dc: Any | None = None) -> list[ContainerInfo]:
        return _dedupe(super().containers(spec, dc), lambda c: c.name, lambda c: c.state == "running")

    def observe(self, spec: ClusterSpec, timeout: float = 5.0) -> list[Container]:
        local = super().observe(spec, timeout)
        seen = _dedupe(local, lambda c: c.name, lambda c: c.state == "running")
        mine = {c.name for c in seen if c.state == "running"}
        return sorted(seen + [t for t in self._remote_tasks(spec, timeout) if t.name not in mine],
                      key=lambda c: c.name)

    def _remote_tasks(self, spec: ClusterSpec, timeout: float) -> list[Container]:
        """The running tasks on other Swarm nodes, as the Swarm reports them (no process table: not this engine)."""
        sc = self._status or api.StatusClient(timeout)
        try:
            sw = (sc.call(lambda a: a.info()) or {}).get("Swarm") or {}
            if not sw.get("ControlAvailable"):
                return []
            local = sw.get("NodeID")
            tasks = sc.call(lambda a: a.tasks(filters={"desired-state": "running"})) or []
        except DockerUnavailable:
            return []
        out = []
        for t in tasks:
            if t.get("NodeID") == local:
                continue
            labels = ((t.get("Spec") or {}).get("ContainerSpec") or {}).get("Labels") or {}
            if labels.get(contract.LABEL_CLUSTER) != spec.name:
                continue
            status = t.get("Status") or {}
            out.append(Container(
                id=str((status.get("ContainerStatus") or {}).get("ContainerID") or t.get("ID")),
                name=labels.get(contract.LABEL_SERVICE, ""),
                node=labels.get(contract.LABEL_NODE, ""),
                services=api.services_of_labels(labels),
                state=str(status.get("State") or "unknown"),
                health=None,
                config_hash=labels.get(contract.LABEL_HASH),
                cluster=spec.name,
                state_dir=api.state_dir_of(labels),
                remote=True,
                engine=EngineKind.swarm.value,
            ))
        return out

    def processes(self, c: Container, timeout: float = 5.0) -> dict[str, str]:
        return {} if c.remote else super().processes(c, timeout)

    def not_here(self, spec: ClusterSpec, host: str) -> None:
        if [c for c in self._remote_tasks(spec, 5.0) if c.name == host]:
            raise KctlError(f"{host} runs on another Swarm node: kctl acts only on the containers of the engine it"
                            " talks to",
                            hint="point DOCKER_HOST at that node's engine for this command (docs/multi-host.md)")

    # ----- lifecycle --------------------------------------------------------------------

    def preflight(self, spec: ClusterSpec, existing: dict[str, ContainerInfo], dc: Any, say: Progress,
                  strict_spread: bool = False) -> None:
        local_id = require_manager(dc)
        placement = plan_placement(spec, nodes(dc), strict_spread)
        for w in placement.warnings:
            say(f"warning: {w}")
        owned = set(self.running_host_ports(spec)) if existing else set()
        taken = taken_ports(spec, dc, placement, local_id, owned)
        if taken:
            raise KctlError(f"cannot deploy {spec.name}: published ports taken: " + "; ".join(taken),
                            hint="free them, or change zookeeper.host_port_base / kafka.external_port_base"
                                 " (or nodes[].kafka_port) in kctl.yaml")
        self._placement = placement

    def deploy(self, spec: ClusterSpec, state_dir: Path, say: Progress, services: list[str]) -> None:
        """`docker stack deploy` of the whole stack: Swarm updates every service whose definition changed
        (it cannot be told to leave one alone), so ``services`` is informational here."""
        dc = self.client()
        placement = getattr(self, "_placement", None) or plan_placement(spec, nodes(dc))
        if spec.image.registry:
            push_image(spec, dc, say)
        set_labels(spec, dc, placement, say)
        for host, target in placement.hosts.items():
            say(f"{host}: on swarm node {target.hostname}")
        say("swarm: published ports bind every interface of their node (Swarm cannot bind one address);"
            " see docs/multi-host.md for the firewall and the secured profile")
        stack_file = COMPOSE_FILE
        if spec.security.enabled:

            data = yaml.safe_load((state_dir / COMPOSE_FILE).read_text(encoding="utf-8"))
            stack_file = write_stack(spec, state_dir, data, STACK_FILE).name
        proc = run_docker(["stack", "deploy", "--detach=true", "--prune", "--resolve-image", "never",
                           "-c", stack_file, spec.project], timeout=300, cwd=state_dir)
        if proc.returncode != 0:
            raise KctlError(f"`docker stack deploy` failed: {(proc.stderr or proc.stdout).strip()[-2000:]}",
                            hint="see `docker stack ps --no-trunc " + spec.project + "`; `kctl down` removes it")

    def ps(self, spec: ClusterSpec, state_dir: Path) -> str:
        proc = run_docker(["stack", "ps", "--no-trunc", spec.project], timeout=30)
        return proc.stdout or proc.stderr

    def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: Any) -> int:
        stack = f"{contract.LABEL_STACK_NAMESPACE}={spec.project}"
        names = [s.name for s in dc.services.list(filters={"label": stack})]
        # the stack's network too: a `kctl down` without a quorum removed each service first (remove_one)
        if names or [n for n in dc.networks.list(names=[spec.project]) if n.name == spec.project]:
            proc = run_docker(["stack", "rm", spec.project], timeout=120)
            if proc.returncode != 0:
                raise KctlError(f"`docker stack rm` failed: {(proc.stderr or proc.stdout).strip()[-1000:]}",
                                hint="`docker stack ls`")
        # stack rm returns before the tasks' containers and the network are gone.
        def gone() -> tuple[bool, str]:
            left = sorted(c.name for c in api.infos(spec.name, dc) if c.state in ("running", "created", "restarting"))
            nets = [n.name for n in dc.networks.list(names=[spec.project]) if n.name == spec.project]
            return not left and not nets, (f"containers {', '.join(left)} still up; " if left else "") + (
                f"network {nets[0]} still there" if nets else "no network")

        try:
            wait_for_stages([Stage(f"stack {spec.project} removed by Swarm", gone)], timeout=REMOVE_WAIT, poll=1.0)
        finally:
            api.remove_by_label(spec.name, dc, volumes=True)  # exited task containers of earlier tasks
        if volumes:
            for v in dc.volumes.list(filters={"label": f"{contract.LABEL_CLUSTER}={spec.name}"}):
                if (v.attrs.get("Labels") or {}).get(contract.LABEL_STACK_NAMESPACE) == spec.project:
                    try:
                        v.remove(force=True)
                    except Exception:  # noqa: BLE001 - still in use by a container being removed: reported below
                        pass
            prefix = f"{contract.LABEL_SWARM_PLACEMENT_PREFIX}.{spec.name}."
            relabel(dc, lambda _id, labels: {k: v for k, v in labels.items() if not k.startswith(prefix)})
        return len(names)

    def start_one(self, spec: ClusterSpec, state_dir: Path, host: str, say: Progress | None = None) -> None:
        """A node added to the running stack (``kctl node add``): a stack file of its service alone, deployed
        without ``--prune``, so Swarm creates that one service and leaves every other one as it runs (their
        rendered files, which now list the new node, wait for the next ``kctl up``)."""


        dc = self.client()
        require_manager(dc)
        data = yaml.safe_load((state_dir / COMPOSE_FILE).read_text(encoding="utf-8"))
        path = write_stack(spec, state_dir, one_service_stack(data, host), f"stack-{host}.yaml")
        placement = plan_placement(spec, nodes(dc))
        set_labels(spec, dc, placement, lambda _m: None)
        proc = run_docker(["stack", "deploy", "--detach=true", "--resolve-image", "never", "-c", path.name,
                           spec.project], timeout=300, cwd=state_dir)
        path.unlink(missing_ok=True)
        name = service_name(spec, host)
        if proc.returncode != 0:
            raise KctlError(f"`docker stack deploy` of {host} failed: {(proc.stderr or proc.stdout).strip()[-1500:]}",
                            hint=f"see `docker service ps --no-trunc {name}`")

        # The deploy returns once Swarm has the service: its task is assigned a node and started after. The caller
        # acts in the new container next (a joining controller's format), as after Compose's start.
        def running() -> tuple[bool, str]:
            found = [s for s in dc.services.list(filters={"name": name}) if s.name == name]
            states = sorted(str((t.get("Status") or {}).get("State")) for t in (found[0].tasks() if found else []))
            return "running" in states, f"tasks {', '.join(states) or 'none yet'}"

        wait_for_stages([Stage(f"{host}: Swarm runs its task (`docker service ps --no-trunc {name}`)", running)],
                        timeout=START_WAIT, poll=0.5)

    def withhold_format_permit(self, spec: ClusterSpec, state_dir: Path, host: str, service: str) -> str:
        """The new node's data volume made before its service, from the node image without ``service``'s permit.

        A task's named volume is filled from the image's /var/opt/kctl when it is first mounted empty, and the
        image carries both permits (a new node's storage is kctl's to format): the joining controller's start
        script would format a static quorum's storage (which fails on a dynamic quorum's files, over and over). So
        the volume is made here, labelled as the stack makes it (`kctl down --volumes` and `kctl node remove` find
        it), filled once by a throwaway container of the node image that removes the permit; the task then
        mounts a volume that is not empty, and its controller waits as UNFORMATTED until kctl formats it in its
        container (an exec: the task must run on this engine's Swarm node, else refused)."""
        super().withhold_format_permit(spec, state_dir, host, service)
        dc = self.client()
        local_id = require_manager(dc)
        target = plan_placement(spec, nodes(dc)).hosts.get(host)
        if target is not None and target.id != local_id:
            raise KctlError(f"{host} would run on Swarm node {target.hostname}, not on this engine's: kctl formats a"
                            " joining controller in its container, and acts only on the containers of the engine it"
                            " talks to; nothing of the node was started",
                            hint="run kctl on the manager that node is (`docker node ls`; DOCKER_HOST), or add it"
                                 " there (docs/multi-host.md)")
        name = f"{spec.project}_{host}-{contract.HOST_DATA}"
        labels = {**spec.labels, contract.LABEL_CLUSTER: spec.name, contract.LABEL_STACK_NAMESPACE: spec.project}
        found = dc.volumes.list(filters={"name": name})
        if not [v for v in found if v.name == name]:
            dc.volumes.create(name=name, driver="local", labels=labels)
        permit = contract.format_permit(service)
        try:
            dc.containers.run(spec.local_image_ref, ["rm", "-f", permit], remove=True, user="root",
                              network_mode="none", volumes={name: {"bind": contract.DATA_ROOT, "mode": "rw"}})
        except api.sdk().errors.DockerException as exc:
            raise KctlError(f"cannot prepare {host}'s data volume {name}: {exc}",
                            hint="`kctl image build`, then the same command again") from None
        return f"{host}: data volume {name} made without the permit for its {service}'s start script to format it"

    def remove_one(self, spec: ClusterSpec, host: str, *, stop_timeout: int = 180, keep_data: bool = False) -> bool:
        """``kctl node remove``: the node's service removed (its task stopped, SIGTERM then up to its
        stop_grace_period), its placement label and, on this engine's host and unless ``keep_data``, its volumes;
        False if none."""
        dc = self.client()
        require_manager(dc)
        name = service_name(spec, host)
        if not [s for s in dc.services.list(filters={"name": name}) if s.name == name]:
            return False
        proc = run_docker(["service", "rm", name], timeout=60)
        if proc.returncode != 0:
            raise KctlError(f"`docker service rm {name}` failed: {(proc.stderr or proc.stdout).strip()[-800:]}",
                            hint="`docker service ls`")
        if stop_timeout == 0:
            # at once (`kctl down` without a quorum): Swarm would give the task its whole stop_grace_period after
            # the SIGTERM, and a broker that cannot reach a controller spends it; the service is gone, so nothing
            # starts the task again. A task on another Swarm node gets its grace period (not this engine's).
            for c in dc.containers.list(filters={"label": f"{contract.LABEL_SERVICE}={host}"}, ignore_removed=True):
                if (c.labels or {}).get(contract.LABEL_CLUSTER) == spec.name:
                    try:
                        c.kill()
                    except Exception:  # noqa: BLE001 - exited meanwhile
                        pass

        def stopped() -> tuple[bool, str]:
            up = [c.state for c in api.infos(spec.name, dc) if c.name == host
                  and c.state in ("running", "created", "restarting", "paused")]
            return not up, f"{host}: task container {up[0]}" if up else f"{host}: no task container up"

        wait_for_stages([Stage(f"{host}'s task stopped by Swarm", stopped)], timeout=stop_timeout + 30, poll=1.0)
        for c in dc.containers.list(all=True, filters={"label": f"{contract.LABEL_SERVICE}={host}"},
                                    ignore_removed=True):
            if (c.labels or {}).get(contract.LABEL_CLUSTER) == spec.name:
                c.remove(force=True)
        if not keep_data:
            self._remove_volumes(spec, dc, host)
        label = contract.swarm_placement_label(spec.name, host)
        relabel(dc, lambda _id, labels: {k: v for k, v in labels.items() if k != label})
        return True

    @staticmethod
    def _remove_volumes(spec: ClusterSpec, dc: Any, host: str) -> None:
        """``host``'s data and log volumes on this engine."""
        for v in dc.volumes.list(filters={"label": f"{contract.LABEL_CLUSTER}={spec.name}"}):
            if v.name in (f"{spec.project}_{host}-{contract.HOST_DATA}", f"{spec.project}_{host}-{contract.HOST_LOGS}"):
                try:
                    v.remove(force=True)
                except Exception:  # noqa: BLE001 - a volume on another Swarm node is not this engine's
                    pass

    def recreate_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        """A new task for one service, from the rendered files, waited for; the other services untouched.

        The service's definition in the state dir's stack file is deployed alone (``docker stack deploy``
        without ``--prune``): when its files or settings changed, Swarm replaces its task with one that has
        them; when nothing changed, ``docker service update --force`` makes the new task."""


        name = service_name(spec, host)
        dc = self.client()
        svc = dc.services.get(name)
        # A deploy bumps the service's version even when nothing changed; Swarm makes a new task only when the
        # task template (image, configs, environment, labels...) changed.
        template = json.dumps((svc.attrs.get("Spec") or {}).get("TaskTemplate"), sort_keys=True)
        old_tasks = {t["ID"] for t in svc.tasks()}
        rendered = state_dir / COMPOSE_FILE
        if rendered.exists():
            one = one_service_stack(yaml.safe_load(rendered.read_text(encoding="utf-8")), host)
            path = write_stack(spec, state_dir, one, f"stack-{host}.yaml")
            try:
                proc = run_docker(["stack", "deploy", "--detach=true", "--resolve-image", "never", "-c", path.name,
                                   spec.project], timeout=300, cwd=state_dir)
            finally:
                path.unlink(missing_ok=True)
            if proc.returncode != 0:
                raise KctlError(f"`docker stack deploy` of {host} failed: {_said(proc)}",
                                hint=f"`docker service ps --no-trunc {name}`")
            svc.reload()
        if json.dumps((svc.attrs.get("Spec") or {}).get("TaskTemplate"), sort_keys=True) == template:
            proc = run_docker(["service", "update", "--force", "--detach=true", "--quiet", name], timeout=60)
            if proc.returncode != 0:
                raise KctlError(f"`docker service update` of {host} failed: {_said(proc)}",
                                hint=f"`docker service ps --no-trunc {name}`")

        def replaced() -> tuple[bool, str]:
            tasks = dc.services.get(name).tasks()
            new = [t for t in tasks if t["ID"] not in old_tasks and (t.get("DesiredState") == "running")]
            old_running = [t for t in tasks if t["ID"] in old_tasks
                           and (t.get("Status") or {}).get("State") == "running"]
            if not new:
                return False, "no new task yet"
            state = (new[0].get("Status") or {}).get("State")
            return state == "running" and not old_running, f"new task {state}" + (
                f", {len(old_running)} old task(s) still running" if old_running else "")

        wait_for_stages([Stage(f"{host}: Swarm runs a new task (`docker service ps --no-trunc {name}`)", replaced)],
                        timeout=400, poll=0.5)

    def log_lines(self, spec: ClusterSpec, host: str, path: str, tail: int) -> list[str] | None:
        code, out = self.exec_in(spec, host, ["tail", "-n", str(tail), path], timeout=10)
        if code != 0:
            raise KctlError(f"cannot read {path} in {host}: {out.strip()[-300:]}", hint="`kctl status`")
        return out.splitlines()

    # ----- faults -----------------------------------------------------------------------
    # Swarm starts a new task for a container that exits, so a node's container is not stopped here (refused
    # before anything is done) and a killed one comes back as its replacement task; a network cut drops the
    # node's traffic with iptables in its container (a Swarm task's container is not disconnected from the
    # stack's network behind Swarm's back).

    def stop_node(self, spec: ClusterSpec, host: str, container: Any) -> None:
        raise KctlError(f"engine swarm: {host}'s container cannot stay stopped (Swarm starts a new task for a"
                        " container that exits); nothing was done",
                        hint="stop its processes instead (service kafka or zookeeper), or kill the node's"
                             " container (Swarm then replaces it: a crashed host that comes back)")

    def start_node(self, spec: ClusterSpec, host: str, container: Any, dc: Any, *, killed_id: str | None,
                   timeout: float) -> None:
        """Wait until Swarm runs a new task container for ``host`` (the node's processes start with it), the
        killed one gone or exited."""
        old = killed_id or (container.id if container.status not in ("running", "paused") else None)

        def probe() -> tuple[bool, str]:
            for c in self.fault_targets(spec, dc):
                if api.host_of(c) == host:
                    return c.status == "running" and c.id != old, f"{host}: task container {c.short_id} {c.status}"
            return False, f"{host}: no task container yet"

        wait_for_stages([Stage(f"{host}: Swarm runs a new task", probe)], timeout=timeout, poll=0.5)

    def cut_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> None:
        """Every packet of the node but loopback dropped (iptables), which clients on its published ports see
        too, as on Compose."""
        script = (f"iptables -N {CUT_CHAIN} && iptables -A {CUT_CHAIN} ! -i lo ! -o lo -j DROP && "
                  f"iptables -I INPUT -j {CUT_CHAIN} && iptables -I OUTPUT -j {CUT_CHAIN}")
        code, out = self.exec_in(spec, host, ["sh", "-c", script], timeout=10, dc=dc)
        if code != 0:
            self._clear_cut(spec, host, dc)
            raise KctlError(f"cannot cut {host} off the network (exit {code}): {out.strip()[-300:]}",
                            hint="its container needs iptables and NET_ADMIN: `kctl image build`, `kctl up`")

    def mend_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> bool:
        container.reload()
        return container.status == "running" and self._clear_cut(spec, host, dc)

    def _clear_cut(self, spec: ClusterSpec, host: str, dc: Any) -> bool:
        """Remove a network cut's iptables rules; whether there were any."""
        _, out = self.exec_in(spec, host, ["sh", "-c",
                                           "command -v iptables >/dev/null || exit 0; "
                                           f"while iptables -D INPUT -j {CUT_CHAIN} 2>/dev/null; do echo removed; done;"
                                           f" while iptables -D OUTPUT -j {CUT_CHAIN} 2>/dev/null; do echo removed;"
                                           f" done; iptables -F {CUT_CHAIN} 2>/dev/null; iptables -X {CUT_CHAIN}"
                                           " 2>/dev/null; exit 0"], timeout=10, dc=dc)
        return "removed" in out
