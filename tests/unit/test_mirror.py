"""kctl.mirror's pure parts: the spec's mirrors, mm2.properties and the Compose project, MirrorMaker's records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kctl.errors import KctlError
from kctl.kafka.client import Target
from kctl.mirror import config, records
from kctl.mirror.config import Source
from kctl.model.spec import ClusterSpec, SpecError, check_rules, parse_spec


def target(**mirror: object) -> ClusterSpec:
    return ClusterSpec.model_validate({"name": "dr", "mirrors": [{"name": "logger", "source": {
        "spec": "../primary/kctl.yaml"}, **mirror}]})


SOURCE = Source("logger", Target.foreign("127.0.0.1:29092", {}))


def props(spec: ClusterSpec) -> dict[str, object]:
    return config.properties(spec, spec.mirrors[0], SOURCE)


def test_one_flow_from_the_source_alias_into_this_cluster() -> None:
    p = props(target(topics="orders|new-.*", groups="billing"))
    assert p["clusters"] == "logger, dr"
    assert p["logger.bootstrap.servers"] == "127.0.0.1:29092"
    assert p["dr.bootstrap.servers"] == target().bootstrap_servers
    assert p["logger->dr.enabled"] == "true" and p["dr->logger.enabled"] == "false"
    assert p["logger->dr.topics"] == "orders|new-.*" and p["logger->dr.groups"] == "billing"
    # MirrorMaker's own exclusions stay when none are given, and beside the spec's own
    assert p["logger->dr.topics.exclude"] == config.DEFAULT_TOPICS_EXCLUDE
    assert props(target(topics_exclude="secret-.*"))["logger->dr.topics.exclude"] == \
        "secret-.*, " + config.DEFAULT_TOPICS_EXCLUDE
    # everything MirrorMaker keeps is in the target: it only reads the source
    assert p["logger->dr.offset-syncs.topic.location"] == "target"
    assert "replication.policy.class" not in p
    assert props(target(policy="identity"))["replication.policy.class"] == config.IDENTITY_POLICY
    # replication factors fit the target's brokers (3 by default; 1 on a one-node target)
    assert p["replication.factor"] == 3 and p["status.storage.replication.factor"] == 3
    one = ClusterSpec.model_validate({"name": "dr", "nodes": [{"id": 1, "hostname": "dr1"}], "mirrors": [
        {"name": "logger", "source": {"bootstrap_servers": "127.0.0.1:1"}}]})
    assert config.properties(one, one.mirrors[0], SOURCE)["checkpoints.topic.replication.factor"] == 1
    # overrides (tuning kctl has no setting for) come last, as is
    assert props(target(overrides={"sync.topic.configs.interval.seconds": 60}))[
        "sync.topic.configs.interval.seconds"] == 60


def test_rendered_files_and_the_compose_project(tmp_path: Path) -> None:
    spec = target()
    files, hidden = config.render(spec, tmp_path, {"logger": SOURCE})
    assert hidden == {}  # PLAINTEXT on both sides: no secrets, no secrets mount
    assert set(files) == {"logger/conf/mm2.properties", "logger/conf/log4j-mirrormaker.properties", "compose.yaml"}
    text = files["logger/conf/mm2.properties"]
    assert "logger->dr.enabled = true\n" in text
    assert r"logger->dr.topics.exclude = .*[\\-\\.]internal" in text  # a properties file's backslash, escaped
    doc = yaml.safe_load(files["compose.yaml"])
    assert doc["name"] == "kctl-dr-mirror"
    svc = doc["services"]["mm-logger"]
    assert svc["network_mode"] == "host" and "ports" not in svc  # reaches 127.0.0.1 ports; publishes none
    assert svc["environment"]["KCTL_SERVICES"] == "mirrormaker" and svc["environment"]["KCTL_MM2_TARGET"] == "dr"
    assert svc["restart"] == "unless-stopped"
    assert f"{tmp_path}/mirror/logger/conf:/etc/kctl:ro" in svc["volumes"]
    assert not any("secrets" in v for v in svc["volumes"])
    assert "KAFKA_OPTS" not in svc["environment"]  # no flags of its own: mirrormaker-start's alone
    flagged = target(jvm_options=["-XX:TieredStopAtLevel=1", "-XX:+UseStringDeduplication"])
    doc = yaml.safe_load(config.render(flagged, tmp_path, {"logger": SOURCE})[0]["compose.yaml"])
    assert doc["services"]["mm-logger"]["environment"]["KAFKA_OPTS"] == \
        "-XX:TieredStopAtLevel=1 -XX:+UseStringDeduplication"


@pytest.mark.parametrize("flag", ["-Xmx1g", "-Djavax.net.ssl.keyStorePassword=x", "two flags"])
def test_a_mirrors_jvm_options_refuse_the_heap_secrets_and_whitespace(flag: str) -> None:
    with pytest.raises(ValueError, match="use the `heap` setting|secret|not one JVM flag"):
        target(jvm_options=[flag])


PASSWORDS = ("s3cret-source:=#", "t4rget-pass")
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_secured_source_and_target_logins_through_the_file_provider(tmp_path: Path) -> None:
    spec = target()
    src = Source("logger", Target.foreign("127.0.0.1:29092", {}),
                 login=config.Login("SASL_SSL", "SCRAM-SHA-512", "mirror-to-dr", PASSWORDS[0], CA))
    dst = config.Login("SASL_PLAINTEXT", "SCRAM-SHA-256", "mirror-from-logger", PASSWORDS[1])
    files, hidden = config.render(spec, tmp_path, {"logger": src}, {"logger": dst})
    p = config.properties(spec, spec.mirrors[0], src, dst)
    assert p["config.providers.file.class"] in files["logger/conf/mm2.properties"]
    assert p["config.providers"] == "file" and p["config.providers.file.class"] == config.FILE_PROVIDER
    assert p["logger.security.protocol"] == "SASL_SSL" and p["logger.sasl.mechanism"] == "SCRAM-SHA-512"
    assert p["logger.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror-to-dr"'
        ' password="${file:/run/kctl/secrets/mirror.properties:logger.password}";')
    assert p["logger.ssl.truststore.type"] == "PEM"
    assert p["logger.ssl.truststore.location"] == "/run/kctl/secrets/logger-ca.pem"
    assert p["dr.security.protocol"] == "SASL_PLAINTEXT" and "dr.ssl.truststore.location" not in p
    assert p["logger->dr.sync.topic.acls.enabled"] == "false"
    # no password in anything but the secrets, which mm2.properties names
    for text in files.values():
        assert not any(pw in text for pw in PASSWORDS)
    assert set(hidden["logger"]) == {"mirror.properties", "logger-ca.pem"}
    assert hidden["logger"]["logger-ca.pem"] == CA
    assert hidden["logger"]["mirror.properties"] == b"logger.password=s3cret-source\\:\\=\\#\ndr.password=t4rget-pass\n"
    svc = yaml.safe_load(files["compose.yaml"])["services"]["mm-logger"]
    assert f"{tmp_path}/mirror/logger/secrets:/etc/kctl-secrets:ro" in svc["volumes"]
    assert not any(pw in json.dumps(svc) for pw in PASSWORDS)


def test_the_mirror_users_acls_are_what_a_flow_needs() -> None:
    from kctl.mirror import access

    read = {(g.resource, g.name, g.operation) for g in access.source_grants()}
    assert read == {("topic", "*", "read"), ("topic", "*", "describe"), ("topic", "*", "describe_configs"),
                    ("group", "*", "describe"), ("cluster", "kafka-cluster", "describe")}
    m = target().mirrors[0]
    write = {(g.resource, g.name, g.operation, g.prefixed) for g in access.target_grants(m)}
    assert ("topic", "logger.", "all", True) in write and ("topic", "*", "all", False) not in write
    assert ("group", "logger-mm2", "all", False) in write
    assert not any(r == "transactional_id" for r, *_ in write)
    eos = {(g.resource, g.name) for g in access.target_grants(target(exactly_once=True).mirrors[0])}
    assert {("transactional_id", "logger-mm2"), ("transactional_id", "connect-cluster-logger-mm2")} <= eos
    ident = {(g.resource, g.name, g.operation) for g in access.target_grants(target(policy="identity").mirrors[0])}
    assert ("topic", "*", "all") in ident
    assert access.source_user(target()) == "mirror-to-dr" and access.target_user(m) == "mirror-from-logger"


@pytest.mark.parametrize(("client", "message"), [
    ({"security_protocol": "SASL_SSL"}, "needs `username` and `password_file`"),
    ({"security_protocol": "SSL", "username": "u", "password_file": "p"}, "need SASL_PLAINTEXT or SASL_SSL"),
    ({"security_protocol": "SASL_PLAINTEXT", "username": "u", "password_file": "p", "ca_file": "ca.pem"},
     "`ca_file` needs SSL or SASL_SSL"),
    ({"security_protocol": "TLS"}, "is not a security protocol"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "username": "u", "password_file": "p"},
     "is not supported"),
])
def test_a_source_client_is_complete_or_refused(client: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"name": "dr", "mirrors": [{"name": "ext", "source": {
            "bootstrap_servers": "10.0.0.1:9093", "client": client}}]}, "kctl.yaml")
    with pytest.raises(SpecError, match="`client` goes with `bootstrap_servers`"):
        parse_spec({"name": "dr", "mirrors": [{"name": "ext", "source": {
            "spec": "../p/kctl.yaml", "client": {}}}]}, "kctl.yaml")


def test_a_source_client_reads_its_password_file_and_refuses_a_readable_one(tmp_path: Path) -> None:
    from kctl.mirror import run

    pw, ca = tmp_path / "pw", tmp_path / "ca.pem"
    pw.write_text("hunter2-long\n")
    pw.chmod(0o600)
    ca.write_bytes(CA)
    spec, _ = parse_spec({"name": "dr", "mirrors": [{"name": "ext", "source": {
        "bootstrap_servers": "10.0.0.1:9093", "client": {"security_protocol": "SASL_SSL", "username": "reader",
                                                          "password_file": "pw", "ca_file": str(ca)}}}]},
        "kctl.yaml")
    found = run.sources(spec, tmp_path / "kctl.yaml")["ext"]
    assert found.target.security == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                                     "sasl.username": "reader", "sasl.password": "hunter2-long",
                                     "ssl.ca.location": str(ca)}
    assert found.login == config.Login("SASL_SSL", "SCRAM-SHA-512", "reader", "hunter2-long", CA)
    assert "hunter2" not in repr(found)  # a repr in a log line or a traceback carries no password
    pw.chmod(0o644)
    with pytest.raises(KctlError, match="can be read by others") as err:
        run.sources(spec, tmp_path / "kctl.yaml")
    assert err.value.hint == f"chmod 600 {pw}"
    pw.unlink()
    with pytest.raises(KctlError, match="cannot read its password_file"):
        run.sources(spec, tmp_path / "kctl.yaml")


def test_remote_topic_and_internal_topics() -> None:
    m = target().mirrors[0]
    assert config.remote_topic(m, "orders") == "logger.orders"
    assert config.remote_topic(target(policy="identity").mirrors[0], "orders") == "orders"
    t = config.internal_topics(m, "dr")
    assert t["checkpoints"] == "logger.checkpoints.internal" and t["status"] == "mm2-status.logger.internal"


def test_find_names_the_choices() -> None:
    assert config.find(target(), None).name == "logger"
    with pytest.raises(KctlError, match="no mirror 'x'"):
        config.find(target(), "x")
    with pytest.raises(KctlError, match="has no mirrors"):
        config.find(ClusterSpec(name="dr"), None)
    two = ClusterSpec.model_validate({"name": "dr", "mirrors": [
        {"name": "a", "source": {"bootstrap_servers": "127.0.0.1:1"}},
        {"name": "b", "source": {"bootstrap_servers": "127.0.0.1:2"}}]})
    with pytest.raises(KctlError, match="name one with --mirror"):
        config.find(two, None)


@pytest.mark.parametrize(("mirror", "message"), [
    ({"name": "bad name", "source": {"bootstrap_servers": "x:1"}}, "not a mirror name"),
    ({"name": "a", "source": {}}, "either `spec`"),
    ({"name": "a", "source": {"spec": "x", "bootstrap_servers": "x:1"}}, "either `spec`"),
    ({"name": "a", "source": {"spec": "x"}, "topics": "(unclosed"}, "not a regular expression"),
])
def test_bad_mirrors_are_refused(mirror: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        parse_spec({"name": "dr", "mirrors": [mirror]})


def test_mirror_names_are_unique_and_not_the_clusters_own() -> None:
    spec = ClusterSpec.model_validate({"name": "dr", "mirrors": [
        {"name": "dr", "source": {"bootstrap_servers": "x:1"}},
        {"name": "a", "source": {"bootstrap_servers": "x:1"}}, {"name": "a", "source": {"bootstrap_servers": "x:2"}}]})
    errors, _ = check_rules(spec)
    assert any("mirrors.0.name" in e and "own name" in e for e in errors)
    assert any("mirrors.2.name" in e and "already used" in e for e in errors)


def test_exactly_once_needs_the_internal_rest_server_on_loopback() -> None:
    p = props(target(exactly_once=True))
    assert p["dr.exactly.once.source.support"] == "enabled"
    assert p["dedicated.mode.enable.internal.rest"] == "true" and p["listeners"] == "http://127.0.0.1:18083"
    assert p["logger.consumer.isolation.level"] == "read_committed"
    assert "listeners" not in props(target())  # at least once: no REST server, nothing listens
    assert props(target(exactly_once=True, rest_port=19999))["listeners"] == "http://127.0.0.1:19999"
    two = ClusterSpec.model_validate({"name": "dr", "mirrors": [
        {"name": "a", "source": {"bootstrap_servers": "x:1"}, "exactly_once": True, "rest_port": 19000},
        {"name": "b", "source": {"bootstrap_servers": "x:1"}, "exactly_once": True, "rest_port": 19000}]})
    assert any("mirrors.1.rest_port" in e for e in check_rules(two)[0])


# ----- records ----------------------------------------------------------------------------------


def _kafka_string(s: str) -> bytes:
    return len(s.encode()).to_bytes(2, "big") + s.encode()


def test_a_checkpoint_as_kafka_writes_it() -> None:
    # Checkpoint.KEY_SCHEMA (group, topic, partition) and VALUE_SCHEMA_V0 behind an int16 version header,
    # laid out here byte by byte rather than with the module's own encoder.
    key = _kafka_string("billing") + _kafka_string("logger.orders") + (2).to_bytes(4, "big")
    value = (0).to_bytes(2, "big") + (1234).to_bytes(8, "big") + (1200).to_bytes(8, "big") + _kafka_string("")
    c = records.checkpoint(key, value)
    assert c == records.Checkpoint("billing", "logger.orders", 2, 1234, 1200, "")


@pytest.mark.parametrize(("key", "value"), [
    (None, b"x"), (b"\x00\x05ab", b"\x00\x00" + b"\x00" * 18),  # a string longer than the key
    (_kafka_string("g") + _kafka_string("t") + b"\x00\x00\x00\x01", b"\x00\x01" + b"\x00" * 18),  # version 1
])
def test_what_is_not_a_checkpoint_says_so(key: bytes | None, value: bytes) -> None:
    with pytest.raises(records.BadRecord):
        records.checkpoint(key, value)


def test_connect_source_offsets_and_status() -> None:
    key = json.dumps(["MirrorSourceConnector", {"cluster": "logger", "partition": 1, "topic": "orders"}]).encode()
    assert records.source_offset(key, b'{"offset":41}') == ("MirrorSourceConnector", "orders", 1, 41)
    assert records.source_offset(key, None) == ("MirrorSourceConnector", "orders", 1, None)
    assert records.source_offset(b'["MirrorCheckpointConnector",{"group":"g"}]', b"{}") is None
    assert records.source_offset(b"not json", b"{}") is None
    assert records.status(b"status-task-MirrorSourceConnector-0", b'{"state":"RUNNING","trace":null}') == \
        ("task MirrorSourceConnector-0", {"state": "RUNNING", "trace": None})
    assert records.status(b"status-connector-MirrorSourceConnector", None) == \
        ("connector MirrorSourceConnector", None)
    assert records.status(b"status-topic-orders:MirrorSourceConnector", b"{}") is None


def test_a_heartbeats_source_alias() -> None:
    assert records.heartbeat_source(_kafka_string("logger") + _kafka_string("dr")) == "logger"
    assert records.heartbeat_source(b"\x00") is None and records.heartbeat_source(None) is None


def test_a_partition_not_committed_yet_counts_all_it_holds_as_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    # MirrorMaker has committed partition 0 of "orders" only: partitions 1 and 2 are shown behind by every record
    # they hold, so the total is not 0 before every partition has been replicated.
    from kctl.mirror import status

    spec = target()
    monkeypatch.setattr(status, "container_state", lambda *_: "running")
    monkeypatch.setattr(status, "tasks", lambda *_: {"task MirrorSourceConnector-0": "RUNNING"})
    monkeypatch.setattr(status, "replicated_offsets", lambda *_: {("orders", 0): 99})
    asked: list[list[str]] = []
    monkeypatch.setattr(status, "source_ends", lambda _src, topics: (
        asked.append(topics) or {("orders", 0): 100, ("orders", 1): 100, ("orders", 2): 0}, None))
    monkeypatch.setattr(status, "_age_of", lambda *_: 5.0)
    monkeypatch.setattr(status, "_heartbeat_age", lambda *_: 1.0)
    monkeypatch.setattr(status, "_checkpoint_age", lambda *_: 1.0)
    st = status.status(spec, spec.mirrors[0], SOURCE)
    assert asked == [["orders"]]
    assert [(x.partition, x.replicated, x.lag) for x in st.partitions] == [(0, 100, 0), (1, 0, 100), (2, 0, 0)]
    assert st.total_lag == 100


def test_up_restarts_only_a_mirror_whose_files_changed_while_its_container_kept_running() -> None:
    from kctl.mirror.run import to_restart

    spec = target()
    conf = Path("/state/mirrors/logger/conf/mm2.properties")
    service = config.service(spec.mirrors[0])
    running = {"logger": "c1@2026-11-27T10:00:00Z"}
    assert to_restart(spec, [conf], running, running) == [service]  # it read the old files at its start
    assert to_restart(spec, [], running, running) == []  # nothing changed
    assert to_restart(spec, [Path("/state/mirrors/logger/logs/x")], running, running) == []  # not its conf
    assert to_restart(spec, [conf], {"logger": None}, running) == []  # up made or started it: it read them now
    assert to_restart(spec, [conf], running, {"logger": "c2@2026-11-27T10:05:00Z"}) == []  # Compose made it again
    assert to_restart(spec, [conf], running, {"logger": None}) == []  # it stopped: its next start reads them


# ----- mirrors[].overrides: nothing injected, nothing contradicted, no secret (issue 43: 12) ----------------


def mirror_spec(overrides: dict[str, object], **mirror: object) -> dict[str, object]:
    return {"name": "dr", "mirrors": [{"name": "logger", "source": {"bootstrap_servers": "127.0.0.1:29092"},
                                       "overrides": overrides, **mirror}]}


@pytest.mark.parametrize(("key", "value", "words"), [
    ("logger.consumer.max.poll.records", "500\nreplication.policy.class = x", "line break"),
    ("logger.consumer.max.poll.records", "500\r", "line break"),
    ("a\nclusters", "x", "line break"),
    ("logger.consumer.client.id", "x\x00y", "control character"),
    ("replication.policy.class", "org.apache.kafka.connect.mirror.IdentityReplicationPolicy", "`policy`"),
    ("replication.policy.separator", "_", "`policy`"),
    ("logger->dr.replication.policy.class", "x", "`policy`"),
    ("logger.bootstrap.servers", "evil:9092", "kctl sets it itself"),
    ("dr.producer.bootstrap.servers", "evil:9092", "kctl sets it itself"),
    ("clusters", "a, b", "kctl sets it itself"),
    ("dr->logger.enabled", "true", "the one flow"),
    ("logger.security.protocol", "PLAINTEXT", "the login kctl manages"),
    ("logger.ssl.truststore.location", "/tmp/ca.pem", "the login kctl manages"),
    ("config.providers", "env", "FileConfigProvider"),
    ("logger->dr.topics", ".*", "`topics`"),
    ("tasks.max", 8, "`tasks`"),
    ("logger.ssl.keystore.password", "hunter2", "a secret"),
    ("logger.ssl.key.password", "hunter2", "a secret"),
    ("logger.sasl.jaas.config", "x required password=\"hunter2\";", "a secret"),
    ("logger.consumer.sasl.oauthbearer.client.secret", "hunter2", "a secret"),
])
def test_overrides_that_inject_contradict_or_hold_a_secret_are_refused(key: str, value: object, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(mirror_spec({key: value}))
    problems = [p for p in refused.value.problems if p.startswith("mirrors.0.overrides")]
    assert len(problems) == 1 and words in problems[0], refused.value.problems
    assert "hunter2" not in refused.value.message and "evil" not in refused.value.message  # never the value
    assert refused.value.exit_code == 2


def test_tuning_overrides_pass_and_reach_mm2_properties_as_is() -> None:
    tuning = {"logger.consumer.max.poll.records": 500, "dr.producer.linger.ms": 20,
              "logger->dr.sync.topic.configs.interval.seconds": 60, "logger.ssl.keystore.location": "/run/x.p12"}
    spec, _ = parse_spec(mirror_spec(tuning))
    text = config.render_properties(props(spec), "t")
    for k, v in tuning.items():
        assert f"{k} = {v}\n" in text


def test_a_refused_override_exits_2_through_the_cli(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "kctl.yaml").write_text(yaml.safe_dump(mirror_spec({"logger.ssl.keystore.password": "hunter2"})))
    p = subprocess.run([sys.executable, "-m", "kctl", "mirror", "up", "-f", "kctl.yaml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert p.returncode == 2 and "mirrors.0.overrides.logger.ssl.keystore.password: a secret" in p.stderr, p.stderr
    assert "hunter2" not in p.stdout + p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / ".kctl").exists()  # nothing written


def test_mm2_properties_is_written_0600_from_its_creation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from kctl.mirror import run

    spec, _ = parse_spec(mirror_spec({"logger.consumer.max.poll.records": 500}))
    files, _hidden = config.render(spec, tmp_path / "state", {"logger": SOURCE})
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def spy(path: object, flags: int, mode: int = 0o777, *a: object, **k: object) -> int:
        if flags & os.O_CREAT:
            opened.append((Path(str(path)).name, mode))
        return real_open(path, flags, mode, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    old = os.umask(0o000)  # even with no umask at all, never readable by others
    try:
        out = tmp_path / "state" / "mirror"
        changed = run.write_files(files, out)
    finally:
        os.umask(old)
    conf = out / "logger" / "conf" / "mm2.properties"
    assert conf in changed
    assert conf.read_text() == files["logger/conf/mm2.properties"]
    assert "logger.consumer.max.poll.records = 500\n" in conf.read_text()
    assert conf.stat().st_mode & 0o777 == 0o600
    # created 0600 (the temporary file renamed into place), not chmod'ed after
    assert [m for name, m in opened if name.startswith(".mm2.properties.")] == [0o600]
    assert (out / "compose.yaml").stat().st_mode & 0o777 == 0o644  # no secret there: it stays readable
    assert not [p for p in conf.parent.iterdir() if p.name.startswith(".")]
    # unchanged: not rewritten; one an older kctl left 0644 is narrowed
    conf.chmod(0o644)
    assert run.write_files(files, out) == []
    assert conf.stat().st_mode & 0o777 == 0o600


def test_the_mirror_container_reads_a_private_copy_of_mm2_properties() -> None:
    node = Path(__file__).resolve().parents[2] / "kctl" / "runtime" / "image" / "node"
    entry = (node / "entrypoint.sh").read_text()
    start = (node / "mirrormaker-start").read_text()
    # the 0600 file belongs to the host user: root copies it for MirrorMaker's user (uid 555), mode 0600
    assert ('install -m 0600 -o 555 -g 555 "$CONF_DIR/mm2.properties" /run/kctl/mirror/mm2.properties' in entry)
    assert "CONF=/run/kctl/mirror/mm2.properties" in start


@pytest.mark.parametrize(("mirror", "where"), [
    ({"topics": "orders\nclusters = evil"}, "mirrors.0.topics"),
    ({"groups_exclude": "x\r"}, "mirrors.0.groups_exclude"),
    ({"source": {"bootstrap_servers": "127.0.0.1:9092\nclusters = evil"}}, "mirrors.0.source.bootstrap_servers"),
    ({"source": {"bootstrap_servers": "127.0.0.1:9092", "client": {
        "security_protocol": "SASL_PLAINTEXT", "username": 'u" password="x', "password_file": "pw"}}},
     "mirrors.0.source.client.username"),
])
def test_the_other_mirror_settings_that_reach_mm2_properties_cannot_break_its_lines(
        mirror: dict[str, object], where: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(mirror_spec({}, **mirror))
    assert [p for p in refused.value.problems if p.startswith(where)], refused.value.problems
