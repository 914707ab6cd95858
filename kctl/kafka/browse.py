"""Reading a topic's records to look at them (the console's message browser), and producing one record.

A browse never joins a group and commits nothing: it assigns the partitions it reads, from the newest N of
each, from an offset, or from a time (Kafka's own offsets-for-times), and stops at the end offsets it saw
when it began. A search scans a bounded number of records (``max_scan``) in a bounded time
(``max_seconds``) and returns those whose key, value or a header value contains the text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.kafka.client import Target, kafka_error, producer, require_topics
from kctl.kafka.client import consumer as make_consumer
from kctl.wait import Deadline

MAX_VALUE_CHARS = 10_000
MAX_LIMIT = 1000
MAX_SCAN = 100_000


@dataclass
class Record:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: str | None
    value: str | None
    headers: list[tuple[str, str | None]] = field(default_factory=list)
    value_bytes: int = 0


@dataclass
class Browse:
    topic: str
    start: str  # "newest N", "offset O of partition P", "time T"
    records: list[Record]
    scanned: int
    ends: dict[int, int]  # partition -> end offset when the browse began
    stopped_by: str = "end"  # end, limit, max_scan, time


def _text(b: bytes | None, limit: int = MAX_VALUE_CHARS) -> str | None:
    if b is None:
        return None
    s = b.decode("utf-8", errors="replace")
    return s if len(s) <= limit else s[:limit] + f"… ({len(b)} bytes)"


def _record(m: Any) -> Record:
    ts_type, ts = m.timestamp()
    headers = [(k, _text(v, 200)) for k, v in (m.headers() or [])]
    value = m.value()
    return Record(m.partition(), m.offset(), ts if ts_type else None, _text(m.key(), 500), _text(value), headers,
                  len(value) if value is not None else 0)


def _matches(r: Record, needle: str) -> bool:
    n = needle.lower()
    return any(n in s.lower() for s in (r.key, r.value, *(v for _, v in r.headers)) if s)


def browse(target: Target, topic: str, *, partition: int | None = None, newest: int | None = None,
           offset: int | None = None, since_ms: int | None = None, limit: int = 100, search: str | None = None,
           max_scan: int = 10_000, max_seconds: float = 5.0) -> Browse:
    """Records of ``topic``: the ``newest`` of each partition (the default: 20), from ``offset`` (with a
    partition), or from ``since_ms``; at most ``limit``, newest first for ``newest``, in offset order else."""
    from confluent_kafka import TopicPartition

    if sum(x is not None for x in (newest, offset, since_ms)) > 1:
        raise UsageError("choose one of newest, offset and since")
    if offset is not None and partition is None:
        raise UsageError("an offset needs a partition")
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"limit must be 1..{MAX_LIMIT}")
    if not 1 <= max_scan <= MAX_SCAN:
        raise UsageError(f"max_scan must be 1..{MAX_SCAN}")
    if offset is None and since_ms is None and newest is None:
        newest = 20
    # fetch.wait.max.ms: a browse reads what is there; a broker need not hold a fetch for more to arrive.
    extra: dict[str, Any] = {"enable.partition.eof": False, "fetch.max.bytes": 8 * 1024 * 1024,
                             "fetch.wait.max.ms": 50}
    c = make_consumer(target, **extra)
    try:
        # The one topic's metadata (a consumer never auto-creates it); the whole cluster's, with its clear
        # errors, only when that does not name it.
        tmd = c.list_topics(topic, timeout=10).topics.get(topic)
        if tmd is not None and tmd.error is None and tmd.partitions:
            parts = len(tmd.partitions)
        else:
            parts = require_topics(target, [topic], client=c)[topic]
        if partition is not None and not 0 <= partition < parts:
            raise UsageError(f"topic {topic!r} has partitions 0..{parts - 1}, not {partition}")
        wanted = [partition] if partition is not None else list(range(parts))
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in wanted}
        starts: dict[int, int] = {}
        if newest is not None:
            if newest < 1:
                raise UsageError("newest must be at least 1")
            back = max_scan // len(wanted) if search else newest
            starts = {p: max(lo, hi - back) for p, (lo, hi) in marks.items()}
            label = f"newest {newest}"
        elif offset is not None:
            lo, hi = marks[partition]  # type: ignore[index]
            starts = {partition: min(max(offset, lo), hi)}  # type: ignore[dict-item]
            label = f"offset {offset} of partition {partition}"
        else:
            assert since_ms is not None
            found = c.offsets_for_times([TopicPartition(topic, p, since_ms) for p in wanted], timeout=10)
            for tp in found:
                starts[tp.partition] = tp.offset if tp.offset >= 0 else marks[tp.partition][1]
            label = f"since {since_ms} ms"
        ends = {p: marks[p][1] for p in starts}
        todo = {p for p in starts if starts[p] < ends[p]}
        if todo:
            c.assign([TopicPartition(topic, p, starts[p]) for p in sorted(todo)])
        out: list[Record] = []
        scanned = 0
        stopped = "end"
        deadline = Deadline(max_seconds)
        enough = limit if newest is None else None  # newest: read to the end, keep the newest
        while todo:
            if deadline.passed():
                stopped = "time"
                break
            for m in c.consume(500, 0.2):
                if m.error() is not None:
                    continue
                p = m.partition()
                if p not in todo or m.offset() >= ends[p]:
                    todo.discard(p)
                    continue
                scanned += 1
                r = _record(m)
                if search is None or _matches(r, search):
                    out.append(r)
                if m.offset() >= ends[p] - 1:
                    todo.discard(p)
                if enough is not None and len(out) >= enough:
                    stopped = "limit"
                    todo.clear()
                    break
                if scanned >= max_scan:
                    stopped = "max_scan"
                    todo.clear()
                    break
        if newest is not None:
            out.sort(key=lambda r: (r.timestamp_ms or 0, r.offset), reverse=True)
            out = out[: min(limit, newest)]
        else:
            out.sort(key=lambda r: (r.timestamp_ms or 0, r.partition, r.offset))
            out = out[:limit]
        return Browse(topic, label, out, scanned, ends, stopped)
    finally:
        c.close()


@dataclass
class Produced:
    topic: str
    partition: int
    offset: int


def produce_one(target: Target, topic: str, value: str | None, key: str | None = None,
                headers: dict[str, str] | None = None, partition: int | None = None,
                timeout: float = 15.0) -> Produced:
    """One record with acks=all; where it was written (partition and offset), or the broker's refusal."""
    from confluent_kafka import KafkaException

    p = producer(target, timeout=timeout)
    require_topics(target, [topic], client=p)
    got: dict[str, Any] = {}

    def done(err: Any, msg: Any) -> None:
        got["err"], got["msg"] = err, msg

    try:
        kw: dict[str, Any] = {"key": key, "value": value, "headers": list((headers or {}).items()),
                              "on_delivery": done}
        if partition is not None:
            kw["partition"] = partition
        p.produce(topic, **kw)
    except KafkaException as exc:
        raise kafka_error(exc, f"cannot produce to {topic}", topic=topic) from None
    left = p.flush(timeout + 5)
    if left or "msg" not in got:
        raise KctlError(f"the record to {topic} was not acknowledged within {timeout:.0f} s",
                        hint="`kctl status`: are the topic's leaders and enough in-sync replicas there?")
    if got["err"] is not None:
        raise kafka_error(KafkaException(got["err"]), f"cannot produce to {topic}", topic=topic)
    msg = got["msg"]
    return Produced(topic, msg.partition(), msg.offset())
