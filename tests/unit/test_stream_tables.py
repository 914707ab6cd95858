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
    from kctl.stream.config import JobConfig
    from kctl.stream.job import OffsetPublisher, group_name

    commits: list[dict[str, dict[int, int]]] = []

    class Fake:
        def __init__(self, bootstrap: str, group: str, spec: object = None) -> None:
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
