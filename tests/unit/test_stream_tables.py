"""The JVM-free side of the pipeline's Delta tables: delta-rs reads, DuckDB queries, offline optimize,
and the offsets the job commits to its consumer group. Tables are written here with delta-rs itself."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from kctl.errors import KctlError, UsageError

pa = pytest.importorskip("pyarrow")
deltalake = pytest.importorskip("deltalake")


def _metrics(out: Path, rows: list[tuple[dt.datetime, str, int, int, int]]) -> None:
    utc = dt.timezone.utc
    table = pa.table({
        "window_start": pa.array([r[0].replace(tzinfo=utc) for r in rows], pa.timestamp("us", tz="UTC")),
        "window_end": pa.array([(r[0] + dt.timedelta(minutes=1)).replace(tzinfo=utc) for r in rows],
                               pa.timestamp("us", tz="UTC")),
        "host": [r[1] for r in rows], "status": pa.array([r[2] for r in rows], pa.int32()),
        "requests": pa.array([r[3] for r in rows], pa.int64()), "bytes": pa.array([r[4] for r in rows], pa.int64()),
    })
    deltalake.write_deltalake(str(out / "metrics"), table, mode="append")


def test_metrics_query_info_and_offline_optimize(tmp_path: Path) -> None:
    from kctl.stream.metrics import read_metrics
    from kctl.stream.tables import info, optimize, query

    out = tmp_path / "out"
    out.mkdir()
    assert read_metrics(out) == []  # the job has not created its tables yet
    w = dt.datetime(2024, 5, 1, 12, 0)
    _metrics(out, [(w, "a", 200, 3, 30), (w, "b", 404, 1, 5)])
    _metrics(out, [(w + dt.timedelta(minutes=1), "a", 200, 2, 20)])
    rows = read_metrics(out)
    assert rows[0] == {"window_start": "2024-05-01T12:00:00Z", "window_end": "2024-05-01T12:01:00Z", "host": "a",
                       "status": 200, "requests": 3, "bytes": 30}
    assert len(rows) == 3
    res = query(out, "SELECT host, sum(requests) AS n FROM metrics GROUP BY host ORDER BY host")
    assert res.columns == ["host", "n"] and res.rows == [{"host": "a", "n": 5}, {"host": "b", "n": 1}]
    assert query(out, "SELECT window_start FROM metrics ORDER BY 1 LIMIT 1").rows == [
        {"window_start": "2024-05-01T12:00:00Z"}]
    with pytest.raises(UsageError) as err:
        query(out, "SELECT nope FROM metrics")
    assert err.value.hint and "metrics" in err.value.hint
    with pytest.raises(UsageError):  # an error while the rows are computed, not only at binding
        query(out, "SELECT CAST(host AS INTEGER) FROM metrics")
    assert len(query(out, "SELECT * FROM metrics", limit=2).rows) == 2
    (m,) = [t for t in info(out) if t.table == "metrics"]
    assert (m.version, m.files, m.rows) == (1, 2, 3)
    r = optimize(out, tmp_path / "cp", retain_hours=1)
    assert r.tables["metrics"]["files_removed"] == 2 and r.tables["metrics"]["files_added"] == 1
    assert read_metrics(out) == rows  # compaction changes no row
    with pytest.raises(UsageError):
        optimize(out, tmp_path / "cp", retain_hours=0.1)


def test_missing_out_dir_is_a_clear_error(tmp_path: Path) -> None:
    from kctl.stream.metrics import read_metrics
    from kctl.stream.tables import query

    with pytest.raises(KctlError) as err:
        read_metrics(tmp_path / "nope")
    assert err.value.hint and "--out" in err.value.hint
    (tmp_path / "empty").mkdir()
    with pytest.raises(KctlError):
        query(tmp_path / "empty", "SELECT 1")


def test_end_offsets_of_a_progress_event() -> None:
    from kctl.stream.job import end_offsets

    prog = {"sources": [{"endOffset": {"t": {"0": 5, "2": 7}}},
                        {"endOffset": '{"u": {"1": 3}}'}, {"endOffset": None}]}
    assert end_offsets(prog) == {"t": {0: 5, 2: 7}, "u": {1: 3}}
    assert end_offsets({}) == {}


def test_offset_publisher_commits_changes_only_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.kafka import groups
    from kctl.kafka.client import Target
    from kctl.stream.config import JobConfig
    from kctl.stream.job import OffsetPublisher, group_name

    commits: list[dict[str, dict[int, int]]] = []

    class Fake:
        def __init__(self, target: Target, group: str) -> None:
            assert target.bootstrap_servers == "127.0.0.1:1" and target.security == {}
            assert group == "kctl-stream-web"

        def commit(self, offsets: dict[str, dict[int, int]]) -> int:
            if offsets.get("t", {}).get(0) == 99:
                raise RuntimeError("broker gone")
            commits.append(offsets)
            return 1

        def close(self) -> None:
            pass

    monkeypatch.setattr(groups, "GroupCommitter", Fake)
    cfg = JobConfig("127.0.0.1:1", ["t"], "o", "c", name="web")
    assert group_name(cfg) == "kctl-stream-web"
    p = OffsetPublisher(cfg)
    p.publish({"t": {0: 5}})
    p.publish({"t": {0: 5}})  # no new batch: nothing sent
    p.publish({})
    p.publish({"t": {0: 99}})  # a failed commit is a warning, retried with the next batch
    p.publish({"t": {0: 7}})
    assert commits == [{"t": {0: 5}}, {"t": {0: 7}}]


def test_a_table_whose_first_commit_has_not_landed_is_not_there_yet(tmp_path: Path) -> None:
    from kctl.stream import tables

    (tmp_path / "metrics" / "_delta_log").mkdir(parents=True)  # what a writer makes before its first commit
    assert tables.open_table(tmp_path / "metrics") is None
    assert tables.open_table(tmp_path / "nothing") is None


def test_metrics_merge_adds_counts_once_per_batch_and_rewrites_only_its_windows(tmp_path: Path) -> None:
    import json

    from kctl.stream.metrics import read_metrics
    from kctl.stream.sinks import MetricsTable, create_metrics_table

    out = tmp_path / "out"
    create_metrics_table(str(out / "metrics"))
    create_metrics_table(str(out / "metrics"))  # a second start finds it and leaves it
    w0 = int(dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc).timestamp())
    m = MetricsTable(str(out / "metrics"))
    assert m.merge_counts([(w0, "a", 200, 3, 30), (w0 + 60, "a", 200, 1, 10)], app_id="q", version=0)
    assert m.merge_counts([(w0 + 60, "a", 200, 2, 20), (w0 + 60, "b", 404, 1, 5)], app_id="q", version=1)
    # a replay (same query id, same or older batch id) changes nothing, from a new process's writer too
    assert not m.merge_counts([(w0 + 60, "a", 200, 2, 20)], app_id="q", version=1)
    assert not MetricsTable(str(out / "metrics")).merge_counts([(w0, "a", 200, 3, 30)], app_id="q", version=0)
    rows = {(r["window_start"][11:16], r["host"], r["status"]): (r["requests"], r["bytes"]) for r in read_metrics(out)}
    assert rows == {("12:00", "a", 200): (3, 30), ("12:01", "a", 200): (3, 30), ("12:01", "b", 404): (1, 5)}
    assert read_metrics(out)[0]["window_end"] == "2024-05-01T12:01:00Z"
    # batch 1 read and rewrote the 12:01 window's file only; 12:00's was skipped
    log = sorted((out / "metrics" / "_delta_log").glob("*.json"))
    actions = [json.loads(line) for line in log[2].read_text().splitlines()]
    removed = [a["remove"]["partitionValues"]["window_start"] for a in actions if "remove" in a]
    assert len(removed) == 1 and removed[0].startswith("2024-05-01 12:01:00"), removed
    assert deltalake.DeltaTable(str(out / "metrics")).transaction_version("q") == 1
    # another query id is another writer
    assert m.merge_counts([(w0, "a", 200, 1, 1)], app_id="other", version=0)
    assert {r["requests"] for r in read_metrics(out) if r["window_start"].endswith("12:00:00Z")} == {4}


def test_an_earlier_kctls_metrics_table_is_refused_before_the_job_starts(tmp_path: Path) -> None:
    from kctl.stream.config import JobConfig
    from kctl.stream.sinks import check_metrics_table
    from kctl.stream.submit import submit

    out = tmp_path / "out"
    _metrics(out, [(dt.datetime(2024, 5, 1, 12, 0), "a", 200, 3, 30)])  # not partitioned, as kctl wrote it before
    with pytest.raises(KctlError, match="earlier kctl") as e:
        check_metrics_table(out / "metrics")
    assert "fresh --out" in (e.value.hint or "")
    # refused before any cluster is asked (nothing listens on port 1) and before the job's files are written
    cfg = JobConfig("127.0.0.1:1", ["t"], str(out), str(tmp_path / "cp"), jars=["/nonexistent.jar"])
    with pytest.raises(KctlError, match="earlier kctl"):
        submit(cfg)
    assert not (tmp_path / "cp").exists()
