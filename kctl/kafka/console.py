"""Console producer and consumer: lines in, records out; the consumer commits exactly what was printed.

Both work on blocks, not on single records: input is read and split a block at a
time, and the consumer hands out lists of messages (``consume(num_messages=...)``)
that are rendered into one buffer each.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kafka.client import CONNECT_TIMEOUT, MESSAGE_TIMEOUT, Target, consumer, require_reachable, require_topics
from kctl.kafka.produce import ProduceResult, Record, Values, send

BLOCK = 1 << 20  # input bytes per read
FETCH_BACKOFF_MS = 20


# ----- produce ------------------------------------------------------------------------------------


def open_input(path: Path | None) -> IO[bytes]:
    """The input as bytes: stdin for None or '-'."""
    if path is None or str(path) == "-":
        return sys.stdin.buffer
    try:
        return path.open("rb")
    except OSError as exc:
        raise KctlError(f"cannot read {path}: {exc.strerror}") from None


def line_blocks(stream: IO[bytes], block: int = BLOCK) -> Iterator[list[bytes]]:
    """Lines without their line ends, a block at a time; the last line may lack its newline.

    ``read1`` returns what is there (a line typed on a terminal, a pipe's buffer),
    so interactive input is sent line by line and a file in large blocks.
    """
    read = getattr(stream, "read1", stream.read)
    tail = b""
    while True:
        chunk = read(block)
        if not chunk:
            break
        lines = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
        tail = lines.pop()
        if lines:
            yield [ln.rstrip(b"\r") for ln in lines] if b"\r" in chunk else lines
    if tail:
        yield [tail.rstrip(b"\r")]


def records(stream: IO[bytes], key_separator: str | None, res: ProduceResult,
            block: int = BLOCK) -> Iterator[Sequence[Record]]:
    """Blocks of (key, value); a line without the key separator is counted failed in ``res``."""
    sep = key_separator.encode() if key_separator is not None else None
    seen = 0
    for lines in line_blocks(stream, block):
        if sep is None:
            res.bytes += sum(map(len, lines))
            yield Values(lines)
        else:
            parts = [ln.partition(sep) for ln in lines]
            pairs = [(k, v) for k, s, v in parts if s]
            if len(pairs) < len(parts):
                for i, (_, s, _) in enumerate(parts):
                    if not s:
                        res.failed += 1
                        res.note(f"line {seen + i + 1}: no key separator {key_separator!r} in line")
            res.bytes += sum(len(v) for _, v in pairs)
            yield pairs
        seen += len(lines)


def produce(target: Target, topic: str, source: Path | IO[bytes] | None = None,
            key_separator: str | None = None, acks: str = "all", timeout: float = MESSAGE_TIMEOUT) -> ProduceResult:
    """Send one record per input line (a file, a binary stream, or stdin); count what was acknowledged.

    The cluster and the topic are checked before the first line is read.
    """
    if key_separator == "":
        raise UsageError("--key-separator cannot be empty")
    res = ProduceResult(topic)
    stream = source if source is not None and not isinstance(source, Path) else open_input(source)
    try:
        return send(target, topic, records(stream, key_separator, res), acks=acks, timeout=timeout, result=res)
    finally:
        if isinstance(source, Path) and str(source) != "-":
            stream.close()


# ----- consume ------------------------------------------------------------------------------------


@dataclass
class ConsumeResult:
    topic: str
    group: str | None
    consumed: int = 0
    seconds: float = 0.0
    stopped_by: str = ""  # max, timeout, interrupt
    committed: dict[str, int] = field(default_factory=dict)  # "topic-partition" -> next offset


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


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def render(msgs: Sequence[Any], mode: str) -> bytes:
    """One output block: ``value`` lines, ``key`` (key<TAB>value, null for a missing part) or ``json`` lines.

    The value and key forms run their per-message loops in C (``map`` over the unbound
    methods, ``bytes.join``): a block of 50,000 messages is a few joins, not 50,000 Python steps.
    """
    if not msgs:
        return b""
    if mode in ("value", "key"):
        cls = type(msgs[0])
        values = list(map(cls.value, msgs))
        if mode == "value":
            if None in values:
                values = [v or b"" for v in values]
            values.append(b"")  # the last line's end
            return b"\n".join(values)
        keys = list(map(cls.key, msgs))
        if None in values:
            values = [b"null" if v is None else v for v in values]
        if None in keys:
            keys = [b"null" if k is None else k for k in keys]
        lines = list(map(b"\t".join, zip(keys, values, strict=True)))
        lines.append(b"")
        return b"\n".join(lines)
    out = []
    for m in msgs:
        kind, ts = m.timestamp()
        out.append(json.dumps({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                               "timestamp_ms": ts if kind else None, "key": _text(m.key()),
                               "value": _text(m.value())}))
    return ("\n".join(out) + "\n").encode()


def split_errors(msgs: list[Any]) -> tuple[list[Any], list[Any]]:
    """(messages, errors): error events come in the same list as messages, rarely; the check runs in C."""
    if not msgs:
        return msgs, []
    errors = list(map(type(msgs[0]).error, msgs))
    # any(), not errors.count(None): KafkaError's == raises when compared with None.
    if not any(errors):
        return msgs, []
    return [m for m, e in zip(msgs, errors, strict=True) if e is None], [e for e in errors if e is not None]


# A consumer with an identity check waits this long for its first Metadata answer before it lets the check
# ask on its own: a stopped cluster is then said to be one in about 3 s, not after the whole CONNECT_TIMEOUT.
FIRST_ANSWER = 1.0


class ConsoleConsumer:
    """Consume a topic in blocks; ``printed(block)`` marks a block as shown, and only that is committed.

    Without a group it reads the partitions directly (assign), as kcat does: no group
    join, nothing committed. With a group it subscribes and, on leaving, commits the
    offset after the last printed message of each partition. Use as a context manager.
    """

    POLL = 0.2  # short waits so that Ctrl-C and --timeout are seen promptly
    BATCH = 50_000

    def __init__(self, target: Target, topic: str, group: str | None = None,
                 from_beginning: bool = False, max_messages: int | None = None, timeout: float | None = None,
                 partition: int | None = None, offset: str | None = None,
                 check: Callable[[str | None], object] | None = None) -> None:
        """``check``: called with the cluster id of this consumer's first Metadata answer (None when no
        broker answered), before anything else is asked or read; it raises to refuse the cluster
        (:func:`kctl.cli.common.connect_by_metadata`). Not for a group: the group would be looked up
        on a cluster not yet checked."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

        if offset is not None and partition is None:
            raise UsageError("--offset needs --partition")
        if max_messages is not None and max_messages < 1:
            raise UsageError("--max must be at least 1")
        start_at = parse_offset(offset)
        self.topic = topic
        self.group = group
        self.max = max_messages
        self.timeout = timeout
        self.result = ConsumeResult(topic, group)
        self._next: dict[int, int] = {}
        self._closed = False
        extra: dict[str, Any] = {"auto.offset.reset": "earliest" if from_beginning else "latest",
                              # librdkafka postpones a partition's next fetch by this much (1 s by
                              # default) when its local queue looks full; a console consumer drains
                              # the queue in large blocks, so that wait would only stall it.
                              "fetch.queue.backoff.ms": FETCH_BACKOFF_MS}
        if check is not None and group:
            raise ValueError("a consumer group's cluster is checked before its consumer is made")
        self._c = consumer(target, group=group, **extra)
        try:
            md = None
            try:
                md = require_reachable(target, client=self._c,
                                       timeout=CONNECT_TIMEOUT if check is None else FIRST_ANSWER)
            except ClusterError:
                if check is None:
                    raise
                # Not running, or another cluster on its ports: said as such (the check asks on its own).
                check(None)
            if md is None:  # running, only slow to answer: the usual wait
                md = require_reachable(target, client=self._c)
            if check is not None:
                check(md.cluster_id)
            parts = require_topics(target, [topic], client=self._c, metadata=md)[topic]
            if partition is not None and not 0 <= partition < parts:
                raise UsageError(f"topic {topic!r} has partitions 0..{parts - 1}, not {partition}")
        except BaseException:
            self._closed = True
            self._c.close()
            raise
        default = OFFSET_BEGINNING if from_beginning else OFFSET_END
        if partition is not None:
            o = start_at if start_at is not None else "earliest" if from_beginning else "latest"
            pos = OFFSET_BEGINNING if o == "earliest" else OFFSET_END if o == "latest" else int(o)
            self._c.assign([TopicPartition(topic, partition, pos)])
        elif group:
            # A group's committed offsets win over --from-beginning, as in kafka-console-consumer.
            self._c.subscribe([topic])
        else:
            self._c.assign([TopicPartition(topic, p, default) for p in range(parts)])
        self._start = time.monotonic()

    def __enter__(self) -> ConsoleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batches(self) -> Iterator[list[Any]]:
        """Lists of messages, never more in total than --max; ends at --max, --timeout or Ctrl-C."""
        idle_since = time.monotonic()
        consume = self._c.consume
        try:
            while self.max is None or self.result.consumed < self.max:
                want = self.BATCH if self.max is None else min(self.BATCH, self.max - self.result.consumed)
                # What is already fetched, without waiting for a full batch; when nothing is,
                # wait (briefly, for Ctrl-C and --timeout) for the first message only.
                msgs = consume(want, 0)
                if not msgs:
                    msgs = consume(1, self.POLL)
                    if msgs and want > 1:
                        msgs += consume(want - 1, 0)
                now = time.monotonic()
                good, errors = split_errors(msgs)
                for err in errors:
                    if err.fatal():
                        raise KctlError(f"consumer failed: {err}")
                if not good:
                    if self.timeout is not None and now - idle_since >= self.timeout:
                        self.result.stopped_by = "timeout"
                        return
                    continue
                idle_since = now
                yield good
            self.result.stopped_by = "max"
        except KeyboardInterrupt:
            self.result.stopped_by = "interrupt"

    def printed(self, msgs: Sequence[Any]) -> None:
        self.result.consumed += len(msgs)
        if self.group:
            nxt = self._next
            for m in msgs:
                nxt[m.partition()] = m.offset() + 1

    def close(self) -> None:
        from confluent_kafka import TopicPartition

        if self._closed:
            return
        self._closed = True
        self.result.seconds = time.monotonic() - self._start
        try:
            if self.group and self._next:
                tps = [TopicPartition(self.topic, p, o) for p, o in sorted(self._next.items())]
                self._c.commit(offsets=tps, asynchronous=False)
                self.result.committed = {f"{self.topic}-{p}": o for p, o in sorted(self._next.items())}
        finally:
            self._c.close()

