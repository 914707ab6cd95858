"""docs/runbooks/secure-running-cluster.md, as written, on a PLAINTEXT cluster of its own under an acks=all load:
five `kctl apply` steps to the secured profile, no acknowledged record lost. `make test` runs it on one node
(each step's roll restarts one ZooKeeper and one broker: every step and check of the runbook, in about a fifth
of the time), `make test-long` on the three-node ensemble (each step a rolling restart of three nodes).

The load moves as the runbook tells clients to: PLAINTEXT on EXTERNAL through steps 1-2, then the `app`
user on what `kctl client-config --user app` prints (EXTERNAL_SECURE) through step 3, then on what it prints
after step 3 (EXTERNAL, SASL_SSL) through steps 4-5. Every acknowledged value is read back at the end by
kcat with nothing but what `kctl client-config --format kcat` prints (an independent client). ZooKeeper's
enforcement and the znode ACLs are checked with kazoo, the closed PLAINTEXT listener with kcat.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.testing.cluster import KafkaCluster

pytestmark = pytest.mark.integration

RUNBOOK = "secure-running-cluster.md"


@pytest.fixture(scope="module")
def single() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1) as c:
        yield c


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3) as c:
        yield c


def kctl(cluster: KafkaCluster, *args: str, timeout: float = 120) -> str:
    p = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, f"kctl {' '.join(args)}: {p.stderr[-1500:]}"
    return p.stdout


def client_props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


class Load:
    """An idempotent acks=all producer on one client configuration, bounded in count and time."""

    def __init__(self, conf: dict[str, str], topic: str, tag: str, max_records: int = 60_000,
                 max_seconds: float = 400, interval: float = 0.005, outage: bool = False) -> None:
        from confluent_kafka import Producer

        self.p = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                           "message.timeout.ms": 180_000})
        self.topic, self.tag, self.max_records, self.max_seconds = topic, tag, max_records, max_seconds
        self.interval = interval
        # ``outage``: the only broker restarts (a one-node cluster), so the topic is unknown for a moment;
        # refused records are tried again (and a failed delivery is not acknowledged, so not counted)
        self.outage = ("_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_OR_PART") if outage else ()
        self.refused = 0
        self.sent = 0
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None and err.name() in self.outage:
            self.refused += 1
        elif err is not None:
            self.errors.append(f"{err.name()}: {err.str()}")
        else:
            self.acked.add(msg.value())

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        while not self.stop.is_set() and self.sent < self.max_records and time.monotonic() < deadline:
            try:
                self.p.produce(self.topic, value=f"{self.tag}-{self.sent:07d}".encode(), on_delivery=self._delivered)
            except BufferError:
                self.p.poll(0.1)
                continue
            except Exception as exc:  # noqa: BLE001 - a refused produce (authorization...) is the test's finding
                code = exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") else ""
                if code in self.outage:
                    self.refused += 1
                    self.p.poll(0.2)
                    continue
                self.errors.append(f"produce: {exc}")
                break
            self.sent += 1
            self.p.poll(0)
            time.sleep(self.interval)
        self.p.flush(200)

    def start(self) -> Load:
        self.thread.start()
        return self

    def finish(self) -> Load:
        self.stop.set()
        self.thread.join(240)
        assert not self.thread.is_alive(), f"load {self.tag} did not flush"
        return self


def test_apply_refuses_a_skipped_step_and_changes_nothing(single: KafkaCluster) -> None:
    """The running PLAINTEXT cluster asked for the whole secured profile at once: refused before anything is
    written or restarted (the state dir's files as they were, no secrets, the same JVMs)."""
    cluster = single
    from tests.integration.test_change import edit_spec
    from tests.integration.test_restart import jvm_pids

    def files() -> dict[Path, bytes]:
        return {p: p.read_bytes() for p in cluster.state_dir.rglob("*") if p.is_file()
                and not {"logs", "data"} & set(p.relative_to(cluster.state_dir).parts) and p.suffix != ".lock"}

    original = cluster.spec_file.read_text()
    before, pids = files(), jvm_pids(cluster)
    edit_spec(cluster, {"security": {"enabled": True}})
    try:
        p = subprocess.run([sys.executable, "-m", "kctl", "apply", "--yes", "-f", str(cluster.spec_file)],
                           capture_output=True, text=True, timeout=120)
    finally:
        cluster.spec_file.write_text(original)
    assert p.returncode != 0
    assert "apply refused, nothing was changed" in p.stderr and "security.migration: secure-listeners" in p.stderr
    assert "Traceback" not in p.stderr
    assert files() == before and jvm_pids(cluster) == pids
    assert not (cluster.state_dir / "secrets").exists()


def test_runbook_secures_a_one_node_cluster_under_load_without_losing_a_record(single: KafkaCluster,
                                                                               tmp_path: Path) -> None:
    _secure_under_load(single, tmp_path)


@pytest.mark.long
def test_runbook_secures_a_running_cluster_under_load_without_losing_a_record(cluster: KafkaCluster,
                                                                              tmp_path: Path) -> None:
    _secure_under_load(cluster, tmp_path)


def _secure_under_load(cluster: KafkaCluster, tmp_path: Path) -> None:
    from tests.integration import runbook
    from tests.integration.test_change import edit_spec

    assert shutil.which("kcat"), "kcat (make setup installs it) is the independent reader"
    replicas = min(3, len(cluster.spec.nodes))
    outage = replicas == 1
    kctl(cluster, "topic", "create", "orders", "-p", "3", "-r", str(replicas))
    path = runbook.RUNBOOKS / RUNBOOK
    edits = [yaml.safe_load(b) for b in runbook.blocks(path.read_text(), "yaml")]
    assert [e["security"].get("migration") for e in edits] == [
        "secure-listeners", "secure-inter-broker", "close-plaintext", "inter-broker-home", None]

    plain = {"bootstrap.servers": cluster.spec.bootstrap_servers}
    loads = [Load(plain, "orders", "plain", outage=outage).start()]
    state = {"prev": "", "edits": 0}

    def before(step: runbook.Step) -> None:
        cmd = step.command
        if cmd.startswith("kctl acl add") and len(loads) == 1:
            # The application moves to its user on the secured listener before an ACL names its topic
            # (an ACL there refuses User:ANONYMOUS, the PLAINTEXT clients).
            loads[-1].finish()
            conf = client_props(kctl(cluster, "client-config", "--user", "app"))
            assert conf["bootstrap.servers"] != plain["bootstrap.servers"]  # EXTERNAL_SECURE
            loads.append(Load(conf, "orders", "secure", outage=outage).start())
        if cmd.startswith("kctl apply") and state["prev"] != "kctl apply --dry-run":
            n = int(state["edits"])
            if n == 3:  # after step 3 the clients move back to the first ports, SASL_SSL now
                loads[-1].finish()
                conf = client_props(kctl(cluster, "client-config", "--user", "app"))
                assert conf["bootstrap.servers"] == plain["bootstrap.servers"]
                loads.append(Load(conf, "orders", "home", outage=outage).start())
            edit_spec(cluster, edits[n])  # the operator's edit, exactly as the runbook shows it
            state["edits"] = n + 1
        state["prev"] = cmd

    try:
        ran = runbook.run(path, cluster.spec_file, state_dir=cluster.state_dir, before=before, timeout=900)
    finally:
        for load in loads:
            load.finish()
    assert state["edits"] == 5 and [ld.tag for ld in loads] == ["plain", "secure", "home"]
    assert ran[-1].step.command == "kctl diff" and "no drift" in ran[-1].output

    # Every acknowledged record, read back by kcat with only what client-config prints.
    conf_file = tmp_path / "kcat.conf"
    conf_file.write_text(kctl(cluster, "client-config", "--format", "kcat"))
    conf_file.chmod(0o600)
    acked = set().union(*(load.acked for load in loads))
    p = subprocess.run(["kcat", "-F", str(conf_file), "-C", "-t", "orders", "-o", "beginning", "-e", "-q"],
                       capture_output=True, timeout=180)
    assert p.returncode == 0, p.stderr[-800:]
    got = p.stdout.split(b"\n")
    assert not acked - set(got), f"{len(acked - set(got))} acknowledged records lost"
    assert all(load.acked and not load.errors for load in loads), [(ld.tag, len(ld.acked), ld.errors[:3])
                                                                    for ld in loads]
    assert len([v for v in got if v]) == len(set(v for v in got if v))  # no duplicate (idempotent producers)

    # No PLAINTEXT listener is left on the host.
    p = subprocess.run(["kcat", "-b", plain["bootstrap.servers"], "-L", "-m", "5"], capture_output=True,
                       timeout=60)
    assert p.returncode != 0

    # ZooKeeper: anonymous sessions refused; Kafka's znodes made while PLAINTEXT now guarded.
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from kctl.model.spec import load_spec, state_dir_for
    from kctl.zk.znodes import sasl_options

    spec, _ = load_spec(cluster.spec_file)
    spec = spec.model_copy(update={"state_dir": str(state_dir_for(spec, cluster.spec_file))})
    assert spec.security_phase == 5
    anon = KazooClient(hosts=spec.zookeeper_connect_host, timeout=5, connection_retry={"max_tries": 1})
    refused = False
    try:
        anon.start(timeout=8)
        anon.get_children("/brokers/ids")
    except Exception:  # noqa: BLE001 - the server closes an unauthenticated session: any error is a refusal
        refused = True
    finally:
        anon.stop()
        anon.close()
    assert refused
    zk = KazooClient(hosts=spec.zookeeper_connect_host, timeout=8, **sasl_options(spec))
    zk.start(timeout=10)
    try:
        acls = {(a.id.scheme, a.id.id, a.perms) for a in zk.get_acls("/brokers/topics/orders")[0]}
        assert acls == {("sasl", "kafka", 31), ("world", "anyone", 1)}
        for attempt in (lambda: zk.set("/brokers/topics/orders", b"{}"), lambda: zk.create("/admin/x", b""),
                        lambda: zk.create("/config/topics/evil", b"{}"), lambda: zk.create("/beside", b"")):
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        zk.stop()
        zk.close()
