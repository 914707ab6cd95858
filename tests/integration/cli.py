"""Run the kctl CLI as a user does, as a separate process, against a test cluster's spec file."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def kctl(cluster: Any, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`kctl ARGS -f <cluster's kctl.yaml>`; the result with text stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def js(cluster: Any, *args: str) -> Any:
    """`kctl ARGS -o json`, which must succeed; the parsed output."""
    p = kctl(cluster, *args, "-o", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def tool_config(cluster: Any) -> list[str]:
    """``--command-config FILE`` for Kafka's tools in a node of a secured cluster (its admin user); [] otherwise."""
    from kctl import contract

    return ["--command-config", contract.secret_path(contract.ADMIN_CLIENT_FILE)] \
        if cluster.spec.security.enabled else []


def secured(cluster: Any) -> bool:
    return bool(cluster.spec.security.enabled)
