"""Ports for a test that makes its cluster with `kctl init --name` (the operator's way): the command keeps the
default host ports when they are free, and another module on the other pytest-xdist worker may be about to take
them (test_hosts' cluster publishes the defaults). Moved to free ranges far from the defaults instead."""

from __future__ import annotations

from pathlib import Path

import yaml

from kctl.runtime.ports import free_runs
from kctl.testing.cluster import with_quick_jit


def free_bases(count: int, nodes: int = 3) -> list[int]:
    """``count`` port bases, each with ``nodes`` free consecutive ports, 10 apart: below the kernel's ephemeral range
    (no outgoing connection of any process takes one meanwhile) and reserved against the other pytest-xdist workers'
    and the testing API's choices (kctl.runtime.ports.free_runs). A CI run saw a base from 41000-49000, inside Linux's
    ephemeral range, "in use on 127.0.0.1" at `kctl up`."""
    return free_runs(count, nodes)


def spark_quick_jit() -> tuple[str, str]:
    """The testing API's quick JIT for a Spark driver of a test, as a setting and its value (a session's config;
    joined by "=" for `kctl stream submit --conf`): a test's job runs for a minute (docs/pipeline.md)."""
    from kctl.testing.cluster import QUICK_JIT

    return "spark.driver.extraJavaOptions", " ".join(QUICK_JIT)


def away_from_defaults(spec_file: Path, nodes: int = 3) -> None:
    """Give kctl.yaml's published ports (ZooKeeper clients, Kafka's external listeners, the exporters) bases of
    ``nodes`` free consecutive ports each (free_bases: reserved, so no other worker's test takes them, even while
    a test takes its cluster down and up again on kept data), and its JVMs the testing API's quick JIT (a
    short-lived test cluster: kctl.testing.cluster.QUICK_JIT)."""
    bases = free_bases(4, nodes)
    data = with_quick_jit(yaml.safe_load(spec_file.read_text()))
    data.setdefault("zookeeper", {})["host_port_base"] = bases[0]
    data.setdefault("kafka", {})["external_port_base"] = bases[1]
    data.setdefault("monitoring", {})["zookeeper_exporter_host_port_base"] = bases[2]
    data["monitoring"]["kafka_exporter_host_port_base"] = bases[3]
    spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
