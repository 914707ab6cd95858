"""``KafkaCluster``: a real multi-node ZooKeeper + Kafka ensemble for integration tests.

Brought up and down by kctl's own lifecycle (:mod:`kctl.cluster.lifecycle`: the same
render, deploy and readiness stages as ``kctl up``), through the Docker SDK:

    with KafkaCluster(nodes=3) as cluster:
        cluster.create_topic("orders", partitions=3, replication_factor=3)
        leader = cluster.partition_leader("orders", 0)
        cluster.kill(leader)
        cluster.wait_until_healthy(allow_missing=1)
        cluster.start(leader)

Every cluster gets a unique name, project, network and free host ports, so
several can run at once; everything is removed on exit, even when the test
body fails. A cluster left by a crashed run (its owner process is gone) is
found by label and removed when the next one starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from kctl import contract
from kctl.cluster import health, lifecycle
from kctl.cluster.health import ClusterStatus
from kctl.contract import LABEL_CLUSTER
from kctl.errors import KctlError, TimeoutReached
from kctl.kafka.client import Target, admin, wait_for_topic
from kctl.model.spec import (
    ClusterSpec,
    MetadataMode,
    NodeSpec,
    SecuritySpec,
    load_cluster,
    parse_spec,
    resolve_cluster,
)
from kctl.runtime import docker_api as rc
from kctl.runtime.engine import engines
from kctl.runtime.faults import Faults
from kctl.runtime.ports import free_ports
from kctl.security import store
from kctl.wait import wait_until

LABEL_TESTING = contract.LABEL_TESTING
LABEL_OWNER = contract.LABEL_TESTING_OWNER
LABEL_REUSE = contract.LABEL_TESTING_REUSE


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(docker_client: Any) -> list[str]:
    """Remove test clusters whose owner process is gone (a crashed or killed test run)."""
    removed: list[str] = []
    seen: set[str] = set()
    # Every test cluster on the engine, other runs' and other workers' too: one of theirs removed between the
    # SDK's list and its inspect of it is theirs to remove (ignore_removed), not a failure of this start.
    for c in docker_client.containers.list(all=True, filters={"label": LABEL_TESTING}, ignore_removed=True):
        labels = c.labels or {}
        name = labels.get(LABEL_CLUSTER)
        if not name or name in seen or labels.get(LABEL_REUSE) == "true":
            continue
        seen.add(name)
        if not _owner_alive(labels.get(LABEL_OWNER, "")):
            rc.remove_by_label(name, docker_client)
            removed.append(name)
    return removed


# A test cluster's JVMs: C1 only (the flag `kctl up`'s figures in docs/benchmarks.md are measured with and without).
QUICK_JIT = ("-XX:TieredStopAtLevel=1",)
# A test cluster's followers wait up to this long for new data in a fetch (replica.fetch.wait.max.ms; Kafka's
# default 500): a fetch still returns as soon as data arrives, and an idle cluster answers a quarter of the fetches.
FOLLOWER_WAIT_MS = 2000
# Settings that bound replica.fetch.wait.max.ms (Kafka refuses a broker whose wait exceeds either): a caller's own
# value of any of the three leaves the wait at Kafka's default.
_FETCH_WAIT_BOUNDS = ("replica.fetch.wait.max.ms", "replica.lag.time.max.ms", "replica.socket.timeout.ms")


def with_quick_jit(data: dict[str, Any]) -> dict[str, Any]:
    """kctl.yaml's data with the quick JIT (:data:`QUICK_JIT`) for its ZooKeepers, its brokers, its KRaft
    controllers and its mirrors
    given as dicts, except where a section names JVM flags of its own (an empty ``jvm_options``, as `kctl init`
    spells the default, names none): the one rule for every short-lived cluster of the tests, the testing
    API's and those a test writes a kctl.yaml for. ``data`` is left as it was."""
    def quick(section: Any) -> Any:
        if not isinstance(section, dict) or section.get("jvm_options"):
            return section
        return {**section, "jvm_options": list(QUICK_JIT)}

    out = dict(data)
    for svc in ("zookeeper", "kafka"):
        out[svc] = quick(out.get(svc) or {})
    if not out["kafka"].get("controller_jvm_options"):  # a KRaft controller's, beside its node's broker
        out["kafka"] = {**out["kafka"], "controller_jvm_options": list(QUICK_JIT)}
    if out.get("mirrors"):
        out["mirrors"] = [quick(m) for m in out["mirrors"]]
    return out


# Starts of a test cluster whose drawn host ports another process took before the Docker engine published them.
_PORT_ATTEMPTS = 3


def _lost_a_port(exc: KctlError) -> bool:
    text = str(exc)
    return any(m in text.lower() for m in ("port is already allocated", "address already in use",
                                            "host ports in use on 127.0.0.1"))


class KafkaCluster:
    """A real ZooKeeper + Kafka ensemble in containers; a context manager.

    ``nodes`` is the number of nodes (each runs ZooKeeper N and broker N);
    ``spec`` is a ClusterSpec or a kctl.yaml-shaped dict, and any other
    keyword arguments are kctl.yaml settings (``kafka={"num_partitions": 6}``).
    ``security=True`` is the secured profile (``security.enabled``): SASL_SSL
    listeners, ACLs, ZooKeeper authentication; :meth:`client_config` gives the
    settings a client needs.
    ``quick_jit=True`` (the default) stops each JVM's JIT at its first tier (C1, ``-XX:TieredStopAtLevel=1``:
    ZooKeepers, brokers and mirrors given as dicts, unless the spec or the settings name ``jvm_options`` of
    their own): a test cluster is short-lived, and
    without the optimizing compiler its JVMs start sooner on less CPU (docs/testing.md has the figures).
    Benchmarks of speed pass ``quick_jit=False``: the flags a production cluster runs with.
    ``follower_wait_ms`` (2000 by default; Kafka's is 500) is each follower's ``replica.fetch.wait.max.ms``: a
    fetch returns as soon as there is data, so only an idle cluster sees the difference, and it answers a quarter
    of the fetches (docs/testing.md has the figures). ``None``, or a ``replica.fetch.wait.max.ms``,
    ``replica.lag.time.max.ms`` or ``replica.socket.timeout.ms`` in the settings' ``kafka.overrides``, keeps
    Kafka's default; benchmarks pass ``None``.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        spec: ClusterSpec | dict[str, Any] | None = None,
        name: str | None = None,
        reuse: bool = False,
        startup_timeout: float = 300,
        workdir: str | os.PathLike[str] | None = None,
        security: bool = False,
        quick_jit: bool = True,
        follower_wait_ms: int | None = FOLLOWER_WAIT_MS,
        **settings: Any,
    ) -> None:
        data: dict[str, Any] = spec.model_dump(mode="json") if isinstance(spec, ClusterSpec) else dict(spec or {})
        if nodes < 3 and not isinstance(spec, ClusterSpec):
            # Fewer brokers than kctl's defaults assume: scale the replication defaults down
            # (the caller's own kafka settings still win).
            rf = nodes
            data = _deep_merge({"kafka": {
                "default_replication_factor": rf, "offsets_topic_replication_factor": rf,
                "transaction_state_log_replication_factor": rf, "min_insync_replicas": max(1, rf - 1)}}, data)
        data = _deep_merge(data, settings)
        if security:
            data = _deep_merge({"security": {"enabled": True}}, data)
        if quick_jit and not isinstance(spec, ClusterSpec):
            data = with_quick_jit(data)
        own = ((data.get("kafka") or {}).get("overrides") or {})
        if follower_wait_ms and not isinstance(spec, ClusterSpec) and not any(k in own for k in _FETCH_WAIT_BOUNDS):
            data = _deep_merge({"kafka": {"overrides": {"replica.fetch.wait.max.ms": str(follower_wait_ms)}}}, data)
        if "nodes" not in data:
            data["nodes"] = [{"id": i, "hostname": f"logger{i}"} for i in range(1, nodes + 1)]
        self.reuse = reuse
        if name is None:
            digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]
            # pytest-xdist workers each reuse their own cluster (one of the same settings per worker).
            worker = os.environ.get("PYTEST_XDIST_WORKER", "")
            name = (f"kt-reuse-{digest}" + (f"-{worker}" if worker else "")) if reuse else f"kt-{uuid.uuid4().hex[:8]}"
        data["name"] = name
        labels = dict(data.get("labels") or {})
        labels.update({LABEL_TESTING: "true", LABEL_OWNER: _owner(), LABEL_REUSE: "true" if reuse else "false"})
        data["labels"] = labels
        self.startup_timeout = startup_timeout
        self._own_workdir = workdir is None
        base = Path(workdir) if workdir else Path(tempfile.gettempdir()) / "kctl-testing"
        self.workdir = base / name
        if (data.get("security") or {}).get("enabled"):
            data["state_dir"] = str(self.workdir / ".kctl" / name)  # its secrets: found from any directory
        self._data = data  # before ports: a start that loses a port to another process draws new ones
        self.spec: ClusterSpec = parse_spec(self._with_ports(data))[0]
        self._docker: Any = None
        self._started = False
        self._faults: Faults | None = None

    # ----- lifecycle ----------------------------------------------------------------

    def _with_ports(self, data: dict[str, Any]) -> dict[str, Any]:
        """Give every node free host ports unless the caller pinned them."""
        nodes = [dict(n) for n in data["nodes"]]
        monitoring = (data.get("monitoring") or {}).get("enabled", True)
        keys = ("zookeeper_port", "kafka_port") + (("zookeeper_metrics_port", "kafka_metrics_port") if monitoring
                                                   else ())
        needed = sum(1 for n in nodes for k in keys if not n.get(k))
        mon = dict(data.get("monitoring") or {})
        # A broker's port + security.migration_port_offset is its EXTERNAL_SECURE port once a runbook moves the
        # cluster to the secured profile: no other port picked here may be that one.
        offset = int((data.get("security") or {}).get("migration_port_offset")
                     or SecuritySpec.model_fields["migration_port_offset"].default)
        pinned = {n[k] for n in nodes for k in keys if n.get(k)}
        # JMX ports (picked by the caller, never here: a node's own or the spec's base + index) and the monitoring
        # ports the caller gave are never drawn for another port.
        asked = parse_spec(data)[0]
        pinned |= {p for n in asked.nodes if (p := asked.jmx_host_port(n))}
        pinned |= {int(mon[k]) for k in ("monitor_port", "prometheus_port", "alertmanager_port") if mon.get(k)}
        for _ in range(50):
            picked = free_ports(needed + 3)
            free = iter(picked)
            trial = [dict(n) for n in nodes]
            for n in trial:
                for k in keys:
                    if not n.get(k):
                        n[k] = next(free)
            taken = pinned | set(picked)
            kafka = [n["kafka_port"] for n in trial if n.get("kafka_port")]
            if not pinned & set(picked) and not any(k + offset in taken for k in kafka):
                nodes = trial
                break
        else:  # pragma: no cover - fifty clashing draws from the ephemeral range
            raise KctlError("could not pick free host ports for a test cluster", hint="free some local ports")
        free = iter(picked[needed:])
        if monitoring:
            for k in ("monitor_port", "prometheus_port", "alertmanager_port"):
                mon.setdefault(k, next(free))
            return {**data, "nodes": nodes, "monitoring": mon}
        return {**data, "nodes": nodes}

    @property
    def spec_file(self) -> Path:
        """The kctl.yaml of this cluster: pass it to the CLI as ``kctl -f``."""
        return self.workdir / "kctl.yaml"

    @property
    def state_dir(self) -> Path:
        return self.workdir / ".kctl" / self.spec.name

    def start(self, node: int | str | None = None, service: str = "kafka") -> KafkaCluster:
        """Start the cluster (no argument), or a process or node that was stopped or killed."""
        if node is not None:
            self._start_node(node, service)
            return self
        self._docker = self._client()
        remove_orphans(self._docker)
        if self.reuse and self._adopt_running():
            return self
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.spec_file.write_text(yaml.safe_dump(self.spec.model_dump(mode="json", exclude_none=True),
                                                     sort_keys=False))
            if self.spec.metadata is MetadataMode.kraft:  # as the CLI loads it: on KRaft from the start
                self.spec = resolve_cluster(self.spec, self.spec_file)
            self._started = True
            try:
                # `kctl up`'s own path: image, render, secrets, deploy, the readiness stages (a produce/consume
                # round trip on the external listener included), the recorded cluster id.
                lifecycle.up(self.spec, self.state_dir, timeout=self.startup_timeout)
            except KctlError as exc:
                self.stop()
                if not _lost_a_port(exc) or attempt == _PORT_ATTEMPTS or not self._ports_were_drawn():
                    raise
                # Another process took a host port between its choice and the container's start: the whole
                # cluster is removed (above) and started again on new ports.
                self.spec = parse_spec(self._with_ports(self._data))[0]
                continue
            except BaseException:
                self.stop()
                raise
            break
        return self

    def _ports_were_drawn(self) -> bool:
        """Whether this cluster's host ports were chosen here (not pinned by the caller): only those can be
        drawn again."""
        return any(not n.get(k) for n in self._data["nodes"] for k in ("zookeeper_port", "kafka_port"))

    def _adopt_running(self) -> bool:
        """reuse=True: attach to a healthy cluster with the same settings if one runs."""
        found = self._docker.containers.list(filters={"label": f"{LABEL_CLUSTER}={self.spec.name}"},
                                             ignore_removed=True)
        if not found or not self.spec_file.exists():
            return False
        self.spec = load_cluster(self.spec_file)[0]
        self._faults = None
        try:
            self.wait_until_healthy(timeout=30)
        except TimeoutReached:
            rc.remove_by_label(self.spec.name, self._docker)
            return False
        self._started = True
        return True

    def stop(self, node: int | str | None = None, service: str = "kafka") -> None:
        """Stop a process gracefully (SIGTERM via supervisor) or a node; no argument: remove the cluster."""
        if node is not None:
            self._stop_node(node, service)
            return
        if not self._started:
            return
        self._started = False
        try:
            # A test cluster's data is thrown away: no controlled shutdowns, its containers go at once.
            # A failure here must not hide the test's own: the removal by label below finishes the job.
            with contextlib.suppress(KctlError):
                lifecycle.down(self.spec, self.state_dir, volumes=True, graceful=False)
        finally:
            rc.remove_by_label(self.spec.name, self._client())  # whatever a failed start or down left
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.reuse:
            return
        self.stop()

    # ----- addresses -------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return self.spec.bootstrap_servers

    @property
    def zookeeper_connect(self) -> str:
        return self.spec.zookeeper_connect_host

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """librdkafka settings of a client: bootstrap servers, and on a secured cluster SASL_SSL as the
        admin user (or ``user``, made with ``kctl user create``) with the cluster's CA file."""
        return {"bootstrap.servers": self.bootstrap_servers, **store.client_settings(self.spec, user, self.state_dir)}

    @property
    def internal_bootstrap_servers(self) -> str:
        return self.spec.internal_bootstrap_servers

    @property
    def network_name(self) -> str:
        return self.spec.project

    # ----- inspection --------------------------------------------------------------------

    def status(self) -> ClusterStatus:
        return health.status(self.spec)

    def brokers(self) -> list[int]:
        """Ids of the live brokers (registered under /brokers/ids), as Kafka's metadata lists them."""
        return health.status(self.spec).registered_ids

    def controller(self) -> int | None:
        return health.status(self.spec).controller

    def zookeeper_modes(self) -> dict[str, str]:
        return {z["node"]: z["mode"] for z in health.status(self.spec).zookeeper}

    def controller_quorum(self) -> dict[str, int | None]:
        """On KRaft (``metadata="kraft"``): the leader each controller's node follows, by node ({} on ZooKeeper)."""
        return {c["node"]: c["leader"] for c in health.status(self.spec).controllers}

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int | None = None,
                     config: dict[str, str] | None = None, timeout: float = 30) -> None:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        rf = replication_factor or min(3, len(self.spec.brokers))
        client = admin(Target.of(self.spec))  # keep a reference: the futures die with the client
        futs = client.create_topics([NewTopic(name, partitions, rf, config=config or {})])
        futs[name].result(timeout)
        wait_for_topic(client, name, partitions, timeout)  # TimeoutReached: what the metadata last showed

    def partition_leader(self, topic: str, partition: int, timeout: float = 15) -> int:
        """Broker id of the partition's leader (-1 when it has none)."""
        # A broker that has not yet cached a new topic's metadata answers without its partitions:
        # ask again (any broker may answer) until the partition is known.
        client = admin(Target.of(self.spec))
        found: list[int] = []

        def probe() -> tuple[bool, str]:
            t = client.list_topics(topic, timeout=5).topics.get(topic)
            if t is not None and partition in t.partitions:
                found[:] = [int(t.partitions[partition].leader)]
                return True, f"leader {found[0]}"
            return False, f"partitions known: {sorted(t.partitions) if t is not None else 'no topic'}"

        try:
            wait_until(f"partition {topic}-{partition} known", probe, timeout, poll=0.2)
        except TimeoutReached as exc:
            raise KctlError(f"topic {topic} has no partition {partition}: {exc.message}",
                            hint="is the topic created? `kctl topic describe` shows it") from None
        return found[0]

    def logs(self, node: int | str, service: str = "kafka") -> str:
        """The node's log of ``service`` (documented in docs/testing.md)."""
        _, out = self.exec(self._host(node, service), ["cat", contract.container_log(service)])
        return out

    def exec(self, node: int | str, argv: list[str], timeout: float = 120, stderr: bool = True) -> tuple[int, str]:
        """Run a command in a node container; returns (exit code, output); ``stderr=False``: stdout only."""
        return engines.exec_in(self.spec, self._host(node, "kafka"), argv, timeout=timeout, dc=self._client(),
                               stderr=stderr)

    # ----- faults (one implementation with `kctl drill`: kctl.runtime.faults) ---------------

    @property
    def faults(self) -> Faults:
        """The cluster's fault injectors (:class:`kctl.runtime.faults.Faults`), by host name."""
        if self._faults is None:
            self._faults = Faults(self.spec, dc=self._client())
        return self._faults

    def kill(self, node: int | str, service: str = "kafka", signal: str = "SIGKILL", *, hold: bool = True) -> None:
        """Kill a node's Kafka or ZooKeeper JVM, or the whole node (service="node").

        A node's supervisor starts a process that died again by itself; ``hold`` (the default) keeps a
        killed process down until :meth:`start`, ``hold=False`` lets it come back on its own."""
        self.faults.kill(self._host(node, service), service, signal, hold=hold)

    def _stop_node(self, node: int | str, service: str) -> None:
        self.faults.stop(self._host(node, service), service)

    def _start_node(self, node: int | str, service: str) -> None:
        self.faults.start(self._host(node, service), service)

    def pause(self, node: int | str) -> None:
        """Freeze every process of a node (a hung host)."""
        self.faults.pause(self._host(node, "kafka"))

    def unpause(self, node: int | str) -> None:
        self.faults.unpause(self._host(node, "kafka"))

    def disconnect(self, node: int | str) -> None:
        """Cut a node off the cluster network (a network partition of one node)."""
        self.faults.disconnect(self._host(node, "kafka"))

    def connect(self, node: int | str) -> None:
        self.faults.connect(self._host(node, "kafka"))

    def netem(self, node: int | str, delay_ms: int = 100, loss_percent: float = 0.0) -> str:
        """Slow a node's network down (``tc netem`` latency, packet loss); returns what was applied."""
        return self.faults.netem(self._host(node, "kafka"), delay_ms, loss_percent)

    def clear_netem(self, node: int | str) -> None:
        self.faults.clear_netem(self._host(node, "kafka"))

    # ----- waiting ---------------------------------------------------------------------------

    def wait_until_healthy(self, timeout: float = 120, allow_missing: int = 0, round_trip: bool = False) -> None:
        """Wait until the quorum stands and all brokers but ``allow_missing`` are registered with a controller."""
        health.wait_until_healthy(self.spec, timeout=timeout, allow_missing=allow_missing, round_trip=round_trip)

    def wait_for(self, condition: Callable[[ClusterStatus], bool], timeout: float = 60,
                 description: str = "condition") -> ClusterStatus:
        """Poll ``kctl status`` until ``condition(status)`` holds; returns that status."""
        return health.wait_for(self.spec, condition, timeout=timeout, description=description)

    # ----- helpers ---------------------------------------------------------------------------

    def _client(self) -> Any:
        if self._docker is None:
            self._docker = engines.client(self.spec)
        return self._docker

    def _node(self, ref: int | str) -> NodeSpec:
        return self.spec.node(ref)

    def _host(self, ref: int | str, service: str) -> str:
        n = self._node(ref)
        return self.spec.zk_host(n) if service in ("zookeeper", "controller") else self.spec.kafka_host(n)


@contextlib.contextmanager
def kafka_cluster(**kwargs: Any) -> Iterator[KafkaCluster]:
    """Functional form of ``with KafkaCluster(...) as cluster``."""
    with KafkaCluster(**kwargs) as c:
        yield c
