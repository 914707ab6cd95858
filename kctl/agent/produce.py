"""Ship events to Kafka: the generator's events, or a real file followed tail -F style.

Events are keyed by host, with the Java client's murmur2 partitioner and an
idempotent producer, so that each host's lines land in one partition in order.
Every loop is bounded in count and in time.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kctl.agent.nginx import filebeat_event
from kctl.errors import KctlError
from kctl.files import follow_lines
from kctl.stream.preflight import check_topics


@dataclass
class ProduceResult:
    topic: str
    produced: int
    delivered: int
    failed: int
    seconds: float
    rate: float
    first_error: str | None = None


def producer(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    from kctl.kafka.client import base_config

    conf: dict[str, Any] = {
        **base_config(bootstrap=bootstrap),  # librdkafka's own log lines stay off the terminal
        "enable.idempotence": True,  # retries never reorder or duplicate a host's lines
        "partitioner": "murmur2_random",  # same partition for a key as the Java client
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.timeout.ms": 30000,
    }
    conf.update(extra)
    return Producer(conf)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[str | None, str]],
    *,
    rate: float | None = None,
    max_seconds: float = 600.0,
    check: bool = True,
    on_sent: Any = None,
) -> ProduceResult:
    """Send (key, value) records, paced at ``rate`` per second (None: as fast as possible)."""
    if check:
        check_topics(bootstrap, [topic])
    p = producer(bootstrap)
    state = {"delivered": 0, "failed": 0}
    first_error: list[str] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None:
            state["failed"] += 1
            if not first_error:
                first_error.append(str(err))
        else:
            state["delivered"] += 1

    t0 = time.monotonic()
    n = 0
    for key, value in records:
        if time.monotonic() - t0 > max_seconds:
            break
        if rate:
            ahead = n / rate - (time.monotonic() - t0)
            if ahead > 0:
                p.poll(ahead)
        while True:
            try:
                p.produce(topic, key=key.encode() if key is not None else None, value=value.encode(), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        if on_sent is not None:
            on_sent(n, key, value)
        n += 1
        p.poll(0)
    remaining = p.flush(max(5.0, min(60.0, max_seconds)))
    secs = time.monotonic() - t0
    if remaining:
        state["failed"] += remaining
    res = ProduceResult(topic, n, state["delivered"], state["failed"], round(secs, 3),
                        round(n / secs, 1) if secs > 0 else 0.0, first_error[0] if first_error else None)
    if res.failed and not res.delivered:
        raise KctlError(f"no event reached topic {topic} on {bootstrap}: {res.first_error}",
                        hint="is the cluster healthy? try `kctl status`")
    return res


def ship_file(
    bootstrap: str,
    topic: str,
    path: Path,
    *,
    follow: bool = False,
    host: str | None = None,
    max_seconds: float = 3600.0,
    max_lines: int | None = None,
) -> ProduceResult:
    """A small log agent: each line of ``path`` as a filebeat event keyed by host."""
    check_topics(bootstrap, [topic])
    host = host or socket.gethostname()
    if not follow and not path.exists():
        raise KctlError(f"{path}: no such file")

    def records() -> Iterator[tuple[str, str]]:
        for off, line in follow_lines(path, follow=follow, max_seconds=max_seconds, max_lines=max_lines):
            ev = filebeat_event(line, host=host, timestamp=dt.datetime.now(dt.timezone.utc), offset=off,
                                topic=topic, path=str(path.resolve()))
            yield host, json.dumps(ev, separators=(",", ":"))

    return produce(bootstrap, topic, records(), max_seconds=max_seconds, check=False)
