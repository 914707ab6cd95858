"""Consumer-lag evaluation as Burrow defines it: each partition of a group judged over a window of its
committed offsets, and the group as its worst partition.

Pure functions over samples; the monitor (its store) and ``kctl lag`` (a fresh sampling) feed them, all through
:func:`evaluate_rows`. The rules and their order are those of Burrow's caching evaluator
(``core/internal/evaluator/caching.go``) at Burrow v1.9.5 (commit ced55ba90f6b833a45a124d411fd5eef63a70933, its
master of October 2025; the rules have not changed since v1.3.7, which added the recovered rewind), and
tests/unit/test_monitor_lag.py runs that file's test table, row by row, through them:

- the current lag is at most ``allowed_lag`` (Burrow's ``allowed-lag``, default 0): OK, whatever the window
  shows;
- STOP: the time since the last commit exceeds the span of the window (last minus first commit), unless the
  end offsets sampled recently show the consumer had caught up (an end offset at or below its last commit);
- REWIND: a committed offset moved back and the consumer has not come back to where it was before (a rewind
  it has recovered from is no longer held against it); this is checked before the zero-lag rule, so a rewind
  to the earliest offset by a consumer that had no lag is not hidden by the lag 0 earlier in the window;
- only when the lag was above ``allowed_lag`` at every sample of the window (else OK):
  - STALL: the committed offset never moved;
  - WARN: the lag never decreased from one sample to the next.

Times are milliseconds since the epoch (Burrow takes its clock in whole seconds; the rules are the same).
A window with empty slots (the monitor just started, or a partition newly assigned) is incomplete: its
``complete`` is the filled fraction, and a partition below ``minimum_complete`` is reported OK (Burrow's
evaluator does the same), so a fresh window is never an alarm.
"""

from __future__ import annotations

import dataclasses
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
class EndOffset:
    """One sampling's look at a partition a group reads: when (ms since the epoch), its end offset then (None:
    not known) and the group's lag then (the end offset minus the committed offset; None: nothing committed).
    Every sampling leaves one, a commit or not: Burrow's ring of the broker's recent offsets."""

    timestamp_ms: int
    end: int | None
    lag: int | None


@dataclass(frozen=True)
class PartitionRows:
    """What is kept of one group partition: its last samples (commits) and its last end offsets, oldest first,
    each at most a window long. The monitor's memory, its store and a fresh sampling all hand these over."""

    topic: str
    partition: int
    samples: tuple[Sample, ...]
    ends: tuple[EndOffset, ...]

    def current_lag(self) -> int:
        """Burrow's current lag: the latest end offset minus the last committed offset (0 when the end is not
        above it; the last sample's own lag when no end offset is known; 0 without a commit)."""
        if not self.samples:
            return 0
        known = [e.end for e in self.ends if e.end is not None]
        if known:
            return max(0, known[-1] - self.samples[-1].offset)
        return max(0, self.samples[-1].lag or 0)


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
    at_ms: int | None = None  # the moment judged (ms since the epoch)


# ----- the rules (Burrow's names in the comments) ---------------------------------------------------


def lag_always_above_allowed(window: Sequence[Sample], allowed_lag: int = 0) -> bool:
    """isLagAlwaysNotZero: no sample of the window had a lag at or below ``allowed_lag`` (a sample without a
    lag does not count)."""
    return not any(s.lag is not None and s.lag <= allowed_lag for s in window)


def rewind_index(window: Sequence[Sample]) -> int:
    """checkIfOffsetsRewind: the index of the first committed offset lower than the one before it; -1 if none."""
    for i, (a, b) in enumerate(pairwise(window), start=1):
        if b.offset < a.offset:
            return i
    return -1


def rewind_recovered(window: Sequence[Sample], index: int) -> bool:
    """checkIfRewindRecovered: a commit from the rewind at ``index`` on reached the offset before it."""
    before = window[index - 1].offset
    return any(s.offset >= before for s in window[index:])


def stopped(window: Sequence[Sample], now_ms: int) -> bool:
    """checkIfOffsetsStopped: longer since the last commit than the window spans (first to last commit)."""
    first, last = window[0].timestamp_ms, window[-1].timestamp_ms
    return now_ms - last > last - first


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


def partition_status(window: Sequence[Sample], end_offsets: Iterable[int], current_lag: int, now_ms: int,
                     allowed_lag: int = 0) -> Status:
    """calculatePartitionStatus: the status of a full (or complete enough) window, oldest sample first."""
    if current_lag <= allowed_lag or not window:
        return Status.OK
    if stopped(window, now_ms) and not recently_caught_up(window, end_offsets):
        return Status.STOP
    at = rewind_index(window)
    if at > 0 and not rewind_recovered(window, at):
        return Status.REWIND
    if lag_always_above_allowed(window, allowed_lag):
        if stalled(window):
            return Status.STALL
        if lag_not_decreasing(window):
            return Status.WARN
    return Status.OK


def evaluate_partition(topic: str, partition: int, slots: Sequence[Sample | None], end_offsets: Sequence[int],
                       current_lag: int, now_ms: int, minimum_complete: float = 0.0,
                       allowed_lag: int = 0) -> PartitionStatus:
    """One partition over its window of ``slots`` (oldest first; None: a slot not filled yet, at the start)."""
    filled = list(slots)
    while filled and filled[0] is None:
        filled.pop(0)
    window = [s for s in filled if s is not None]
    complete = len(window) / len(slots) if slots else 0.0
    if not window:
        return PartitionStatus(topic, partition, Status.OK, current_lag, complete)
    status = partition_status(window, end_offsets, current_lag, now_ms, allowed_lag) \
        if complete >= minimum_complete else Status.OK
    return PartitionStatus(topic, partition, status, current_lag, complete, window[0], window[-1])


def evaluate_group(group: str, partitions: Iterable[PartitionStatus]) -> GroupStatus:
    """The group as its worst partition (capped at ERR), its total lag and the partition with the most."""
    parts = tuple(sorted(partitions, key=lambda p: (p.topic, p.partition)))
    worst = max((p.status for p in parts), default=Status.OK)
    max_lag = max(parts, key=lambda p: p.current_lag, default=None)
    full = sum(1 for p in parts if p.complete >= 1.0)
    return GroupStatus(group, min(worst, Status.ERR), sum(max(0, p.current_lag) for p in parts), parts, max_lag,
                       full / len(parts) if parts else 0.0, tuple(p for p in parts if p.status > Status.OK))


def evaluate_rows(group: str, rows: Iterable[PartitionRows], now_ms: int, window: int, *, allowed_lag: int = 0,
                  minimum_complete: float = 0.0) -> GroupStatus:
    """The one evaluation of a group: its partitions' kept rows judged at ``now_ms`` over ``window`` slots.
    The monitor's rounds, its HTTP API, ``kctl lag`` (from the store or a fresh sampling) and the console all
    come here, so one moment's rows give one answer."""
    parts = []
    for r in rows:
        samples = r.samples[-window:]
        slots: list[Sample | None] = [None] * (window - len(samples)) + list(samples)
        ends = [e.end for e in r.ends[-window:] if e.end is not None]
        parts.append(evaluate_partition(r.topic, r.partition, slots, ends, r.current_lag(), now_ms,
                                        minimum_complete, allowed_lag))
    return dataclasses.replace(evaluate_group(group, parts), at_ms=now_ms)
