"""The dynamic controller quorum (KIP-853) on Kafka 4.3: `kctl quorum` says static or dynamic; a voter is added or
removed only once `kctl quorum make-dynamic` has raised kraft.version to 1 and rolled every node onto
controller.quorum.bootstrap.servers; `kctl node add --role controller` formats a controller to join, starts it as
an observer and promotes it (add-controller); `kctl node remove` of a controller's node removes the voter first
(remove-controller), refused below 3 voters without --force. `make test-long` runs the runbook "replace a failed
controller" (its metadata disk lost: the voter removed by its old directory id, the storage formatted again, the
controller added back) and a controller's add and removal, each under an acks=all load read back by kcat.

What kctl says is checked against the nodes: the files they run (docker exec cat), kraft.version and the voters
as Kafka's own tools answer inside a node, and the records against kcat, an independent reader.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.integration import runbook
from tests.integration.load import Load, kcat_values
from tests.integration.ports import away_from_defaults

pytestmark = pytest.mark.integration

RELEASE = "4.3.1"
TOOLS = "env KAFKA_HEAP_OPTS=-Xmx128m KAFKA_JMX_PORT= /opt/kafka/bin"
META = "/var/opt/kctl/controller/metadata"


def kctl(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, f"{' '.join(p.args[3:])}: {p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout + p.stderr


def refused(p: subprocess.CompletedProcess[str], *words: str) -> None:
    said = p.stdout + p.stderr
    assert p.returncode == 2 and "Traceback" not in said, said[-3000:]
    for w in words:
        assert w in said, said[-3000:]


def in_node(container: str, script: str, user: str | None = None) -> str:
    p = subprocess.run(["docker", "exec", *(["-u", user] if user else []), container, "sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def container(name: str, host: str) -> str:
    return f"kctl-{name}-{host}-1"


def kafka_voters(name: str, host: str) -> dict[int, str]:
    """{voter id: directory id} as kafka-metadata-quorum.sh, run by hand in ``host``, answers."""
    out = in_node(container(name, host), f"{TOOLS}/kafka-metadata-quorum.sh --bootstrap-controller {host}:9095"
                                         " describe --status")
    line = next(ln for ln in out.splitlines() if ln.startswith("CurrentVoters"))
    return {int(i): d for i, d in re.findall(r'"id": (\d+), "directoryId": "([^"]+)"', line)}


def kraft_version(name: str, host: str) -> int:
    out = in_node(container(name, host), f"{TOOLS}/kafka-features.sh --bootstrap-server {host}:9092 describe")
    m = re.search(r"Feature: kraft.version\s.*FinalizedVersionLevel: (\d+)", out)
    return int(m.group(1)) if m else 0


def make_cluster(tmp_path: Path, name: str, nodes: int, release: str = RELEASE) -> None:
    ok(kctl(tmp_path, "init", "--kraft", "--name", name))
    spec = tmp_path / "kctl.yaml"
    data = yaml.safe_load(spec.read_text())
    data["versions"]["kafka"] = release
    data["nodes"] = data["nodes"][:nodes]
    if nodes < 3:
        data["kafka"].update(default_replication_factor=nodes, offsets_topic_replication_factor=nodes,
                             transaction_state_log_replication_factor=nodes, min_insync_replicas=1)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    away_from_defaults(spec, nodes=nodes + 1)  # one more node joins below


# 4.1 is the first release make-dynamic takes (its kraft.version 1 upgrade of a running quorum): make test-long
# converts one live too.
@pytest.mark.parametrize("release", [RELEASE, pytest.param("4.1.1", marks=pytest.mark.long)])
def test_a_static_quorum_made_dynamic_takes_a_controller_and_lets_it_go(tmp_path: Path, release: str) -> None:
    name = f"kt-q-{uuid.uuid4().hex[:6]}"
    make_cluster(tmp_path, name, 1, release)
    try:
        ok(kctl(tmp_path, "up"))
        q = json.loads(kctl(tmp_path, "quorum", "-o", "json").stdout)
        assert q["dynamic"] is False and q["kraft_version"] == 0 and [v["id"] for v in q["voters"]] == [3001], q
        # a static quorum takes no voter: one message, nothing made
        refused(kctl(tmp_path, "node", "add", "--role", "controller"), "is static", "kctl quorum make-dynamic")
        assert "logger2" not in (tmp_path / "kctl.yaml").read_text()

        said = ok(kctl(tmp_path, "quorum", "make-dynamic", "--yes"))
        assert "kraft.version: 0 -> 1" in said, said[-2000:]
        assert kraft_version(name, "logger1") == 1
        conf = in_node(container(name, "logger1"), "cat /etc/kctl/controller.properties /etc/kctl/server.properties")
        assert "controller.quorum.voters" not in conf and conf.count("controller.quorum.bootstrap.servers=") == 2
        ok(kctl(tmp_path, "topic", "create", "orders", "-p", "2", "-r", "1"))
        lines = [f"r-{i}" for i in range(200)]
        ok(subprocess.run([sys.executable, "-m", "kctl", "produce", "orders"], cwd=tmp_path, input="\n".join(lines)
                          + "\n", capture_output=True, text=True, timeout=120))

        said = ok(kctl(tmp_path, "node", "add", "--role", "controller"))
        assert "controller promoted to a voter (add-controller)" in said, said[-3000:]
        voters = kafka_voters(name, "logger1")
        joined = in_node(container(name, "logger2"), f"cat {META}/meta.properties")
        assert sorted(voters) == [3001, 3002] and f"directory.id={voters[3002]}" in joined, (voters, joined)
        q = json.loads(kctl(tmp_path, "quorum", "-o", "json").stdout)
        assert q["dynamic"] and q["problems"] == [] and {v["node"] for v in q["voters"]} == {"logger1", "logger2"}

        # below 3 voters only with --force; the voter leaves before its node does
        refused(kctl(tmp_path, "node", "remove", "logger2", "--yes"), "leaves 1 voter(s)", "--force")
        said = ok(kctl(tmp_path, "node", "remove", "logger2", "--yes", "--force"))
        assert "controller removed from the quorum (remove-controller)" in said, said[-3000:]
        assert sorted(kafka_voters(name, "logger1")) == [3001]
        st = json.loads(kctl(tmp_path, "status", "-o", "json").stdout)
        assert sorted(kcat_lines(st["bootstrap_servers"], "orders")) == sorted(lines)
    finally:
        kctl(tmp_path, "down", "--volumes")


def kcat_lines(bootstrap: str, topic: str) -> list[str]:
    import shutil

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat
    p = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\n"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def kill_after(cwd: Path, args: list[str], line: str, timeout: float = 300) -> str:
    """Run kctl ``args`` and SIGKILL it as soon as it says ``line`` (on stderr, where kctl's progress goes)."""
    p = subprocess.Popen([sys.executable, "-m", "kctl", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    seen = []
    deadline = time.monotonic() + timeout
    assert p.stderr is not None
    for said in p.stderr:
        seen.append(said)
        if line in said or time.monotonic() > deadline:
            break
    p.kill()
    p.wait(30)
    assert any(line in s for s in seen), "".join(seen)[-3000:]
    return "".join(seen)


def warm(load: Load) -> Load:
    """The load acknowledged its first records: its stall from now on is the change's, not its producer's start
    (the idempotent producer id, a coordinator loading)."""
    deadline = time.monotonic() + 60
    while len(load.acked) < 50:
        assert time.monotonic() < deadline, load.errors[-3:]
        time.sleep(0.1)
    load.stall = 0.0
    return load


def measured(load: Load, bootstrap: str, topic: str) -> dict[str, object]:
    read = set(kcat_values(bootstrap, topic))
    return {"acked": len(load.acked), "read": len(read & load.acked), "lost": len(load.acked - read),
            "stall_s": round(load.stall, 2), "errors": load.failures()[:3], "refused": len(load.refused)}


@pytest.mark.long
def test_controllers_added_removed_and_a_failed_one_replaced_under_load_lose_nothing(tmp_path: Path) -> None:
    name = f"kt-qr-{uuid.uuid4().hex[:6]}"
    make_cluster(tmp_path, name, 3)
    figures: dict[str, dict[str, object]] = {}
    try:
        ok(kctl(tmp_path, "up"))
        bootstrap = json.loads(kctl(tmp_path, "status", "-o", "json").stdout)["bootstrap_servers"]
        for t in ("q-add", "q-remove", "q-replace"):
            ok(kctl(tmp_path, "topic", "create", t, "-p", "3", "-r", "3", "--config", "min.insync.replicas=2"))
        ok(kctl(tmp_path, "quorum", "make-dynamic", "--yes"))

        with Load(bootstrap, "q-add", max_seconds=600) as load:
            warm(load)
            said = ok(kctl(tmp_path, "node", "add", "--role", "controller"))
        figures["controller added"] = measured(load, bootstrap, "q-add")
        assert "add-controller" in said and sorted(kafka_voters(name, "logger2")) == [3001, 3002, 3003, 3004]

        with Load(bootstrap, "q-remove", max_seconds=600) as load:
            warm(load)
            said = ok(kctl(tmp_path, "node", "remove", "logger1", "--yes"))  # 4 -> 3 voters: no --force
        figures["controller removed"] = measured(load, bootstrap, "q-remove")
        assert sorted(kafka_voters(name, "logger2")) == [3002, 3003, 3004]

        # the runbook: logger3's metadata disk lost
        c3 = container(name, "logger3")
        old = kafka_voters(name, "logger2")[3003]
        with Load(bootstrap, "q-replace", max_seconds=600) as load:
            warm(load)
            in_node(c3, f"supervisorctl stop controller && rm -rf {META} && supervisorctl start controller",
                    user="root")
            deadline = time.monotonic() + 60
            while "UNFORMATTED" not in " ".join(json.loads(kctl(tmp_path, "status", "-o", "json").stdout)["problems"]):
                assert time.monotonic() < deadline, "logger3's controller never said UNFORMATTED"
                time.sleep(2)
            refused(kctl(tmp_path, "quorum", "add-controller", "logger3"), "not formatted")
            # the operator's steps as docs/runbooks/replace-failed-controller.md writes them
            ran = runbook.run(runbook.RUNBOOKS / "replace-failed-controller.md", tmp_path / "kctl.yaml",
                              state_dir=tmp_path / ".kctl" / name, metadata="kraft")
            assert any(old in r.output for r in ran), [r.output[-500:] for r in ran]  # removed by its old id
        figures["failed controller replaced"] = measured(load, bootstrap, "q-replace")
        voters = kafka_voters(name, "logger2")
        assert sorted(voters) == [3002, 3003, 3004] and voters[3003] != old, voters
        st = json.loads(ok(kctl(tmp_path, "status", "--wait", "60", "-o", "json")))
        assert st["health"] == "healthy", st["problems"]

        # kctl killed between the new controller's format and its promotion: one clear message, then resumed
        killed = kill_after(tmp_path, ["node", "add", "--role", "controller"], "formatted to join the quorum")
        assert "logger5" in (tmp_path / "kctl.yaml").read_text(), killed
        q = kctl(tmp_path, "quorum")
        assert q.returncode == 1 and "controller 3005 is in kctl.yaml but not a voter" in q.stdout, q.stdout[-2000:]
        assert "kctl quorum add-controller 5" in q.stdout
        refused(kctl(tmp_path, "node", "add", "--role", "controller"), "logger5 runs a controller",
                "kctl quorum add-controller logger5")
        said = ok(kctl(tmp_path, "quorum", "add-controller", "logger5"))
        assert "added" in said and sorted(kafka_voters(name, "logger2")) == [3002, 3003, 3004, 3005]
        print("QUORUM FIGURES " + json.dumps(figures))
        for what, f in figures.items():
            assert f["lost"] == 0 and not f["errors"] and int(str(f["acked"])) > 100, (what, f)
    finally:
        kctl(tmp_path, "down", "--volumes")
