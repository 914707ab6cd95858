"""Where the mirror containers of a cluster live (``kctl mirror``, :mod:`kctl.mirror`): the Compose project
``kctl-<cluster>-mirror`` whose files are under ``<state>/mirror``; its down, which ``kctl down`` of the
cluster runs too (the mirrors write into that cluster and nowhere else)."""

from __future__ import annotations

from pathlib import Path

from kctl.model.spec import ClusterSpec
from kctl.runtime.engine.compose import compose_project


def project(spec: ClusterSpec) -> str:
    return f"{spec.project}-mirror"


def directory(state_dir: Path) -> Path:
    return state_dir / "mirror"


def compose(spec: ClusterSpec, state_dir: Path, *args: str, timeout: float = 300) -> None:
    d = directory(state_dir)
    compose_project(project(spec), d / "compose.yaml", *args, timeout=timeout, what="the mirrors",
                    hint=f"its files: {d}")


def down(spec: ClusterSpec, state_dir: Path) -> bool:
    """Stop and remove the mirror containers; False when none were started from this state dir."""
    if not (directory(state_dir) / "compose.yaml").exists():
        return False
    compose(spec, state_dir, "down", "--remove-orphans")
    return True
