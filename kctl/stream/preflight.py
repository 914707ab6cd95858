"""Checks made before any Spark JVM starts: the cluster answers and the topics exist."""

from __future__ import annotations

from kctl.kafka.client import Target, require_topics


def check_topics(target: Target, topics: list[str], timeout_s: float = 5.0) -> dict[str, int]:
    """Return {topic: partition count}; raise a clear error when the cluster or a topic is missing (on a secured
    cluster the client logs in as its admin user)."""
    return require_topics(target, topics, timeout_s)
