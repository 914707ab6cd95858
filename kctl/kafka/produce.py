"""The one produce loop, for `kctl produce` and the log agent.

Records go to librdkafka in blocks with a large local queue. Only failed records
come back as delivery reports (``delivery.report.only.error``), so the Python
work per record is the ``produce`` call itself: a record is delivered when it was
handed over, did not fail and was not still waiting when the final flush ended
(librdkafka reports every failure, a timeout included, before the message leaves
its queues). Every loop is bounded in time: ``max_seconds``, and ``timeout`` per record.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.kafka.client import MESSAGE_TIMEOUT, Target, error_code, kafka_error, producer, require_topics
from kctl.wait import Deadline

ACKS = ("all", "-1", "0", "1")
QUEUE_MESSAGES = 1_000_000  # librdkafka's local queue: room for a whole input block and more
FLUSH_MARGIN = 5.0  # after message.timeout.ms, librdkafka's timeout scan still needs a moment to report
MAX_ERRORS = 5

Record = tuple[Any, Any]  # (key, value): bytes, str or None


class Values(list[Any]):
    """A block of values without keys: sent as is, without a (None, value) pair per record."""

    def pairs(self) -> Iterator[Record]:
        return zip(itertools.repeat(None), self)


@dataclass
class ProduceResult:
    topic: str
    produced: int = 0  # handed to the producer
    delivered: int = 0  # acknowledged by the brokers
    failed: int = 0  # rejected input, failed deliveries, and records without an acknowledgement in time
    seconds: float = 0.0
    bytes: int = 0  # value bytes handed to the producer
    records_per_second: float = 0.0
    errors: list[str] = field(default_factory=list)  # the first few distinct reasons

    def note(self, reason: str) -> None:
        if len(self.errors) < MAX_ERRORS and reason not in self.errors:
            self.errors.append(reason)


def singles(records: Iterable[Record]) -> Iterator[Sequence[Record]]:
    """One-record blocks: for sources that produce slowly (a followed file, paced generation)."""
    for r in records:
        yield (r,)


def send(target: Target, topic: str, blocks: Iterable[Sequence[Record]], *, acks: str = "all",
         timeout: float = MESSAGE_TIMEOUT,
         rate: float | None = None, max_seconds: float | None = None, result: ProduceResult | None = None,
         check: bool = True, **extra: Any) -> ProduceResult:
    """Send blocks of (key, value) records; ``rate`` paces them per second (None: as fast as possible).

    ``check``: first make sure the cluster answers and the topic exists (before any input is read).
    ``result`` may already count input the caller rejected; this adds what the brokers did.
    """
    from confluent_kafka import KafkaException

    if acks not in ACKS:
        raise UsageError(f"--acks {acks!r}: one of {', '.join(ACKS)}")
    res = result if result is not None else ProduceResult(topic)
    dr_failed = 0

    def on_failure(err: Any, _msg: Any) -> None:
        nonlocal dr_failed
        dr_failed += 1
        res.note(str(err))

    p = producer(target, acks=acks, timeout=timeout, **{
        "delivery.report.only.error": True, "on_delivery": on_failure,
        "queue.buffering.max.messages": QUEUE_MESSAGES, **extra})
    if check:
        require_topics(target, [topic], client=p)
    produce, poll = p.produce, p.poll
    sent = rejected = 0
    t0 = time.monotonic()
    deadline = Deadline(max_seconds) if max_seconds is not None else None
    remaining = 0
    try:
        for block in blocks:
            if deadline is not None and deadline.passed():
                break
            if not rate and len(block) > 1:
                # One call per block: librdkafka's batch produce halves the Python work per record.
                ok, bad = _produce_block(p, topic, block, res)
                sent += ok
                rejected += bad
                poll(0)
                continue
            for key, value in (block.pairs() if isinstance(block, Values) else block):
                if rate:
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        poll(ahead)
                try:
                    try:
                        produce(topic, value, key)
                    except BufferError:  # local queue full: let deliveries drain, then hand it over
                        _produce_when_room(p, topic, key, value)
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    if err is not None and err.fatal():
                        raise kafka_error(exc, f"cannot produce to {topic}", topic=topic) from None
                    rejected += 1  # e.g. a record above message.max.bytes: that record fails, the rest go on
                    res.note(error_code(exc)[1])
                    continue
                sent += 1
            poll(0)
    finally:
        remaining = p.flush(timeout + FLUSH_MARGIN)
        res.seconds += time.monotonic() - t0
    res.produced += sent
    res.failed += rejected + dr_failed + remaining
    res.delivered += sent - dr_failed - remaining
    if remaining:
        res.note(f"{remaining} record(s) not acknowledged within {timeout:.0f}s")
    res.records_per_second = round(res.delivered / res.seconds, 1) if res.seconds > 0 else 0.0
    return res


def _produce_block(p: Any, topic: str, block: Sequence[Record], res: ProduceResult) -> tuple[int, int]:
    """Hand a block over with ``produce_batch``; returns (sent, rejected).

    A record the local queue had no room for is handed over once there is room; a record
    librdkafka refuses (e.g. above message.max.bytes) fails alone; a fatal error stops the send.
    """
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(block, Values):
        msgs = [{"value": v} for v in block]
    else:
        msgs = [{"key": k, "value": v} for k, v in block]
    queued = p.produce_batch(topic, msgs)
    if queued == len(msgs):
        return queued, 0
    sent = rejected = 0
    for m in msgs:
        err = m.get("_error")
        if err is not None and err.code() == KafkaError._QUEUE_FULL:
            try:
                _produce_when_room(p, topic, m.get("key"), m["value"])
                err = None
            except KafkaException as exc:
                err = exc.args[0]
        if err is None:
            sent += 1
        elif err.fatal():
            raise kafka_error(KafkaException(err), f"cannot produce to {topic}", topic=topic)
        else:
            rejected += 1  # that record fails, the rest go on
            res.note(str(err.str()))
    return sent, rejected


def _produce_when_room(p: Any, topic: str, key: Any, value: Any) -> None:
    deadline = Deadline(MESSAGE_TIMEOUT)
    while True:
        p.poll(0.05)
        try:
            p.produce(topic, value, key)
            return
        except BufferError:
            if deadline.passed():
                raise KctlError(f"cannot produce to {topic}: the local queue stayed full for "
                                f"{MESSAGE_TIMEOUT:.0f}s", hint="is the cluster healthy? `kctl status`") from None
