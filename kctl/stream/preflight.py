"""Checks made before any Spark JVM starts: the cluster answers and the topics exist."""

from __future__ import annotations

from typing import Any

from kctl.kafka.client import require_topics


def check_topics(bootstrap: str, topics: list[str], timeout_s: float = 5.0, spec: Any = None) -> dict[str, int]:
    """Return {topic: partition count}; raise a clear error when the cluster or a topic is missing.

    ``spec``: a secured cluster's spec, whose admin user the client logs in as."""
    return require_topics(spec, topics, bootstrap, timeout_s)
