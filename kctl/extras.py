"""Optional dependencies: ``kctl[stream]`` (pyspark, delta-spark and the readers), ``kctl[tables]``
(deltalake, duckdb, pyarrow: the Delta tables read without a JVM) and ``kctl[plot]`` (matplotlib, for
``kctl drill run --plot``).

The core CLI (``kctl up``, ``status``, ``topic``...) needs none of them, so they
are imported where they are used, through :func:`require`, which turns a
missing one into an operator's error that names the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from kctl.errors import KctlError

# extra -> the distributions it adds (kept equal to pyproject.toml by a unit test)
EXTRAS: dict[str, tuple[str, ...]] = {
    "stream": ("pyspark", "delta-spark", "pyarrow", "deltalake", "duckdb"),
    "tables": ("pyarrow", "deltalake", "duckdb"),
    "plot": ("matplotlib",),
}


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise a KctlError saying ``pip install 'kctl[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise  # the module is there but broken: show Python's own error
        raise KctlError(
            f"{top} is not installed: it comes with kctl's optional {extra!r} dependencies",
            hint=f"pip install 'kctl[{extra}]' (in a checkout: make setup)",
        ) from None
