"""The Delta sinks on their own: a local Spark session (a JVM), no containers.

A replayed batch (same query id, same batch id) changes nothing in any of the three tables; a later
batch id still lands; another query id is another writer. The end-to-end forms (kill -9 of the job at
seeded points, a reader during the run) are in test_stream.py.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from kctl.agent.nginx import generate, ground_truth, malformed_records

pytestmark = pytest.mark.spark


def _kafka_df(spark: Any, records: list[tuple[str | None, str]], first_offset: int) -> Any:
    from kctl.stream.job import kafka_schema

    t = dt.datetime(2024, 1, 1)
    rows = [((k.encode() if k is not None else None), v.encode(), "t", 0, first_offset + i, t, 0)
            for i, (k, v) in enumerate(records)]
    return spark.createDataFrame(rows, kafka_schema())


def _totals(out: Path) -> tuple[int, int, dict[tuple[str, str, int], tuple[int, int]]]:
    from kctl.stream.metrics import read_metrics
    from kctl.stream.tables import open_table

    arch = open_table(out / "archive")
    dl = open_table(out / "deadletter")
    assert arch is not None and dl is not None
    rows = read_metrics(out)
    return (arch.to_pyarrow_table().num_rows, dl.to_pyarrow_table().num_rows,
            {(r["window_start"], r["host"], r["status"]): (r["requests"], r["bytes"]) for r in rows})


def _last_commit(table: Path) -> list[dict[str, Any]]:
    import json

    last = sorted((table / "_delta_log").glob("*.json"))[-1]
    return [json.loads(line) for line in last.read_text().splitlines()]


def _commit_info(table: Path) -> list[dict[str, Any]]:
    """The commitInfo actions of the last commit (who wrote it: Spark's engineInfo, delta-rs's clientVersion)."""
    return [a["commitInfo"] for a in _last_commit(table) if "commitInfo" in a]


def test_replayed_batch_changes_nothing(spark: Any, tmp_path: Path) -> None:
    from kctl.stream.config import JobConfig
    from kctl.stream.job import BatchWriter, create_tables

    out = tmp_path / "out"
    create_tables(spark, out)
    start = dt.datetime(2024, 3, 1, 10, 0, 0, tzinfo=dt.timezone.utc)
    events = list(generate(300, seed=3, hosts=3, start=start, rate=2.0))
    recs = list(malformed_records(((e.key, e.value) for e in events), 7, seed=3))
    half = len(recs) // 2
    batches = [_kafka_df(spark, recs[:half], 0), _kafka_df(spark, recs[half:], half)]
    cfg = JobConfig("", ["t"], str(out), str(tmp_path / "cp"))
    counters = {"batches": 0, "archived": 0, "deadletter": 0, "last_batch_id": -1, "last_batch_seconds_x1000": 0}
    w = BatchWriter(cfg, counters, "query-a")
    w(batches[0], 0)
    w(batches[1], 1)
    truth = {(k[0].strftime("%Y-%m-%dT%H:%M:%SZ"), k[1], k[2]): v for k, v in ground_truth(events).items()}
    assert _totals(out) == (300, 7, truth)
    # batch 1's MERGE rewrote the files of the batch's own windows only (one partition per window): a batch's
    # write does not grow with the table
    from kctl.stream.job import batch_counts, parse

    batch1 = {dt.datetime.fromtimestamp(r["ws"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
              for r in batch_counts(parse(batches[1])) if r["ok"]}
    windows = {k[0] for k in truth}
    assert 0 < len(batch1) < len(windows)
    actions = _last_commit(out / "metrics")
    removed = {a["remove"]["partitionValues"]["window_start"][:19] for a in actions if "remove" in a}
    added = {a["add"]["partitionValues"]["window_start"][:19] for a in actions if "add" in a}
    assert removed and removed <= batch1 and added == batch1, (removed, added, batch1)
    (info,) = [a["commitInfo"] for a in actions if "commitInfo" in a]
    assert int(info["operationMetrics"]["num_target_files_skipped_during_scan"]) >= len(windows) - len(batch1), info
    # the last batch again, as after a crash before Spark recorded it: a new writer (a new process)
    w2 = BatchWriter(cfg, dict(counters), "query-a")
    w2(batches[1], 1)
    assert _totals(out) == (300, 7, truth)
    assert w2.counters["archived"] == counters["archived"] == 300  # the replay counted nothing
    # any older batch id again is skipped by Delta itself
    w2(batches[0], 0)
    w2(batches[1], 1)
    assert _totals(out) == (300, 7, truth)
    # another query id is another writer: its batch 1 lands
    BatchWriter(cfg, dict(counters), "query-b")(batches[1], 1)
    n, bad, got = _totals(out)
    assert n > 300 and (n - 300) + (bad - 7) == len(recs) - half
    assert sum(v[0] for v in got.values()) == n


def test_a_small_batch_through_delta_rs_writes_what_spark_writes(spark: Any, tmp_path: Path) -> None:
    """The same two batches written through Spark's Delta appends and, as small batches, through one Spark job and
    delta-rs commits: the three tables hold the same rows; each commit carries the batch's transaction identifier,
    so a batch replayed the other way changes nothing, and Spark reads what delta-rs wrote."""
    from deltalake import DeltaTable

    from kctl.stream.config import JobConfig
    from kctl.stream.job import BatchWriter, create_tables, new_counters
    from kctl.stream.metrics import read_metrics

    start = dt.datetime(2024, 3, 2, 23, 59, 0, tzinfo=dt.timezone.utc)  # across midnight: two archive dates
    events = list(generate(160, seed=5, hosts=3, start=start, rate=2.0))
    recs = list(malformed_records(((e.key, e.value) for e in events), 6, seed=5))
    half = len(recs) // 2
    outs: dict[str, Path] = {}
    # "mixed": batches above small_batch_rows whose bad rows are at most that many: the archive through Spark, the
    # dead-letter rows through delta-rs
    for way, small in (("spark", 0), ("delta-rs", 10_000), ("mixed", 6)):  # the 6 bad records are in batch 0
        out = outs[way] = tmp_path / way
        create_tables(spark, out)
        cfg = JobConfig("", ["t"], str(out), str(tmp_path / f"cp-{way}"), small_batch_rows=small)
        w = BatchWriter(cfg, new_counters(), "query-s")
        w(_kafka_df(spark, recs[:half], 0), 0, records=half)
        w(_kafka_df(spark, recs[half:], half), 1, records=len(recs) - half)
        assert (w.counters["archived"], w.counters["deadletter"]) == (160, 6), (way, w.counters)

    def rows(out: Path, table: str) -> list[dict[str, Any]]:
        return sorted(DeltaTable(str(out / table)).to_pyarrow_table().to_pylist(), key=lambda r: r["offset"])

    for table in ("archive", "deadletter"):
        assert rows(outs["delta-rs"], table) == rows(outs["spark"], table), table
        assert rows(outs["mixed"], table) == rows(outs["spark"], table), table
    # each bad record's value, as sent, in the dead-letter table (the cache of a batch through Spark keeps the
    # raw value of those rows only: kctl.stream.job.to_cache)
    good = {e.value for e in events}
    assert {r["offset"]: r["value"] for r in rows(outs["spark"], "deadletter")} == {
        i: v for i, (_k, v) in enumerate(recs) if v not in good}
    truth = {(k[0].strftime("%Y-%m-%dT%H:%M:%SZ"), k[1], k[2]): v for k, v in ground_truth(events).items()}
    for out in outs.values():
        assert _totals(out) == (160, 6, truth)
    assert sorted(map(str, read_metrics(outs["delta-rs"]))) == sorted(map(str, read_metrics(outs["spark"])))
    for table, version in ((outs["delta-rs"] / "archive", 1), (outs["mixed"] / "deadletter", 0)):
        txns = [a["txn"] for a in _last_commit(table) if "txn" in a]
        assert [(t["appId"], t["version"]) for t in txns] == [("query-s", version)], (table, txns)
    # the mixed way's dead-letter commits are delta-rs's, its archive's Spark's
    assert "delta-rs" in json.dumps(_commit_info(outs["mixed"] / "deadletter"))
    assert "delta-rs" not in json.dumps(_commit_info(outs["mixed"] / "archive"))
    # batch 0 replayed through Spark's appends after a crash: the dead-letter rows delta-rs wrote are not twice
    again = JobConfig("", ["t"], str(outs["mixed"]), str(tmp_path / "cp-y"), small_batch_rows=0)
    BatchWriter(again, new_counters(), "query-s")(_kafka_df(spark, recs[:half], 0), 0)
    assert _totals(outs["mixed"]) == (160, 6, truth)
    # batch 1 replayed the other way (through Spark) after a crash: nothing twice
    again = JobConfig("", ["t"], str(outs["delta-rs"]), str(tmp_path / "cp-x"), small_batch_rows=0)
    BatchWriter(again, new_counters(), "query-s")(_kafka_df(spark, recs[half:], half), 1)
    assert _totals(outs["delta-rs"]) == (160, 6, truth)
    assert spark.read.format("delta").load(str(outs["delta-rs"] / "archive")).count() == 160


@pytest.mark.long  # about 4 minutes on two cores: `make test-long` (the suite keeps the sinks' exactness tests)
def test_the_jobs_optimize_compacts_and_keeps_every_row(spark: Any, tmp_path: Path) -> None:
    """What `--optimize-every N` and `kctl stream optimize` on a running job do, between two batches."""
    import json

    from kctl.stream.config import JobConfig
    from kctl.stream.job import BatchWriter, create_tables, optimize_tables
    from kctl.stream.tables import info

    out = tmp_path / "out"
    create_tables(spark, out)
    start = dt.datetime(2024, 3, 2, 10, 0, 0, tzinfo=dt.timezone.utc)
    events = list(generate(240, seed=4, hosts=2, start=start, rate=2.0))
    recs = [(e.key, e.value) for e in events]
    cfg = JobConfig("", ["t"], str(out), str(tmp_path / "cp"), optimize_every=3)
    w = BatchWriter(cfg, {"batches": 0, "archived": 0, "deadletter": 0, "last_batch_id": -1,
                          "last_batch_seconds_x1000": 0}, "query-o")
    for b in range(3):  # the third batch runs the compaction (optimize_every=3), a small batch (delta-rs's appends)
        w(_kafka_df(spark, recs[b * 80:(b + 1) * 80], b * 80), b, records=80 if b == 2 else None)
    res = json.loads((tmp_path / "cp" / "_kctl" / "optimize.json").read_text())
    assert res["tables"]["archive"]["files_removed"] >= 2 and res["tables"]["archive"]["files_added"] == 1
    truth = {(k[0].strftime("%Y-%m-%dT%H:%M:%SZ"), k[1], k[2]): v for k, v in ground_truth(events).items()}
    assert _totals(out) == (240, 0, truth)
    by_name = {t.table: t for t in info(out, "query-o")}
    assert by_name["archive"].files == 1 and by_name["archive"].last_batch == 2
    # the metrics table holds one file per window (its MERGE rewrites a window's file whole): nothing to compact
    assert by_name["metrics"].files == len({k[0] for k in truth}) and by_name["metrics"].last_batch == 2
    assert res["tables"]["metrics"]["files_removed"] == 0
    sc = spark.sparkContext
    sc.setJobGroup("kctl-test-optimize", "optimize again")
    try:
        again = optimize_tables(spark, cfg, tmp_path / "cp" / "_kctl")  # nothing left to compact
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert again["tables"]["archive"]["files_removed"] == 0
    # VACUUM lists each table's few directories in a few tasks, not Spark's default 10,000 per level (minutes of
    # CPU on two cores: the session's parallelPartitionDiscovery.parallelism)
    st = sc.statusTracker()
    tasks = sum(info.numTasks for j in st.getJobIdsForGroup("kctl-test-optimize")
                for s in (st.getJobInfo(j).stageIds if st.getJobInfo(j) else [])
                if (info := st.getStageInfo(s)) is not None)
    assert 0 < tasks < 1000, tasks  # 210 here


def test_the_warm_up_runs_every_path_of_the_writer_and_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    import tempfile

    from kctl.stream.config import JobConfig
    from kctl.stream.job import warm_up

    before = set(Path(tempfile.gettempdir()).glob("kctl-warm-up-*"))
    cfg = JobConfig("", ["t"], str(tmp_path / "out"), str(tmp_path / "cp"), optimize_every=1)
    secs, counters = warm_up(spark, cfg)
    assert secs > 0 and counters["archived"] == 40 and counters["deadletter"] == 2 and counters["batches"] == 2
    assert set(Path(tempfile.gettempdir()).glob("kctl-warm-up-*")) == before
    assert not (tmp_path / "out").exists() and not (tmp_path / "cp").exists()  # the job's own dirs untouched
