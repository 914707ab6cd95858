"""Balanced replica assignment, pure: no Kafka, no Docker (unit tests feed it dicts).

Kafka balances partitions only when a topic is created; after a broker joins or
leaves, replicas have to be moved by hand. :func:`balance` computes the target:

- every partition keeps its replication factor, its replicas on distinct brokers;
- replicas spread evenly: each broker holds floor or ceil of (replicas / brokers);
- leaders (the first replica, the preferred leader) spread evenly the same way;
- as little movement as possible: a replica stays where it is unless its broker
  leaves the set or holds more than its share, and the brokers that already hold
  the most keep the extra (ceil) slots.

The result is in Kafka's reassignment JSON format (:func:`to_kafka_json`), the
file ``kafka-reassign-partitions.sh --execute`` reads.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import UsageError

TopicPartition = tuple[str, int]
Assignment = dict[TopicPartition, list[int]]


@dataclass
class Move:
    topic: str
    partition: int
    current: list[int]
    target: list[int]

    @property
    def adding(self) -> list[int]:
        return [b for b in self.target if b not in self.current]

    @property
    def removing(self) -> list[int]:
        return [b for b in self.current if b not in self.target]


@dataclass
class BalancePlan:
    brokers: list[int]
    current: Assignment
    target: Assignment
    moves: list[Move] = field(default_factory=list)

    @property
    def replicas_moved(self) -> int:
        return sum(len(m.adding) for m in self.moves)

    @property
    def leaders_changed(self) -> int:
        return sum(1 for m in self.moves if m.current[:1] != m.target[:1])

    def replica_counts(self, which: str = "target") -> dict[int, int]:
        a = self.target if which == "target" else self.current
        c = Counter(b for reps in a.values() for b in reps)
        return {b: c.get(b, 0) for b in sorted(set(self.brokers) | set(c))}

    def leader_counts(self, which: str = "target") -> dict[int, int]:
        a = self.target if which == "target" else self.current
        c = Counter(reps[0] for reps in a.values() if reps)
        return {b: c.get(b, 0) for b in sorted(set(self.brokers) | set(c))}


def _targets(total: int, brokers: Sequence[int], load: Mapping[int, int]) -> dict[int, int]:
    """floor/ceil shares of ``total``; the brokers already holding the most get the ceil slots."""
    base, extra = divmod(total, len(brokers))
    ranked = sorted(brokers, key=lambda b: (-load.get(b, 0), b))
    return {b: base + (1 if i < extra else 0) for i, b in enumerate(ranked)}


def check(current: Mapping[TopicPartition, Sequence[int]], brokers: Iterable[int]) -> list[int]:
    """The broker set, sorted; UsageError when it cannot hold every partition's replication factor."""
    bs = sorted(set(brokers))
    if not bs:
        raise UsageError("no brokers to assign replicas to", hint="name them: --brokers 1,2,3")
    if len(bs) != len(list(brokers)):
        raise UsageError("a broker is named twice in --brokers", hint=f"--brokers {','.join(map(str, bs))}")
    worst = max((len(r) for r in current.values()), default=0)
    if worst > len(bs):
        tps = sorted(f"{t}-{p}" for (t, p), r in current.items() if len(r) == worst)
        raise UsageError(
            f"replication factor {worst} ({', '.join(tps[:3])}{' ...' if len(tps) > 3 else ''}) needs at least"
            f" {worst} brokers; {len(bs)} given ({','.join(map(str, bs))})",
            hint="name more brokers, or lower the topics' replication factor first")
    return bs


def balance(current: Mapping[TopicPartition, Sequence[int]], brokers: Iterable[int]) -> BalancePlan:
    """The balanced target assignment of ``current`` over ``brokers``, moving as little as possible."""
    bs = check(current, brokers)
    keys = sorted(current)
    cur: Assignment = {k: list(current[k]) for k in keys}
    total = sum(len(r) for r in cur.values())
    load = Counter(b for r in cur.values() for b in r if b in bs)
    want = _targets(total, bs, load)

    # 1. keep what may stay: on a broker of the set, within that broker's share.
    kept: Assignment = {k: [] for k in keys}
    count: Counter[int] = Counter()
    for k in keys:
        for b in cur[k]:
            if b in want and count[b] < want[b]:
                kept[k].append(b)
                count[b] += 1

    # 2. fill: each missing replica goes to the broker furthest below its share (not already a replica).
    for k in sorted(keys, key=lambda k: len(kept[k]) - len(cur[k])):
        while len(kept[k]) < len(cur[k]):
            free = [b for b in bs if b not in kept[k]]
            b = min(free, key=lambda b: (count[b] - want[b], count[b], b))
            kept[k].append(b)
            count[b] += 1

    # 3. fix-up: a broker over its share gives a replica to one under it (rare; the greedy fill can
    # be cornered when the only broker with room already holds that partition).
    for _ in range(total + 1):
        over = [b for b in bs if count[b] > want[b]]
        under = [b for b in bs if count[b] < want[b]]
        if not over or not under:
            break
        moved = False
        for o in over:
            for u in under:
                for k in keys:
                    if o in kept[k] and u not in kept[k]:
                        kept[k][kept[k].index(o)] = u
                        count[o] -= 1
                        count[u] += 1
                        moved = True
                        break
                if moved:
                    break
            if moved:
                break
        if not moved:
            break

    target = _order_leaders(cur, kept, bs)
    plan = BalancePlan(bs, cur, target)
    plan.moves = [Move(t, p, cur[(t, p)], target[(t, p)]) for (t, p) in keys if cur[(t, p)] != target[(t, p)]]
    return plan


def _order_leaders(cur: Assignment, kept: Assignment, bs: list[int]) -> Assignment:
    """Order each partition's replicas: the first (preferred leader) spread evenly, current order kept."""
    keys = list(kept)
    lead_load = Counter(cur[k][0] for k in keys if cur[k] and cur[k][0] in bs)
    want = _targets(len(keys), bs, lead_load)
    leader: dict[TopicPartition, int] = {}
    count: Counter[int] = Counter()
    # Keep the current preferred leader where it is still a replica and within its share.
    for k in keys:
        old = cur[k][0] if cur[k] else None
        if old is not None and old in kept[k] and count[old] < want[old]:
            leader[k] = old
            count[old] += 1
    for k in keys:
        if k not in leader:
            b = min(kept[k], key=lambda b: (count[b] - want[b], count[b], b))
            leader[k] = b
            count[b] += 1
    # Fix-up: swap leadership within a partition from a broker over its share to one under it.
    for _ in range(len(keys) + 1):
        over = {b for b in bs if count[b] > want[b]}
        under = {b for b in bs if count[b] < want[b]}
        if not over or not under:
            break
        swap = next(((k, u) for k in keys if leader[k] in over for u in kept[k] if u in under), None)
        if swap is None:
            break
        k, u = swap
        count[leader[k]] -= 1
        count[u] += 1
        leader[k] = u
    out: Assignment = {}
    for k in keys:
        # Kept replicas in their current order, new ones after; the leader first.
        order = [b for b in cur[k] if b in kept[k]] + [b for b in kept[k] if b not in cur[k]]
        out[k] = [leader[k]] + [b for b in order if b != leader[k]]
    return out


# ----- Kafka's reassignment JSON ------------------------------------------------------------------


def to_kafka_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> dict[str, Any]:
    """``{"version": 1, "partitions": [{"topic", "partition", "replicas"}]}`` (kafka-reassign-partitions.sh)."""
    return {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                         for (t, p), r in sorted(assignment.items())]}


def parse_kafka_json(text: str, source: str = "the plan") -> Assignment:
    """A reassignment file back into {(topic, partition): replicas}; UsageError naming what is wrong."""
    hint = 'expected {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}, ...]}' \
           " (`kctl reassign plan -o json > plan.json` writes one)"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                         hint=hint) from None
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise UsageError(f"{source} has no \"partitions\" list", hint=hint)
    if data.get("version", 1) != 1:
        raise UsageError(f"{source}: unsupported version {data.get('version')!r}", hint=hint)
    out: Assignment = {}
    for i, e in enumerate(data["partitions"]):
        where = f"{source}: partitions[{i}]"
        if not isinstance(e, dict):
            raise UsageError(f"{where} is not an object", hint=hint)
        t, p, r = e.get("topic"), e.get("partition"), e.get("replicas")
        if not isinstance(t, str) or not t:
            raise UsageError(f"{where} has no topic name", hint=hint)
        if not isinstance(p, int) or isinstance(p, bool) or p < 0:
            raise UsageError(f"{where} ({t}): partition must be a number >= 0, not {p!r}", hint=hint)
        if (not isinstance(r, list) or not r
                or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in r)):
            raise UsageError(f"{where} ({t}-{p}): replicas must be a non-empty list of broker ids, not {r!r}",
                             hint=hint)
        if len(set(r)) != len(r):
            raise UsageError(f"{where} ({t}-{p}): a broker appears twice in replicas {r}", hint=hint)
        if (t, p) in out:
            raise UsageError(f"{where}: {t}-{p} is listed twice", hint=hint)
        out[(t, p)] = list(r)
    if not out:
        raise UsageError(f"{source} lists no partitions", hint=hint)
    return out


def validate_against(plan: Mapping[TopicPartition, Sequence[int]], live_brokers: Iterable[int],
                     partitions: Mapping[TopicPartition, Sequence[int]], *, change_rf: bool = False) -> None:
    """UsageError when a plan names a broker not registered, or a topic/partition that does not exist, or
    (unless ``change_rf``: the operator asked for it) changes a partition's replication factor."""
    live = set(live_brokers)
    unknown = sorted({b for r in plan.values() for b in r} - live)
    if unknown:
        tps = sorted(f"{t}-{p}" for (t, p), r in plan.items() if set(r) & set(unknown))
        raise UsageError(f"the plan names broker(s) {','.join(map(str, unknown))} that are not registered"
                         f" ({', '.join(tps[:3])}{' ...' if len(tps) > 3 else ''})",
                         hint=f"registered brokers: {','.join(map(str, sorted(live)))}; make a new plan with"
                              " `kctl reassign plan --brokers ...`")
    topics = {t for t, _ in partitions}
    missing_topics = sorted({t for t, _ in plan if t not in topics})
    if missing_topics:
        raise UsageError(f"the plan names topic(s) that do not exist: {', '.join(missing_topics)}",
                         hint="`kctl topic list` shows them; make a new plan with `kctl reassign plan`")
    missing = sorted(f"{t}-{p}" for t, p in plan if (t, p) not in partitions)
    if missing:
        raise UsageError(f"the plan names partition(s) that do not exist: {', '.join(missing[:5])}",
                         hint="`kctl topic describe TOPIC` shows its partitions")
    changed_rf = sorted(f"{t}-{p} ({len(partitions[(t, p)])} -> {len(r)})" for (t, p), r in plan.items()
                        if len(r) != len(partitions[(t, p)]))
    if changed_rf and not change_rf:
        raise UsageError(f"the plan changes the replication factor of {', '.join(changed_rf[:5])}",
                         hint="a plan from `kctl reassign plan --replication-factor N` does so on purpose: run it"
                              " with `kctl reassign execute PLAN --replication-factor-change`")


def parse_brokers(text: str) -> list[int]:
    """``1,2,4`` -> [1, 2, 4] (UsageError otherwise)."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--brokers {text!r}: expected broker ids separated by commas", hint="--brokers 1,2,4") \
            from None
    if not out or any(b < 0 for b in out):
        raise UsageError(f"--brokers {text!r}: expected broker ids separated by commas", hint="--brokers 1,2,4")
    return out


_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_rate(text: str) -> int:
    """``50MB/s`` -> 50000000 bytes per second (B, KB, MB, GB and KiB, MiB, GiB; ``/s`` optional)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*(?:/s)?\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise UsageError(f"throttle {text!r}: expected a rate such as 50MB/s, 10MiB/s or 1000000 (bytes/s)",
                         hint="--throttle 50MB/s")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise UsageError(f"throttle {text!r} must be above 0", hint="--throttle 50MB/s")
    return value
