"""Modules imported on first use: for third-party packages that import more than kctl's commands use.

``defer_import(name)`` puts a stand-in for ``name`` into ``sys.modules``; ``import name`` binds
the stand-in and the first attribute read imports the real module (``sys.modules`` then holds the real
one, and every read through the stand-in is the real module's). kctl's own modules are put off the same
way where a hot command imports a module for a path it rarely takes (the engines it does not run on).
``calls`` names functions that code takes with ``from name import f`` at import time but calls only
later: the stand-in hands out a forwarder that imports the real module when it is called.
tests/unit/test_cli_imports.py checks these uses.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

# the module object's own namespace (a getset descriptor of ModuleType)
_OWN_DICT: Any = vars(types.ModuleType)["__dict__"]


class _Deferred(types.ModuleType):
    """The stand-in. Every name read through it is the real module's at that moment (it keeps no copy), and once
    the real module is loaded a name set or deleted through it is set or deleted there (a test's monkeypatch of
    a module it imported while it was still put off reaches the code that reads it)."""

    def _load(self) -> types.ModuleType:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        return importlib.import_module(name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        if (real := self._real()) is None:
            super().__setattr__(attr, value)
        else:
            setattr(real, attr, value)

    def __delattr__(self, attr: str) -> None:
        if (real := self._real()) is None:
            super().__delattr__(attr)
        else:
            delattr(real, attr)

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        """The real module's namespace once it is loaded (the stand-in's own before): what a reader of a module's
        ``__dict__`` finds, as pytest's monkeypatch does to know what to restore (it would restore nothing and
        delete the real module's name at undo if it read the stand-in's empty one)."""
        real = self._real()
        own: dict[str, Any] = _OWN_DICT.__get__(self)
        return real.__dict__ if real is not None else own

    def _real(self) -> types.ModuleType | None:
        real = sys.modules.get(self.__name__)
        return real if real is not None and not isinstance(real, _Deferred) else None


def _forwarder(stub: _Deferred, fn: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(stub._load(), fn)(*args, **kwargs)

    call.__name__ = call.__qualname__ = fn
    return call


def defer_import(name: str, calls: tuple[str, ...] = ()) -> None:
    """Put off importing ``name`` until something uses it; a no-op if it is imported already."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stub = _Deferred(name)
    stub.__spec__ = spec  # what the import system reads of a module already in sys.modules
    if spec.submodule_search_locations is not None:  # a package: `from pkg import f` reads __path__
        stub.__path__ = list(spec.submodule_search_locations)
    for fn in calls:
        setattr(stub, fn, _forwarder(stub, fn))
    sys.modules[name] = stub
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, stub)
