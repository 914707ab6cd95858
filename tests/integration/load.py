"""An acks=all load for tests that change a running cluster (a migration, an upgrade), and kcat's read-back:
the producer counts what was acknowledged and its longest stall; kcat, an independent client, reads it all."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from typing import Any


class Load:
    """An idempotent acks=all producer writing numbers 0, 1, 2... (bounded in count and time); the longest
    stretch without an acknowledgement is its stall."""

    def __init__(self, bootstrap: str | dict[str, str], topic: str, max_records: int = 100_000,
                 max_seconds: float = 600) -> None:
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else dict(bootstrap)  # or a login
        self.producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        self.topic, self.max_records, self.max_seconds = topic, max_records, max_seconds
        self.acked: set[int] = set()
        self.errors: list[str] = []
        self.refused: list[str] = []  # produce() calls refused at once (retried)
        self.stall = 0.0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        now = time.monotonic()
        self.stall = max(self.stall, now - self._last)
        self._last = now
        self.acked.add(int(msg.value()))

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        end = time.monotonic() + self.max_seconds
        i = 0
        while not self._stop.is_set() and i < self.max_records and time.monotonic() < end:
            try:
                self.producer.produce(self.topic, value=str(i).encode(), on_delivery=self._cb)
            except (BufferError, KafkaException) as exc:
                # Refused before it was sent (a full queue; a broker mid-roll answering that it does not know
                # the topic yet): nothing was acknowledged, so the same number is tried again.
                self.refused.append(str(exc))
                self.producer.poll(0.1)
                continue
            self.producer.poll(0)
            i += 1
            time.sleep(0.004)
        self.producer.flush(120)

    def failures(self) -> list[str]:
        """The delivery errors but those a restarted broker's empty metadata causes (the one broker of a
        single-node cluster in a roll; a Swarm node's new task): a broker started again in ZooKeeper mode answers
        with no topics and no other brokers until the controller's UpdateMetadata reaches it, and the client then
        fails the records it holds for that topic ("Unknown partition") or for the brokers it no longer sees
        ("Broker handle destroyed"). Such a record was never acknowledged; everything else (a timeout, too few
        in-sync replicas) counts."""
        return [e for e in self.errors if not any(k in e for k in ("_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC",
                                                                   "_DESTROY"))]

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self._thread.join(180)


def _consumer(bootstrap: str | dict[str, str]) -> Any:
    """A consumer of no group that commits nothing, from the earliest offset (``bootstrap`` may be a client's
    settings: a secured cluster's login)."""
    import uuid

    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else dict(bootstrap)
    return Consumer({**conf, "group.id": f"t-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})


def _marks(consumer: Any, topic: str) -> dict[int, tuple[int, int]]:
    """Each partition of ``topic``'s (low, high) watermarks now."""
    from confluent_kafka import TopicPartition

    parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in parts}


def kcat_values(bootstrap: str | dict[str, str], topic: str) -> list[int]:
    """Every value of ``topic`` up to its end offsets when called, read by kcat (an independent client), a kcat per
    partition from its first offset for as many records as it holds: `kcat -e` alone would wait for every
    partition to be at its end at once, which a load still writing may never leave it (the secured migration's
    test timed out so). ``bootstrap`` may be a client's settings (a secured cluster's login: given to kcat in a
    private file, never as arguments); confluent-kafka reads the offsets only."""
    import os
    import tempfile

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is installed by make setup"
    c = _consumer(bootstrap)
    try:
        marks = _marks(c, topic)
    finally:
        c.close()
    values: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:  # mode 0700
        if isinstance(bootstrap, str):
            where = ["-b", bootstrap]
        else:
            path = os.path.join(tmp, "kcat.conf")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write("".join(f"{k}={v}\n" for k, v in bootstrap.items()))
            where = ["-F", path]
        for p, (low, high) in marks.items():
            if high <= low:
                continue
            done = subprocess.run([kcat, "-C", *where, "-t", topic, "-p", str(p), "-o", str(low), "-c",
                                   str(high - low), "-e", "-q", "-f", "%s\n"], capture_output=True, text=True,
                                  timeout=180)
            assert done.returncode == 0, done.stderr
            values += [int(v) for v in done.stdout.split()]
    return values


def read_values(bootstrap: str | dict[str, str], topic: str, timeout: float = 120) -> list[int]:
    """A test's own reader (neither kctl's nor a drill's): every value of every partition of ``topic`` up to its
    end offsets, no group (``bootstrap`` may be a client's settings: a secured cluster's login). Bounded: timeout."""
    from confluent_kafka import TopicPartition

    c = _consumer(bootstrap)
    try:
        ends = {p: high for p, (_low, high) in _marks(c, topic).items()}
        parts = sorted(ends)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        got = dict.fromkeys(parts, 0)
        values: list[int] = []
        deadline = time.monotonic() + timeout
        while any(got[p] < ends[p] for p in parts) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1.0):
                if m.error() is None:
                    values.append(int(m.value()))
                    got[m.partition()] = m.offset() + 1
        return values
    finally:
        c.close()
