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
    # The Swarm test runs last: `docker swarm leave` breaks Docker's embedded DNS in every container that
    # was running on the engine (their resolver rules point at a resolver that is gone; checked on this
    # engine: `getent hosts` of a peer fails after the leave, works before it), so a ZooKeeper restarted
    # afterwards on a shared cluster cannot resolve its peers.
    items.sort(key=lambda item: item.fspath.basename == "test_swarm.py")


@pytest.fixture(scope="session")
def kafka_cluster(kctl_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's shared three-node cluster (the kctl_cluster fixture of kctl's pytest plugin)."""
    yield kctl_cluster


# ----- the profile matrix ------------------------------------------------------------------------
# The secured profile is a spec switch: a module that overrides ``kafka_cluster`` with
# ``profiled_cluster`` runs its tests on the plain cluster and, for the tests marked
# ``both_profiles`` (every test with KCTL_MATRIX=1, `make test-matrix`), on one shared secured
# cluster too (``secured_cluster``, also the cluster of test_security.py).

PROFILES = ("plain", "secured")


@pytest.fixture(scope="session")
def plain_cluster(kctl_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    yield kctl_cluster


@pytest.fixture(scope="session")
def secured_cluster() -> Iterator[KafkaCluster]:
    """The session's one secured three-node cluster (security.enabled: true)."""
    with KafkaCluster(nodes=3, security=True) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def profiled_cluster(request: pytest.FixtureRequest) -> KafkaCluster:
    cluster: KafkaCluster = request.getfixturevalue(f"{request.param}_cluster")
    return cluster


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "profiled_cluster" in metafunc.fixturenames:
        both = os.environ.get("KCTL_MATRIX") == "1" or metafunc.definition.get_closest_marker("both_profiles")
        metafunc.parametrize("profiled_cluster", PROFILES if both else PROFILES[:1], indirect=True, scope="session")
