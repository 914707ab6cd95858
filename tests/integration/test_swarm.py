"""engine swarm on a one-node Swarm of this machine's engine (issue 15).

The engine joins a Swarm on the loopback address for this module only and leaves it again at the end,
also on failure; an engine already in a Swarm (as a manager) is used as it is and left in it. One test
walks the whole life: refusals before anything is deployed (no Swarm; a published port taken), `up`,
`status`, a produce/consume round trip through the external listeners on 127.0.0.1 read back by an
independent consumer, one node's service made again through restart's gates, two short drills on the
stack (a leader kill, a network cut), the identity and engine checks (another cluster's kctl.yaml, the
same name elsewhere, a kctl.yaml that says engine compose: each refused, no task touched), `logs`,
`down --volumes`. Another test checks the reverse on the session's Compose cluster (no Swarm needed).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
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
from kctl.testing.cluster import with_quick_jit
from tests.integration.cli import follow_until

pytestmark = pytest.mark.integration

RECORDS = 200
DRILL_SHORT = ["--duration", "6s", "--rate", "200", "--bounces", "1", "--hold", "4s", "--timeout", "150"]


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
    f.write_text(yaml.safe_dump(with_quick_jit(data)))
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


class Stacks:
    """A test's Swarm stacks: its specs (a name and free ports each), the engine made a manager when the module
    found none (``made_swarm``), and on teardown every stack taken down with its volumes, the swarm left."""

    def __init__(self, made_swarm: bool, tmp_path: Path) -> None:
        self.made_swarm, self.tmp_path = made_swarm, tmp_path
        self.made: list[tuple[str, Path]] = []
        self.joined = False

    def make(self, prefix: str) -> tuple[str, list[int], Path]:
        name, ports = f"{prefix}{uuid.uuid4().hex[:6]}", free_ports(6)
        spec_file = _write_spec(self.tmp_path, name, ports, engine="swarm")
        self.made.append((name, spec_file))
        return name, ports, spec_file

    def init(self) -> None:
        if self.made_swarm and not self.joined:
            subprocess.run(["docker", "swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr",
                            "127.0.0.1:2377"], check=True, capture_output=True, timeout=60)
            self.joined = True

    def close(self) -> None:
        for name, spec_file in self.made:
            if _stack_objects(name)["services"] or _stack_objects(name)["containers"]:
                kctl(spec_file, "down", "--volumes", timeout=400)
        if self.joined:
            subprocess.run(["docker", "swarm", "leave", "--force"], capture_output=True, timeout=60)


@pytest.fixture()
def stack(swarm_engine: bool, tmp_path: Path) -> Iterator[Stacks]:
    stacks = Stacks(swarm_engine, tmp_path)
    try:
        yield stacks
    finally:
        stacks.close()


def _read_values(bootstrap: str, topic: str) -> list[int]:
    """The test's own reader (not the drill's): every value of every partition, up to the end offsets."""
    from tests.integration.load import read_values

    return read_values(bootstrap, topic, timeout=60)


def _tasks(name: str) -> dict[str, str]:
    """service -> the id of its running task's container."""
    out = {}
    for svc in docker.from_env().services.list(filters={"label": f"com.docker.stack.namespace=kctl-{name}"}):
        running = [t for t in svc.tasks() if t["Status"]["State"] == "running"]
        out[svc.name] = ",".join(sorted(t["Status"]["ContainerStatus"]["ContainerID"] for t in running))
    return out


def _refused(p: subprocess.CompletedProcess[str], *words: str) -> None:
    assert p.returncode == 2 and "Traceback" not in p.stderr and "hint" in p.stderr, p.stdout + p.stderr
    for w in words:
        assert w in p.stderr, p.stderr


def test_a_swarm_kctl_yaml_never_touches_a_compose_cluster(kafka_cluster: Any) -> None:
    """The reverse of the engine check in test_swarm_life: the session's Compose cluster, named by a kctl.yaml
    (next to its own, so the same state dir) that says engine swarm: down, a drill and apply are refused."""
    data = yaml.safe_load(kafka_cluster.spec_file.read_text())
    data["engine"] = "swarm"
    other = kafka_cluster.spec_file.parent / "kctl-swarm.yaml"
    other.write_text(yaml.safe_dump(data))
    try:
        before = {c.name: (c.id, c.attrs["State"]["StartedAt"]) for c in docker.from_env().containers.list(
            filters={"label": f"io.kctl.cluster={data['name']}"})}
        _refused(kctl(other, "down"), "runs on engine compose", "says engine swarm", "nothing was changed")
        _refused(kctl(other, "drill", "run", "leader-kill", *DRILL_SHORT), "runs on engine compose")
        _refused(kctl(other, "apply", "--yes"), "runs on engine compose")
        after = {c.name: (c.id, c.attrs["State"]["StartedAt"]) for c in docker.from_env().containers.list(
            filters={"label": f"io.kctl.cluster={data['name']}"})}
        assert after == before and len(after) == 3
        topics = kctl(kafka_cluster.spec_file, "topic", "list", "-o", "json")
        assert topics.returncode == 0 and not [t for t in json.loads(topics.stdout) if "drill" in str(t)], topics.stdout
    finally:
        other.unlink()


# The whole life (restart gates, two drills, the identity checks) is long: make test keeps the secured profile
# (up through every stage, a round trip, down) and the Compose cluster left alone.
@pytest.mark.long
def test_swarm_life(stack: Stacks, tmp_path: Path) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    name, ports, spec_file = stack.make("sw")
    if stack.made_swarm:
        # Not a manager: one message with the `docker swarm init` hint, nothing made.
        p = kctl(spec_file, "up", "--timeout", "60")
        assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
        assert "not in a Swarm" in p.stderr and "docker swarm init" in p.stderr, p.stderr
        assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}
        assert not (tmp_path / ".kctl" / name / "compose.yaml").exists()
        stack.init()

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

    # --wait: once, under the suite's load, broker 1 was missing from the registered brokers a moment after
    # `up` had seen all three (cause not found; a lapsed 6 s ZooKeeper session is the likeliest): the status
    # must come back healthy within a minute
    p = kctl(spec_file, "status", "--wait", "60", "-o", "json")
    assert p.returncode == 0, p.stdout + p.stderr
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
        from kctl.kafka import describe

        views, errors = describe.fetch_each(bootstrap, 5.0)
        desc = kctl(spec_file, "topic", "describe", topic)
        ps = subprocess.run(["docker", "ps", "-a", "--filter", f"label=io.kctl.cluster={name}", "--format",
                             "{{.Names}} {{.Status}} {{.Ports}}"], capture_output=True, text=True)
        pytest.fail(f"{len(acked - seen)} acknowledged records missing; brokers answering: {len(views)},"
                    f" errors {errors}\n{desc.stdout}{desc.stderr}\n{ps.stdout}")

    # Drills on the stack: the faults act on the task containers (a broker SIGKILLed and started again in
    # its container; the leader's node cut off the network with iptables), everything put back, and the
    # verdict agrees with this test's own read of the topic.
    for scenario in ("leader-kill", "broker-partition"):
        p = kctl(spec_file, "drill", "run", scenario, *DRILL_SHORT, "--keep-topic", "-o", "json", timeout=500)
        assert p.returncode == 0, p.stdout + p.stderr
        v = json.loads(p.stdout)
        assert v["holds"] is True and v["lost"] == 0 and v["duplicates"] == 0, (v["failures"], p.stderr)
        assert v["acked"] > 500 and v["recovery_seconds"] is not None
        assert v["healed_on_exit"] == [], v["healed_on_exit"]
        values = _read_values(bootstrap, v["topic"])
        assert len(values) == v["read"] and len(set(values)) == len(values)
        assert len(set(values)) == v["acked"] + v["unacked_present"]
    assert any("disconnect" in e["event"] for e in v["events"])
    from kctl.model.spec import load_spec
    from kctl.runtime.faults import Faults

    assert Faults(load_spec(spec_file)[0]).restore() == []  # nothing left paused, stopped, frozen or cut off

    # Identity and engine checks on the Swarm deployment, as on Compose; no task is touched.
    tasks = _tasks(name)
    assert len(tasks) == 3 and all(tasks.values()), tasks
    (tmp_path / "foreign").mkdir()
    foreign = _write_spec(tmp_path / "foreign", f"fo{uuid.uuid4().hex[:6]}", ports, engine="swarm")
    _refused(kctl(foreign, "topic", "create", "x", "--partitions", "1"), name, "nothing was")
    _refused(kctl(foreign, "drill", "run", "leader-kill", *DRILL_SHORT), name)
    (tmp_path / "elsewhere").mkdir()
    same_name = _write_spec(tmp_path / "elsewhere", name, ports, engine="swarm")
    _refused(kctl(same_name, "down"), "belong to state dir", "nothing was changed")
    as_compose = tmp_path / "kctl-compose.yaml"  # next to kctl.yaml: the same cluster, the same state dir
    as_compose.write_text(spec_file.read_text().replace("engine: swarm", "engine: compose"))
    _refused(kctl(as_compose, "down"), "runs on engine swarm", "says engine compose", "nothing was changed")
    _refused(kctl(as_compose, "drill", "run", "leader-kill", *DRILL_SHORT), "runs on engine swarm")
    _refused(kctl(as_compose, "restart", "logger1", "--yes"), "runs on engine swarm")
    _refused(kctl(as_compose, "apply", "--yes"), "runs on engine swarm")
    assert _tasks(name) == tasks
    assert sorted(_stack_objects(name)["services"]) == [f"kctl-{name}_logger{i}" for i in (1, 2, 3)]

    # apply of a file change on one node: its files reach it in a new task (one at a time through the roll's
    # gates), the other services' tasks untouched.
    data = yaml.safe_load(spec_file.read_text())
    data["nodes"][2]["overrides"] = {"zookeeper": {"maxClientCnxns": 61}}
    spec_file.write_text(yaml.safe_dump(data))
    p = kctl(spec_file, "apply", "--yes", "--timeout", "180", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "logger3" in p.stderr and "new task" in p.stderr, p.stderr
    after = _tasks(name)
    assert after[f"kctl-{name}_logger3"] != tasks[f"kctl-{name}_logger3"]
    assert {k: v for k, v in after.items() if not k.endswith("logger3")} == \
        {k: v for k, v in tasks.items() if not k.endswith("logger3")}
    logger3 = docker.from_env().containers.get(after[f"kctl-{name}_logger3"])
    assert b"maxClientCnxns=61" in logger3.exec_run(["cat", "/etc/kctl/zoo.cfg"]).output
    p = kctl(spec_file, "apply", "--dry-run")
    assert p.returncode == 0 and "nothing to apply" in p.stdout + p.stderr, p.stdout + p.stderr
    tasks = after

    # node add: one more service deployed into the stack (ZooKeeper reconfigured in as an observer, its broker
    # registered), the other services' tasks untouched; node remove takes it out again, the same way.
    started = {c.labels["io.kctl.service"]: (c.id, c.attrs["State"]["StartedAt"]) for c in
               docker.from_env().containers.list(filters={"label": f"io.kctl.cluster={name}"})}
    assert sorted(started) == ["logger1", "logger2", "logger3"]
    p = kctl(spec_file, "node", "add", "--role", "observer", "--timeout", "180", "-o", "json", timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr
    added = json.loads(p.stdout)
    assert added["node_id"] == 4 and added["host"] == "logger4", added
    assert sorted(_stack_objects(name)["services"]) == [f"kctl-{name}_logger{i}" for i in (1, 2, 3, 4)]
    after = _tasks(name)
    assert len(after) == 4 and {k: v for k, v in after.items() if k in tasks} == tasks, (after, tasks)
    now = {c.labels["io.kctl.service"]: (c.id, c.attrs["State"]["StartedAt"]) for c in
           docker.from_env().containers.list(filters={"label": f"io.kctl.cluster={name}"})}
    assert {h: now[h] for h in started} == started  # the stack update restarted none of the others
    st = json.loads(kctl(spec_file, "status", "--wait", "60", "-o", "json").stdout)
    assert st["health"] == "healthy" and st["brokers_registered"] == 4, st
    zk = kctl(spec_file, "zk", "config", "-o", "json")
    assert zk.returncode == 0 and "observer" in zk.stdout, zk.stdout + zk.stderr
    p = kctl(spec_file, "node", "remove", "logger4", "--yes", "-o", "json", timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(_stack_objects(name)["services"]) == [f"kctl-{name}_logger{i}" for i in (1, 2, 3)]
    assert not [v for v in _stack_objects(name)["volumes"] if "logger4" in v]
    assert _tasks(name) == tasks
    st = json.loads(kctl(spec_file, "status", "--wait", "60", "-o", "json").stdout)
    assert st["health"] == "healthy" and st["brokers_registered"] == 3, st

    p = kctl(spec_file, "logs", "logger1", "--service", "zookeeper", "-n", "5")
    assert p.returncode == 0 and p.stdout.strip(), p.stderr

    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr
    assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}
    labels = [n.attrs["Spec"].get("Labels") or {} for n in docker.from_env().nodes.list()]
    assert not any(k.startswith(f"io.kctl.place.{name}.") for lab in labels for k in lab)


@pytest.mark.long
def test_swarm_node_container_killed_and_replaced(stack: Stacks) -> None:
    """The fault injectors' node-level faults on a Swarm stack (its own, `make test-long`): a node's container
    stopped is refused before anything is done; a node's container killed under acks=all load is replaced by
    Swarm (a new task), the heal waits for it, and every acknowledged record is read back."""
    from confluent_kafka import Producer

    from kctl.errors import KctlError
    from kctl.model.spec import load_spec
    from kctl.runtime.faults import Faults

    name, ports, spec_file = stack.make("sk")
    stack.init()
    p = kctl(spec_file, "up", "--timeout", "240", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports[3:])
    p = kctl(spec_file, "topic", "create", "kill", "--partitions", "3", "--replication-factor", "3",
             "--config", "min.insync.replicas=2")
    assert p.returncode == 0, p.stderr
    tasks = _tasks(name)
    faults = Faults(load_spec(spec_file)[0])
    with pytest.raises(KctlError, match="cannot stay stopped"):
        faults.stop("logger2", "node")
    assert _tasks(name) == tasks and faults.pending == {}

    acked: list[int] = []
    prod = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "message.timeout.ms": 120000})

    def send(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            prod.produce("kill", str(i).encode(),
                         on_delivery=lambda err, msg: None if err else acked.append(int(msg.value())))
            prod.poll(0)
            time.sleep(0.005)

    with faults:
        send(0, 300)
        faults.kill("logger2", "node")
        send(300, 600)
        faults.heal()  # waits for Swarm's new task
    assert prod.flush(120) == 0
    after = _tasks(name)
    assert after[f"kctl-{name}_logger2"] != tasks[f"kctl-{name}_logger2"]
    assert {k: v for k, v in after.items() if not k.endswith("logger2")} == \
        {k: v for k, v in tasks.items() if not k.endswith("logger2")}
    st = json.loads(kctl(spec_file, "status", "--wait", "120", "-o", "json").stdout)
    assert st["health"] == "healthy", st
    values = _read_values(bootstrap, "kill")
    assert set(acked) <= set(values) and len(acked) >= 500, (len(acked), len(set(acked) - set(values)))
    assert faults.restore() == []
    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr


@pytest.mark.spark
def test_a_spark_cluster_beside_a_swarm_stack_runs_the_job_on_its_network(stack: Stacks, tmp_path: Path) -> None:
    """kctl.yaml's spark section on engine swarm: `kctl up` deploys the Spark stack (kctl.stream.spark_swarm) beside
    the cluster's, the master and worker each a service pinned by the cluster's node label, running Spark from
    the image every Swarm node can run, on the stack's overlay network; `kctl status` lists them; the job's driver
    and executor read the brokers through their INTERNAL listeners over that network; the worker's task killed
    mid-stream is started again by Swarm, the job goes on, and every table equals the ground truth; `kctl logs`
    reads a daemon's task log through Swarm; `kctl down --volumes` removes the Spark stack, its volumes and the
    network with the cluster's."""
    from tests.integration.ports import free_bases, spark_quick_jit
    from tests.integration.test_stream import _check, _events, _send, _topic

    name, ports, spec_file = stack.make("sp")
    data = yaml.safe_load(spec_file.read_text())
    data.update(nodes=data["nodes"][:1], spark={"workers": 1, "worker_memory": "1g",
                                                "ui_port": free_bases(1, nodes=3)[0]})
    data["kafka"] = {**data.get("kafka", {}), "default_replication_factor": 1, "offsets_topic_replication_factor": 1,
                     "transaction_state_log_replication_factor": 1, "min_insync_replicas": 1}
    spec_file.write_text(yaml.safe_dump(data))
    stack.init()
    p = kctl(spec_file, "up", "--timeout", "240", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    st = json.loads(kctl(spec_file, "status", "-o", "json").stdout)
    assert st["health"] == "healthy" and st["spark"]["status"] == "ALIVE", st
    assert [w["state"] for w in st["spark"]["workers"]] == ["ALIVE"]
    dc = docker.from_env()
    spark_stack = {"label": f"com.docker.stack.namespace=kctl-{name}-spark"}
    services = {s.name: s.attrs["Spec"] for s in dc.services.list(filters=spark_stack)}
    assert sorted(services) == [f"kctl-{name}-spark_spark-master", f"kctl-{name}-spark_spark-worker-1"]
    for svc in services.values():
        task = svc["TaskTemplate"]
        assert task["Placement"]["Constraints"] == [f"node.labels.io.kctl.place.{name}.logger1 == true"]
        assert task["ContainerSpec"]["Image"].startswith("kctl/spark-dist:")
        assert svc["EndpointSpec"]["Mode"] == "dnsrr"
    logs = kctl(spec_file, "logs", "spark-master", "--tail", "200")
    assert logs.returncode == 0 and "Registering worker" in logs.stdout, logs.stdout[-2000:] + logs.stderr
    # -F follows through Swarm (`docker service logs --follow`) until SIGTERM, which ends kctl and that at once
    code, lines, left = follow_until(spec_file, "logs", "spark-master", "-F", "-n", "200", until="Registering worker",
                                     sig=signal.SIGTERM)
    assert code == 0 and left == [], (code, lines[-5:], left)

    bs = f"127.0.0.1:{ports[3]}"
    topic = _topic(bs, partitions=2)
    events = _events(400, seed=11, start=dt.datetime(2024, 6, 1, 11, 58, 40, tzinfo=dt.timezone.utc))
    _send(bs, topic, events[:200], bad=3, seed=11)
    p = kctl(spec_file, "stream", "submit", "-d", "--name", "sw", "-t", topic, "--trigger", "1s", "--conf",
             "=".join(spark_quick_jit()), "-o", "json", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    for c in dc.containers.list(filters={"label": f"io.kctl.spark={name}"}):
        assert list(c.attrs["NetworkSettings"]["Networks"]) == [f"kctl-{name}"], c.name

    def caught_up(total: int) -> dict[str, Any]:
        deadline = time.monotonic() + 300
        got: dict[str, Any] = {}
        while time.monotonic() < deadline:
            got = json.loads(kctl(spec_file, "stream", "status", "--name", "sw", "-o", "json").stdout or "{}")
            if got.get("total_lag") == 0 and sum(q["latest"] for q in got.get("partitions") or []) == total:
                return got
            time.sleep(1)
        raise AssertionError(got)

    caught_up(203)
    worker = dc.containers.list(filters={"label": [f"io.kctl.spark={name}", "io.kctl.spark-role=worker"]})
    assert len(worker) == 1
    worker[0].kill()  # its executor goes with it; Swarm starts the task again
    _send(bs, topic, events[200:])
    got = caught_up(403)
    assert got["spark"]["driver_state"] == "running", got
    again = dc.containers.list(filters={"label": [f"io.kctl.spark={name}", "io.kctl.spark-role=worker"]})
    assert [c.id for c in again] != [worker[0].id] and len(again) == 1
    p = kctl(spec_file, "stream", "stop", "--name", "sw", "-o", "json")
    assert p.returncode == 0 and json.loads(p.stdout)["state"] == "stopped", p.stdout + p.stderr
    _check(Path(res["out"]), events, bad=3)

    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr
    assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}
    assert dc.services.list(filters=spark_stack) == []
    assert dc.containers.list(all=True, filters={"label": f"io.kctl.spark={name}"}) == []
    assert dc.volumes.list(filters={"label": f"io.kctl.spark={name}"}) == []
    assert [n.name for n in dc.networks.list(names=[f"kctl-{name}"])] == []


def test_swarm_secured_profile(stack: Stacks, tmp_path: Path) -> None:
    """`security.enabled` on engine swarm: the secrets reach each task as Swarm secrets of its own (no password
    in the stack file, a service's definition or a task's environment), the stack comes up healthy through
    the same stages (SCRAM bootstrap, the root znode's ACL, the round trip over SASL_SSL), kcat reads back
    what it wrote with only what `kctl client-config --format kcat` prints, no PLAINTEXT answers, and
    `kctl down --volumes` leaves no secret behind."""
    name, ports, spec_file = stack.make("ss")
    data = yaml.safe_load(spec_file.read_text())
    data["security"] = {"enabled": True}
    spec_file.write_text(yaml.safe_dump(data))
    dc = docker.from_env()

    def secrets() -> list[str]:
        return [s.name for s in dc.secrets.list(filters={"label": f"com.docker.stack.namespace=kctl-{name}"})]

    stack.init()
    p = kctl(spec_file, "up", "--timeout", "240", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "root znode writable by the brokers only" in p.stderr and "round trip" in p.stderr

    state = tmp_path / ".kctl" / name
    passwords = json.loads((state / "secrets" / "passwords.json").read_text()).values()
    assert len(secrets()) >= 3 * 5
    seen = (state / "stack.yaml").read_text()
    for svc in dc.services.list(filters={"label": f"com.docker.stack.namespace=kctl-{name}"}):
        seen += json.dumps(svc.attrs)
        mounts = svc.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]["Secrets"]
        host = svc.name.rsplit("_", 1)[1]
        assert mounts and all(m["SecretName"].startswith(f"kctl-{name}-{host}-") for m in mounts)
    for c in dc.containers.list(filters={"label": f"io.kctl.cluster={name}"}):
        seen += json.dumps(c.attrs["Config"]["Env"]) + json.dumps(c.attrs["Args"])
    assert not [pw for pw in passwords if pw in seen]

    conf = tmp_path / "kcat.conf"
    conf.write_text(kctl(spec_file, "client-config", "--format", "kcat").stdout)
    conf.chmod(0o600)
    assert kctl(spec_file, "topic", "create", "sec", "-p", "3", "-r", "3").returncode == 0
    lines = [f"secret-{i}" for i in range(100)]
    w = subprocess.run(["kcat", "-F", str(conf), "-P", "-t", "sec"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=60)
    assert w.returncode == 0, w.stderr
    r = subprocess.run(["kcat", "-F", str(conf), "-C", "-t", "sec", "-o", "beginning", "-e", "-q"],
                       capture_output=True, text=True, timeout=60)
    assert sorted(r.stdout.split()) == sorted(lines), r.stderr
    plain = subprocess.run(["kcat", "-b", f"127.0.0.1:{ports[3]}", "-L", "-m", "5"], capture_output=True,
                           timeout=60)
    assert plain.returncode != 0

    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr
    assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}
    assert secrets() == []


@pytest.mark.long
def test_swarm_on_kraft(stack: Stacks) -> None:
    """`metadata: kraft` on engine swarm (issue #26): the controllers' files reach each task as Swarm configs, the
    stack comes up healthy with a whole controller quorum, a round trip is read back by the test's own reader, the
    controller drill kills the active KRaft controller and heals, a node's service made again through restart's
    gates keeps every record, and `kctl down --volumes` leaves nothing."""
    name, ports, spec_file = stack.make("sq")
    data = yaml.safe_load(spec_file.read_text())
    data["metadata"] = "kraft"
    spec_file.write_text(yaml.safe_dump(data))
    stack.init()
    p = kctl(spec_file, "up", "--timeout", "240", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    st = json.loads(kctl(spec_file, "status", "--wait", "60", "-o", "json").stdout)
    assert (st["health"], st["metadata"], st["quorum"]) == ("healthy", "kraft", "ok"), st["problems"]
    svc = docker.from_env().services.get(f"kctl-{name}_logger2").attrs["Spec"]
    targets = [c["File"]["Name"] for c in svc["TaskTemplate"]["ContainerSpec"]["Configs"]]
    assert "/etc/kctl/controller.properties" in targets and "/etc/kctl/cluster-id" in targets, targets

    bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports[3:])
    p = kctl(spec_file, "topic", "create", "rt", "--partitions", "3", "--replication-factor", "3")
    assert p.returncode == 0, p.stderr
    acked = _produce_acked(bootstrap, "rt")

    p = kctl(spec_file, "drill", "run", "controller-kill", *DRILL_SHORT, "-o", "json", timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr
    v = json.loads(p.stdout)
    assert v["holds"] is True and v["lost"] == 0 and v["healed_on_exit"] == [], (v["failures"], p.stderr)
    assert any("controller" in e["event"] for e in v["events"]), v["events"]

    tasks = _tasks(name)
    p = kctl(spec_file, "restart", "logger2", "--service", "node", "--recreate", "--yes", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _tasks(name)[f"kctl-{name}_logger2"] != tasks[f"kctl-{name}_logger2"]
    st = json.loads(kctl(spec_file, "status", "--wait", "60", "-o", "json").stdout)
    assert (st["health"], st["quorum"]) == ("healthy", "ok"), st["problems"]
    assert sorted(_read_values(bootstrap, "rt")) == sorted(acked)

    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr
    assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}


@pytest.mark.long
def test_swarm_migrates_to_kraft(stack: Stacks) -> None:
    """`kctl migrate kraft` on engine swarm (issue #26), under an acks=all load: each step that changes a node's
    files makes its task again (Swarm configs are fixed per task), one node at a time through the roll's gates;
    controllers -> dual-write -> rollback -> controllers -> dual-write -> kraft-brokers -> finalize, every
    acknowledged record read back by kcat, the committed offsets and topic ids unchanged, `kctl status` healthy
    on KRaft, ZooKeeper retired in every task."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient

    from tests.integration.load import Load, kcat_values

    name, ports, spec_file = stack.make("sm")
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports[3:])

    def metadata() -> dict[str, Any]:
        a = AdminClient({"bootstrap.servers": bootstrap})
        described = a.describe_topics(TopicCollection(["load", "orders"]))
        topics = {t: str(f.result(30).topic_id) for t, f in described.items()}
        offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing")])["billing"].result(30)
        return {"topics": topics, "committed": sorted((tp.topic, tp.partition, tp.offset)
                                                      for tp in offsets.topic_partitions)}
    stack.init()
    p = kctl(spec_file, "up", "--timeout", "240", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    for topic in ("load", "orders"):
        p = kctl(spec_file, "topic", "create", topic, "--partitions", "3", "--replication-factor", "3")
        assert p.returncode == 0, p.stderr
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.commit(offsets=[TopicPartition("orders", i, 7 + i) for i in range(3)], asynchronous=False)
    c.close()
    before = metadata()
    steps = []
    with Load(bootstrap, "load", max_records=400_000, max_seconds=1500) as load:  # the whole migration
        for action, phase in (("next", "controllers"), ("next", "dual-write"), ("rollback", "zookeeper"),
                              ("next", "controllers"), ("next", "dual-write"), ("next", "kraft-brokers"),
                              ("finalize", "kraft")):
            t, load.stall, failed = time.monotonic(), 0.0, len(load.errors)
            p = kctl(spec_file, "migrate", "kraft", action, "--yes", timeout=1200)
            assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
            assert "making the container again" in p.stderr, p.stderr[-3000:]
            steps.append(f"{action} -> {phase} {time.monotonic() - t:.1f} s (stall {load.stall:.1f} s,"
                         f" {len(load.errors) - failed} failed)")
            st = json.loads(kctl(spec_file, "migrate", "kraft", "status", "-o", "json").stdout)
            assert st["phase"] == phase, st
        time.sleep(2)
    print(f"\nswarm migration: {'; '.join(steps)}; {len(load.acked)} acknowledged, {len(load.errors)} not"
          f" delivered {load.errors[:3]}")
    # Failed records, never acknowledged, while a node's new task answers with empty metadata (docs/multi-host.md)
    # are allowed; any other failure is not, nor one acknowledged record missing.
    assert load.failures() == [] and len(load.acked) > 1000
    assert sorted(load.acked - set(kcat_values(bootstrap, "load"))) == []  # 0 acknowledged records lost
    assert metadata() == before
    st = json.loads(kctl(spec_file, "status", "--wait", "60", "-o", "json").stdout)
    assert (st["health"], st["metadata"], st["quorum"]) == ("healthy", "kraft", "ok"), st["problems"]
    for cid in _tasks(name).values():  # every task: no ZooKeeper, its program retired
        out = docker.from_env().containers.get(cid).exec_run(
            ["sh", "-c", "pgrep -f '[Q]uorumPeerMain' || echo no-zookeeper"]).output.decode()
        assert "no-zookeeper" in out, out
    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr


QUORUM_RELEASE = "4.3.1"  # as tests/integration/test_kraft_quorum.py
KAFKA_TOOLS = "env KAFKA_HEAP_OPTS=-Xmx128m KAFKA_JMX_PORT= /opt/kafka/bin"


def _produce_acked(bootstrap: str, topic: str) -> list[int]:
    """RECORDS numbered records produced with acks=all and idempotence, every one acknowledged: their numbers (the
    producer is gone when this returns)."""
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    acked: list[int] = []
    for i in range(RECORDS):
        prod.produce(topic, str(i).encode(),
                     on_delivery=lambda err, msg: None if err else acked.append(int(msg.value())))
    assert prod.flush(60) == 0 and len(acked) == RECORDS
    return acked


def _task_exec(name: str, host: str, script: str) -> str:
    """``script`` in ``host``'s running task container, as Docker runs it (not through kctl)."""
    (cid,) = _tasks(name)[f"kctl-{name}_{host}"].split(",")
    res = docker.from_env().containers.get(cid).exec_run(["sh", "-c", script])
    out = res.output.decode()
    assert res.exit_code == 0, out
    return out


def _kafka_voters(name: str, host: str) -> dict[int, str]:
    """{voter id: directory id} as kafka-metadata-quorum.sh, run by hand in ``host``'s task, answers."""
    out = _task_exec(name, host, f"{KAFKA_TOOLS}/kafka-metadata-quorum.sh --bootstrap-controller {host}:9095"
                                 " describe --status 2>/dev/null")
    line = next(ln for ln in out.splitlines() if ln.startswith("CurrentVoters"))
    return {int(i): d for i, d in re.findall(r'"id": (\d+), "directoryId": "([^"]+)"', line)}


def _one_kraft_node(stack: Stacks, prefix: str) -> tuple[str, list[int], Path]:
    name, ports, spec_file = stack.make(prefix)
    data = yaml.safe_load(spec_file.read_text())
    data.update(metadata="kraft", versions={"kafka": QUORUM_RELEASE}, nodes=data["nodes"][:1])
    data["kafka"] = {**data["kafka"], "default_replication_factor": 1, "offsets_topic_replication_factor": 1,
                     "transaction_state_log_replication_factor": 1, "min_insync_replicas": 1}
    spec_file.write_text(yaml.safe_dump(data))
    return name, ports, spec_file


@pytest.mark.long  # its short form on compose is in make test (test_kraft_quorum.py)
def test_swarm_dynamic_quorum_takes_a_controller_and_lets_it_go(stack: Stacks) -> None:
    """The dynamic controller quorum (KIP-853) on engine swarm (issue #47), on a one-node 4.3 KRaft stack: `kctl
    quorum make-dynamic` raises kraft.version and rolls the node onto controller.quorum.bootstrap.servers (a new
    task, its Swarm configs made again); `kctl node add --role controller` starts a node whose controller kctl
    formats to join (its volume made without the start script's permit) and promotes; `kctl node remove` removes
    the voter before the node's service and volumes. Kafka's own tools, run by hand in the tasks, say so; every
    record produced before is read back by the test's own reader."""
    name, ports, spec_file = _one_kraft_node(stack, "sd")
    stack.init()
    t0 = time.monotonic()
    p = kctl(spec_file, "up", "--timeout", "240", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    q = json.loads(kctl(spec_file, "quorum", "-o", "json").stdout)
    assert q["dynamic"] is False and [v["id"] for v in q["voters"]] == [3001], q
    p = kctl(spec_file, "node", "add", "--role", "controller")
    _refused(p, "is static", "kctl quorum make-dynamic")
    assert "logger2" not in spec_file.read_text()
    timings = {"up": time.monotonic() - t0}

    t = time.monotonic()
    task = _tasks(name)[f"kctl-{name}_logger1"]
    p = kctl(spec_file, "quorum", "make-dynamic", "--yes", timeout=600)
    assert p.returncode == 0 and "kraft.version: 0 -> 1" in p.stderr, p.stdout + p.stderr
    assert _tasks(name)[f"kctl-{name}_logger1"] != task  # the roll made its task again, with the new files
    features = _task_exec(name, "logger1", f"{KAFKA_TOOLS}/kafka-features.sh --bootstrap-server logger1:9092"
                                           " describe 2>/dev/null")
    assert re.search(r"Feature: kraft.version\s.*FinalizedVersionLevel: 1", features), features
    conf = _task_exec(name, "logger1", "cat /etc/kctl/controller.properties /etc/kctl/server.properties")
    assert "controller.quorum.voters" not in conf and conf.count("controller.quorum.bootstrap.servers=") == 2
    timings["make-dynamic"] = time.monotonic() - t

    bootstrap = f"127.0.0.1:{ports[3]}"
    assert kctl(spec_file, "topic", "create", "orders", "-p", "2", "-r", "1").returncode == 0
    acked = _produce_acked(bootstrap, "orders")  # its producer closed: no reconnects while the nodes change

    t = time.monotonic()
    p = kctl(spec_file, "node", "add", "--role", "controller", "--timeout", "240", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "made without the permit" in p.stderr and "controller promoted to a voter (add-controller)" in p.stderr
    voters = _kafka_voters(name, "logger1")
    joined = _task_exec(name, "logger2", "cat /var/opt/kctl/controller/metadata/meta.properties")
    assert sorted(voters) == [3001, 3002] and f"directory.id={voters[3002]}" in joined, (voters, joined)
    log = _task_exec(name, "logger2", "cat /var/log/kctl/controller/*.out /var/log/kctl/controller/*.log"
                                      " 2>/dev/null; true")
    assert "must specify one of the following" not in log  # its start script never formatted it as static
    q = json.loads(kctl(spec_file, "quorum", "-o", "json").stdout)
    assert q["dynamic"] and q["problems"] == [] and {v["node"] for v in q["voters"]} == {"logger1", "logger2"}, q
    timings["node add --role controller"] = time.monotonic() - t

    t = time.monotonic()
    _refused(kctl(spec_file, "node", "remove", "logger2", "--yes"), "leaves 1 voter(s)", "--force")
    p = kctl(spec_file, "node", "remove", "logger2", "--yes", "--force", timeout=600)
    assert p.returncode == 0 and "controller removed from the quorum (remove-controller)" in p.stderr, p.stderr
    assert sorted(_kafka_voters(name, "logger1")) == [3001]
    assert _stack_objects(name)["services"] == [f"kctl-{name}_logger1"]
    assert not [v for v in _stack_objects(name)["volumes"] if "logger2" in v]
    timings["node remove"] = time.monotonic() - t
    st = json.loads(kctl(spec_file, "status", "--wait", "60", "-o", "json").stdout)
    assert (st["health"], st["quorum"]) == ("healthy", "ok"), st["problems"]
    assert sorted(_read_values(bootstrap, "orders")) == sorted(acked)
    print(f"\nswarm dynamic quorum: {', '.join(f'{k} {v:.1f} s' for k, v in timings.items())}")

    # `kctl down` without a quorum removes the nodes' services at once, and keeps their data: only --volumes
    # removes it (it once removed each node's volumes as `kctl node remove` does)
    (cid,) = _tasks(name)[f"kctl-{name}_logger1"].split(",")
    res = docker.from_env().containers.get(cid).exec_run(
        ["supervisorctl", "-c", "/etc/supervisor/supervisord.conf", "stop", "controller"], user="root")
    assert res.exit_code == 0, res.output.decode()
    p = kctl(spec_file, "down", timeout=400)
    assert p.returncode == 0 and "no KRaft controller quorum" in p.stderr, p.stderr
    left = _stack_objects(name)
    assert left["services"] == [] and f"kctl-{name}_logger1-data" in left["volumes"], left
    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr
    assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}


@pytest.mark.long
def test_swarm_dynamic_quorum_under_load_loses_nothing(stack: Stacks, tmp_path: Path) -> None:
    """The dynamic quorum's changes on a three-node 4.3 KRaft stack, each under an acks=all load read back by kcat
    (as tests/integration/test_kraft_quorum.py on Compose): make-dynamic (every task made again, one at a time
    through the roll's gates), a controller added, a controller's node removed (4 -> 3 voters), the runbook "replace
    a failed controller" on logger3 as written, and a `kctl node add --role controller` killed after its format,
    refused again with the hint, then finished by `kctl quorum add-controller`."""
    from tests.integration import runbook
    from tests.integration.load import Load
    from tests.integration.test_kraft_quorum import kill_after, measured, warm

    name, ports, spec_file = stack.make("sdl")
    data = yaml.safe_load(spec_file.read_text())
    data.update(metadata="kraft", versions={"kafka": QUORUM_RELEASE})
    spec_file.write_text(yaml.safe_dump(data))
    stack.init()
    p = kctl(spec_file, "up", "--timeout", "240", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    bootstrap = json.loads(kctl(spec_file, "status", "-o", "json").stdout)["bootstrap_servers"]
    for t in ("q-dyn", "q-add", "q-remove", "q-replace"):
        p = kctl(spec_file, "topic", "create", t, "-p", "3", "-r", "3", "--config", "min.insync.replicas=2")
        assert p.returncode == 0, p.stderr
    figures: dict[str, dict[str, object]] = {}
    seconds: dict[str, float] = {}

    def step(what: str, topic: str, *args: str) -> str:
        t = time.monotonic()
        with Load(bootstrap, topic, max_seconds=900) as load:
            warm(load)
            p = kctl(spec_file, *args, timeout=900)
            assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
        seconds[what] = round(time.monotonic() - t, 1)
        figures[what] = measured(load, bootstrap, topic)
        return p.stderr

    said = step("make-dynamic", "q-dyn", "quorum", "make-dynamic", "--yes")
    assert "kraft.version: 0 -> 1" in said and "making the container again" in said, said[-3000:]
    said = step("controller added", "q-add", "node", "add", "--role", "controller", "--timeout", "240")
    assert "add-controller" in said and sorted(_kafka_voters(name, "logger2")) == [3001, 3002, 3003, 3004]
    said = step("controller removed", "q-remove", "node", "remove", "logger1", "--yes")  # 4 -> 3: no --force
    assert sorted(_kafka_voters(name, "logger2")) == [3002, 3003, 3004]
    bootstrap = json.loads(kctl(spec_file, "status", "-o", "json").stdout)["bootstrap_servers"]

    # the runbook: logger3's metadata disk lost (its task's volume wiped under the controller)
    old = _kafka_voters(name, "logger2")[3003]
    t = time.monotonic()
    with Load(bootstrap, "q-replace", max_seconds=900) as load:
        warm(load)
        _task_exec(name, "logger3", "supervisorctl stop controller && rm -rf /var/opt/kctl/controller/metadata &&"
                                    " supervisorctl start controller")
        deadline = time.monotonic() + 60
        while "UNFORMATTED" not in " ".join(json.loads(kctl(spec_file, "status", "-o", "json").stdout)["problems"]):
            assert time.monotonic() < deadline, "logger3's controller never said UNFORMATTED"
            time.sleep(2)
        ran = runbook.run(runbook.RUNBOOKS / "replace-failed-controller.md", spec_file,
                          state_dir=tmp_path / ".kctl" / name, metadata="kraft")
        assert any(old in r.output for r in ran), [r.output[-500:] for r in ran]  # removed by its old id
    seconds["failed controller replaced"] = round(time.monotonic() - t, 1)
    figures["failed controller replaced"] = measured(load, bootstrap, "q-replace")
    voters = _kafka_voters(name, "logger2")
    assert sorted(voters) == [3002, 3003, 3004] and voters[3003] != old, voters

    # kctl killed between the new controller's format and its promotion: one clear message, then resumed
    killed = kill_after(tmp_path, ["node", "add", "--role", "controller"], "formatted to join the quorum")
    assert "logger5" in spec_file.read_text(), killed
    q = kctl(spec_file, "quorum")
    assert q.returncode == 1 and "controller 3005 is in kctl.yaml but not a voter" in q.stdout, q.stdout[-2000:]
    _refused(kctl(spec_file, "node", "add", "--role", "controller"), "logger5 runs a controller",
             "kctl quorum add-controller logger5")
    p = kctl(spec_file, "quorum", "add-controller", "logger5")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(_kafka_voters(name, "logger2")) == [3002, 3003, 3004, 3005]
    st = json.loads(kctl(spec_file, "status", "--wait", "60", "-o", "json").stdout)
    assert (st["health"], st["quorum"]) == ("healthy", "ok"), st["problems"]
    print(f"\nSWARM QUORUM FIGURES {json.dumps(figures)} seconds {json.dumps(seconds)}")
    for what, f in figures.items():
        assert f["lost"] == 0 and not f["errors"] and int(str(f["acked"])) > 100, (what, f)
    p = kctl(spec_file, "down", "--volumes", timeout=400)
    assert p.returncode == 0, p.stderr
    assert _stack_objects(name) == {"services": [], "containers": [], "volumes": []}
