"""The unit suite's guard: no unit test reaches the Docker engine or a real port.

Every ``socket.connect``/``connect_ex`` made in the test process is checked. A connection to the Docker
socket (``/var/run/docker.sock``, ``/run/docker.sock`` or ``DOCKER_HOST``'s), or a TCP connection to a
port that no socket of this process has bound, is refused (``ConnectionRefusedError``) and fails the
test, even when the code under test catches the error. A fake server of the test's own (such as
tests/unit/fake_zk.py), or a port it bound and closed to be sure nothing answers there, is fine. Use
autospec mocks and fakes instead. librdkafka connects from its own threads, out of the socket guard's
sight: a confluent-kafka Producer, Consumer or AdminClient whose ``bootstrap.servers`` names such a port
is refused when it is made. A subprocess (``docker``, ``kctl``) is not seen.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

_OWN: set[int] = set()  # ports a socket of this process has bound (the tests' fake servers, refused ports)
_VIOLATIONS: list[str] = []
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_bind = socket.socket.bind


def _docker_sockets() -> set[str]:
    paths = {"/var/run/docker.sock", "/run/docker.sock"}
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        paths.add(host[len("unix://"):])
    return {os.path.realpath(p) for p in paths}


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _refusal(sock: socket.socket, address: Any) -> str | None:
    """Why this connection is not for a unit test, or None when it is allowed."""
    if sock.family == socket.AF_UNIX:
        path = address.decode() if isinstance(address, bytes) else str(address)
        if path and os.path.realpath(path) in _docker_sockets():
            return f"the Docker socket {path}"
        return None
    if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), int(address[1])
        if _loopback(host) and port in _OWN:
            return None
        return f"a real port {host}:{port} (not a port the tests bound)"
    return None


def _refused(sock: socket.socket, address: Any) -> bool:
    why = _refusal(sock, address)
    if why is not None:
        _VIOLATIONS.append(why)
    return why is not None


def _connect(self: socket.socket, address: Any) -> None:
    if _refused(self, address):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "unit tests must not connect to " + _VIOLATIONS[-1])
    _real_connect(self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    return errno.ECONNREFUSED if _refused(self, address) else _real_connect_ex(self, address)


def _bind(self: socket.socket, address: Any) -> None:
    _real_bind(self, address)
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _OWN.add(int(self.getsockname()[1]))


def _kafka_refusal(conf: Any) -> str | None:
    servers = str((conf or {}).get("bootstrap.servers") or "") if isinstance(conf, dict) else ""
    for server in filter(None, (s.strip() for s in servers.split(","))):
        host, _, port = server.rpartition(":")
        host = host.strip("[]")
        if not (port.isdigit() and _loopback(host) and int(port) in _OWN):
            return f"a real Kafka bootstrap server {server} (a librdkafka client: not a port the tests bound)"
    return None


_KAFKA_CLIENTS: list[tuple[Any, str, Any]] = []  # (module, name, the real class)


def _guard_kafka_clients() -> None:
    """librdkafka connects from its own threads, where the socket guard cannot see: check the clients'
    ``bootstrap.servers`` when one is made (kctl makes every one in kctl/kafka/client.py, at call time)."""
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:
        return
    for module, name in ((confluent_kafka, "Producer"), (confluent_kafka, "Consumer"),
                         (confluent_kafka.admin, "AdminClient")):
        real = getattr(module, name)

        def guarded_init(self: Any, conf: Any = None, *args: Any, _real: Any = real, **kwargs: Any) -> None:
            why = _kafka_refusal(conf)
            if why is not None:
                _VIOLATIONS.append(why)
                raise ConnectionRefusedError(errno.ECONNREFUSED, "unit tests must not connect to " + why)
            _real.__init__(self, conf, *args, **kwargs)

        _KAFKA_CLIENTS.append((module, name, real))
        setattr(module, name, type(name, (real,), {"__init__": guarded_init, "__module__": real.__module__}))


def pytest_configure(config: pytest.Config) -> None:
    _guard_kafka_clients()
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    socket.socket.bind = _bind  # type: ignore[method-assign]


def pytest_unconfigure(config: pytest.Config) -> None:
    for module, name, real in _KAFKA_CLIENTS:
        setattr(module, name, real)
    socket.socket.connect = _real_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]
    socket.socket.bind = _real_bind  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _no_docker_no_real_ports() -> Iterator[None]:
    _VIOLATIONS.clear()
    yield
    seen = sorted(set(_VIOLATIONS))
    _VIOLATIONS.clear()
    if seen:
        pytest.fail("a unit test connected to " + "; ".join(seen) + ": use a fake server or an autospec mock",
                    pytrace=False)
