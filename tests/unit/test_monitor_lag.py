"""kctl.monitor.lag against Burrow's own rule table: core/internal/evaluator/caching_test.go's ``tests`` at
Burrow v1.9.5 (commit ced55ba90f6b833a45a124d411fd5eef63a70933), every row as data with its number and comment
(the same offsets, end offsets, current lag, clock and allowed lag, the same expected answer of each rule and
of the status); then the cases its table leaves out, the window's completeness and the group's status."""

from __future__ import annotations

from typing import Any

import pytest

from kctl.monitor import lag
from kctl.monitor.lag import EndOffset, PartitionRows, Sample, Status

# Burrow's ConsumerOffset{Offset, Order, Timestamp, Lag}: the Order plays no part in the rules.
Commit = tuple[int, int, int, int | None]


def window(rows: list[Commit]) -> list[Sample]:
    return [Sample(offset, ts, lag_) for offset, _order, ts, lag_ in rows]


RISING: list[Commit] = [(1000, 1, 100000, 0), (2000, 2, 200000, 50), (3000, 3, 300000, 100), (4000, 4, 400000, 150),
                   (5000, 5, 500000, 200)]
RISING_NONZERO: list[Commit] = [(1000, 1, 100000, 50), (2000, 2, 200000, 100), (3000, 3, 300000, 150),
                           (4000, 4, 400000, 200), (5000, 5, 500000, 250)]
SAME: list[Commit] = [(1000, 1, 100000, 0), (1000, 2, 200000, 50), (1000, 3, 300000, 100), (1000, 4, 400000, 150),
                 (1000, 5, 500000, 200)]
SAME_NONZERO: list[Commit] = [(1000, 1, 100000, 100), (1000, 2, 200000, 150), (1000, 3, 300000, 200),
                         (1000, 4, 400000, 250), (1000, 5, 500000, 300)]
SAME_SAME_LAG: list[Commit] = [(1000, i, i * 100000, 100) for i in range(1, 6)]
BACK_RECOVERED: list[Commit] = [(1000, 1, 100000, 100), (2000, 2, 200000, 150), (3000, 3, 300000, 200),
                           (2000, 4, 400000, 1250), (4000, 5, 500000, 300)]
BACK_NOT_RECOVERED: list[Commit] = [*BACK_RECOVERED[:4], (2500, 5, 500000, 300)]
CAUGHT_UP: list[Commit] = [(792748079 + i, i + 1, ts, 0) for i, ts in enumerate((
    1512224618356, 1512224619362, 1512224620366, 1512224621367, 1512224622370, 1512224623373, 1512224624378,
    1512224625379, 1512224626383, 1512224627383, 1512224628383, 1512224629388, 1512224630391, 1512224631394,
    1512224632397))]
WITH_NIL_LAGS: list[Commit] = [(1000, 10, 100000, 0), (1500, 15, 150000, None), (2000, 20, 200000, 50),
                          (2500, 25, 250000, None), (3000, 30, 300000, 100), (3500, 35, 350000, None),
                          (4000, 40, 400000, 150), (4500, 45, 450000, None), (5000, 50, 500000, 200),
                          (5500, 55, 550000, None)]
ALLOWED: list[Commit] = [(1000, 1, 100000, 2), (2000, 2, 200000, 1), (2000, 2, 300000, 1)]


def row(n: int, comment: str, offsets: list[Commit], broker: list[int], current: int, now_s: int, allowed: int,
        always_not_zero: bool, rewind: int, stopped: bool, stalled: bool, not_decreasing: bool, recent_zero: bool,
        status: Status) -> Any:
    return pytest.param(offsets, broker, current, now_s, allowed,
                        (always_not_zero, rewind, stopped, stalled, not_decreasing, recent_zero), status,
                        id=f"burrow-{n}")  # the comment is Burrow's, verbatim: the case's reason


# Burrow's table, in its order; the fields as Burrow names them: offsets, brokerOffsets, currentLag, timeNow (s),
# allowedLag; isLagAlwaysNotZero, checkIfOffsetsRewind, checkIfOffsetsStopped, checkIfOffsetsStalled,
# checkIfLagNotDecreasing, checkIfRecentLagZero; status.
BURROW = [
    row(0, "returns OK because there is zero lag somewhere",
        RISING, [5200], 200, 600, 0, False, -1, False, False, True, False, Status.OK),
    row(1, "same status. does not return true for stop because time since last commit (400s) is equal to the"
           " difference (500-100), not greater than",
        RISING, [5200], 200, 900, 0, False, -1, False, False, True, False, Status.OK),
    row(2, "status is now STOP because the time since last commit is great enough (500s), even though lag is zero"
           " at the start (fixed due to #290)",
        RISING, [5200], 200, 1000, 0, False, -1, True, False, True, False, Status.STOP),
    row(3, "status is STOP when lag is always non-zero as well",
        RISING_NONZERO, [5250], 250, 1000, 0, True, -1, True, False, True, False, Status.STOP),
    row(4, "status is OK because of zero lag, but stall is true because the offset is always the same and there is"
           " lag (another commit with turn this to stall)",
        SAME, [1200], 200, 600, 0, False, -1, False, True, True, False, Status.OK),
    row(5, "status is now STALL because the lag is always non-zero",
        SAME_NONZERO, [1300], 300, 600, 0, True, -1, False, True, True, False, Status.STALL),
    row(6, "status is still STALL even when the lag stays the same",
        SAME_SAME_LAG, [1100], 100, 600, 0, True, -1, False, True, True, False, Status.STALL),
    row(7, "status is OK because the offsets go backwards, but though the lag does decrease within the window"
           " (caught up the rewind)",
        BACK_RECOVERED, [4300], 300, 600, 0, True, 3, False, False, False, False, Status.OK),
    row(8, "status is OK because the current lag is 0 (even though the offsets show lag), even though it would be"
           " considered stopped due to timestamps",
        RISING_NONZERO, [5250], 0, 1000, 0, True, -1, True, False, True, False, Status.OK),
    row(9, "status is STOP due to timestamps because the current lag is non-zero, even though lag is always zero"
           " in offsets, only because there is new data (#290)",
        CAUGHT_UP, [792749024, 792749000, 792748800, 792748600, 792748500], 931, 1512224650, 0,
        False, -1, True, False, True, False, Status.STOP),
    row(10, "status is OK, even though it would be stop due to timestamps, as within the recent broker offset"
            " window the lag was zero (#303)",
        CAUGHT_UP, [792748094, 792748093, 792748093, 792748093], 1, 1512224650, 0,
        False, -1, True, False, True, True, Status.OK),
    row(11, "same case as test 0 with additional `nil` lag entries which should not affect results",
        WITH_NIL_LAGS, [5700], 200, 600, 0, False, -1, False, False, True, False, Status.OK),
    row(12, "status is OK despite the fact that the current lag is greater zero and the time since last commit is"
            " great enough because of the configured allowed lag",
        ALLOWED, [2001], 1, 550, 1, False, -1, True, False, False, False, Status.OK),
    row(13, "same as 5 but with an allowed lag",
        SAME_NONZERO, [1300], 300, 600, 99, True, -1, False, True, True, False, Status.STALL),
    row(14, "same as 7 but with an allowed lag",
        BACK_RECOVERED, [4300], 300, 600, 99, True, 3, False, False, False, False, Status.OK),
    row(15, "Rewind, but we did not catch up to the previous point",
        BACK_NOT_RECOVERED, [4300], 300, 600, 0, True, 3, False, False, False, False, Status.REWIND),
]


@pytest.mark.parametrize(("offsets", "ends", "current", "now_s", "allowed", "rules", "status"), BURROW)
def test_burrows_rule_table(offsets: list[Commit], ends: list[int], current: int, now_s: int, allowed: int,
                            rules: tuple[Any, ...], status: Status) -> None:
    """TestCachingEvaluator_CheckRules: each rule alone, then calculatePartitionStatus (timeNow is in seconds)."""
    w = window(offsets)
    assert (lag.lag_always_above_allowed(w, allowed), lag.rewind_index(w), lag.stopped(w, now_s * 1000),
            lag.stalled(w), lag.lag_not_decreasing(w), lag.recently_caught_up(w, ends)) == rules
    assert lag.partition_status(w, ends, current, now_s * 1000, allowed) is status


def test_the_table_is_burrows_whole_table() -> None:
    """Sixteen rows, 0 to 15, as Burrow's table at v1.9.5 has."""
    assert [p.id for p in BURROW] == [f"burrow-{i}" for i in range(16)]


def test_a_rewind_is_judged_before_the_zero_lag_rule() -> None:
    """Burrow's comment on the order (not a row of its table): a consumer with no lag that rewinds to the
    earliest offset has a lag 0 in its window, which would have made it OK under the order of Burrow <= 1.3.6;
    it is REWIND until it gets back to where it was."""
    w = [Sample(5000, 100000, 0), Sample(5100, 200000, 0), Sample(0, 300000, 5200), Sample(900, 400000, 4400)]
    assert not lag.lag_always_above_allowed(w) and lag.rewind_index(w) == 2
    assert lag.partition_status(w, [5300], 4400, 450000) is Status.REWIND
    back = [*w, Sample(5100, 450000, 300)]
    assert lag.rewind_recovered(back, 2) and lag.partition_status(back, [5400], 300, 480000) is Status.OK


def test_the_current_lag_is_the_latest_end_offset_minus_the_last_commit() -> None:
    """Burrow's fetchConsumer: the latest broker offset against the last committed offset, not the lag the
    last commit had (a consumer that stopped at lag 0 while its producer went on has lag now)."""
    samples = (Sample(100, 1000, 0),)
    rows = PartitionRows("t", 0, samples, (EndOffset(1000, 100, 0), EndOffset(3000, 160, 60)))
    assert rows.current_lag() == 60
    assert PartitionRows("t", 0, samples, ()).current_lag() == 0  # no end offset: the sample's own lag
    assert PartitionRows("t", 0, (), (EndOffset(1000, 100, None),)).current_lag() == 0  # nothing committed
    assert PartitionRows("t", 0, samples, (EndOffset(1000, 90, 0),)).current_lag() == 0  # end below the commit


def test_an_incomplete_window_is_reported_ok_below_the_minimum_and_says_how_complete() -> None:
    same_nonzero = window(SAME_NONZERO)
    slots: list[Sample | None] = [None, None, *same_nonzero[2:]]
    p = lag.evaluate_partition("t", 0, slots, [1300], 300, 600000, minimum_complete=0.8)
    assert p.status is Status.OK and p.complete == pytest.approx(0.6)
    assert p.start == same_nonzero[2] and p.end == same_nonzero[-1]
    p = lag.evaluate_partition("t", 0, slots, [1300], 300, 600000, minimum_complete=0.5)
    assert p.status is Status.STALL
    empty = lag.evaluate_partition("t", 1, [None] * 5, [], 10, 600000)
    assert empty.status is Status.OK and empty.complete == 0.0 and empty.start is None


def test_the_group_is_its_worst_partition_capped_at_err_with_total_and_max_lag() -> None:
    ok = lag.evaluate_partition("a", 0, window(RISING), [5200], 200, 600000)
    warn = lag.PartitionStatus("a", 1, Status.WARN, 900, 1.0)
    stall = lag.evaluate_partition("b", 0, window(SAME_NONZERO), [1300], 300, 600000)
    partial = lag.PartitionStatus("b", 1, Status.OK, 0, 0.4)
    g = lag.evaluate_group("app", [stall, partial, warn, ok])
    assert g.status is Status.ERR  # STALL counts as ERR for the group
    assert g.total_lag == 200 + 900 + 300 and g.max_lag == warn
    assert [(p.topic, p.partition) for p in g.partitions] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert g.problems == (warn, stall) and g.complete == pytest.approx(0.75)
    assert lag.evaluate_group("app", [ok, warn]).status is Status.WARN
    none = lag.evaluate_group("idle", [])
    assert none.status is Status.OK and none.total_lag == 0 and none.max_lag is None and none.complete == 0.0
