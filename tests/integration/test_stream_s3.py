"""The pipeline's tables on an S3-compatible store (#46), against a real one: moto's server on 127.0.0.1.

Tables written to the bucket with the test's own delta-rs code are read back by `kctl stream metrics`, `query`
and `optimize --out s3a://...` (delta-rs and DuckDB, no JVM) with the keys of a 0600 credentials file; the
bad inputs (no credentials, a readable file, a missing bucket, an unreachable store) end in one message and
a hint, without a traceback, and nothing is written. The store is reached through a TCP proxy the test can
pause (moto keeps its state in memory, so the server itself is never stopped).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl.stream.record import pid_alive
from tests.integration.s3store import SECRET_KEY, Store, moto_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with moto_store(tmp_path_factory.mktemp("s3")) as s:
        yield s


def kctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=ROOT)
    assert SECRET_KEY not in p.stdout + p.stderr
    return p


def _metrics_rows(n_windows: int, start: dt.datetime) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for w in range(n_windows):
        ws = start + dt.timedelta(minutes=w)
        for host in ("web-1", "web-2"):
            for status in (200, 404):
                rows.append({"window_start": ws, "window_end": ws + dt.timedelta(minutes=1), "host": host,
                             "status": status, "requests": w * 10 + status // 100, "bytes": w * 1000 + len(host)})
    return rows


def _write_tables(store: Store, prefix: str, batches: int) -> list[dict[str, Any]]:
    """The metrics table (kctl's schema and partitioning) and a small archive, written in ``batches`` commits by
    the test's own delta-rs; the ground truth of the metrics."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from kctl.stream.sinks import metrics_arrow_schema

    start = dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.timezone.utc)
    truth = _metrics_rows(6, start)
    per = len(truth) // batches
    for b in range(batches):
        part = truth[b * per:(b + 1) * per] if b < batches - 1 else truth[b * per:]
        write_deltalake(f"s3://{prefix}/metrics", pa.Table.from_pylist(part, schema=metrics_arrow_schema()),
                        mode="append", partition_by=["window_start"], storage_options=store.storage_options())
    archive = pa.table({"host": ["web-1", "web-2", "web-1"], "status": [200, 404, 200]})
    write_deltalake(f"s3://{prefix}/archive", archive, storage_options=store.storage_options())
    return truth


def test_tables_on_s3_read_and_optimized(store: Store) -> None:
    bucket = store.bucket("kctl-tables")
    truth = _write_tables(store, f"{bucket}/run1", batches=4)
    out = f"s3a://{bucket}/run1"

    p = kctl("stream", "metrics", "--out", out, *store.s3_args(), "-o", "json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    want = sorted(({**r, "window_start": r["window_start"].strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "window_end": r["window_end"].strftime("%Y-%m-%dT%H:%M:%SZ")}
                   for r in truth), key=lambda r: (r["window_start"], r["host"], r["status"]))
    assert got == want

    sql = "SELECT host, CAST(sum(requests) AS BIGINT) AS n FROM metrics GROUP BY host ORDER BY host"
    p = kctl("stream", "query", sql, "--out", out, *store.s3_args(), "-o", "json")
    assert p.returncode == 0, p.stderr
    sums: dict[str, int] = {}
    for r in truth:
        sums[str(r["host"])] = sums.get(str(r["host"]), 0) + int(r["requests"])
    assert json.loads(p.stdout) == [{"host": h, "n": n} for h, n in sorted(sums.items())]
    p = kctl("stream", "query", "SELECT count(*) AS n FROM archive", "--out", out, *store.s3_args(), "-o", "json")
    assert p.returncode == 0 and json.loads(p.stdout) == [{"n": 3}], p.stderr

    # Compaction by delta-rs on S3: the same rows afterwards, in fewer files (read with the test's own delta-rs).
    p = kctl("stream", "optimize", "--out", out, "--retain-hours", "1", *store.s3_args(), "-o", "json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["tables"]["metrics"]["files_removed"] > res["tables"]["metrics"]["files_added"] > 0
    from deltalake import DeltaTable

    t = DeltaTable(f"s3://{bucket}/run1/metrics", storage_options=store.storage_options())
    assert t.to_pyarrow_table().num_rows == len(truth)
    keys = [o["Key"] for o in store.client().list_objects_v2(Bucket=bucket, Prefix="run1/metrics/_delta_log/")
            ["Contents"]]
    assert any(k.endswith(".json") for k in keys)
    p = kctl("stream", "metrics", "--out", out, *store.s3_args(), "-o", "json")
    assert p.returncode == 0 and json.loads(p.stdout) == want, p.stderr


def _one_message(p: subprocess.CompletedProcess[str], *words: str) -> None:
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, p.stderr


def test_bad_inputs(store: Store, tmp_path: Path) -> None:
    bucket = store.bucket("kctl-bad")
    out = f"s3a://{bucket}/x"
    _one_message(kctl("stream", "query", "SELECT 1", "--out", out, "--s3-endpoint", store.endpoint),
                 "needs credentials", "--s3-credentials")
    loose = tmp_path / "loose"
    loose.write_text(store.credentials.read_text())
    loose.chmod(0o644)
    _one_message(kctl("stream", "query", "SELECT 1", "--out", out, "--s3-endpoint", store.endpoint,
                      "--s3-credentials", str(loose)), "readable by others", "chmod 600")
    _one_message(kctl("stream", "metrics", "--out", "s3a://no-such-bucket/x", *store.s3_args()),
                 "no-such-bucket does not exist")
    store.proxy.pause()
    try:
        _one_message(kctl("stream", "metrics", "--out", out, *store.s3_args(), timeout=60), "does not answer",
                     "--s3-endpoint")
    finally:
        store.proxy.resume()
    # nothing was made in the bucket by any of them
    assert store.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    # and with the store back, an empty prefix is "no table yet", not an error about the store
    _one_message(kctl("stream", "query", "SELECT 1", "--out", out, *store.s3_args()), "holds no Delta table")


_SPARK_WRITER = """
import json, sys
from kctl.stream import jars, job
from kctl.stream.config import JobConfig

out, settings = sys.argv[1], json.loads(sys.argv[2])
cfg = JobConfig(bootstrap_servers="127.0.0.1:1", topics=["t"], out=out, checkpoint=sys.argv[3], s3=settings,
                jars=[str(p) for p in jars.resolve_delta_jars() + jars.resolve_s3_jars()])
spark = job.build_session(cfg, app_name="kctl-s3-test")
for lo, hi in ((0, 100), (100, 150)):
    spark.range(lo, hi).withColumnRenamed("id", "n").write.format("delta").mode("append").save(out + "/t")
n = spark.read.format("delta").load(out + "/t").count()
print(json.dumps({"count": n}), flush=True)
sys.stdin.readline()  # the test looks at every process's argv and environment meanwhile
spark.stop()
"""


def _processes_holding(secret: str) -> list[str]:
    hits = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        for f in ("cmdline", "environ"):
            try:
                if secret.encode() in (d / f).read_bytes():
                    hits.append(f"{d.name}/{f}")
            except OSError:
                pass
    return hits


@pytest.mark.spark
@pytest.mark.long  # a JVM and hadoop-aws's 530 MB SDK bundle (resolved on first use): ~60-110 s here
def test_spark_writes_delta_to_s3_without_showing_the_keys(store: Store, tmp_path: Path) -> None:
    """kctl's Spark session (hadoop-aws resolved like the Kafka source and Delta; the keys set in the driver)
    writes a Delta table to the store; the test's own delta-rs and boto3 read it back; no process's argv or
    environment holds the secret key while the JVM runs."""
    bucket = store.bucket("kctl-spark")
    settings = {"endpoint": store.endpoint, "region": "us-east-1", "path_style": True,
                "credentials_file": str(store.credentials)}
    p = subprocess.Popen([sys.executable, "-c", _SPARK_WRITER, f"s3a://{bucket}/run", json.dumps(settings),
                          str(tmp_path / "cp")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert p.stdout is not None and p.stdin is not None
    try:
        line = p.stdout.readline()
        assert line, p.stderr.read() if p.stderr else ""
        assert json.loads(line) == {"count": 150}
        assert _processes_holding(SECRET_KEY) == []
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(120) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    from deltalake import DeltaTable

    t = DeltaTable(f"s3://{bucket}/run/t", storage_options=store.storage_options())
    assert sorted(t.to_pyarrow_table().column("n").to_pylist()) == list(range(150))
    keys = [o["Key"] for o in store.client().list_objects_v2(Bucket=bucket, Prefix="run/t/")["Contents"]]
    assert "run/t/_delta_log/00000000000000000001.json" in keys


def test_metrics_merge_on_s3_exactly_once(store: Store) -> None:
    """The job's own delta-rs MERGE of a batch's counts (kctl.stream.sinks) on the store, with kctl's storage
    options from the credentials file: a replayed batch changes nothing, and the table read by the test's own
    delta-rs equals the sum of the batches."""
    from deltalake import DeltaTable

    from kctl.stream import s3, sinks

    bucket = store.bucket("kctl-merge")
    # moto directly: the proxy's threads live in this process, and delta-rs holds the GIL while it waits
    opts = s3.storage_options(s3.Settings(endpoint=store.direct, credentials_file=str(store.credentials)),
                              s3.read_credentials(store.credentials))
    path = f"s3a://{bucket}/run/metrics"
    sinks.create_metrics_table(path, opts)
    sinks.create_metrics_table(path, opts)  # idempotent: a restart finds it
    m = sinks.MetricsTable(path, opts)
    w0 = 1_796_464_800  # a minute boundary
    batches = [[(w0, "web-1", 200, 3, 300), (w0, "web-2", 404, 1, 10)],
               [(w0, "web-1", 200, 2, 200), (w0 + 60, "web-1", 500, 1, 5)]]
    assert m.merge_counts(batches[0], app_id="q", version=0)
    assert m.merge_counts(batches[1], app_id="q", version=1)
    assert not m.merge_counts(batches[1], app_id="q", version=1)  # replayed after a crash: skipped
    assert not sinks.MetricsTable(path, opts).merge_counts(batches[0], app_id="q", version=0)  # a restart
    assert sinks.last_txn_version(path, "q", opts) == 1
    t = DeltaTable(f"s3://{bucket}/run/metrics", storage_options=store.storage_options())
    got = sorted((int(r["window_start"].timestamp()), r["host"], r["status"], r["requests"], r["bytes"])
                 for r in t.to_pyarrow_table().to_pylist())
    assert got == [(w0, "web-1", 200, 5, 500), (w0, "web-2", 404, 1, 10), (w0 + 60, "web-1", 500, 1, 5)]


# ----- the job itself on the store: `kctl stream submit --out s3a://... --checkpoint s3a://...` ------------------


def _submit_cmd(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`kctl stream ...` run from ``cwd`` (where kctl keeps its record of a job whose checkpoint is on S3)."""
    p = subprocess.run([sys.executable, "-m", "kctl", "stream", *args], capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=cwd)
    assert SECRET_KEY not in p.stdout + p.stderr
    return p


def test_submit_bad_inputs_end_before_kafka_and_the_jvm(store: Store, tmp_path: Path) -> None:
    """`kctl stream submit --out s3a://...`: no credentials, a group-readable file, a missing bucket, a store that does
    not answer -- each one message with a hint, before Kafka is asked anything (the bootstrap server given answers
    nothing) and before any JVM starts; nothing written to the bucket or to the local state dir."""
    bucket = store.bucket("kctl-submit-bad")
    out, cp = f"s3a://{bucket}/job/out", f"s3a://{bucket}/job/cp"
    base = ["submit", "-b", "127.0.0.1:1", "--available-now", "--out", out, "--checkpoint", cp]
    _one_message(_submit_cmd(tmp_path, *base, "--s3-endpoint", store.endpoint), "needs credentials",
                 "--s3-credentials")
    loose = tmp_path / "loose"
    loose.write_text(store.credentials.read_text())
    loose.chmod(0o640)
    _one_message(_submit_cmd(tmp_path, *base, "--s3-endpoint", store.endpoint, "--s3-credentials", str(loose)),
                 "readable by others", "chmod 600")
    loose.unlink()
    _one_message(_submit_cmd(tmp_path, "submit", "-b", "127.0.0.1:1", "--out", "s3a://no-such-bucket/o",
                             *store.s3_args()), "no-such-bucket does not exist", "create it first")
    _one_message(_submit_cmd(tmp_path, "submit", "-b", "127.0.0.1:1", "--out", "/tmp/x", "--checkpoint",
                             "s3a://no-such-bucket/cp", *store.s3_args()), "no-such-bucket does not exist")
    store.proxy.pause()
    try:
        _one_message(_submit_cmd(tmp_path, *base, *store.s3_args(), timeout=60), "does not answer", "--s3-endpoint")
    finally:
        store.proxy.resume()
    assert store.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    assert list(tmp_path.iterdir()) == []
    # status of a checkpoint on S3 that no job used from here: one message naming where kctl looked
    _one_message(_submit_cmd(tmp_path, "status", "--checkpoint", cp), "no stream job has run", ".kctl/stream/s3")


def _s3_rows(store: Store | dict[str, str], url: str, sql: str) -> list[dict[str, Any]]:
    """``sql`` over the Delta table at ``url`` (view ``t``), read by this test's own delta-rs straight from moto (a
    Store, or delta-rs storage options)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    t = DeltaTable(url, storage_options=store if isinstance(store, dict) else store.storage_options())
    rows: list[dict[str, Any]] = pa.table(QueryBuilder().register("t", t).execute(sql).read_all()).to_pylist()
    return rows


def _check_s3(store: Store | dict[str, str], root: str, events: list[Any], bad: int) -> None:
    """Every table under ``root`` (s3://BUCKET/PREFIX) against the generated events' ground truth."""
    from kctl.agent.nginx import ground_truth

    archive = _s3_rows(store, f"{root}/archive", 'SELECT topic, "partition", "offset" FROM t')
    assert len(archive) == len(events)
    assert len({(r["topic"], r["partition"], r["offset"]) for r in archive}) == len(events)  # no duplicates
    dl = _s3_rows(store, f"{root}/deadletter", 'SELECT topic, "partition", "offset", reason FROM t')
    assert len(dl) == bad and len({(r["topic"], r["partition"], r["offset"]) for r in dl}) == bad
    assert all(r["reason"] for r in dl)
    truth = {(w.strftime("%Y-%m-%dT%H:%M:%SZ"), h, s): v for (w, h, s), v in ground_truth(events).items()}
    rows = _s3_rows(store, f"{root}/metrics", "SELECT window_start, host, status, requests, bytes FROM t")
    got = {(r["window_start"].strftime("%Y-%m-%dT%H:%M:%SZ"), r["host"], r["status"]): (r["requests"], r["bytes"])
           for r in rows}
    assert len(rows) == len(got)  # exactly one row per (window_start, host, status)
    assert got == truth


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A one-node Kafka cluster for the job's tests (started only when one of them runs)."""
    from kctl.testing.cluster import KafkaCluster

    c = KafkaCluster(1, workdir=str(tmp_path_factory.mktemp("kafka")))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _wait(what: str, probe: Any, timeout: float, poll: float = 0.3) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(poll)
    pytest.fail(f"{what}: not within {timeout:.0f} s")


@pytest.mark.spark
def test_job_writes_exact_tables_to_s3(store: Store, kafka: Any, tmp_path: Path) -> None:
    """The short form (make test): one detached run of `kctl stream submit --out s3a://... --checkpoint s3a://...`
    until `kctl stream status` (the checkpoint's offsets on the store) shows no lag, then `kctl stream stop`: while
    it runs no process holds the secret key in its argv or environment; the tables on the store, read by this
    test's own delta-rs, equal the ground truth; status reads the tables' rows too."""
    from tests.integration.ports import spark_quick_jit
    from tests.integration.test_stream import _events, _send, _topic

    bs = kafka.bootstrap_servers
    topic = _topic(bs)
    bucket = store.bucket("kctl-job-short")
    out, cp = f"s3a://{bucket}/j/out", f"s3a://{bucket}/j/cp"
    events = _events(600, seed=61, start=dt.datetime(2024, 6, 3, 9, 59, 30, tzinfo=dt.timezone.utc))
    _send(bs, topic, events, bad=3, seed=61)
    r = _submit_cmd(tmp_path, "submit", "-b", bs, "-t", topic, "--out", out, "--checkpoint", cp, *store.s3_args(),
                    "--trigger", "1s", "--detach", "-o", "json", "--conf", "=".join(spark_quick_jit()), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    pid = int(json.loads(r.stdout)["pid"])
    assert _processes_holding(SECRET_KEY) == []

    def status() -> dict[str, Any]:
        r = _submit_cmd(tmp_path, "status", "--checkpoint", cp, "-o", "json")
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout))

    _wait("the run to catch up", lambda: status()["total_lag"] == 0, 240, poll=1)
    r = _submit_cmd(tmp_path, "stop", "--checkpoint", cp, "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["stopped"] is True, r.stderr
    assert not pid_alive(pid)
    _check_s3(store, f"s3://{bucket}/j/out", events, bad=3)
    s = status()
    assert s["state"] == "stopped" and s["total_lag"] == 0 and s["error"] is None, s
    assert {t["table"]: t["rows"] for t in s["tables"]} == {"archive": 600, "deadletter": 3, "metrics": len(
        _s3_rows(store, f"s3://{bucket}/j/out/metrics", "SELECT host FROM t"))}
    sd = tmp_path / ".kctl" / "stream" / "s3" / bucket / "j" / "cp" / "_kctl"
    assert all(SECRET_KEY not in f.read_text(errors="replace") for f in sd.iterdir() if f.is_file())


@pytest.mark.spark
@pytest.mark.long  # three or four runs of the job, each a JVM with hadoop-aws's SDK bundle: ~4-6 min here
def test_job_on_s3_exact_after_kill9_and_an_unreachable_store(store: Store, kafka: Any, tmp_path: Path) -> None:
    """`kctl stream submit --out s3a://... --checkpoint s3a://...` (local[2], moto through the pausable proxy): a run
    killed with SIGKILL mid-stream, more events, a run during which the store stops answering (until the job fails,
    at most 40 s: it rides a pause out or fails with one message naming the store), and a catch-up run: the tables
    on the store, read by this test's own delta-rs, equal the generated events' ground truth; `kctl stream status`
    shows the kill's lag and none at the end; the secret key is in no process's argv or environment, nor in
    kctl's files."""
    import os as _os
    import signal
    import time

    from kctl.agent.nginx import generate, ground_truth
    from tests.integration.ports import spark_quick_jit
    from tests.integration.test_stream import _events, _send, _topic

    bs = kafka.bootstrap_servers
    topic = _topic(bs)
    bucket = store.bucket("kctl-job")
    out, cp = f"s3a://{bucket}/run/out", f"s3a://{bucket}/run/cp"
    start = dt.datetime(2024, 6, 2, 8, 0, 0, tzinfo=dt.timezone.utc)
    first = _events(3000, seed=51, start=start)
    _send(bs, topic, first, bad=10, seed=51)
    more = list(generate(1500, seed=52, hosts=4, start=start + dt.timedelta(minutes=3), rate=20.0))
    sd = tmp_path / ".kctl" / "stream" / "s3" / bucket / "run" / "cp" / "_kctl"
    counters = sd / "counters.json"
    args = ["submit", "-b", bs, "-t", topic, "--out", out, "--checkpoint", cp, *store.s3_args(), "-o", "json",
            "--conf", "=".join(spark_quick_jit()), "--name", "s3job"]

    def batches() -> int:
        try:
            return int(json.loads(counters.read_text())["batches"])
        except (OSError, ValueError, KeyError):
            return 0

    def status() -> dict[str, Any]:
        r = _submit_cmd(tmp_path, "status", "--checkpoint", cp, "-o", "json")
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout))

    # 1. a detached run, killed with SIGKILL after its second batch
    t0 = time.monotonic()
    r = _submit_cmd(tmp_path, *args, "--detach", "--trigger", "1s", "--max-offsets-per-trigger", "400", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    pid = int(json.loads(r.stdout)["pid"])
    _wait("two batches of the first run", lambda: batches() >= 2, 240)
    assert _processes_holding(SECRET_KEY) == []  # the driver's JVM and Python run: no key in argv or env
    _os.kill(pid, signal.SIGKILL)
    _wait("the killed job gone", lambda: not pid_alive(pid), 30)
    s = status()
    assert s["state"] == "dead" and s["total_lag"] > 0 and s["last_committed_batch"] is not None, s
    print(f"run 1 (killed): {time.monotonic() - t0:.0f} s")

    # 2. more events; a run during which the store stops answering
    _send(bs, topic, more)
    counters.unlink(missing_ok=True)
    t0 = time.monotonic()
    r = _submit_cmd(tmp_path, *args, "--detach", "--trigger", "1s", "--max-offsets-per-trigger", "300", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    pid = int(json.loads(r.stdout)["pid"])
    _wait("a batch of the second run", lambda: batches() >= 1, 240)
    store.proxy.pause()
    paused = time.monotonic()
    try:  # batches keep coming (the events of both sends): one meets the store gone within seconds
        while time.monotonic() - paused < 40:
            failed = json.loads((sd / "job.json").read_text()).get("state") == "failed"
            if failed:
                break
            time.sleep(0.5)
    finally:
        store.proxy.resume()
    print(f"store paused for {time.monotonic() - paused:.0f} s")
    if failed:  # one message that names the store and what to do, without the key
        _wait("the failed job gone", lambda: not pid_alive(pid), 60)
        s = status()
        assert s["state"] == "failed", s
        err = json.loads((sd / "job.json").read_text())["error"]
        assert "does not answer" in err and "submit it again" in err and "\n" not in err, err
        assert s["error"] == err
        print(f"the failed run's error: {err}")
    else:  # it rode the pause out: it catches up, and stops gracefully
        _wait("the second run caught up", lambda: status()["total_lag"] == 0, 240, poll=1)
        r = _submit_cmd(tmp_path, "stop", "--checkpoint", cp, "-o", "json")
        assert r.returncode == 0 and json.loads(r.stdout)["stopped"] is True, r.stderr
    print(f"run 2 (store paused; {'failed' if failed else 'rode it out'}): {time.monotonic() - t0:.0f} s")

    # 3. a catch-up run in the foreground: everything exactly once
    t0 = time.monotonic()
    r = _submit_cmd(tmp_path, *args, "--available-now", "--max-offsets-per-trigger", "2000", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"run 3 (catch-up): {time.monotonic() - t0:.0f} s")
    _check_s3(store, f"s3://{bucket}/run/out", first + more, bad=10)
    s = status()
    assert s["state"] == "finished" and s["total_lag"] == 0, s
    tables = {t["table"]: t for t in s["tables"]}
    assert tables["archive"]["rows"] == len(first + more) and tables["deadletter"]["rows"] == 10
    assert tables["metrics"]["rows"] == len(ground_truth(first + more)) and tables["metrics"]["last_batch"] is not None
    # kctl's own reader agrees
    p = kctl("stream", "query", "SELECT CAST(sum(requests) AS BIGINT) AS n FROM metrics", "--out", out,
             *store.s3_args(), "-o", "json")
    assert p.returncode == 0 and json.loads(p.stdout) == [{"n": len(first + more)}], p.stderr
    # the checkpoint is on the store (Spark's offsets and commits), kctl's record of the job on this machine
    keys = {o["Key"] for o in store.client().list_objects_v2(Bucket=bucket, Prefix="run/cp/")["Contents"]}
    assert "run/cp/metadata" in keys and any(k.startswith("run/cp/commits/") for k in keys)
    assert not (tmp_path / "s3a:").exists()
    for f in sd.iterdir():
        if f.is_file():
            assert SECRET_KEY not in f.read_text(errors="replace"), f


@pytest.mark.spark
@pytest.mark.long  # a standalone master and worker, and the SDK bundle (530 MB) fetched by the worker's executor
def test_job_on_a_standalone_spark_cluster_writes_its_tables_and_checkpoint_to_s3(
        store: Store, kafka: Any, tmp_path: Path) -> None:
    """`kctl stream submit --master spark://...` (a standalone master and worker of the installed pyspark on
    127.0.0.1, started by the test) with `--out s3a://...` and `--checkpoint s3a://...`: the executor, on the
    worker, gets the hadoop-aws jars from the driver and the keys in the job's hadoop configuration; the tables
    on the store, read by this test's own delta-rs, equal the ground truth; `kctl stream status` reads the lag
    from the checkpoint on the store."""
    from tests.integration.ports import spark_quick_jit
    from tests.integration.test_stream import _events, _send, _standalone, _topic

    bs = kafka.bootstrap_servers
    topic = _topic(bs)
    bucket = store.bucket("kctl-standalone")
    out, cp = f"s3a://{bucket}/j/out", f"s3a://{bucket}/j/cp"
    events = _events(800, seed=71, start=dt.datetime(2024, 6, 4, 7, 0, 0, tzinfo=dt.timezone.utc))
    _send(bs, topic, events, bad=5, seed=71)
    with _standalone(tmp_path) as master:
        r = _submit_cmd(tmp_path, "submit", "-b", bs, "-t", topic, "--out", out, "--checkpoint", cp,
                        *store.s3_args(), "--master", master, "--available-now", "-o", "json",
                        "--conf", "=".join(spark_quick_jit()), timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        worker_log = (tmp_path / "standalone.log").read_text(errors="replace")
    assert "Asked to launch executor" in worker_log  # the archive's files were written by the worker's executor
    assert SECRET_KEY not in worker_log
    _check_s3(store, f"s3://{bucket}/j/out", events, bad=5)
    r = _submit_cmd(tmp_path, "status", "--checkpoint", cp, "-o", "json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["state"] == "finished" and s["total_lag"] == 0 and s["last_committed_batch"] is not None, s
