"""Stop and start one service (ZooKeeper or Kafka) in a node container through its supervisord; Docker only.

``supervisorctl stop`` sends the program's stopsignal (SIGTERM: a broker's
controlled shutdown) and returns once the process has exited or stopwaitsecs
passed; ``start`` returns once the program has been up for startsecs.
"""

from __future__ import annotations

from typing import Any

from kctl import contract
from kctl.errors import KctlError
from kctl.runtime import engines
from kctl.spec import ClusterSpec

# supervisord's own wait for a stop (stopwaitsecs=120 for Kafka) plus a margin.
STOP_TIMEOUT = 150.0
START_TIMEOUT = 60.0


def _supervisorctl(spec: ClusterSpec, host: str, action: str, service: str, timeout: float, dc: Any) -> str:
    if service not in contract.SERVICES:
        raise KctlError(f"unknown service {service!r}", hint="zookeeper or kafka")
    code, out = engines.exec_in(spec, host, [*contract.SUPERVISORCTL, action, service], timeout=timeout, dc=dc)
    text = out.strip()
    # "already started" / "not running" are the state asked for, not a failure.
    if code != 0 and "ALREADY_STARTED" not in text and "NOT_RUNNING" not in text:
        raise KctlError(f"{host}: `supervisorctl {action} {service}` failed (exit {code}): {text[-500:]}",
                        hint=f"see `kctl logs {host} --service supervisor` and `kctl logs {host} --service {service}`")
    return text


def stop(spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
    """SIGTERM ``service`` in ``host`` and wait for supervisord to see it exit."""
    return _supervisorctl(spec, host, "stop", service, STOP_TIMEOUT, dc)


def start(spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
    return _supervisorctl(spec, host, "start", service, START_TIMEOUT, dc)


def process_state(spec: ClusterSpec, host: str, service: str, timeout: float = 5.0) -> str:
    """RUNNING, STOPPED or WAITING-FOR-QUORUM from the container's process table; 'missing' without a container."""
    eng = engines.for_spec(spec)
    found = [c for c in eng.observe(spec, timeout) if c.name == host]
    if not found:
        return "missing"
    if found[0].state != "running":
        return f"container {found[0].state}"
    return eng.processes(found[0], timeout).get(service, "unknown")
