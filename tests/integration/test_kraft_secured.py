"""`kctl init --kraft --secure`: a cluster on KRaft and secured from its first start (issue #47).

Each controller formats its metadata log with the admin's SCRAM credential in the bootstrap metadata (KIP-900's
``kafka-storage.sh format --add-scram``, its arguments read from a secret file: ``@file``), so the brokers log in to
each other with it at their first start. Checked with real clients (confluent-kafka, kcat): the admin's and a SCRAM
user's logins, the StandardAuthorizer's ACLs (a user without an ACL refused, a wrong password refused), then down
and up on the kept data; and that no password is in any process's command line (the format's own included, its
JVM sampled while it runs), the containers' environment, a rendered file or a log. `make test-long` adds three
nodes on Kafka 4.3 (whose storage tool prints the bootstrap records) and a roll of every node under a SCRAM load,
and the dynamic quorum on the secured profile (made dynamic, a controller added and removed: 81 s on one node).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.load import Load, kcat_values, read_values
from tests.integration.ports import away_from_defaults

pytestmark = pytest.mark.integration

APP = "app"  # a SCRAM user with ACLs on TOPIC (write, read) and its groups
NOBODY = "nobody"  # a SCRAM user with no ACL at all
TOPIC = "orders"


def kctl(cwd: Path, *args: str, stdin: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, input=stdin, capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    assert "Traceback" not in p.stderr, p.stderr
    return p


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, f"{' '.join(p.args[3:])}: {p.stdout[-2000:]} {p.stderr[-2000:]}"
    return p.stdout


def init(tmp_path: Path, nodes: int, kafka: str | None = None, ports_for: int | None = None) -> str:
    """`kctl init --kraft --secure --name ...`, checked, then cut to ``nodes`` nodes on free ports."""
    name = f"kt-ksec-{uuid.uuid4().hex[:6]}"
    p = kctl(tmp_path, "init", "--kraft", "--secure", "--name", name)
    said = ok(p) + p.stderr
    assert "secured: SASL_SSL, ACLs, metadata in KRaft controllers" in said and "ZooKeeper" not in said, said
    spec_file = tmp_path / "kctl.yaml"
    data = yaml.safe_load(spec_file.read_text())
    assert data["metadata"] == "kraft" and data["security"]["enabled"] is True, data
    data["nodes"] = data["nodes"][:nodes]
    if nodes < 3:
        data["kafka"].update({"default_replication_factor": nodes, "offsets_topic_replication_factor": nodes,
                              "transaction_state_log_replication_factor": nodes, "min_insync_replicas": 1})
    if kafka:
        data["versions"]["kafka"] = kafka
    spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    away_from_defaults(spec_file, nodes=ports_for or nodes)  # ports_for: nodes added later too
    return name


def login(cwd: Path, user: str | None = None) -> dict[str, str]:
    """A client's settings as `kctl client-config --out` writes them for the operator (a 0600 file)."""
    out = cwd / f"client-{user or 'admin'}.properties"
    ok(kctl(cwd, "client-config", *(["--user", user] if user else []), "--out", str(out)))
    assert out.stat().st_mode & 0o077 == 0
    return dict(line.split("=", 1) for line in out.read_text().splitlines() if line and not line.startswith("#"))


def produce(conf: dict[str, str], values: range) -> str:
    """Produce ``values`` acks=all; '' or the first delivery error's name."""
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
    for i in values:
        p.produce(TOPIC, value=str(i).encode(),
                  on_delivery=lambda err, _m: errors.append(err.name()) if err is not None else None)
    p.flush(60)
    return errors[0] if errors else ""


def consume(conf: dict[str, str], want: int) -> tuple[list[int], str]:
    """(values read from TOPIC's start in a group of the user's own, the first error met), bounded: 30 s."""
    from confluent_kafka import Consumer

    c = Consumer({**conf, "group.id": f"{APP}-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([TOPIC])
    got: list[int] = []
    error = ""
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(got) < want and not error:
            for m in c.consume(100, 1.0):
                if m.error() is None:
                    got.append(int(m.value()))
                elif "AUTHORIZATION" in m.error().name() or m.error().fatal():
                    error = m.error().name()
    finally:
        c.close()
    return got, error


def refused(read: tuple[list[int], str]) -> bool:
    """Nothing read, and an ACL refused it (the group's ACL or the topic's: whichever the consumer asks first)."""
    return read[0] == [] and read[1] in ("GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED")


def admin_refusal(conf: dict[str, str]) -> str:
    """What a client with these settings hears from the brokers within 15 s: '' when its metadata request is
    answered, else its errors (an authentication failure is an error callback's, served by poll)."""
    from confluent_kafka import KafkaException, Producer

    said: list[str] = []
    p = Producer({**conf, "socket.timeout.ms": 5000, "log_level": 0, "error_cb": lambda e: said.append(e.str())})
    deadline = time.monotonic() + 15
    while not said and time.monotonic() < deadline:
        try:
            p.list_topics(timeout=2)
            return ""
        except KafkaException as exc:
            p.poll(0.5)
            last = str(exc.args[0])
    return "; ".join(said) or last


def container(name: str, i: int) -> str:
    return f"kctl-{name}-logger{i}-1"


def secrets_of(cwd: Path, name: str) -> list[str]:
    """Every password kctl generated or keeps for the cluster (the admin's, the keystores', the users')."""
    root = cwd / ".kctl" / name / "secrets"
    found = list(json.loads((root / "passwords.json").read_text()).values())
    found += [p.read_text().strip() for p in (root / "users").glob("*.password")]
    assert found and all(len(s) >= 16 for s in found)
    return found


def assert_no_secret_outside_files(cwd: Path, name: str, nodes: int, joined: tuple[int, ...] = ()) -> None:
    """No password in any process's command line in the nodes (and on this machine), in a container's environment,
    in a rendered file or in a log (the nodes' logs, Docker's). ``joined``: nodes whose controller kctl formatted to
    join a dynamic quorum (not their start script: no format in their logs)."""
    secrets = secrets_of(cwd, name)
    for i in range(1, nodes + 1):
        c = container(name, i)
        ps = subprocess.run(["docker", "exec", c, "sh", "-c",
                             "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"],
                            capture_output=True, text=True, timeout=60).stdout
        assert "kafka.Kafka /etc/kctl/controller.properties" in ps and "kafka.Kafka /etc/kctl/server.properties" in ps
        top = subprocess.run(["docker", "top", c, "-eo", "pid,args"], capture_output=True, text=True,
                             timeout=60).stdout
        env = subprocess.run(["docker", "inspect", "-f", "{{json .Config.Env}}", c], capture_output=True, text=True,
                             timeout=60).stdout
        logs = subprocess.run(["docker", "exec", c, "sh", "-c", "cat /var/log/kctl/*/*"], capture_output=True,
                              text=True, timeout=60).stdout
        docker_logs = subprocess.run(["docker", "logs", c], capture_output=True, text=True, timeout=60)
        for what, text in (("process args", ps), ("docker top", top), ("environment", env), ("logs", logs),
                           ("docker logs", docker_logs.stdout + docker_logs.stderr)):
            assert not [s for s in secrets if s in text], f"{c}: a password in its {what}"
        if i not in joined:
            assert "Formatting metadata directory" in logs  # the controller's start, its format's output with it
        assert "UserScramCredentialRecord(name=" not in logs  # Kafka 4.2+ prints the bootstrap records: cut
    here = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=60).stdout
    assert not [s for s in secrets if s in here]
    state = cwd / ".kctl" / name
    rendered = [p for p in state.rglob("*") if p.is_file() and "secrets" not in p.relative_to(state).parts
                and "data" not in p.relative_to(state).parts and "logs" not in p.relative_to(state).parts]
    assert rendered and not [str(p) for p in rendered if any(s in p.read_text(errors="replace") for s in secrets)]
    assert not any(s in (cwd / "kctl.yaml").read_text() for s in secrets)


def format_argv(name: str) -> tuple[str, str]:
    """The node's own format step (jvm-common.sh's kraft_storage, as controller-start runs it) into a scratch
    metadata dir, every process's command line sampled every 20 ms while it runs: (the samples, the checkpoint's
    text). Proves what `ps` would have shown during the real format at the cluster's first start."""
    script = r"""
set -euo pipefail
. /usr/local/lib/kctl/jvm-common.sh
d=$(mktemp -d); LOG_DIR=$d/logs; mkdir -p $LOG_DIR $d/meta
sed -e "s#^log.dirs=.*#log.dirs=$d/meta#" /etc/kctl/controller.properties > $d/controller.properties
touch $d/.kctl-format-controller
( KCTL_FORMAT_PERMIT_DIR=$d kraft_storage controller $d/controller.properties $d/meta > $d/format.out 2>&1 ) &
pid=$!
while kill -0 $pid 2>/dev/null; do
  for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' 2>/dev/null < $f || true; echo; done
  sleep 0.02
done
wait $pid
echo "=== format output"; cat $d/format.out
echo "=== checkpoint"; tr -c '[:print:]' '.' < $d/meta/bootstrap.checkpoint; echo
rm -rf $d
"""
    # on stdin: the script's own text (its markers) is then no process's command line
    p = subprocess.run(["docker", "exec", "-i", "-u", "logger", container(name, 1), "bash", "-s"], input=script,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    samples, _, rest = p.stdout.partition("=== format output")
    return samples, rest


def test_init_kraft_secure_gives_a_secured_cluster_on_kraft_that_keeps_users_acls_and_data(tmp_path: Path) -> None:
    name = init(tmp_path, nodes=1)
    try:
        ok(kctl(tmp_path, "up"))
        st = json.loads(ok(kctl(tmp_path, "status", "--wait", "30", "-o", "json")))
        assert (st["health"], st["metadata"], st["quorum"]) == ("healthy", "kraft", "ok"), st["problems"]
        assert st["zookeeper"] == [] and [c["id"] for c in st["controllers"]] == [3001]
        controller_out = subprocess.run(["docker", "exec", container(name, 1), "cat",
                                         "/var/log/kctl/controller/controller.out"], capture_output=True, text=True,
                                        timeout=60).stdout
        assert "the bootstrap metadata gets the SCRAM credential of admin" in controller_out, controller_out[-2000:]

        admin = login(tmp_path)
        assert admin["security.protocol"] == "SASL_SSL" and admin["sasl.mechanisms"] == "SCRAM-SHA-512"
        # the admin's credential came with the bootstrap metadata: kctl's own clients and the admin's log in
        ok(kctl(tmp_path, "topic", "create", TOPIC, "-p", "3", "-r", "1"))
        ok(kctl(tmp_path, "user", "create", APP))
        ok(kctl(tmp_path, "user", "create", NOBODY))
        for op in ("write", "read", "describe"):
            ok(kctl(tmp_path, "acl", "add", "--allow", f"User:{APP}", "--operation", op, "--topic", TOPIC))
        ok(kctl(tmp_path, "acl", "add", "--allow", f"User:{APP}", "--operation", "read", "--group", f"{APP}-",
                "--prefixed"))
        app, nobody = login(tmp_path, APP), login(tmp_path, NOBODY)
        assert produce(app, range(500)) == ""
        got, error = consume(app, 500)
        assert (sorted(got), error) == (list(range(500)), "")
        # the StandardAuthorizer refuses what no ACL allows; SCRAM refuses a wrong password; no PLAINTEXT
        assert produce(nobody, range(500, 510)) == "TOPIC_AUTHORIZATION_FAILED"
        assert refused(consume(nobody, 1))
        assert "Authentication failed" in admin_refusal({**app, "sasl.password": "not-its-password"})
        assert admin_refusal({"bootstrap.servers": app["bootstrap.servers"]}) != ""
        acls = json.loads(ok(kctl(tmp_path, "acl", "list", "-o", "json")))
        assert len(acls) == 4 and {a["principal"] for a in acls} == {f"User:{APP}"}, acls

        # the format at the first start, done again in the node beside its JVMs: its arguments name a file
        samples, out = format_argv(name)
        storage_tool = [line for line in samples.splitlines() if "kafka.tools.StorageTool" in line]
        assert storage_tool and all("@/run/kctl/secrets/kraft-format.args" in line for line in storage_tool)
        assert not [s for s in secrets_of(tmp_path, name) if s in samples + out]
        assert "Formatting" in out and "admin" in out.partition("=== checkpoint")[2]  # the credential's record
        assert_no_secret_outside_files(tmp_path, name, nodes=1)

        ok(kctl(tmp_path, "down"))  # containers removed, data kept
        ok(kctl(tmp_path, "up"))  # formatted already: no second format, the users and ACLs in the metadata log
        st = json.loads(ok(kctl(tmp_path, "status", "--wait", "30", "-o", "json")))
        assert st["health"] == "healthy" and st["metadata"] == "kraft", st["problems"]
        assert sorted(kcat_values(admin, TOPIC)) == list(range(500))  # kcat: an independent reader, the admin
        got, error = consume(app, 500)
        assert (sorted(got), error) == (list(range(500)), "")
        assert refused(consume(nobody, 1))
        assert_no_secret_outside_files(tmp_path, name, nodes=1)
    finally:
        kctl(tmp_path, "down", "--volumes")


def quorum_voters(name: str, i: int) -> dict[int, str]:
    """{voter id: directory id} as Kafka's own kafka-metadata-quorum.sh answers, run by hand in node ``i`` with the
    admin's controller login (its file in the node)."""
    import re

    p = subprocess.run(["docker", "exec", container(name, i), "sh", "-c",
                        "env KAFKA_HEAP_OPTS=-Xmx128m KAFKA_JMX_PORT= /opt/kafka/bin/kafka-metadata-quorum.sh"
                        f" --bootstrap-controller logger{i}:9095 --command-config"
                        " /run/kctl/secrets/controller-client.properties describe --status"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("CurrentVoters"))
    return {int(i): d for i, d in re.findall(r'"id": (\d+), "directoryId": "([^"]+)"', line)}


@pytest.mark.long
def test_a_secured_quorum_made_dynamic_takes_a_controller_and_lets_it_go(tmp_path: Path) -> None:
    """The secured profile's dynamic quorum (KIP-853) on Kafka 4.3: `kctl quorum make-dynamic`, a controller added by
    `kctl node add --role controller` (its certificate, keystore and logins made before its controller starts; its
    add-controller logged in over SASL_SSL) and removed by `kctl node remove --force`; a SCRAM user's records
    acknowledged before, between and after are all read back, by that user and by the admin's own reader; no
    password outside files."""
    name = init(tmp_path, nodes=1, kafka="4.3.1", ports_for=2)
    try:
        ok(kctl(tmp_path, "up"))
        st = json.loads(ok(kctl(tmp_path, "status", "--wait", "30", "-o", "json")))
        assert (st["health"], st["quorum"]) == ("healthy", "ok"), st["problems"]
        ok(kctl(tmp_path, "topic", "create", TOPIC, "-p", "2", "-r", "1"))
        ok(kctl(tmp_path, "user", "create", APP))
        for op in ("write", "read", "describe"):
            ok(kctl(tmp_path, "acl", "add", "--allow", f"User:{APP}", "--operation", op, "--topic", TOPIC))
        ok(kctl(tmp_path, "acl", "add", "--allow", f"User:{APP}", "--operation", "read", "--group", f"{APP}-",
                "--prefixed"))
        app = login(tmp_path, APP)
        assert produce(app, range(0, 300)) == ""

        p = kctl(tmp_path, "quorum", "make-dynamic", "--yes", timeout=900)
        said = ok(p) + p.stderr
        assert "kraft.version: 0 -> 1" in said, said[-3000:]
        q = json.loads(ok(kctl(tmp_path, "quorum", "-o", "json")))
        assert q["dynamic"] is True and q["kraft_version"] == 1 and q["problems"] == [], q
        assert produce(app, range(300, 600)) == ""

        p = kctl(tmp_path, "node", "add", "--role", "controller", timeout=900)
        said = ok(p) + p.stderr
        assert "secrets of the new node written" in said and "controller promoted to a voter" in said, said[-3000:]
        voters = quorum_voters(name, 1)
        meta = subprocess.run(["docker", "exec", container(name, 2), "cat",
                               "/var/opt/kctl/controller/metadata/meta.properties"], capture_output=True, text=True,
                              timeout=60).stdout
        assert sorted(voters) == [3001, 3002] and f"directory.id={voters[3002]}" in meta, (voters, meta)
        left = subprocess.run(["docker", "exec", container(name, 2), "ls", "-A", "/run/kctl/secrets"],
                              capture_output=True, text=True, timeout=60).stdout.split()
        assert "controller-client.properties" in left and not [f for f in left if f.startswith("add-controller.")]
        q = json.loads(ok(kctl(tmp_path, "quorum", "-o", "json")))
        assert q["problems"] == [] and {v["node"] for v in q["voters"]} == {"logger1", "logger2"}, q
        assert produce(app, range(600, 900)) == ""
        assert_no_secret_outside_files(tmp_path, name, nodes=2, joined=(2,))

        p = kctl(tmp_path, "node", "remove", "logger2", "--yes", "--force", timeout=900)
        said = ok(p) + p.stderr
        assert "controller removed from the quorum (remove-controller)" in said, said[-3000:]
        assert sorted(quorum_voters(name, 1)) == [3001]
        assert produce(app, range(900, 1000)) == ""
        st = json.loads(ok(kctl(tmp_path, "status", "--wait", "60", "-o", "json")))
        assert (st["health"], st["quorum"]) == ("healthy", "ok"), st["problems"]
        got, error = consume(app, 1000)
        assert (sorted(got), error) == (list(range(1000)), "")
        # an independent reader: the admin's plain consumer of the test's own, partition by partition to their end
        # (kcat cannot log in with SCRAM to Kafka 4: docs/security.md, "kcat and Kafka 4")
        assert sorted(read_values(login(tmp_path), TOPIC)) == list(range(1000))
        assert_no_secret_outside_files(tmp_path, name, nodes=1)
    finally:
        kctl(tmp_path, "down", "--volumes")


@pytest.mark.long
def test_three_secured_nodes_on_kafka_4_roll_under_a_scram_load(tmp_path: Path) -> None:
    name = init(tmp_path, nodes=3, kafka="4.3.1")
    try:
        ok(kctl(tmp_path, "up"))
        st = json.loads(ok(kctl(tmp_path, "status", "--wait", "60", "-o", "json")))
        assert (st["health"], st["metadata"]) == ("healthy", "kraft"), st["problems"]
        assert sorted(c["id"] for c in st["controllers"]) == [3001, 3002, 3003]
        ok(kctl(tmp_path, "topic", "create", TOPIC, "-p", "3", "-r", "3"))
        ok(kctl(tmp_path, "user", "create", APP))
        ok(kctl(tmp_path, "user", "create", NOBODY))
        for op in ("write", "read", "describe"):
            ok(kctl(tmp_path, "acl", "add", "--allow", f"User:{APP}", "--operation", op, "--topic", TOPIC))
        app = login(tmp_path, APP)
        load: Any
        with Load(app, TOPIC, max_records=100_000, max_seconds=900) as load:
            time.sleep(3)
            p = kctl(tmp_path, "restart", "--rolling", "--service", "node", "--yes", timeout=1200)
            assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
            time.sleep(2)
        assert load.failures() == [] and len(load.acked) > 500, load.errors[:5]
        assert sorted(load.acked - set(read_values(app, TOPIC))) == []
        assert produce(login(tmp_path, NOBODY), range(3)) == "TOPIC_AUTHORIZATION_FAILED"
        st = json.loads(ok(kctl(tmp_path, "status", "--wait", "60", "-o", "json")))
        assert st["health"] == "healthy", st["problems"]
        assert_no_secret_outside_files(tmp_path, name, nodes=3)
        out = subprocess.run(["docker", "exec", container(name, 1), "cat", "/var/log/kctl/controller/controller.out"],
                             capture_output=True, text=True, timeout=60).stdout
        assert "UserScramCredentialRecord(...)" in out, out[-2000:]  # Kafka 4.3's echo of the records, cut
        print(f"\nsecured KRaft roll on 4.3.1: {len(load.acked)} acknowledged, longest stall {load.stall:.1f} s")
        rotate_ca_under_load(tmp_path, name)
    finally:
        kctl(tmp_path, "down", "--volumes")


def rotate_ca_under_load(cwd: Path, name: str) -> None:
    """`kctl cert rotate-ca` on KRaft (controllers and brokers rolled at each step) under an acks=all load from an
    outside client that trusts what docs/security.md says to give it: the old ca.pem during the first step,
    trust.pem from then on. Every acknowledged record is read back by an independent reader (a plain consumer of
    the test's own, trusting trust.pem), no client is refused, and each node's listener then serves a certificate
    the new CA signed (Python's ssl and cryptography, not kctl)."""
    import shutil
    import socket
    import ssl

    from cryptography import x509

    from kctl import contract
    from kctl.security import store

    root = store.secrets_dir(cwd / ".kctl" / name)
    admin = login(cwd)
    old_ca = x509.load_pem_x509_certificate((root / contract.CA_FILE).read_bytes())
    figures = []
    for phase, steps in (("trust", ["trust"]), ("reissue+drop", ["reissue", "drop"])):
        topic = f"rotate-{phase.split('+')[0]}"
        ok(kctl(cwd, "topic", "create", topic, "-p", "3", "-r", "3"))
        given = cwd / f"given-{phase}.pem"  # what an outside client holds in this phase
        shutil.copy(root / (contract.CA_FILE if phase == "trust" else contract.TRUST_FILE), given)
        conf = {**admin, "ssl.ca.location": str(given)}
        with Load(conf, topic, max_records=100_000, max_seconds=1200) as load:
            time.sleep(2)
            for step in steps:
                p = kctl(cwd, "cert", "rotate-ca", "--yes", timeout=1500)
                assert p.returncode == 0 and f"{step} done" in p.stderr + p.stdout, (p.stdout + p.stderr)[-3000:]
            time.sleep(2)
        assert load.failures() == [] and len(load.acked) > 100, load.errors[:5]
        reader = {**admin, "ssl.ca.location": str(root / contract.TRUST_FILE)}
        lost = sorted(load.acked - set(read_values(reader, topic)))
        assert lost == [], f"{len(lost)} acknowledged records not read back: {lost[:20]}"
        figures.append(f"{phase}: {len(load.acked)} acknowledged, 0 lost, longest stall {load.stall:.1f} s")
    new_ca = x509.load_pem_x509_certificate((root / contract.CA_FILE).read_bytes())
    assert new_ca.subject != old_ca.subject
    st = json.loads(ok(kctl(cwd, "status", "--wait", "60", "-o", "json")))
    assert st["health"] == "healthy", st["problems"]
    for port in sorted({int(b.rsplit(":", 1)[1]) for b in admin["bootstrap.servers"].split(",")}):
        ctx = ssl.create_default_context(cafile=str(root / contract.TRUST_FILE))
        ctx.check_hostname = False
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10)) as sock:
            served = x509.load_der_x509_certificate(sock.getpeercert(binary_form=True) or b"")
        served.verify_directly_issued_by(new_ca)  # raises unless the new CA signed what the listener serves
    print("\nCA rotated on KRaft under load: " + "; ".join(figures))
