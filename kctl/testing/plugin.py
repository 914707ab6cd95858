"""pytest plugin registered by kctl (entry point ``pytest11``): the ``kctl_cluster`` fixture.

    def test_something(kctl_cluster):
        assert len(kctl_cluster.brokers()) == 3

The fixture is session-scoped: one three-node cluster for the whole run,
removed at the end. ``--kctl-reuse`` keeps it running between runs (and
adopts a healthy one left by an earlier run); ``--kctl-nodes N`` changes its size.

A test that kills, pauses or cuts off a node of that shared cluster takes
``kctl_faults`` instead: the same cluster, put back together after the test
whatever happened in it (see :func:`restore`), so one failure does not cascade
into every later test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kctl.testing.cluster import KafkaCluster


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kctl", "kctl test clusters")
    group.addoption("--kctl-reuse", action="store_true", default=os.environ.get("KCTL_REUSE") == "1",
                    help="keep the kctl_cluster running after the session and reuse it next time")
    group.addoption("--kctl-nodes", type=int, default=3, help="nodes of the kctl_cluster fixture (default 3)")


@pytest.fixture(scope="session")
def kctl_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A real ZooKeeper + Kafka ensemble shared by the session."""
    from kctl.testing.cluster import KafkaCluster

    cluster = KafkaCluster(nodes=request.config.getoption("--kctl-nodes"),
                           reuse=request.config.getoption("--kctl-reuse"))
    with cluster:
        yield cluster


def restore(cluster: KafkaCluster, timeout: float = 180) -> list[str]:
    """Undo every fault a test can inject, then wait until the cluster is healthy; returns what was undone.

    Unpauses paused containers, starts stopped ones, reconnects those cut off the
    cluster network, removes netem, starts stopped or killed processes
    (:meth:`kctl.runtime.faults.Faults.restore`).
    """
    undone = cluster.faults.restore()
    cluster.wait_until_healthy(timeout=timeout)
    cluster.wait_for(lambda s: s.health == "healthy", timeout=timeout, description="healthy after the faults")
    return undone


@pytest.fixture()
def kctl_faults(kctl_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The shared cluster, for a test that breaks it: restored afterwards, pass or fail."""
    yield kctl_cluster
    restore(kctl_cluster)
