"""A cluster's published host ports, and which of them are free on this machine (`kctl doctor`, an engine's
preflight, `kctl init` beside another cluster); free ports for test clusters and a node added to a running one.

Below the engines and the doctor: both ask it, neither is asked by it.
"""

from __future__ import annotations

from collections.abc import Iterable

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


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports on 127.0.0.1 that nothing listens on right now (all held open while chosen)."""
    socks, ports = [], []
    import socket

    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(int(s.getsockname()[1]))
    finally:
        for s in socks:
            s.close()
    return ports
