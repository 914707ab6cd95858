"""Integration tests: real containers. One shared cluster (``kafka_cluster``) for tests that do not break it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kctl.testing.cluster import KafkaCluster

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_cluster(kctl_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's shared three-node cluster (the kctl_cluster fixture of kctl's pytest plugin)."""
    yield kctl_cluster
