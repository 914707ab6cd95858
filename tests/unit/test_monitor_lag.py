"""kctl.monitor.lag against Burrow's own rule examples (its caching evaluator's test table, the same offsets,
end offsets, current lag and clock, the same expected answer of each rule and of the status), then the
window's completeness and the group's status."""

from __future__ import annotations

import pytest

from kctl.monitor import lag
from kctl.monitor.lag import Sample, Status


def S(offset: int, timestamp_ms: int, lag_: int | None) -> Sample:
    return Sample(offset, timestamp_ms, lag_)


RISING = [S(1000, 100000, 0), S(2000, 200000, 50), S(3000, 300000, 100), S(4000, 400000, 150), S(5000, 500000, 200)]
RISING_NONZERO = [S(1000, 100000, 50), S(2000, 200000, 100), S(3000, 300000, 150), S(4000, 400000, 200),
                  S(5000, 500000, 250)]
SAME_OFFSET = [S(1000, t, lag_) for t, lag_ in ((100000, 0), (200000, 50), (300000, 100), (400000, 150),
                                                (500000, 200))]
SAME_OFFSET_NONZERO = [S(1000, t, lag_) for t, lag_ in ((100000, 100), (200000, 150), (300000, 200), (400000, 250),
                                                        (500000, 300))]
SAME_OFFSET_SAME_LAG = [S(1000, t, 100) for t in (100000, 200000, 300000, 400000, 500000)]
BACK = [S(1000, 100000, 100), S(2000, 200000, 150), S(3000, 300000, 200), S(2000, 400000, 1250), S(4000, 500000, 300)]
CAUGHT_UP = [S(792748079 + i, t, 0) for i, t in enumerate((
    1512224618356, 1512224619362, 1512224620366, 1512224621367, 1512224622370, 1512224623373, 1512224624378,
    1512224625379, 1512224626383, 1512224627383, 1512224628383, 1512224629388, 1512224630391, 1512224631394,
    1512224632397))]
WITH_GAPS = [S(1000, 100000, 0), S(1500, 150000, None), S(2000, 200000, 50), S(2500, 250000, None),
             S(3000, 300000, 100), S(3500, 350000, None), S(4000, 400000, 150), S(4500, 450000, None),
             S(5000, 500000, 200), S(5500, 550000, None)]

# (window, end offsets, current lag, now in s; always above zero, rewound, stopped, stalled, not decreasing,
#  recently caught up; status), in the order and with the comments of Burrow's table
BURROW = [
    # 0 - OK: zero lag somewhere
    (RISING, [5200], 200, 600, (False, False, False, False, True, False), Status.OK),
    # 1 - OK: 400 s since the last commit equals the window's span, not more
    (RISING, [5200], 200, 900, (False, False, False, False, True, False), Status.OK),
    # 2 - STOP: 500 s since the last commit, though the lag was zero at the start
    (RISING, [5200], 200, 1000, (False, False, True, False, True, False), Status.STOP),
    # 3 - STOP with the lag never zero as well
    (RISING_NONZERO, [5250], 250, 1000, (True, False, True, False, True, False), Status.STOP),
    # 4 - OK for the zero lag, though the offset never moves
    (SAME_OFFSET, [1200], 200, 600, (False, False, False, True, True, False), Status.OK),
    # 5 - STALL: the offset never moves and the lag is never zero
    (SAME_OFFSET_NONZERO, [1300], 300, 600, (True, False, False, True, True, False), Status.STALL),
    # 6 - STALL when the lag stays the same too
    (SAME_OFFSET_SAME_LAG, [1100], 100, 600, (True, False, False, True, True, False), Status.STALL),
    # 7 - REWIND: an offset went back, though the lag decreases (rewind is worse)
    (BACK, [4300], 300, 600, (True, True, False, False, False, False), Status.REWIND),
    # 8 - OK: the current lag is 0, though the window would be stopped by its times
    (RISING_NONZERO, [5250], 0, 1000, (True, False, True, False, True, False), Status.OK),
    # 9 - STOP by the times: current lag above 0 (new data), though the window's lag is always 0
    (CAUGHT_UP, [792749024, 792749000, 792748800, 792748600, 792748500], 931, 1512224650,
     (False, False, True, False, True, False), Status.STOP),
    # 10 - OK, though stopped by the times: a recent end offset shows the consumer had caught up
    (CAUGHT_UP, [792748094, 792748093, 792748093, 792748093], 1, 1512224650,
     (False, False, True, False, True, True), Status.OK),
    # 11 - as 0, with samples that have no lag, which change nothing
    (WITH_GAPS, [5700], 200, 600, (False, False, False, False, True, False), Status.OK),
]


@pytest.mark.parametrize(("window", "ends", "current", "now", "rules", "status"), BURROW,
                         ids=[f"burrow-{i}" for i in range(len(BURROW))])
def test_burrows_rule_examples(window: list[Sample], ends: list[int], current: int, now: int,
                               rules: tuple[bool, ...], status: Status) -> None:
    assert (lag.lag_always_above_zero(window), lag.rewound(window), lag.stopped(window, now), lag.stalled(window),
            lag.lag_not_decreasing(window), lag.recently_caught_up(window, ends)) == rules
    assert lag.partition_status(window, ends, current, now) is status


def test_an_incomplete_window_is_reported_ok_below_the_minimum_and_says_how_complete() -> None:
    slots: list[Sample | None] = [None, None, *SAME_OFFSET_NONZERO[2:]]
    p = lag.evaluate_partition("t", 0, slots, [1300], 300, 600, minimum_complete=0.8)
    assert p.status is Status.OK and p.complete == pytest.approx(0.6)
    assert p.start == SAME_OFFSET_NONZERO[2] and p.end == SAME_OFFSET_NONZERO[-1]
    p = lag.evaluate_partition("t", 0, slots, [1300], 300, 600, minimum_complete=0.5)
    assert p.status is Status.STALL
    empty = lag.evaluate_partition("t", 1, [None] * 5, [], 10, 600)
    assert empty.status is Status.OK and empty.complete == 0.0 and empty.start is None


def test_the_group_is_its_worst_partition_capped_at_err_with_total_and_max_lag() -> None:
    ok = lag.evaluate_partition("a", 0, RISING, [5200], 200, 600)
    warn = lag.PartitionStatus("a", 1, Status.WARN, 900, 1.0)
    stall = lag.evaluate_partition("b", 0, SAME_OFFSET_NONZERO, [1300], 300, 600)
    partial = lag.PartitionStatus("b", 1, Status.OK, 0, 0.4)
    g = lag.evaluate_group("app", [stall, partial, warn, ok])
    assert g.status is Status.ERR  # STALL counts as ERR for the group
    assert g.total_lag == 200 + 900 + 300 and g.max_lag == warn
    assert [(p.topic, p.partition) for p in g.partitions] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert g.problems == (warn, stall) and g.complete == pytest.approx(0.75)
    assert lag.evaluate_group("app", [ok, warn]).status is Status.WARN
    none = lag.evaluate_group("idle", [])
    assert none.status is Status.OK and none.total_lag == 0 and none.max_lag is None and none.complete == 0.0
