"""Where the mirror containers of a cluster live (``kctl mirror``, :mod:`kctl.mirror`): the Compose project
``kctl-<cluster>-mirror`` whose files are under ``<state>/mirror``; its down, which ``kctl down`` of the
cluster runs too (the mirrors write into that cluster and nowhere else)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kctl.errors import KctlError
from kctl.spec import ClusterSpec


def project(spec: ClusterSpec) -> str:
    return f"{spec.project}-mirror"


def directory(state_dir: Path) -> Path:
    return state_dir / "mirror"


def compose(spec: ClusterSpec, state_dir: Path, *args: str, timeout: float = 300) -> None:
    from kctl.runtime.compose import compose_binary

    d = directory(state_dir)
    proc = subprocess.run([*compose_binary(), "-p", project(spec), "-f", str(d / "compose.yaml"), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=d)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout)[-800:]
        raise KctlError(f"`docker compose {' '.join(args)}` of the mirrors failed: {err}", hint=f"its files: {d}")


def down(spec: ClusterSpec, state_dir: Path) -> bool:
    """Stop and remove the mirror containers; False when none were started from this state dir."""
    if not (directory(state_dir) / "compose.yaml").exists():
        return False
    compose(spec, state_dir, "down", "--remove-orphans")
    return True
