"""Balancing by bytes, and replication factor changes, pure: no Kafka, no Docker (unit tests feed it dicts).

:func:`kctl.kafka.balance.balance` evens out replica *counts*; a broker can still hold most of the bytes when the
partitions differ in size. :func:`balance_bytes` evens out the bytes instead, from each partition's size (the
largest of its replicas' sizes, as ``kafka-log-dirs.sh`` gives them):

- replicas on a broker outside the set move first (largest first, each to the least-loaded broker that may take
  it);
- then, while the most-loaded broker holds more than the least-loaded by over the tolerance, the replica whose
  move narrows that gap the most (its size nearest half the gap, and below the gap) moves from the one to the
  other; a pair with no such replica is passed over for the next least-loaded broker. Each move strictly narrows
  the spread of the two brokers it touches, so the loop ends; it is also bounded by the number of replicas;
- a partition never holds two replicas on one broker, and a move never lowers the number of racks a partition's
  replicas are on (with racks given);
- the preferred leaders (the first replica) are then spread by count as :func:`kctl.kafka.balance.balance` does.

:func:`change_rf` raises or lowers one topic's replication factor into an assignment the same reassignment runs:
a new replica goes to the least-loaded (by bytes) eligible broker, on a rack the partition is not on yet when
there is one; a lowered factor drops replicas from the most-loaded brokers and never the preferred leader.

:func:`seconds_left` estimates a running reassignment's time left from the bytes still to copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kctl.errors import UsageError
from kctl.kafka.balance import Assignment, BalancePlan, Move, TopicPartition, _order_leaders, check

Racks = Mapping[int, str | None]


@dataclass
class BytesPlan(BalancePlan):
    sizes: dict[TopicPartition, int] = field(default_factory=dict)
    tolerance_bytes: int = 0

    def bytes_per_broker(self, which: str = "target") -> dict[int, int]:
        return bytes_per_broker(self.target if which == "target" else self.current, self.sizes, self.brokers)

    @property
    def bytes_moved(self) -> int:
        """The bytes the new replicas copy (each added replica copies its partition whole)."""
        return sum(self.sizes.get((m.topic, m.partition), 0) * len(m.adding) for m in self.moves)


def bytes_per_broker(assignment: Mapping[TopicPartition, Sequence[int]], sizes: Mapping[TopicPartition, int],
                     brokers: Iterable[int] = ()) -> dict[int, int]:
    out = {b: 0 for b in brokers}
    for k, reps in assignment.items():
        for b in reps:
            out[b] = out.get(b, 0) + sizes.get(k, 0)
    return dict(sorted(out.items()))


def _rack_count(reps: Iterable[int], racks: Racks | None) -> int:
    if not racks:
        return 0
    return len({racks.get(b) for b in reps if racks.get(b) is not None})


def _may_take(k: TopicPartition, reps: list[int], src: int, dst: int, racks: Racks | None) -> bool:
    """Whether the replica of ``k`` on ``src`` may move to ``dst``: not there already, and no fewer racks after."""
    if dst in reps:
        return False
    after = [dst if b == src else b for b in reps]
    return _rack_count(after, racks) >= _rack_count(reps, racks)


def balance_bytes(current: Mapping[TopicPartition, Sequence[int]], sizes: Mapping[TopicPartition, int],
                  brokers: Iterable[int], *, racks: Racks | None = None, tolerance: float = 0.10) -> BytesPlan:
    """The target assignment of ``current`` over ``brokers`` with the bytes spread evenly, moving few bytes.

    ``tolerance``: the spread (most-loaded minus least-loaded broker) that is good enough, as a fraction of the
    mean load per broker."""
    bs = check(current, brokers)
    keys = sorted(current)
    cur: Assignment = {k: list(current[k]) for k in keys}
    size = {k: int(sizes.get(k, 0)) for k in keys}
    if any(v < 0 for v in size.values()):
        raise UsageError("a partition size is negative", hint="sizes come from kafka-log-dirs.sh: bytes on disk")
    kept: Assignment = {k: list(r) for k, r in cur.items()}
    load = {b: 0 for b in bs}
    for k in keys:
        for b in kept[k]:
            if b in load:
                load[b] += size[k]

    # 1. replicas on brokers outside the set, largest first, to the least-loaded broker that may take them.
    for k in sorted(keys, key=lambda k: -size[k]):
        for src in [b for b in kept[k] if b not in load]:
            options = [b for b in bs if _may_take(k, kept[k], src, b, racks)] or [b for b in bs if b not in kept[k]]
            dst = min(options, key=lambda b: (load[b], b))
            kept[k][kept[k].index(src)] = dst
            load[dst] += size[k]

    # 2. narrow the spread: from the most-loaded broker to the least-loaded one that can take a replica.
    total = sum(load.values())
    slack = int(tolerance * total / len(bs))
    for _ in range(sum(len(r) for r in kept.values()) * len(bs) + 1):
        hi = max(bs, key=lambda b: (load[b], -b))
        moved = False
        for lo in sorted(bs, key=lambda b: (load[b], b)):
            gap = load[hi] - load[lo]
            if gap <= slack or lo == hi:
                break
            candidates = [k for k in keys if hi in kept[k] and 0 < size[k] < gap
                          and _may_take(k, kept[k], hi, lo, racks)]
            if not candidates:
                continue
            k = min(candidates, key=lambda k: (abs(gap / 2 - size[k]), k))
            kept[k][kept[k].index(hi)] = lo
            load[hi] -= size[k]
            load[lo] += size[k]
            moved = True
            break
        if not moved:
            break

    target = _order_leaders(cur, kept, bs)
    plan = BytesPlan(bs, cur, target, sizes=size, tolerance_bytes=slack)
    plan.moves = [Move(t, p, cur[(t, p)], target[(t, p)]) for (t, p) in keys if cur[(t, p)] != target[(t, p)]]
    return plan


def change_rf(current: Mapping[TopicPartition, Sequence[int]], sizes: Mapping[TopicPartition, int],
              brokers: Iterable[int], topic: str, rf: int, *, racks: Racks | None = None) -> Assignment:
    """The partitions of ``topic`` with ``rf`` replicas each (only those that change): the reassignment's input."""
    bs = sorted(set(brokers))
    parts = sorted(k for k in current if k[0] == topic)
    if not parts:
        raise UsageError(f"no topic {topic!r}", hint="`kctl topic list` names them")
    if rf < 1:
        raise UsageError(f"replication factor {rf} is below 1", hint="a topic keeps one replica at least")
    if rf > len(bs):
        raise UsageError(f"replication factor {rf} needs at least {rf} brokers; {len(bs)} available"
                         f" ({','.join(map(str, bs))})", hint="add brokers first, or choose a lower factor")
    load = bytes_per_broker(current, sizes, bs)
    out: Assignment = {}
    for k in parts:
        reps = list(current[k])
        while len(reps) < rf:
            free = [b for b in bs if b not in reps]
            on = {racks.get(b) for b in reps} if racks else set()
            fresh_rack = [b for b in free if racks and racks.get(b) is not None and racks.get(b) not in on]
            b = min(fresh_rack or free, key=lambda b: (load.get(b, 0), b))
            reps.append(b)
            load[b] = load.get(b, 0) + sizes.get(k, 0)
        while len(reps) > rf:
            # never the preferred leader; among the rest, one whose leaving keeps the most racks, most-loaded first
            followers = reps[1:]
            b = max(followers, key=lambda b: (_rack_count([r for r in reps if r != b], racks), load.get(b, 0), b))
            reps.remove(b)
            load[b] = load.get(b, 0) - sizes.get(k, 0)
        if reps != list(current[k]):
            out[k] = reps
    return out


def seconds_left(bytes_left: int, *, throttle: int | None = None,
                 samples: Sequence[tuple[float, int]] = ()) -> float | None:
    """Time left of a reassignment with ``bytes_left`` to copy: from the rate observed between the first and the
    last of ``samples`` (moment in seconds, bytes left then), capped by ``throttle`` (the most bytes/s the move can
    go at: the per-broker replication throttle times the brokers receiving); from the throttle alone without two
    samples; None with neither, or when no byte moved between the samples and there is no throttle to go by."""
    if bytes_left <= 0:
        return 0.0
    rate: float | None = None
    if len(samples) >= 2:
        (t0, b0), (t1, b1) = samples[0], samples[-1]
        if t1 > t0 and b0 > b1:
            rate = (b0 - b1) / (t1 - t0)
    if throttle is not None and throttle > 0:
        rate = min(rate, float(throttle)) if rate is not None else float(throttle)
    return bytes_left / rate if rate else None
