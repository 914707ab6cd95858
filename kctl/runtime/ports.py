"""A cluster's published host ports, and which of them are free on this machine (`kctl doctor`, an engine's
preflight, `kctl init` beside another cluster); free ports for test clusters and a node added to a running one.

Below the engines and the doctor: both ask it, neither is asked by it.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec

# What to do about published ports that something else holds.
TAKEN_HINT = ("stop what holds them (`ss -ltnp`), or change zookeeper.host_port_base / kafka.external_port_base in"
              " kctl.yaml")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    import socket  # here: every connecting command imports this module (the identity check), few bind a port

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def host_ports(spec: ClusterSpec) -> list[tuple[int, str]]:
    return [(port, f"{n.hostname} {what.removesuffix('_port').replace('_', ' ')}")
            for n in spec.nodes for port, _, what in spec.published_ports(n)]


def taken(spec: ClusterSpec, owned: Iterable[int] = ()) -> list[str]:
    """The cluster's published ports that something other than ``owned`` holds on 127.0.0.1, as "PORT (what)"."""
    mine = set(owned)
    return [f"{port} ({what})" for port, what in host_ports(spec) if port not in mine and not port_free(port)]


# Ports handed out by free_ports come from here: below the kernel's ephemeral range (Linux 32768-60999, macOS
# 49152-65535), so no outgoing connection of any process on this machine takes one between its choice and the
# container's start. A CI run saw exactly that: a port drawn from the ephemeral range (bind to port 0) was
# "already allocated" when the Docker engine published it a minute later.
_POOL = (20000, 32767)
# A port chosen is reserved for this long (a file in a per-user directory), so that two processes choosing at the
# same time (pytest-xdist workers, two `kctl node add`) never take the same one before either publishes it.
_RESERVED_FOR_S = 3600.0


def _ephemeral_range() -> tuple[int, int] | None:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    return low, high


def _reservations() -> Path:
    d = Path(tempfile.gettempdir()) / f"kctl-ports-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def _reserve(directory: Path, port: int, now: float) -> bool:
    """Take ``port``'s reservation unless another chooser holds a fresh one."""
    path = directory / str(port)
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return True
        except FileExistsError:
            try:
                if now - path.stat().st_mtime < _RESERVED_FOR_S:
                    return False
                path.unlink()  # a stale reservation: its holder published the port or gave it up long ago
            except FileNotFoundError:
                pass
    return False


def free_runs(count: int, length: int, step: int = 10) -> list[int]:
    """The first ports of ``count`` runs of ``length`` consecutive ports (a spec's port bases), each run free on
    127.0.0.1 now, below the kernel's ephemeral range and reserved against other choosers like :func:`free_ports`;
    runs start ``step`` apart."""
    low, high = _POOL
    eph = _ephemeral_range()
    directory, now = _reservations(), time.time()
    bases: list[int] = []
    for base in range(low, high - length + 2, step):
        if len(bases) == count:
            break
        run = range(base, base + length)
        if eph is not None and any(eph[0] <= p <= eph[1] for p in run):
            continue
        if not all(port_free(p) for p in run):
            continue
        taken = [p for p in run if _reserve(directory, p, now)]
        if len(taken) == length:
            bases.append(base)
        else:  # another chooser holds part of the run: give back what was taken here
            for p in taken:
                (directory / str(p)).unlink(missing_ok=True)
    if len(bases) < count:
        raise KctlError(f"found only {len(bases)} of {count} runs of {length} free host ports in {low}-{high}",
                        hint=f"free some local ports (`ss -ltn`), or remove old reservations in {directory}")
    return bases


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports on 127.0.0.1 that nothing listens on right now, outside the kernel's ephemeral range,
    each reserved against other choosers on this machine for an hour."""
    low, high = _POOL
    eph = _ephemeral_range()
    candidates = [p for p in range(low, high + 1) if eph is None or not eph[0] <= p <= eph[1]]
    random.shuffle(candidates)
    directory, now = _reservations(), time.time()
    ports: list[int] = []
    for port in candidates:
        if len(ports) == n:
            break
        if port_free(port) and _reserve(directory, port, now):
            ports.append(port)
    if len(ports) < n:
        raise KctlError(f"found only {len(ports)} of {n} free host ports in {low}-{high}",
                        hint=f"free some local ports (`ss -ltn`), or remove old reservations in {directory}")
    return ports
