"""Stop and start one service (ZooKeeper or Kafka) of a node, through its supervisor: supervisord in a
container (``supervisorctl``), systemd on a host of engine hosts (``systemctl``). Each engine does it its way
(:meth:`kctl.runtime.engine.base.Engine.stop_service`, ``start_service``); this module is what the rest of kctl
calls.

A stop sends the service's stop signal (SIGTERM: a broker's controlled shutdown) and returns once the process
has exited; a start returns once the supervisor has started it (whether it serves is kctl's gates' question).
"""

from __future__ import annotations

from typing import Any

from kctl import contract
from kctl.errors import ClusterError, KctlError
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import engines


def _known(service: str) -> None:
    if service not in (*contract.SERVICES, "controller"):  # a node's KRaft controller, in a migration or on KRaft
        raise KctlError(f"unknown service {service!r}", hint="zookeeper, kafka or controller")


def stop(spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
    """SIGTERM ``service`` in ``host`` and wait for its supervisor to see it exit."""
    _known(service)
    return engines.for_spec(spec).stop_service(spec, host, service, dc)


def start(spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
    """Start ``service`` deliberately (no crash-loop back-off; a secured node's secrets copied again)."""
    _known(service)
    return engines.for_spec(spec).start_service(spec, host, service, dc)


def process_state(spec: ClusterSpec, host: str, service: str, timeout: float = 5.0) -> str:
    """RUNNING, STOPPED, FAILED or WAITING-FOR-QUORUM from the node's process table; 'missing' without a
    container."""
    eng = engines.for_spec(spec)
    found = [c for c in eng.observe(spec, timeout) if c.name == host]
    if not found:
        return "missing"
    if found[0].state != "running":
        return f"container {found[0].state}"
    return eng.processes(found[0], timeout).get(service, "unknown")


def permit_format(spec: ClusterSpec, host: str, service: str) -> None:
    """Leave the permit to format ``service``'s KRaft storage on ``host`` (:func:`kctl.contract.format_permit`):
    its program formats the storage at its next start, or at once if it waits as UNFORMATTED."""
    path = contract.format_permit(service)
    code, out = engines.exec_in(spec, host, ["sh", "-c", f"touch {path} && chown 555:555 {path}"], user="root",
                                timeout=30)
    if code != 0:
        raise ClusterError(f"{host}: cannot write {path}: {out.strip()[-300:]}",
                           hint=f"`kctl status`; `kctl logs {host} --service {service}`")
