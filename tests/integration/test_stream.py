"""The pipeline end to end: generated events -> Kafka -> the Spark job -> archive, dead-letter, metrics.

Every check compares against a ground truth computed here from the generated
events (kctl.agent.nginx.ground_truth), never against the job's own counters.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kctl.agent.nginx import generate, ground_truth, malformed_records
from kctl.agent.produce import produce
from kctl.kafka.client import Target
from tests.integration.ports import spark_quick_jit

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KCTL = [str(Path(sys.executable).parent / "kctl")]

def _topic(bootstrap: str, partitions: int = 3) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"kctl-test-{uuid.uuid4().hex[:8]}"
    a = AdminClient({"bootstrap.servers": bootstrap})
    brokers = len(a.list_topics(timeout=10).brokers)
    for f in a.create_topics([NewTopic(name, partitions, min(3, brokers))]).values():
        f.result(timeout=30)
    return name


def _kctl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KCTL, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _submit(bootstrap: str, topic: str, tmp: Path, *extra: str, timeout: float = 600) -> dict[str, Any]:
    r = _kctl("stream", "submit", "-b", bootstrap, "-t", topic, "--out", str(tmp / "out"),
              "--checkpoint", str(tmp / "cp"), "-o", "json", "--conf", "=".join(spark_quick_jit()), *extra,
              timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(json.loads(r.stdout))


def _events(n: int, seed: int, start: dt.datetime) -> list[Any]:
    return list(generate(n, seed=seed, hosts=4, start=start, rate=20.0))


def _send(bootstrap: str, topic: str, events: list[Any], bad: int = 0, seed: int = 0) -> None:
    records = malformed_records(((e.key, e.value) for e in events), bad, seed=seed)
    res = produce(Target.of(None, bootstrap), topic, records)
    assert res.delivered == len(events) + bad and res.failed == 0


def _rows(table: Path, sql: str) -> list[dict[str, Any]]:
    """``sql`` over the Delta table at ``table`` (view ``t``), read by this test with delta-rs's query engine
    (deletion vectors applied), not with kctl's readers."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    rows: list[dict[str, Any]] = pa.table(QueryBuilder().register("t", DeltaTable(str(table))).execute(sql)
        .read_all()).to_pylist()
    return rows


def _check(out: Path, events: list[Any], bad: int, spark: Any = None) -> None:
    """Every table of the job against the ground truth, read without a JVM; with ``spark`` (the long tests'
    reader), Spark's own Delta reader must agree (test_stream_sinks reads every table with Spark too)."""
    from kctl.stream.metrics import read_metrics

    archive = _rows(out / "archive", 'SELECT topic, "partition", "offset" FROM t')
    assert len(archive) == len(events)
    assert len({(r["topic"], r["partition"], r["offset"]) for r in archive}) == len(events)  # no duplicates
    dl = _rows(out / "deadletter", 'SELECT topic, "partition", "offset", reason, value IS NULL AS no_value FROM t')
    assert len(dl) == bad
    assert len({(r["topic"], r["partition"], r["offset"]) for r in dl}) == bad
    assert [r for r in dl if r["reason"] is None or (r["no_value"] and r["reason"] != "empty value")] == []
    truth = {(w.strftime("%Y-%m-%dT%H:%M:%SZ"), h, s): v for (w, h, s), v in ground_truth(events).items()}
    rows = _rows(out / "metrics", "SELECT window_start, host, status, requests, bytes FROM t")
    got = {(r["window_start"].strftime("%Y-%m-%dT%H:%M:%SZ"), r["host"], r["status"]): (r["requests"], r["bytes"])
           for r in rows}
    assert len(rows) == len(got)  # exactly one row per (window_start, host, status)
    assert got == truth
    # `kctl stream metrics` reads the same table
    assert {(r["window_start"], r["host"], r["status"]): (r["requests"], r["bytes"]) for r in read_metrics(out)} \
        == truth
    if spark is not None:
        assert spark.read.format("delta").load(str(out / "archive")).count() == len(events)
        assert spark.read.format("delta").load(str(out / "deadletter")).count() == bad
        assert read_metrics(out, spark) == read_metrics(out)


def test_a_detached_run_matches_ground_truth_and_stops_gracefully(kafka_cluster: Any, tmp_path: Path) -> None:
    """A detached run (`--trigger 1s`) reads everything, `kctl stream stop` stops it gracefully, and every table
    equals the ground truth; `--available-now` runs against the ground truth in the kill test's catch-up."""
    bs = kafka_cluster.bootstrap_servers
    topic = _topic(bs)
    events = _events(3000, seed=11, start=dt.datetime(2024, 5, 1, 23, 58, 30, tzinfo=dt.timezone.utc))
    _send(bs, topic, events, bad=18, seed=11)
    _submit(bs, topic, tmp_path, "--detach", "--trigger", "1s")
    deadline = time.monotonic() + 240
    lag = None
    while time.monotonic() < deadline:  # caught up: kctl's lag (the checkpoint's offsets) at 0
        st = _kctl("stream", "status", "--checkpoint", str(tmp_path / "cp"), "-o", "json")
        assert st.returncode == 0, st.stderr
        lag = json.loads(st.stdout)["total_lag"]
        if lag == 0:
            break
        time.sleep(1)
    assert lag == 0, f"the detached run did not catch up within 240 s (lag {lag})"
    r = _kctl("stream", "stop", "--checkpoint", str(tmp_path / "cp"), "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stopped"] is True
    job = json.loads((tmp_path / "cp" / "_kctl" / "job.json").read_text())
    assert job["state"] == "stopped"
    # every record was waiting at the start: the first batch, not a warm-up, paid the writer's first calls
    assert job["warm_up"] == f"skipped: {len(events) + 18} records waiting" and job["warm_up_s"] == 0
    _check(tmp_path / "out", events, bad=18)
    # the job's progress history (what the benchmark reads) accounts for every record of the run
    from kctl.stream.progress import job_progress

    history = job_progress(tmp_path / "cp")
    assert history and sum(int(p["numInputRows"]) for p in history) == len(events) + 18


# `make test` kills the job once (the kill that leaves lag behind, then the catch-up); `make test-long` three
# times at the seeded points, each run over the checkpoint the previous kill left.
@pytest.mark.parametrize("kills", [1, pytest.param(3, marks=pytest.mark.long)])
def test_kill9_at_seeded_points_loses_nothing_and_readers_see_whole_batches(
        kafka_cluster: Any, tmp_path: Path, kills: int) -> None:
    """kill -9 of the job at seeded random points (``kills`` times), more events after the first kill, then a
    catch-up run in batches of 2,000: every total equals the ground truth. Meanwhile a delta-rs reader polls
    the metrics table: every total it sees is the sum of whole batches. Kafka's own kafka-consumer-groups.sh
    shows the job's consumer group with its lag after a kill, and none after the catch-up."""
    bs = kafka_cluster.bootstrap_servers
    topic = _topic(bs)
    name = f"t-{topic[-8:]}"
    start = dt.datetime(2024, 6, 2, 8, 0, 0, tzinfo=dt.timezone.utc)
    first = _events(6000, seed=21, start=start)
    _send(bs, topic, first, bad=12, seed=21)
    more = list(generate(1500, seed=22, hosts=4, start=start + dt.timedelta(minutes=6), rate=20.0))
    rng = random.Random(2112)
    reader = _Reader(tmp_path / "out" / "metrics")
    reader.start()
    counters = tmp_path / "cp" / "_kctl" / "counters.json"
    try:
        for kill in range(kills):
            counters.unlink(missing_ok=True)
            res = _submit(bs, topic, tmp_path, "--detach", "--trigger", "1s", "--max-offsets-per-trigger", "400",
                          "--name", name)
            pid = int(res["pid"])
            want = rng.randint(1, 3)  # batches of this run, then a random fraction of the next one
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                if counters.exists() and json.loads(counters.read_text())["batches"] >= want:
                    break
                time.sleep(0.2)
            else:
                pytest.fail(f"run {kill}: the job did not get through {want} batches")
            if kill == 0:
                # The job publishes a batch's offsets to its group after the batch (Spark's progress event, on
                # its listener thread), the first time through a new consumer and, on a cluster with no group
                # yet, the offsets topic's creation: the kill below must come after a first one for Kafka's
                # tool to have a group to show.
                _wait_group_committed(bs, f"kctl-stream-{name}")
            time.sleep(rng.uniform(0.0, 3.0))
            os.kill(pid, signal.SIGKILL)
            _wait_dead(pid)
            if kill == 0:
                _send(bs, topic, more)
                st = _kctl("stream", "status", "--checkpoint", str(tmp_path / "cp"), "-o", "json")
                assert st.returncode == 0, st.stderr
                s = json.loads(st.stdout)
                assert s["state"] == "dead" and s["total_lag"] > 0 and s["group"] == f"kctl-stream-{name}"
                theirs = _group_describe(kafka_cluster, f"kctl-stream-{name}")
                assert theirs and sum(r["lag"] for r in theirs) > 0
                # the group's offsets are the checkpoint's committed ones (or one batch behind them)
                assert sum(r["lag"] for r in theirs) >= s["total_lag"]
        _submit(bs, topic, tmp_path, "--available-now", "--max-offsets-per-trigger", "2000", "--name", name)
    finally:
        reader.stop()
    _check(tmp_path / "out", first + more, bad=12)
    theirs = _group_describe(kafka_cluster, f"kctl-stream-{name}")
    assert {r["partition"] for r in theirs} == {0, 1, 2} and all(r["lag"] == 0 for r in theirs), theirs
    # what the reader saw: only totals at batch boundaries
    whole = _batch_totals(bs, topic, tmp_path / "cp", {e.value for e in first + more})
    assert reader.totals and reader.errors == []
    assert set(reader.totals) <= whole, sorted(set(reader.totals) - whole)
    assert len(set(reader.totals)) >= 3  # it did watch the table grow


def _group_describe(cluster: Any, group: str) -> list[dict[str, Any]]:
    from tests.kafka_tools import parse_kafka_groups_describe

    rc, out = cluster.exec("logger1", ["/opt/kafka/bin/kafka-consumer-groups.sh", "--bootstrap-server",
                                       "logger1:9092", "--describe", "--group", group], stderr=False)
    assert rc == 0, out
    return parse_kafka_groups_describe(out)


class _Reader(threading.Thread):
    """Polls the metrics table with delta-rs (as `kctl stream metrics` does) and records each total."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.totals: list[int] = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        from kctl.stream.metrics import read_metrics

        while not self._halt.is_set():
            if (self.path / "_delta_log").is_dir():
                try:
                    self.totals.append(sum(r["requests"] for r in read_metrics(self.path.parent)))
                except Exception as exc:  # noqa: BLE001 - recorded, the test fails on any
                    self.errors.append(repr(exc))
            self._halt.wait(0.1)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def _batch_totals(bootstrap: str, topic: str, checkpoint: Path, good: set[str]) -> set[int]:
    """The metrics total after each batch of the checkpoint: good records below the batch's end offsets."""
    from confluent_kafka import TopicPartition

    from kctl.kafka.client import consumer

    c = consumer(Target.of(None, bootstrap))
    flags: dict[int, list[bool]] = {}
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        n = sum(ends.values())
        deadline = time.monotonic() + 60
        got = 0
        while got < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            flags.setdefault(m.partition(), []).append(
                m.value() is not None and m.value().decode("utf-8", "replace") in good)
            got += 1
        assert got == n
    finally:
        c.close()
    totals = {0}
    for f in (checkpoint / "offsets").iterdir():
        if not f.name.isdigit():
            continue
        end = json.loads(f.read_text().splitlines()[2])[topic]
        totals.add(sum(sum(flags.get(int(p), [])[:int(o)]) for p, o in end.items()))
    return totals


def test_missing_topic_is_a_clear_error(kafka_cluster: Any, tmp_path: Path) -> None:
    r = _kctl("stream", "submit", "-b", kafka_cluster.bootstrap_servers, "-t", "no-such-topic-xyz",
              "--available-now", "--out", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c"))
    assert r.returncode != 0 and "no-such-topic-xyz" in r.stderr and "Traceback" not in r.stderr


def test_unreachable_cluster_is_a_clear_error(tmp_path: Path) -> None:
    r = _kctl("stream", "submit", "-b", f"127.0.0.1:{_free_port()}", "-t", "x", "--available-now",
              "--out", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c"))
    assert r.returncode != 0 and "unreachable" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.long
def test_standalone_cluster(kafka_cluster: Any, spark: Any, tmp_path: Path) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = _topic(bs)
    events = _events(2000, seed=31, start=dt.datetime(2024, 7, 3, 10, 0, tzinfo=dt.timezone.utc))
    _send(bs, topic, events, bad=6, seed=31)
    with _standalone(tmp_path) as master:
        _submit(bs, topic, tmp_path, "--available-now", "--master", master)
    _check(tmp_path / "out", events, bad=6, spark=spark)


# ----- helpers --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_group_committed(bs: str, group: str, timeout: float = 60) -> None:
    """Until ``group`` holds a committed offset (asked of the brokers with an AdminClient, not through kctl)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bs})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
            if any(tp.offset >= 0 for tp in got.topic_partitions):
                return
        except Exception:  # noqa: BLE001 - no coordinator or no group yet
            pass
        time.sleep(0.2)
    pytest.fail(f"the job committed no offsets to its group {group} within {timeout:.0f} s")


def _wait_dead(pid: int, timeout: float = 30) -> None:
    from kctl.stream.record import pid_alive

    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


class _standalone:  # noqa: N801 - a context manager used like a function
    """A Spark standalone master and one worker from the installed pyspark, on 127.0.0.1."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> str:
        import pyspark

        spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        port, ui, wui = _free_port(), _free_port(), _free_port()
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(self.tmp / "work"),
                   SPARK_DAEMON_MEMORY="256m", PYSPARK_PYTHON=sys.executable)
        master = f"spark://127.0.0.1:{port}"
        log = (self.tmp / "standalone.log").open("ab")
        self.procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(ui)], env=env, stdout=log, stderr=log, start_new_session=True))
        self.procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port", str(wui),
             "--cores", "2", "--memory", "1g", master], env=env, stdout=log, stderr=log, start_new_session=True))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = (self.tmp / "standalone.log").read_text(errors="replace")
            if "Successfully registered with master" in text:
                return master
            time.sleep(0.5)
        self.__exit__()
        raise AssertionError("standalone master/worker did not come up:\n" + text[-2000:])

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


# long: make test kills the job itself (kill -9 above); the brokers' own kills are the drills' (test_drill.py).
@pytest.mark.long
def test_broker_sigkill_during_the_run_loses_and_duplicates_nothing(
        kctl_faults: Any, spark: Any, tmp_path: Path) -> None:
    """SIGKILL of the broker leading partition 0 while the job runs, more events produced to the two left,
    the broker restored: the tables hold every event exactly once (ground truth of the generated events)."""
    from confluent_kafka.admin import AdminClient

    cluster = kctl_faults
    bs = cluster.bootstrap_servers
    topic = _topic(bs)
    start = dt.datetime(2024, 8, 5, 6, 0, 0, tzinfo=dt.timezone.utc)
    first = _events(2000, seed=41, start=start)
    _send(bs, topic, first, bad=8, seed=41)
    more = list(generate(1000, seed=42, hosts=4, start=start + dt.timedelta(minutes=3), rate=20.0))
    leader = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    counters = tmp_path / "cp" / "_kctl" / "counters.json"
    pid = int(_submit(bs, topic, tmp_path, "--detach", "--trigger", "1s", "--max-offsets-per-trigger", "500")["pid"])
    try:
        deadline = time.monotonic() + 240
        while not (counters.exists() and json.loads(counters.read_text())["batches"] >= 1):
            assert time.monotonic() < deadline, "the job did not commit a batch"
            time.sleep(0.2)
        cluster.kill(leader)  # SIGKILL of the broker's JVM, mid-stream
        _send(bs, topic, more)  # to the leaders that took over
        time.sleep(3)  # the job goes on against two brokers
        cluster.start(leader)
        deadline = time.monotonic() + 240
        while True:
            st = _kctl("stream", "status", "--checkpoint", str(tmp_path / "cp"), "-o", "json")
            assert st.returncode == 0, st.stderr
            s = json.loads(st.stdout)
            assert s["state"] == "running", s
            if s["total_lag"] == 0:
                break
            assert time.monotonic() < deadline, f"the job did not catch up: {s}"
            time.sleep(1)
    finally:
        r = _kctl("stream", "stop", "--checkpoint", str(tmp_path / "cp"), "-o", "json")
        _wait_dead(pid)
    assert r.returncode == 0, r.stderr
    _check(tmp_path / "out", first + more, bad=8, spark=spark)
