"""kctl.monitor.sampler: snapshots of committed offsets become Burrow's samples (a moved offset is a commit; an
unmoved one is a commit only while a live member owns the partition), and the windows judge each group."""

from __future__ import annotations

from kctl.monitor.lag import Status
from kctl.monitor.sampler import GroupSnapshot, PartitionSnapshot, Windows, to_json


def snap(group: str, t_s: int, committed: int | None, end: int, owned: bool, state: str = "STABLE") -> GroupSnapshot:
    return GroupSnapshot(group, state, t_s * 1000, (PartitionSnapshot("orders", 0, committed, end, owned),))


def run(w: Windows, group: str, rows: list[tuple[int | None, int, bool]]) -> Status:
    for t, (committed, end, owned) in enumerate(rows):
        w.observe(snap(group, t, committed, end, owned))
    return w.evaluate(group, len(rows) - 1 + 0.5).partitions[0].status


def test_each_of_burrows_statuses_from_snapshots() -> None:
    w = Windows(size=5)
    assert run(w, "ok", [(10, 10, True), (20, 20, True), (30, 31, True), (40, 40, True), (50, 50, True)]) \
        is Status.OK
    assert run(w, "warn", [(10, 20, True), (12, 30, True), (14, 40, True), (16, 50, True), (18, 60, True)]) \
        is Status.WARN
    # A live member that commits nothing new while lag stays: STALL.
    assert run(w, "stall", [(10, 20, True)] * 5) is Status.STALL
    # The same offsets with nobody in the group: one sample, then none; no commit for longer than the window
    # spans: STOP.
    assert run(w, "stop", [(10, 20, False)] * 5) is Status.STOP
    assert run(w, "rewind", [(50, 60, True), (50, 61, True), (20, 62, True), (20, 63, True), (20, 64, True)]) \
        is Status.REWIND


def test_what_each_snapshot_adds() -> None:
    w = Windows(size=3)
    assert len(w.observe(snap("g", 0, 10, 20, False))) == 1  # the first sight of an offset
    assert w.observe(snap("g", 1, 10, 20, False)) == []  # unmoved, nobody owns it: no commit
    assert len(w.observe(snap("g", 2, 10, 20, True))) == 1  # unmoved, owned by a live member: a commit
    assert len(w.observe(snap("g", 3, 11, 20, False))) == 1  # moved: a commit
    assert w.observe(snap("g", 4, None, 20, False)) == []  # nothing committed yet
    st = w.evaluate("g", 4.0)
    assert st.total_lag == 9 and st.complete == 1.0 and len(w.groups["g"][("orders", 0)].samples) == 3


def test_a_group_without_lag_is_ok_and_an_empty_window_is_incomplete() -> None:
    w = Windows(size=10)
    w.observe(snap("g", 0, 20, 20, False, state="EMPTY"))
    st = w.evaluate("g", 100.0)
    assert st.status is Status.OK and st.complete == 0.0  # one slot of ten
    doc = to_json(st, state="EMPTY", window=10, source="fresh sampling")
    assert doc["status"] == "OK" and doc["complete"] is False and doc["complete_fraction"] == 0.0
    assert doc["partitions"] == [{"topic": "orders", "partition": 0, "status": "OK", "lag": 0, "complete": 0.1,
                                  "offset": 20}]


def test_json_names_the_worst_partition_and_burrows_capped_group_status() -> None:
    w = Windows(size=2)
    run(w, "g", [(10, 20, False), (10, 20, False)])
    doc = to_json(w.evaluate("g", 10.0), state="EMPTY", window=2, source="fresh sampling")
    assert doc["status"] == "STOP" and doc["burrow_status"] == "ERR"
    assert doc["problems"][0]["status"] == "STOP" and doc["total_lag"] == 10 and doc["max_lag"]["lag"] == 10
