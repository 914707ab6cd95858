"""The secured profile on one real cluster (KafkaCluster(security=True)), checked with independent
clients where possible: kcat, confluent-kafka, kazoo, raw sockets, `docker inspect`."""

from __future__ import annotations

import concurrent.futures as cf
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl import contract
from kctl.kafka import describe as kmd
from kctl.security import store
from kctl.testing.cluster import KafkaCluster
from kctl.zk import fourlw
from tests.integration.load import kcat_values
from tests.integration.ports import spark_quick_jit

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secure(secured_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's secured cluster (tests/integration/conftest.py), shared with the profile matrix."""
    yield secured_cluster


def kctl(cluster: KafkaCluster, *args: str, stdin: str | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(cluster.spec_file)], input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, p.stderr
    return p.stdout


def kcat(conf: dict[str, str], tmp: Path, *args: str, stdin: str | None = None,
         timeout: float = 30) -> subprocess.CompletedProcess[str]:
    f = tmp / f"kcat-{uuid.uuid4().hex[:6]}.conf"
    store.write_secret(f, "".join(f"{k}={v}\n" for k, v in conf.items()))
    return subprocess.run(["kcat", "-F", str(f), *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def admin_errors(conf: dict[str, str]) -> tuple[bool, list[str]]:
    """Whether a confluent-kafka AdminClient with ``conf`` gets metadata, and the errors it reported."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    a = AdminClient({**conf, "error_cb": lambda e: errors.append(f"{e.name()}: {e.str()}"), "log_level": 0})
    try:
        a.list_topics(timeout=8)
        return True, errors
    except KafkaException as exc:
        errors.append(str(exc))
        for _ in range(5):  # serve the error callbacks: the authentication or TLS error itself
            a.poll(0.5)
        return False, errors


def test_every_command_works_as_the_admin_user(secure: KafkaCluster) -> None:
    assert ok(kctl(secure, "status", "-o", "json"))
    t = f"sec-cmd-{uuid.uuid4().hex[:6]}"
    ok(kctl(secure, "topic", "create", t, "-p", "3", "-r", "3"))
    assert t in ok(kctl(secure, "topic", "list"))
    ok(kctl(secure, "produce", t, stdin="one\ntwo\nthree\n"))
    got = ok(kctl(secure, "consume", t, "--from-beginning", "--group", "sec-g", "--max", "3", "--timeout", "20"))
    assert sorted(got.split()) == ["one", "three", "two"]
    assert "sec-g" in ok(kctl(secure, "group", "list"))
    assert sorted(json.loads(ok(kctl(secure, "zk", "ls", "/brokers/ids", "-o", "json")))["children"]) == ["1", "2", "3"]
    ok(kctl(secure, "config", "set", "retention.ms=3600000", "--topic", t))
    # kafka-configs in a node, with the admin user's --command-config file
    ok(kctl(secure, "quota", "set", "--user", "quota-user", "producer_byte_rate=104857600"))
    assert "104857600" in ok(kctl(secure, "config", "describe", "--user", "quota-user"))
    ok(kctl(secure, "quota", "delete", "--user", "quota-user", "producer_byte_rate"))
    assert "104857600" not in ok(kctl(secure, "config", "describe", "--user", "quota-user"))


def test_up_readiness_and_round_trip_on_the_running_cluster(secure: KafkaCluster) -> None:
    p = kctl(secure, "up", timeout=300)  # nothing to change: the readiness stages run, as the admin user
    assert p.returncode == 0, p.stderr
    assert "noop" in p.stderr and "ok  produce/consume round trip" in p.stderr
    assert "HEALTHY" in kctl(secure, "status").stdout


def test_secrets_are_private_files(secure: KafkaCluster) -> None:
    root = store.secrets_dir(secure.state_dir)
    modes = {p: p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}
    assert all(m == (0o700 if p.is_dir() else 0o600) for p, m in modes.items()), modes
    for text in (secure.spec_file.read_text(), (secure.state_dir / "compose.yaml").read_text()):
        for pw in store.passwords(secure.spec, secure.state_dir).values():
            assert pw not in text


def test_no_plaintext_listener_from_the_host(secure: KafkaCluster, tmp_path: Path) -> None:
    import docker

    dc = docker.from_env()
    published = set()
    for c in dc.containers.list(filters={"label": f"{contract.LABEL_CLUSTER}={secure.spec.name}"}):
        for bindings in (c.attrs["NetworkSettings"]["Ports"] or {}).values():
            published |= {int(b["HostPort"]) for b in bindings or []}
    kafka_ports = {secure.spec.kafka_host_port(n) for n in secure.spec.nodes}
    zk_ports = {secure.spec.zk_host_port(n) for n in secure.spec.nodes}
    # The exporters' HTTP ports (monitoring, on 127.0.0.1 like every port): metrics only, no secret
    # (test_monitoring_on_the_secured_profile reads them).
    metrics_ports = {int(url.rsplit(":", 1)[1].split("/")[0]) for _, _, url in secure.spec.metrics_endpoints()}
    assert published == kafka_ports | zk_ports | metrics_ports
    for port in kafka_ports:
        with pytest.raises(kmd.MetadataError):
            kmd.fetch(f"127.0.0.1:{port}", timeout=3)  # a PLAINTEXT client gets no answer
    p = kcat({"bootstrap.servers": secure.bootstrap_servers}, tmp_path, "-L", "-m", "5")
    assert p.returncode != 0


def test_no_credentials_wrong_password_or_no_ca_are_refused(secure: KafkaCluster, tmp_path: Path) -> None:
    good = secure.client_config()
    no_sasl = {k: v for k, v in good.items() if not k.startswith("sasl.")} | {"security.protocol": "SSL"}
    wrong = {**good, "sasl.password": "not-the-password"}
    no_ca = {k: v for k, v in good.items() if k != "ssl.ca.location"}
    assert admin_errors(good)[0]
    assert kcat(good, tmp_path, "-L", "-m", "8").returncode == 0
    cases = {"no credentials": (no_sasl, ("Disconnected", "transport failure", "TRANSPORT")),
             "wrong password": (wrong, ("Authentication failed", "SASL authentication error", "AUTHENTICATION")),
             "no CA": (no_ca, ("certificate verify failed", "SSL handshake failed", "_SSL"))}

    def attempt(conf: dict[str, str]) -> tuple[bool, list[str], subprocess.CompletedProcess[str]]:
        return (*admin_errors(conf), kcat(conf, tmp_path, "-L", "-m", "8"))

    # Each refused client waits out its timeout: the three cases at once.
    with cf.ThreadPoolExecutor(max_workers=3) as pool:
        seen = dict(zip(cases, pool.map(attempt, [conf for conf, _ in cases.values()]), strict=True))
    for name, (_, words) in cases.items():
        reached, errors, p = seen[name]
        assert not reached, name
        assert any(w in e for e in errors for w in words), (name, errors)
        assert p.returncode != 0, name
        assert any(w in p.stderr for w in words), (name, p.stderr)
    # kctl's own reads (health, identity) tell a refused login or TLS failure from no answer.
    settings = {k: v for k, v in good.items() if k != "bootstrap.servers"}
    assert kmd.fetch_any(secure.bootstrap_servers, 5.0, settings).cluster_id
    for name, conf in (("wrong password", wrong), ("no CA", no_ca)):
        bad = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
        with pytest.raises(kmd.AuthError) as ei:
            kmd.fetch_any(secure.bootstrap_servers, 5.0, bad)
        assert "not-the-password" not in str(ei.value) and good["sasl.password"] not in str(ei.value), name


def test_a_user_without_acls_can_do_nothing_then_writes_only_its_topic(secure: KafkaCluster, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    user = f"u{uuid.uuid4().hex[:6]}"
    t, other = f"sec-acl-{user}", f"sec-other-{user}"
    for name in (t, other):
        secure.create_topic(name, partitions=1, replication_factor=3)
    ok(kctl(secure, "user", "create", user, "--password-stdin", stdin="s3cret-password\n"))
    conf = secure.client_config(user)
    assert conf["sasl.password"] == "s3cret-password"

    def produce(topic: str) -> str | None:
        p = Producer({**conf, "message.timeout.ms": 8000, "log_level": 0})
        results: list[Any] = []
        p.produce(topic, value=f"from {user}".encode(), on_delivery=lambda e, m: results.append(e))
        p.flush(12)
        return results[0].name() if results and results[0] is not None else (None if results else "no report")

    assert produce(t) == "TOPIC_AUTHORIZATION_FAILED"
    c = Consumer({**conf, "group.id": f"g-{user}", "log_level": 0})
    c.assign([TopicPartition(t, 0, 0)])
    msgs = c.consume(1, timeout=8)
    c.close()
    assert msgs and msgs[0].error() is not None and "AUTHORIZATION" in msgs[0].error().name()

    ok(kctl(secure, "acl", "add", "--allow", f"User:{user}", "--operation", "write", "--topic", t))
    listed = json.loads(ok(kctl(secure, "acl", "list", "--principal", f"User:{user}", "-o", "json")))
    assert [(a["operation"], a["resource"], a["permission"]) for a in listed] == [("write", t, "ALLOW")]
    deadline = time.monotonic() + 30  # ACLs reach every broker through ZooKeeper notifications
    while (res := produce(t)) is not None and time.monotonic() < deadline:
        time.sleep(1)
    assert res is None
    assert produce(other) == "TOPIC_AUTHORIZATION_FAILED"
    # An independent reader (the admin user, over kcat) finds the record in t and nothing in the other topic.
    admin = secure.client_config()
    got = kcat(admin, tmp_path, "-C", "-t", t, "-e", "-o", "beginning", "-q")
    assert got.returncode == 0 and got.stdout.split("\n").count(f"from {user}") >= 1
    empty = kcat(admin, tmp_path, "-C", "-t", other, "-e", "-o", "beginning", "-q")
    assert empty.returncode == 0 and empty.stdout.strip() == ""
    ok(kctl(secure, "acl", "remove", "--allow", f"User:{user}", "--operation", "write", "--topic", t))
    ok(kctl(secure, "user", "delete", user))
    assert user not in ok(kctl(secure, "user", "list"))


def test_kcat_produces_with_only_what_client_config_prints(secure: KafkaCluster, tmp_path: Path) -> None:
    t = f"sec-kcat-{uuid.uuid4().hex[:6]}"
    secure.create_topic(t, partitions=1, replication_factor=3)
    conf = tmp_path / "kcat.conf"
    ok(kctl(secure, "client-config", "--format", "kcat", "--out", str(conf)))
    assert conf.stat().st_mode & 0o777 == 0o600
    p = subprocess.run(["kcat", "-F", str(conf), "-P", "-t", t], input="hello-secure\n", capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    back = subprocess.run(["kcat", "-F", str(conf), "-C", "-t", t, "-e", "-o", "beginning", "-q"],
                          capture_output=True, text=True, timeout=30)
    assert back.stdout.strip() == "hello-secure"


def test_zookeeper_refuses_anonymous_sessions_and_guards_kafkas_znodes(secure: KafkaCluster) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from kctl.zk.znodes import sasl_options

    anon = KazooClient(hosts=secure.zookeeper_connect, timeout=5, connection_retry={"max_tries": 1})
    refused = False
    try:
        anon.start(timeout=8)
        anon.get_children("/brokers/ids")
    except Exception:  # noqa: BLE001 - the session is closed by the server (auth enforced): any error is a refusal
        refused = True
    finally:
        anon.stop()
        anon.close()
    assert refused
    zk = KazooClient(hosts=secure.zookeeper_connect, timeout=8, **sasl_options(secure.spec))
    zk.start(timeout=10)
    try:
        assert sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"]  # authenticated: may read
        attempts = [lambda: zk.create("/brokers/ids/99", b"{}"), lambda: zk.set("/brokers/topics", b"x"),
                    lambda: zk.create("/config/topics/evil", b"{}"), lambda: zk.create("/admin/delete_topics/x"),
                    lambda: zk.delete("/brokers/ids/1"), lambda: zk.set("/admin", b"x"),
                    lambda: zk.create("/beside-kafka", b"x"), lambda: zk.set("/", b"x")]  # nor at the root
        for attempt in attempts:
            with pytest.raises(NoAuthError):
                attempt()
        with pytest.raises(NoAuthError):
            zk.get("/config/users/admin")  # the SCRAM credentials: the brokers' principal alone may read them
        assert {(a.id.scheme, a.id.id, a.perms) for a in zk.get_acls("/")[0]} == {("sasl", "kafka", 31),
                                                                                 ("world", "anyone", 1)}
    finally:
        zk.stop()
        zk.close()


def test_four_letter_word_whitelist_and_no_admin_server(secure: KafkaCluster) -> None:
    port = secure.spec.zk_host_port(secure.spec.nodes[0])
    assert fourlw.ask("127.0.0.1", port, "srvr", timeout=3).whitelisted
    for word in ("wchc", "wchp", "dump"):
        ans = fourlw.ask("127.0.0.1", port, word, timeout=3)
        assert "is not executed because it is not in the whitelist" in ans.text, (word, ans.text)
    code, _ = secure.exec(1, ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"])
    assert code != 0  # the Jetty admin server does not listen


def test_broker_jvm_hardening(secure: KafkaCluster) -> None:
    code, out = secure.exec(1, ["bash", "-c", "tr '\\0' '\\n' < /proc/$(pgrep -f 'kafka[.]Kafka')/cmdline"])
    assert code == 0, out
    args = out.splitlines()
    modules = [a for a in args if a.startswith("-Dorg.apache.kafka.disallowed.login.modules=")]
    assert modules and "com.sun.security.auth.module.JndiLoginModule" in modules[0].split("=", 1)[1].split(",")
    assert "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=" in args


def test_no_password_in_docker_inspect_or_process_arguments(secure: KafkaCluster) -> None:
    import docker

    secrets = set(store.passwords(secure.spec, secure.state_dir).values())
    dc = docker.from_env()
    found = dc.containers.list(filters={"label": f"{contract.LABEL_CLUSTER}={secure.spec.name}"})
    assert len(found) == 3
    for c in found:
        cfg = c.attrs["Config"]
        exposed = json.dumps([cfg.get("Env"), cfg.get("Cmd"), cfg.get("Entrypoint"), c.attrs.get("Args")])
        assert not [s for s in secrets if s in exposed], c.name
        _, ps = secure.exec(c.labels[contract.LABEL_SERVICE], ["ps", "-ww", "-eo", "args"])
        assert not [s for s in secrets if s in ps], c.name


def test_bootstrap_server_commands_use_the_specs_credentials_or_say_what_is_missing(
        secure: KafkaCluster, tmp_path: Path) -> None:
    bs = secure.bootstrap_servers
    t = f"sec-bs-{uuid.uuid4().hex[:6]}"
    # a write command through --bootstrap-server: the kctl.yaml's admin user for the identity check and the call
    p = kctl(secure, "topic", "create", t, "-p", "1", "-r", "3", "--bootstrap-server", bs)
    assert p.returncode == 0, p.stderr
    from kctl.cluster import identity

    rec = identity.read(secure.state_dir)
    assert rec is not None and f"cluster id {rec.cluster_id} at {bs} (the cluster of" in p.stderr
    assert t in ok(kctl(secure, "topic", "list", "--bootstrap-server", bs))
    # without a kctl.yaml kctl has no credentials: one clear message, not a timeout or a traceback
    for args in (["topic", "list"], ["topic", "create", "x", "-p", "1"]):
        q = subprocess.run([sys.executable, "-m", "kctl", *args, "--bootstrap-server", bs, "-f",
                            str(tmp_path / "kctl.yaml")], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert q.returncode != 0 and "speaks TLS" in q.stderr and "Traceback" not in q.stderr, q.stderr
        assert "-f naming that cluster's kctl.yaml" in q.stderr


@pytest.mark.spark
@pytest.mark.long
def test_stream_job_reads_the_secured_cluster(secure: KafkaCluster, tmp_path: Path) -> None:
    """`kctl gen logs` and `kctl stream submit` log in as the admin user; every event lands in the archive
    (read back with delta-rs), and no password reaches the job's output or files."""
    import deltalake

    t = f"sec-stream-{uuid.uuid4().hex[:6]}"
    ok(kctl(secure, "topic", "create", t, "-p", "3", "-r", "3"))
    ok(kctl(secure, "gen", "logs", "-t", t, "-n", "300", "--seed", "7", "--rate", "100000"))
    p = kctl(secure, "stream", "submit", "-t", t, "--available-now", "--master", "local[1]",
             "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "cp"), "-o", "json",
             "--conf", "=".join(spark_quick_jit()), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    archive = deltalake.DeltaTable(str(tmp_path / "out" / "archive")).to_pyarrow_table()
    assert archive.num_rows == 300
    assert len({(r["partition"], r["offset"]) for r in archive.select(["partition", "offset"]).to_pylist()}) == 300
    secrets = set(store.passwords(secure.spec, secure.state_dir).values())
    leaked = [str(f) for f in tmp_path.rglob("*") if f.is_file() and any(s.encode() in f.read_bytes() for s in secrets)]
    assert not leaked and not [s for s in secrets if s in p.stdout + p.stderr], leaked


def test_restart_of_a_broker_goes_through_its_gates_on_the_secured_cluster(secure: KafkaCluster) -> None:
    """Day-2 on the secured profile: `kctl restart` (leaders moved away, supervisorctl, health gates as the
    admin user) and every acknowledged record still there afterwards."""
    t = f"sec-roll-{uuid.uuid4().hex[:6]}"
    ok(kctl(secure, "topic", "create", t, "-p", "3", "-r", "3"))
    lines = [f"r{i}" for i in range(100)]
    ok(kctl(secure, "produce", t, "--acks", "all", stdin="\n".join(lines) + "\n"))
    p = kctl(secure, "restart", "logger3", "--service", "kafka", "--yes", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "logger3" in p.stdout + p.stderr
    got = ok(kctl(secure, "consume", t, "--from-beginning", "--max", "100", "--timeout", "30"))
    assert sorted(got.split()) == sorted(lines)
    assert "HEALTHY" in ok(kctl(secure, "status"))


def test_monitoring_on_the_secured_profile(secure: KafkaCluster) -> None:
    """The exporters answer on 127.0.0.1 (their metrics hold no secret), and kctl metrics and kctl lag reach the
    secured cluster with the spec's credentials."""
    st = json.loads(ok(kctl(secure, "status", "-o", "json")))
    assert len(st["metrics_endpoints"]) == 6
    assert all(e["url"].startswith("http://127.0.0.1:") for e in st["metrics_endpoints"])
    rep = json.loads(ok(kctl(secure, "metrics", "--window", "1", "-o", "json")))
    assert len(rep["brokers"]) == 3 and len(rep["zookeepers"]) == 3 and not rep["errors"]
    assert sum(1 for b in rep["brokers"] if b["active_controller"]) == 1
    group = f"sec-mon-{uuid.uuid4().hex[:6]}"
    topic = f"sec-mon-{uuid.uuid4().hex[:6]}"
    ok(kctl(secure, "topic", "create", topic, "-p", "1", "-r", "3"))
    ok(kctl(secure, "produce", topic, stdin="a\nb\nc\n"))
    ok(kctl(secure, "consume", topic, "--group", group, "--from-beginning", "--max", "3", "--timeout", "20"))
    doc = json.loads(ok(kctl(secure, "lag", group, "--samples", "2", "--interval", "0.5", "-o", "json")))
    assert doc["status"] == "OK" and doc["total_lag"] == 0
    secrets = set(store.passwords(secure.spec, secure.state_dir).values())
    for e in st["metrics_endpoints"]:
        with urllib.request.urlopen(e["url"], timeout=10) as resp:  # noqa: S310 - the test cluster's own exporter
            text = resp.read().decode()
        assert not [s for s in secrets if s in text], e["url"]


def test_support_bundle_of_the_secured_cluster_holds_its_answers_and_none_of_its_secrets(
        secure: KafkaCluster, tmp_path: Path) -> None:
    import tarfile

    topic = f"bundle-{uuid.uuid4().hex[:6]}"
    ok(kctl(secure, "topic", "create", topic, "-p", "2", "-r", "3"))
    out = tmp_path / "support.tar.gz"
    p = kctl(secure, "support-bundle", "--out", str(out), "--log-lines", "300", timeout=300)
    assert p.returncode == 0, p.stderr
    # Every secret, read here from the secrets dir itself: the passwords and each text file's lines.
    secrets = {v for v in store.passwords(secure.spec, secure.state_dir).values() if len(v) >= 6}
    for f in (secure.state_dir / contract.HOST_SECRETS).rglob("*"):
        if f.is_file() and b"\0" not in f.read_bytes()[:4096]:
            for line in f.read_text(errors="replace").splitlines():
                if "password" in line.lower() and '"' in line:
                    secrets.update(part for part in line.split('"')[1::2] if len(part) >= 6)
    assert secrets
    with tarfile.open(out, "r:gz") as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    leaks = sorted({name for name, text in files.items() for s in secrets if s in text})
    assert leaks == [], leaks
    assert json.loads(files["status.json"])["health"] == "healthy"
    assert topic in files["topics.json"] and "acls.json" in files and "scram-users.json" in files
    for n in secure.spec.nodes:
        assert len(files[f"logs/{n.hostname}/kafka.log"].splitlines()) > 10
    assert "kctl" in json.loads(files["versions.json"]) and files["errors.txt"].startswith("nothing")
    assert not [n for n in files if n.startswith("state/secrets")]
    again = kctl(secure, "support-bundle", "--out", str(out))
    assert again.returncode != 0 and "exists" in again.stderr and "Traceback" not in again.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["support.tar.gz"]


@pytest.mark.long
def test_cert_renew_rolls_a_broker_onto_its_new_certificate_and_no_client_is_refused(
        secure: KafkaCluster, tmp_path: Path) -> None:
    """logger2's certificate renewed under an acks=all producer that trusts only the CA: after the gated roll
    the broker's listener serves the new certificate (read with Python's ssl, not kctl), and every record the
    producer sent was acknowledged."""
    import socket
    import ssl
    import threading

    from confluent_kafka import Producer
    from cryptography import x509

    node = secure.spec.node("logger2")
    port = secure.spec.client_port(node)

    def served() -> x509.Certificate:
        ctx = ssl.create_default_context(cafile=str(store.secrets_dir(secure.state_dir) / contract.CA_FILE))
        ctx.check_hostname = False
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10)) as s:
            return x509.load_der_x509_certificate(s.getpeercert(binary_form=True) or b"")

    before = served()
    topic = f"renew-{uuid.uuid4().hex[:6]}"
    ok(kctl(secure, "topic", "create", topic, "-p", "3", "-r", "3"))
    errors: list[str] = []
    acked = [0]
    stop = threading.Event()

    def produce() -> None:
        p = Producer({**secure.client_config(), "acks": "all", "linger.ms": 5})

        def cb(err: Any, _m: Any) -> None:
            if err is None:
                acked[0] += 1
            else:
                errors.append(str(err))

        sent = 0
        deadline = time.monotonic() + 600
        while not stop.is_set() and time.monotonic() < deadline and sent < 100_000:  # bounded
            p.produce(topic, str(sent).encode(), on_delivery=cb)
            sent += 1
            p.poll(0.01)
        p.flush(60)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        p = kctl(secure, "cert", "renew", "logger2", "--yes", timeout=900)
        assert p.returncode == 0, p.stderr
    finally:
        stop.set()
        t.join(120)
    after = served()
    on_disk = x509.load_pem_x509_certificate(
        (store.secrets_dir(secure.state_dir) / "certs" / "logger2.pem").read_bytes())
    assert after.serial_number != before.serial_number and after == on_disk
    assert errors == [] and acked[0] > 0
    st = kctl(secure, "cert", "status", "-o", "json")
    assert st.returncode == 0, st.stdout
    assert {c["name"]: c["keystore"] for c in json.loads(st.stdout)}["logger2"] == "current"


@pytest.mark.long
def test_cert_rotate_ca_step_by_step_under_load_and_no_client_that_follows_it_is_refused(
        secure: KafkaCluster, tmp_path: Path) -> None:
    """The CA replaced in its three steps on the running secured cluster. An outside client that trusts what the
    docs say to give it (the old ca.pem before, trust.pem from the first step on) writes with acks=all all along
    and is never refused; after the last step every listener serves a certificate the new CA signed (read with
    Python's ssl and checked with cryptography, not kctl) and every container trusts the new CA alone."""
    import shutil
    import socket
    import ssl
    import threading

    from confluent_kafka import Producer
    from cryptography import x509

    root = store.secrets_dir(secure.state_dir)
    old_ca = x509.load_pem_x509_certificate((root / contract.CA_FILE).read_bytes())
    brokers = [n for n in secure.spec.nodes if n.broker]

    def served(node: Any, cafile: Path) -> x509.Certificate:
        ctx = ssl.create_default_context(cafile=str(cafile))
        ctx.check_hostname = False
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", secure.spec.client_port(node)),
                                                      timeout=10)) as s:
            return x509.load_der_x509_certificate(s.getpeercert(binary_form=True) or b"")

    topic = f"rotate-{uuid.uuid4().hex[:6]}"
    ok(kctl(secure, "topic", "create", topic, "-p", "3", "-r", "3"))

    class Writer(threading.Thread):
        def __init__(self, cafile: Path, first: int) -> None:
            super().__init__(daemon=True)
            self.conf = {**secure.client_config(), "ssl.ca.location": str(cafile), "acks": "all", "linger.ms": 5}
            self.first, self.acked, self.errors, self.stop = first, set(), [], threading.Event()

        def run(self) -> None:
            p = Producer(self.conf)

            def cb(err: Any, m: Any) -> None:
                if err is None:
                    self.acked.add(int(m.value()))
                else:
                    self.errors.append(str(err))

            deadline, sent = time.monotonic() + 900, 0
            while not self.stop.is_set() and time.monotonic() < deadline and sent < 200_000:  # bounded
                p.produce(topic, str(self.first + sent).encode(), on_delivery=cb)
                sent += 1
                p.poll(0.01)
            p.flush(60)

        def end(self) -> None:
            self.stop.set()
            self.join(120)

    given_before = tmp_path / "given-before.pem"  # what an outside client trusts before the rotation
    shutil.copy(root / contract.CA_FILE, given_before)
    first = Writer(given_before, 0)
    first.start()
    try:
        p = kctl(secure, "cert", "rotate-ca", "--yes", timeout=1200)  # trust
        assert p.returncode == 0 and "next: reissue" in p.stderr + p.stdout, p.stderr
    finally:
        first.end()
    assert first.errors == [] and first.acked
    given = tmp_path / "given-trust.pem"  # the docs: give outside clients trust.pem now
    shutil.copy(root / contract.TRUST_FILE, given)
    assert len(list(x509.load_pem_x509_certificates(given.read_bytes()))) == 2
    second = Writer(given, 1_000_000)
    second.start()
    try:
        for step in ("reissue", "drop"):
            p = kctl(secure, "cert", "rotate-ca", "--yes", timeout=1200)
            assert p.returncode == 0 and f"{step} done" in p.stderr + p.stdout, p.stderr
    finally:
        second.end()
    assert second.errors == [] and second.acked
    # every acknowledged record read back by an independent reader (kcat, trusting the new CA alone now)
    reader = {**secure.client_config(), "ssl.ca.location": str(root / contract.TRUST_FILE)}
    lost = sorted((first.acked | second.acked) - set(kcat_values(reader, topic)))
    assert lost == [], f"{len(lost)} acknowledged records not read back: {lost[:20]}"
    print(f"\nCA rotated on ZooKeeper under load: trust: {len(first.acked)} acknowledged; reissue+drop:"
          f" {len(second.acked)} acknowledged; 0 lost")
    new_ca = x509.load_pem_x509_certificate((root / contract.CA_FILE).read_bytes())
    assert new_ca.subject != old_ca.subject
    for node in brokers:
        cert = served(node, root / contract.TRUST_FILE)
        cert.verify_directly_issued_by(new_ca)  # raises unless the new CA signed what the listener serves
        host = secure.spec.kafka_host(node)
        code, out = secure.exec(host, ["cat", f"{contract.SECRETS_MOUNT}/{contract.CA_FILE}"])
        assert code == 0 and list(x509.load_pem_x509_certificates(out.encode())) == [new_ca], out[:200]
    st = kctl(secure, "cert", "status", "-o", "json")
    assert st.returncode == 0 and {c["name"] for c in json.loads(st.stdout)} >= {"CA"}, st.stdout
    assert not any(c["name"].startswith("CA (") for c in json.loads(st.stdout))
    assert secure.status().health == "healthy"
