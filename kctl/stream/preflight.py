"""Checks made before any Spark JVM starts: the cluster answers and the topics exist."""

from __future__ import annotations

from kctl.kafka.client import require_topics


def check_topics(bootstrap: str, topics: list[str], timeout_s: float = 5.0) -> dict[str, int]:
    """Return {topic: partition count}; raise a clear error when the cluster or a topic is missing."""
    return require_topics(None, topics, bootstrap, timeout_s)
