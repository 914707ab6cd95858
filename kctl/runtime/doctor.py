"""Prerequisite checks: each returns a Check with a hint when it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kctl.model.spec import ClusterSpec
from kctl.runtime import docker_api, ports
from kctl.runtime.engine import engines
from kctl.runtime.engine.engines import Capability
from kctl.runtime.engine.hosts import HostsEngine

MIN_DISK_GB = 2.0
MIN_MEMORY_GB = 4.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    hint: str | None = None
    required: bool = True


def _run(argv: list[str], timeout: float = 10) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv)}: no answer in {timeout:.0f}s"
    return p.returncode, (p.stdout + p.stderr).strip()


def check_engine() -> Check:
    try:
        client = docker_api.client(5)
        version = client.version().get("Version", "?")
        client.close()
        return Check("docker engine", True, f"engine {version} at {os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}")
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return Check("docker engine", False, f"not reachable: {type(exc).__name__}",
                     hint="start it (`dockerd &` as root) or run `make setup`, which installs and starts one")


def check_compose() -> Check:
    rc, out = _run(["docker", "compose", "version", "--short"])
    if rc == 0:
        return Check("compose plugin", True, f"docker compose {out.splitlines()[0] if out else '?'}")
    return Check("compose plugin", False, out.splitlines()[-1] if out else "missing",
                 hint="install Compose v2 as ~/.docker/cli-plugins/docker-compose (`make setup` does it)")


def check_java() -> Check:
    rc, out = _run(["java", "-version"])
    if rc == 0:
        first = out.splitlines()[0] if out else "java"
        return Check("java", True, first, required=False)
    return Check("java", False, "no java on PATH", required=False,
                 hint="the Spark job needs Java 17 on the host: `apt-get install openjdk-17-jre-headless`")


def check_ports(spec: ClusterSpec, owned: Iterable[int] = ()) -> Check:
    taken = ports.taken(spec, owned)
    if taken:
        return Check("host ports", False, "in use on 127.0.0.1: " + ", ".join(taken), hint=ports.TAKEN_HINT)
    return Check("host ports", True, f"{len(ports.host_ports(spec))} ports free on 127.0.0.1")


def check_disk(path: Path) -> Check:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free / 1e9
    ok = free >= MIN_DISK_GB
    return Check("disk", ok, f"{free:.1f} GB free at {probe}",
                 hint=None if ok else f"free at least {MIN_DISK_GB:.0f} GB for images and data")


def check_memory() -> Check:
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        avail = int(info["MemAvailable"].strip().split()[0]) / 1e6
    except (OSError, KeyError, ValueError):
        return Check("memory", True, "unknown (no /proc/meminfo)", required=False)
    ok = avail >= MIN_MEMORY_GB
    return Check("memory", ok, f"{avail:.1f} GB available",
                 hint=None if ok else "three nodes need about 4 GB; lower zookeeper.heap / kafka.heap")


def check_hosts(spec: ClusterSpec) -> list[Check]:
    """engine hosts: OpenSSH's client here, and each host as `kctl up` checks it before changing any."""
    import shutil

    if shutil.which("ssh") is None:
        return [Check("ssh", False, "no ssh client on PATH", hint="install OpenSSH's client (apt-get install"
                                                                  " openssh-client)")]
    checks = [Check("ssh", True, shutil.which("ssh") or "ssh")]
    for node, problem in HostsEngine().host_problems(spec):
        where = f"host {node.hostname}"
        checks.append(Check(where, True, f"{spec.node_address(node)}: ssh, sudo -n, systemd, Java 17+")
                      if problem is None else Check(where, False, problem,
                                                    hint="docs/bare-metal.md lists what a host needs"))
    return checks


def run_checks(spec: ClusterSpec | None, state_dir: Path, owned_ports: Iterable[int] = ()) -> list[Check]:
    if spec is not None and not engines.supports(spec, Capability.CONTAINERS):  # no Docker: the hosts, this disk
        return [*check_hosts(spec), check_disk(state_dir)]
    checks = [check_engine(), check_compose(), check_java(), check_disk(state_dir), check_memory()]
    if spec is not None:
        checks.append(check_ports(spec, owned_ports))
    return checks
