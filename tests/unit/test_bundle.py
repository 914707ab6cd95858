"""engine hosts in the spec, and `kctl bundle`'s files (kctl/runtime/engine/bundle.py): pure, no host touched."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from kctl import contract
from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec, check_rules
from kctl.runtime.engine import bundle as b
from tests.unit import systemd_units


def hosts_spec(**extra: object) -> ClusterSpec:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    return ClusterSpec.model_validate({"name": "hl", "engine": "hosts", "ssh": {"user": "ops"}, "nodes": nodes,
                                       **extra})


def dist(tmp_path: Path) -> b.DistArchive:
    tar = tmp_path / "d.tar"
    tar.write_bytes(b"tar")
    return b.DistArchive(path=tar, name="kafka_2.13-3.9.1", identity="abc123")


def text(f: b.BundleFile) -> str:
    return f.data.decode()


# ----- the spec ----------------------------------------------------------------------------------------


def test_hosts_needs_each_nodes_address_once() -> None:
    spec = ClusterSpec.model_validate({"engine": "hosts"})
    errors, _ = check_rules(spec)
    assert len(errors) == 3 and all("advertised_host: engine hosts needs each host's address" in e for e in errors)
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": "10.9.0.1"} for i in (1, 2, 3)]
    errors, _ = check_rules(ClusterSpec.model_validate({"engine": "hosts", "nodes": nodes}))
    assert errors == ["nodes.1.advertised_host: 10.9.0.1 is also nodes.0's; engine hosts runs one node per host",
                      "nodes.2.advertised_host: 10.9.0.1 is also nodes.0's; engine hosts runs one node per host"]


def test_hosts_refuses_the_split_topology() -> None:
    errors, _ = check_rules(hosts_spec(topology="split"))
    assert any(e.startswith("topology: engine hosts runs each node's ZooKeeper and Kafka") for e in errors)


def test_on_hosts_every_node_listens_on_the_same_ports_at_its_own_address() -> None:
    spec = hosts_spec()
    assert check_rules(spec) == ([], [])
    assert spec.bootstrap_servers == "10.9.0.1:19092,10.9.0.2:19092,10.9.0.3:19092"
    assert {spec.zk_host_port(n) for n in spec.nodes} == {2181}
    assert {spec.kafka_metrics_host_port(n) for n in spec.nodes} == {spec.monitoring.kafka_exporter_port}
    assert [u for _n, _s, u in spec.metrics_endpoints()][:2] == ["http://10.9.0.1:7000/metrics",
                                                                 "http://10.9.0.1:7071/metrics"]
    # compose keeps one port per node on 127.0.0.1
    assert ClusterSpec().bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"


def test_a_published_port_on_hosts_is_a_warning() -> None:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    nodes[0]["zookeeper_port"] = 12181
    spec = ClusterSpec.model_validate({"engine": "hosts", "nodes": nodes})
    _, warnings = check_rules(spec)
    assert warnings == ["nodes.0.zookeeper_port: engine hosts publishes nothing; the service listens on its own"
                        " port on the host"]


# ----- the bundle's files -----------------------------------------------------------------------------


def test_bundle_is_for_engine_hosts_only(tmp_path: Path) -> None:
    with pytest.raises(KctlError) as exc:
        b.bundle_files(ClusterSpec(), dist(tmp_path), {})
    assert "bundles are for engine hosts" in exc.value.message and "engine: hosts" in (exc.value.hint or "")


def test_each_node_gets_its_conf_units_wrappers_and_scripts(tmp_path: Path) -> None:
    files = b.bundle_files(hosts_spec(), dist(tmp_path), {})
    assert sorted(files) == ["logger1", "logger2", "logger3"]
    one = files["logger2"]
    assert {"install.sh", "uninstall.sh", "bundle.env", "conf/zoo.cfg", "conf/myid", "conf/server.properties",
            "conf/kctl.env", "conf/README", "units/kctl-zookeeper.service", "units/kctl-kafka.service",
            "bin/zookeeper-start", "bin/kafka-start", "bin/jvm-common.sh", "bin/kctl-prepare"} <= set(one)
    assert text(one["conf/myid"]).strip() == "2"
    props = text(one["conf/server.properties"])
    assert "advertised.listeners=INTERNAL://logger2:9092,EXTERNAL://10.9.0.2:19092" in props
    assert "broker.id=2" in props
    assert {p: f.mode for p, f in one.items() if p.endswith((".sh", "-start", "kctl-prepare"))} == {
        "install.sh": 0o755, "uninstall.sh": 0o755, "bin/jvm-common.sh": 0o755, "bin/zookeeper-start": 0o755,
        "bin/kafka-start": 0o755, "bin/kctl-prepare": 0o755}
    env = text(one["bundle.env"])
    assert 'KCTL_BUNDLE_SERVICES="zookeeper kafka"' in env and 'KCTL_DIST="kafka_2.13-3.9.1"' in env
    assert 'KCTL_DIST_IDENTITY="abc123"' in env and 'KCTL_SERVICE_USER="logger"' in env


def test_the_units_say_what_an_operator_expects(tmp_path: Path) -> None:
    one = b.bundle_files(hosts_spec(), dist(tmp_path), {})["logger1"]
    kafka = text(one["units/kctl-kafka.service"])
    zk = text(one["units/kctl-zookeeper.service"])
    for unit in (kafka, zk):
        for line in ("User=logger", "Group=logger", "LimitNOFILE=100000", "Restart=on-failure", "RestartSec=2",
                     "StartLimitBurst=5", "StartLimitIntervalSec=120", "SuccessExitStatus=143",
                     f"EnvironmentFile={contract.HOST_ENV_FILE}", "WantedBy=multi-user.target",
                     # the distribution's own directory (install.sh puts a new one beside it): a running JVM
                     # keeps its jars while /opt/kctl/kafka moves on to the next
                     "Environment=KCTL_SUPERVISOR=systemd KAFKA_HOME=/opt/kctl/dists/abc123/kafka_2.13-3.9.1"):
            assert line in unit.splitlines(), line
    assert "After=network-online.target kctl-zookeeper.service" in kafka
    assert "Wants=kctl-zookeeper.service" in kafka
    assert "TimeoutStopSec=255" in kafka and "ExecStart=/opt/kctl/bin/kafka-start" in kafka
    assert "ExecStartPre=+/opt/kctl/bin/kctl-prepare kafka" in kafka
    assert "ExecStart=/opt/kctl/bin/zookeeper-start" in zk


HARDENING = ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
             "PrivateMounts=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectKernelLogs=yes",
             "ProtectControlGroups=yes", "ProtectClock=yes", "ProtectHostname=yes", "ProtectProc=invisible",
             "RestrictSUIDSGID=yes", "LockPersonality=yes", "RestrictRealtime=yes", "RestrictNamespaces=yes",
             "RemoveIPC=yes", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
             "SystemCallArchitectures=native", "SystemCallFilter=@system-service", "SystemCallFilter=~@privileged",
             "SystemCallErrorNumber=EPERM", "CapabilityBoundingSet=", "AmbientCapabilities=", "UMask=0027")


def test_the_units_are_hardened_and_the_jvm_writes_only_its_data_and_logs(tmp_path: Path) -> None:
    spec = hosts_spec(kafka={"log_dirs": ["/data/disk1/kafka", "/data/disk2/kafka"]},
                      zookeeper={"data_dir": "/srv/zookeeper"})
    one = b.bundle_files(spec, dist(tmp_path), {})["logger1"]
    units = {s: text(one[f"units/kctl-{s}.service"]).splitlines() for s in ("kafka", "zookeeper")}
    for service, lines in units.items():
        service_part = lines[lines.index("[Service]"):lines.index("[Install]")]
        for line in HARDENING:
            assert line in service_part, (service, line)
        # the JIT writes and runs machine code: this one would keep the JVM from starting
        assert not [x for x in lines if x.startswith("MemoryDenyWriteExecute")], service
    assert "ReadWritePaths=/data/disk1/kafka /data/disk2/kafka /var/log/kctl /var/opt/kctl" in units["kafka"]
    assert "ReadWritePaths=/srv/zookeeper /var/log/kctl /var/opt/kctl" in units["zookeeper"]
    default = b.bundle_files(hosts_spec(), dist(tmp_path), {})["logger1"]  # the defaults lie under /var/opt/kctl
    assert "ReadWritePaths=/var/log/kctl /var/opt/kctl" in text(default["units/kctl-kafka.service"]).splitlines()


@pytest.mark.parametrize(("overrides", "seconds"), [
    ({}, 3 * (30 + 30 + 5) + 60),  # Kafka's defaults: 255 s
    ({"controlled.shutdown.max.retries": "5", "request.timeout.ms": "10000"}, 5 * (30 + 10 + 5) + 60),
    ({"controller.socket.timeout.ms": "60000", "controlled.shutdown.retry.backoff.ms": "1500"},
     -(-3 * (60000 + 30000 + 1500) // 1000) + 60),
    ({"controlled.shutdown.enable": "false"}, 60),
])
def test_the_brokers_stop_timeout_outlasts_its_controlled_shutdown(tmp_path: Path, overrides: dict[str, str],
                                                                   seconds: int) -> None:
    spec = hosts_spec(kafka={"overrides": overrides})
    one = b.bundle_files(spec, dist(tmp_path), {})["logger1"]
    assert f"TimeoutStopSec={seconds}" in text(one["units/kctl-kafka.service"]).splitlines()
    assert b.stop_seconds(spec, spec.nodes[0], "kafka") == seconds
    assert "TimeoutStopSec=30" in text(one["units/kctl-zookeeper.service"]).splitlines()


def test_kctl_waits_for_a_brokers_stop_longer_than_systemd_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.runtime.engine import hosts

    waited: list[float] = []
    monkeypatch.setattr(hosts.HostsEngine, "supervise",
                        lambda self, spec, host, action, service, *, timeout, **_k: waited.append(timeout) or "")
    spec = hosts_spec(kafka={"overrides": {"controlled.shutdown.max.retries": "6"}})
    hosts.HostsEngine().stop_service(spec, "logger1", "kafka")
    hosts.HostsEngine().stop_service(spec, "logger1", "zookeeper")
    assert waited[0] > b.stop_seconds(spec, spec.nodes[0], "kafka") == 6 * 65 + 60
    assert waited[1] > 30


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_security_rates_the_units_ok(tmp_path: Path) -> None:
    """`systemd-analyze security`'s exposure (0 safe .. 10 unsafe): 9.2 UNSAFE before the hardening, 1.4 OK with
    it (docs/bare-metal.md); anything above 2.0 means a directive was lost."""
    import re

    one = b.bundle_files(hosts_spec(), dist(tmp_path), {})["logger1"]
    for service in ("kafka", "zookeeper"):
        unit = tmp_path / f"kctl-{service}.service"
        unit.write_bytes(one[f"units/kctl-{service}.service"].data)
        proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True,
                              text=True, timeout=60)
        m = re.search(r"Overall exposure level for kctl-\w+\.service: (\d+\.\d)", proc.stdout)
        assert m, proc.stdout + proc.stderr
        assert float(m.group(1)) <= 2.0, proc.stdout


def test_a_zookeeper_only_node_has_no_broker_unit(tmp_path: Path) -> None:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    nodes.append({"id": 4, "hostname": "logger4", "advertised_host": "10.9.0.4", "broker": False})
    files = b.bundle_files(ClusterSpec.model_validate({"engine": "hosts", "nodes": nodes}), dist(tmp_path), {})
    four = files["logger4"]
    assert "units/kctl-kafka.service" not in four and "conf/server.properties" not in four
    assert "units/kctl-zookeeper.service" in four
    assert 'KCTL_BUNDLE_SERVICES="zookeeper"' in text(four["bundle.env"])


def test_secrets_are_0400_files_and_never_in_the_environment_or_units(tmp_path: Path) -> None:
    spec = hosts_spec(security={"enabled": True})
    secrets = {h: {"kafka.jaas": b'password="s3cret-pw"', "ca.pem": b"PEM"} for h in ("logger1", "logger2", "logger3")}
    one = b.bundle_files(spec, dist(tmp_path), secrets)["logger1"]
    assert one["secrets/kafka.jaas"].mode == 0o400 and one["secrets/ca.pem"].mode == 0o400
    for path, f in one.items():
        if not path.startswith("secrets/"):
            assert b"s3cret-pw" not in f.data, path
    env = text(one["conf/kctl.env"])
    assert f"{contract.SECRETS_DIR}/" in env  # the JAAS file's path, not its content
    assert 'KCTL_SCRAM_USER="admin"' in env


def test_the_environment_file_quotes_each_value() -> None:
    out = b._env_file({"A": 'x "y" \\z', "B": "-Xms1g -Xmx1g"})
    assert 'A="x \\"y\\" \\\\z"' in out and 'B="-Xms1g -Xmx1g"' in out


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_verifies_the_units(tmp_path: Path) -> None:
    one = b.bundle_files(hosts_spec(), dist(tmp_path), {})["logger1"]
    proc = systemd_units.verify(one, tmp_path, "kctl-zookeeper.service", "kctl-kafka.service")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_the_host_scripts_are_valid_bash() -> None:
    here = Path(b.__file__).parent / "host"
    for name in ("install.sh", "uninstall.sh", "kctl-prepare"):
        subprocess.run(["bash", "-n", str(here / name)], check=True, timeout=30)


def test_write_node_replaces_a_bundle_whole_and_links_the_distribution(tmp_path: Path) -> None:
    d = dist(tmp_path)
    spec = hosts_spec(security={"enabled": True})
    files = b.bundle_files(spec, d, {"logger1": {"kafka.jaas": b"x"}})["logger1"]
    target = tmp_path / "out" / "logger1"
    target.mkdir(parents=True)
    (target / "stale").write_text("from an older bundle")
    b.write_node(target, files, d)
    assert not (target / "stale").exists()
    assert (target / b.DIST_TAR).stat().st_ino == d.path.stat().st_ino  # a hard link, not a copy
    assert stat.S_IMODE((target / "secrets").stat().st_mode) == 0o700
    assert stat.S_IMODE((target / "secrets/kafka.jaas").stat().st_mode) == 0o400
    assert stat.S_IMODE((target / "install.sh").stat().st_mode) == 0o755
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["logger1"]  # no temporary sibling left
