"""A cluster made on KRaft on engine hosts (`metadata: kraft`, `engine: hosts`): each ZooKeeper participant's host
gets a kctl-controller.service beside kctl-kafka.service and no ZooKeeper unit; the permit to format KRaft storage
goes only to a node new to kctl, and install.sh places it only on a host that held nothing of kctl. Pure, or
install.sh's own lines run in bash on directories of the test's own; no host is reached."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kctl import contract
from kctl.kraft import config as kc
from kctl.model.properties import parse_properties
from kctl.model.spec import ClusterSpec
from kctl.roll import up as rolling
from kctl.runtime.engine import bundle as b
from kctl.runtime.engine import host_identity as hid
from kctl.runtime.engine import hosts
from tests.unit import systemd_units

CLUSTER_ID = "Xy7kQ2fnT3a1bC9dE0fG1h"


def kraft_spec(**extra: Any) -> ClusterSpec:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    nodes += extra.pop("more_nodes", [])
    spec = ClusterSpec.model_validate({"name": "hl", "engine": "hosts", "metadata": "kraft", "nodes": nodes,
                                       **extra})
    return spec.with_kraft("kraft", CLUSTER_ID)


def dist(tmp_path: Path) -> b.DistArchive:
    tar = tmp_path / "d.tar"
    tar.write_bytes(b"tar")
    return b.DistArchive(path=tar, name="kafka_2.13-3.9.1", identity="abc123")


def text(f: b.BundleFile) -> str:
    return f.data.decode()


def test_a_kraft_host_runs_a_controller_and_a_broker_unit_and_no_zookeeper(tmp_path: Path) -> None:
    observer = {"id": 4, "hostname": "logger4", "advertised_host": "10.9.0.4", "role": "observer"}
    files = b.bundle_files(kraft_spec(more_nodes=[observer]), dist(tmp_path), {})
    one = files["logger1"]
    units = sorted(p for p in one if p.startswith("units/"))
    assert units == ["units/kctl-controller.service", "units/kctl-kafka.service"]
    # a ZooKeeper's files and wrapper are not in it; the controller's, the cluster id and the KRaft wrappers are
    assert not {"conf/zoo.cfg", "conf/myid", "conf/log4j-zookeeper.properties", "conf/zookeeper-retired",
                "bin/zookeeper-start"} & set(one)
    assert {"conf/controller.properties", "conf/log4j-controller.properties", "bin/controller-start",
            "bin/unformatted", "bin/kafka-start", "bin/jvm-common.sh", "bin/kctl-prepare"} <= set(one)
    assert text(one["conf/cluster-id"]) == f"{CLUSTER_ID}\n"
    ctl = parse_properties(text(one["conf/controller.properties"]))
    assert ctl["node.id"] == "3001" and ctl["process.roles"] == "controller"
    assert ctl["controller.quorum.voters"] == "3001@logger1:9095,3002@logger2:9095,3003@logger3:9095"
    server = parse_properties(text(one["conf/server.properties"]))
    assert server["process.roles"] == "broker" and "zookeeper.connect" not in server
    assert 'KCTL_BUNDLE_SERVICES="controller kafka"' in text(one["bundle.env"])
    assert "(KRaft controller 3001, Kafka broker 1)" in text(one["conf/README"])
    # an observer runs a broker only: the quorum is the participants' controllers
    four = files["logger4"]
    assert sorted(p for p in four if p.startswith("units/")) == ["units/kctl-kafka.service"]
    assert "conf/controller.properties" not in four and 'KCTL_BUNDLE_SERVICES="kafka"' in text(four["bundle.env"])


def test_the_controller_unit_and_the_kraft_brokers_say_what_an_operator_expects(tmp_path: Path) -> None:
    observer = {"id": 4, "hostname": "logger4", "advertised_host": "10.9.0.4", "role": "observer"}
    files = b.bundle_files(kraft_spec(more_nodes=[observer]), dist(tmp_path), {})
    ctl = text(files["logger2"]["units/kctl-controller.service"]).splitlines()
    for line in ("Description=KRaft controller 3002 of kctl cluster hl (logger2)", "User=logger",
                 "ExecStartPre=+/opt/kctl/bin/kctl-prepare controller", "ExecStart=/opt/kctl/bin/controller-start",
                 "Environment=KCTL_LIB_DIR=/opt/kctl/bin", "Restart=on-failure", "TimeoutStopSec=60",
                 "StartLimitBurst=5", "SuccessExitStatus=143", "RestartForceExitStatus=143",
                 "ReadWritePaths=/var/log/kctl /var/opt/kctl", "WantedBy=multi-user.target",
                 "Environment=KCTL_SUPERVISOR=systemd KAFKA_HOME=/opt/kctl/dists/abc123/kafka_2.13-3.9.1"):
        assert line in ctl, line
    from tests.unit.test_bundle import HARDENING

    assert all(line in ctl for line in HARDENING)
    kafka = text(files["logger2"]["units/kctl-kafka.service"]).splitlines()
    assert "After=network-online.target kctl-controller.service" in kafka and "Wants=kctl-controller.service" in kafka
    assert "Environment=KCTL_LIB_DIR=/opt/kctl/bin" in kafka
    assert not [x for x in kafka if "zookeeper" in x.lower() and not x.startswith("#")]
    lone = text(files["logger4"]["units/kctl-kafka.service"]).splitlines()
    assert "After=network-online.target" in lone and not [x for x in lone if x.startswith("Wants=kctl-")]


def test_a_zookeeper_clusters_units_are_unchanged_by_kraft(tmp_path: Path) -> None:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    zk = ClusterSpec.model_validate({"name": "hl", "engine": "hosts", "nodes": nodes})
    one = b.bundle_files(zk, dist(tmp_path), {})["logger1"]
    assert "units/kctl-controller.service" not in one and "bin/controller-start" not in one
    assert "KCTL_LIB_DIR" not in text(one["units/kctl-kafka.service"])
    assert "KCTL_FORMAT_PERMITS" not in text(one["bundle.env"])
    assert b.format_permits(zk, tmp_path) == {}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_verifies_and_rates_the_controller_unit(tmp_path: Path) -> None:
    one = b.bundle_files(kraft_spec(), dist(tmp_path), {})["logger1"]
    proc = systemd_units.verify(one, tmp_path, "kctl-controller.service", "kctl-kafka.service")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    units = tmp_path / "root/etc/systemd/system"
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(units / "kctl-controller.service")],
                          capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for kctl-controller\.service: (\d+\.\d)", proc.stdout)
    assert m and float(m.group(1)) <= 2.0, proc.stdout + proc.stderr


def test_only_a_node_new_to_kctl_is_permitted_to_format_and_only_once(tmp_path: Path) -> None:
    from kctl.model.render import render, write

    spec = kraft_spec(state_dir=str(tmp_path))
    # `kctl bundle` before any `kctl up`: no data dir in the state dir yet, every node is new
    assert b.format_permits(spec, tmp_path) == {h: ("controller", "kafka") for h in ("logger1", "logger2", "logger3")}
    write(render(spec, tmp_path), tmp_path)  # `kctl up`: the permits of the nodes it makes now
    assert b.format_permits(spec, tmp_path)["logger2"] == ("controller", "kafka")
    one = b.bundle_files(spec, dist(tmp_path), {}, permits=b.format_permits(spec, tmp_path))["logger2"]
    assert 'KCTL_FORMAT_PERMITS="controller kafka"' in text(one["bundle.env"])
    b.consume_permits(tmp_path, "logger2")  # its install.sh ran
    assert "logger2" not in b.format_permits(spec, tmp_path) and "logger1" in b.format_permits(spec, tmp_path)
    assert (tmp_path / "logger2" / contract.HOST_DATA).is_dir()  # the data dir stays: the node is known now
    again = b.bundle_files(spec, dist(tmp_path), {}, permits=b.format_permits(spec, tmp_path))["logger2"]
    assert "KCTL_FORMAT_PERMITS" not in text(again["bundle.env"])
    write(render(spec, tmp_path), tmp_path)  # a later `kctl up` of a known node gives none again
    assert "logger2" not in b.format_permits(spec, tmp_path)


def test_write_bundles_makes_the_cluster_id_of_a_cluster_bundled_before_its_first_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    from kctl.kraft import phases as ph

    @contextmanager
    def archive(spec: ClusterSpec, progress: Any = None) -> Any:
        yield dist(tmp_path)

    monkeypatch.setattr(b, "dist_archive", archive)
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    spec = ClusterSpec.model_validate({"name": "hl", "engine": "hosts", "metadata": "kraft", "nodes": nodes,
                                       "state_dir": str(tmp_path / "state")}).with_kraft("kraft", None)
    said: list[str] = []
    made = b.write_bundles(spec, tmp_path / "state", tmp_path / "out", progress=said.append)
    record = ph.read(tmp_path / "state")
    assert record.phase is ph.Phase.kraft and record.cluster_id
    assert (tmp_path / "out/logger1/conf/cluster-id").read_text() == f"{record.cluster_id}\n"
    assert [m.services for m in made] == [("controller", "kafka")] * 3
    assert any(record.cluster_id in m for m in said)
    assert 'KCTL_FORMAT_PERMITS="controller kafka"' in (tmp_path / "out/logger3/bundle.env").read_text()


INSTALL = Path(b.__file__).parent / "host" / "install.sh"


def _permit_lines() -> str:
    """install.sh's lines that decide the host's freshness and write the permits, cut out of the script."""
    script = INSTALL.read_text()
    fresh = script[script.index("FRESH=1"):script.index('if [ -f "$HERE/conf/identity" ]')]
    permits = script[script.index("for svc in ${KCTL_FORMAT_PERMITS:-}"):script.index("# --- the Kafka distribution")]
    return fresh + permits


@pytest.mark.parametrize(("installed", "written"), [(False, True), (True, False)])
def test_install_sh_places_the_permits_only_on_a_host_that_held_nothing_of_kctl(
        tmp_path: Path, installed: bool, written: bool) -> None:
    root = tmp_path / "root"
    (root / "var/opt/kctl").mkdir(parents=True)
    (root / "etc/kctl").mkdir(parents=True)
    if installed:
        (root / "etc/kctl/identity").write_text("cluster=hl\n")
    me = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    body = _permit_lines().replace("/var/opt/kctl", f"{root}/var/opt/kctl").replace(
        "/etc/kctl", f"{root}/etc/kctl").replace("/opt/kctl/bundle.env", f"{root}/opt/kctl/bundle.env")
    script = (f'set -euo pipefail\nU={me}\nKCTL_FORMAT_PERMITS="controller kafka"\nCHANGED=0\n'
              'changed() { echo "changed: $1"; CHANGED=$((CHANGED + 1)); }\n' + body)
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    made = sorted(p.name for p in (root / "var/opt/kctl").iterdir())
    assert made == ([".kctl-format-controller", ".kctl-format-kafka"] if written else []), (made, proc.stdout)
    assert ("the permit to format the controller's new storage" in proc.stdout) is written


def test_a_kraft_hosts_zookeeper_is_retired_and_its_controller_and_unformatted_storage_are_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    eng = hosts.HostsEngine()
    ps = ["/bin/bash /opt/kctl/bin/unformatted controller /var/opt/kctl/controller/metadata",
          "java -Xmx1G kafka.Kafka /etc/kctl/server.properties"]
    seen = {"logger1": ("running", "h", ps)}
    monkeypatch.setattr(eng, "_look", lambda spec, node, timeout: seen.get(node.hostname, ("unreachable", None, [])))
    spec = kraft_spec()
    [c, *_] = eng.observe(spec)
    assert eng.processes(c) == {"zookeeper": "RETIRED", "controller": "UNFORMATTED", "kafka": "RUNNING"}
    seen["logger1"] = ("running", "h", ["java kafka.Kafka /etc/kctl/controller.properties",
                                        "java kafka.Kafka /etc/kctl/server.properties"])
    [c, *_] = eng.observe(spec)
    assert eng.processes(c) == {"zookeeper": "RETIRED", "controller": "RUNNING", "kafka": "RUNNING"}
    # on ZooKeeper a host's ZooKeeper that does not run is STOPPED (kctl up starts it), never RETIRED
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    [c, *_] = eng.observe(ClusterSpec.model_validate({"engine": "hosts", "nodes": nodes}))
    assert eng.processes(c)["zookeeper"] == "STOPPED"


def test_the_controller_unit_is_in_the_status_round_trip_and_the_units_journal() -> None:
    assert "systemctl is-failed --quiet kctl-controller.service && echo 'kctl: supervisor gave up on controller'" \
        in hosts._OBSERVE
    assert hosts.PROGRAMS == ("controller", "zookeeper", "kafka")  # the metadata quorum starts before the brokers
    assert hosts.systemd_states("Id=kctl-controller.service\nLoadState=loaded\nActiveState=failed\nSubState=failed"
                                "\n\nId=kctl-zookeeper.service\nLoadState=not-found\nActiveState=inactive\n"
                                "SubState=dead") == {"controller": "FATAL"}


def test_the_data_kctl_checks_on_a_kraft_host_is_the_controllers_metadata_not_zookeepers() -> None:
    spec = kraft_spec()
    dirs = hid.data_dirs(spec, spec.nodes[0], ("zookeeper", "kafka"))
    assert dirs == [contract.DATA_ROOT, kc.METADATA_DIR, "/var/opt/kctl/kafka/data"]
    assert not [d for d in dirs if "zookeeper" in d]


def test_the_restarts_on_kraft_roll_the_controllers_before_the_brokers_and_never_a_zookeeper() -> None:
    spec = kraft_spec()
    pending = {"logger2": ["kafka", "controller"], "logger1": ["controller"], "logger3": ["zookeeper"]}
    assert rolling.restart_phases(spec, pending) == [("controller", ["logger1", "logger2"]), ("kafka", ["logger2"])]


def test_kctl_logs_finds_a_controllers_log_on_kraft_and_refuses_it_on_zookeeper(tmp_path: Path) -> None:
    from kctl.errors import UsageError
    from kctl.runtime import logs

    log = logs.locate(kraft_spec(), tmp_path, "logger2", "controller")
    assert log.path == tmp_path / "logger2" / "logs" / "controller" / "server.log"
    with pytest.raises(UsageError, match="logger2 has no controller log"):
        logs.locate(ClusterSpec(), tmp_path, "logger2", "controller")
