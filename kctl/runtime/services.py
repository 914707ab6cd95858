"""Stop and start one service (ZooKeeper or Kafka) in a node container through its supervisord; Docker only.

``supervisorctl stop`` sends the program's stopsignal (SIGTERM: a broker's
controlled shutdown) and returns once the process has exited or stopwaitsecs
passed; ``start`` returns once the program has been up for startsecs (1 s).
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


# The entrypoint's copy of the secrets mount, made again before a service starts: a JAAS file that
# `kctl apply` rewrote (a step of security.migration) reaches a restarted process, not only a new container.
REFRESH_SECRETS = (
    f'[ -d {contract.SECRETS_MOUNT} ] || exit 0; for f in {contract.SECRETS_MOUNT}/*; do [ -f "$f" ] &&'
    f' install -m 0600 -o {contract.JVM_UID} -g {contract.JVM_UID} "$f" {contract.SECRETS_DIR}/; done; exit 0'
)


def start(spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
    """Start ``service`` deliberately: the wrapper's crash-loop record goes first (a start kctl asks for is
    no crash, so it gets no back-off), and a secured node's secrets are copied again."""
    code, out = engines.exec_in(spec, host, ["rm", "-f", contract.starts_file(service)], user="root", timeout=30,
                                dc=dc)
    if code != 0:
        raise KctlError(f"{host}: cannot clear {contract.starts_file(service)} before starting {service}:"
                        f" {out.strip()[-300:]}", hint=f"`kctl logs {host} --service supervisor`")
    if spec.security.enabled:
        code, out = engines.exec_in(spec, host, ["sh", "-c", REFRESH_SECRETS], user="root", timeout=30, dc=dc)
        if code != 0:
            raise KctlError(f"{host}: cannot refresh the secrets copy before starting {service}: {out.strip()[-300:]}",
                            hint=f"`kctl logs {host} --service supervisor`")
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
