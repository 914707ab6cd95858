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
