"""kctl.yaml's topics:, users:, acls: and quotas: sections, and kctl.kafka.declared's plan and export (pure)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kctl.errors import SpecError, UsageError
from kctl.kafka import declared as d
from kctl.kafka.declared import DEFAULT, Acl, Credential, Kind, QuotaEntity, Topic, declared_from, plan
from kctl.model.spec import QUOTA_KEYS, QuotaSpec, parse_spec

SECURED = {"security": {"enabled": True}}


def spec(**sections: Any) -> Any:
    s, _ = parse_spec({**SECURED, **sections})
    return s


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as ei:
        parse_spec(data)
    assert ei.value.exit_code == 2
    return ei.value.problems


def one(ps: list[str], start: str) -> str:
    found = [p for p in ps if p.startswith(start)]
    assert found, f"no problem at {start}: {ps}"
    return found[0]


# ----- the spec ------------------------------------------------------------------------------------


def test_sections_left_out_change_nothing_and_are_not_dumped() -> None:
    s, warnings = parse_spec({})
    assert (s.topics, s.users, s.acls, s.quotas) == (None, None, None, None)
    assert warnings == []
    dumped = s.model_dump(mode="json", exclude_none=True)
    assert not {"topics", "users", "acls", "quotas"} & set(dumped)
    state = declared_from(s)
    assert plan(state, d.live_state(topics=[Topic("x", 1, 1)]), prune=True).empty


def test_a_full_declaration_is_accepted_with_its_defaults() -> None:
    s = spec(topics=[{"name": "orders", "configs": {"retention.ms": 86400000, "cleanup.policy": ["compact", "delete"],
                                                     "preallocate": False}}],
             users=[{"name": "alice", "password_file": "secrets/alice"}],
             acls=[{"principal": "User:alice", "operation": "READ", "resource_type": "topic", "resource": "orders"},
                   {"principal": "User:alice", "operation": "idempotent_write", "resource_type": "cluster"}],
             quotas=[{"user": "alice", "producer_byte_rate": 1048576}, {"client_default": True,
                                                                         "request_percentage": 50}])
    t = s.topics[0]
    assert t.configs == {"retention.ms": "86400000", "cleanup.policy": "compact,delete", "preallocate": "false"}
    state = declared_from(s)
    assert state.topics == {"orders": Topic("orders", 3, 3, t.configs)}  # kafka.num_partitions, default RF
    assert state.credentials == {Credential("alice", "SCRAM-SHA-512")}
    assert Acl("User:alice", "allow", "read", "topic", "orders") in state.acls
    assert Acl("User:alice", "allow", "idempotent_write", "cluster", "kafka-cluster") in state.acls
    assert state.quotas == {QuotaEntity("alice", None): {"producer_byte_rate": 1048576.0},
                            QuotaEntity(None, DEFAULT): {"request_percentage": 50.0}}


def test_topic_defaults_follow_the_brokers_overrides() -> None:
    s = spec(kafka={"overrides": {"num.partitions": 6, "default.replication.factor": 2}}, topics=[{"name": "t"}])
    assert declared_from(s).topics == {"t": Topic("t", 6, 2)}


def test_a_password_value_is_refused_with_its_path_and_hint() -> None:
    p = one(problems({**SECURED, "users": [{"name": "bob", "password": "hunter22", "password_file": "f"}]}),
            "users.0.password:")
    assert "kctl.yaml holds no password" in p and "password_file" in p
    assert "hunter22" not in p
    assert "users.0.password_file" in "\n".join(problems({**SECURED, "users": [{"name": "bob"}]}))


def test_every_refusal_at_once_with_field_paths() -> None:
    ps = problems({"nodes": [{"id": 1, "hostname": "logger1"}],
                   "topics": [{"name": "a"}, {"name": "a", "replication_factor": 2}, {"name": "__x"},
                              {"name": "b", "partitions": 1, "replication_factor": 1,
                               "configs": {"min.insync.replicas": "2"}}],
                   "users": [{"name": "u", "password_file": "f"}],
                   "acls": [{"principal": "User:u", "operation": "read", "resource_type": "topic", "resource": "a"}],
                   "quotas": [{"user": "u", "consumer_byte_rate": 1}, {"client": "c"}]})
    assert "above the 1 broker(s)" in one(ps, "topics.0.replication_factor (the default): 3")
    assert "already topics.0" in one(ps, "topics.1.name:")
    assert "2 is above the 1 broker(s)" in one(ps, "topics.1.replication_factor:")
    assert "Kafka's and kctl's own" in one(ps, "topics.2.name:")
    assert "replication factor 1" in one(ps, "topics.3.configs.min.insync.replicas:")
    for section in ("users: ", "acls: "):
        p = one(ps, section)
        assert "secured profile" in p and "hint: set security.enabled: true" in p
    assert "client id's quota works without it" in one(ps, "quotas.0.user:")
    assert "hint: e.g. producer_byte_rate" in one(ps, "quotas.1: no quota given")


def test_acl_and_user_refusals() -> None:
    ps = problems({**SECURED,
                   "users": [{"name": "admin", "password_file": "f"}, {"name": "x", "password_file": "f"},
                             {"name": "x", "password_file": "g"}, {"name": "-y", "password_file": "f"}],
                   "acls": [{"principal": "alice", "operation": "read", "resource_type": "topic", "resource": "t"},
                            {"principal": "User:a", "operation": "reed", "resource_type": "topic", "resource": "t"},
                            {"principal": "User:a", "operation": "read", "resource_type": "queue", "resource": "t"},
                            {"principal": "User:a", "operation": "read", "resource_type": "topic", "resource": "t",
                             "permission": "maybe", "pattern": "glob"}]})
    assert "write it as User:NAME" in one(ps, "acls.0.principal:")
    assert "not an ACL operation (one of read, write" in one(ps, "acls.1.operation:")
    assert "not a resource type" in one(ps, "acls.2.resource_type:")
    one(ps, "acls.3.permission:")
    one(ps, "acls.3.pattern:")
    one(ps, "users.3.name:")

    ps = problems({**SECURED,
                   "users": [{"name": "admin", "password_file": "f"}, {"name": "x", "password_file": "f"},
                             {"name": "x", "password_file": "g"}, {"name": "x", "mechanism": "scram-sha-256",
                                                                    "password_file": "g"}],
                   "acls": [{"principal": "User:a", "operation": "write", "resource_type": "group", "resource": "g"},
                            {"principal": "User:a", "operation": "read", "resource_type": "topic"},
                            {"principal": "User:a", "operation": "alter", "resource_type": "cluster",
                             "resource": "c", "pattern": "prefixed"},
                            {"principal": "User:a", "operation": "read", "resource_type": "group", "resource": "g"},
                            {"principal": "User:a", "operation": "READ", "resource_type": "group", "resource": "g"}]})
    assert "kctl's admin user" in one(ps, "users.0.name:") and "hint: pick another name" in one(ps, "users.0.name:")
    assert "already users.1" in one(ps, "users.2.name:")
    assert not [p for p in ps if p.startswith("users.3")]  # another mechanism: a second credential
    assert "hint: one of read, describe, delete, all" in one(ps, "acls.0.operation: write is not an operation on a"
                                                                 " group")
    one(ps, "acls.1.resource: a topic ACL names its topic")
    assert "kafka-cluster" in one(ps, "acls.2.resource:")
    one(ps, "acls.2.pattern:")
    assert one(ps, "acls.4: the same ACL as acls.3")


def test_quota_refusals_name_the_quota_words() -> None:
    ps = problems({**SECURED, "quotas": [{"user": "a", "producer-byte-rate": 3}]})
    assert "quotas are producer_byte_rate, consumer_byte_rate" in one(ps, "quotas.0:")
    assert len(problems({**SECURED, "quotas": [{"producer_byte_rate": 1}]})) == 1
    ps = problems({**SECURED, "quotas": [{"producer_byte_rate": 1},
                                         {"user": "a", "user_default": True, "consumer_byte_rate": 1},
                                         {"user": "b", "consumer_byte_rate": 1},
                                         {"user": "b", "request_percentage": 1}]})
    assert "hint: name user, client" in one(ps, "quotas.0: no quota entity")
    one(ps, "quotas.1: user and user_default")
    assert "hint: one entry per entity" in one(ps, "quotas.3: user 'b' already has quotas.2")
    assert set(QUOTA_KEYS) <= set(QuotaSpec.model_fields)


def test_client_quotas_need_no_secured_profile_and_odd_things_warn() -> None:
    s, warnings = parse_spec({"quotas": [{"client": "app", "producer_byte_rate": 10}],
                              "topics": [{"name": "t", "configs": {"retention.msec": 1}}]})
    assert s.quotas is not None
    assert any(w.startswith("topics.0.configs.retention.msec: not a topic config") for w in warnings)
    _, warnings = parse_spec({**SECURED, "users": [{"name": "u", "mechanism": "SCRAM-SHA-256",
                                                     "password_file": "f"}]})
    assert any(w.startswith("users.0.mechanism: SCRAM-SHA-256") and "cannot log in" in w for w in warnings)


def test_the_spec_document_lists_the_sections() -> None:
    from kctl.model.docgen import render

    doc = render()
    for row in ("`topics[].replication_factor`", "`users[].password_file`", "`acls[].operation`",
                "`quotas[].producer_byte_rate`", "`users[].password`"):
        assert row in doc
    assert "`acls`: only with `security.enabled`" in doc


# ----- the plan ------------------------------------------------------------------------------------

FULL = dict(
    topics=[{"name": "orders", "partitions": 6, "configs": {"retention.ms": "3600000"}},
            {"name": "events", "partitions": 3, "replication_factor": 2}],
    users=[{"name": "alice", "password_file": "secrets/alice"}],
    acls=[{"principal": "User:alice", "operation": "read", "resource_type": "topic", "resource": "orders"},
          {"principal": "User:alice", "operation": "read", "resource_type": "group", "resource": "app-",
           "pattern": "prefixed"}],
    quotas=[{"user": "alice", "producer_byte_rate": 1048576, "request_percentage": 25.5}],
)


def matching_live() -> d.State:
    return d.live_state(
        topics=[Topic("orders", 6, 3, {"retention.ms": "3600000"}), Topic("events", 3, 2),
                Topic("__consumer_offsets", 50, 3, {"cleanup.policy": "compact"}), Topic("__kctl_health", 1, 3)],
        credentials=[Credential("alice", "SCRAM-SHA-512"), Credential("admin", "SCRAM-SHA-512")],
        acls=[Acl.of("User:alice", "ALLOW", "READ", "TOPIC", "orders", "LITERAL"),
              Acl.of("User:alice", "ALLOW", "READ", "GROUP", "app-", "PREFIXED")],
        quotas={QuotaEntity("alice"): {"producer_byte_rate": 1048576.0, "request_percentage": 25.5}},
        admin_user="admin")


def test_a_fresh_cluster_gets_every_creation() -> None:
    fresh = d.live_state(topics=[Topic("__consumer_offsets", 50, 3)], credentials=[Credential("admin",
                                                                                               "SCRAM-SHA-512")],
                         acls=[], quotas={}, admin_user="admin")
    p = plan(declared_from(spec(**FULL)), fresh, prune=True)
    assert [a.kind for a in p.actions] == [Kind.create_topic, Kind.create_topic, Kind.create_credential,
                                           Kind.create_acl, Kind.create_acl, Kind.set_quota]
    assert p.lines() == [
        "create topic 'events': 3 partition(s), replication factor 2",
        "create topic 'orders': 6 partition(s), replication factor 3, retention.ms=3600000",
        "create user 'alice' (SCRAM-SHA-512), its password from secrets/alice",
        "add ACL: allow User:alice read on group prefix 'app-'",
        "add ACL: allow User:alice read on topic 'orders'",
        "set quotas of user 'alice': producer_byte_rate=1048576, request_percentage=25.5",
    ]
    assert p.actions[1].params == {"topic": "orders", "partitions": 6, "replication_factor": 3,
                                   "configs": {"retention.ms": "3600000"}}
    assert p.changes == p.actions and not p.kept and not p.refused
    p.check()


def test_a_cluster_that_matches_has_an_empty_plan() -> None:
    for prune in (False, True):
        assert plan(declared_from(spec(**FULL)), matching_live(), prune=prune).empty


def test_drift_made_by_hand_is_found() -> None:
    live = matching_live()
    assert live.topics is not None and live.quotas is not None and live.acls is not None
    live.topics["orders"] = Topic("orders", 4, 3, {"retention.ms": "1", "segment.ms": "60000"})
    live.quotas[QuotaEntity("alice")] = {"producer_byte_rate": 2048.0, "consumer_byte_rate": 10.0,
                                         "request_percentage": 25.5}
    live.acls.discard(Acl.of("User:alice", "ALLOW", "READ", "TOPIC", "orders"))
    p = plan(declared_from(spec(**FULL)), live, prune=False)
    assert p.lines() == [
        "add partitions to topic 'orders': 4 -> 6",
        "set configs of topic 'orders': retention.ms=3600000 (was 1)",
        "reset configs of topic 'orders' to the cluster's default: segment.ms (was 60000)",
        "add ACL: allow User:alice read on topic 'orders'",
        "set quotas of user 'alice': producer_byte_rate=1048576 (was 2048)",
        "remove quotas of user 'alice': consumer_byte_rate (was 10)",
    ]
    assert p.actions[2].params == {"topic": "orders", "keys": ["segment.ms"]}
    assert p.actions[5].params["keys"] == ["consumer_byte_rate"]


def test_partitions_never_shrink() -> None:
    live = matching_live()
    assert live.topics is not None
    live.topics["orders"] = Topic("orders", 12, 3, {"retention.ms": "3600000"})
    p = plan(declared_from(spec(**FULL)), live, prune=False)
    assert [a.kind for a in p.actions] == [Kind.refused]
    assert "cannot shrink from 12 to 6 partitions" in p.lines()[0]
    assert not p.changes
    with pytest.raises(UsageError) as ei:
        p.check()
    assert "cannot shrink" in ei.value.message and ei.value.hint


def test_a_replication_factor_change_is_a_reassignment() -> None:
    live = matching_live()
    assert live.topics is not None
    live.topics["events"] = Topic("events", 3, 3)
    p = plan(declared_from(spec(**FULL)), live, prune=False)
    assert [a.kind for a in p.actions] == [Kind.reassign_replication]
    assert p.reassignments == p.actions
    assert p.actions[0].params == {"topic": "events", "replication_factor": 2, "from": 3}
    assert "3 -> 2 (a partition reassignment, not in place)" in p.lines()[0]


def extra_live() -> d.State:
    live = matching_live()
    assert live.topics is not None and live.credentials is not None and live.acls is not None
    assert live.quotas is not None
    live.topics["scratch"] = Topic("scratch", 1, 1)
    live.credentials |= {Credential("bob", "SCRAM-SHA-256"), Credential("alice", "SCRAM-SHA-256")}
    live.acls.add(Acl.of("User:bob", "DENY", "ALTER", "BROKER", "kafka-cluster", "LITERAL", "10.0.0.1"))
    live.acls.add(Acl.of("User:bob", "ALLOW", "DESCRIBE", "DELEGATION_TOKEN", "t"))  # never planned
    live.quotas[QuotaEntity(DEFAULT, "x")] = {"consumer_byte_rate": 5.0}
    return live


def test_without_prune_what_is_not_declared_is_kept_and_listed() -> None:
    p = plan(declared_from(spec(**FULL)), extra_live(), prune=False)
    assert all(a.kind is Kind.kept for a in p.actions)
    assert p.lines() == [
        "topic 'scratch': not in kctl.yaml (kept; --prune deletes)",
        "user 'alice''s SCRAM-SHA-256 credential: not in kctl.yaml (kept; --prune deletes)",
        "user 'bob': not in kctl.yaml (kept; --prune deletes)",
        "ACL deny User:bob alter on the cluster from 10.0.0.1: not in kctl.yaml (kept; --prune deletes)",
        "quotas of user default and client-id 'x' (consumer_byte_rate=5): not in kctl.yaml (kept; --prune deletes)",
    ]
    assert not p.changes


def test_prune_deletes_first_and_never_kafkas_or_kctls_own() -> None:
    live = extra_live()
    assert live.topics is not None
    live.topics["orders"] = Topic("orders", 3, 3)
    p = plan(declared_from(spec(**FULL)), live, prune=True)
    kinds = [a.kind for a in p.actions]
    assert kinds[:5] == [Kind.delete_topic, Kind.delete_credential, Kind.delete_credential, Kind.delete_acl,
                         Kind.delete_quota]
    assert set(kinds[5:]) == {Kind.add_partitions, Kind.set_topic_configs}
    assert p.actions[0].description == "delete topic 'scratch' (not in kctl.yaml; --prune)"
    assert p.actions[1].params == {"user": "alice", "mechanism": "SCRAM-SHA-256", "last": False}
    assert p.actions[2].params == {"user": "bob", "mechanism": "SCRAM-SHA-256", "last": True}
    assert p.actions[4].params["entity"].tool_args == ["--entity-type", "users", "--entity-default",
                                                       "--entity-type", "clients", "--entity-name", "x"]
    text = "\n".join(p.lines())
    assert "__consumer_offsets" not in text and "__kctl_health" not in text and "admin" not in text
    assert "delegation" not in text


def test_an_empty_section_manages_everything_in_it() -> None:
    p = plan(declared_from(spec(topics=[], acls=[])), extra_live(), prune=True)
    assert [a.subject for a in p.actions if a.kind is Kind.delete_topic] == ["events", "orders", "scratch"]
    assert len([a for a in p.actions if a.kind is Kind.delete_acl]) == 3
    assert not [a for a in p.actions if a.kind in (Kind.delete_credential, Kind.delete_quota)]


# ----- export ------------------------------------------------------------------------------------


def round_trip(live: d.State) -> d.Plan:
    exported = d.export(live)
    s, _ = parse_spec({**SECURED, **exported})
    return plan(declared_from(s), live, prune=True)


def test_export_has_the_spec_shape_and_round_trips_clean() -> None:
    live = extra_live()
    data = d.export(live)
    assert data["topics"][0] == {"name": "events", "partitions": 3, "replication_factor": 2}
    assert {"name": "bob", "mechanism": "SCRAM-SHA-256", "password_file": "secrets/bob.password"} in data["users"]
    assert not [u for u in data["users"] if u["name"] == "admin"]
    assert {"principal": "User:bob", "permission": "deny", "operation": "alter", "resource_type": "cluster",
            "host": "10.0.0.1"} in data["acls"]
    assert {"user_default": True, "client": "x", "consumer_byte_rate": 5} in data["quotas"]
    assert {"user": "alice", "producer_byte_rate": 1048576, "request_percentage": 25.5} in data["quotas"]
    assert round_trip(live).empty
    text = d.export_yaml(live)
    assert "# users: Kafka keeps only a salted hash" in text
    import yaml

    assert yaml.safe_load(text) == data


def random_live(rng: random.Random) -> d.State:
    words = ["a", "b.c", "d-e", "f_g", "h1"]
    topics = [Topic(n, rng.randint(1, 12), rng.randint(1, 3),
                    {k: rng.choice(["1", "compact", "0.5", "true"])
                     for k in rng.sample(["retention.ms", "cleanup.policy", "min.cleanable.dirty.ratio",
                                          "preallocate"], rng.randint(0, 3))})
              for n in rng.sample(words, rng.randint(0, 5))]
    creds = {Credential(rng.choice(words + ["admin"]), rng.choice(["SCRAM-SHA-512", "SCRAM-SHA-256"]))
             for _ in range(rng.randint(0, 5))}
    acls = {Acl.of(f"User:{rng.choice(words + ['*'])}", rng.choice(["ALLOW", "DENY"]), op, rt,
                   None if rt == "BROKER" else rng.choice(words + ["*"]),
                   "LITERAL" if rt == "BROKER" else rng.choice(["LITERAL", "PREFIXED"]), rng.choice(["*", "10.1.2.3"]))
            for op, rt in (rng.choice([("READ", "TOPIC"), ("DESCRIBE", "GROUP"), ("ALTER", "BROKER"),
                                       ("WRITE", "TRANSACTIONAL_ID"), ("ALL", "TOPIC")])
                           for _ in range(rng.randint(0, 6)))}
    quotas: dict[QuotaEntity, dict[str, float]] = {}
    for _ in range(rng.randint(0, 4)):
        e = QuotaEntity(rng.choice([None, DEFAULT, "a", "b.c"]), rng.choice([None, DEFAULT, "app"]))
        if e.user is None and e.client is None:
            continue
        quotas[e] = {k: float(rng.randint(1, 10**7)) if k.endswith("_byte_rate") else rng.choice([12.5, 200.0])
                     for k in rng.sample(QUOTA_KEYS, rng.randint(1, 4))}
    return d.live_state(topics, creds, acls, quotas, admin_user="admin")


def test_export_round_trips_for_generated_live_states() -> None:
    rng = random.Random(48)
    for _ in range(200):
        live = random_live(rng)
        p = round_trip(live)
        assert p.empty, (d.export(live), p.lines())
