"""MirrorMaker's records in the target cluster, decoded (pure functions).

- Checkpoints (``<source>.checkpoints.internal``): Kafka's ``Checkpoint`` wire format, big-endian. Key: group,
  topic, partition (each string an int16 length and UTF-8 bytes, the partition an int32); value: an int16
  version (0), the upstream offset (int64), the downstream offset (int64), the metadata string. The topic is
  the one in the target cluster (the replication policy already applied).
- Connect's source offsets (``mm2-offsets.<source>.internal``): JSON, key ``["MirrorSourceConnector",
  {"cluster": alias, "topic": T, "partition": P}]``, value ``{"offset": N}``: N the last source offset
  replicated.
- Connect's status (``mm2-status.<source>.internal``): key ``status-connector-NAME`` or
  ``status-task-NAME-I``, value JSON with ``state``, ``trace`` and ``worker_id``; the last record of a key is
  its state, a null value removes it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any


class BadRecord(ValueError):
    """A record that is not in the format its topic should hold."""


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str  # in the target cluster
    partition: int
    upstream_offset: int  # the group's committed offset on the source
    downstream_offset: int  # the same position in the target's replica
    metadata: str


def _string(buf: bytes, at: int) -> tuple[str, int]:
    if at + 2 > len(buf):
        raise BadRecord("a string's length runs past the record")
    (n,) = struct.unpack_from(">h", buf, at)
    at += 2
    if n < 0:
        return "", at  # a null string
    if at + n > len(buf):
        raise BadRecord("a string runs past the record")
    return buf[at:at + n].decode("utf-8"), at + n


def checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint:
    if not key or not value:
        raise BadRecord("a checkpoint needs a key and a value")
    try:
        group, at = _string(key, 0)
        topic, at = _string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
        (version,) = struct.unpack_from(">h", value, 0)
        if version != 0:
            raise BadRecord(f"checkpoint version {version} (kctl reads version 0)")
        upstream, downstream = struct.unpack_from(">qq", value, 2)
        metadata, _ = _string(value, 18)
    except (struct.error, UnicodeDecodeError) as exc:
        raise BadRecord(f"not a checkpoint: {exc}") from None
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)


def heartbeat_source(key: bytes | None) -> str | None:
    """The source alias of a heartbeat (key: source alias, target alias, as Kafka strings); None if unreadable."""
    try:
        alias, _ = _string(key or b"", 0)
    except (BadRecord, UnicodeDecodeError):
        return None
    return alias or None


def source_offset(key: bytes | None, value: bytes | None) -> tuple[str, str, int, int | None] | None:
    """(connector, topic, partition, last replicated source offset or None when removed) of a Connect source
    offset record; None for a record of another shape."""
    try:
        k = json.loads(key or b"null")
        if not (isinstance(k, list) and len(k) == 2 and isinstance(k[1], dict)):
            return None
        part = k[1]
        if "topic" not in part or "partition" not in part:
            return None
        v = json.loads(value) if value else None
        offset = int(v["offset"]) if isinstance(v, dict) and "offset" in v else None
        return str(k[0]), str(part["topic"]), int(part["partition"]), offset
    except (ValueError, TypeError, KeyError):
        return None


def status(key: bytes | None, value: bytes | None) -> tuple[str, dict[str, Any] | None] | None:
    """(``connector NAME`` or ``task NAME-I``, its status or None when removed) of a Connect status record;
    None for other keys (topic tracking)."""
    k = (key or b"").decode("utf-8", "replace")
    for prefix, kind in (("status-connector-", "connector"), ("status-task-", "task")):
        if k.startswith(prefix):
            try:
                v = json.loads(value) if value else None
            except ValueError:
                v = {"state": "UNREADABLE"}
            return f"{kind} {k[len(prefix):]}", v if isinstance(v, dict) or v is None else {"state": str(v)}
    return None
