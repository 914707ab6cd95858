"""kctl.kafka.client's Target: the cluster every client is made for (spec, bootstrap servers, user, security
settings made once), and the one place that constructs confluent-kafka's clients."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from kctl import contract
from kctl.errors import KctlError
from kctl.kafka import client
from kctl.kafka.client import Target
from kctl.model.spec import ClusterSpec, parse_spec
from kctl.security import store

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kctl"
CLIENTS = frozenset({"AdminClient", "Producer", "Consumer"})
SECURITY_KEYS = ("security.", "sasl.", "ssl.")
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


# ----- only kctl/kafka/client.py constructs a client ---------------------------------------------------------


def client_constructions(source: str) -> list[int]:
    """Lines of ``source`` that construct confluent-kafka's AdminClient, Producer or Consumer: a call of a name
    imported from confluent_kafka (aliases included), or of an attribute of that name (``ck.AdminClient(...)``,
    ``confluent_kafka.Consumer(...)``)."""
    tree = ast.parse(source)
    names = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and (node.module or "").split(".")[0] == "confluent_kafka" for a in node.names if a.name in CLIENTS}
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id in names)
        or (isinstance(node.func, ast.Attribute) and node.func.attr in CLIENTS)))


def test_only_the_client_module_constructs_kafka_clients() -> None:
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("kctl", "bench") or rel == Path("kctl/kafka/client.py"):
            continue
        lines = client_constructions(path.read_text(encoding="utf-8"))
        if lines:
            found[str(rel)] = lines
    assert not found, f"AdminClient/Producer/Consumer made outside kctl/kafka/client.py (use its admin/producer/" \
                      f"consumer with a Target): {found}"
    assert client_constructions((PKG / "kafka" / "client.py").read_text(encoding="utf-8"))  # where they are made


def test_the_construction_check_can_fail() -> None:
    source = ("from confluent_kafka import Consumer as C, TopicPartition\n"
              "import confluent_kafka\n\n"
              "def f(ck):\n"
              "    a = C({})\n"
              "    b = confluent_kafka.Producer({})\n"
              "    c = ck.AdminClient({})\n"
              "    d = TopicPartition('t', 0)\n"
              "    return Consumer\n")
    assert client_constructions(source) == [5, 6, 7]


# ----- Target -----------------------------------------------------------------------------------------------


def test_a_plain_cluster_has_no_security_settings() -> None:
    spec = ClusterSpec()
    t = Target.of(spec)
    assert (t.spec, t.bootstrap_servers, t.user) == (spec, spec.bootstrap_servers, None)
    assert t.security == {}
    conf = client.base_config(t)
    assert conf["bootstrap.servers"] == spec.bootstrap_servers
    assert [k for k in conf if k.startswith(SECURITY_KEYS)] == []
    # --bootstrap-server without a kctl.yaml: an empty spec, and the servers given win
    given = Target.of(ClusterSpec(), "10.0.0.1:9092")
    assert given.bootstrap_servers == "10.0.0.1:9092" and given.security == {}
    assert Target.of(None, "10.0.0.1:9092").security == {}


def test_no_bootstrap_servers_is_said_with_its_hint() -> None:
    for make in (lambda: Target.of(None), lambda: Target.of(None, ""), lambda: Target.foreign("", {})):
        with pytest.raises(KctlError) as ei:
            make()
        assert ei.value.message == "no bootstrap servers"
        assert ei.value.hint == "pass --bootstrap-server(s), or run where kctl.yaml exists"


def secured(tmp_path: Path, **security: Any) -> ClusterSpec:
    spec, _ = parse_spec({"security": {"enabled": True, **security}, "state_dir": str(tmp_path)})
    store.passwords(spec, tmp_path, create=True)
    return spec


def test_a_secured_cluster_gives_sasl_ssl_as_the_admin_user_made_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = secured(tmp_path)
    admin_pw = store.passwords(spec, tmp_path)["admin"]
    asked: list[str | None] = []
    real = store.client_settings

    def counted(spec: ClusterSpec, user: str | None = None, state_dir: Path | None = None, *,
                own: bool = False) -> dict[str, str]:
        asked.append(user)
        assert own  # kctl's own clients: the settings from the migration step on which kctl logs in
        return real(spec, user, state_dir, own=own)

    monkeypatch.setattr(store, "client_settings", counted)
    t = Target.of(spec)
    assert asked == []  # made with the first client: a missing password is said where it was before
    want = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin",
            "sasl.password": admin_pw,
            "ssl.ca.location": str((store.secrets_dir(tmp_path) / contract.CA_FILE).resolve())}
    assert client.base_config(t) == {**client.base_config(t), "bootstrap.servers": spec.bootstrap_servers, **want}
    assert t.security == want and asked == [None]  # once, however many clients
    assert admin_pw not in repr(t)
    one = t.at("127.0.0.1:19093")  # one broker's own address: the same login, not made again
    assert one.bootstrap_servers == "127.0.0.1:19093" and one.security == want and asked == [None]


def test_a_user_logs_in_as_itself(tmp_path: Path) -> None:
    spec = secured(tmp_path)
    store.save_user_password(tmp_path, "reader", "reader-pw-0123456789")
    t = Target.of(spec)
    reader = t.as_user("reader")
    assert (reader.spec, reader.bootstrap_servers, reader.user) == (spec, t.bootstrap_servers, "reader")
    assert reader.security["sasl.username"] == "reader" and reader.security["sasl.password"] == "reader-pw-0123456789"
    assert reader.security["security.protocol"] == "SASL_SSL"
    assert Target.of(spec, user="reader").security == reader.security
    assert t.as_user(None) is t and t.security["sasl.username"] == "admin"
    nobody = Target.of(spec, user="nobody")  # said when its first client is made, not before
    with pytest.raises(KctlError, match="no password of user 'nobody'"):
        client.base_config(nobody)
    assert Target.of(ClusterSpec(), user="reader").security == {}  # a plain cluster has no users to log in as


def test_kctl_logs_in_from_the_second_step_of_securing_a_running_cluster(tmp_path: Path) -> None:
    assert Target.of(secured(tmp_path, migration="secure-listeners")).security == {}
    assert Target.of(secured(tmp_path, migration="secure-inter-broker")).security["sasl.username"] == "admin"


def test_a_foreign_source_takes_the_settings_of_its_source_client(tmp_path: Path) -> None:
    pw, ca = tmp_path / "pw", tmp_path / "ca.pem"
    pw.write_text("s3cret-source-pw\n")
    pw.chmod(0o600)
    ca.write_bytes(CA)
    spec, _ = parse_spec({"name": "dr", "mirrors": [
        {"name": "ext", "source": {"bootstrap_servers": "10.0.0.1:9093", "client": {
            "security_protocol": "SASL_SSL", "username": "reader", "password_file": "pw", "ca_file": "ca.pem"}}},
        {"name": "open", "source": {"bootstrap_servers": "10.0.0.2:9092"}}]}, "kctl.yaml")
    t = client.mirror_source(spec.mirrors[0], tmp_path / "kctl.yaml")
    want = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "reader",
            "sasl.password": "s3cret-source-pw", "ssl.ca.location": str(tmp_path / "ca.pem")}
    assert (t.spec, t.user, t.bootstrap_servers, t.name) == (None, None, "10.0.0.1:9093", "mirror ext's source")
    assert t.security == want
    assert {k: v for k, v in client.base_config(t).items() if k.startswith(SECURITY_KEYS)} == want
    assert "s3cret" not in repr(t)
    with pytest.raises(KctlError, match="mirror ext's source is no cluster of a kctl.yaml"):
        t.kctl_spec  # noqa: B018 - the property raises
    plain = client.mirror_source(spec.mirrors[1], tmp_path / "kctl.yaml")
    assert plain.bootstrap_servers == "10.0.0.2:9092" and plain.security == {}
    settings = {"security.protocol": "SSL"}
    given = Target.foreign("h:9093", settings, name="x")
    settings["security.protocol"] = "PLAINTEXT"  # the target keeps what it was given
    assert given.security == {"security.protocol": "SSL"} and given.spec is None


def test_connect_with_bootstrap_servers_and_no_kctl_yaml_is_an_empty_spec(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kctl.cli.common import connect
    from kctl.cluster import identity

    monkeypatch.setattr(identity, "answering", lambda bootstrap, spec=None: "Xy7kQ2fnT3a1bC9dE0fG1h")
    t = connect(tmp_path / "kctl.yaml", "10.0.0.1:9092")
    assert t.spec == ClusterSpec() and t.bootstrap_servers == "10.0.0.1:9092" and t.user is None
    assert t.security == {}
    assert "talking to Kafka cluster id Xy7kQ2fnT3a1bC9dE0fG1h at 10.0.0.1:9092" in capsys.readouterr().err
