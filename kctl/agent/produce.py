"""Ship events to Kafka: the generator's events, or a real file followed tail -F style.

Events are keyed by host, with the Java client's murmur2 partitioner and an
idempotent producer, so that each host's lines land in one partition in order.
Every loop is bounded in count and in time.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kctl.agent.nginx import filebeat_event
from kctl.errors import KctlError
from kctl.files import follow_lines
from kctl.kafka.client import Target, require_topics
from kctl.kafka.client import producer as kafka_producer
from kctl.kafka.produce import ProduceResult, Record, send, singles

# The Java client's murmur2 partitioner and idempotence come from the client factory;
# the agent adds compression (JSON events shrink well) for its own records.
AGENT_CONFIG: dict[str, Any] = {"compression.type": "lz4", "linger.ms": 5}
BLOCK = 10_000

__all__ = ["ProduceResult", "follow_lines", "produce", "producer", "ship_file"]


def producer(target: Target, **extra: Any) -> Any:
    """A producer configured as the agent's (for callers that need their own delivery callbacks); on a secured
    cluster the agent logs in as its admin user."""
    return kafka_producer(target, **{**AGENT_CONFIG, **extra})


def produce(
    target: Target,
    topic: str,
    records: Iterable[Record],
    *,
    rate: float | None = None,
    max_seconds: float = 600.0,
    check: bool = True,
) -> ProduceResult:
    """Send (key, value) records, paced at ``rate`` per second (None: as fast as possible); on a secured cluster
    the agent logs in as its admin user."""
    if isinstance(records, Sequence) and rate is None:
        blocks: Iterable[Sequence[Record]] = (records[i:i + BLOCK] for i in range(0, len(records), BLOCK))
    else:
        blocks = singles(records)  # a followed file or a paced generator: each record goes out at once
    res = send(target, topic, blocks, rate=rate, max_seconds=max_seconds, check=check, **AGENT_CONFIG)
    if res.failed and not res.delivered:
        raise KctlError(f"no event reached topic {topic} on {target.bootstrap_servers}:"
                        f" {res.errors[0] if res.errors else '?'}", hint="is the cluster healthy? try `kctl status`")
    return res


def ship_file(
    target: Target,
    topic: str,
    path: Path,
    *,
    follow: bool = False,
    host: str | None = None,
    max_seconds: float = 3600.0,
    max_lines: int | None = None,
) -> ProduceResult:
    """A small log agent: each line of ``path`` as a filebeat event keyed by host."""
    require_topics(target, [topic])
    host = host or socket.gethostname()
    if not follow and not path.exists():
        raise KctlError(f"{path}: no such file")

    def records() -> Iterator[tuple[str, str]]:
        for off, line in follow_lines(path, follow=follow, max_seconds=max_seconds, max_lines=max_lines):
            ev = filebeat_event(line, host=host, timestamp=dt.datetime.now(dt.timezone.utc), offset=off,
                                topic=topic, path=str(path.resolve()))
            yield host, json.dumps(ev, separators=(",", ":"))

    return produce(target, topic, records(), max_seconds=max_seconds, check=False)
