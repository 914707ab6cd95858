"""Ports for a test that makes its cluster with `kctl init --name` (the operator's way): the command keeps the
default host ports when they are free, and another module on the other pytest-xdist worker may be about to take
them (test_hosts' cluster publishes the defaults). Moved to free ranges far from the defaults instead."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from kctl.runtime.ports import port_free
from kctl.testing.cluster import with_quick_jit


def free_bases(count: int, nodes: int = 3, start: int = 41000, stop: int = 49000) -> list[int]:
    """``count`` port bases, each with ``nodes`` free consecutive ports, 10 apart from ``start`` (below ``stop``)."""
    bases: list[int] = []
    for base in range(start, stop, 10):
        if all(port_free(base + i) for i in range(nodes)):
            bases.append(base)
            if len(bases) == count:
                return bases
    raise AssertionError(f"no {count} free port ranges in {start}-{stop}")


def spark_quick_jit() -> tuple[str, str]:
    """The testing API's quick JIT for a Spark driver of a test, as a setting and its value (a session's config;
    joined by "=" for `kctl stream submit --conf`): a test's job runs for a minute (docs/pipeline.md)."""
    from kctl.testing.cluster import QUICK_JIT

    return "spark.driver.extraJavaOptions", " ".join(QUICK_JIT)


def worker_range(start: int = 41000, stop: int = 49000) -> tuple[int, int]:
    """The share of ``start``-``stop`` that this pytest-xdist worker picks ports from. A port is only "free" until
    something binds it: a test that takes its cluster down and up again on kept data (test_kraft_native) frees its
    ports for the moment between, and a test on another worker that looked for free ports then took them (a CI run
    saw logger1 left Created, its port published by the other test's cluster). Workers never share a range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    size = (stop - start) // 4
    low = start + (index % 4) * size
    return low, low + size


def away_from_defaults(spec_file: Path, nodes: int = 3, start: int = 41000) -> None:
    """Give kctl.yaml's published ports (ZooKeeper clients, Kafka's external listeners, the exporters) bases of
    ``nodes`` free consecutive ports each, from this worker's share of ``start``-49000 (worker_range), and its
    JVMs the testing API's quick JIT (a short-lived test cluster: kctl.testing.cluster.QUICK_JIT)."""
    low, high = worker_range(start)
    bases = free_bases(4, nodes, low, high)
    data = with_quick_jit(yaml.safe_load(spec_file.read_text()))
    data.setdefault("zookeeper", {})["host_port_base"] = bases[0]
    data.setdefault("kafka", {})["external_port_base"] = bases[1]
    data.setdefault("monitoring", {})["zookeeper_exporter_host_port_base"] = bases[2]
    data["monitoring"]["kafka_exporter_host_port_base"] = bases[3]
    spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
