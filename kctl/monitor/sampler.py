"""Windows of committed offsets per group partition, filled from periodic snapshots, and their evaluation.

Burrow reads every commit from ``__consumer_offsets``; kctl samples the committed offsets (OffsetFetch) with
the group's membership and the partitions' end offsets instead, and turns each snapshot into Burrow's
samples like this:

- a committed offset that moved since the last sample is a commit, at the snapshot's time;
- an offset that did not move is a commit of the same offset when a live member of the group owns the
  partition (a consumer that is running but not progressing commits where it stands: Burrow's STALL), and no
  commit at all when no member does (the consumer is gone: the window ages into Burrow's STOP);
- every snapshot, a commit or not, leaves the partition's end offset and the group's lag at that moment (an
  :class:`~kctl.monitor.lag.EndOffset`): the recent end offsets of Burrow's "recently caught up" check, and
  the latest of them the current lag is measured against. A consumer that stopped while its producer goes on
  so shows a growing current lag and no recent catch-up, and turns STOP (its window no longer ends on the lag
  0 of its last commit);
- a partition that is no longer in the snapshot (no commit, no owner) is no longer judged.

:class:`Windows` is pure (the snapshots come in as data): the monitor keeps one across its samples and
stores every row it adds; ``kctl lag`` without the monitor fills one from a short fresh sampling. Readers of
the store (``kctl lag`` while the monitor runs, the console) judge its rows with :func:`stored_status`, at the
moment of the group's latest stored snapshot, with the window and ``allowed_lag`` the monitor recorded: the
same rows, moment and parameters as the monitor's own evaluation (:func:`kctl.monitor.lag.evaluate_rows`),
so the same answer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from kctl.monitor.lag import EndOffset, GroupStatus, PartitionRows, PartitionStatus, Sample, Status, evaluate_rows

if TYPE_CHECKING:
    from kctl.monitor.store import Store, StoredGroup

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
    type: str = "classic"  # classic, consumer, share, streams


class Seen(NamedTuple):
    """One partition's row of a snapshot, as stored: its commit (None: no new sample) and its end offset."""

    key: tuple[str, int]
    sample: Sample | None
    end: EndOffset


@dataclass
class _Partition:
    samples: deque[Sample]
    ends: deque[EndOffset]


@dataclass
class Windows:
    """The last ``size`` samples and end offsets of every partition of every group seen."""

    size: int = DEFAULT_WINDOW
    allowed_lag: int = 0
    groups: dict[str, dict[tuple[str, int], _Partition]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    at_ms: dict[str, int] = field(default_factory=dict)  # each group's latest snapshot
    current: dict[str, set[tuple[str, int]]] = field(default_factory=dict)  # the partitions in it

    def _slot(self, group: str, key: tuple[str, int]) -> _Partition:
        parts = self.groups.setdefault(group, {})
        if key not in parts:
            parts[key] = _Partition(deque(maxlen=self.size), deque(maxlen=self.size))
        return parts[key]

    def restore(self, stored: StoredGroup) -> None:
        """A group as the store kept it (the monitor reads its windows back so after a restart)."""
        self.current[stored.group] = {(r.topic, r.partition) for r in stored.rows}
        for r in stored.rows:
            slot = self._slot(stored.group, (r.topic, r.partition))
            slot.samples.extend(r.samples)
            slot.ends.extend(r.ends)
        self.states[stored.group] = stored.state or "UNKNOWN"
        if stored.type:
            self.types[stored.group] = stored.type
        self.at_ms[stored.group] = stored.at_ms

    def observe(self, snap: GroupSnapshot) -> list[Seen]:
        """Take one snapshot in; returns the rows it added (what the monitor stores)."""
        self.states[snap.group] = snap.state
        self.types[snap.group] = snap.type
        self.at_ms[snap.group] = snap.at_ms
        self.current[snap.group] = {(p.topic, p.partition) for p in snap.partitions}
        added: list[Seen] = []
        for p in snap.partitions:
            key = (p.topic, p.partition)
            slot = self._slot(snap.group, key)
            lag = None if p.committed is None or p.end is None else max(0, p.end - p.committed)
            end = EndOffset(snap.at_ms, p.end, lag)
            slot.ends.append(end)
            sample = None
            if p.committed is not None:
                last = slot.samples[-1] if slot.samples else None
                if last is None or last.offset != p.committed or p.owned:
                    sample = Sample(p.committed, snap.at_ms, lag)
                    slot.samples.append(sample)
            added.append(Seen(key, sample, end))
        return added

    def rows(self, group: str) -> list[PartitionRows]:
        """The group's partitions of its latest snapshot (one that left it is judged no more), with what is
        kept of each: the same rows as the store's :meth:`~kctl.monitor.store.Store.group_rows`."""
        current = self.current.get(group, set())
        return [PartitionRows(t, p, tuple(slot.samples), tuple(slot.ends))
                for (t, p), slot in sorted(self.groups.get(group, {}).items()) if (t, p) in current]

    def evaluate(self, group: str, now_s: float | None = None) -> GroupStatus:
        """The group judged at ``now_s`` (default: the moment of its latest snapshot)."""
        now_ms = self.at_ms.get(group, 0) if now_s is None else int(now_s * 1000)
        return evaluate_rows(group, self.rows(group), now_ms, self.size, allowed_lag=self.allowed_lag)


def stored_status(store: Store, group: str, *, window: int, allowed_lag: int = 0) -> Judged | None:
    """The group judged from the monitor's store, at the moment of its latest stored snapshot, with the window
    and allowed lag the monitor recorded (``window`` and ``allowed_lag`` only for a store that has none): what
    the monitor itself answered for that moment. None when the store has no snapshot of the group."""
    window, allowed_lag = store.lag_parameters(window, allowed_lag)
    stored = store.group_rows(group, window)
    if stored is None:
        return None
    status = evaluate_rows(group, stored.rows, stored.at_ms, window, allowed_lag=allowed_lag)
    return Judged(status, stored.state, stored.at_ms, window, stored.type)


@dataclass(frozen=True)
class Judged:
    status: GroupStatus
    state: str | None
    at_ms: int
    window: int
    type: str | None = None

    def to_json(self, source: str = "the monitor") -> dict[str, Any]:
        return to_json(self.status, state=self.state, window=self.window, source=source, type=self.type)


def to_json(status: GroupStatus, *, state: str | None = None, window: int, source: str,
            type: str | None = None) -> dict[str, Any]:  # noqa: A002 - the group's type, as Kafka names it
    """``kctl lag GROUP -o json``: Burrow's status names; problems are the partitions not OK."""
    def part(p: PartitionStatus) -> dict[str, Any]:
        return {"topic": p.topic, "partition": p.partition, "status": p.status.name, "lag": p.current_lag,
                "complete": round(p.complete, 2),
                "offset": p.end.offset if p.end else None}

    worst = max((p.status for p in status.partitions), default=Status.OK)
    return {
        "group": status.group,
        "type": type.lower() if type else None,
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
        "at_ms": status.at_ms,  # the moment judged: the group's latest snapshot
        "partitions": [part(p) for p in status.partitions],
        "problems": [part(p) for p in status.problems],
    }


def snapshot_of(description: Any, at_ms: int) -> GroupSnapshot:
    """A GroupSnapshot from :func:`kctl.kafka.groups.describe`'s answer."""
    live = description.state in ("STABLE", "COMPLETING_REBALANCE", "PREPARING_REBALANCE", "RECONCILING",
                                 "ASSIGNING")
    return GroupSnapshot(description.group, description.state, at_ms, tuple(
        PartitionSnapshot(p.topic, p.partition, p.committed, p.log_end, live and p.consumer_id is not None)
        for p in description.partitions), getattr(description, "type", "classic"))


def share_snapshot_of(description: Any, at_ms: int) -> GroupSnapshot:
    """A GroupSnapshot of a share group (:func:`kctl.kafka.share_groups.sample`'s answer).

    A share group commits no offsets: its members acknowledge records one by one, and each share-partition's
    start offset (SPSO) is the first record not yet done by all. The SPSO stands for the committed offset (it
    moves on as records are acknowledged, back only when the group is reset), and the lag is Kafka's own: the
    records not yet acknowledged (from the SPSO to the log end, less those after the SPSO already acknowledged;
    Kafka 4.1+ counts them). The end kept is SPSO + that lag, the end of what the group has left to do, so the
    evaluation's current lag is Kafka's and "caught up" means Kafka's lag 0 (a group that acknowledged
    everything while its SPSO lags is OK). A member that has the share-partition assigned owns it: a running
    group whose SPSO stands still while its lag stays above allowed_lag is STALL; one without members gets no
    new samples and turns STOP. A share-partition not initialized yet (the tool's ``-``) has no sample."""
    live = description.state == "STABLE"
    assigned = {a for m in description.members for a in m.assignment}
    return GroupSnapshot(description.group, description.state, at_ms, tuple(
        PartitionSnapshot(p.topic, p.partition, p.start_offset,
                          None if p.start_offset is None or p.lag is None else p.start_offset + p.lag,
                          live and f"{p.topic}-{p.partition}" in assigned)
        for p in description.partitions), "share")


def streams_snapshot_of(group: str, state: str, partitions: Any, at_ms: int) -> GroupSnapshot:
    """A GroupSnapshot of a streams group: its committed offsets and end offsets (AdminClient), its state from
    Kafka's tool; while it has members taking part (STABLE, ASSIGNING, RECONCILING, NOT_READY) every partition
    it committed is counted as owned (the tool's list does not say which task has which partition; a partition
    no task reads any more so counts as STALL, not STOP)."""
    live = state in ("STABLE", "ASSIGNING", "RECONCILING", "NOT_READY")
    return GroupSnapshot(group, state, at_ms, tuple(
        PartitionSnapshot(p.topic, p.partition, p.committed, p.log_end, live) for p in partitions), "streams")


def worst(statuses: Iterable[GroupStatus]) -> Status:
    return max((s.status for s in statuses), default=Status.OK)
