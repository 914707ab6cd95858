"""engine swarm on a one-node Swarm of this machine's engine (issue 15).

The engine joins a Swarm on the loopback address for this module only and leaves it again at the end,
also on failure; an engine already in a Swarm (as a manager) is used as it is and left in it. One test
walks the whole life: refusals before anything is deployed (no Swarm; a published port taken), `up`,
`status`, a produce/consume round trip through the external listeners on 127.0.0.1 read back by an
independent consumer, one node's service made again through restart's gates, `logs`, `down --volumes`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from kctl.runtime.ports import free_ports

pytestmark = pytest.mark.integration

RECORDS = 200


def _swarm_state() -> tuple[str, bool]:
    sw = docker.from_env().info().get("Swarm") or {}
    return str(sw.get("LocalNodeState") or "inactive"), bool(sw.get("ControlAvailable"))


def kctl(spec_file: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], capture_output=True,
                          text=True, timeout=timeout, cwd=spec_file.parent)


def _write_spec(tmp: Path, name: str, ports: list[int], engine: str | None) -> Path:
    data: dict[str, Any] = {
        "name": name,
        "nodes": [{"id": i, "hostname": f"logger{i}", "zookeeper_port": ports[i - 1], "kafka_port": ports[2 + i]}
                  for i in (1, 2, 3)],
    }
    if engine:
        data["engine"] = engine
    f = tmp / "kctl.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def _stack_objects(name: str) -> dict[str, list[str]]:
    dc = docker.from_env()
    stack = {"label": f"com.docker.stack.namespace=kctl-{name}"}
    mine = {"label": f"io.kctl.cluster={name}"}
    services = [s.name for s in dc.services.list(filters=stack)] if _swarm_state()[1] else []
    return {
        "services": services,
        "containers": [c.name for c in dc.containers.list(all=True, filters=mine)],
        "volumes": [v.name for v in dc.volumes.list(filters=mine)],
    }


@pytest.fixture(scope="module")
def swarm_engine() -> Iterator[bool]:
    """The engine as a Swarm manager for this module; True when this module made it one (and must leave)."""
    state, manager = _swarm_state()
    if state == "active" and not manager:
        pytest.skip("this engine is a Swarm worker: the test needs a manager, or no Swarm at all")
    yield state != "active"


def _init() -> None:
    subprocess.run(["docker", "swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr", "127.0.0.1:2377"],
                   check=True, capture_output=True, timeout=60)


def _leave() -> None:
    subprocess.run(["docker", "swarm", "leave", "--force"], capture_output=True, timeout=60)


def test_swarm_life(swarm_engine: bool, tmp_path: Path) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    name = f"sw{uuid.uuid4().hex[:6]}"
    ports = free_ports(6)
    made_swarm = swarm_engine
    spec_file = _write_spec(tmp_path, name, ports, engine="swarm")
    try:
        if made_swarm:
            # Not a manager: one message with the `docker swarm init` hint, nothing made.
            p = kctl(spec_file, "up", "--timeout", "60")
            assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
            assert "not in a Swarm" in p.stderr and "docker swarm init" in p.stderr, p.stderr
            assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}
            assert not (tmp_path / ".kctl" / name / "compose.yaml").exists()
            _init()

        # A published port taken on the node that would run it: refused before deploying.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", ports[4]))
            s.listen(1)
            p = kctl(spec_file, "up", "--timeout", "60")
        assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
        assert "published ports taken" in p.stderr and str(ports[4]) in p.stderr and "hint" in p.stderr, p.stderr
        assert _stack_objects(name)["services"] == []

        # up: three services on one Swarm node, with the spread warning, through the readiness stages.
        p = kctl(spec_file, "up", "--timeout", "240", timeout=400)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "quorum then depends on one host" in p.stderr
        assert "produce/consume round trip" in p.stderr
        assert sorted(_stack_objects(name)["services"]) == [f"kctl-{name}_logger{i}" for i in (1, 2, 3)]
        svc = docker.from_env().services.get(f"kctl-{name}_logger2").attrs["Spec"]
        assert svc["EndpointSpec"]["Mode"] == "dnsrr"
        assert svc["Mode"]["Replicated"]["Replicas"] == 1
        assert svc["TaskTemplate"]["Placement"]["Constraints"] == [
            f"node.labels.io.kctl.place.{name}.logger2 == true"]

        p = kctl(spec_file, "status", "-o", "json")
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout)
        assert st["health"] == "healthy" and st["brokers_registered"] == 3

        # Round trip through the external listeners on 127.0.0.1, read back by an independent consumer.
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports[3:])
        topic = "swarm-rt"
        p = kctl(spec_file, "topic", "create", topic, "--partitions", "3", "--replication-factor", "3")
        assert p.returncode == 0, p.stderr
        acked: set[str] = set()

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.add(msg.value().decode())

        prod = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(RECORDS):
            prod.produce(topic, f"r{i}".encode(), on_delivery=delivered)
        assert prod.flush(60) == 0
        assert len(acked) == RECORDS

        # One node's service made again (a new Swarm task) through restart's gates; then every record is there.
        p = kctl(spec_file, "restart", "logger2", "--service", "node", "--recreate", "--yes", timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "making the container again" in p.stderr
        tasks = docker.from_env().services.get(f"kctl-{name}_logger2").tasks()
        assert len(tasks) >= 2  # the first task and its successor
        p = kctl(spec_file, "status", "--wait", "60", "-o", "json")
        assert json.loads(p.stdout)["health"] == "healthy", p.stderr

        # The independent reader: its own consumer, every partition assigned from the beginning (no group).
        cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
        cons.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(3)])
        seen: set[str] = set()
        deadline = time.monotonic() + 90
        try:
            while not seen >= acked and time.monotonic() < deadline:
                msg = cons.poll(1.0)
                if msg is not None and msg.error() is None:
                    seen.add(msg.value().decode())
        finally:
            cons.close()
        if not acked <= seen:
            from kctl.kafka import metadata

            views, errors = metadata.fetch_each(bootstrap, 5.0)
            desc = kctl(spec_file, "topic", "describe", topic)
            ps = subprocess.run(["docker", "ps", "-a", "--filter", f"label=io.kctl.cluster={name}", "--format",
                                 "{{.Names}} {{.Status}} {{.Ports}}"], capture_output=True, text=True)
            pytest.fail(f"{len(acked - seen)} acknowledged records missing; brokers answering: {len(views)},"
                        f" errors {errors}\n{desc.stdout}{desc.stderr}\n{ps.stdout}")

        p = kctl(spec_file, "logs", "logger1", "--service", "zookeeper", "-n", "5")
        assert p.returncode == 0 and p.stdout.strip(), p.stderr

        p = kctl(spec_file, "down", "--volumes", timeout=400)
        assert p.returncode == 0, p.stderr
        assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}
        labels = [n.attrs["Spec"].get("Labels") or {} for n in docker.from_env().nodes.list()]
        assert not any(k.startswith(f"io.kctl.place.{name}.") for lab in labels for k in lab)
    finally:
        if _stack_objects(name)["services"] or _stack_objects(name)["containers"]:
            kctl(spec_file, "down", "--volumes", timeout=400)
        if made_swarm:
            _leave()
