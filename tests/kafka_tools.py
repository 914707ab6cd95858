"""Parsers of the Kafka command-line tools' output, which the tests compare kctl's answers with.

kctl itself reads everything through confluent-kafka; only the tests run ``kafka-configs.sh``,
``kafka-topics.sh`` and ``kafka-consumer-groups.sh`` to check it against Kafka's own tools.
"""

from __future__ import annotations

import re
from typing import Any

_SYN = re.compile(r"([A-Z_]+):([^=,]+)=([^,]*)(?:,\s*|$)")


def parse_kafka_configs(text: str) -> dict[str, dict[str, Any]]:
    """``kafka-configs --describe`` for brokers/topics: ``  key=value sensitive=.. synonyms={SRC:key=v, ...}``."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.startswith("  ") or "=" not in line:
            continue
        m = re.match(r"^\s+([^=\s]+)=(.*?) sensitive=(true|false) synonyms=\{(.*)\}\s*$", line)
        if not m:
            continue
        key, value, sensitive, syn = m.groups()
        out[key] = {
            "value": None if value == "null" else value,
            "sensitive": sensitive == "true",
            "synonyms": [(s, k, v) for s, k, v in _SYN.findall(syn)],
        }
    return out


def parse_kafka_topics_describe(text: str) -> dict[str, Any]:
    """Parse ``kafka-topics.sh --describe --topic T`` (3.x tab-separated ``Key: value`` lines)."""
    out: dict[str, Any] = {"partitions": {}, "configs": {}}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().split("\t") if c.strip()]
        kv: dict[str, str] = {}
        for c in cells:
            k, sep, v = c.partition(":")
            if sep:
                kv[k.strip()] = v.strip()
        if "Partition" in kv:
            leader = int(kv["Leader"]) if kv.get("Leader", "none").lstrip("-").isdigit() else None
            out["partitions"][int(kv["Partition"])] = {
                "leader": leader if leader is not None and leader >= 0 else None,
                "replicas": [int(x) for x in kv.get("Replicas", "").split(",") if x],
                "isr": [int(x) for x in kv.get("Isr", "").split(",") if x],
            }
        elif "PartitionCount" in kv:
            out["topic"] = kv.get("Topic")
            out["partition_count"] = int(kv["PartitionCount"])
            out["replication_factor"] = int(kv["ReplicationFactor"])
            conf = kv.get("Configs", "")
            for item in conf.split(","):
                k, sep, v = item.partition("=")
                if sep:
                    out["configs"][k.strip()] = v.strip()
    return out


def parse_kafka_groups_describe(text: str) -> list[dict[str, Any]]:
    """Rows of ``kafka-consumer-groups.sh --describe --group G`` (whitespace-aligned table)."""
    rows: list[dict[str, Any]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP" and "TOPIC" in cells:
            header = [c.lower().replace("-", "_") for c in cells]
            continue
        if header and len(cells) >= 6:
            row: dict[str, Any] = dict(zip(header, cells, strict=False))
            for k in ("partition", "current_offset", "log_end_offset", "lag"):
                if k in row:
                    row[k] = int(row[k]) if row[k].lstrip("-").isdigit() else None
            rows.append(row)
    return rows
