"""The drill's verdict: what the producer was told (acknowledged) against what the topic holds.

The topic is read by a fresh consumer from the beginning of every partition to its end offset,
independent of the producer's bookkeeping. The comparison is Kafka's replication tests' and Jepsen's:
an acknowledged value that cannot be read is **lost**; a value read more than once is a **duplicate**;
a partition whose sequence numbers go backwards is **reordered**; a value read but never acknowledged
(its acknowledgement timed out, yet it was written) is allowed and reported.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError
from kctl.kafka.client import Target, consumer, error_code
from kctl.model.spec import ClusterSpec
from kctl.wait import Deadline, ticks

SAMPLE = 10  # how many lost / duplicated values a verdict names


@dataclass
class Comparison:
    acked: int
    read: int
    lost: int
    duplicates: int
    reordered: int
    unacked_present: int
    lost_sample: list[int] = field(default_factory=list)
    duplicate_sample: list[int] = field(default_factory=list)
    reordered_sample: list[str] = field(default_factory=list)
    offset_mismatches: int = 0  # acknowledged at an offset that now holds another value (or none)


def compare(acked: Iterable[tuple[int, int, int]], read: Mapping[int, Sequence[tuple[int, int]]],
            produced: int | None = None) -> Comparison:
    """Pure: ``acked`` (partition, offset, seq) from the delivery reports; ``read`` partition ->
    [(offset, seq)] in offset order, as the topic gives them back."""
    acked = list(acked)
    acked_seqs = {s for _, _, s in acked}
    counts: Counter[int] = Counter()
    at: dict[tuple[int, int], int] = {}
    reordered, reordered_sample = 0, list[str]()
    for partition, records in read.items():
        high = -1
        for offset, seq in records:
            counts[seq] += 1
            at[(partition, offset)] = seq
            if seq < high:
                reordered += 1
                if len(reordered_sample) < SAMPLE:
                    reordered_sample.append(f"p{partition}@{offset}: {seq} after {high}")
            high = max(high, seq)
    lost = sorted(s for s in acked_seqs if s not in counts)
    dups = sorted(s for s, n in counts.items() if n > 1)
    unacked = [s for s in counts if s not in acked_seqs and (produced is None or s < produced)]
    mismatches = sum(1 for p, o, s in acked if o >= 0 and at.get((p, o)) != s)  # -1: acknowledged without one
    return Comparison(
        acked=len(acked_seqs),
        read=sum(counts.values()),
        lost=len(lost),
        duplicates=sum(counts[s] - 1 for s in dups),
        reordered=reordered,
        unacked_present=len(unacked),
        lost_sample=lost[:SAMPLE],
        duplicate_sample=dups[:SAMPLE],
        reordered_sample=reordered_sample,
        offset_mismatches=mismatches,
    )


def longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest span in [start, end] without an event (the longest produce stall)."""
    points = [start, *sorted(t for t in times if start <= t <= end), end]
    return max((b - a for a, b in zip(points, points[1:], strict=False)), default=0.0)


def acked_ends(acked: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """Pure: partition -> the end offset its acknowledged records need (highest acknowledged offset + 1)."""
    ends: dict[int, int] = {}
    for p, off, _ in acked:
        if off >= 0:
            ends[p] = max(ends.get(p, 0), off + 1)
    return ends


@dataclass
class Settled:
    """How long the topic's high watermarks took to cover every acknowledged offset, and what fell short."""

    seconds: float
    short: dict[int, tuple[int, int]]  # partition -> (high watermark, end the acknowledgements need)


def settle(spec: ClusterSpec, topic: str, want: Mapping[int, int], timeout: float = 60.0) -> Settled:
    """Wait (bounded) until each partition's high watermark reaches the end its acknowledged records need.

    A leader elected a moment before the read can still answer with a high watermark below records the old
    leader acknowledged with acks=all: they are on the new leader and become readable once its followers have
    fetched them. Reading at that moment would call them lost; a record truncated away never comes back, so
    what is still short after ``timeout`` is reported with both offsets.
    """
    from confluent_kafka import KafkaException, TopicPartition

    started = time.monotonic()
    if not want:
        return Settled(0.0, {})
    c = consumer(Target.of(spec))
    short: dict[int, tuple[int, int]] = {}
    try:
        for _ in ticks(0.25, until=started + timeout):
            short = {}
            for p, need in sorted(want.items()):
                try:
                    _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
                except KafkaException:  # no leader for a moment, or a new one not yet answering
                    high = -1
                if high < need:
                    short[p] = (int(high), need)
            if not short:
                break
        return Settled(round(time.monotonic() - started, 2), short)
    finally:
        c.close()


# Errors of a partition whose leader moved a moment ago (the client's metadata not yet refreshed): asked again.
MOVED_LEADER = ("NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "_TRANSPORT", "_TIMED_OUT", "REQUEST_TIMED_OUT",
                "NOT_LEADER_OR_FOLLOWER")


def _watermarks(c: Any, tp: Any, deadline: float) -> tuple[int, int]:
    """A partition's low and high watermarks; an error of a leader that just moved is asked again until
    ``deadline`` (a drill's read-back starts right after a heal)."""
    from confluent_kafka import KafkaException

    for _ in ticks(0.5, until=deadline):
        try:
            low, high = c.get_watermark_offsets(tp, timeout=10, cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].name() not in MOVED_LEADER:
                raise
    low, high = c.get_watermark_offsets(tp, timeout=10, cached=False)  # the last ask: its error is the answer
    return int(low), int(high)


def read_topic(spec: ClusterSpec, topic: str, timeout: float = 120.0) -> dict[int, list[tuple[int, int]]]:
    """Every record of every partition, from its beginning to its end offset, with a fresh consumer
    (its own random group, nothing committed): partition -> [(offset, seq)]."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

    extra: dict[str, Any] = {"auto.offset.reset": "earliest", "isolation.level": "read_uncommitted"}
    c = consumer(Target.of(spec), **extra)
    try:
        md = c.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise KctlError(f"cannot read topic {topic} back: {t.error if t is not None else 'not found'}",
                            hint="`kctl topic describe` shows it")
        ends: dict[int, int] = {}
        todo: set[int] = set()
        for p in sorted(t.partitions):
            low, high = _watermarks(c, TopicPartition(topic, p), time.monotonic() + 30)
            ends[p] = int(high)
            if high > low:  # records deleted up to the end (delete_records, retention) leave none to read
                todo.add(p)
        out: dict[int, list[tuple[int, int]]] = {p: [] for p in ends}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(todo)])
        deadline = Deadline(timeout)
        while todo:
            if deadline.passed():
                left = {p: (out[p][-1][0] if out[p] else None, ends[p]) for p in todo}
                raise KctlError(f"reading {topic} back did not reach the end offsets in {timeout:.0f}s: {left}",
                                hint="is the cluster healthy? `kctl status`")
            for m in c.consume(1000, timeout=1.0):
                if m.error() is not None:
                    raise KafkaException(m.error())
                p, off = int(m.partition()), int(m.offset())
                if p not in todo:
                    continue
                raw = m.value()
                try:
                    seq = int(raw)
                except (TypeError, ValueError):
                    seq = -1  # not a drill record: counted as read, never as acknowledged
                out[p].append((off, seq))
                if off + 1 >= ends[p]:
                    todo.discard(p)
            # A partition whose remaining records were deleted below its end: the position says so.
            for tp in c.position([TopicPartition(topic, p) for p in sorted(todo)]):
                if tp.offset >= 0 and tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
        return out
    except KafkaException as exc:
        code, msg = error_code(exc)
        raise KctlError(f"reading {topic} back failed: {code} {msg}", hint="`kctl status`") from None
    finally:
        c.close()


def timeline_rows(seconds: Mapping[int, Any], marks: Sequence[tuple[float, str]], length: int) -> list[dict[str, Any]]:
    """One row per second: acknowledged, errors, p99 latency, and the fault events of that second."""
    rows = []
    for s in range(max(length, (max(seconds) + 1) if seconds else 0)):
        sec = seconds.get(s)
        events = [what for t, what in marks if int(t) == s]
        rows.append({"second": s, "acked": sec.acked if sec else 0, "errors": sec.errors if sec else 0,
                     "p99_ms": sec.p99_ms if sec else None, "events": events})
    return rows
