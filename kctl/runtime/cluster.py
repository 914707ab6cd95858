"""A cluster's containers, Docker only: the pure convergence plan, one node's container, Kafka's tools.

Bringing a whole cluster up and down is :mod:`kctl.cluster.lifecycle`'s (it plans with
:func:`convergence_plan`); waiting until it is healthy, and its status, need ZooKeeper
and Kafka: they live in :mod:`kctl.cluster.health`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl import contract
from kctl.errors import KctlError
from kctl.files import write_durable
from kctl.model.properties import tool_env
from kctl.model.render import render
from kctl.model.spec import ClusterSpec
from kctl.runtime import docker_api
from kctl.runtime.engine import engines

if TYPE_CHECKING:
    from kctl.model.render import Rendered
    from kctl.runtime.docker_api import ContainerInfo

Progress = Callable[[str], None]

# ----- the convergence plan --------------------------------------------------------------------


@dataclass(frozen=True)
class PlanItem:
    name: str
    action: str  # create, recreate, start, noop
    reason: str


def convergence_plan(rendered: Rendered, existing: dict[str, ContainerInfo],
                     applied: dict[str, str] | None = None) -> list[PlanItem]:
    """What `up` will do to each container, decided before touching Docker (compose's convergence plan).

    ``applied``: host -> the config hash `kctl apply` brought the container's processes to (its label still
    names the render it was created from); a container applied to this render is up to date.
    """
    items = []
    for c in rendered.containers:
        info = existing.get(c.name)
        if info is None:
            items.append(PlanItem(c.name, "create", "no container yet"))
        elif info.config_hash != c.config_hash and (applied or {}).get(c.name) != c.config_hash:
            items.append(PlanItem(c.name, "recreate", f"config changed ({info.config_hash} -> {c.config_hash})"))
        elif info.state != "running":
            items.append(PlanItem(c.name, "start", f"container is {info.state}"))
        else:
            items.append(PlanItem(c.name, "noop", "up to date"))
    return items


def preflight_ports(spec: ClusterSpec, existing: dict[str, ContainerInfo], *, strict_spread: bool = False,
                    progress: Progress | None = None) -> None:
    """The engine's checks before anything is deployed: published ports free (and on Swarm: a manager, the
    placement)."""
    eng = engines.for_spec(spec)
    eng.preflight(spec, existing, eng.client(), progress or (lambda _m: None), strict_spread)


def log_tail(spec: ClusterSpec, name: str, service: str, lines: int = 30) -> str:
    path = contract.container_log("zookeeper" if service == "zookeeper" else "kafka")
    try:
        _, out = engines.exec_in(spec, name, ["tail", "-n", str(lines), path], timeout=5)
    except KctlError as exc:
        return f"({name}: {exc.message})"
    return f"[{name} {path}]\n{out}"


@dataclass(frozen=True)
class MountedConf:
    """Where a container's rendered files are on this host, and which render the container was created from."""

    host: str
    conf_dir: Path  # the host directory bind-mounted on contract.CONF_DIR
    config_hash: str | None
    started_at: float | None  # epoch seconds the container last started


def mounted_conf(spec: ClusterSpec, host: str) -> MountedConf:
    """The conf directory a cluster container mounts (KctlError if it has no such container)."""
    import datetime as dt


    if not engines.for_spec(spec).uses_image:
        raise KctlError(f"engine hosts: {host}'s files are in {contract.CONF_DIR} on that host, not in a mount here",
                        hint="`kctl diff` compares kctl.yaml with what the processes run")
    found = [c for c in engines.observe(spec) if c.name == host and not c.remote]
    if not found:
        raise KctlError(f"no container {host!r} in cluster {spec.name}", hint="is it up? see `kctl status`")
    info = docker_api.inspect(found[0].id)
    src = next((m.get("Source") for m in info.get("Mounts") or [] if m.get("Destination") == contract.CONF_DIR),
               None)
    if not src:
        raise KctlError(f"container {host} mounts nothing on {contract.CONF_DIR}",
                        hint="was it created by `kctl up`? `kctl up` recreates it")
    started: float | None = None
    raw = str((info.get("State") or {}).get("StartedAt") or "")
    try:
        # Docker gives nanoseconds (2024-05-01T10:00:00.123456789Z); fromisoformat takes microseconds.
        head, _, frac = raw.rstrip("Z").partition(".")
        started = dt.datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()
    except ValueError:
        started = None
    return MountedConf(host, Path(src), found[0].config_hash, started)


@dataclass(frozen=True)
class ToolRun:
    host: str
    argv: list[str]
    exit_code: int
    output: str


_ARG_CHUNK = 100_000  # bytes of a file per `docker exec` argument (Linux caps one argument at 128 KiB)


# The flag that names an admin client's properties file, where a tool does not call it --command-config.
CONFIG_FLAG = {"kafka-cluster.sh": "--config"}


def run_kafka_tool(spec: ClusterSpec, tool: str, args: list[str], timeout: float = 60,
                   files: dict[str, str] | None = None, stderr: bool = True, leading: list[str] | None = None,
                   skip: set[int] | None = None) -> ToolRun:
    """Run Kafka's own bin/TOOL against the INTERNAL listener in the first running broker container, as a
    client JVM (:func:`kctl.model.properties.tool_env`: the tools' heap and JIT, not the broker's the node carries).

    ``files`` ({container path: text}) are written in that container first (a tool's input file);
    ``stderr=False`` keeps only the tool's stdout; ``leading``: arguments before ``--bootstrap-server`` (a
    tool's subcommand, as kafka-cluster.sh's); ``skip``: broker ids whose containers are not used.
    """
    last: KctlError | None = None
    kafka_bin = engines.for_spec(spec).kafka_bin
    env = [f"{k}={v}" for k, v in tool_env(spec).items()]  # a client JVM's, not the broker's the node carries
    for node in spec.brokers:
        if skip and node.id in skip:
            continue
        host = spec.kafka_host(node)
        argv = [f"{kafka_bin}/{tool}", *(leading or []), "--bootstrap-server", f"{host}:{spec.client_internal_port}",
                *args]
        if spec.kctl_logs_in:  # the admin user's client settings: a file in the node, no password in argv
            argv += [CONFIG_FLAG.get(tool, "--command-config"), contract.secret_path(contract.ADMIN_CLIENT_FILE)]
        try:
            for path, text in (files or {}).items():
                chunks = [text[i:i + _ARG_CHUNK] for i in range(0, len(text), _ARG_CHUNK)] or [""]
                for i, chunk in enumerate(chunks):
                    op = ">" if i == 0 else ">>"
                    code, out = engines.exec_in(spec, host, ["sh", "-c", f'printf "%s" "$1" {op} "$2"', "sh",
                                                             chunk, path], timeout=10)
                    if code != 0:
                        raise KctlError(f"cannot write {path} in {host}: {out.strip()}")
            code, out = engines.exec_in(spec, host, ["env", *env, *argv], timeout=timeout, stderr=stderr)
        except KctlError as exc:  # that container is not running: try the next one
            last = exc
            continue
        return ToolRun(host, argv, code, out)
    raise last or KctlError("no node container to run Kafka's tools in", hint="`kctl status`")


def compose_ps(spec: ClusterSpec, state_dir: Path) -> str:
    """`docker compose ps -a` (Swarm: `docker stack ps`) of the cluster, for a readiness timeout's report."""
    return engines.for_spec(spec).ps(spec, state_dir)


def applied_hashes(state_dir: Path) -> dict[str, str]:
    """<state>/applied.json's hashes (written by `kctl apply` and the node changes), or none."""
    import json

    try:
        data = json.loads((state_dir / contract.APPLIED_FILE).read_text(encoding="utf-8"))
        return {str(k): str(v) for k, v in (data.get("hashes") or {}).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def write_applied(state_dir: Path, hashes: dict[str, str]) -> None:
    """Replace <state>/applied.json (host -> the config hash its container's processes are up to date with)."""
    import json


    # durably (a crash leaves the old record or the new one), through a temporary file of this process's own
    write_durable(state_dir / contract.APPLIED_FILE,
                  json.dumps({"hashes": dict(sorted(hashes.items())),
                              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2) + "\n",
                  mode=0o644)


def carried_hashes(old: dict[str, str], new: dict[str, str], labels: dict[str, str | None],
                   applied: dict[str, str], changed: set[str]) -> dict[str, str]:
    """applied.json's hashes after a membership change (kctl node add/remove). Pure.

    A node change rewrites the rendered files of every node (the ensemble in zoo.cfg.dynamic,
    zookeeper.connect): the running ensemble was changed live by reconfig and the processes read the rest
    at their next restart, so a container that was up to date with the render before the change (its
    label, or its applied record) is up to date with the one after it, and `kctl up` must not make it
    again. ``changed``: the hosts the change itself made or removed. A container with a change of its own
    still pending (kctl.yaml edited and not applied) keeps it."""
    out = {h: v for h, v in applied.items() if h in new}
    for host, now in new.items():
        was = old.get(host)
        if host in changed or host not in labels or was is None:
            continue
        if labels[host] == was or applied.get(host) == was:
            out[host] = now
    return out


def carry_applied(before: ClusterSpec, after: ClusterSpec, state_dir: Path, changed: set[str]) -> None:
    """Record the untouched containers as up to date with ``after``'s render (see :func:`carried_hashes`)."""
    old = {c.name: c.config_hash for c in render(before, state_dir).containers}
    new = {c.name: c.config_hash for c in render(after, state_dir).containers}
    labels = {c.name: c.config_hash for c in engines.containers(after)}
    write_applied(state_dir, carried_hashes(old, new, labels, applied_hashes(state_dir), changed))


def require_image(dc: Any, ref: str) -> None:
    """KctlError unless the node image ``ref`` is on the engine."""
    try:
        dc.images.get(ref)
    except docker_api.sdk().errors.ImageNotFound:
        raise KctlError(f"image {ref} is not present",
                        hint="run `kctl image build` (or `kctl up`, which builds it)") from None


# ----- one node's container (kctl node add / remove) ---------------------------------------------------


def start_one(spec: ClusterSpec, state_dir: Path, host: str, progress: Callable[[str], None] | None = None) -> None:
    """Create and start one service of the rendered compose file, touching no other container."""
    eng = engines.for_spec(spec)
    if eng.uses_image:
        require_image(eng.client(), spec.local_image_ref)
    eng.start_one(spec, state_dir, host, progress)


def recreate_one(spec: ClusterSpec, state_dir: Path, host: str) -> None:
    """Make one container again from the rendered files, touching no other container."""
    engines.for_spec(spec).recreate_one(spec, state_dir, host)


def remove_one(spec: ClusterSpec, host: str, *, stop_timeout: int = 180) -> bool:
    """Stop (SIGTERM, then up to ``stop_timeout`` s) and remove one cluster container; False if there was none."""
    return engines.for_spec(spec).remove_one(spec, host, stop_timeout=stop_timeout)
