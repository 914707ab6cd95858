"""Kafka through confluent-kafka: admin, producers, consumers (see docs/architecture.md)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any


class _Deferred(types.ModuleType):
    """A stand-in for a module that is imported, in full, on first attribute access."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)
        return getattr(real, attr)


def defer_import(name: str) -> None:
    """Put off importing ``name`` until something uses it (no-op if it is already imported).

    confluent-kafka's package ``__init__`` imports asyncio (for its serializers' async
    helpers, which kctl never calls): about 30-50 ms of every command that talks to Kafka.
    ``import asyncio`` then binds this stand-in; the first attribute read loads the real one.
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stub = _Deferred(name)
    stub.__spec__ = spec  # what the import system reads for a module already in sys.modules
    sys.modules[name] = stub


defer_import("asyncio")
