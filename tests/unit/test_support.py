"""kctl support-bundle without a cluster: secrets planted everywhere kctl keeps them, none found in the archive
(read back with tarfile, not with kctl's code); written whole or not at all."""

from __future__ import annotations

import json
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from kctl.cluster import support
from kctl.errors import UsageError
from kctl.model.spec import parse_spec

TOKEN = "T0k3nZ9y8x7w6v5u"  # a webhook URL's token
HEADER = "Hdr-5ecret-4f9a1c"
SMTP = "smtp-pa55-7b2e"
ADMIN = "adm1n-pa55w0rd-e3d1"
KEYSTORE = "ks-pa55-91c0ffee"
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"


def _archive(path: Path) -> dict[str, str]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()  # type: ignore[union-attr]
                if m.isfile()}


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path, Path, list[str]]:
    """A cluster's kctl.yaml and state dir with a secret in every place kctl keeps one."""
    root = tmp_path / "c"
    (root / "private").mkdir(parents=True)
    (root / "private" / "hook-url").write_text(f"https://hooks.example.org/services/{TOKEN}\n")
    (root / "private" / "hook-headers").write_text(f"X-Team-Token: {HEADER}\n")
    (root / "private" / "smtp").write_text(SMTP + "\n")
    monkeypatch.setenv("KCTL_TEST_SMTP", SMTP + "-env")
    data = {"name": "sup", "security": {"enabled": True},
            "monitoring": {"notifiers": [
                {"type": "webhook", "url_file": str(root / "private" / "hook-url"),
                 "headers_file": str(root / "private" / "hook-headers")},
                {"type": "email", "host": "127.0.0.1", "from": "kctl@example.org", "to": ["ops@example.org"],
                 "username": "kctl", "password_file": str(root / "private" / "smtp")},
                {"type": "email", "host": "127.0.0.2", "from": "kctl@example.org", "to": ["ops@example.org"],
                 "username": "kctl", "password_env": "KCTL_TEST_SMTP"}]}}
    spec, _ = parse_spec(data)
    spec_file = root / "kctl.yaml"
    import yaml

    spec_file.write_text(yaml.safe_dump(data))
    state = root / ".kctl" / "sup"
    (state / "secrets" / "logger1").mkdir(parents=True)
    (state / "secrets" / "passwords.json").write_text(json.dumps({"admin": ADMIN, "keystore": KEYSTORE}))
    (state / "secrets" / "logger1" / "kafka_server_jaas.conf").write_text(
        f'KafkaServer {{ org.apache.kafka.common.security.scram.ScramLoginModule required username="admin"'
        f' password="{ADMIN}"; }};\n')
    (state / "secrets" / "logger1" / "node.key").write_text(PEM)
    conf = state / "logger1" / "conf"
    conf.mkdir(parents=True)
    # A rendered file that (wrongly) holds secrets: the scrub must take them out whatever the file.
    (conf / "server.properties").write_text(
        f"broker.id=1\nssl.keystore.password={KEYSTORE}\nlisteners=SASL_SSL://:9092\n"
        f"listener.name.internal.scram-sha-512.sasl.jaas.config=x required password=\"{ADMIN}\";\n")
    (conf / "leftover.json").write_text(json.dumps({"client_secret": "json-5ecret-a1b2", "ok": 1}))
    (conf / "key.pem").write_text(PEM)
    (state / "identity.json").write_text(json.dumps({"uid": "abc"}))
    (state / "logger1" / "logs" / "kafka").mkdir(parents=True)
    (state / "logger1" / "logs" / "kafka" / "server.log").write_text(
        "".join(f"[INFO] line {i}\n" for i in range(50)) + f"[WARN] sasl login with password {ADMIN} failed\n")
    (state / "logger1" / "data").mkdir()
    (state / "logger1" / "data" / "meta.properties").write_text("cluster.id=xyz\n")
    (state / "monitor").mkdir()
    (state / "monitor" / "monitor.db").write_bytes(b"SQLite format 3\0" + ADMIN.encode())

    def live(_spec: Any, _state: Path) -> Any:
        yield "status.json", lambda: {"health": "healthy", "note": f"webhook https://hooks.example.org/x/{TOKEN}"}
        yield "topics.json", lambda: (_ for _ in ()).throw(RuntimeError("brokers down: connection refused"))

    monkeypatch.setattr(support, "_live", live)
    monkeypatch.setattr(support, "_docker_version", lambda: "29.0 (test)")
    monkeypatch.setattr(support, "_own_cluster", lambda _spec, _state: True)
    secrets = [TOKEN, HEADER, SMTP, SMTP + "-env", ADMIN, KEYSTORE, "json-5ecret-a1b2",
               "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"]
    return spec, spec_file, state, secrets


def test_no_planted_secret_is_in_the_archive_and_every_part_is(planted: Any, tmp_path: Path) -> None:
    spec, spec_file, state, secrets = planted
    out = tmp_path / "bundle.tar.gz"
    b = support.make(spec, spec_file, state, out, log_lines=20)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    files = _archive(out)
    leaks = [(name, s) for name, text in files.items() for s in secrets if s in text]
    assert leaks == []
    assert {"kctl.yaml", "state/logger1/conf/server.properties", "state/identity.json", "status.json",
            "versions.json", "errors.txt", "MANIFEST.txt"} <= set(files)
    assert not [n for n in files if n.startswith("state/secrets") or "/data/" in n or "monitor.db" in n]
    assert "broker.id=1" in files["state/logger1/conf/server.properties"]  # what is no secret stays
    assert "hooks.example.org" in files["status.json"]
    assert "topics.json: brokers down: connection refused" in files["errors.txt"]
    assert b.errors and b.redacted >= len(secrets) - 2
    assert not (tmp_path / "bundle.tar.gz.partial").exists()


def test_a_node_log_goes_in_as_its_last_lines(planted: Any, tmp_path: Path) -> None:
    spec, spec_file, state, _ = planted
    out = tmp_path / "b.tar.gz"
    support.make(spec, spec_file, state, out, log_lines=5)
    log = _archive(out)["logs/logger1/kafka.log"]
    assert log.splitlines()[0] == "[INFO] line 46" and len(log.splitlines()) == 5
    assert "password <redacted> failed" in log


def test_an_interrupted_bundle_leaves_no_archive_and_an_existing_one_is_kept(planted: Any, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    spec, spec_file, state, _ = planted
    out = tmp_path / "b.tar.gz"

    def interrupted(_spec: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(support, "_versions", interrupted)
    with pytest.raises(KeyboardInterrupt):
        support.make(spec, spec_file, state, out)
    assert sorted(os.listdir(tmp_path)) == ["c"]  # neither the archive nor its partial
    out.write_text("an earlier bundle")
    with pytest.raises(UsageError, match="exists"):
        support.make(spec, spec_file, state, out)
    assert out.read_text() == "an earlier bundle"


@pytest.mark.parametrize(("text", "kept"), [
    ("ssl.truststore.password=abc123xyz\n", "ssl.truststore.password="),
    ("  password_env: SMTP_PW\n", "password_env:"),
    ('{"token": "abc123xyz", "n": 1}', '"n": 1'),
    ('sasl.jaas.config=... required username="u" password="abc123xyz";', "sasl.jaas.config="),
    ("Authorization: Bearer abc123xyz\n", "Authorization:"),
    ("see https://user:abc123xyz@hooks.example.org/abc123xyz?k=abc123xyz now", "hooks.example.org"),
])
def test_what_looks_like_a_secret_is_taken_out(text: str, kept: str) -> None:
    clean, n = support.redact(text, set())
    assert "abc123xyz" not in clean and "SMTP_PW" not in clean and kept in clean and n >= 1


def test_another_cluster_answering_leaves_the_answers_out_and_says_so(planted: Any, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.cluster.identity import ForeignCluster

    spec, spec_file, state, _ = planted

    def foreign(_spec: Any, _state: Path) -> bool:
        raise ForeignCluster("another Kafka cluster (id Xyz) answers on cluster 'sup''s ports")

    monkeypatch.setattr(support, "_own_cluster", foreign)
    out = tmp_path / "b.tar.gz"
    support.make(spec, spec_file, state, out)
    files = _archive(out)
    assert "status.json" not in files and "topics.json" not in files and "kctl.yaml" in files
    assert "another Kafka cluster (id Xyz) answers" in files["errors.txt"]
