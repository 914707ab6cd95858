"""Locate the project's non-Python resources: templates/ and the Dockerfile.

In a source checkout (and an editable install) they live at the repository's
top level; a built wheel carries copies under ``kctl/_data/`` (see the wheel's force-include in pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

from kctl.errors import KctlError

_PKG = Path(__file__).resolve().parent


def resource(name: str) -> Path:
    """Path of a top-level resource (``templates``, ``Dockerfile``)."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.exists():
            return candidate

    raise KctlError(
        f"kctl's resource {name!r} is missing from the installation",
        hint="reinstall kctl (`make setup` in a checkout, or `pip install --force-reinstall kctl`)",
    )
