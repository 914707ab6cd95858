"""Building and serving the console: its parts from a :class:`ConsoleConfig`, and uvicorn on one address.

The console listens on 127.0.0.1 unless told otherwise, and refuses any other address without TLS (a
certificate and its key): session cookies and passwords do not cross a network in clear.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from kctl.console.app import Console, create_app
from kctl.console.audit import AuditLog
from kctl.console.auth import LoginGuard, Sessions
from kctl.console.config import ConsoleConfig, Registry
from kctl.console.jobs import Job, Jobs
from kctl.console.users import UserStore
from kctl.errors import UsageError


def build(config: ConsoleConfig, *, tls: bool = False) -> Any:
    audit = AuditLog(config.audit_file)

    def ended(job: Job) -> None:  # a background job's outcome, audited as its starter's
        audit.append(user=job.user, action=f"{job.kind}.finish", result="done" if job.state == "done" else "failed",
                     cluster=job.cluster, client="console", params={"topics": list(job.topics)},
                     message=job.error or (job.log[-1] if job.log else ""))

    console = Console(config=config, registry=Registry(config), users=UserStore(config.users_file),
                      sessions=Sessions(idle_seconds=config.idle_minutes * 60.0,
                                                        max_seconds=config.session_hours * 3600.0),
                      guard=LoginGuard(),
                      audit=audit, jobs=Jobs(ended), secure_cookies=tls)
    return create_app(console)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(host: str, cert: Path | None, key: Path | None) -> None:
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together", hint="give both, or neither on 127.0.0.1")
    for f in (cert, key):
        if f is not None and not f.is_file():
            raise UsageError(f"no file {f}", hint="the PEM certificate and its private key")
    if not loopback(host) and cert is None:
        raise UsageError(f"the console listens on {host} only with TLS",
                         hint="give --tls-cert and --tls-key, or leave --host at 127.0.0.1")


def serve(app: Any, host: str, port: int, cert: Path | None = None, key: Path | None = None) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                ssl_certfile=str(cert) if cert else None, ssl_keyfile=str(key) if key else None)
