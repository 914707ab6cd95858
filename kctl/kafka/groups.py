"""Consumer groups: list, describe with lag, reset offsets (dry run by default), delete."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.kafka.client import (
    REQUEST_TIMEOUT,
    Target,
    admin,
    consumer,
    group_missing,
    kafka_error,
    require_reachable,
    topic_missing,
)

TIMEOUT = REQUEST_TIMEOUT


@dataclass
class GroupSummary:
    group: str
    state: str
    type: str
    simple: bool


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    consumer_id: str | None = None
    host: str | None = None
    client_id: str | None = None


@dataclass
class Member:
    consumer_id: str
    client_id: str
    host: str
    assignment: list[str]
    # A KIP-848 consumer group's member: the partitions the coordinator means it to own (it takes them as the
    # members before it give them up); None in a classic group, whose assignment the members' leader makes.
    target_assignment: list[str] | None = None
    # A KIP-848 member's epoch and its target assignment's epoch (Kafka's tool on kctl's own cluster; None
    # elsewhere): a member behind the group's target assignment epoch is still reconciling.
    member_epoch: int | None = None
    target_epoch: int | None = None


@dataclass
class GroupDescription:
    group: str
    state: str
    coordinator: int | None
    assignor: str
    members: list[Member] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)
    total_lag: int = 0
    # classic (the members' own protocol, Kafka < 4 or group.protocol=classic) or consumer (KIP-848: the
    # coordinator assigns, group.version 1); what describe answers
    type: str = "classic"
    # A consumer group's (KIP-848) group epoch and its target assignment's epoch: see Member.member_epoch
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


@dataclass
class OffsetMove:
    topic: str
    partition: int
    current: int | None
    target: int
    earliest: int
    latest: int
    note: str = ""


@dataclass
class ResetPlan:
    group: str
    topic: str
    strategy: str
    executed: bool
    moves: list[OffsetMove]


def list_groups(target: Target, *, client: Any = None) -> list[GroupSummary]:
    if client is None:
        require_reachable(target)
    a = client if client is not None else admin(target)
    try:
        res = a.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        raise kafka_error(exc, "cannot list consumer groups") from None
    return sorted((GroupSummary(g.group_id, g.state.name if g.state else "UNKNOWN",
                                _type_name(getattr(g, "type", None)),
                                bool(g.is_simple_consumer_group)) for g in res.valid),
                  key=lambda g: g.group)


def committed_offsets(a: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    try:
        res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                            request_timeout=TIMEOUT)[group].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        raise kafka_error(exc, f"cannot read offsets of {group!r}", group=group) from None
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}


def offsets(a: Any, tps: list[tuple[str, int]], spec_of: Any) -> dict[tuple[str, int], int]:
    """list_offsets for each (topic, partition) with the given OffsetSpec."""
    from confluent_kafka import TopicPartition

    if not tps:
        return {}
    req = {TopicPartition(t, p): spec_of for t, p in tps}
    futs = a.list_offsets(req, request_timeout=TIMEOUT)
    out: dict[tuple[str, int], int] = {}
    for tp, fut in futs.items():
        try:
            out[(tp.topic, tp.partition)] = int(fut.result(TIMEOUT).offset)
        except Exception as exc:  # noqa: BLE001
            raise kafka_error(exc, f"cannot list offsets of {tp.topic}-{tp.partition}", topic=tp.topic) from None
    return out


def lag(committed: int | None, log_end: int | None) -> int | None:
    if committed is None or log_end is None or committed < 0:
        return None
    return max(0, log_end - committed)


def describe(target: Target, group: str, *, client: Any = None) -> GroupDescription:
    """State, members, and per partition committed offset, end offset and lag. ``client``: an AdminClient to
    reuse (the monitor's, across its rounds); without it, one for this call, after checking a broker answers."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    if client is None:
        require_reachable(target)
    a = client if client is not None else admin(target)
    try:
        g = a.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        raise kafka_error(exc, f"cannot describe {group!r}", group=group) from None
    committed = committed_offsets(a, group)
    state = g.state.name if g.state else "UNKNOWN"
    if state == "DEAD" and not committed:
        raise group_missing(group)
    owner: dict[tuple[str, int], Any] = {}
    members = []
    kind = _type_name(getattr(g, "type", None))
    for m in g.members:
        tps = list(m.assignment.topic_partitions) if m.assignment else []
        for tp in tps:
            owner[(tp.topic, tp.partition)] = m
        target_tps = getattr(m, "target_assignment", None)
        members.append(Member(m.member_id, m.client_id, m.host, _names(tps),
                              _names(list(target_tps.topic_partitions)) if target_tps is not None
                              and kind == "consumer" else None))
    keys = sorted(set(committed) | set(owner))
    ends = offsets(a, keys, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    parts = []
    for k in keys:
        m = owner.get(k)
        c = committed.get(k)
        parts.append(PartitionLag(k[0], k[1], c, ends.get(k), lag(c, ends.get(k)),
                                  m.member_id if m else None, m.host if m else None, m.client_id if m else None))
    total = sum(p.lag or 0 for p in parts)
    coord = g.coordinator.id if g.coordinator is not None else None
    return GroupDescription(group, state, coord, g.partition_assignor or "", members, parts, total, kind)


def _names(tps: list[Any]) -> list[str]:
    return [f"{tp.topic}-{tp.partition}" for tp in sorted(tps, key=lambda x: (x.topic, x.partition))]


def _type_name(t: Any) -> str:
    """confluent-kafka's ConsumerGroupType as kctl names it: classic or consumer (UNKNOWN, an older broker that
    does not say: classic, the only type there is before KIP-848)."""
    name = str(getattr(t, "name", t or "")).lower()
    return name if name in ("consumer", "classic", "share", "streams") else "classic"


# ----- reset offsets --------------------------------------------------------------------


def clamp(target: int, earliest: int, latest: int) -> tuple[int, str]:
    """Kafka's rule for --to-offset: below the log start goes to earliest, past the end to latest."""
    if target < earliest:
        return earliest, f"{target} is below the log start; using earliest {earliest}"
    if target > latest:
        return latest, f"{target} is past the log end; using latest {latest}"
    return target, ""


def parse_datetime(text: str) -> int:
    """ISO 8601 (naive means UTC, as kafka-consumer-groups) to epoch milliseconds."""
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{text!r} is not an ISO 8601 date-time such as 2024-05-01T12:00:00") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return int(t.timestamp() * 1000)


def plan_targets(strategy: str, value: int | None, current: dict[int, int | None], earliest: dict[int, int],
                 latest: dict[int, int], by_time: dict[int, int] | None = None) -> dict[int, tuple[int, str]]:
    """Pure offsets math: the new offset of each partition and a note."""
    out: dict[int, tuple[int, str]] = {}
    for p in sorted(latest):
        e, lt = earliest[p], latest[p]
        if strategy == "earliest":
            out[p] = (e, "")
        elif strategy == "latest":
            out[p] = (lt, "")
        elif strategy == "offset":
            assert value is not None
            out[p] = clamp(value, e, lt)
        elif strategy == "datetime":
            t = (by_time or {}).get(p, -1)
            # No record at or after the time: the end of the log, as Kafka's tool does.
            out[p] = (lt, "no record at or after that time; using latest") if t < 0 else clamp(t, e, lt)
        else:
            raise UsageError(f"unknown reset strategy {strategy!r}")
    return out


def reset_offsets(target: Target, group: str, topic: str, strategy: str, value: int | None = None,
                  when: str | None = None, execute: bool = False) -> ResetPlan:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    md = require_reachable(target)
    if topic not in md.topics:
        raise topic_missing(topic)
    a = admin(target)
    tps = [(topic, p) for p in sorted(md.topics[topic].partitions)]
    state = "UNKNOWN"
    try:
        g = a.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
        state = g.state.name if g.state else "UNKNOWN"
    except Exception:  # noqa: BLE001 - a group that does not exist yet can be given offsets
        g = None
    if g is not None and g.members:
        raise KctlError(f"group {group!r} is {state} with {len(g.members)} active member(s); offsets can only be"
                        " reset while it has none", hint="stop its consumers first (`kctl group describe` shows them)")
    committed = committed_offsets(a, group) if state != "DEAD" else {}
    earliest = offsets(a, tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    latest = offsets(a, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    by_time = None
    if strategy == "datetime":
        if when is None:
            raise UsageError("--to-datetime needs a value")
        by_time_raw = offsets(a, tps, OffsetSpec.for_timestamp(parse_datetime(when)))
        by_time = {p: v for (_, p), v in by_time_raw.items()}
    targets = plan_targets(strategy, value, {p: committed.get((t, p)) for t, p in tps},
                           {p: v for (_, p), v in earliest.items()}, {p: v for (_, p), v in latest.items()}, by_time)
    moves = [OffsetMove(topic, p, committed.get((topic, p)), tgt, earliest[(topic, p)], latest[(topic, p)], note)
             for p, (tgt, note) in targets.items()]
    if execute:
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, m.partition, m.target) for m in moves])
        try:
            a.alter_consumer_group_offsets([req], request_timeout=TIMEOUT)[group].result(TIMEOUT)
        except Exception as exc:  # noqa: BLE001
            err = kafka_error(exc, f"cannot reset offsets of {group!r}", group=group)
            raise KctlError(err.message, hint=err.hint or "the group must have no active members") from None
    return ResetPlan(group, topic, strategy, execute, moves)


def delete(target: Target, group: str) -> str:
    require_reachable(target)
    a = admin(target)
    try:
        a.delete_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        raise kafka_error(exc, f"cannot delete {group!r}", group=group) from None
    return group


class GroupCommitter:
    """Commits offsets to a consumer group without consuming: a consumer that never subscribes nor polls.

    For a process that tracks its position elsewhere (the stream job's checkpoint) but wants the group's
    committed offsets, and so its lag, visible to `kctl group describe`, kafka-consumer-groups.sh and Burrow.
    Kafka accepts such commits while the group has no active member (a "simple" consumer's commit).
    """

    def __init__(self, target: Target, group: str) -> None:
        self.group = group
        self._c = consumer(target, group=group)

    def commit(self, offsets: dict[str, dict[int, int]]) -> int:
        """Commit ``{topic: {partition: next offset}}`` synchronously; returns the partitions committed."""
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(t, int(p), int(o)) for t, parts in offsets.items() for p, o in parts.items()
               if int(o) >= 0]
        if tps:
            self._c.commit(offsets=tps, asynchronous=False)
        return len(tps)

    def close(self) -> None:
        self._c.close()
