"""Console producer and consumer: lines in, records out; the consumer commits exactly what was printed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.kafka.client import admin, base_config, require_reachable, wait_for_topic
from kctl.spec import ClusterSpec

ACKS = ("all", "-1", "0", "1")


@dataclass
class ProduceResult:
    topic: str
    delivered: int = 0
    failed: int = 0
    seconds: float = 0.0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)  # the first few distinct reasons

    @property
    def records_per_second(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None


@dataclass
class ConsumeResult:
    topic: str
    group: str | None
    consumed: int = 0
    seconds: float = 0.0
    stopped_by: str = ""  # max, timeout, interrupt, eof
    committed: dict[str, int] = field(default_factory=dict)  # "topic-partition" -> next offset


def require_topic(spec: ClusterSpec | None, topic: str, bootstrap: str | None) -> int:
    md = require_reachable(spec, bootstrap)
    if topic not in md.topics:
        # Just created? Give the brokers' metadata a moment before calling it missing.
        t = wait_for_topic(admin(spec, bootstrap), topic, timeout=3.0)
        if t is not None:
            return len(t.partitions)
        raise KctlError(f"topic {topic!r} does not exist",
                        hint=f"create it: `kctl topic create {topic} --partitions 3 --replication-factor 3`")
    return len(md.topics[topic].partitions)


def split_line(line: str, key_separator: str | None) -> tuple[str | None, str]:
    """(key, value) of one input line; ValueError when a key separator is expected but missing."""
    if key_separator is None:
        return None, line
    key, sep, value = line.partition(key_separator)
    if not sep:
        raise ValueError(f"no key separator {key_separator!r} in line")
    return key, value


def produce(spec: ClusterSpec | None, topic: str, lines: Iterable[str], key_separator: str | None = None,
            acks: str = "all", bootstrap: str | None = None, timeout: float = 30.0,
            extra: dict[str, Any] | None = None) -> ProduceResult:
    """Send one record per line; count what the brokers acknowledged and what failed."""
    from confluent_kafka import KafkaException, Producer

    if acks not in ACKS:
        raise UsageError(f"--acks {acks!r}: one of {', '.join(ACKS)}")
    require_topic(spec, topic, bootstrap)
    res = ProduceResult(topic)

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            res.delivered += 1
        else:
            res.failed += 1
            if len(res.errors) < 5 and str(err) not in res.errors:
                res.errors.append(str(err))

    conf = {**base_config(spec, bootstrap), "acks": acks, "enable.idempotence": acks in ("all", "-1"),
            "message.timeout.ms": int(timeout * 1000), "linger.ms": 5, **(extra or {})}
    p = Producer(conf)
    start = time.monotonic()
    try:
        for n, raw in enumerate(lines, 1):
            line = raw.rstrip("\r\n")
            try:
                key, value = split_line(line, key_separator)
            except ValueError as exc:
                res.failed += 1
                if len(res.errors) < 5:
                    res.errors.append(f"line {n}: {exc}")
                continue
            res.bytes += len(value)
            while True:
                try:
                    p.produce(topic, value=value.encode(), key=key.encode() if key is not None else None,
                              on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    p.poll(0.1)
                except KafkaException as exc:
                    raise KctlError(f"cannot produce to {topic}: {exc}") from None
            p.poll(0)
    finally:
        remaining = p.flush(timeout)
        res.seconds = time.monotonic() - start
    if remaining:
        res.failed += remaining
        res.errors.append(f"{remaining} record(s) not acknowledged within {timeout:.0f}s")
    return res


def parse_offset(text: str | None) -> int | str | None:
    if text is None:
        return None
    if text in ("earliest", "beginning"):
        return "earliest"
    if text in ("latest", "end"):
        return "latest"
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"--offset {text!r}: a number, earliest or latest") from None
    if n < 0:
        raise UsageError("--offset must be 0 or more")
    return n


class ConsoleConsumer:
    """Consume a topic; ``printed(rec)`` marks a record as shown, and only those are committed.

    Use as a context manager: leaving it commits (when a group was given) and closes.
    """

    POLL = 0.2  # short polls so Ctrl-C is seen promptly

    def __init__(self, spec: ClusterSpec | None, topic: str, group: str | None = None,
                 from_beginning: bool = False, max_messages: int | None = None, timeout: float | None = None,
                 partition: int | None = None, offset: str | None = None, bootstrap: str | None = None) -> None:
        if offset is not None and partition is None:
            raise UsageError("--offset needs --partition")
        if max_messages is not None and max_messages < 1:
            raise UsageError("--max must be at least 1")
        parts = require_topic(spec, topic, bootstrap)
        if partition is not None and not 0 <= partition < parts:
            raise UsageError(f"topic {topic!r} has partitions 0..{parts - 1}, not {partition}")
        self.topic = topic
        self.group = group
        self.max = max_messages
        self.timeout = timeout
        self.result = ConsumeResult(topic, group)
        self._next: dict[tuple[str, int], int] = {}
        conf = {**base_config(spec, bootstrap),
                # As kafka-console-consumer: a random group, and no commits, when none is given.
                "group.id": group or f"kctl-console-consumer-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
                "enable.partition.eof": False}
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

        self._c = Consumer(conf)
        if partition is not None:
            o = parse_offset(offset)
            if o is None:
                o = "earliest" if from_beginning else "latest"
            start = OFFSET_BEGINNING if o == "earliest" else OFFSET_END if o == "latest" else int(o)
            self._c.assign([TopicPartition(topic, partition, start)])
        else:
            self._c.subscribe([topic])
        self._start = time.monotonic()

    def __enter__(self) -> ConsoleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def records(self) -> Iterator[Record]:
        idle_since = time.monotonic()
        try:
            while self.max is None or self.result.consumed < self.max:
                msg = self._c.poll(self.POLL)
                now = time.monotonic()
                if msg is None:
                    if self.timeout is not None and now - idle_since >= self.timeout:
                        self.result.stopped_by = "timeout"
                        return
                    continue
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise KctlError(f"consumer failed: {err}")
                    continue
                idle_since = now
                key, value = msg.key(), msg.value()
                yield Record(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0),
                             key.encode() if isinstance(key, str) else key,
                             value.encode() if isinstance(value, str) else value,
                             msg.timestamp()[1] if msg.timestamp()[0] else None)
            self.result.stopped_by = "max"
        except KeyboardInterrupt:
            self.result.stopped_by = "interrupt"

    def printed(self, rec: Record) -> None:
        self.result.consumed += 1
        self._next[(rec.topic, rec.partition)] = rec.offset + 1

    def close(self) -> None:
        from confluent_kafka import TopicPartition

        if getattr(self, "_closed", False):
            return
        self._closed = True
        self.result.seconds = time.monotonic() - self._start
        try:
            if self.group and self._next:
                tps = [TopicPartition(t, p, o) for (t, p), o in sorted(self._next.items())]
                self._c.commit(offsets=tps, asynchronous=False)
                self.result.committed = {f"{t}-{p}": o for (t, p), o in sorted(self._next.items())}
        finally:
            self._c.close()
