"""The balanced-assignment planner of `kctl reassign plan` (pure: no Kafka)."""

from __future__ import annotations

import itertools
import json

import pytest

from kctl.errors import UsageError
from kctl.kafka import balance as bal


def created(topics: dict[str, int], brokers: list[int], rf: int = 3) -> bal.Assignment:
    """What Kafka's round-robin creation gives: replicas [b, b+1, ...] starting at a rotating broker."""
    out: bal.Assignment = {}
    for start, (t, n) in enumerate(topics.items()):
        for p in range(n):
            out[(t, p)] = [brokers[(start + p + i) % len(brokers)] for i in range(rf)]
    return out


def spread_ok(counts: dict[int, int]) -> bool:
    return max(counts.values()) - min(counts.values()) <= 1


def assert_valid(plan: bal.BalancePlan) -> None:
    for k, reps in plan.target.items():
        assert len(reps) == len(plan.current[k]), k
        assert len(set(reps)) == len(reps), k
        assert set(reps) <= set(plan.brokers), k
    assert spread_ok(plan.replica_counts()), plan.replica_counts()
    assert spread_ok(plan.leader_counts()), plan.leader_counts()


def test_adding_a_broker_moves_about_its_share_and_balances_replicas_and_leaders() -> None:
    cur = created({"a": 6, "b": 6, "c": 6}, [1, 2, 3])
    plan = bal.balance(cur, [1, 2, 3, 4])
    assert_valid(plan)
    total = sum(len(r) for r in cur.values())  # 54
    assert plan.replica_counts() == {1: 14, 2: 14, 3: 13, 4: 13} or sorted(plan.replica_counts().values()) == [
        13, 13, 14, 14]
    # Minimal movement: exactly the new broker's share moves, nothing else shuffles.
    assert plan.replicas_moved == plan.replica_counts()[4] == total // 4
    for m in plan.moves:
        assert m.adding == [4] and len(m.removing) == 1
    # The leader of each partition only changes where the new broker must take its share of leaders.
    assert plan.leader_counts()[4] in (4, 5)


def test_balanced_assignment_is_left_alone() -> None:
    cur = created({"a": 6, "b": 3}, [1, 2, 3])
    plan = bal.balance(cur, [1, 2, 3])
    assert plan.moves == []
    assert plan.target == cur


def test_removing_a_broker_moves_only_its_replicas() -> None:
    cur = created({"a": 8, "b": 4}, [1, 2, 3, 4])
    plan = bal.balance(cur, [1, 2, 3])
    assert_valid(plan)
    on4 = sum(1 for r in cur.values() if 4 in r)
    assert plan.replicas_moved == on4
    assert all(m.removing == [4] for m in plan.moves)
    assert all(4 not in r for r in plan.target.values())


def test_skewed_assignment_gets_balanced() -> None:
    cur = {("t", p): [1, 2] for p in range(10)}  # everything on 1 and 2, leaders all on 1
    plan = bal.balance(cur, [1, 2, 3, 4, 5])
    assert_valid(plan)
    assert plan.replica_counts() == {1: 4, 2: 4, 3: 4, 4: 4, 5: 4}
    assert plan.leader_counts() == {1: 2, 2: 2, 3: 2, 4: 2, 5: 2}


@pytest.mark.parametrize("brokers,new", list(itertools.product([[1, 2, 3], [1, 2, 3, 4, 5]],
                                                                [[1, 2, 4], [2, 3, 4, 5, 6, 7]])))
def test_any_set_gives_a_valid_balanced_plan(brokers: list[int], new: list[int]) -> None:
    cur = created({"x": 7, "y": 5, "z": 1}, brokers, rf=3)
    cur[("one", 0)] = [brokers[0]]  # an RF 1 partition among them
    plan = bal.balance(cur, new)
    assert_valid(plan)
    kept_total = sum(len(set(cur[k]) & set(plan.target[k])) for k in cur)
    assert kept_total + plan.replicas_moved == sum(len(r) for r in cur.values())


def test_rf_above_the_broker_count_is_refused() -> None:
    with pytest.raises(UsageError, match="replication factor 3 .* needs at least 3 brokers; 2 given"):
        bal.balance(created({"a": 2}, [1, 2, 3]), [1, 2])
    with pytest.raises(UsageError, match="twice"):
        bal.balance(created({"a": 2}, [1, 2, 3]), [1, 2, 2])


def test_kafka_json_round_trip() -> None:
    a = {("t", 1): [2, 3], ("t", 0): [1, 2]}
    doc = bal.to_kafka_json(a)
    assert doc == {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]},
                                                {"topic": "t", "partition": 1, "replicas": [2, 3]}]}
    assert bal.parse_kafka_json(json.dumps(doc)) == a


@pytest.mark.parametrize("text,fragment", [
    ("{", "not JSON"),
    ("[]", 'no "partitions" list'),
    ('{"version": 2, "partitions": []}', "unsupported version"),
    ('{"partitions": []}', "lists no partitions"),
    ('{"partitions": [{"partition": 0, "replicas": [1]}]}', "no topic name"),
    ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', "partition must be"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "replicas must be"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "appears twice"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0,'
     ' "replicas": [2]}]}', "listed twice"),
])
def test_malformed_plans_are_named(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment) as e:
        bal.parse_kafka_json(text, "plan.json")
    assert e.value.hint


def test_plan_checked_against_the_cluster() -> None:
    parts = {("t", 0): [1, 2], ("t", 1): [2, 3]}
    bal.validate_against({("t", 0): [2, 3]}, [1, 2, 3], parts)
    with pytest.raises(UsageError, match="broker.* 9 that are not registered"):
        bal.validate_against({("t", 0): [1, 9]}, [1, 2, 3], parts)
    with pytest.raises(UsageError, match="topic.*do not exist: nope"):
        bal.validate_against({("nope", 0): [1, 2]}, [1, 2, 3], parts)
    with pytest.raises(UsageError, match="partition.*t-5"):
        bal.validate_against({("t", 5): [1, 2]}, [1, 2, 3], parts)
    with pytest.raises(UsageError, match="replication factor of t-0 .2 -> 3") as e:
        bal.validate_against({("t", 0): [1, 2, 3]}, [1, 2, 3], parts)
    assert "--replication-factor-change" in (e.value.hint or "")
    # asked for (a plan from `kctl reassign plan --replication-factor`): the factor may change, the rest is checked
    bal.validate_against({("t", 0): [1, 2, 3], ("t", 1): [2]}, [1, 2, 3], parts, change_rf=True)
    with pytest.raises(UsageError, match="not registered"):
        bal.validate_against({("t", 0): [1, 2, 9]}, [1, 2, 3], parts, change_rf=True)


def test_rates_and_broker_lists() -> None:
    assert bal.parse_rate("50MB/s") == 50_000_000
    assert bal.parse_rate("10MiB/s") == 10 * 1024 * 1024
    assert bal.parse_rate("1000") == 1000
    for bad in ("fast", "0MB/s", "5 parsecs"):
        with pytest.raises(UsageError):
            bal.parse_rate(bad)
    assert bal.parse_brokers("1,2,4") == [1, 2, 4]
    with pytest.raises(UsageError):
        bal.parse_brokers("1,x")


def test_bytes_left_is_what_each_new_replica_lacks_of_the_largest_original() -> None:
    from kctl.kafka.reassign import Moving, bytes_left

    moving = [Moving("t-0", [1, 2, 4], adding=[4], removing=[1]),
              Moving("t-1", [2, 3, 4, 1], adding=[4, 1], removing=[2, 3])]
    sizes = {(1, "t-0"): 1000, (2, "t-0"): 990, (4, "t-0"): 400,
             (2, "t-1"): 500, (3, "t-1"): 500, (4, "t-1"): 500}
    assert bytes_left(moving, sizes) == 600 + (0 + 500)
    assert [m.bytes_left for m in moving] == [600, 500]
