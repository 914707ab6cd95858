"""The monitor's store, the lag side: what a sampling round stores (every partition's end offset and lag, a
commit or not), that the readers' evaluation of the stored rows is the monitor's own for the same moment,
that every read goes through an index and reads a bounded number of rows, and that the file is opened by its
name whatever characters the state dir has (a read-only open never creates a database)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kctl.errors import KctlError
from kctl.monitor.lag import Status
from kctl.monitor.sampler import GroupSnapshot, PartitionSnapshot, Windows, stored_status
from kctl.monitor.store import Store

REAL_TABLES = ("samples", "ends", "groups")


def snap(t_s: float, parts: Sequence[tuple[str, int, int | None, int | None, bool]], state: str = "STABLE",
         group: str = "app") -> GroupSnapshot:
    return GroupSnapshot(group, state, int(t_s * 1000), tuple(PartitionSnapshot(*p) for p in parts))


def record(store: Store, w: Windows, s: GroupSnapshot) -> None:
    """What a monitor round does with a snapshot: observe it, store the rows it added and the evaluation."""
    rows = w.observe(s)
    st = w.evaluate(s.group)
    with store.round():
        store.add_samples(s.group, rows)
        store.add_group(s.group, s.at_ms, max(p.status for p in st.partitions).name if st.partitions else "OK",
                        st.total_lag, s.state, st.complete)


def test_a_consumer_that_stops_while_its_producer_goes_on_is_not_ok_from_the_store(tmp_path: Path) -> None:
    """Issue 44 point 21: a consumer that kept up (lag 0 at each commit), then stopped while its producer went
    on. The rounds after the stop add no commit; each still stores the end offset and the lag, so the store's
    evaluation measures the current lag against the latest end offset and the consumer turns STOP (before, the
    store kept only commits: the last commit's lag 0 stood as the current lag and its end offsets as "recently
    caught up", OK for as long as the monitor ran). The in-memory windows and the store answer alike at every
    round."""
    store = Store(tmp_path / "monitor.db")
    store.record_lag_parameters(5, 0)
    w = Windows(size=5)
    statuses = []
    for i in range(14):
        t = 2.0 * i
        if i < 5:  # keeps up: commits the end offset, owned by a live member
            s = snap(t, [("orders", 0, 100 * i, 100 * i, True)])
        else:  # gone: no member, the offset stays, the topic grows
            s = snap(t, [("orders", 0, 400, 400 + 10 * (i - 4), False)], state="EMPTY")
        record(store, w, s)
        mine = w.evaluate("app")
        stored = stored_status(store, "app", window=99)
        assert stored is not None and stored.at_ms == s.at_ms and stored.window == 5
        assert stored.status == mine, f"round {i}: the store and the monitor disagree"
        statuses.append(mine.partitions[0].status)
    # 5 rounds of lag 0 (t 0-8 s); the window spans 8 s, so 8 s after the last commit (t 16 s) it is still
    # OK, and past it (t 18 s, the recent end offsets all above the last commit) STOP.
    assert statuses[:9] == [Status.OK] * 9
    assert statuses[9:] == [Status.STOP] * 5
    final = stored_status(store, "app", window=5)
    assert final is not None and final.status.total_lag == 90 and final.state == "EMPTY"
    assert final.to_json()["status"] == "STOP" and final.to_json()["at_ms"] == 26000
    store.close()


def test_restored_windows_judge_as_the_live_ones(tmp_path: Path) -> None:
    """After a restart the monitor reads its windows back from the store: the same evaluation."""
    store = Store(tmp_path / "monitor.db")
    w = Windows(size=4, allowed_lag=2)
    for i in range(9):
        parts = [("a", 0, 10 * i, 10 * i + 3, True), ("a", 1, 5, 5 + i, False)]
        if i < 6:
            parts.append(("b", 0, 7, 9, True))  # leaves the snapshot at round 6: judged no more
        record(store, w, snap(i, parts))
    back = Windows(size=4, allowed_lag=2)
    for g in store.stored_windows(4):
        back.restore(g)
    assert back.evaluate("app") == w.evaluate("app")
    assert [(p.topic, p.partition) for p in w.evaluate("app").partitions] == [("a", 0), ("a", 1)]
    assert back.states["app"] == "STABLE" and back.at_ms["app"] == 8000
    store.close()


def test_prune_removes_old_end_offsets_too(tmp_path: Path) -> None:
    store = Store(tmp_path / "monitor.db")
    w = Windows(size=3)
    for i in range(6):
        record(store, w, snap(i, [("t", 0, 1, 1 + i, False)]))
    with store.round():
        assert store.prune(older_than_ms=3000) == 1 + 3 + 3  # the one sample, end offsets, evaluations
    assert store.db.execute("SELECT COUNT(*) FROM ends").fetchone()[0] == 3
    for line in _plans(store, lambda: store.prune(older_than_ms=4000)):
        assert not any(f"-> SCAN {t}" in line for t in REAL_TABLES), line
    store.close()


def _plans(store: Store, read: Callable[[], object]) -> list[str]:
    """Every statement ``read()`` runs on ``store``, with its query plan."""
    sqls: list[str] = []
    store.db.set_trace_callback(sqls.append)
    try:
        read()
    finally:
        store.db.set_trace_callback(None)
    assert sqls
    out: list[str] = []
    for sql in sqls:
        plan = store.db.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        out.extend(f"{sql} -> {r[3]}" for r in plan)
    return out


def test_every_read_goes_through_an_index(tmp_path: Path) -> None:
    """No read scans a table: each of samples, ends and groups is searched through an index or its primary key
    (SQLite's plan says SEARCH ... USING INDEX / PRIMARY KEY, never SCAN samples/ends/groups)."""
    store = Store(tmp_path / "monitor.db")
    w = Windows(size=3)
    for i in range(5):
        record(store, w, snap(i, [("t", 0, i, i + 1, True), ("t", 1, 0, i, False)]))
        record(store, w, snap(i, [("u", 0, i, i, True)], group="other"))
    store.close()
    r = Store(tmp_path / "monitor.db", readonly=True)
    reads = {
        "group_rows": lambda: r.group_rows("app", 3),
        "stored_windows": lambda: r.stored_windows(3),
        "group_history": lambda: r.group_history("app", 0),
        "group_history thinned": lambda: r.group_history("app", 0, max_points=2),
        "latest_groups": r.latest_groups,
        "round_groups": r.round_groups,
        "groups_known": r.groups_known,
        "knows_group": lambda: r.knows_group("app"),
        "last_samples": lambda: r.last_samples(3),
    }
    for name, read in reads.items():
        for line in _plans(r, read):
            assert not any(f"-> SCAN {t}" in line for t in REAL_TABLES), f"{name}: {line}"
            if "-> SEARCH" in line:
                assert "INDEX" in line or "PRIMARY KEY" in line, f"{name}: {line}"
    r.close()


def _steps(store: Store, read: Callable[[], object]) -> int:
    """SQLite's virtual-machine steps that ``read()`` takes: the work, counted, not timed."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    store.db.set_progress_handler(count, 1)
    try:
        read()
    finally:
        store.db.set_progress_handler(None, 1)
    return steps[0]


def test_a_read_is_bounded_by_the_window_not_the_history(tmp_path: Path) -> None:
    """The work of each read of a group page (its window, its status, the latest evaluations, the last hour's
    history) is the same with 60 rounds of history as with 20 times that: the reads seek through the indexes
    and take at most a window per partition, never a pass over the rows. (The query over every sample, as the
    store read before, takes 20 times the work with 20 times the rows.)"""
    store = Store(tmp_path / "monitor.db")
    w = Windows(size=4)
    groups = [f"g{i}" for i in range(5)]

    def rounds(first: int, last: int) -> None:
        for i in range(first, last):
            for g in groups:
                record(store, w, snap(i, [("t", 0, i, i + 2, True), ("t", 1, 0, i, False)], group=g))

    reads: dict[str, Callable[[], object]] = {
        "group_rows": lambda: store.group_rows("g2", 4),
        "stored_status": lambda: stored_status(store, "g2", window=4),
        "latest_groups": store.latest_groups,
        "round_groups": store.round_groups,
        "groups_known": store.groups_known,
        "last_samples": lambda: store.last_samples(4),
        "stored_windows": lambda: store.stored_windows(4),
    }
    rounds(0, 60)
    small = {name: _steps(store, read) for name, read in reads.items()}
    small["history"] = _steps(store, lambda: store.group_history("g2", 50_000))
    old = "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY grp, topic, part ORDER BY ts_ms DESC) AS n" \
          " FROM samples) WHERE n <= 4"
    small["the read before"] = _steps(store, lambda: store.db.execute(old).fetchall())
    rounds(60, 1200)
    large = {name: _steps(store, read) for name, read in reads.items()}
    large["history"] = _steps(store, lambda: store.group_history("g2", 1_190_000))
    large["the read before"] = _steps(store, lambda: store.db.execute(old).fetchall())
    for name in reads:
        assert large[name] <= 1.2 * small[name] + 50, (name, small[name], large[name])
    assert large["history"] <= 1.2 * small["history"] + 50
    assert large["the read before"] > 10 * small["the read before"]  # the measure tells the two apart
    got = store.group_rows("g2", 4)
    assert got is not None
    assert [len(p.samples) for p in got.rows] == [4, 1] and [len(p.ends) for p in got.rows] == [4, 4]
    store.close()


def test_history_is_thinned_to_a_bounded_number_of_points(tmp_path: Path) -> None:
    store = Store(tmp_path / "monitor.db")
    with store.round():
        for i in range(1000):
            status = "STOP" if i == 500 else "OK"
            store.add_group("app", 1000 * i, status, i, "STABLE", 1.0)
    full = store.group_history("app", 0, max_points=5000)
    assert len(full) == 1000 and full[0]["ts_ms"] == 0
    thin = store.group_history("app", 0, max_points=100)
    assert len(thin) == 100
    assert [p["ts_ms"] for p in thin] == sorted(p["ts_ms"] for p in thin)
    assert sum(1 for p in thin if p["status"] == "STOP") == 1  # a bucket keeps its worst status
    assert thin[-1] == {"ts_ms": 999000, "status": "OK", "total_lag": 999, "state": "STABLE", "complete": 1.0}
    assert store.group_history("app", 990_000, max_points=100) == full[990:]
    store.close()


@pytest.mark.parametrize("odd", ["a#b", "a?mode=rwc", "a%20b", "x#y?z%41"])
def test_a_state_dir_with_uri_characters_opens_its_own_file(tmp_path: Path, odd: str) -> None:
    """Issue 44 point 18: the read-only open built ``file:PATH?mode=ro`` from the raw path, so a ``#`` cut the
    path short (SQLite opened, and created, another file) and dropped ``mode=ro``. The path is now
    percent-encoded: each store opens its own file, and reading creates nothing."""
    db = tmp_path / odd / "monitor" / "monitor.db"
    s = Store(db)
    w = Windows(size=3)
    record(s, w, snap(1, [("t", 0, 5, 9, True)]))
    s.close()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    r = Store(db, readonly=True)
    got = stored_status(r, "app", window=3)
    assert got is not None and got.status.total_lag == 4
    with pytest.raises(sqlite3.OperationalError):
        r.db.execute("DELETE FROM samples")
    r.close()
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert [p for p in after if p not in before and not p.name.endswith(("-wal", "-shm"))] == []
    assert sorted(p.name for p in (tmp_path / odd / "monitor").iterdir() if p.suffix == ".db") == ["monitor.db"]


def test_a_read_only_open_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "monitor.db"
    with pytest.raises(KctlError, match="no monitor store"):
        Store(missing, readonly=True)
    assert not (tmp_path / "nope").exists()
