"""confluent-kafka clients bound to the cluster's EXTERNAL listeners on 127.0.0.1."""

from __future__ import annotations

import uuid
from typing import Any

from kctl.errors import ClusterError
from kctl.spec import ClusterSpec

HEALTH_TOPIC = "__kctl_health"


def base_config(spec: ClusterSpec | None = None, bootstrap: str | None = None) -> dict[str, Any]:
    servers = bootstrap or (spec.bootstrap_servers if spec else "")
    return {"bootstrap.servers": servers, "log_level": 0, "logger": _quiet_logger()}


def _quiet_logger() -> Any:
    import logging

    log = logging.getLogger("kctl.librdkafka")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def admin(spec: ClusterSpec | None = None, bootstrap: str | None = None) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(base_config(spec, bootstrap))


def round_trip(spec: ClusterSpec, timeout: float = 10.0) -> tuple[bool, str]:
    """Produce one record with acks=all to the health topic and read it back by offset."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    brokers = len(spec.nodes)
    a = admin(spec)
    md = a.list_topics(timeout=timeout)
    if HEALTH_TOPIC not in md.topics:
        rf = min(3, brokers)
        futs = a.create_topics([NewTopic(HEALTH_TOPIC, num_partitions=1, replication_factor=rf,
                                         config={"min.insync.replicas": str(max(1, rf - 1)),
                                                 "retention.ms": "3600000"})])
        try:
            futs[HEALTH_TOPIC].result(timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                return False, f"cannot create {HEALTH_TOPIC}: {exc}"
    token = uuid.uuid4().hex.encode()
    delivered: list[Any] = []
    p = Producer({**base_config(spec), "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": int(timeout * 1000)})
    p.produce(HEALTH_TOPIC, value=token, on_delivery=lambda err, msg: delivered.append((err, msg)))
    p.flush(timeout)
    if not delivered:
        return False, "produce: no delivery report yet"
    err, msg = delivered[0]
    if err is not None:
        return False, f"produce failed: {err}"
    c = Consumer({**base_config(spec), "group.id": f"kctl-health-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(HEALTH_TOPIC, msg.partition(), msg.offset())])
        got = c.consume(num_messages=1, timeout=timeout)
    finally:
        c.close()
    if got and got[0].error() is None and got[0].value() == token:
        return True, f"produced and consumed offset {msg.offset()} via {spec.bootstrap_servers}"
    if got and got[0].error() is not None:
        return False, f"consume failed: {got[0].error()}"
    return False, "consume: the record did not come back yet"


def require_reachable(spec: ClusterSpec | None = None, bootstrap: str | None = None, timeout: float = 5.0) -> Any:
    """Metadata of the cluster, or a clear ClusterError when no broker answers."""
    from confluent_kafka import KafkaException

    a = admin(spec, bootstrap)
    try:
        return a.list_topics(timeout=timeout)
    except KafkaException:
        servers = bootstrap or (spec.bootstrap_servers if spec else "?")
        raise ClusterError(f"no Kafka broker answered at {servers} in {timeout:.0f}s",
                           hint="is the cluster up? `kctl status`; `kctl up` starts it") from None


def wait_for_topic(client: Any, name: str, partitions: int | None = None, timeout: float = 10.0) -> Any | None:
    """Poll metadata until ``name`` is known with a leader for every partition; its metadata, or None.

    A topic the controller has just created reaches each broker's metadata cache a
    moment later, so the next command may ask a broker that does not know it yet.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            t = client.list_topics(name, timeout=max(0.5, min(5.0, deadline - time.monotonic()))).topics.get(name)
        except Exception:  # noqa: BLE001 - metadata not available yet: try again until the deadline
            t = None
        ready = t is not None and t.error is None and bool(t.partitions)
        if ready and all(p.leader >= 0 for p in t.partitions.values()) and (
                partitions is None or len(t.partitions) == partitions):
            return t
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)
