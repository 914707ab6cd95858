"""``kctl mirror failover GROUP``: a consumer group moved to this cluster where it stopped on the source.

The translation is RemoteClusterUtils.translateOffsets': the group's last checkpoint per partition in
``<source>.checkpoints.internal`` of this cluster (its downstream offset, in the replica topic), read to the
topic's end offsets (a read that cannot reach them is an error, never a partial answer). MirrorMaker
translates through its offset syncs, so a checkpoint can lie a little behind the source's committed offset:
consumers then read a few records again (at least once), never skip one.

Before anything is set, the source is asked too, when it answers (it may be gone: then the checkpoints alone
decide, and the plan says so):

- a group with members on the source is still consuming there: a failover now makes two sets of consumers
  process the same records, and MirrorMaker's offset sync keeps moving the group here. Refused unless
  ``--force``, with the members and how far the source's committed offsets are past the checkpoints.
- every partition the group has committed on the source (of a replicated topic), and every partition of a
  replica topic with a checkpoint, must have a checkpoint; one without would start at the consumers'
  ``auto.offset.reset`` (``latest`` skips records). Each is named, and the failover refused unless
  ``--untranslated earliest`` (those partitions from their first offset here: read again, never skipped) or
  ``--force``. A partition the source shows uncommitted is no loss: it starts as it would have there.

Once the offsets are set, the group leaves MirrorMaker's offset sync for this mirror (``groups.exclude``, from
``<state>/mirror/<mirror>/failed-over.json``), so MirrorMaker no longer writes the group here; the change
takes effect when the mirror restarts with it (at once when ``kctl mirror failover`` can reach the source,
else at the next ``kctl mirror up``: without the source, MirrorMaker has no offsets to sync). The offsets are
written only while the group has no member on this cluster.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.errors import KctlError
from kctl.kafka.client import Target, admin, consumer, kafka_error, require_reachable
from kctl.kafka.groups import TIMEOUT, committed_offsets
from kctl.mirror import config, records
from kctl.mirror.config import Source
from kctl.mirror.status import read_whole
from kctl.model.spec import ClusterSpec, MirrorSpec

SOURCE_TIMEOUT = 5.0  # seconds the source may take to answer before it counts as unreachable


class Untranslated(str, enum.Enum):
    refuse = "refuse"
    earliest = "earliest"


@dataclass
class Move:
    topic: str  # in this cluster
    partition: int
    source_offset: int | None  # the group's committed offset on the source, as MirrorMaker last saw it
    translated: int | None  # where the group resumes here (None: no checkpoint, not set)
    current: int | None  # the group's committed offset here before the failover
    source_now: int | None = None  # the group's committed offset on the source now (None: not known)
    why: str = "checkpoint"  # checkpoint | earliest (no checkpoint; from the first offset here) | untranslated


@dataclass
class SourceView:
    """What the source says of the group now: None fields when it did not answer."""

    reachable: bool
    error: str | None = None
    members: list[str] = field(default_factory=list)  # client id @ host of each member
    state: str | None = None
    committed: dict[tuple[str, int], int] = field(default_factory=dict)  # (source topic, partition) -> offset


@dataclass
class FailoverPlan:
    group: str
    mirror: str
    target: str
    applied: bool
    moves: list[Move] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source_reachable: bool | None = None
    source_members: list[str] = field(default_factory=list)
    untranslated: list[str] = field(default_factory=list)  # "topic-partition (why)" of every partition not set
    refusals: list[str] = field(default_factory=list)
    sync_stopped: bool = False


def checkpoints(spec: ClusterSpec, mirror: MirrorSpec, group: str) -> dict[tuple[str, int], records.Checkpoint]:
    """The newest checkpoint of ``group`` per (topic here, partition), read to the topic's end offsets."""
    topic = config.internal_topics(mirror, spec.name)["checkpoints"]
    out: dict[tuple[str, int], records.Checkpoint] = {}
    for m in read_whole(Target.of(spec), topic, strict=True):
        try:
            c = records.checkpoint(m.key(), m.value())
        except records.BadRecord:
            continue
        if c.group == group:
            out[(c.topic, c.partition)] = c
    return out


def source_view(source: Source | None, group: str, timeout: float = SOURCE_TIMEOUT) -> SourceView:
    """The group on the source now: its members and committed offsets; unreachable within ``timeout``: said."""
    if source is None:
        return SourceView(False, "the source is not known to this kctl.yaml")
    from confluent_kafka import ConsumerGroupTopicPartitions

    extra: dict[str, Any] = {"socket.timeout.ms": int(timeout * 1000)}
    a = admin(source.target, **extra)
    try:
        md = a.list_topics(timeout=timeout)
        if not md.brokers:
            return SourceView(False, f"no broker of {source.target.bootstrap_servers} answered within"
                                     f" {timeout:g}s")
        g = a.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)
        res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                            request_timeout=timeout)[group].result(timeout)
    except Exception as exc:  # noqa: BLE001 - any failure to ask is an unreachable source, said as such
        return SourceView(False, f"{source.target.bootstrap_servers} did not answer: {str(exc)[:200]}")
    members = [f"{m.client_id}@{m.host.lstrip('/')}" for m in (g.members or [])]
    committed = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}
    return SourceView(True, None, members, str(getattr(g.state, "name", g.state)), committed)


def decide(mirror: MirrorSpec, group: str, found: dict[tuple[str, int], records.Checkpoint],
           src: SourceView, target_partitions: dict[str, list[int]], current: dict[tuple[str, int], int],
           starts: dict[tuple[str, int], int], *, force: bool, untranslated: Untranslated,
           fp: FailoverPlan) -> FailoverPlan:
    """Pure: the moves and refusals of a failover from what was read (``target_partitions``: each replica topic
    here and its partitions; ``starts``: each partition's first offset here)."""
    source_of = {config.remote_topic(mirror, st): st for st, _ in src.committed}
    fp.source_reachable = src.reachable
    fp.source_members = list(src.members)
    for (t, p), c in sorted(found.items()):
        now = src.committed.get((source_of[t], p)) if t in source_of else None
        fp.moves.append(Move(t, p, c.upstream_offset, c.downstream_offset, current.get((t, p)), now))
    # partitions the group may need that have no checkpoint
    needed: dict[tuple[str, int], str] = {}
    for (st, sp) in sorted(src.committed):
        remote = config.remote_topic(mirror, st)
        if (remote, sp) not in found and (remote in target_partitions or config.replicates(mirror, st)):
            needed[(remote, sp)] = f"committed at {src.committed[(st, sp)]} on the source, no checkpoint here"
    for t in sorted({t for t, _ in found}):
        for p in target_partitions.get(t, []):
            if (t, p) in found or (t, p) in needed:
                continue
            if not src.reachable:
                needed[(t, p)] = "no checkpoint, and the source cannot say whether the group committed there"
            # reachable and not committed there: the consumers start as they would have on the source
    for (t, p), why in sorted(needed.items()):
        if untranslated is Untranslated.earliest and (t, p) in starts:
            fp.moves.append(Move(t, p, None, starts[(t, p)], current.get((t, p)), None, "earliest"))
            fp.notes.append(f"{t}-{p}: {why}; set to its first offset here ({starts[(t, p)]}): read again,"
                            " never skipped")
        else:
            fp.moves.append(Move(t, p, None, None, current.get((t, p)), None, "untranslated"))
            fp.untranslated.append(f"{t}-{p} ({why})")
    if not src.reachable:
        fp.notes.append(f"the source was not asked ({src.error}): the checkpoints alone decide; a group still"
                        " consuming there is not seen")
    if src.members:
        ahead = sum(max(0, (m.source_now or 0) - (m.source_offset or 0)) for m in fp.moves
                    if m.why == "checkpoint" and m.source_now is not None)
        fp.refusals.append(
            f"group {group!r} has {len(src.members)} active member(s) on the source ({', '.join(src.members[:5])}"
            f"{' ...' if len(src.members) > 5 else ''}; state {src.state}), {ahead} record(s) past the"
            " checkpoints: two sets of consumers would process the same records")
    if fp.untranslated:
        fp.refusals.append(f"{len(fp.untranslated)} partition(s) cannot be translated: "
                           + "; ".join(fp.untranslated))
    if force and fp.refusals:
        fp.notes += [f"--force: {r}" for r in fp.refusals]
        fp.refusals = []
    fp.moves.sort(key=lambda m: (m.topic, m.partition))
    return fp


def plan(spec: ClusterSpec, mirror: MirrorSpec, group: str, *, execute: bool = False,
         source: Source | None = None, force: bool = False, untranslated: Untranslated = Untranslated.refuse,
         state_dir: Path | None = None) -> FailoverPlan:
    from confluent_kafka import OFFSET_BEGINNING, ConsumerGroupTopicPartitions, TopicPartition

    target = Target.of(spec)
    require_reachable(target)
    found = checkpoints(spec, mirror, group)
    if not found:
        raise KctlError(f"no checkpoint of group {group!r} from mirror {mirror.name} in {spec.name}",
                        hint="MirrorMaker checkpoints a group once it has committed offsets on the source for a"
                             f" replicated topic and it matches mirrors[{mirror.name}].groups; `kctl mirror status`")
    a = admin(target)
    members = 0
    try:
        g = a.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
        members = len(g.members or [])
    except Exception:  # noqa: BLE001 - a group unknown here gets its offsets all the same
        g = None
    current = committed_offsets(a, group) if g is not None else {}
    src = source_view(source, group)
    md = a.list_topics(timeout=TIMEOUT)
    remotes = {t for t, _ in found} | {config.remote_topic(mirror, t) for t, _ in src.committed}
    parts = {t: sorted(md.topics[t].partitions) for t in remotes if t in md.topics}
    starts: dict[tuple[str, int], int] = {}
    if untranslated is Untranslated.earliest:
        wanted = [TopicPartition(t, p, OFFSET_BEGINNING) for t, ps in parts.items() for p in ps]
        if wanted:
            c = consumer(target)
            try:
                for tp in wanted:
                    low, _ = c.get_watermark_offsets(tp, timeout=TIMEOUT, cached=False)
                    starts[(tp.topic, tp.partition)] = int(low)
            finally:
                c.close()
    fp = decide(mirror, group, found, src, parts, current, starts, force=force, untranslated=untranslated,
                fp=FailoverPlan(group, mirror.name, spec.name, False))
    if members:
        fp.notes.append(f"{members} consumer(s) of {group!r} are connected to {spec.name}")
    if not execute:
        return fp
    if fp.refusals:
        raise KctlError(f"failover of {group!r} refused, nothing was set: " + "; ".join(fp.refusals),
                        hint=("stop the group's consumers on the source first (or pass --force to fail over while"
                              " they run)" if fp.source_members else "")
                        + ("; " if fp.source_members and fp.untranslated else "")
                        + ("wait for MirrorMaker's next checkpoint (`kctl mirror failover GROUP --dry-run`), or"
                           " --untranslated earliest to start those partitions at their first offset here"
                           if fp.untranslated else ""))
    if members:
        raise KctlError(f"group {group!r} has {members} active member(s) on {spec.name}; its offsets can only be"
                        " set while it has none", hint="stop its consumers on this cluster first, then fail over")
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(m.topic, m.partition, m.translated)
                                              for m in fp.moves if m.translated is not None])
    try:
        a.alter_consumer_group_offsets([req], request_timeout=TIMEOUT)[group].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        err = kafka_error(exc, f"cannot set the offsets of {group!r} on {spec.name}", group=group)
        raise KctlError(err.message, hint=err.hint or "the group must have no active members") from None
    fp.applied = True
    if state_dir is not None and mirror.sync_group_offsets:
        fp.sync_stopped = stop_sync(state_dir, mirror, group)
    return fp


# ----- the groups MirrorMaker no longer syncs here -----------------------------------------------------------


def stop_sync(state_dir: Path, mirror: MirrorSpec, group: str) -> bool:
    """Record ``group`` as failed over (written whole); True if it was not recorded before."""
    groups = config.failed_over(state_dir, mirror)
    if group in groups:
        return False
    path = config.failed_over_path(state_dir, mirror)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump({"groups": sorted({*groups, group})}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return True
