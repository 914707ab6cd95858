"""``kctl mirror failover GROUP``: a consumer group moved to this cluster where it stopped on the source.

The translation is RemoteClusterUtils.translateOffsets': the group's last checkpoint per partition in
``<source>.checkpoints.internal`` of this cluster (its downstream offset, in the replica topic). It needs
nothing from the source, which may be gone. MirrorMaker translates through its offset syncs, so a checkpoint
can lie a little behind the source's committed offset: consumers then read a few records again (at least
once), never skip one. The offsets are written only while the group has no member on this cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kctl.errors import KctlError
from kctl.mirror import config, records
from kctl.mirror.status import read_whole
from kctl.spec import ClusterSpec, MirrorSpec


@dataclass
class Move:
    topic: str  # in this cluster
    partition: int
    source_offset: int  # the group's committed offset on the source, as MirrorMaker last saw it
    translated: int  # where the group resumes here
    current: int | None  # the group's committed offset here before the failover


@dataclass
class FailoverPlan:
    group: str
    mirror: str
    target: str
    applied: bool
    moves: list[Move] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def checkpoints(spec: ClusterSpec, mirror: MirrorSpec, group: str) -> dict[tuple[str, int], records.Checkpoint]:
    """The newest checkpoint of ``group`` per (topic here, partition)."""
    from kctl.kafka.client import base_config

    topic = config.internal_topics(mirror, spec.name)["checkpoints"]
    out: dict[tuple[str, int], records.Checkpoint] = {}
    for m in read_whole(base_config(spec), topic):
        try:
            c = records.checkpoint(m.key(), m.value())
        except records.BadRecord:
            continue
        if c.group == group:
            out[(c.topic, c.partition)] = c
    return out


def plan(spec: ClusterSpec, mirror: MirrorSpec, group: str, *, execute: bool = False) -> FailoverPlan:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from kctl.kafka.client import admin, kafka_error, require_reachable
    from kctl.kafka.groups import TIMEOUT, committed_offsets

    require_reachable(spec)
    found = checkpoints(spec, mirror, group)
    if not found:
        raise KctlError(f"no checkpoint of group {group!r} from mirror {mirror.name} in {spec.name}",
                        hint="MirrorMaker checkpoints a group once it has committed offsets on the source for a"
                             f" replicated topic and it matches mirrors[{mirror.name}].groups; `kctl mirror status`")
    a = admin(spec)
    members = 0
    try:
        g = a.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
        members = len(g.members or [])
    except Exception:  # noqa: BLE001 - a group unknown here gets its offsets all the same
        g = None
    current = committed_offsets(a, group) if g is not None else {}
    fp = FailoverPlan(group, mirror.name, spec.name, False)
    for (t, p), c in sorted(found.items()):
        fp.moves.append(Move(t, p, c.upstream_offset, c.downstream_offset, current.get((t, p))))
    if members:
        fp.notes.append(f"{members} consumer(s) of {group!r} are connected to {spec.name}")
    if not execute:
        return fp
    if members:
        raise KctlError(f"group {group!r} has {members} active member(s) on {spec.name}; its offsets can only be"
                        " set while it has none", hint="stop its consumers on this cluster first, then fail over")
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(m.topic, m.partition, m.translated)
                                              for m in fp.moves])
    try:
        a.alter_consumer_group_offsets([req], request_timeout=TIMEOUT)[group].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        err = kafka_error(exc, f"cannot set the offsets of {group!r} on {spec.name}", group=group)
        raise KctlError(err.message, hint=err.hint or "the group must have no active members") from None
    fp.applied = True
    return fp
