"""Windows of committed offsets per group partition, filled from periodic snapshots, and their evaluation.

Burrow reads every commit from ``__consumer_offsets``; kctl samples the committed offsets (OffsetFetch) with
the group's membership and the partitions' end offsets instead, and turns each snapshot into Burrow's
samples like this:

- a committed offset that moved since the last sample is a commit, at the snapshot's time;
- an offset that did not move is a commit of the same offset when a live member of the group owns the
  partition (a consumer that is running but not progressing commits where it stands: Burrow's STALL), and no
  commit at all when no member does (the consumer is gone: the window ages into Burrow's STOP);
- each snapshot's end offset is kept as a recent end offset (Burrow's "recently caught up" check).

:class:`Windows` is pure (the snapshots come in as data): the monitor keeps one across its samples and
stores every sample; ``kctl lag`` without the monitor fills one from a short fresh sampling.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kctl.monitor.lag import GroupStatus, PartitionStatus, Sample, Status, evaluate_group, evaluate_partition

DEFAULT_WINDOW = 10  # samples per partition, Burrow's default intervals


@dataclass(frozen=True)
class PartitionSnapshot:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    owned: bool  # a live member of the group has the partition assigned


@dataclass(frozen=True)
class GroupSnapshot:
    group: str
    state: str
    at_ms: int
    partitions: tuple[PartitionSnapshot, ...]


@dataclass
class _Partition:
    samples: deque[Sample]
    ends: deque[int]
    current_lag: int = 0


@dataclass
class Windows:
    """The last ``size`` samples of every partition of every group seen."""

    size: int = DEFAULT_WINDOW
    groups: dict[str, dict[tuple[str, int], _Partition]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)

    def _slot(self, group: str, key: tuple[str, int]) -> _Partition:
        parts = self.groups.setdefault(group, {})
        if key not in parts:
            parts[key] = _Partition(deque(maxlen=self.size), deque(maxlen=self.size))
        return parts[key]

    def add(self, group: str, key: tuple[str, int], sample: Sample, end: int | None) -> None:
        """One stored sample (the monitor replays its store through this after a restart)."""
        slot = self._slot(group, key)
        slot.samples.append(sample)
        if end is not None:
            slot.ends.append(end)
        if sample.lag is not None:
            slot.current_lag = sample.lag

    def observe(self, snap: GroupSnapshot) -> list[tuple[tuple[str, int], Sample, int | None]]:
        """Take one snapshot in; returns the samples it added (what the monitor stores)."""
        self.states[snap.group] = snap.state
        added: list[tuple[tuple[str, int], Sample, int | None]] = []
        for p in snap.partitions:
            key = (p.topic, p.partition)
            slot = self._slot(snap.group, key)
            lag = None if p.committed is None or p.end is None else max(0, p.end - p.committed)
            if p.end is not None:
                slot.ends.append(p.end)
            if lag is not None:
                slot.current_lag = lag
            if p.committed is None:
                continue
            last = slot.samples[-1] if slot.samples else None
            if last is None or last.offset != p.committed or p.owned:
                sample = Sample(p.committed, snap.at_ms, lag)
                slot.samples.append(sample)
                added.append((key, sample, p.end))
        return added

    def evaluate(self, group: str, now_s: float) -> GroupStatus:
        parts: list[PartitionStatus] = []
        for (topic, partition), slot in sorted(self.groups.get(group, {}).items()):
            slots: list[Sample | None] = [None] * (self.size - len(slot.samples)) + list(slot.samples)
            parts.append(evaluate_partition(topic, partition, slots, list(slot.ends), slot.current_lag, now_s))
        return evaluate_group(group, parts)


def to_json(status: GroupStatus, *, state: str | None = None, window: int, source: str) -> dict[str, Any]:
    """``kctl lag GROUP -o json``: Burrow's status names; problems are the partitions not OK."""
    def part(p: PartitionStatus) -> dict[str, Any]:
        return {"topic": p.topic, "partition": p.partition, "status": p.status.name, "lag": p.current_lag,
                "complete": round(p.complete, 2),
                "offset": p.end.offset if p.end else None}

    worst = max((p.status for p in status.partitions), default=Status.OK)
    return {
        "group": status.group,
        "state": state,
        # The worst partition's status (STOP, STALL and REWIND named); Burrow's group status caps them at ERR.
        "status": worst.name,
        "burrow_status": status.status.name,
        "total_lag": status.total_lag,
        "max_lag": part(status.max_lag) if status.max_lag else None,
        "complete": status.complete >= 1.0,
        "complete_fraction": round(status.complete, 2),
        "window": window,
        "source": source,
        "partitions": [part(p) for p in status.partitions],
        "problems": [part(p) for p in status.problems],
    }


def snapshot_of(description: Any, at_ms: int) -> GroupSnapshot:
    """A GroupSnapshot from :func:`kctl.kafka.groups.describe`'s answer."""
    live = description.state in ("STABLE", "COMPLETING_REBALANCE", "PREPARING_REBALANCE")
    return GroupSnapshot(description.group, description.state, at_ms, tuple(
        PartitionSnapshot(p.topic, p.partition, p.committed, p.log_end, live and p.consumer_id is not None)
        for p in description.partitions))


def worst(statuses: Iterable[GroupStatus]) -> Status:
    return max((s.status for s in statuses), default=Status.OK)
