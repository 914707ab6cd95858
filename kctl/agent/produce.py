"""Ship events to Kafka: the generator's events, or a real file followed tail -F style.

Events are keyed by host, with the Java client's murmur2 partitioner and an
idempotent producer, so that each host's lines land in one partition in order.
Every loop is bounded in count and in time.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kctl.agent.nginx import filebeat_event
from kctl.errors import KctlError
from kctl.kafka.client import producer as kafka_producer
from kctl.kafka.client import require_topics
from kctl.kafka.produce import ProduceResult, Record, send, singles

# The Java client's murmur2 partitioner and idempotence come from the client factory;
# the agent adds compression (JSON events shrink well) for its own records.
AGENT_CONFIG: dict[str, Any] = {"compression.type": "lz4", "linger.ms": 5}
BLOCK = 10_000

__all__ = ["ProduceResult", "follow_lines", "produce", "producer", "ship_file"]


def producer(bootstrap: str, **extra: Any) -> Any:
    """A producer configured as the agent's (for callers that need their own delivery callbacks)."""
    return kafka_producer(bootstrap=bootstrap, **{**AGENT_CONFIG, **extra})


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    *,
    rate: float | None = None,
    max_seconds: float = 600.0,
    check: bool = True,
) -> ProduceResult:
    """Send (key, value) records, paced at ``rate`` per second (None: as fast as possible)."""
    if isinstance(records, Sequence) and rate is None:
        blocks: Iterable[Sequence[Record]] = (records[i:i + BLOCK] for i in range(0, len(records), BLOCK))
    else:
        blocks = singles(records)  # a followed file or a paced generator: each record goes out at once
    res = send(topic, blocks, bootstrap=bootstrap, rate=rate, max_seconds=max_seconds, check=check, **AGENT_CONFIG)
    if res.failed and not res.delivered:
        raise KctlError(f"no event reached topic {topic} on {bootstrap}: {res.errors[0] if res.errors else '?'}",
                        hint="is the cluster healthy? try `kctl status`")
    return res


def follow_lines(
    path: Path, *, follow: bool, max_seconds: float, max_lines: int | None, poll_s: float = 0.2
) -> Iterator[tuple[int, str]]:
    """(offset, line) of a file; with ``follow``, tail -F: wait for growth, reopen on rotation."""
    deadline = time.monotonic() + max_seconds
    sent = 0
    offset = 0
    while True:
        try:
            f = path.open("rb")
        except FileNotFoundError:
            if not follow:
                raise KctlError(f"{path}: no such file") from None
            if time.monotonic() > deadline:
                return
            time.sleep(poll_s)
            continue
        with f:
            ino = os.fstat(f.fileno()).st_ino
            f.seek(offset)
            partial = b""
            while True:
                raw = f.readline()
                if raw.endswith(b"\n"):
                    line = (partial + raw).rstrip(b"\r\n").decode("utf-8", errors="replace")
                    start = offset
                    offset += len(partial) + len(raw)
                    partial = b""
                    if line:
                        yield start, line
                        sent += 1
                        if max_lines is not None and sent >= max_lines:
                            return
                    continue
                partial += raw  # incomplete last line: wait for its newline
                if not follow or time.monotonic() > deadline:
                    if partial and not follow:
                        yield offset, partial.decode("utf-8", errors="replace")
                    return
                time.sleep(poll_s)
                try:
                    st = path.stat()
                except FileNotFoundError:
                    st = None
                if st is None or st.st_ino != ino or st.st_size < offset + len(partial):
                    offset = 0  # rotated or truncated: start over on the new file
                    break
                f.seek(offset + len(partial))


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
    require_topics(None, [topic], bootstrap)
    host = host or socket.gethostname()
    if not follow and not path.exists():
        raise KctlError(f"{path}: no such file")

    def records() -> Iterator[tuple[str, str]]:
        for off, line in follow_lines(path, follow=follow, max_seconds=max_seconds, max_lines=max_lines):
            ev = filebeat_event(line, host=host, timestamp=dt.datetime.now(dt.timezone.utc), offset=off,
                                topic=topic, path=str(path.resolve()))
            yield host, json.dumps(ev, separators=(",", ":"))

    return produce(bootstrap, topic, records(), max_seconds=max_seconds, check=False)
