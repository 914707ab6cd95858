"""Balancing by bytes, replication factor changes and a reassignment's time left (kctl/kafka/bytes_balance.py).

Every balance is checked by sums computed here from the returned assignment, not by the plan's own figures."""

from __future__ import annotations

import random

import pytest

from kctl.errors import UsageError
from kctl.kafka.balance import to_kafka_json
from kctl.kafka.bytes_balance import balance_bytes, change_rf, seconds_left

MB = 1_000_000


def per_broker(assignment: dict[tuple[str, int], list[int]], sizes: dict[tuple[str, int], int],
               brokers: list[int]) -> dict[int, int]:
    out = dict.fromkeys(brokers, 0)
    for k, reps in assignment.items():
        for b in reps:
            out[b] += sizes[k]
    return out


def well_formed(assignment: dict[tuple[str, int], list[int]], current: dict[tuple[str, int], list[int]],
                brokers: list[int]) -> None:
    for k, reps in assignment.items():
        assert len(reps) == len(set(reps)) == len(current[k]), (k, reps)
        assert set(reps) <= set(brokers), (k, reps)


def skewed() -> tuple[dict[tuple[str, int], list[int]], dict[tuple[str, int], int]]:
    """Three brokers; broker 1 holds every replica of the big topic (RF 1), the small topics are spread."""
    current = {("big", p): [1] for p in range(6)}
    current |= {("small", p): [[2, 3], [3, 2], [2, 3]][p % 3] for p in range(6)}
    sizes = {("big", p): 100 * MB for p in range(6)} | {("small", p): 5 * MB for p in range(6)}
    return current, sizes


def test_a_skewed_cluster_is_balanced_within_the_tolerance_by_an_independent_sum() -> None:
    current, sizes = skewed()
    before = per_broker(current, sizes, [1, 2, 3])
    assert before == {1: 600 * MB, 2: 30 * MB, 3: 30 * MB}
    plan = balance_bytes(current, sizes, [1, 2, 3])
    well_formed(plan.target, current, [1, 2, 3])
    after = per_broker(plan.target, sizes, [1, 2, 3])
    mean = sum(after.values()) / 3
    assert sum(after.values()) == sum(before.values())
    assert max(after.values()) - min(after.values()) <= 0.10 * mean + 100 * MB  # within a partition of the goal
    assert max(after.values()) - min(after.values()) < max(before.values()) - min(before.values())
    assert max(after.values()) <= 300 * MB
    assert plan.bytes_per_broker("current") == before and plan.bytes_per_broker() == after
    moved = sum(sizes[(m.topic, m.partition)] * len(m.adding) for m in plan.moves)
    # four of the six big partitions move (the least the goal needs), and at most a couple of small ones to come
    # within the tolerance
    assert plan.bytes_moved == moved and 400 * MB <= moved <= 420 * MB
    assert to_kafka_json({(m.topic, m.partition): m.target for m in plan.moves})["partitions"]


def test_a_balanced_cluster_moves_nothing() -> None:
    current = {("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(6)}
    sizes = dict.fromkeys(current, 10 * MB)
    plan = balance_bytes(current, sizes, [1, 2, 3])
    assert plan.moves == [] and plan.bytes_moved == 0


def test_replicas_leave_a_broker_outside_the_set_largest_first() -> None:
    current = {("t", 0): [1, 4], ("t", 1): [4, 2], ("t", 2): [3, 1]}
    sizes = {("t", 0): 50 * MB, ("t", 1): 10 * MB, ("t", 2): 30 * MB}
    plan = balance_bytes(current, sizes, [1, 2, 3])
    well_formed(plan.target, current, [1, 2, 3])
    assert all(4 not in reps for reps in plan.target.values())


def test_racks_are_never_fewer_after_a_move() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    rng = random.Random(7)
    current: dict[tuple[str, int], list[int]] = {}
    for p in range(12):
        first = rng.choice([1, 2])  # rack a
        current[("t", p)] = [first, rng.choice([3, 4])]  # one replica on each rack
    current |= {("heavy", p): [1, 3] for p in range(4)}
    sizes = {k: (80 * MB if k[0] == "heavy" else rng.randint(1, 10) * MB) for k in current}
    plan = balance_bytes(current, sizes, [1, 2, 3, 4], racks=racks)
    well_formed(plan.target, current, [1, 2, 3, 4])
    for k, reps in plan.target.items():
        assert {racks[b] for b in reps} == {"a", "b"}, (k, reps)
    after = per_broker(plan.target, sizes, [1, 2, 3, 4])
    before = per_broker(current, sizes, [1, 2, 3, 4])
    assert max(after.values()) - min(after.values()) < max(before.values()) - min(before.values())


@pytest.mark.parametrize("seed", range(12))
def test_random_clusters_end_no_worse_and_well_formed(seed: int) -> None:
    rng = random.Random(seed)
    brokers = list(range(1, rng.randint(3, 6) + 1))
    current = {}
    for t in range(rng.randint(1, 4)):
        rf = rng.randint(1, min(3, len(brokers)))
        for p in range(rng.randint(1, 8)):
            current[(f"t{t}", p)] = rng.sample(brokers, rf)
    sizes = {k: rng.choice([0, 1, 5, 50, 500]) * MB for k in current}
    plan = balance_bytes(current, sizes, brokers)
    well_formed(plan.target, current, brokers)
    before, after = per_broker(current, sizes, brokers), per_broker(plan.target, sizes, brokers)
    assert max(after.values()) - min(after.values()) <= max(before.values()) - min(before.values())
    # leaders spread by count where the replicas leave a choice: a broker leads at most its share, or the
    # partitions of one replica it holds (their only replica leads), and one more where the fix-up is cornered
    share = -(-len(plan.target) // len(brokers))
    for b in brokers:
        leads = sum(1 for reps in plan.target.values() if reps[0] == b)
        forced = sum(1 for reps in plan.target.values() if reps == [b])
        assert leads <= max(share, forced) + 1, (b, leads, share, forced)


def test_the_replication_factor_is_raised_on_the_least_loaded_and_on_a_new_rack() -> None:
    current = {("t", 0): [1], ("t", 1): [2], ("other", 0): [3, 4]}
    sizes = {("t", 0): 10 * MB, ("t", 1): 10 * MB, ("other", 0): 100 * MB}
    racks = {1: "a", 2: "a", 3: "b", 4: "c"}
    out = change_rf(current, sizes, [1, 2, 3, 4], "t", 2, racks=racks)
    assert set(out) == {("t", 0), ("t", 1)}
    for k, reps in out.items():
        assert reps[0] == current[k][0] and len(reps) == 2 and len({racks[b] for b in reps}) == 2
    out3 = change_rf(current, sizes, [1, 2, 3, 4], "t", 3)
    assert all(len(set(r)) == 3 and r[0] == current[k][0] for k, r in out3.items())


def test_the_replication_factor_is_lowered_keeping_the_preferred_leader() -> None:
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1]}
    sizes = {("t", 0): 10 * MB, ("t", 1): 10 * MB, }
    out = change_rf(current | {("big", 0): [3]}, sizes | {("big", 0): 900 * MB}, [1, 2, 3], "t", 2)
    assert out[("t", 0)][0] == 1 and out[("t", 1)][0] == 2
    assert all(3 not in reps for reps in out.values())  # the most loaded gives its replicas up
    assert change_rf(current, sizes, [1, 2, 3], "t", 3) == {}


@pytest.mark.parametrize(("rf", "words"), [(4, "needs at least 4 brokers"), (0, "below 1")])
def test_an_impossible_factor_is_one_clear_refusal(rf: int, words: str) -> None:
    with pytest.raises(UsageError, match=words) as refused:
        change_rf({("t", 0): [1]}, {("t", 0): 1}, [1, 2, 3], "t", rf)
    assert refused.value.hint


def test_an_unknown_topic_is_refused() -> None:
    with pytest.raises(UsageError, match="no topic 'x'"):
        change_rf({("t", 0): [1]}, {}, [1], "x", 1)


def test_time_left_from_the_observed_rate_capped_by_the_throttle() -> None:
    assert seconds_left(0) == 0.0
    assert seconds_left(100 * MB) is None
    assert seconds_left(100 * MB, throttle=10 * MB) == pytest.approx(10.0)
    samples = [(0.0, 300 * MB), (10.0, 200 * MB)]  # 10 MB/s observed
    assert seconds_left(200 * MB, samples=samples) == pytest.approx(20.0)
    assert seconds_left(200 * MB, samples=samples, throttle=5 * MB) == pytest.approx(40.0)  # the cap
    assert seconds_left(200 * MB, samples=samples, throttle=50 * MB) == pytest.approx(20.0)
    assert seconds_left(200 * MB, samples=[(0.0, 200 * MB), (10.0, 200 * MB)]) is None  # nothing moved yet
