"""engine hosts end to end: three Debian hosts booted with systemd as PID 1 and running sshd (tests/hosts/fleet.py
says which Docker settings that takes), reached only over ssh at their own addresses, as real hosts are.

kctl installs its bundles there over ssh and drives the units with systemctl; what is asserted is read on the
hosts themselves (over ssh, as an operator would look), and records are read back by a consumer of their own.
The cases that must change nothing run first, while the hosts are still bare.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from kctl.model.spec import load_cluster
from kctl.testing.cluster import with_quick_jit
from tests.integration.cli import follow_until

pytestmark = pytest.mark.integration

HOSTS = ("logger1", "logger2", "logger3")
INSTALLED = ("/opt/kctl", "/etc/kctl", "/var/log/kctl")


@pytest.fixture(scope="module")
def fleet() -> Iterator[Any]:
    import docker

    from tests.hosts.fleet import Fleet, cgroup_version

    if cgroup_version(docker.from_env()) == 2:
        pytest.skip("the test hosts' systemd settings are checked on cgroup v1 engines only (tests/hosts/fleet.py)")
    with Fleet([*HOSTS, "logger4"]) as f:  # logger4: a bare host for `kctl node add`
        yield f


def write_spec(path: Path, fleet: Any, *, addresses: dict[str, str] | None = None, key: Path | None = None,
               known_hosts: Path | None = None, trust: bool = True, **extra: Any) -> Path:
    addresses = addresses or {h.hostname: h.ip for h in fleet}
    spec = {"name": "hl", "engine": "hosts",
            # Throwaway hosts whose keys no one checked: trusted on first use, explicitly, into a file of the
            # test's own (never the user's ~/.ssh/known_hosts); every later command checks them strictly.
            "ssh": {"user": "ops", "key_file": str(key or fleet.key_path), "connect_timeout": 3,
                    "known_hosts_file": str(known_hosts or path.parent / "known_hosts"), "trust_on_first_use": trust},
            "nodes": [{"id": i, "hostname": h, "advertised_host": addresses[h]} for i, h in enumerate(HOSTS, 1)],
            **extra}
    path.write_text(yaml.safe_dump(with_quick_jit(spec), sort_keys=False))
    return path


@pytest.fixture(scope="module")
def spec_file(fleet: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_spec(tmp_path_factory.mktemp("hosts") / "kctl.yaml", fleet)


def kctl(spec_file: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], capture_output=True,
                          text=True, timeout=timeout)


def on(fleet: Any, host: str, command: str, timeout: float = 60) -> str:
    """A shell line on the host over ssh (as the login user; `sudo -n` where root is needed); its stdout."""
    done = fleet.ssh(host, command, timeout=timeout)
    assert done.returncode == 0, f"{host}: {command}: {done.stderr}"
    return str(done.stdout)


def installed(fleet: Any, host: str) -> list[str]:
    """What kctl's bundle leaves on a host: paths, units, the service user."""
    out = fleet.ssh(host, "ls -d /opt/kctl /etc/kctl /var/log/kctl /etc/systemd/system/kctl-*.service 2>/dev/null;"
                          " getent passwd logger | cut -d: -f1; true").stdout
    return sorted(out.split())


def as_root(script: str) -> str:
    """A shell line run as root on the host, globs and all (the login user cannot list the 0700 directories)."""
    import shlex

    return f"sudo -n sh -c {shlex.quote(script)}"


def jvm_pid(fleet: Any, host: str, cls: str) -> str:
    # "[Q]uorumPeerMain": a pattern that does not match the shell running pgrep itself
    return on(fleet, host, f"pgrep -f '[{cls[0]}]{cls[1:]}' || true").strip()


def broker_story(fleet: Any) -> str:
    """What systemd, the brokers and their controller said: for a test whose cluster did not heal."""
    parts = [on(fleet, "logger1", "sudo -n journalctl -u kctl-kafka --no-pager -n 40")]
    for h in HOSTS:
        for name, grep in (("server.log", "WARN|ERROR|FATAL|xpire|ession|egister|NodeExists|Shutting down"),
                           ("controller.log", ".")):
            parts.append(f"--- {h} {name} ---")
            parts.append(on(fleet, h, as_root(f"grep -E '{grep}' /var/log/kctl/kafka/{name} | tail -n 60; true")))
    return "\n".join(parts)


def wait_healthy(spec_file: Path, seconds: float) -> subprocess.CompletedProcess[str]:
    return kctl(spec_file, "status", "--wait", str(seconds), "-o", "json", timeout=seconds + 60)


# ----- bad input: one clear message, nothing changed on any host --------------------------------------


def test_an_unreachable_host_a_wrong_key_or_no_systemd_stop_up_before_any_host_changes(
        fleet: Any, spec_file: Path) -> None:
    d = spec_file.parent
    plain = fleet.start_without_systemd("plain1")
    wrong = d / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True, timeout=30)
    ips = {h: fleet[h].ip for h in HOSTS}
    subnet = ips["logger1"].rsplit(".", 1)[0]
    cases = {
        "unreachable": (write_spec(d / "unreachable.yaml", fleet, addresses={**ips, "logger3": f"{subnet}.250"}),
                        "logger3 (" + subnet + ".250:22): the host did not answer (timed out)"),
        "wrong key": (write_spec(d / "wrong-key.yaml", fleet, key=wrong),
                      "the host refused the login (wrong user or key)"),
        "no systemd": (write_spec(d / "no-systemd.yaml", fleet, addresses={**ips, "logger3": plain.ip}),
                       "the host does not run systemd as PID 1"),
        # OpenSSH's default: a host key no known-hosts file holds is refused unless trust on first use is asked for
        "unknown host key": (write_spec(d / "strict.yaml", fleet, known_hosts=d / "empty_known_hosts", trust=False),
                             "the host's key is in no known-hosts file (StrictHostKeyChecking)"),
    }
    for what, (path, message) in cases.items():
        done = kctl(path, "up", timeout=120)
        if what == "unreachable":  # the first `up`: the hosts that answer are trusted, each said with its key
            for h in ("logger1", "logger2"):
                assert re.search(rf"{h} \({re.escape(ips[h])}\): host key \S+ SHA256:\S+ trusted on first use",
                                 done.stderr), done.stderr
        assert done.returncode != 0, (what, done.stdout, done.stderr)
        assert "cannot deploy to the hosts; nothing was changed on any host" in done.stderr, (what, done.stderr)
        assert message in done.stderr, (what, done.stderr)
        assert "Traceback" not in done.stderr
        for h in HOSTS:
            assert installed(fleet, h) == [], (what, h)
    assert fleet.ssh("plain1", "ls -d /opt/kctl /etc/kctl 2>/dev/null; true").stdout == ""


# ----- the cluster ------------------------------------------------------------------------------------


def test_up_installs_the_bundles_over_ssh_and_reports_healthy(fleet: Any, spec_file: Path) -> None:
    done = kctl(spec_file, "up")
    assert done.returncode == 0, done.stderr
    assert "hosts: 3 reachable over ssh, with sudo, systemd and Java 17+" in done.stderr
    assert re.search(r"hl: healthy in [\d.]+s", done.stderr), done.stderr
    st = json.loads(kctl(spec_file, "status", "-o", "json").stdout)
    assert st["health"] == "healthy" and st["brokers_registered"] == 3, st["problems"]
    for i, h in enumerate(HOSTS, 1):
        assert installed(fleet, h) == sorted([*INSTALLED, "/etc/systemd/system/kctl-kafka.service",
                                              "/etc/systemd/system/kctl-zookeeper.service", "logger"])
        units = on(fleet, h, "systemctl is-enabled kctl-zookeeper kctl-kafka; systemctl is-active kctl-zookeeper"
                             " kctl-kafka").split()
        assert units == ["enabled", "enabled", "active", "active"], (h, units)
        # the JVMs run as the service user; the data belongs to it
        owners = on(fleet, h, "ps -o user= -p $(pgrep -d, -f '[Q]uorumPeerMain|[k]afka.Kafka'); sudo -n stat -c %U"
                              " /var/opt/kctl/kafka/data /var/opt/kctl/zookeeper/snapshots/myid").split()
        assert set(owners) == {"logger"}, (h, owners)
        assert on(fleet, h, "sudo -n cat /var/opt/kctl/zookeeper/snapshots/myid").strip() == str(i)
        # the broker advertises the host's own address; no bundle is left behind in /var/tmp (it holds secrets)
        advertised = on(fleet, h, "grep ^advertised.listeners /etc/kctl/server.properties")
        assert f"EXTERNAL://{fleet[h].ip}:19092" in advertised
        assert fleet.ssh(h, "sudo -n test -e /var/tmp/kctl-bundle-hl").returncode == 1
        # the exporters of the monitoring profile run from the bundle's jars, at the host's address
        import urllib.request

        for port, metric in ((7071, "kafka_server_"), (7000, "znode_count")):
            with urllib.request.urlopen(f"http://{fleet[h].ip}:{port}/metrics", timeout=10) as resp:  # noqa: S310
                assert metric in resp.read().decode(), (h, port)


def test_topics_produce_and_consume(spec_file: Path) -> None:
    assert kctl(spec_file, "topic", "create", "greetings", "--partitions", "3",
                "--replication-factor", "3").returncode == 0
    sent = [f"hello {i}" for i in range(20)]
    done = subprocess.run([sys.executable, "-m", "kctl", "produce", "greetings", "-f", str(spec_file)],
                          input="\n".join(sent) + "\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = kctl(spec_file, "consume", "greetings", "--from-beginning", "--max", "20", "--timeout", "30")
    assert got.returncode == 0, got.stderr
    assert sorted(got.stdout.split("\n")[:-1]) == sorted(sent)


def test_installing_again_changes_nothing(fleet: Any, spec_file: Path) -> None:
    before = {h: (jvm_pid(fleet, h, "QuorumPeerMain"), jvm_pid(fleet, h, "kafka.Kafka")) for h in HOSTS}
    again = kctl(spec_file, "up")
    assert again.returncode == 0, again.stderr
    assert all(f"{h}: noop (up to date)" in again.stderr for h in HOSTS), again.stderr
    # the operator's way: the bundle copied by hand and its install.sh run again
    made = kctl(spec_file, "bundle", "--out", str(spec_file.parent / "bundle"))
    assert made.returncode == 0, made.stderr
    tar = subprocess.run(["tar", "-C", str(spec_file.parent / "bundle" / "logger2"), "-cf", "-", "."],
                         capture_output=True, check=True, timeout=60).stdout
    copy = subprocess.run([*fleet.ssh_argv("logger2"), "rm -rf b && mkdir b && tar -C b -xf - &&"
                           " sudo -n ./b/install.sh; rc=$?; rm -rf b; exit $rc"], input=tar, capture_output=True,
                          timeout=300)
    out = copy.stdout.decode()
    assert copy.returncode == 0, copy.stderr
    assert out.strip().splitlines()[-1] == "kctl-install: 0 changed", out
    assert "changed:" not in out and "restart:" not in out
    assert {h: (jvm_pid(fleet, h, "QuorumPeerMain"), jvm_pid(fleet, h, "kafka.Kafka")) for h in HOSTS} == before


def host_state(fleet: Any, host: str) -> str:
    """What a refused command must leave as it was on a host, read there: kctl's files (names, sizes, times),
    the data directories' markers, myid and meta.properties (the data itself changes as the cluster runs), the
    JVMs' process ids, and what is in /var/tmp."""
    return on(fleet, host, as_root(
        "find /etc/kctl /opt/kctl/bin /opt/kctl/bundle.env /etc/systemd/system/kctl-zookeeper.service"
        " /etc/systemd/system/kctl-kafka.service -printf '%p %s %T@\\n' 2>/dev/null | sort;"
        " find /var/opt/kctl \\( -name .kctl-identity -o -name myid -o -name meta.properties \\)"
        " -printf '%p %s %T@\\n' 2>/dev/null | sort; pgrep -f '[Q]uorumPeerMain|[k]afka.Kafka' | sort;"
        " ls -a /var/tmp; true"))


def test_a_host_of_another_cluster_or_node_or_with_foreign_data_is_refused_with_nothing_written(
        fleet: Any, spec_file: Path) -> None:
    d = spec_file.parent
    ips = {h: fleet[h].ip for h in HOSTS}
    before = {h: host_state(fleet, h) for h in HOSTS}
    assert "/etc/kctl/identity" in before["logger1"] and "/var/opt/kctl/.kctl-identity" in before["logger1"]
    ident = on(fleet, "logger2", "cat /etc/kctl/identity")
    assert "cluster=hl\n" in ident and "node=logger2\nid=2\n" in ident
    assert on(fleet, "logger2", "sudo -n cat /var/opt/kctl/zookeeper/snapshots/.kctl-identity") == ident
    spare = fleet["logger4"].ip  # bare: nothing of kctl on it
    # another cluster (its own directory, so its own state dir) naming this cluster's hosts
    other_dir = d / "other"
    other_dir.mkdir(exist_ok=True)
    other = write_spec(other_dir / "kctl.yaml", fleet, known_hosts=d / "known_hosts",
                       addresses={"logger1": spare, "logger2": ips["logger2"], "logger3": ips["logger3"]})
    other.write_text(other.read_text().replace("name: hl", "name: hx"))
    # this cluster with two nodes' addresses swapped
    swapped = write_spec(d / "swapped.yaml", fleet, addresses={**ips, "logger1": ips["logger2"],
                                                               "logger2": ips["logger1"]})
    cases = [
        (other, ["up"], "refusing to install",
         [f"logger2 ({ips['logger2']}): /etc/kctl/identity says it is node logger2 (id 2) of cluster 'hl'",
          "another cluster than this state dir's (no uid yet"]),
        (other, ["down", "--volumes"], "refusing to uninstall and delete the data",
         [f"logger3 ({ips['logger3']}): /etc/kctl/identity says it is node logger3 (id 3) of cluster 'hl'"]),
        (other, ["down"], "refusing to uninstall", ["of cluster 'hl'"]),
        (swapped, ["up"], "refusing to install",
         [f"logger1 ({ips['logger2']}): /etc/kctl/identity says it is node logger2 (id 2) of cluster 'hl'",
          "another node of this cluster, not logger1 (id 1)",
          "/var/opt/kctl/kafka/data holds the data of node logger2 (id 2)"]),
        (swapped, ["down", "--volumes"], "refusing to uninstall and delete the data",
         ["another node of this cluster, not logger2 (id 2)"]),
    ]
    for path, args, head, lines in cases:
        done = kctl(path, *args, timeout=120)
        assert done.returncode != 0, (args, done.stderr)
        assert f"{head}: the hosts are not all this cluster's nodes; nothing was changed on any host" in done.stderr
        for line in lines:
            assert line in done.stderr, (args, line, done.stderr)
        assert "hint: check nodes[].advertised_host" in done.stderr and "Traceback" not in done.stderr
    assert installed(fleet, "logger4") == []
    # by hand: another node's bundle run on a host is refused by install.sh itself, before it writes anything
    assert kctl(spec_file, "bundle", "--out", str(d / "bundle")).returncode == 0
    tar = subprocess.run(["tar", "-C", str(d / "bundle" / "logger3"), "-cf", "-", "."], capture_output=True,
                         check=True, timeout=60).stdout
    by_hand = subprocess.run([*fleet.ssh_argv("logger1"), "rm -rf b && mkdir b && tar -C b -xf - &&"
                              " sudo -n ./b/install.sh; rc=$?; rm -rf b; exit $rc"], input=tar, capture_output=True,
                             timeout=300)
    assert by_hand.returncode == 1, by_hand.stdout
    assert b"install.sh: this host is cluster=hl" in by_hand.stderr and b"refusing to install" in by_hand.stderr
    assert {h: host_state(fleet, h) for h in HOSTS} == before  # nothing written, deleted, stopped or started

    # a bare host with someone's ZooKeeper data where kctl's would go, and a host reached by two addresses
    on(fleet, "logger4", as_root("mkdir -p /var/opt/kctl/zookeeper/snapshots/version-2 && echo 9 >"
                                 " /var/opt/kctl/zookeeper/snapshots/myid"))
    import docker

    client = docker.from_env()
    net = client.networks.create(f"kctl-hosts-second-{uuid.uuid4().hex[:8]}", labels=dict(fleet.labels))
    try:
        net.connect(fleet.container("logger4"))
        fleet.container("logger4").reload()
        second = fleet.container("logger4").attrs["NetworkSettings"]["Networks"][net.name]["IPAddress"]
        twice_dir = d / "twice"
        twice_dir.mkdir(exist_ok=True)
        twice = write_spec(twice_dir / "kctl.yaml", fleet, known_hosts=d / "known_hosts",
                           addresses={"logger1": spare, "logger2": second, "logger3": ips["logger3"]})
        twice.write_text(twice.read_text().replace("name: hl", "name: hy"))
        done = kctl(twice, "up", timeout=120)
        assert done.returncode != 0, done.stderr
        assert (f"logger1 ({spare}): /var/opt/kctl/zookeeper/snapshots holds data that kctl did not install there"
                in done.stderr), done.stderr
        assert f"logger1 ({spare}) and logger2 ({second}) are one machine (/etc/machine-id " in done.stderr
        done = kctl(twice, "down", "--volumes", timeout=120)
        assert done.returncode != 0 and "holds data that kctl did not install there" in done.stderr, done.stderr
        # kctl node add onto it: refused before kctl.yaml or any host changes
        text = spec_file.read_text()
        done = kctl(spec_file, "node", "add", "--address", spare, "--role", "observer", timeout=300)
        assert done.returncode != 0 and "holds data that kctl did not install there" in done.stderr, done.stderr
        assert spec_file.read_text() == text
        assert installed(fleet, "logger4") == []
        assert on(fleet, "logger4", "sudo -n cat /var/opt/kctl/zookeeper/snapshots/myid").strip() == "9"
    finally:
        net.disconnect(fleet.container("logger4"), force=True)
        net.remove()
        client.close()
        on(fleet, "logger4", "sudo -n rm -rf /var/opt/kctl")
    assert {h: host_state(fleet, h) for h in HOSTS} == before


# long: make test keeps the roll of `kctl apply` (gated, every broker) and the leader-kill drill under load.
@pytest.mark.long
def test_rolling_restart_under_load_loses_nothing(fleet: Any, spec_file: Path) -> None:
    from tests.integration.test_restart import Load, read_all

    if kctl(spec_file, "status").returncode != 0:  # make test-long runs this without the tests before it
        assert kctl(spec_file, "up").returncode == 0
    spec, _ = load_cluster(spec_file)
    cluster = SimpleNamespace(spec=spec)
    topic = f"roll-{uuid.uuid4().hex[:8]}"
    assert kctl(spec_file, "topic", "create", topic, "--partitions", "6", "--replication-factor", "3",
                "--config", "min.insync.replicas=2").returncode == 0
    before = {h: jvm_pid(fleet, h, "kafka.Kafka") for h in HOSTS}
    with Load(cluster, topic, max_seconds=240) as load:  # type: ignore[arg-type]
        time.sleep(2)
        roll = kctl(spec_file, "restart", "--rolling", "--yes", "-o", "json", timeout=600)
        time.sleep(1)
    assert roll.returncode == 0, roll.stderr
    result = json.loads(roll.stdout)
    assert len(result["steps"]) == 6
    after = {h: jvm_pid(fleet, h, "kafka.Kafka") for h in HOSTS}
    assert all(after[h] and after[h] != before[h] for h in HOSTS), (before, after)
    assert load.errors == [], load.errors[:5]
    assert load.acked, "nothing was acknowledged"
    read = read_all(cluster, topic)  # type: ignore[arg-type]
    lost = load.acked - read
    assert not lost, f"{len(lost)} acknowledged records missing, e.g. {sorted(lost)[:5]}"
    print(f"\nhosts roll: {len(load.acked)} acknowledged, all read back; longest produce latency"
          f" {load.max_latency * 1000:.0f} ms")


def test_apply_installs_the_new_files_and_rolls_only_the_brokers(fleet: Any, spec_file: Path) -> None:
    zk_before = {h: jvm_pid(fleet, h, "QuorumPeerMain") for h in HOSTS}
    kafka_before = {h: jvm_pid(fleet, h, "kafka.Kafka") for h in HOSTS}
    data = yaml.safe_load(spec_file.read_text())
    kafka_conf = data.get("kafka", {})
    # read at start: a key of server.properties, and a JVM flag (the units' environment, which each unit reads at
    # its own start: the brokers restart, their ZooKeepers do not)
    data["kafka"] = {**kafka_conf, "overrides": {"queued.max.requests": 600},
                     "jvm_options": [*kafka_conf.get("jvm_options", []), "-XX:+UseStringDeduplication"]}
    spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    done = kctl(spec_file, "apply", "--yes", timeout=600)
    assert done.returncode == 0, done.stderr
    assert "restarted logger" in done.stderr and "zookeeper" not in done.stderr.splitlines()[-1], done.stderr
    for h in HOSTS:
        assert "queued.max.requests=600" in on(fleet, h, "cat /etc/kctl/server.properties")
        pid = jvm_pid(fleet, h, "kafka.Kafka")
        assert pid not in ("", kafka_before[h])
        assert "-XX:+UseStringDeduplication" in on(fleet, h, f"tr '\\0' ' ' < /proc/{pid}/cmdline")
    assert {h: jvm_pid(fleet, h, "QuorumPeerMain") for h in HOSTS} == zk_before  # ZooKeeper untouched
    diff = kctl(spec_file, "diff")
    assert diff.returncode == 0 and "no drift" in diff.stderr + diff.stdout, diff.stdout + diff.stderr


def down_intervals(fleet: Any, since: float) -> list[tuple[float, float, str]]:
    """(stopping, started again, host) of every broker restart since ``since``, from each host's journal."""
    out = []
    for h in HOSTS:
        lines = on(fleet, h, f"sudo -n journalctl -u kctl-kafka --since @{int(since)} -o short-unix --no-pager")
        stop = None
        for line in lines.splitlines():
            stamp = line.split(" ", 1)[0]
            if "Stopping kctl-kafka.service" in line:
                stop = float(stamp)
            elif "Started kctl-kafka.service" in line and stop is not None:
                out.append((stop, float(stamp), h))
                stop = None
    return sorted(out)


# long: make test keeps the planner and the install that restarts no running service
# (tests/unit/test_hosts_rolling_up.py).
@pytest.mark.long
def test_up_after_an_edit_restarts_the_brokers_one_at_a_time_through_the_roll(fleet: Any, spec_file: Path) -> None:
    if kctl(spec_file, "status").returncode != 0:  # make test-long runs this without the tests before it
        assert kctl(spec_file, "up").returncode == 0
    zk_before = {h: jvm_pid(fleet, h, "QuorumPeerMain") for h in HOSTS}
    kafka_before = {h: jvm_pid(fleet, h, "kafka.Kafka") for h in HOSTS}
    data = yaml.safe_load(spec_file.read_text())
    data["kafka"] = {**data.get("kafka", {}), "overrides": {**data.get("kafka", {}).get("overrides", {}),
                                                           "queued.max.requests": 700}}
    spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    since = time.time() - 1
    done = kctl(spec_file, "up", timeout=900)
    assert done.returncode == 0, done.stderr
    assert all(f"{h}: recreate (config changed" in done.stderr for h in HOSTS), done.stderr
    said = " ".join(done.stderr.split())  # a long line may be wrapped
    assert "files changed under running services: logger1 kafka, logger2 kafka, logger3 kafka" in said, said
    assert re.search(r"restarted one at a time through the roll's gates: logger\d/kafka, logger\d/kafka,"
                     r" logger\d/kafka", said), said
    for h in HOSTS:
        assert "queued.max.requests=700" in on(fleet, h, "cat /etc/kctl/server.properties")
        assert jvm_pid(fleet, h, "kafka.Kafka") not in ("", kafka_before[h])
        assert fleet.ssh(h, "test -e /run/kctl/restart-pending/kafka").returncode == 1  # cleared by the start
    assert {h: jvm_pid(fleet, h, "QuorumPeerMain") for h in HOSTS} == zk_before
    # at every moment at most one broker down: each one's stop and start again, read in the hosts' journals, come
    # one after the other (the roll's gates in between), never overlapping
    downs = down_intervals(fleet, since)
    assert sorted(h for _a, _b, h in downs) == sorted(HOSTS), downs
    for (_a1, end, h1), (start, _b2, h2) in zip(downs, downs[1:], strict=False):
        assert end < start, f"{h1} was still down when {h2} stopped: {downs}"
    again = kctl(spec_file, "up")
    assert again.returncode == 0 and "restarted one at a time" not in again.stderr, again.stderr
    assert all(f"{h}: noop (up to date)" in again.stderr for h in HOSTS), again.stderr


def install_by_hand(fleet: Any, host: str, bundle: Path) -> subprocess.CompletedProcess[bytes]:
    tar = subprocess.run(["tar", "-C", str(bundle), "-cf", "-", "."], capture_output=True, check=True,
                         timeout=120).stdout
    return subprocess.run([*fleet.ssh_argv(host), "rm -rf b && mkdir b && tar -C b -xf - && sudo -n ./b/install.sh;"
                           " rc=$?; rm -rf b; exit $rc"], input=tar, capture_output=True, timeout=300)


# long: make test keeps the bundle's units naming their distribution's own directory (tests/unit/test_bundle.py).
@pytest.mark.long
def test_a_failed_unpack_leaves_the_running_distribution_and_a_new_one_goes_in_beside_it(
        fleet: Any, spec_file: Path) -> None:
    import shutil

    if kctl(spec_file, "status").returncode != 0:  # make test-long runs this without the tests before it
        assert kctl(spec_file, "up").returncode == 0
    d = spec_file.parent
    assert kctl(spec_file, "bundle", "--out", str(d / "bundle")).returncode == 0
    link = on(fleet, "logger1", "readlink /opt/kctl/kafka").strip()
    assert re.fullmatch(r"dists/\w+/kafka_2\.13-[\d.]+", link), link
    pid = jvm_pid(fleet, "logger1", "kafka.Kafka")
    assert f"/opt/kctl/{link}/libs/" in on(fleet, "logger1", f"tr '\\0' ' ' < /proc/{pid}/cmdline")

    def bundle_with(identity: str, truncate: bool) -> Path:
        work = d / f"bundle-{identity}"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(d / "bundle" / "logger1", work)
        env = work / "bundle.env"
        env.write_text(re.sub(r'KCTL_DIST_IDENTITY="\w+"', f'KCTL_DIST_IDENTITY="{identity}"', env.read_text()))
        if truncate:  # a copy that broke off: tar fails part way through
            with open(work / "kafka.tar", "r+b") as f:
                f.truncate(8 * 1024 * 1024)
        return work

    broken = install_by_hand(fleet, "logger1", bundle_with("broken0", truncate=True))
    assert broken.returncode == 1, broken.stdout
    assert b"install.sh: cannot unpack" in broken.stderr and b"left as it was" in broken.stderr, broken.stderr
    assert on(fleet, "logger1", "readlink /opt/kctl/kafka").strip() == link
    assert on(fleet, "logger1", "ls -a /opt/kctl/dists").split() == [".", "..", link.split("/")[1]]  # no leftover
    assert on(fleet, "logger1", "sudo -n test -r /opt/kctl/kafka/libs/kafka_2.13-3.9.1.jar && echo ok").strip() == "ok"
    assert jvm_pid(fleet, "logger1", "kafka.Kafka") == pid

    fresh = install_by_hand(fleet, "logger1", bundle_with("fresh0", truncate=False))
    out = fresh.stdout.decode()
    assert fresh.returncode == 0, fresh.stderr
    assert "changed: /opt/kctl/dists/fresh0" in out and "changed: /opt/kctl/kafka -> dists/fresh0/" in out, out
    assert "restart: kafka" in out
    # the broker runs on, from the directory it started from, which stays
    assert jvm_pid(fleet, "logger1", "kafka.Kafka") == pid
    assert on(fleet, "logger1", "ls /opt/kctl/dists").split() == sorted(["fresh0", link.split("/")[1]])
    # kctl's own bundle back, by hand too; then `kctl up` rolls what the installs left pending on logger1
    back = install_by_hand(fleet, "logger1", d / "bundle" / "logger1")
    assert back.returncode == 0, back.stderr
    assert on(fleet, "logger1", "readlink /opt/kctl/kafka").strip() == link
    done = kctl(spec_file, "up", timeout=900)
    assert done.returncode == 0, done.stderr
    assert "restarted one at a time through the roll's gates: logger1/zookeeper, logger1/kafka" in done.stderr
    new_pid = jvm_pid(fleet, "logger1", "kafka.Kafka")
    assert new_pid not in ("", pid)
    assert f"/opt/kctl/{link}/libs/" in on(fleet, "logger1", f"tr '\\0' ' ' < /proc/{new_pid}/cmdline")


def test_node_add_and_remove_on_a_host_of_its_own(fleet: Any, spec_file: Path) -> None:
    done = kctl(spec_file, "node", "add", "--address", fleet["logger4"].ip, "--role", "observer", timeout=600)
    assert done.returncode == 0, done.stderr
    assert "hl: node 4 (logger4, observer) added" in done.stderr
    assert fleet["logger4"].ip in spec_file.read_text()
    assert on(fleet, "logger4", "systemctl is-active kctl-zookeeper kctl-kafka").split() == ["active", "active"]
    st = json.loads(kctl(spec_file, "status", "-o", "json").stdout)
    assert st["health"] == "healthy" and st["registered_ids"] == [1, 2, 3, 4], st["problems"]
    # the other hosts' files list it for their next restart
    assert "logger4:2181" in on(fleet, "logger1", "grep ^zookeeper.connect /etc/kctl/server.properties")
    done = kctl(spec_file, "node", "remove", "logger4", "--yes", timeout=600)
    assert done.returncode == 0, done.stderr
    assert installed(fleet, "logger4") == []
    assert fleet.ssh("logger4", "test -e /var/opt/kctl").returncode == 1  # its data went with it
    assert "logger4" not in on(fleet, "logger1", "grep ^zookeeper.connect /etc/kctl/server.properties")
    st = json.loads(kctl(spec_file, "status", "-o", "json").stdout)
    assert st["health"] == "healthy" and st["registered_ids"] == [1, 2, 3], st["problems"]


def test_process_drills_run_on_hosts_and_host_faults_are_refused(fleet: Any, spec_file: Path) -> None:
    refused = kctl(spec_file, "drill", "run", "broker-partition", timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "broker-partition does not run on engine hosts" in refused.stderr
    assert "nothing was injected" in refused.stderr
    done = kctl(spec_file, "drill", "run", "leader-kill", "--duration", "15s", "--rate", "200", "--bounces", "1",
                "-o", "json", timeout=600)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["holds"] is True, verdict
    assert any("came back by itself" in e["event"] for e in verdict["events"]), verdict["events"]
    assert verdict["lost"] == 0 and verdict["acked"] > 0
    assert json.loads(kctl(spec_file, "status", "-o", "json").stdout)["health"] == "healthy"


def test_logs_of_a_stopped_service_and_up_starts_it_again(fleet: Any, spec_file: Path) -> None:
    on(fleet, "logger3", "sudo -n systemctl stop kctl-kafka")
    st = kctl(spec_file, "status", "-o", "json")
    assert st.returncode == 1 and "logger3: kafka STOPPED" in json.loads(st.stdout)["problems"]
    logs = kctl(spec_file, "logs", "logger3", "--service", "kafka", "--tail", "20")
    assert logs.returncode == 0, logs.stderr
    assert "shut down completed (kafka.server.KafkaServer)" in logs.stdout, logs.stdout
    journal = kctl(spec_file, "logs", "logger3", "--service", "supervisor", "--tail", "50")
    assert "Stopped kctl-kafka.service" in journal.stdout, journal.stdout
    # -F follows the log over ssh (tail -F on the host) until Ctrl-C, which ends kctl and its ssh at once
    code, lines, left = follow_until(spec_file, "logs", "logger3", "--service", "kafka", "-F", "-n", "20",
                                     until="shut down completed")
    assert code == 0 and left == [], (code, lines[-5:], left)
    up = kctl(spec_file, "up")
    assert up.returncode == 0, up.stderr
    assert "logger3: kafka is not running on its host; starting it" in up.stderr
    assert json.loads(kctl(spec_file, "status", "-o", "json").stdout)["health"] == "healthy"


@pytest.mark.long  # see below; make test's short forms: test_hosts_fleet.py (a killed service comes back) and the
# crash loop after this one (systemd gives up, `kctl up` starts it)
def test_a_killed_broker_comes_back_through_systemd(fleet: Any, spec_file: Path) -> None:
    # In two of three clean-clone make tests of 2026-12-05 (three workers, a loaded machine), the JVM systemd
    # started after the kill -9 was itself killed by a SIGKILL that neither this test nor systemd sent, about 23 s
    # later (the killed JVM's ZooKeeper session expiring meanwhile), and the third start had not registered within
    # 240 s; alone (this module by itself) it passes. Until that second kill is explained, make test-long runs it.
    old = jvm_pid(fleet, "logger1", "kafka.Kafka")
    on(fleet, "logger1", f"sudo -n kill -9 {old}")
    # systemd starts it again; its start waits out the killed JVM's ZooKeeper registration (up to the session's
    # 18 s). One make test on a loaded machine saw a second SIGKILL of the restarted JVM (origin not found) and a
    # third start that outlived 120 s: the wait allows for one more round before the story is printed.
    done = wait_healthy(spec_file, 240)
    if done.returncode != 0:
        pytest.fail(f"{done.stdout}\n{broker_story(fleet)}")
    new = jvm_pid(fleet, "logger1", "kafka.Kafka")
    assert new and new != old
    assert "Scheduled restart job" in on(fleet, "logger1", "sudo -n journalctl -u kctl-kafka --no-pager -n 50")


def test_a_broker_systemd_gave_up_on_is_failed_and_up_starts_it(fleet: Any, spec_file: Path) -> None:
    # a crash loop: the unit's main process killed as soon as each restart makes one, until systemd's start limit
    # (StartLimitBurst) marks the unit failed; bounded at 30 rounds of a second
    unit = "kctl-kafka.service"
    try:
        on(fleet, "logger1", as_root(
            f"for i in $(seq 30); do systemctl is-failed --quiet {unit} && break;"
            f" pid=$(systemctl show -p MainPID --value {unit}); [ \"$pid\" -gt 0 ] && kill -9 \"$pid\"; sleep 1;"
            f" done; systemctl is-failed {unit}"), timeout=90)
        st = json.loads(kctl(spec_file, "status", "-o", "json").stdout)
        assert ("logger1: kafka FAILED: its supervisor gave up restarting it (see `kctl logs logger1 --service"
                " kafka`; `kctl up` starts it again)") in st["problems"], st["problems"]
        up = kctl(spec_file, "up")
        assert up.returncode == 0, up.stderr
        assert "logger1: kafka is not running on its host; starting it" in up.stderr
        assert json.loads(kctl(spec_file, "status", "-o", "json").stdout)["health"] == "healthy"
    finally:  # the module's later tests need the broker: started again whatever failed above
        on(fleet, "logger1", as_root(f"systemctl is-active --quiet {unit} || {{ systemctl reset-failed {unit};"
                                     f" systemctl start {unit}; }}"), timeout=120)


def test_a_restarted_host_brings_its_services_back_and_the_cluster_heals(fleet: Any, spec_file: Path) -> None:
    old = jvm_pid(fleet, "logger2", "kafka.Kafka")
    ip = fleet["logger2"].ip
    fleet.restart("logger2")  # docker restart: systemd halts and boots again
    assert fleet["logger2"].ip == ip
    done = wait_healthy(spec_file, 180)
    assert done.returncode == 0, done.stdout
    assert on(fleet, "logger2", "systemctl is-active kctl-zookeeper kctl-kafka").split() == ["active", "active"]
    assert jvm_pid(fleet, "logger2", "kafka.Kafka") not in ("", old)


def test_down_uninstalls_everything_but_the_data_then_volumes_removes_the_data(fleet: Any, spec_file: Path) -> None:
    done = kctl(spec_file, "down")
    assert done.returncode == 0, done.stderr
    assert "hl: uninstalled from 3 host(s); data kept in /var/opt/kctl on each host" in done.stderr
    for h in HOSTS:
        assert installed(fleet, h) == [], h
        assert on(fleet, h, "sudo -n ls /var/opt/kctl").split() == ["kafka", "zookeeper"]
        assert fleet.ssh(h, "pgrep -f '[Q]uorumPeerMain|[k]afka.Kafka'").returncode == 1  # no JVM left
    done = kctl(spec_file, "down", "--volumes")
    assert done.returncode == 0, done.stderr
    for h in HOSTS:
        assert fleet.ssh(h, "test -e /var/opt/kctl").returncode == 1, h


# ----- a cluster made on KRaft, on the same hosts once the ZooKeeper one is gone ----------------------------


def quorum_on(fleet: Any, host: str, bootstrap: str) -> dict[str, Any]:
    """`kafka-metadata-quorum.sh describe --status` run on the host itself (as root, as an operator would), read
    here without kctl's parser: the leader, the voters' ids and the cluster id."""
    out = on(fleet, host, as_root(
        f"env KAFKA_HEAP_OPTS=-Xmx128m LOG_DIR=/tmp /opt/kctl/kafka/bin/kafka-metadata-quorum.sh"
        f" --bootstrap-controller {bootstrap} describe --status 2>/dev/null"), timeout=120)
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {"leader": int(fields["LeaderId"]), "cluster_id": fields["ClusterId"].strip(),
            "voters": sorted(int(i) for i in re.findall(r'"id":\s*(\d+)', fields["CurrentVoters"])),
            "lag": int(fields["MaxFollowerLag"])}


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """``values`` produced with acks=all by a producer of the test's own (confluent-kafka directly, no kctl)."""
    from confluent_kafka import Producer

    failed: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and not failed, failed


def read_back(bootstrap: str, topic: str, count: int) -> list[str]:
    """Every record of ``topic`` from the start, by a consumer of the test's own (a new group), until ``count`` came
    or 60 s passed, and for a second more (so that a record too many shows)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    read: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                read.append(msg.value().decode())
            elif len(read) >= count:
                break
    finally:
        consumer.close()
    return read


def kraft_cluster(fleet: Any, spec_file: Path, hosts: tuple[str, ...]) -> Path:
    """kctl.yaml of a cluster made on KRaft on ``hosts``, in a directory (a state dir) of its own, once the
    ZooKeeper cluster's data is gone from every host (whichever tests ran before)."""
    gone = kctl(spec_file, "down", "--volumes")  # run alone (-k), no `up` trusted the hosts' keys: they are bare
    assert gone.returncode == 0 or all(installed(fleet, h) == [] for h in HOSTS), gone.stderr
    d = spec_file.parent / f"kraft{len(hosts)}"
    d.mkdir(exist_ok=True)
    nodes = [{"id": i, "hostname": h, "advertised_host": fleet[h].ip} for i, h in enumerate(hosts, 1)]
    alone = {"default_replication_factor": 1, "offsets_topic_replication_factor": 1,
             "transaction_state_log_replication_factor": 1, "min_insync_replicas": 1} if len(hosts) == 1 else {}
    path = write_spec(d / "kctl.yaml", fleet, known_hosts=spec_file.parent / "known_hosts", metadata="kraft",
                      nodes=nodes, kafka=alone)
    path.write_text(path.read_text().replace("name: hl", "name: hk"))
    return path


def controller_story(fleet: Any, hosts: tuple[str, ...]) -> str:
    """The units' journals and the controllers' logs: for a test whose KRaft cluster did not come up."""
    return "\n".join(f"--- {h} ---\n" + on(fleet, h, as_root(
        "journalctl -u kctl-controller -u kctl-kafka --no-pager -n 40; tail -n 40"
        " /var/log/kctl/controller/server.log; true")) for h in hosts)


def test_a_cluster_made_on_kraft_runs_a_controller_unit_beside_each_broker_and_formats_once(
        fleet: Any, spec_file: Path) -> None:
    # a ZooKeeper cluster on hosts is not migrated: refused before anything is asked, with where to go instead
    refused = kctl(spec_file, "migrate", "kraft", "next", "--yes", timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "a migration to KRaft on engine hosts is not built yet" in refused.stderr, refused.stderr
    assert "metadata: kraft" in refused.stderr and "Traceback" not in refused.stderr
    path = kraft_cluster(fleet, spec_file, HOSTS)
    voters = [3001, 3002, 3003]
    bootstrap = ",".join(f"{h}:9095" for h in HOSTS)
    try:
        done = kctl(path, "up", timeout=600)
        if done.returncode != 0:
            pytest.fail(f"{done.stderr}\n{controller_story(fleet, HOSTS)}")
        record = json.loads((path.parent / ".kctl" / "hk" / "kraft.json").read_text())
        assert f"metadata: kraft: cluster id {record['cluster_id']}" in done.stderr
        for i, h in enumerate(HOSTS, 1):
            # what each host runs: a controller unit and a broker unit, enabled and active, no ZooKeeper at all
            assert installed(fleet, h) == sorted([*INSTALLED, "/etc/systemd/system/kctl-controller.service",
                                                  "/etc/systemd/system/kctl-kafka.service", "logger"]), h
            units = on(fleet, h, "systemctl is-enabled kctl-controller kctl-kafka; systemctl is-active"
                                 " kctl-controller kctl-kafka").split()
            assert units == ["enabled", "enabled", "active", "active"], (h, units)
            assert jvm_pid(fleet, h, "QuorumPeerMain") == ""
            # formatted once with the cluster's id; the first start took the permits away
            ids = on(fleet, h, as_root("cat /var/opt/kctl/controller/metadata/meta.properties"
                                       " /var/opt/kctl/kafka/data/meta.properties; ls -a /var/opt/kctl"))
            assert ids.count(f"cluster.id={record['cluster_id']}") == 2, (h, ids)
            assert f"node.id={3000 + i}" in ids and f"node.id={i}" in ids and ".kctl-format-" not in ids, (h, ids)
        q = quorum_on(fleet, "logger2", bootstrap)
        assert (q["voters"], q["cluster_id"]) == (voters, record["cluster_id"]) and q["leader"] in voters, q
        st = json.loads(kctl(path, "status", "--wait", "30", "-o", "json", timeout=120).stdout)
        assert (st["health"], st["metadata"], st["zookeeper"]) == ("healthy", "kraft", []), st["problems"]
        assert sorted(c["id"] for c in st["controllers"]) == voters and st["controller"] in voters
        assert kctl(path, "topic", "create", "greetings", "-p", "3", "-r", "3").returncode == 0
        sent = [f"greeting {i}" for i in range(60)]
        produce(st["bootstrap_servers"], "greetings", sent)
        assert sorted(read_back(st["bootstrap_servers"], "greetings", len(sent))) == sorted(sent)

        # a second `up` changes nothing; `kctl restart` rolls one controller through the quorum's gate
        pids = {h: jvm_pid(fleet, h, "controller.properties") for h in HOSTS}
        again = kctl(path, "up", timeout=300)
        assert again.returncode == 0 and all(f"{h}: noop (up to date)" in again.stderr for h in HOSTS), again.stderr
        rolled = kctl(path, "restart", "logger2", "--service", "controller", "--yes", timeout=600)
        assert rolled.returncode == 0, rolled.stderr
        assert "the KRaft controller quorum whole again" in rolled.stderr, rolled.stderr
        after = {h: jvm_pid(fleet, h, "controller.properties") for h in HOSTS}
        assert after["logger2"] not in ("", pids["logger2"]) and [after[h] for h in ("logger1", "logger3")] == [
            pids[h] for h in ("logger1", "logger3")], (pids, after)
        logs = kctl(path, "logs", "logger2", "--service", "controller", "--tail", "400")
        assert logs.returncode == 0 and "nodeId=3002" in logs.stdout, logs.stderr

        # a controller whose metadata disk came back empty is never formatted again by itself: refused
        # (UNFORMATTED) until the operator permits it, then it copies the metadata back from the others
        on(fleet, "logger3", as_root("systemctl stop kctl-controller && rm -rf /var/opt/kctl/controller/metadata"
                                     " && systemctl start kctl-controller"))
        said = ""
        for _ in range(30):
            st = json.loads(kctl(path, "status", "-o", "json", timeout=120).stdout)
            said = " ".join(st["problems"])
            if "logger3: controller UNFORMATTED" in said:
                break
            time.sleep(1)
        assert "logger3: controller UNFORMATTED" in said and "kctl node format-storage logger3" in said, said
        assert fleet.ssh("logger3", "sudo -n test -e /var/opt/kctl/controller/metadata/meta.properties"
                         ).returncode == 1
        assert "REFUSED to format" in on(fleet, "logger3", "sudo -n journalctl -u kctl-controller --no-pager -n 20")
        fixed = kctl(path, "node", "format-storage", "logger3", "--service", "controller", "--yes", timeout=300)
        assert fixed.returncode == 0, fixed.stderr
        assert f"cluster.id={record['cluster_id']}" in on(
            fleet, "logger3", "sudo -n cat /var/opt/kctl/controller/metadata/meta.properties")
        healthy = wait_healthy(path, 120)
        assert healthy.returncode == 0, healthy.stdout
        q = quorum_on(fleet, "logger1", bootstrap)
        assert q["voters"] == voters and q["leader"] in voters, q
        more = [f"greeting {i}" for i in range(60, 70)]
        produce(st["bootstrap_servers"], "greetings", more)
        # the records from before the controller's disk was lost are all there, with the new ones, once each
        assert sorted(read_back(st["bootstrap_servers"], "greetings", 70)) == sorted(sent + more)
    finally:
        down = kctl(path, "down", "--volumes", timeout=300)
    assert down.returncode == 0, down.stderr
    for h in HOSTS:
        assert installed(fleet, h) == [] and fleet.ssh(h, "test -e /var/opt/kctl").returncode == 1, h


# long: make test keeps a KRaft cluster's up, a controller's roll and its storage refused and formatted on request
# (above); this adds a node's roll and a `kctl down` and `kctl up` on the kept data.
@pytest.mark.long
def test_a_kraft_cluster_on_hosts_rolls_a_node_and_comes_back_on_its_kept_data_unformatted_again(
        fleet: Any, spec_file: Path) -> None:
    path = kraft_cluster(fleet, spec_file, HOSTS)
    try:
        done = kctl(path, "up", timeout=600)
        if done.returncode != 0:
            pytest.fail(f"{done.stderr}\n{controller_story(fleet, HOSTS)}")
        bootstrap = json.loads(wait_healthy(path, 60).stdout)["bootstrap_servers"]
        assert kctl(path, "topic", "create", "kept", "-p", "3", "-r", "3").returncode == 0
        sent = [f"kept {i}" for i in range(100)]
        produce(bootstrap, "kept", sent)
        # a node's roll: its broker down through its gates, its controller, then both back; the others untouched
        pids = {h: (jvm_pid(fleet, h, "controller.properties"), jvm_pid(fleet, h, "server.properties"))
                for h in HOSTS}
        rolled = kctl(path, "restart", "logger1", "--service", "node", "--yes", timeout=600)
        assert rolled.returncode == 0, rolled.stderr
        now = {h: (jvm_pid(fleet, h, "controller.properties"), jvm_pid(fleet, h, "server.properties"))
               for h in HOSTS}
        assert "" not in now["logger1"] and not set(now["logger1"]) & set(pids["logger1"]), (pids, now)
        assert [now[h] for h in ("logger2", "logger3")] == [pids[h] for h in ("logger2", "logger3")]
        # down keeps the data; up installs again on hosts that are no longer new: nothing is formatted again
        # (meta.properties holds each directory's random id: a format would change it)
        meta = ("sudo -n md5sum /var/opt/kctl/controller/metadata/meta.properties"
                " /var/opt/kctl/kafka/data/meta.properties")
        before = {h: on(fleet, h, meta) for h in HOSTS}
        assert kctl(path, "down", timeout=600).returncode == 0
        since = on(fleet, "logger1", "date '+%Y-%m-%d %H:%M:%S'").strip()
        again = kctl(path, "up", timeout=600)
        if again.returncode != 0:
            pytest.fail(f"{again.stderr}\n{controller_story(fleet, HOSTS)}")
        for h in HOSTS:
            assert on(fleet, h, meta) == before[h], h
            journal = on(fleet, h, f"sudo -n journalctl -u kctl-controller -u kctl-kafka --no-pager --since '{since}'")
            assert "formatting" not in journal.lower() and "REFUSED" not in journal, (h, journal)
            assert ".kctl-format-" not in on(fleet, h, "sudo -n ls -a /var/opt/kctl"), h
        assert sorted(read_back(bootstrap, "kept", len(sent))) == sorted(sent)
    finally:
        down = kctl(path, "down", "--volumes", timeout=300)
    assert down.returncode == 0, down.stderr


# long: make test keeps the secured bundle's files and modes (tests/unit/test_bundle.py).
@pytest.mark.long
def test_the_secured_profile_on_hosts_keeps_every_secret_in_files_only_its_user_reads(
        fleet: Any, spec_file: Path) -> None:
    assert kctl(spec_file, "down", "--volumes").returncode == 0  # bare hosts, whichever tests ran before
    secured = write_spec(spec_file.parent / "secured.yaml", fleet, security={"enabled": True})
    try:
        done = kctl(secured, "up", timeout=600)
        assert done.returncode == 0, done.stderr
        assert "root znode writable by the brokers only" in done.stderr
        # TLS with hostname verification against each host's address, SASL/SCRAM as the admin user
        assert kctl(secured, "topic", "create", "sealed", "--partitions", "1", "--replication-factor", "3"
                    ).returncode == 0
        sent = subprocess.run([sys.executable, "-m", "kctl", "produce", "sealed", "-f", str(secured)], input="x\n",
                              capture_output=True, text=True, timeout=120)
        assert sent.returncode == 0, sent.stderr
        got = kctl(secured, "consume", "sealed", "--from-beginning", "--max", "1", "--timeout", "30")
        assert got.stdout.split() == ["x"], got.stderr
        passwords = list(json.loads((secured.parent / ".kctl" / "hl" / "secrets" / "passwords.json").read_text())
                         .values())
        assert len(passwords) >= 5
        for h in HOSTS:
            listing = on(fleet, h, as_root("stat -c '%a %U %n' /etc/kctl/secrets /etc/kctl/secrets/*"
                                           " /run/kctl/secrets /run/kctl/secrets/*")).splitlines()
            assert listing[0] == "700 logger /etc/kctl/secrets", listing
            assert all(line.startswith(("400 logger", "700 logger")) for line in listing), listing
            # where a secret must never be: process arguments and environments, the units and their environment
            # file, the journal, the logs, any file others can read. The passwords go in on stdin (never in the
            # check's own arguments, which `ps` would show).
            check = as_root(
                "{ ps -eo args; for p in $(pgrep -f '[k]afka.Kafka|[Q]uorumPeerMain'); do tr '\\0' '\\n'"
                " < /proc/$p/environ; done; cat /etc/kctl/kctl.env /etc/systemd/system/kctl-*.service;"
                " journalctl -u kctl-kafka -u kctl-zookeeper --no-pager; cat /var/log/kctl/*/*.log"
                " /var/log/kctl/*/*.out; find /etc/kctl /opt/kctl -path /etc/kctl/secrets -prune -o -type f"
                " -perm -o=r -print0 | xargs -0 cat; } > /root/seen 2>/dev/null; wc -c < /root/seen;"
                " while read -r pw; do grep -qaF -- \"$pw\" /root/seen && echo \"LEAK ${pw%${pw#????}}...\"; done;"
                " rm -f /root/seen")
            done = fleet.ssh(h, check, input="\n".join(passwords) + "\n", timeout=120)
            assert done.returncode == 0, done.stderr
            size, *leaked = done.stdout.split("\n")
            leaked = [line for line in leaked if line]
            assert int(size) > 100_000, size  # the check read something
            assert not leaked, (h, leaked)
    finally:
        kctl(secured, "down", "--volumes", timeout=300)
    for h in HOSTS:
        assert installed(fleet, h) == [], h


# long (issue #47): the dynamic controller quorum on hosts; make test keeps it on engines compose and swarm
# (test_kraft_quorum.py, test_swarm.py), whose code it shares but for the service user and the permits' install.
@pytest.mark.long
def test_a_kraft_quorum_on_hosts_made_dynamic_takes_a_controller_on_a_new_host_and_lets_it_go(
        fleet: Any, spec_file: Path) -> None:
    path = kraft_cluster(fleet, spec_file, ("logger1",))
    data = yaml.safe_load(path.read_text())
    data["versions"] = {"kafka": "4.3.1"}  # kraft.version 1 from Kafka 4.1 on
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        done = kctl(path, "up", timeout=600)
        if done.returncode != 0:
            pytest.fail(f"{done.stderr}\n{controller_story(fleet, ('logger1',))}")
        assert quorum_on(fleet, "logger1", "logger1:9095")["voters"] == [3001]
        refused = kctl(path, "node", "add", "--address", fleet["logger2"].ip, "--role", "controller")
        assert refused.returncode == 2 and "is static" in refused.stderr, refused.stderr
        assert "logger2" not in path.read_text() and installed(fleet, "logger2") == []

        made = kctl(path, "quorum", "make-dynamic", "--yes", timeout=900)
        assert made.returncode == 0 and "kraft.version: 0 -> 1" in made.stderr, made.stderr[-3000:]
        conf = on(fleet, "logger1", as_root("cat /etc/kctl/controller.properties /etc/kctl/server.properties"))
        assert "controller.quorum.voters" not in conf and conf.count("controller.quorum.bootstrap.servers=") == 2
        st = json.loads(wait_healthy(path, 60).stdout)
        assert kctl(path, "topic", "create", "orders", "-p", "2", "-r", "1").returncode == 0
        sent = [f"order {i}" for i in range(100)]
        produce(st["bootstrap_servers"], "orders", sent)

        # the journal from here on: an earlier test in this session may have run a controller on logger2
        since = on(fleet, "logger2", "date '+%Y-%m-%d %H:%M:%S'").strip()
        added = kctl(path, "node", "add", "--address", fleet["logger2"].ip, "--role", "controller", timeout=900)
        assert added.returncode == 0, added.stderr[-3000:] + controller_story(fleet, ("logger1", "logger2"))
        assert "controller promoted to a voter (add-controller)" in added.stderr, added.stderr[-3000:]
        q = quorum_on(fleet, "logger1", "logger1:9095,logger2:9095")
        assert q["voters"] == [3001, 3002] and q["lag"] == 0, q
        # formatted by kctl to join, as the service user; its unit, started without the permit, never formatted
        # it as a static quorum's (which Kafka refuses on a dynamic quorum's files)
        meta = on(fleet, "logger2", as_root("stat -c %U /var/opt/kctl/controller/metadata/meta.properties;"
                                            " cat /var/opt/kctl/controller/metadata/meta.properties"))
        assert meta.startswith("logger\n") and "node.id=3002" in meta, meta
        journal = on(fleet, "logger2", f"sudo -n journalctl -u kctl-controller --no-pager --since '{since}'")
        assert "kctl: starting the KRaft controller on logger2" in journal, journal[-2000:]  # its start is in it
        assert "must specify one of" not in journal and "formatting" not in journal, journal[-2000:]

        refused = kctl(path, "node", "remove", "logger2", "--yes")
        assert refused.returncode == 2 and "leaves 1 voter(s)" in refused.stderr, refused.stderr
        removed = kctl(path, "node", "remove", "logger2", "--yes", "--force", timeout=900)
        assert removed.returncode == 0, removed.stderr[-3000:]
        assert "controller removed from the quorum (remove-controller)" in removed.stderr
        assert quorum_on(fleet, "logger1", "logger1:9095")["voters"] == [3001]
        assert installed(fleet, "logger2") == [] and fleet.ssh("logger2", "test -e /var/opt/kctl").returncode == 1
        st = json.loads(wait_healthy(path, 60).stdout)
        assert (st["health"], st["quorum"]) == ("healthy", "ok"), st["problems"]
        assert sorted(read_back(st["bootstrap_servers"], "orders", len(sent))) == sorted(sent)
    finally:
        down = kctl(path, "down", "--volumes", timeout=300)
    assert down.returncode == 0, down.stderr
    for h in ("logger1", "logger2"):
        assert installed(fleet, h) == [], h
