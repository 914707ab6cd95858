"""Checks made before any Spark JVM starts: the cluster answers and the topics exist."""

from __future__ import annotations

from typing import Any

from kctl.errors import ClusterError, KctlError


def admin(bootstrap: str, timeout_s: float = 5.0) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": int(timeout_s * 1000),
        "logger": _quiet_logger(),
    })


def _quiet_logger() -> Any:
    import logging

    log = logging.getLogger("kctl.kafka.client")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def check_topics(bootstrap: str, topics: list[str], timeout_s: float = 5.0) -> dict[str, int]:
    """Return {topic: partition count}; raise a clear error when the cluster or a topic is missing."""
    from confluent_kafka import KafkaException

    if not bootstrap:
        raise KctlError("no bootstrap servers", hint="pass --bootstrap-servers, or run in a directory with kctl.yaml")
    try:
        md = admin(bootstrap, timeout_s).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ClusterError(
            f"Kafka cluster at {bootstrap} is unreachable ({exc.args[0] if exc.args else exc})",
            hint="is the cluster up? try `kctl status`; or pass --bootstrap-servers",
        ) from None
    missing = [t for t in topics if t not in md.topics or md.topics[t].error is not None]
    if missing:
        have = sorted(t for t in md.topics if not t.startswith("__"))
        raise ClusterError(
            f"topic(s) not found on {bootstrap}: {', '.join(missing)}",
            hint=f"create it with `kctl topic create {missing[0]}`; existing topics: {', '.join(have) or 'none'}",
        )
    return {t: len(md.topics[t].partitions) for t in topics}
