"""kctl.yaml's Spark cluster on engine hosts: two Debian hosts with systemd and sshd (tests/hosts/fleet.py), the
brokers' units and beside them the Spark master's (first host) and a worker's on each, installed over ssh.

The stream job's driver runs on this machine (in the Spark image's container on its network) and its executors
on the hosts' workers; the tables and checkpoint are on a real S3-compatible server (moto) whose endpoint listens
on this machine's address on the hosts' bridge, the one address the hosts reach it at. What is asserted is read on
the hosts over ssh (units, logs), from the master's own JSON, and from the store by this test's own delta-rs
(tables against the generated events' ground truth).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.model.spec import load_cluster
from kctl.testing.cluster import with_quick_jit
from tests.integration.s3store import SECRET_KEY, Store, moto_store

pytestmark = pytest.mark.integration

HOSTS = ("spark1", "spark2")
UI = 18380


@pytest.fixture(scope="module")
def fleet() -> Iterator[Any]:
    import docker

    from tests.hosts.fleet import Fleet, cgroup_version

    if cgroup_version(docker.from_env()) == 2:
        pytest.skip("the test hosts' systemd settings are checked on cgroup v1 engines only (tests/hosts/fleet.py)")
    with Fleet(list(HOSTS)) as f:
        yield f


def gateway(fleet: Any) -> str:
    """This machine's address on the hosts' bridge network."""
    net = fleet.client.networks.get(fleet.network_name)
    return str(((net.attrs.get("IPAM") or {}).get("Config") or [{}])[0]["Gateway"])


@pytest.fixture(scope="module")
def store(fleet: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with moto_store(tmp_path_factory.mktemp("s3"), bind=gateway(fleet)) as s:
        yield s


@pytest.fixture(scope="module")
def spec_file(fleet: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("hosts-spark") / "kctl.yaml"
    spec = {"name": "hs", "engine": "hosts",
            "ssh": {"user": "ops", "key_file": str(fleet.key_path), "connect_timeout": 3,
                    "known_hosts_file": str(path.parent / "known_hosts"), "trust_on_first_use": True},
            "nodes": [{"id": i, "hostname": h.hostname, "advertised_host": h.ip} for i, h in enumerate(fleet, 1)],
            "kafka": {"default_replication_factor": 2, "offsets_topic_replication_factor": 2,
                      "transaction_state_log_replication_factor": 2, "min_insync_replicas": 1},
            "spark": {"workers": 2, "worker_cores": 1, "worker_memory": "768m", "ui_port": UI}}
    path.write_text(yaml.safe_dump(with_quick_jit(spec), sort_keys=False))
    yield path
    r = kctl(path, "down", "--volumes", timeout=600)  # the driver containers on this engine with it
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]


def kctl(spec_file: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], capture_output=True, text=True,
                       timeout=timeout, cwd=spec_file.parent)
    assert SECRET_KEY not in p.stdout + p.stderr
    return p


def on(fleet: Any, host: str, command: str) -> str:
    return str(fleet.ssh(host, command, timeout=60).stdout)


def test_a_spark_cluster_on_the_hosts_runs_the_job_with_exact_tables_on_s3(
        fleet: Any, spec_file: Path, store: Store, tmp_path: Path) -> None:
    from tests.integration.ports import spark_quick_jit
    from tests.integration.test_stream import _events, _send, _topic
    from tests.integration.test_stream_s3 import _check_s3

    # more worker memory than a host has: refused before anything is installed on any host
    good = spec_file.read_text()
    spec_file.write_text(good.replace("worker_memory: 768m", "worker_memory: 4096g"))
    r = kctl(spec_file, "up", timeout=300)
    assert r.returncode == 2 and "spark: worker_memory 4096g (+256m for the worker itself) needs" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    for h in HOSTS:
        assert on(fleet, h, "test -e /opt/kctl && echo left || echo bare").strip() == "bare"
    spec_file.write_text(good)

    r = kctl(spec_file, "up", timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    h1, h2 = (fleet.host(h) for h in HOSTS)
    # a second `kctl up` changes nothing: the daemons keep running (no restart)
    pids = {h: on(fleet, h, "systemctl show -p MainPID --value kctl-spark-worker").strip() for h in HOSTS}
    r = kctl(spec_file, "up", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {h: on(fleet, h, "systemctl show -p MainPID --value kctl-spark-worker").strip() for h in HOSTS} == pids
    # the units on the hosts themselves: the master on the first, a worker on each, run by the service user
    assert on(fleet, "spark1", "systemctl is-active kctl-spark-master kctl-spark-worker").split() == ["active"] * 2
    assert on(fleet, "spark2", "systemctl is-active kctl-spark-worker").split() == ["active"]
    assert on(fleet, "spark2", "systemctl is-enabled kctl-spark-master 2>/dev/null; true").strip() in ("", "not-found")
    assert on(fleet, "spark2", "ps -o user= -C java | sort -u").split() == ["logger"]

    r = kctl(spec_file, "status", "-o", "json")
    assert r.returncode == 0, r.stderr
    sp = json.loads(r.stdout)["spark"]
    assert sp["master"] == f"spark://{h1.ip}:7077" and sp["ui"] == f"http://{h1.ip}:{UI}" and sp["status"] == "ALIVE"
    assert [(w["name"], w["state"], w["ui"]) for w in sp["workers"]] == [
        ("spark-worker-1", "ALIVE", f"http://{h1.ip}:{UI + 1}"),
        ("spark-worker-2", "ALIVE", f"http://{h2.ip}:{UI + 2}")]

    # bad input first: local paths for the tables are refused before anything starts
    bs = load_cluster(spec_file)[0].bootstrap_servers
    topic = _topic(bs, partitions=2)
    r = kctl(spec_file, "stream", "submit", "-t", topic, "--available-now")
    assert r.returncode != 0 and "shares no directory" in r.stderr and "s3a://" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr

    events = _events(600, seed=83, start=dt.datetime(2024, 6, 5, 8, 0, 0, tzinfo=dt.timezone.utc))
    _send(bs, topic, events, bad=4, seed=83)
    bucket = store.bucket("kctl-hosts")
    out, cp = f"s3a://{bucket}/j/out", f"s3a://{bucket}/j/cp"
    r = kctl(spec_file, "stream", "submit", "-t", topic, "--out", out, "--checkpoint", cp, *store.s3_args(),
             "--available-now", "-o", "json", "--conf", "=".join(spark_quick_jit()), timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["master"] == f"spark://{h1.ip}:7077" and res["state"] == "finished", res
    _check_s3(store, f"s3://{bucket}/j/out", events, bad=4)
    # the executors ran on the hosts' workers (the driver here handed them the tasks), never seeing the keys
    assert sum(launched(fleet).values()) >= 1, "no worker launched an executor"
    for h in HOSTS:
        assert SECRET_KEY not in on(fleet, h, "sudo cat /var/log/kctl/spark-*.log; sudo ps -eo args")
    r = kctl(spec_file, "logs", "spark-worker-2", "--tail", "50")
    assert r.returncode == 0 and "Worker" in r.stdout, r.stderr

    # a worker killed with SIGKILL: systemd starts it again, and it registers at the master again
    on(fleet, "spark2", "sudo systemctl kill -s KILL kctl-spark-worker")
    r = kctl(spec_file, "status", "--wait", "120", "-o", "json", timeout=200)
    sp = json.loads(r.stdout)["spark"]
    assert [w["state"] for w in sp["workers"]] == ["ALIVE", "ALIVE"], sp



def launched(fleet: Any) -> dict[str, int]:
    """Executors each host's worker was asked to launch, from its log on the host."""
    return {h: on(fleet, h, "sudo cat /var/log/kctl/spark-worker.log").count("Asked to launch executor")
            for h in HOSTS}


def stream_status(spec_file: Path, job: str) -> dict[str, Any]:
    r = kctl(spec_file, "stream", "status", "--name", job, "-o", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    return dict(json.loads(r.stdout))


def caught_up(spec_file: Path, job: str, want: int, timeout: float = 420) -> dict[str, Any]:
    """Until the job's checkpoint holds every record (lag 0 over ``want`` records in the topic)."""
    deadline = time.monotonic() + timeout
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = stream_status(spec_file, job)
        if st.get("total_lag") == 0 and sum(p["latest"] for p in st.get("partitions") or []) == want:
            return st
        time.sleep(1)
    raise AssertionError(f"job {job} did not catch up within {timeout:.0f} s: {json.dumps(st)[:2000]}")


@pytest.mark.long
def test_a_worker_killed_the_master_restarted_and_the_driver_crashed_mid_stream_lose_nothing(
        fleet: Any, spec_file: Path, store: Store) -> None:
    """A streaming job on the hosts' workers, its tables on S3; between sends: the second host's worker
    SIGKILLed (systemd starts it again, the job gets an executor there again or runs on the first), the master
    restarted (its recovery state brings back the workers and the application), the driver's container
    SIGKILLed (Docker starts it again, it resumes from its checkpoint). Every table equals the ground truth."""
    import docker

    from tests.integration.test_stream import _events, _send, _topic
    from tests.integration.test_stream_s3 import _check_s3

    # its own cluster: `make test-long` runs this test without the short ones that bring the module's cluster up
    # (after them, a second `kctl up` changes nothing)
    r = kctl(spec_file, "up", timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    bs = load_cluster(spec_file)[0].bootstrap_servers
    topic = _topic(bs, partitions=2)
    events = _events(1600, seed=89, start=dt.datetime(2024, 6, 6, 9, 0, 0, tzinfo=dt.timezone.utc))
    parts = [events[i * 400:(i + 1) * 400] for i in range(4)]
    bucket = store.bucket("kctl-hosts-faults")
    _send(bs, topic, parts[0], bad=5, seed=89)
    r = kctl(spec_file, "stream", "submit", "-d", "--name", "hf", "-t", topic, "--trigger", "1s",
             "--out", f"s3a://{bucket}/out", "--checkpoint", f"s3a://{bucket}/cp", *store.s3_args(), "-o", "json",
             timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    container = json.loads(r.stdout)["container"]
    caught_up(spec_file, "hf", 405)
    # the worker of the second host killed with a batch in flight
    _send(bs, topic, parts[1])
    on(fleet, "spark2", "sudo systemctl kill -s KILL kctl-spark-worker")
    caught_up(spec_file, "hf", 805)
    # the master restarted: the workers and the application register again
    on(fleet, "spark1", "sudo systemctl restart kctl-spark-master")
    _send(bs, topic, parts[2])
    caught_up(spec_file, "hf", 1205)
    # the driver's container crashed: Docker's restart policy starts it again, from the checkpoint
    c = docker.from_env().containers.get(container)
    restarts = int(c.attrs["RestartCount"])
    os.kill(int(c.attrs["State"]["Pid"]), signal.SIGKILL)
    _send(bs, topic, parts[3])
    st = caught_up(spec_file, "hf", 1605)
    assert st["state"] == "running"
    assert int(docker.from_env().containers.get(container).attrs["RestartCount"]) == restarts + 1
    r = kctl(spec_file, "status", "-o", "json")
    sp = json.loads(r.stdout)["spark"]
    assert [w["state"] for w in sp["workers"]] == ["ALIVE", "ALIVE"] and sp["status"] == "ALIVE", sp
    r = kctl(spec_file, "stream", "stop", "--name", "hf", "-o", "json", timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped", r.stdout + r.stderr
    _check_s3(store, f"s3://{bucket}/out", events, bad=5)


def test_the_spark_section_removed_takes_the_units_off_every_host(fleet: Any, spec_file: Path) -> None:
    spec = yaml.safe_load(spec_file.read_text())
    spec.pop("spark")
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    r = kctl(spec_file, "up", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed the Spark units on the hosts" in r.stdout + r.stderr
    for h in HOSTS:
        assert on(fleet, h, "ls /etc/systemd/system | grep -c kctl-spark; true").strip() == "0"
        assert on(fleet, h, "systemctl is-active kctl-kafka").strip() == "active"
        assert on(fleet, h, "test -e /opt/kctl/spark-dists && echo left || echo gone").strip() == "gone"
