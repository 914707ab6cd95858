"""Integration tests: real containers. One shared cluster (``kafka_cluster``) for tests that do not break it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from kctl.testing.cluster import KafkaCluster

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


# `make integration` runs the suite on three pytest-xdist workers (`--dist loadscope`), a module at a time (those
# sharing the secured cluster or Spark as one unit, below): a module's tests share its fixtures and some run in
# order. Each worker starts its own session cluster (kafka_cluster) when its first test needs it; the secured
# cluster runs on the one worker that runs its unit. A module that brings a cluster up on the default host ports of
# `kctl init` (the monitoring ports included) could meet another such module on the other worker: only
# test_lifecycle.py does in `make integration` (its zookeeper and kafka ports are its own, its monitoring ports the
# defaults); test_security_migration.py, which does too, is long (serial, make test-long). Swarm runs alone, after
# the rest (its own pytest run in the Makefile): `docker swarm leave` breaks Docker's embedded DNS in every
# container that was running on the engine (their resolver rules point at a resolver that is gone; checked on this
# engine: `getent hosts` of a peer fails after the leave, works before it), so a ZooKeeper restarted afterwards on
# another cluster cannot resolve its peers.
ALONE = "test_swarm.py"
# Seconds each module took on three workers (a clean-clone `make test` of 2026-12-05; test_declared.py as it
# is since its quotas come from ZooKeeper, the two newest alone; test_kraft_secured.py alone), to order the queue.
# test_hosts.py with its KRaft case: 177 s alone (133 s before it, 43 s for the case), scaled by that make test's
# 172/133. test_share_groups.py: 204 s in the last clean-clone make test. test_kraft_quorum.py: 70 s alone.
SLOW = {"test_hosts.py": 228, "test_mirror.py": 172, "test_mirror_secured.py": 157, "test_drill.py": 154,
        "test_change.py": 149, "test_migrate_kraft.py": 146, "test_stream.py": 143, "test_nodes.py": 116,
        "test_restart.py": 115, "test_monitor.py": 108, "test_kraft_native.py": 100, "test_lifecycle.py": 99,
        "test_kraft_quorum.py": 70,
        "test_monitor_alerts.py": 97, "test_sweep.py": 93, "test_security.py": 91, "test_ops_configs.py": 86,
        "test_security_migration_online.py": 81, "test_ops_clients.py": 69, "test_console.py": 66,
        "test_declared.py": 60, "test_testing_api.py": 60, "test_image.py": 58, "test_stream_sinks.py": 52,
        "test_share_groups.py": 200, "test_ops_zk_topics.py": 42, "test_kraft_secured.py": 41, "test_health.py": 36,
        "test_console_reassign.py": 25, "test_kraft_storage.py": 24, "test_metadata_version_raise.py": 20,
        "test_hosts_fleet.py": 10, "test_core_without_extras.py": 6, "test_kafka4.py": 5,
        "test_console_pages.py": 5, "test_stream_parse.py": 4,
        # alone, 2026-12-05: moto, a one-node Kafka and one run of the job on the store (31-38 s of it)
        "test_stream_s3.py": 50,
        # alone, 2026-12-05: one Kafka node, a Spark master and worker, the job's driver container
        "test_stream_spark.py": 30}


# Modules sharing one of the session's costly resources run as one work unit (`make integration`: a scheduler of
# xdist's --dist loadscope whose scope is this unit, or the module): one worker starts that cluster or Spark
# session, not both (a three-node start is about 23 CPU-seconds, and it then runs until the session ends).
# Declared here because xdist's controller schedules by test id alone; each worker checks the list against
# the fixtures its tests use (below).
SHARED = {"secured-cluster": ("test_console.py", "test_declared.py", "test_mirror_secured.py", "test_ops_clients.py",
                              "test_ops_configs.py", "test_ops_zk_topics.py", "test_security.py"),
          "spark": ("test_stream.py", "test_stream_parse.py", "test_stream_sinks.py")}
UNIT = {module: unit for unit, modules in SHARED.items() for module in modules}


def _shared(item: pytest.Item) -> str | None:
    """The session resource ``item`` uses that makes its module part of a shared unit, if any."""
    callspec = getattr(item, "callspec", None)
    names = getattr(item, "fixturenames", ())
    if "secured_cluster" in names or (callspec is not None and callspec.params.get("profiled_cluster") == "secured"):
        return "secured-cluster"
    return "spark" if "spark" in names else None


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
            return UNIT.get(module, module)

    return Units(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    unlisted = sorted({f"{item.fspath.basename} uses the {unit}" for item in items
                       if (unit := _shared(item)) is not None and UNIT.get(item.fspath.basename) != unit})
    if unlisted:
        raise pytest.UsageError(f"{'; '.join(unlisted)}: list it under that unit in SHARED "
                                "(tests/integration/conftest.py), or two workers start it")
    # The slowest modules first (xdist hands the units out in this order: --no-loadscope-reorder), so that two
    # workers end together; a stable sort keeps the order within a module. Serially, Swarm runs last.
    items.sort(key=lambda item: (item.fspath.basename == ALONE, -SLOW.get(item.fspath.basename, 0)))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session (a JVM) for the worker's Spark tests, read and written with as the job does
    (the Delta jars the job uses); the modules using it run as one work unit, so one worker starts it."""
    from kctl.stream.config import JobConfig
    from kctl.stream.jars import jars_for_job
    from kctl.stream.job import build_session
    from tests.integration.ports import spark_quick_jit

    key, value = spark_quick_jit()
    s = build_session(JobConfig("", [], "", "", master="local[1]", driver_memory="512m", shuffle_partitions=2,
                                jars=jars_for_job(None), extra_conf={key: value}), app_name="kctl-tests")
    yield s
    s.stop()


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


# ----- each module's wall time ----------------------------------------------------------------------
# Printed after the run (setup, calls and teardown of its tests, its module fixtures included): what the
# SLOW order above and the split between `make test` and `make test-long` are measured by.
_MODULE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _MODULE_SECONDS:
        return
    terminalreporter.write_sep("=", "seconds per module")
    for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f}s  {module}")
