"""The drill's producer: records at a steady rate, each value a sequence number, every acknowledgement kept.

Record ``seq`` goes to partition ``seq % partitions`` with the value ``b"<seq>"``, so a partition's
records carry increasing sequence numbers in produce order. The delivery callback records each
acknowledged (partition, offset, seq) and each failure by its error code; the per-second timeline
holds acknowledgements, errors and the p99 of produce-to-acknowledgement latency.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kctl.kafka.client import Target, producer
from kctl.model.spec import ClusterSpec

FLUSH_MARGIN = 5.0


@dataclass
class Second:
    """One second of the drill, counted from the start of the load."""

    second: int
    acked: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def p99_ms(self) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1)


@dataclass
class LoadRecord:
    """What the producer saw: the checker compares it with what the topic holds."""

    topic: str
    partitions: int
    acks: str
    idempotent: bool
    rate: float
    produced: int = 0
    acked: list[tuple[int, int, int]] = field(default_factory=list)  # (partition, offset, seq)
    errors: Counter[str] = field(default_factory=Counter)
    ack_times: list[float] = field(default_factory=list)  # seconds since start, one per acknowledgement
    seconds: dict[int, Second] = field(default_factory=dict)
    started: float = 0.0  # time.monotonic() at the first record
    stopped: float = 0.0  # when producing stopped (before the final flush)
    unfinished: int = 0  # still queued after the final flush: neither acknowledged nor failed

    def second(self, t: float) -> Second:
        s = int(t)
        if s not in self.seconds:
            self.seconds[s] = Second(s)
        return self.seconds[s]


class Load:
    """A producer thread: ``start()``, ``stop()`` (flushes, bounded in time), ``record``."""

    def __init__(self, spec: ClusterSpec, topic: str, partitions: int, *, rate: float, acks: str = "all",
                 message_timeout: float = 120.0, max_seconds: float = 3600.0) -> None:
        self.spec = spec
        self.idempotent = acks in ("all", "-1")
        self.record = LoadRecord(topic, partitions, acks, self.idempotent, rate)
        self.message_timeout = message_timeout
        self.max_seconds = max_seconds
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        self.failure: BaseException | None = None

    def start(self) -> Load:
        extra: dict[str, Any] = {"enable.idempotence": self.idempotent, "linger.ms": 5,
                                 "queue.buffering.max.messages": 1_000_000}
        self._producer = producer(Target.of(self.spec), acks=self.record.acks, timeout=self.message_timeout, **extra)
        self._thread = threading.Thread(target=self._run, name="kctl-drill-load", daemon=True)
        self.record.started = time.monotonic()
        self._thread.start()
        return self

    def elapsed(self) -> float:
        return time.monotonic() - self.record.started

    def acked_count(self) -> int:
        with self._lock:
            return len(self.record.acked)

    def _on_delivery(self, seq: int, sent: float) -> Any:
        rec = self.record

        def done(err: Any, msg: Any) -> None:
            now = time.monotonic()
            sec = rec.second(now - rec.started)
            with self._lock:
                if err is not None:
                    rec.errors[str(err.name())] += 1
                    sec.errors += 1
                    return
                # An idempotent producer's retry that the broker had already written (DUPLICATE_SEQUENCE_NUMBER)
                # is acknowledged without an offset: -1, the record is checked by its value alone.
                offset = msg.offset()
                rec.acked.append((int(msg.partition()), -1 if offset is None or offset < 0 else int(offset), seq))
                rec.ack_times.append(now - rec.started)
                sec.acked += 1
                sec.latencies_ms.append((now - sent) * 1000)
        return done

    def _run(self) -> None:
        rec, p = self.record, self._producer
        interval = 1.0 / rec.rate
        seq = 0
        try:
            while not self._stop.is_set() and self.elapsed() < self.max_seconds:
                due = rec.started + seq * interval
                now = time.monotonic()
                if now < due:
                    # librdkafka takes whole milliseconds: a wait under one would return at once and spin
                    p.poll(min(max(due - now, 0.001), 0.05))
                    continue
                try:
                    p.produce(rec.topic, value=str(seq).encode(), partition=seq % rec.partitions,
                              on_delivery=self._on_delivery(seq, now))
                except BufferError:
                    p.poll(0.05)
                    continue
                seq += 1
                rec.produced = seq
                p.poll(0)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by stop()
            self.failure = exc
        finally:
            rec.stopped = time.monotonic()

    def stop(self) -> LoadRecord:
        """Stop producing and wait for every outstanding acknowledgement (at most the message timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._producer is not None:
            self.record.unfinished = int(self._producer.flush(self.message_timeout + FLUSH_MARGIN))
        if self.failure is not None:
            raise self.failure
        return self.record
