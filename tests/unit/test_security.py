"""The secured profile without Docker: spec rules, the property group, JAAS and client files,
the secrets on disk (modes, certificates, keystores) and the client settings built from them."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kctl import contract
from kctl.errors import SpecError
from kctl.model import properties
from kctl.model.render import jaas_file, render
from kctl.model.spec import parse_spec
from kctl.security import pki, store

GOLDEN = Path(__file__).parent / "golden" / "secure-secrets"
SECURE: dict[str, Any] = {"security": {"enabled": True}}
FIXED = {"admin": "admin-pw", "kafka": "kafka-pw", "kctl": "kctl-pw", "zkquorum": "quorum-pw", "zkadmin": "super-pw",
         "keystore": "ks-pw"}


def test_security_is_off_by_default_and_on_with_its_defaults() -> None:
    plain, _ = parse_spec({})
    assert plain.security.enabled is False
    assert properties.kafka_security(plain) == {} and properties.zookeeper_security(plain) == {}
    spec, warnings = parse_spec(SECURE)
    assert warnings == []
    sec = spec.security
    assert (sec.tls, sec.sasl_mechanism, sec.authorizer, sec.admin_user) == (True, "SCRAM-SHA-512", True, "admin")
    assert (sec.zookeeper.sasl, sec.zookeeper.enforce_auth, sec.zookeeper.set_acl) == (True, True, True)


@pytest.mark.parametrize(("settings", "needle"), [
    ({"sasl_mechanism": "PLAIN"}, "security.sasl_mechanism"),
    ({"admin_user": "bad user"}, "security.admin_user"),
    ({"admin_user": "kafka"}, "security.admin_user"),
    ({"zookeeper": {"sasl": False}}, "security.zookeeper.enforce_auth"),
    ({"zookeeper": {"sasl": False, "enforce_auth": False}}, "security.zookeeper.set_acl"),
    ({"colour": "red"}, "security.colour"),
])
def test_invalid_security_settings(settings: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecError) as ei:
        parse_spec({"security": {"enabled": True, **settings}})
    assert any(p.startswith(needle) for p in ei.value.problems), ei.value.problems


def test_tls_off_is_a_warning() -> None:
    spec, warnings = parse_spec({"security": {"enabled": True, "tls": False}})
    assert any(w.startswith("security.tls") for w in warnings)
    assert properties.server_properties(spec, spec.nodes[0])[properties.PROTOCOL_MAP] == \
        "EXTERNAL:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT"


def test_server_properties_group() -> None:
    spec, _ = parse_spec(SECURE)
    props = properties.server_properties(spec, spec.nodes[0])
    assert props[properties.PROTOCOL_MAP] == "EXTERNAL:SASL_SSL,INTERNAL:SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["super.users"] == "User:admin"
    assert props["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["zookeeper.set.acl"] == "true"
    assert props["ssl.keystore.password"].startswith("${file:/run/kctl/secrets/")
    # No password in any rendered (world-readable) file.
    files = render(spec).files
    for text in files.values():
        assert "password=" not in text.replace("password=${file:", "")


def test_overrides_still_win() -> None:
    spec, _ = parse_spec({**SECURE, "kafka": {"overrides": {"super.users": "User:admin;User:ops"}}})
    assert properties.server_properties(spec, spec.nodes[0])["super.users"] == "User:admin;User:ops"


def test_zoo_cfg_group_and_safe_whitelist() -> None:
    spec, _ = parse_spec({**SECURE, "zookeeper": {"four_letter_words": ["*"]}})
    cfg = properties.zoo_cfg(spec, spec.nodes[0])
    words = cfg["4lw.commands.whitelist"].split(",")
    assert "srvr" in words and "mntr" in words
    assert not set(words) & {"dump", "wchc", "wchp", "*"}
    assert cfg["admin.enableServer"] == "false"
    assert cfg["enforce.auth.enabled"] == "true" and cfg["enforce.auth.schemes"] == "sasl"
    assert cfg["quorum.auth.enableSasl"] == "true"
    assert cfg["authProvider.sasl"].endswith("SASLAuthenticationProvider")


def test_jvm_options_carry_paths_and_hardening_never_a_secret() -> None:
    spec, _ = parse_spec(SECURE)
    kafka = properties.jvm_options(spec, "kafka")
    assert "-Dorg.apache.kafka.disallowed.login.modules=com.sun.security.auth.module.JndiLoginModule" in kafka
    assert "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls= " in kafka + " "
    assert f"-Djava.security.auth.login.config={contract.SECRETS_DIR}/kafka.jaas" in kafka
    compose = render(spec).files["compose.yaml"]
    for pw in FIXED.values():
        assert pw not in compose
    assert f"./secrets/logger1:{contract.SECRETS_MOUNT}:ro" in compose


def test_kafka_tools_run_in_a_node_with_a_client_jvms_environment_not_the_brokers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.runtime import cluster
    from kctl.runtime.engine import engines

    ran: list[list[str]] = []

    def exec_in(spec: Any, host: str, argv: list[str], **_: Any) -> tuple[int, str]:
        ran.append(argv)
        return 0, "ok"

    monkeypatch.setattr(engines, "exec_in", exec_in)
    spec, _ = parse_spec({**SECURE, "kafka": {"jvm_options": ["-XX:+UseParallelGC"]}})
    assert "-XX:+UseParallelGC" in properties.jvm_options(spec, "kafka")  # the broker's own
    run = cluster.run_kafka_tool(spec, "kafka-configs.sh", ["--describe"])
    assert run.exit_code == 0 and run.argv[0].endswith("/kafka-configs.sh")
    assert ran[0][:3] == ["env", "KAFKA_HEAP_OPTS=-Xmx256m",
                          "KAFKA_OPTS=-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile=/opt/kafka/cds/tools.jsa"], ran[0]
    assert ran[0][3:] == run.argv and "--command-config" in run.argv
    assert "UseParallelGC" not in " ".join(ran[0]) and "login.config" not in " ".join(ran[0])
    swarm, _ = parse_spec({"engine": "swarm"})
    assert properties.tool_env(swarm)["KAFKA_OPTS"] == " ".join(["-XX:TieredStopAtLevel=1", contract.TOOL_CDS,
                                                                 *properties.SWARM_DNS_OPTIONS])
    # engine hosts runs Kafka's own distribution: no image, no archive of the tools
    hosts = type(swarm).model_validate({"engine": "hosts"})
    assert properties.tool_env(hosts)["KAFKA_OPTS"] == "-XX:TieredStopAtLevel=1"


def test_jaas_golden() -> None:
    spec, _ = parse_spec(SECURE)
    files = {"kafka.jaas": jaas_file(properties.kafka_jaas(spec, FIXED), "logger1"),
             "zookeeper.jaas": jaas_file(properties.zookeeper_jaas(spec, FIXED), "logger1")}
    if os.environ.get("KCTL_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (GOLDEN / name).write_text(text)
    for name, text in files.items():
        assert text == (GOLDEN / name).read_text(), name


def test_secrets_on_disk(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import pkcs12

    spec, _ = parse_spec(SECURE)
    made = store.ensure(spec, tmp_path)
    assert "CA" in made
    root = store.secrets_dir(tmp_path)
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    pw = store.passwords(spec, tmp_path)
    assert len(set(pw.values())) == len(pw) and all(len(v) >= 24 for v in pw.values())
    host = root / "logger2"
    assert not (host / "node.key").exists()  # the key reaches the node inside its keystore only
    key, cert, cas = pkcs12.load_key_and_certificates((host / "keystore.p12").read_bytes(), pw["keystore"].encode())
    assert key is not None and cert is not None and len(cas) == 1
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(n.value) for n in sans} == {"logger2", "localhost", "127.0.0.1"}
    assert cert.issuer == x509.load_pem_x509_certificate((root / "ca.pem").read_bytes()).subject
    assert (host / "scram-bootstrap.properties").read_text() == f"SCRAM-SHA-512=password={pw['admin']}\n"
    # Idempotent: a second run keeps the CA, the certificates and the passwords.
    assert store.ensure(spec, tmp_path) == []
    assert store.passwords(spec, tmp_path) == pw
    conf = store.client_settings(spec, state_dir=tmp_path)
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin",
                    "sasl.password": pw["admin"], "ssl.ca.location": str((root / "trust.pem").resolve())}
    assert (root / "trust.pem").read_bytes() == (root / "ca.pem").read_bytes()  # one CA trusted: no rotation
    assert store.client_settings(spec, state_dir=tmp_path, own=True) == conf
    migrating, _ = parse_spec({"security": {"enabled": True, "migration": "secure-listeners"}})
    assert store.client_settings(migrating, state_dir=tmp_path)["sasl.username"] == "admin"
    assert store.client_settings(migrating, state_dir=tmp_path, own=True) == {}  # kctl logs in from step 2
    assert store.client_settings(parse_spec({})[0], state_dir=tmp_path) == {}


def test_split_topology_certificates_name_the_containers(tmp_path: Path) -> None:
    spec, _ = parse_spec({**SECURE, "topology": "split"})
    store.ensure(spec, tmp_path)
    root = store.secrets_dir(tmp_path)
    assert pki.cert_sans((root / "certs" / "kafka1.pem").read_bytes())[0] == "kafka1"
    assert (root / "kafka1" / contract.KEYSTORE_FILE).exists() and not (root / "zk1" / contract.KEYSTORE_FILE).exists()
    assert (root / "zk1" / contract.ZOOKEEPER_JAAS_FILE).exists()


def test_missing_secrets_give_a_hint(tmp_path: Path) -> None:
    from kctl.errors import KctlError

    spec, _ = parse_spec(SECURE)
    with pytest.raises(KctlError) as ei:
        store.client_settings(spec, state_dir=tmp_path)
    assert "kctl up" in (ei.value.hint or "")


def test_client_config_formats(tmp_path: Path) -> None:
    from kctl.kafka.security import client_config

    spec, _ = parse_spec({**SECURE, "state_dir": str(tmp_path)})
    store.ensure(spec, tmp_path)
    pw = store.passwords(spec, tmp_path)["admin"]
    ca = str((store.secrets_dir(tmp_path) / "trust.pem").resolve())

    def props(text: str) -> dict[str, str]:
        return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))

    rd = props(client_config(spec, None, "librdkafka"))
    assert rd == {"bootstrap.servers": spec.bootstrap_servers, "security.protocol": "SASL_SSL",
                  "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": pw,
                  "ssl.ca.location": ca}
    assert props(client_config(spec, None, "kcat")) == rd
    java = props(client_config(spec, None, "java"))
    assert java["sasl.mechanism"] == "SCRAM-SHA-512" and java["ssl.truststore.type"] == "PEM"
    assert f'username="admin" password="{pw}";' in java["sasl.jaas.config"]
    store.save_user_password(tmp_path, "alice", "alice-password")
    assert props(client_config(spec, "alice", "kcat"))["sasl.password"] == "alice-password"
    plain, _ = parse_spec({})
    assert props(client_config(plain, None, "kcat")) == {"bootstrap.servers": plain.bootstrap_servers}


def test_quota_entities_and_acl_arguments() -> None:
    from kctl.errors import UsageError
    from kctl.kafka import security as ks

    assert ks.quota_entity(None, None, True, False) == ["--entity-type", "users", "--entity-default"]
    assert ks.quota_entity("u", "c", False, False) == ["--entity-type", "users", "--entity-name", "u",
                                                       "--entity-type", "clients", "--entity-name", "c"]
    assert ks._describe_entity(ks.quota_entity("u", None, False, True)) == "user 'u' and client default"
    for bad in ((None, None, False, False), ("u", None, True, False)):
        with pytest.raises(UsageError):
            ks.quota_entity(*bad)
    with pytest.raises(UsageError):
        ks._principal("alice")
    with pytest.raises(UsageError):
        ks._operation("fly")
    with pytest.raises(UsageError):
        ks.require_secured(parse_spec({})[0], "users")


def test_stream_job_takes_the_security_settings_from_the_spec_at_run_time(tmp_path: Path) -> None:
    import yaml

    from kctl.model.spec import state_dir_for
    from kctl.stream.config import JobConfig

    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(yaml.safe_dump(SECURE))
    spec, _ = parse_spec(SECURE)
    store.ensure(spec, state_dir_for(spec, spec_file))
    cfg = JobConfig("127.0.0.1:19092", ["t"], "out", "cp", spec_file=str(spec_file))
    opts = cfg.kafka_security()
    assert opts["security.protocol"] == "SASL_SSL" and opts["sasl.mechanism"] == "SCRAM-SHA-512"
    assert opts["ssl.truststore.location"].endswith("secrets/trust.pem")
    assert "password" not in cfg.to_json()  # the config file names the spec; the password stays in secrets/
    assert JobConfig("b", ["t"], "o", "c").kafka_security() == {}


def test_zookeeper_super_user_for_reconfig_named_in_zoo_cfg_not_in_any_argument() -> None:
    spec, _ = parse_spec(SECURE)
    cfg = properties.zoo_cfg(spec, spec.nodes[0])
    # ZooKeeper turns the unknown zoo.cfg key into the zookeeper.superUser system property: no JVM flag
    assert cfg["superUser"] == "zkadmin" and "skipACL" not in cfg and cfg["reconfigEnabled"] == "true"
    assert "superUser" not in properties.jvm_options(spec, "zookeeper")
    server = next(opts for name, _m, opts in properties.zookeeper_jaas(spec, FIXED) if name == "Server")
    assert 'user_zkadmin="super-pw"' in server and 'user_kctl="kctl-pw"' in server
    plain, _ = parse_spec({})
    assert properties.zoo_cfg(plain, plain.nodes[0])["skipACL"] == "yes" and "superUser" not in \
        properties.zoo_cfg(plain, plain.nodes[0])
    single, _ = parse_spec({**SECURE, "nodes": [{"id": 1, "hostname": "logger1"}],
                            "kafka": {"default_replication_factor": 1, "offsets_topic_replication_factor": 1,
                                      "transaction_state_log_replication_factor": 1,
                                      "min_insync_replicas": 1}})
    assert "superUser" not in properties.zoo_cfg(single, single.nodes[0])  # standalone: no reconfig


def test_reconfig_logs_in_as_the_super_user_and_needs_its_password(tmp_path: Path) -> None:
    import json

    from kctl.errors import KctlError
    from kctl.zk import reconfig

    spec, _ = parse_spec({**SECURE, "state_dir": str(tmp_path)})
    store.ensure(spec, tmp_path)
    assert reconfig.require_reconfigurable(spec) == "zkadmin"
    pw = store.passwords(spec, tmp_path)
    assert pw["zkadmin"] not in {pw["kctl"], pw["kafka"]}
    # A state dir made before the super user existed: every other command still reads its passwords,
    # a reconfig says what to do.
    path = store.secrets_dir(tmp_path) / store.PASSWORDS
    path.write_text(json.dumps({k: v for k, v in pw.items() if k != "zkadmin"}))
    assert store.passwords(spec, tmp_path)["admin"] == pw["admin"]
    with pytest.raises(KctlError) as ei:
        reconfig.require_reconfigurable(spec)
    assert "no ZooKeeper super user" in ei.value.message and "kctl up" in (ei.value.hint or "")
    # `kctl up` adds it and keeps the others
    store.ensure(spec, tmp_path)
    again = store.passwords(spec, tmp_path)
    assert again["admin"] == pw["admin"] and again["zkadmin"] and again["zkadmin"] != pw["zkadmin"]


def test_node_secrets_made_for_a_new_node_and_forgotten_with_it(tmp_path: Path) -> None:
    from cryptography import x509

    nodes = [{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)]
    spec, _ = parse_spec({**SECURE, "nodes": nodes})
    store.ensure(spec, tmp_path)
    root = store.secrets_dir(tmp_path)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    bigger, _ = parse_spec({**SECURE, "nodes": [*nodes, {"id": 4, "hostname": "logger4"}]})
    made = store.ensure(bigger, tmp_path)
    assert "certificate of logger4" in made and all("logger4" in m for m in made), made
    assert {p: p.read_bytes() for p in before} == before  # the other nodes' files untouched
    cert = x509.load_pem_x509_certificate((root / "certs" / "logger4.pem").read_bytes())
    assert cert.issuer == x509.load_pem_x509_certificate((root / "ca.pem").read_bytes()).subject
    assert set(pki.cert_sans((root / "certs" / "logger4.pem").read_bytes())) == {"logger4", "localhost", "127.0.0.1"}
    for name in ("keystore.p12", "kafka.jaas", "zookeeper.jaas", "admin-client.properties",
                 "scram-bootstrap.properties", "ca.pem"):
        f = root / "logger4" / name
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, name
    store.forget_host(tmp_path, "logger4")
    assert not (root / "logger4").exists() and not list((root / "certs").glob("logger4.*"))
    assert {p for p in root.rglob("*") if p.is_file()} == set(before)
