"""Consumer-lag evaluation as Burrow defines it: each partition of a group judged over a window of its
committed offsets, and the group as its worst partition.

Pure functions over samples; the monitor (its store) and ``kctl lag`` (a fresh sampling) feed them. The rules
and their order are Burrow's (its caching evaluator; tests/unit/test_monitor_lag.py runs Burrow's own rule
examples through them):

- the current lag is 0: OK, whatever the window shows;
- STOP: the time since the last commit exceeds the span of the window (last minus first commit), unless the
  end offsets sampled recently show the consumer had caught up (an end offset at or below its last commit);
- only when the lag was above 0 at every sample of the window (else OK):
  - REWIND: a committed offset moved back;
  - STALL: the committed offset never moved;
  - WARN: the lag never decreased from one sample to the next.

A window with empty slots (the monitor just started, or a partition newly assigned) is incomplete: its
``complete`` is the filled fraction, and a partition below ``minimum_complete`` is reported OK (Burrow's
evaluator does the same), so a fresh window is never an alarm.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise


class Status(enum.IntEnum):
    """Burrow's statuses in its order of severity; a group is never worse than ERR."""

    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6


@dataclass(frozen=True)
class Sample:
    """One committed offset of a partition as the monitor saw it: when it was committed (ms since the epoch)
    and the lag it had then (the end offset sampled with it minus the offset; None: no end offset yet)."""

    offset: int
    timestamp_ms: int
    lag: int | None


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    status: Status
    current_lag: int
    complete: float  # the filled fraction of the window
    start: Sample | None = None  # the window's first and last samples
    end: Sample | None = None


@dataclass(frozen=True)
class GroupStatus:
    group: str
    status: Status  # the worst partition's, STOP/STALL/REWIND counted as ERR
    total_lag: int
    partitions: tuple[PartitionStatus, ...]
    max_lag: PartitionStatus | None
    complete: float  # the fraction of partitions whose window is full
    problems: tuple[PartitionStatus, ...] = field(default=())  # the partitions not OK


# ----- the rules (Burrow's names in the comments) ---------------------------------------------------


def lag_always_above_zero(window: Sequence[Sample]) -> bool:
    """isLagAlwaysNotZero: no sample of the window had lag 0 (a sample without a lag does not count)."""
    return not any(s.lag == 0 for s in window)


def rewound(window: Sequence[Sample]) -> bool:
    """checkIfOffsetsRewind: a committed offset lower than the one before it."""
    return any(b.offset < a.offset for a, b in pairwise(window))


def stopped(window: Sequence[Sample], now_s: float) -> bool:
    """checkIfOffsetsStopped: longer since the last commit than the window spans (first to last commit)."""
    first, last = window[0].timestamp_ms, window[-1].timestamp_ms
    return now_s * 1000 - last > last - first


def stalled(window: Sequence[Sample]) -> bool:
    """checkIfOffsetsStalled: the committed offset is the same at every sample."""
    return all(b.offset == a.offset for a, b in pairwise(window))


def lag_not_decreasing(window: Sequence[Sample]) -> bool:
    """checkIfLagNotDecreasing: no sample's lag is below the previous known lag."""
    last: int | None = None
    for s in window:
        if s.lag is None:
            continue
        if last is not None and s.lag < last:
            return False
        last = s.lag
    return True


def recently_caught_up(window: Sequence[Sample], end_offsets: Iterable[int]) -> bool:
    """checkIfRecentLagZero: a recently sampled end offset at or below the last committed offset."""
    last = window[-1].offset
    return any(end <= last for end in end_offsets)


def partition_status(window: Sequence[Sample], end_offsets: Iterable[int], current_lag: int, now_s: float) -> Status:
    """calculatePartitionStatus: the status of a full (or complete enough) window, oldest sample first."""
    if current_lag <= 0 or not window:
        return Status.OK
    if stopped(window, now_s) and not recently_caught_up(window, end_offsets):
        return Status.STOP
    if lag_always_above_zero(window):
        if rewound(window):
            return Status.REWIND
        if stalled(window):
            return Status.STALL
        if lag_not_decreasing(window):
            return Status.WARN
    return Status.OK


def evaluate_partition(topic: str, partition: int, slots: Sequence[Sample | None], end_offsets: Sequence[int],
                       current_lag: int, now_s: float, minimum_complete: float = 0.0) -> PartitionStatus:
    """One partition over its window of ``slots`` (oldest first; None: a slot not filled yet, at the start)."""
    filled = list(slots)
    while filled and filled[0] is None:
        filled.pop(0)
    window = [s for s in filled if s is not None]
    complete = len(window) / len(slots) if slots else 0.0
    if not window:
        return PartitionStatus(topic, partition, Status.OK, current_lag, complete)
    status = partition_status(window, end_offsets, current_lag, now_s) if complete >= minimum_complete \
        else Status.OK
    return PartitionStatus(topic, partition, status, current_lag, complete, window[0], window[-1])


def evaluate_group(group: str, partitions: Iterable[PartitionStatus]) -> GroupStatus:
    """The group as its worst partition (capped at ERR), its total lag and the partition with the most."""
    parts = tuple(sorted(partitions, key=lambda p: (p.topic, p.partition)))
    worst = max((p.status for p in parts), default=Status.OK)
    max_lag = max(parts, key=lambda p: p.current_lag, default=None)
    full = sum(1 for p in parts if p.complete >= 1.0)
    return GroupStatus(group, min(worst, Status.ERR), sum(max(0, p.current_lag) for p in parts), parts, max_lag,
                       full / len(parts) if parts else 0.0, tuple(p for p in parts if p.status > Status.OK))
