"""Test helpers: a real multi-node ZooKeeper + Kafka cluster for integration tests.

    from kctl.testing import KafkaCluster

    with KafkaCluster(nodes=3) as cluster:
        ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kctl.testing.cluster import KafkaCluster, kafka_cluster

__all__ = ["KafkaCluster", "kafka_cluster"]


def __getattr__(name: str) -> Any:
    # Lazy, so that the pytest plugin costs nothing in suites that never use it.
    if name in __all__:
        from kctl.testing import cluster

        return getattr(cluster, name)
    raise AttributeError(name)
