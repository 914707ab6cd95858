"""kctl.kafka.converge's pure parts: kafka-configs' quota lines by entity, what kctl and its mirrors own (never
planned, exported or pruned), a declared user's password file (read, never shown; refused when others may read
it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kctl.errors import UsageError
from kctl.kafka import converge
from kctl.kafka.declared import DEFAULT, QuotaEntity
from kctl.model.spec import parse_spec


def test_quota_lines_by_entity() -> None:
    text = """Quota configs for user-principal 'alice' are producer_byte_rate=1024.0, consumer_byte_rate=2048.0
Quota configs for the default user-principal are request_percentage=50.0
Quota configs for client-id 'c1' are producer_byte_rate=10.0
Quota configs for the default client-id are consumer_byte_rate=99.0
Quota configs for user-principal 'bob', client-id 'app' are controller_mutation_rate=5.0
Quota configs for user-principal 'bob', the default client-id are producer_byte_rate=7.0
Some other line
"""
    got = converge.parse_quota_entities(text)
    assert got == {
        QuotaEntity("alice", None): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        QuotaEntity(DEFAULT, None): {"request_percentage": 50.0},
        QuotaEntity(None, "c1"): {"producer_byte_rate": 10.0},
        QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 99.0},
        QuotaEntity("bob", "app"): {"controller_mutation_rate": 5.0},
        QuotaEntity("bob", DEFAULT): {"producer_byte_rate": 7.0},
    }


class _Znodes:
    """Kafka's quota znodes as kazoo answers them: data and children by path."""

    def __init__(self, tree: dict[str, dict[str, str]]) -> None:
        self.tree = tree

    def get(self, path: str) -> tuple[bytes, object]:
        from kazoo.exceptions import NoNodeError

        if path not in self.tree and not any(p.startswith(path + "/") for p in self.tree):
            raise NoNodeError(path)
        conf = self.tree.get(path)
        return (json.dumps({"version": 1, "config": conf}).encode() if conf is not None else b""), None

    def get_children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        kids = {p[len(path) + 1:].split("/")[0] for p in self.tree if p.startswith(path + "/")}
        if not kids and path not in self.tree:
            raise NoNodeError(path)
        return sorted(kids)


def test_quotas_read_from_zookeeper_are_what_kafka_configs_describes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same entities as the kafka-configs lines above, from the znodes Kafka writes (sanitized names, the
    SCRAM credentials beside a user's quotas left out)."""
    import contextlib

    from kctl.kafka import configs

    tree = {
        "/config/users/alice": {"producer_byte_rate": "1024", "consumer_byte_rate": "2048",
                                "SCRAM-SHA-512": "salt=abc,stored_key=def,server_key=ghi,iterations=4096"},
        "/config/users/<default>": {"request_percentage": "50"},
        "/config/users/carol": {"SCRAM-SHA-512": "salt=x"},  # a user with credentials and no quota
        "/config/clients/c1": {"producer_byte_rate": "10"},
        "/config/clients/<default>": {"consumer_byte_rate": "99"},
        "/config/users/bob/clients/app%2A1": {"controller_mutation_rate": "5"},
        "/config/users/bob/clients/<default>": {"producer_byte_rate": "7"},
    }
    monkeypatch.setattr(configs.znodes, "connect", lambda spec, **kw: contextlib.nullcontext(_Znodes(tree)))
    spec, _ = parse_spec({"name": "t"})
    got = converge._quotas(spec)
    assert got == {
        QuotaEntity("alice", None): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        QuotaEntity(DEFAULT, None): {"request_percentage": 50.0},
        QuotaEntity(None, "c1"): {"producer_byte_rate": 10.0},
        QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 99.0},
        QuotaEntity("bob", "app*1"): {"controller_mutation_rate": 5.0},
        QuotaEntity("bob", DEFAULT): {"producer_byte_rate": 7.0},
    }


def test_what_kafka_kctl_and_the_mirrors_own_is_never_planned() -> None:
    spec, _ = parse_spec({"name": "t", "mirrors": [
        {"name": "east", "source": {"bootstrap_servers": "127.0.0.1:1"}},
        {"name": "west", "source": {"bootstrap_servers": "127.0.0.1:2"}, "policy": "identity",
         "topics": "orders|audit", "topics_exclude": "audit"}]})
    owned = ["__consumer_offsets", "__kctl_health", "mm2-offsets.east.internal", "heartbeats",
             "east.checkpoints.internal", "east.orders", "orders"]
    assert all(converge.kctls_topic(spec, n) for n in owned)
    assert not any(converge.kctls_topic(spec, n) for n in ("audit", "payments", "eastern", "west.orders"))
    assert converge.kctls_user("mirror-to-b") and converge.kctls_user("mirror-from-east")
    assert converge.kctls_user("kctl-stream-main")  # the stream job's on kctl.yaml's Spark cluster
    assert not converge.kctls_user("app") and not converge.kctls_user("stream-main")


def test_a_password_file_is_read_and_checked(tmp_path: Path) -> None:
    spec_file = tmp_path / "kctl.yaml"
    f = tmp_path / "app.password"
    f.write_text("s3cret-password\nignored\n")
    os.chmod(f, 0o600)
    assert converge.read_password(spec_file, "app.password") == "s3cret-password"
    os.chmod(f, 0o644)
    with pytest.raises(UsageError, match="readable by others") as e:
        converge.read_password(spec_file, "app.password")
    assert "s3cret" not in e.value.message and "chmod 600" in (e.value.hint or "")
    os.chmod(f, 0o600)
    f.write_text("short\n")
    with pytest.raises(UsageError, match="shorter than 8"):
        converge.read_password(spec_file, str(f))
    with pytest.raises(UsageError, match="cannot read the password file"):
        converge.read_password(spec_file, "missing.password")


def test_nothing_declared_is_nothing_to_converge() -> None:
    assert not converge.declares(parse_spec({"name": "t"})[0])
    assert converge.declares(parse_spec({"name": "t", "topics": []})[0])


def test_diff_names_who_last_changed_a_subject_where_the_audit_log_knows(tmp_path: Path) -> None:
    from kctl.console.audit import AuditLog, who_changed
    from kctl.kafka.declared import Action, Kind

    log = AuditLog(tmp_path / "audit.jsonl")
    log.append(user="ann", action="topic-config", result="done", cluster="c1", target="orders")
    log.append(user="bob", action="topic-config", result="done", cluster="c1", target="orders")  # the newest
    log.append(user="eve", action="topic-config", result="refused", cluster="c1", target="audit")  # not a change
    log.append(user="dan", action="topic-config", result="done", cluster="other", target="audit")  # other cluster
    log.append(user="cy", action="user-create", result="done", cluster="c1", target="app")
    acts = [Action(Kind.set_topic_configs, "orders", "set configs of topic 'orders': retention.ms=1"),
            Action(Kind.set_topic_configs, "audit", "set configs of topic 'audit': retention.ms=1"),
            Action(Kind.create_acl, "User:app", "add ACL: allow User:app read on topic 'orders'")]
    got = who_changed(acts, tmp_path / "audit.jsonl", "c1")
    assert set(got) == {acts[0].description, acts[2].description}
    assert got[acts[0].description].startswith("bob in the console (topic-config, ")
    assert got[acts[2].description].startswith("cy in the console (user-create, ")
    assert who_changed(acts, tmp_path / "none.jsonl", "c1") == {}  # no console ran: nothing said
