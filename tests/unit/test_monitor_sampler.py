"""kctl.monitor.sampler: snapshots of committed offsets become Burrow's samples (a moved offset is a commit; an
unmoved one is a commit only while a live member owns the partition), and the windows judge each group."""

from __future__ import annotations

from kctl.monitor.lag import EndOffset, Sample, Status
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
    """Each snapshot stores every partition's end offset and lag at that moment; a sample only for a commit."""
    w = Windows(size=3)

    def added(t: int, committed: int | None, end: int, owned: bool) -> tuple[Sample | None, EndOffset]:
        (seen,) = w.observe(snap("g", t, committed, end, owned))
        assert seen.key == ("orders", 0)
        return seen.sample, seen.end

    assert added(0, 10, 20, False) == (Sample(10, 0, 10), EndOffset(0, 20, 10))  # the first sight of an offset
    assert added(1, 10, 25, False) == (None, EndOffset(1000, 25, 15))  # unmoved, nobody owns it: no commit
    assert added(2, 10, 25, True) == (Sample(10, 2000, 15), EndOffset(2000, 25, 15))  # unmoved, owned: a commit
    assert added(3, 11, 20, False)[0] == Sample(11, 3000, 9)  # moved: a commit
    assert added(4, None, 20, False) == (None, EndOffset(4000, 20, None))  # nothing committed (offsets expired)
    st = w.evaluate("g")
    assert st.at_ms == 4000 and st.total_lag == 9 and st.complete == 1.0
    assert len(w.groups["g"][("orders", 0)].samples) == 3 and len(w.groups["g"][("orders", 0)].ends) == 3


def test_a_consumer_that_stops_while_its_producer_goes_on_turns_stop() -> None:
    """Issue 44 point 21 in the windows: lag 0 at every commit, then no member and no commit while the end
    offset grows; the current lag is measured against the latest end offset (not the last commit's 0) and the
    recent end offsets no longer show a catch-up: STOP once the time since the last commit exceeds the span."""
    w = Windows(size=5)
    for t in range(5):
        w.observe(snap("g", 2 * t, 100 * t, 100 * t, True))
    seen = []
    for t in range(5, 12):
        w.observe(snap("g", 2 * t, 400, 400 + 10 * (t - 4), False, state="EMPTY"))
        p = w.evaluate("g").partitions[0]
        seen.append((p.status, p.current_lag))
    assert seen == [(Status.OK, 10), (Status.OK, 20), (Status.OK, 30), (Status.OK, 40), (Status.STOP, 50),
                    (Status.STOP, 60), (Status.STOP, 70)]


def test_a_partition_that_left_the_snapshot_is_judged_no_more() -> None:
    w = Windows(size=3)
    w.observe(GroupSnapshot("g", "STABLE", 0, (PartitionSnapshot("a", 0, 1, 5, True),
                                               PartitionSnapshot("b", 0, 1, 9, True))))
    w.observe(GroupSnapshot("g", "STABLE", 1000, (PartitionSnapshot("a", 0, 2, 5, True),)))
    assert [(p.topic, p.current_lag) for p in w.evaluate("g").partitions] == [("a", 3)]


def test_allowed_lag_counts_a_small_lag_as_caught_up() -> None:
    """monitoring.allowed_lag (Burrow's allowed-lag): a consumer always 1 record behind that stopped
    committing is OK with allowed_lag 1, STOP without."""
    for allowed, want in ((0, Status.STOP), (1, Status.OK)):
        w = Windows(size=3, allowed_lag=allowed)
        for t, committed in enumerate((10, 11, 11, 11, 11)):
            w.observe(snap("g", t, committed, committed + 1, t < 2))
        assert w.evaluate("g").partitions[0].status is want


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


# ----- share groups: the start offset stands for the commit, the lag is Kafka's -----------------------------


def share(t_s: int, start: int | None, lag: int | None, members: bool, state: str = "STABLE") -> GroupSnapshot:
    from kctl.kafka.share_groups import ShareGroupDescription, ShareMember, SharePartition
    from kctl.monitor.sampler import share_snapshot_of

    desc = ShareGroupDescription("sg", state if members else "EMPTY", None,
                                 [ShareMember("m1", "/h", "rdkafka", ["orders-0"])] if members else [],
                                 [SharePartition("orders", 0, start, lag)], lag or 0)
    return share_snapshot_of(desc, t_s * 1000)


def run_share(rows: list[tuple[int | None, int | None, bool]], size: int = 5) -> tuple[Status, int]:
    w = Windows(size=size)
    for t, (start, lag, members) in enumerate(rows):
        w.observe(share(t, start, lag, members))
    st = w.evaluate("sg", len(rows) - 1 + 0.5)
    assert w.types["sg"] == "share"
    return st.partitions[0].status, st.total_lag


def test_a_share_group_is_judged_on_kafkas_lag_with_its_start_offset_as_the_commit() -> None:
    # Every record acknowledged while the start offset stays behind (Kafka 4.3.1 keeps it so until the next
    # fetch): Kafka's lag is 0, and so is kctl's: OK, not a lag of end - start.
    assert run_share([(0, 0, False)] * 5) == (Status.OK, 0)
    # Members that keep up: the start offset moves on, the lag comes and goes.
    assert run_share([(0, 20, True), (20, 0, True), (40, 20, True), (60, 0, True), (80, 20, True)])[0] is Status.OK
    # Members slower than the producer: the start offset moves, the lag never decreases: WARN.
    assert run_share([(0, 20, True), (10, 30, True), (20, 40, True), (30, 50, True), (40, 60, True)]) == \
        (Status.WARN, 60)
    # Members that acknowledge nothing (all records stay acquired or are released): STALL.
    assert run_share([(100, 50, True), (100, 70, True), (100, 90, True), (100, 90, True), (100, 95, True)])[0] \
        is Status.STALL
    # No member, records keep coming: the window ages: STOP.
    assert run_share([(100, 50, False), (100, 60, False), (100, 70, False), (100, 80, False), (100, 90, False)]) \
        == (Status.STOP, 90)
    # Reset to the earliest offset by an operator: REWIND until the group is back where it was.
    assert run_share([(100, 0, True), (100, 0, True), (0, 100, True), (10, 90, True), (20, 80, True)])[0] \
        is Status.REWIND
    # Caught up again after a STOP: OK.
    assert run_share([(100, 50, False), (100, 60, False), (100, 70, False), (170, 0, True), (170, 0, True)])[0] \
        is Status.OK


def test_a_share_partition_not_initialized_has_no_sample_and_the_doc_names_the_type() -> None:
    w = Windows(size=5)
    added = w.observe(share(0, None, None, True))
    assert [(s.sample, s.end.end) for s in added] == [(None, None)]
    doc = to_json(w.evaluate("sg", 1.0), state=w.states["sg"], window=5, source="fresh sampling",
                  type=w.types["sg"])
    assert doc["type"] == "share" and doc["status"] == "OK" and doc["total_lag"] == 0


def test_a_streams_group_owns_its_partitions_while_it_has_members() -> None:
    from types import SimpleNamespace

    from kctl.monitor.sampler import streams_snapshot_of

    parts = [SimpleNamespace(topic="in", partition=0, committed=10, log_end=20)]
    assert streams_snapshot_of("app", "STABLE", parts, 0).partitions[0].owned
    assert not streams_snapshot_of("app", "EMPTY", parts, 0).partitions[0].owned
    assert streams_snapshot_of("app", "EMPTY", parts, 0).type == "streams"
