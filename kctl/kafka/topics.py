"""Topics through the AdminClient: create, list, describe, add partitions, delete."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kctl.errors import KctlError, UsageError
from kctl.kafka.client import (
    CONNECT_TIMEOUT,
    HEALTH_TOPIC,
    REQUEST_TIMEOUT,
    Target,
    admin,
    error_code,
    kafka_error,
    require_reachable,
    topic_missing,
    wait_for_topic,
)
from kctl.kafka.configs import source_name
from kctl.model.spec import TOPIC_NAME_MAX, topic_name_problem

MAX_NAME = TOPIC_NAME_MAX
TIMEOUT = REQUEST_TIMEOUT


@dataclass
class PartitionInfo:
    partition: int
    leader: int | None
    replicas: list[int]
    isr: list[int]
    offline: bool
    under_replicated: bool


@dataclass
class TopicConfig:
    key: str
    value: str | None
    source: str


@dataclass
class TopicDescription:
    name: str
    topic_id: str | None
    internal: bool
    partition_count: int
    replication_factor: int
    partitions: list[PartitionInfo] = field(default_factory=list)
    configs: list[TopicConfig] = field(default_factory=list)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.offline)


@dataclass
class TopicSummary:
    name: str
    partitions: int
    replication_factor: int
    internal: bool
    under_replicated: int


@dataclass
class TopicChange:
    topic: str
    action: str  # created, exists, partitions-added, deleted
    detail: str = ""


def validate_name(name: str) -> None:
    """Kafka's topic name rule, checked before anything is sent."""
    problem = topic_name_problem(name)  # the same rule as kctl.yaml's `topics:`
    if problem:
        raise UsageError(f"invalid topic name {name!r}: it {problem}",
                         hint="Kafka's rule: 1 to 249 of a-z A-Z 0-9 . _ -, not '.' or '..'")


def exists(topic: str) -> KctlError:
    return KctlError(f"topic {topic!r} already exists", hint="pass --if-not-exists to accept an existing topic")


def create(target: Target, name: str, partitions: int | None, replication_factor: int | None,
           config: dict[str, str] | None = None, if_not_exists: bool = False) -> TopicChange:
    """Create a topic; ``None`` partitions or replication factor take the cluster's num.partitions and
    default.replication.factor (as kafka-topics.sh does: CreateTopics with -1)."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    validate_name(name)
    if partitions is not None and partitions < 1:
        raise UsageError(f"--partitions must be at least 1, not {partitions}",
                         hint="leave it out for the cluster's num.partitions")
    if replication_factor is not None and replication_factor < 1:
        raise UsageError(f"--replication-factor must be at least 1, not {replication_factor}",
                         hint="leave it out for the cluster's default.replication.factor")
    md = require_reachable(target)
    if name in md.topics:
        if if_not_exists:
            return TopicChange(name, "exists", "already exists; nothing changed")
        raise exists(name)
    live = len(md.brokers)
    if replication_factor is not None and replication_factor > live:
        raise KctlError(f"cannot create {name!r}: replication factor {replication_factor} is above the {live} live"
                        f" broker(s)", hint=f"use --replication-factor {live} or less; `kctl status` shows brokers")
    a = admin(target)
    futs = a.create_topics([NewTopic(name, num_partitions=-1 if partitions is None else partitions,
                                     replication_factor=-1 if replication_factor is None else replication_factor,
                                     config=dict(config or {}))], request_timeout=TIMEOUT)
    try:
        futs[name].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - translated for the operator
        if if_not_exists and error_code(exc)[0] == "TOPIC_ALREADY_EXISTS":
            return TopicChange(name, "exists", "already exists; nothing changed")
        raise kafka_error(exc, f"cannot create {name!r}", topic=name) from None
    # Return once the topic is usable: known to the brokers' metadata, a leader for every partition
    # (TimeoutReached otherwise: created, but not usable yet, and the message says what the metadata showed).
    deadline = time.monotonic() + TIMEOUT
    t = wait_for_topic(a, name, partitions, timeout=TIMEOUT)
    # Every broker: a client whose metadata comes from a broker that has not cached the topic yet fails its
    # records at once (librdkafka before 2.2 sees the partition count drop to 0). Each broker is asked on a
    # connection of its own (a client bootstrapped with that broker alone asks it first).
    for b in sorted(md.brokers.values(), key=lambda b: b.id):
        one = admin(target.at(f"{b.host}:{b.port}"))
        wait_for_topic(one, name, len(t.partitions), timeout=max(1.0, deadline - time.monotonic()))
    parts = list(t.partitions.values())
    partitions = len(parts)
    replication_factor = len(parts[0].replicas) if parts else replication_factor
    return TopicChange(name, "created", f"{partitions} partition(s), replication factor {replication_factor}")


def list_topics(target: Target, internal: bool = False) -> list[TopicSummary]:
    md = require_reachable(target)
    out = []
    for name, t in sorted(md.topics.items()):
        is_internal = name.startswith("__")
        if is_internal and not internal:
            continue
        parts = t.partitions.values()
        rf = max((len(p.replicas) for p in parts), default=0)
        urp = sum(1 for p in parts if len(p.isrs) < len(p.replicas))
        out.append(TopicSummary(name, len(t.partitions), rf, is_internal, urp))
    return out


def describe(target: Target, name: str) -> TopicDescription:
    """One DescribeTopics (a metadata request) and one DescribeConfigs, in flight together."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import ConfigResource, ConfigSource  # type: ignore[attr-defined]

    validate_name(name)
    a = admin(target)
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    # A read: no broker answering within the connect timeout means the cluster is down.
    topic_fut = a.describe_topics(TopicCollection([name]), request_timeout=CONNECT_TIMEOUT)[name]
    configs_fut = a.describe_configs([res], request_timeout=CONNECT_TIMEOUT)[res]
    try:
        td = topic_fut.result(TIMEOUT)
        entries = configs_fut.result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - translated for the operator
        raise kafka_error(exc, f"topic {name!r}", topic=name) from None
    parts = []
    for p in sorted(td.partitions, key=lambda p: p.id):
        leader = p.leader.id if p.leader is not None and p.leader.id >= 0 else None
        replicas = [r.id for r in p.replicas]
        isr = [r.id for r in p.isr]
        parts.append(PartitionInfo(p.id, leader, replicas, isr, offline=leader is None,
                                   under_replicated=len(isr) < len(replicas)))
    configs: list[TopicConfig] = []
    for key, e in sorted(entries.items()):
        # As kafka-topics --describe: every config whose source is not Kafka's own default.
        if e.source != ConfigSource.DEFAULT_CONFIG.value:
            configs.append(TopicConfig(key, e.value, source_name(ConfigSource(e.source).name)))
    rf = max((len(p.replicas) for p in parts), default=0)
    # Kafka prints topic ids in URL-safe base64 without padding; librdkafka in the standard alphabet.
    tid = str(td.topic_id).replace("+", "-").replace("/", "_").rstrip("=") if td.topic_id else None
    return TopicDescription(name, tid, td.is_internal, len(parts), rf,
                            parts, configs)


def add_partitions(target: Target, name: str, partitions: int) -> TopicChange:
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    validate_name(name)
    md = require_reachable(target)
    if name not in md.topics:
        raise topic_missing(name)
    current = len(md.topics[name].partitions)
    if partitions < current:
        raise KctlError(f"cannot decrease {name!r} from {current} to {partitions} partitions: Kafka can only add"
                        " partitions", hint="create a new topic with fewer partitions and copy the data")
    if partitions == current:
        raise KctlError(f"{name!r} already has {current} partitions", hint=f"pass --partitions above {current}")
    a = admin(target)
    futs = a.create_partitions([NewPartitions(name, partitions)], request_timeout=TIMEOUT)
    try:
        futs[name].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        raise kafka_error(exc, f"cannot add partitions to {name!r}", topic=name) from None
    return TopicChange(name, "partitions-added", f"{current} -> {partitions} partitions")


def delete(target: Target, name: str) -> TopicChange:
    validate_name(name)
    md = require_reachable(target)
    if name not in md.topics:
        raise topic_missing(name)
    if name == HEALTH_TOPIC:
        raise KctlError(f"{name} is kctl's health-check topic",
                        hint="`kctl up` recreates it for its produce/consume check; leave it")
    a = admin(target)
    futs = a.delete_topics([name], request_timeout=TIMEOUT)
    try:
        futs[name].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        raise kafka_error(exc, f"cannot delete {name!r}", topic=name) from None
    return TopicChange(name, "deleted", "marked for deletion")
