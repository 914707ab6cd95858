"""The pipeline on a Spark cluster that kctl runs (kctl.yaml's ``spark`` section, engine compose): `kctl up` starts
a Spark standalone master and a worker beside a one-node Kafka cluster, `kctl stream submit` runs the job's driver in
a container of its own with its executor on the worker, and every table equals the generated events' ground truth
(read here without a JVM: tests.integration.test_stream._check) -- after a clean run, and (make test-long) after
a worker killed mid-stream, the driver's container crashed, and the master restarted.

A fault here is what a machine does to a process, not what an operator does to a container: the container's main
process gets SIGKILL from this host (`docker kill` is an operator's stop, after which Docker restarts nothing).
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

from kctl.testing.cluster import KafkaCluster
from tests.integration.ports import free_bases, spark_quick_jit
from tests.integration.test_stream import _check, _events, _send, _topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KCTL = [str(Path(sys.executable).parent / "kctl")]
T0 = dt.datetime(2024, 6, 1, 11, 58, 40, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from spark_cluster(tmp_path_factory, "spark")


def spark_cluster(tmp_path_factory: pytest.TempPathFactory, prefix: str,
                  **settings: Any) -> Iterator[KafkaCluster]:
    """A one-node cluster with a Spark master and one worker (their UIs on free ports), taken down at the end;
    `kctl down` must leave no Spark container."""
    base = free_bases(1, nodes=3)[0]
    c = KafkaCluster(1, workdir=str(tmp_path_factory.mktemp(prefix)),
                     spark={"workers": 1, "worker_cores": 1, "worker_memory": "1g", "ui_port": base}, **settings)
    c.start()
    try:
        yield c
    finally:
        c.stop()
        import docker

        dc = docker.from_env()
        left = dc.containers.list(all=True, filters={"label": f"io.kctl.spark={c.spec.name}"})
        for x in left:
            x.remove(force=True)
        assert not left, f"`kctl down` left Spark containers: {[x.name for x in left]}"


class _S3:
    """moto's server in a container of the test's own on the cluster's network, reached by the driver's container,
    the worker's executor and this host at the container's address (no published port)."""

    def __init__(self, container: Any, endpoint: str, client: Any, creds: Path) -> None:
        self.container, self.endpoint, self.client, self.creds = container, endpoint, client, creds

    def args(self) -> list[str]:
        return ["--s3-endpoint", self.endpoint, "--s3-credentials", str(self.creds)]

    def options(self) -> dict[str, str]:
        """The test's own delta-rs reader's storage options (not kctl's)."""
        from tests.integration.s3store import ACCESS_KEY, SECRET_KEY

        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}


@pytest.fixture(scope="module")
def s3_on_cluster(cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_S3]:
    """A bucket ``kctl-cluster`` on moto beside the cluster, and a 0600 credentials file for it."""
    import boto3
    import docker

    from kctl.stream import spark as kspark
    from tests.integration.s3store import ACCESS_KEY, SECRET_KEY

    c = cluster
    moto = docker.from_env().containers.run(
        kspark.image_tag(), ["python3", "-m", "moto.server", "-H", "0.0.0.0", "-p", "5000"], detach=True,
        name=f"{c.spec.project}-s3test", network=c.spec.project, environment={"PYTHONPATH": "/kctl-py"},
        volumes={str(kspark.site_packages()): {"bind": "/kctl-py", "mode": "ro"}},
        labels={"io.kctl.test": "s3"})
    try:
        moto.reload()
        ip = moto.attrs["NetworkSettings"]["Networks"][c.spec.project]["IPAddress"]
        endpoint = f"http://{ip}:5000"
        s3c = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
                           aws_secret_access_key=SECRET_KEY)
        deadline = time.monotonic() + 60
        while True:
            try:
                s3c.create_bucket(Bucket="kctl-cluster")
                break
            except Exception:  # noqa: BLE001 - moto still starting
                assert time.monotonic() < deadline, moto.logs()[-2000:]
                time.sleep(0.5)
        creds = tmp_path_factory.mktemp("s3creds") / "s3-credentials"
        creds.write_text(f"access_key={ACCESS_KEY}\nsecret_key={SECRET_KEY}\n")
        creds.chmod(0o600)
        yield _S3(moto, endpoint, s3c, creds)
    finally:
        moto.remove(force=True)


def _kctl(c: KafkaCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KCTL, *args, "-f", str(c.spec_file)], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=c.spec_file.parent)


def _json(r: subprocess.CompletedProcess[str]) -> Any:
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return json.loads(r.stdout)


def _status(c: KafkaCluster, job: str) -> dict[str, Any]:
    return dict(_json(_kctl(c, "stream", "status", "--name", job, "-o", "json")))


def _caught_up(c: KafkaCluster, job: str, want: int, timeout: float = 300) -> dict[str, Any]:
    """Until the job's checkpoint holds every record (lag 0 over ``want`` records in the topic)."""
    deadline = time.monotonic() + timeout
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = _status(c, job)
        latest = sum(p["latest"] for p in st["partitions"])
        if st["total_lag"] == 0 and latest == want:
            return st
        time.sleep(1)
    raise AssertionError(f"job {job} did not catch up within {timeout:.0f} s: {json.dumps(st)[:2000]}")


def _submit(c: KafkaCluster, job: str, topic: str, *more: str) -> dict[str, Any]:
    return dict(_json(_kctl(c, "stream", "submit", "-d", "--name", job, "-t", topic, "--trigger", "1s",
                            "--conf", "=".join(spark_quick_jit()), "-o", "json", *more)))


def _stop(c: KafkaCluster, job: str) -> None:
    r = _json(_kctl(c, "stream", "stop", "--name", job, "-o", "json"))
    assert r["stopped"] is True and r["state"] == "stopped", r


def _crash(container: str) -> None:
    """SIGKILL the container's main process from this host: the container exits 137, as after a crash."""
    import docker

    pid = docker.from_env().containers.get(container).attrs["State"]["Pid"]
    assert pid > 0, f"{container} does not run"
    os.kill(pid, signal.SIGKILL)


def _crash_between_sends(container: str, before: Any, after: Any) -> None:
    """``before()`` (a batch in flight), the driver's crash, ``after()``: Docker's restart policy starts it again."""
    restarts = _restarts(container)
    before()
    _crash(container)
    after()
    time.sleep(2)
    assert _restarts(container) == restarts + 1


def _restarts(container: str) -> int:
    import docker

    return int(docker.from_env().containers.get(container).attrs["RestartCount"])


def _spark_alive(c: KafkaCluster, timeout: float = 180) -> dict[str, Any]:
    """`kctl status`'s spark section once the master is ALIVE with its worker and the job's application."""
    deadline = time.monotonic() + timeout
    sp: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = _kctl(c, "status", "-o", "json")
        # a master still restarting is one of `kctl status`'s problems: exit 1, the same JSON (asked again)
        assert r.returncode in (0, 1) and r.stdout.startswith("{"), (r.stdout + r.stderr)[-3000:]
        sp = json.loads(r.stdout)["spark"]
        if r.returncode == 0 and sp["status"] == "ALIVE" and [w["state"] for w in sp["workers"]] == ["ALIVE"] \
                and sp["applications"]:
            return sp
        time.sleep(1)
    raise AssertionError(f"the Spark cluster is not back within {timeout:.0f} s: {sp}")


def _launched(c: KafkaCluster) -> int:
    """Executors the worker was asked to launch, from its log (what `kctl logs spark-worker-1` shows)."""
    log = c.state_dir.resolve() / "spark" / "logs" / "spark-worker-1.log"
    return log.read_text(encoding="utf-8", errors="replace").count("Asked to launch executor")


def _spark_container(c: KafkaCluster, service: str) -> str:
    return f"{c.spec.project}-spark-{service}-1"


def test_a_job_on_the_spark_cluster_matches_ground_truth(cluster: KafkaCluster) -> None:
    """`kctl status` lists the master and its worker ALIVE (their UIs on 127.0.0.1); the job runs on the cluster
    (its driver a container, its executor on the worker), catches up, `kctl stream stop` stops it for good, and
    every table equals the ground truth."""
    c = cluster
    st = _json(_kctl(c, "status", "-o", "json"))
    sp = st["spark"]
    assert sp["status"] == "ALIVE" and sp["master"] == "spark://spark-master:7077"
    assert sp["ui"] == f"http://127.0.0.1:{c.spec.spark.ui_port}"
    assert [(w["name"], w["state"], w["ui"]) for w in sp["workers"]] == \
        [("spark-worker-1", "ALIVE", f"http://127.0.0.1:{c.spec.spark.ui_port + 1}")]
    bs = c.bootstrap_servers
    topic = _topic(bs, partitions=2)
    events = _events(400, seed=3, start=T0)
    _send(bs, topic, events, bad=7, seed=3)
    res = _submit(c, "short", topic)
    assert res["container"] == f"{c.spec.project}-stream-short" and res["master"] == "spark://spark-master:7077"
    st = _caught_up(c, "short", len(events) + 7)
    assert st["state"] == "running" and st["spark"]["driver_state"] == "running"
    # the job is the master's application, its executor on the worker
    assert [a["name"] for a in st["spark"]["applications"]] == ["kctl-stream"]
    assert st["spark"]["workers"][0]["cores_used"] == 1
    # each process's log in `kctl logs`: the driver's (Spark's own start), the worker's (its executor for the job)
    assert "Spark's default log4j profile" in _kctl(c, "logs", "stream-short", "-n", "1000").stdout
    assert "Asked to launch executor" in _kctl(c, "logs", "spark-worker-1", "-n", "1000").stdout
    _stop(c, "short")
    import docker

    drv = docker.from_env().containers.get(res["container"])
    assert drv.status == "exited" and drv.attrs["State"]["ExitCode"] == 0
    _check(Path(res["out"]), events, bad=7)
    # the readers find the job's tables by its name, as status and stop find its checkpoint
    q = _json(_kctl(c, "stream", "query", "SELECT count(*) AS n FROM archive", "--name", "short", "-o", "json"))
    assert q == [{"n": len(events)}]

    # a worker that is gone (stopped: Docker does not start it again) degrades `kctl status`; `kctl up` brings it back
    docker.from_env().containers.get(_spark_container(c, "spark-worker-1")).stop(timeout=10)

    def status_until(rc: int) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        deadline = time.monotonic() + 90  # the master drops a worker as its connection closes, takes one at once
        while True:
            p = _kctl(c, "status", "-o", "json")
            if p.returncode == rc or time.monotonic() > deadline:
                return p, json.loads(p.stdout or "{}")
            time.sleep(1)

    p, st = status_until(1)
    assert p.returncode == 1 and st["health"] == "degraded", p.stdout + p.stderr
    assert [m for m in st["problems"] if m.startswith("spark:")] == [
        m for m in st["problems"] if m.startswith("spark: worker spark-worker-1 is ")] != [], st["problems"]
    # one answer: the console's card and page, and the monitor's spark rule, say what status says
    from kctl.console import ops
    from kctl.console.config import Entry
    from kctl.monitor.service import Monitor

    card = ops.cluster_card(Entry(c.spec_file, c.spec, None, fixed=True))
    assert card["health"] == "degraded" and [m for m in card["problems"] if m.startswith("spark:")] == [
        m for m in st["problems"] if m.startswith("spark:")], card
    page = ops.cluster_detail(c.spec)
    assert [w["state"] for w in page["spark"]["workers"]] != ["ALIVE"], page["spark"]
    mon = Monitor(c.spec, c.state_dir, interval_s=1, window=5, log=lambda line: None)
    try:
        mon.round(with_groups=False)
        opened = {a.key: a.details for a in mon.tracker.open_alerts()}
        assert opened.get(("spark", "spark-worker-1"), "").startswith("spark: worker spark-worker-1 is "), opened
    finally:
        mon.store.close()
    assert _kctl(c, "up").returncode == 0
    p, st = status_until(0)
    assert p.returncode == 0 and st["health"] == "healthy", p.stdout + p.stderr
    assert [w["state"] for w in st["spark"]["workers"]] == ["ALIVE"]


def _warm_containers(c: KafkaCluster) -> dict[str, str]:
    """The cluster's warm drivers (container name -> state), as Docker lists them."""
    import docker

    got = docker.from_env().containers.list(all=True, filters={"label": [f"io.kctl.spark={c.spec.name}",
                                                                          "io.kctl.stream-warm"]})
    return {x.name: x.status for x in got}


def _set_warm(c: KafkaCluster, on: bool) -> None:
    import yaml

    data = yaml.safe_load(c.spec_file.read_text())
    data["spark"]["warm_driver"] = on
    c.spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    r = _kctl(c, "up")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def _warm_ready(c: KafkaCluster, timeout: float = 300) -> dict[str, Any]:
    """The ready.json of the warm driver that waits, once it is warm."""
    from kctl.stream import warm
    from kctl.stream.record import read_json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for slot in sorted(warm.slots_dir(c.state_dir).iterdir()):
            ready = read_json(slot / "ready.json")
            if ready and not (slot / "claim.json").exists():
                return dict(ready)
        time.sleep(0.5)
    raise AssertionError(f"no warm driver ready within {timeout:.0f} s: {_warm_containers(c)}")


def test_a_warm_driver_takes_the_job_and_survives_its_crash(cluster: KafkaCluster) -> None:
    """kctl.yaml's spark.warm_driver: `kctl up` starts a driver that warms before any job; `kctl stream submit`
    hands the job to it (no driver of its own), its log is the job's; a second submit of the job is refused; the
    warm driver's crash (SIGKILL of its main process) starts it again on the job, which resumes from its
    checkpoint; `kctl stream stop` stops the job and the next warm driver starts; the tables equal the ground
    truth; a job with a session of its own starts its own driver, the waiting warm driver removed first so that
    the job gets the worker's core; warm_driver off and `kctl up`: the one that waits goes."""
    c = cluster
    _set_warm(c, True)
    try:
        ready = _warm_ready(c)
        assert _warm_containers(c) == {ready["container"]: "running"}
        assert _json(_kctl(c, "status", "-o", "json"))["spark"]["warm_drivers"] == [
            {"container": ready["container"], "state": "ready"}]
        bs = c.bootstrap_servers
        topic = _topic(bs, partitions=2)
        events = _events(600, seed=23, start=T0)
        first, second = events[:300], events[300:]
        _send(bs, topic, first, bad=3, seed=23)
        res = dict(_json(_kctl(c, "stream", "submit", "-d", "--name", "early", "-t", topic, "--trigger", "1s",
                               "-o", "json")))
        assert res["warm_driver"] is True and res["container"] == ready["container"], res
        import docker

        names = [x.name for x in docker.from_env().containers.list(all=True)]
        assert f"{c.spec.project}-stream-early" not in names  # no driver of its own
        st = _caught_up(c, "early", len(first) + 3)
        assert st["state"] == "running" and st["spark"]["driver"] == ready["container"]
        assert _json(_kctl(c, "status", "-o", "json"))["spark"]["warm_drivers"] == [
            {"container": ready["container"], "state": "running the job early"}]
        job = json.loads((Path(res["checkpoint"]) / "_kctl" / "job.json").read_text())
        assert job["warm_up"].startswith("done by the warm driver"), job
        log = _kctl(c, "logs", "stream-early", "-n", "1000").stdout
        assert "the job early runs in the warm driver" in log, log[-2000:]
        # the same job again while it runs: refused, one message, nothing started
        again = _kctl(c, "stream", "submit", "-d", "--name", "early", "-t", topic, "-o", "json")
        assert again.returncode != 0 and "already runs in container" in again.stderr, again.stderr
        assert "Traceback" not in again.stderr
        # a crash of the warm driver: Docker starts it again, on the job it was handed
        _crash_between_sends(res["container"], lambda: _send(bs, topic, second[:150]),
                             lambda: _send(bs, topic, second[150:]))
        st = _caught_up(c, "early", len(events) + 3, timeout=420)
        assert st["state"] == "running" and st["spark"]["driver_state"] == "running"
        assert "started again: it runs the job it was handed (early)" in _kctl(c, "logs", "stream-early", "-n",
                                                                              "3000").stdout
        r = _json(_kctl(c, "stream", "stop", "--name", "early", "-o", "json"))
        assert r["stopped"] is True and r["state"] == "stopped", r
        assert r["warm_driver"] and r["warm_driver"] != res["container"], r
        # the driver that ran the job is gone (it exited 0 on the stop); the next one waits
        assert _warm_containers(c) == {r["warm_driver"]: "running"}
        _check(Path(res["out"]), events, bad=3)
        # a job whose session differs (its own --conf) starts a driver of its own; the warm driver that waits gives
        # the worker's only core back first, or the job's executor would wait for it forever
        topic2 = _topic(bs, partitions=1)
        few = _events(50, seed=29, start=T0)
        _send(bs, topic2, few)
        own = _submit(c, "own", topic2)
        assert own["warm_driver"] is False and own["container"] == f"{c.spec.project}-stream-own", own
        assert own["warm_drivers_removed"] == [r["warm_driver"]], own
        assert own["warm_driver_not_taken"].startswith(("its Spark session differs", "no warm driver was ready")), own
        assert _caught_up(c, "own", len(few))["state"] == "running"
        r2 = _json(_kctl(c, "stream", "stop", "--name", "own", "-o", "json"))
        assert r2["stopped"] is True and r2["warm_driver"], r2
    finally:  # the module's later tests run without its jobs and warm driver, whatever happened here
        for job in ("early", "own"):
            _kctl(c, "stream", "stop", "--name", job)
        _set_warm(c, False)
    assert _warm_containers(c) == {}


@pytest.mark.long
@pytest.mark.parametrize("fault", ["worker", "driver", "master"])
def test_a_fault_mid_stream_loses_nothing(cluster: KafkaCluster, fault: str, request: pytest.FixtureRequest) -> None:
    """Half the events, caught up; the fault (the worker's JVM killed, the driver's container crashed, the master
    restarted); the other half; caught up again: every table equals the ground truth, nothing twice. With the
    worker and the master faults the tables and the checkpoint are on S3 (moto beside the cluster), with the
    driver's in the cluster's shared dir (the S3 test below crashes the driver with them on S3)."""
    c = cluster
    bs = c.bootstrap_servers
    job = f"fault-{fault}"
    topic = _topic(bs, partitions=2)
    events = _events(1200, seed=17, start=T0)
    first, second = events[:600], events[600:]
    _send(bs, topic, first, bad=5, seed=17)
    store: _S3 | None = request.getfixturevalue("s3_on_cluster") if fault != "driver" else None
    on_s3 = ["--out", f"s3a://kctl-cluster/{job}/out", "--checkpoint", f"s3a://kctl-cluster/{job}/cp",
             *store.args()] if store is not None else []
    res = _submit(c, job, topic, *on_s3)
    _caught_up(c, job, len(first) + 5)
    app = [a["id"] for a in _status(c, job)["spark"]["applications"]]
    launched = _launched(c)
    if fault == "worker":
        w = _spark_container(c, "spark-worker-1")
        before = _restarts(w)
        _send(bs, topic, second[:300])  # a batch in flight when the worker goes
        _crash(w)
        time.sleep(2)
        assert _restarts(w) == before + 1  # Docker's restart policy started it again
        _send(bs, topic, second[300:])
    elif fault == "driver":
        _crash_between_sends(res["container"], lambda: _send(bs, topic, second[:300]),
                             lambda: _send(bs, topic, second[300:]))
    else:
        m = _spark_container(c, "spark-master")
        import docker

        driver_restarts = _restarts(res["container"])
        docker.from_env().containers.get(m).restart(timeout=10)
        _send(bs, topic, second)
    st = _caught_up(c, job, len(events) + 5, timeout=420)
    assert st["state"] == "running"
    after = _spark_alive(c)  # the job may catch up before a restarted master answers
    if fault == "worker":  # the job got a new executor on the worker that came back
        assert _launched(c) > launched
    if fault == "master":  # its recovery state: the same application, on the same executor, its driver untouched
        assert [a["id"] for a in after["applications"]] == app
        assert _launched(c) == launched and _restarts(res["container"]) == driver_restarts
    _stop(c, job)
    if store is not None:
        from tests.integration.test_stream_s3 import _check_s3

        _check_s3(store.options(), f"s3://kctl-cluster/{job}/out", events, bad=5)
    else:
        _check(Path(res["out"]), events, bad=5)


@pytest.mark.long  # the hadoop-aws SDK bundle (530 MB) goes to the driver's container and the worker's executor
def test_a_job_on_the_spark_cluster_writes_its_tables_to_s3(cluster: KafkaCluster, s3_on_cluster: _S3) -> None:
    """An S3-compatible server (moto) in a container of this test's own on the cluster's network, reached by the
    driver's container, the worker's executor and this host at the container's address (no published port): the
    job's tables go to `--out s3a://...` and its checkpoint to `--checkpoint s3a://...` (kctl's record of the job
    in the cluster's shared dir, where `kctl stream status|stop --name` find it), the keys from a 0600 file
    mounted read-only into the driver, which hands them to its executors in its jobs' hadoop configuration:
    never in a container's environment or command, nor in any process's argv or environment on this host. The
    driver's container crashed mid-stream resumes from the checkpoint on the store, and so does a job whose store
    stopped answering for 40 s. The tables, read by this test's own delta-rs, equal the ground truth."""
    import docker

    from kctl.stream import spark as kspark
    from tests.integration.s3store import SECRET_KEY
    from tests.integration.test_stream_s3 import _check_s3, _processes_holding

    c = cluster
    dc = docker.from_env()
    moto, endpoint, s3c, creds = s3_on_cluster.container, s3_on_cluster.endpoint, s3_on_cluster.client, \
        s3_on_cluster.creds
    # a bucket the store does not have: one message, before anything starts, nothing written
    r = _kctl(c, "stream", "submit", "--name", "s3cp", "--out", "s3a://kctl-cluster/o", "--checkpoint",
              "s3a://no-such-bucket/cp", "--s3-endpoint", endpoint, "--s3-credentials", str(creds))
    assert r.returncode != 0 and "no-such-bucket" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert s3c.list_objects_v2(Bucket="kctl-cluster", Prefix="o/").get("KeyCount", 0) == 0  # the refused --out
    assert not (c.state_dir.resolve() / "spark" / "data" / "s3cp").exists()
    bs = c.bootstrap_servers
    topic = _topic(bs, partitions=2)
    events = _events(500, seed=5, start=T0)
    _send(bs, topic, events, bad=4, seed=5)
    job = "s3"
    r = _kctl(c, "stream", "submit", "-d", "--name", job, "-t", topic, "--trigger", "1s", "--out",
              "s3a://kctl-cluster/out", "--checkpoint", "s3a://kctl-cluster/cp", "--s3-endpoint", endpoint,
              "--s3-credentials", str(creds), "--conf", "=".join(spark_quick_jit()), "-o", "json")
    assert SECRET_KEY not in r.stdout + r.stderr
    res = _json(r)
    st = _caught_up(c, job, len(events) + 4)
    assert st["state"] == "running" and st["spark"]["workers"][0]["cores_used"] == 1
    # the keys: in no container's environment or command, in no process's argv or environment on this host
    for x in dc.containers.list(filters={"label": f"io.kctl.spark={c.spec.name}"}):
        cfg = x.attrs["Config"]
        assert SECRET_KEY not in json.dumps([cfg.get("Env"), cfg.get("Cmd"), cfg.get("Entrypoint"),
                                             x.attrs.get("Args")]), x.name
    assert _processes_holding(SECRET_KEY) == []
    # Spark's checkpoint is on the store (the lag above was read from its offsets and commits there); kctl's
    # record of the job is in the shared dir, not in the directory kctl ran in
    keys = {o["Key"] for o in s3c.list_objects_v2(Bucket="kctl-cluster", Prefix="cp/")["Contents"]}
    assert "cp/offsets/0" in keys and "cp/commits/0" in keys, sorted(keys)[:20]
    record = c.state_dir.resolve() / "spark" / "data" / job / "_kctl"
    assert (record / "job.json").is_file() and not (c.spec_file.parent / ".kctl" / "stream" / "s3").exists()
    # the driver's container crashed: Docker starts it again, and it resumes from the checkpoint on the store
    restarts = _restarts(res["container"])
    _crash(res["container"])
    more = _events(300, seed=6, start=T0 + dt.timedelta(minutes=30))
    _send(bs, topic, more)
    st = _caught_up(c, job, len(events) + 4 + len(more), timeout=420)
    assert st["state"] == "running" and _restarts(res["container"]) > restarts
    # the store stops answering for 40 s (its container paused) while events come: the job rides it out, or
    # its query fails, the driver exits 1 and Docker starts it again until the store answers; nothing lost
    restarts = _restarts(res["container"])
    late = _events(300, seed=7, start=T0 + dt.timedelta(minutes=50))
    moto.pause()
    try:
        _send(bs, topic, late)
        time.sleep(40)
    finally:
        moto.unpause()
    st = _caught_up(c, job, len(events) + 4 + len(more) + len(late), timeout=600)
    print(f"store paused 40 s: the driver restarted {_restarts(res['container']) - restarts} time(s)")
    assert st["state"] == "running", st
    _stop(c, job)
    _check_s3(s3_on_cluster.options(), "s3://kctl-cluster/out", events + more + late, bad=4)
    # the archive's data files are written by tasks, which on the cluster run only on the worker's executor (the
    # driver's delta-rs writes the metrics): the executor had the keys
    assert "Asked to launch executor" in _kctl(c, "logs", "spark-worker-1", "-n", "2000").stdout
    assert res["out"] == "s3a://kctl-cluster/out"
    log = (c.state_dir.resolve() / "spark" / "logs" / f"{kspark.driver_host(job)}.log").read_text(errors="replace")
    assert SECRET_KEY not in log
