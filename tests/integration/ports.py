"""Ports for a test that makes its cluster with `kctl init --name` (the operator's way): the command keeps the
default host ports when they are free, and another module on the other pytest-xdist worker may be about to take
them (test_hosts' cluster publishes the defaults). Moved to free ranges far from the defaults instead."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import yaml


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_bases(count: int, nodes: int = 3, start: int = 41000, stop: int = 49000) -> list[int]:
    """``count`` port bases, each with ``nodes`` free consecutive ports, 10 apart from ``start`` (below ``stop``)."""
    bases: list[int] = []
    for base in range(start, stop, 10):
        if all(_free(base + i) for i in range(nodes)):
            bases.append(base)
            if len(bases) == count:
                return bases
    raise AssertionError(f"no {count} free port ranges in {start}-{stop}")


def quick_jit(data: dict[str, Any]) -> dict[str, Any]:
    """A test's kctl.yaml (as data) with the JIT flags the testing API gives its clusters, unless it names JVM
    flags of its own: a test cluster lives for minutes, and C2's compiles on two busy cores are work it never
    pays back (docs/testing.md)."""
    from kctl.testing.cluster import QUICK_JIT

    for svc in ("zookeeper", "kafka"):
        section = data.setdefault(svc, {})
        if not section.get("jvm_options"):
            section["jvm_options"] = list(QUICK_JIT)
    return data


def spark_quick_jit() -> str:
    """The same JIT flags for a Spark driver of a test (`kctl stream submit --conf`, a session's config): a
    test's job runs for a minute (docs/pipeline.md has the figures)."""
    from kctl.testing.cluster import QUICK_JIT

    return "spark.driver.extraJavaOptions=" + " ".join(QUICK_JIT)


def away_from_defaults(spec_file: Path, nodes: int = 3, start: int = 41000) -> None:
    """Give kctl.yaml's published ports (ZooKeeper clients, Kafka's external listeners, the exporters) bases of
    ``nodes`` free consecutive ports each, from ``start`` up (bounded: 41000-49000), and its JVMs the testing
    API's quick JIT (a short-lived test cluster: kctl.testing.cluster.QUICK_JIT)."""
    bases = free_bases(4, nodes, start)
    data = yaml.safe_load(spec_file.read_text())
    quick_jit(data)
    data.setdefault("zookeeper", {})["host_port_base"] = bases[0]
    data.setdefault("kafka", {})["external_port_base"] = bases[1]
    data.setdefault("monitoring", {})["zookeeper_exporter_host_port_base"] = bases[2]
    data["monitoring"]["kafka_exporter_host_port_base"] = bases[3]
    spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
