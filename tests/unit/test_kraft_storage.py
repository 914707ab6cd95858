"""KRaft storage is formatted only where kctl made it (kctl/runtime/image/node/jvm-common.sh `kraft_storage`, the
image's `unformatted`), run in bash with a stand-in kafka-storage.sh; and the Python side: the permits a new
node's data dir gets, the UNFORMATTED state, its message in the health assessment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kctl import contract
from kctl.runtime import docker_api

NODE = Path(__file__).resolve().parents[2] / "kctl" / "runtime" / "image" / "node"

# kafka-storage.sh format --cluster-id=ID --config CONF --ignore-formatted: meta.properties in each log dir
STORAGE_TOOL = """#!/bin/bash
conf="$4"
dirs="$(sed -n 's/^log.dirs=//p' "$conf")"
for d in ${dirs//,/ }; do
  mkdir -p "$d"; [ -e "$d/meta.properties" ] || echo "cluster.id=${2#--cluster-id=}" > "$d/meta.properties"
done
echo "FORMATTED $dirs"
"""


@pytest.fixture()
def node(tmp_path: Path) -> Path:
    """A stand-in node: a Kafka home with the storage tool, the image's lib dir, a cluster id, a data root."""
    (tmp_path / "kafka" / "bin").mkdir(parents=True)
    tool = tmp_path / "kafka" / "bin" / "kafka-storage.sh"
    tool.write_text(STORAGE_TOOL)
    tool.chmod(0o755)
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("unformatted", "jvm-common.sh"):
        (lib / name).write_text((NODE / name).read_text())
        (lib / name).chmod(0o755)
    (lib / "controller-start").write_text("#!/bin/bash\necho CONTROLLER-START\n")
    (lib / "controller-start").chmod(0o755)
    (tmp_path / "cluster-id").write_text("Xy7kQ2fnT3a1bC9dE0fG1h\n")
    (tmp_path / "data").mkdir()
    return tmp_path


def run(node: Path, *dirs: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    conf = node / "controller.properties"
    conf.write_text("process.roles=controller\nlog.dirs=" + ",".join(map(str, dirs)) + "\n")
    script = f'. "{node}/lib/jvm-common.sh"; kraft_storage controller "$1" "${{@:2}}"; echo READY'
    return subprocess.run(["bash", "-c", script, "_", str(conf), *map(str, dirs)], capture_output=True, text=True,
                          timeout=timeout, env={"PATH": "/usr/bin:/bin", "KAFKA_HOME": str(node / "kafka"),
                                                "LOG_DIR": str(node), "KCTL_LIB_DIR": str(node / "lib"),
                                                "KCTL_FORMAT_PERMIT_DIR": str(node / "data"),
                                                "KCTL_CLUSTER_ID_FILE": str(node / "cluster-id"),
                                                "KCTL_UNFORMATTED_POLL": "0.1"})


def test_storage_kctl_made_is_formatted_once_and_the_permit_goes(node: Path) -> None:
    meta = node / "data" / "controller" / "metadata"
    permit = node / "data" / ".kctl-format-controller"
    permit.touch()
    first = run(node, meta)
    assert first.returncode == 0 and "FORMATTED" in first.stdout and first.stdout.strip().endswith("READY")
    assert (meta / "meta.properties").read_text() == "cluster.id=Xy7kQ2fnT3a1bC9dE0fG1h\n"
    assert not permit.exists()  # taken away: a later empty dir is not kctl's to format
    again = run(node, meta)
    assert again.returncode == 0 and "FORMATTED" not in again.stdout and "READY" in again.stdout


def test_formatted_storage_takes_a_left_permit_away(node: Path) -> None:
    meta = node / "data" / "meta"
    meta.mkdir()
    (meta / "meta.properties").write_text("cluster.id=x\n")
    permit = node / "data" / ".kctl-format-controller"
    permit.touch()
    assert "READY" in run(node, meta).stdout and not permit.exists()


def test_an_empty_dir_kctl_did_not_make_is_refused_and_waits_until_the_disk_is_back(node: Path) -> None:
    meta = node / "data" / "controller" / "metadata"
    conf = node / "controller.properties"
    conf.write_text(f"log.dirs={meta}\n")
    env = {"PATH": "/usr/bin:/bin", "KAFKA_HOME": str(node / "kafka"), "LOG_DIR": str(node),
           "KCTL_LIB_DIR": str(node / "lib"), "KCTL_FORMAT_PERMIT_DIR": str(node / "data"),
           "KCTL_CLUSTER_ID_FILE": str(node / "cluster-id"), "KCTL_UNFORMATTED_POLL": "0.1", "KCTL_NODE": "logger2"}
    script = f'. "{node}/lib/jvm-common.sh"; kraft_storage controller "$1" "$2"; echo READY'
    proc = subprocess.Popen(["bash", "-c", script, "_", str(conf), str(meta)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.5)  # refused: it waits, it neither formats nor starts
        assert not (meta / "meta.properties").exists()
        meta.mkdir(parents=True)
        (meta / "meta.properties").write_text("cluster.id=x\n")  # the disk is mounted again
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert "CONTROLLER-START" in out and "READY" not in out and "FORMATTED" not in out
    assert "REFUSED to format the controller's storage on logger2" in err
    assert "kctl node format-storage logger2 --service controller" in err
    assert "the controller's storage is back" in err


def test_a_permit_given_later_formats_the_waiting_service(node: Path) -> None:
    meta = node / "data" / "m"
    proc = subprocess.run(["bash", "-c", f'(sleep 1; touch "{node}/data/.kctl-format-controller") &'
                           f' exec "{node}/lib/unformatted" controller "{meta}"'], capture_output=True, text=True,
                          timeout=20, env={"PATH": "/usr/bin:/bin", "KCTL_LIB_DIR": str(node / "lib"),
                                           "KCTL_FORMAT_PERMIT_DIR": str(node / "data"),
                                           "KCTL_UNFORMATTED_POLL": "0.1"})
    assert "REFUSED" in proc.stderr and "permitted formatting" in proc.stderr and "CONTROLLER-START" in proc.stdout


def test_one_lost_log_dir_of_several_is_refused(node: Path) -> None:
    kept, lost = node / "data" / "a", node / "data" / "b"
    kept.mkdir()
    (kept / "meta.properties").write_text("cluster.id=x\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run(node, kept, lost, timeout=1.5)
    assert not lost.exists()


# A storage tool that says what it was run with and echoes bootstrap records as Kafka 4.2+ does.
ECHOING_TOOL = """#!/bin/bash
echo "ARGV $*"
for a in "$@"; do case "$a" in @*) echo "ARGFILE $(tr '\\n' ' ' < "${a#@}")" >&2 ;; esac; done
echo "Bootstrap metadata: BootstrapMetadata(records=[ApiMessageAndVersion(UserScramCredentialRecord(name='admin',\
 mechanism=2, salt=[49, 54], storedKey=[-103, 117], serverKey=[117, -80], iterations=4096) at version 0)])"
mkdir -p "$(sed -n 's/^log.dirs=//p' "$4")" && touch "$(sed -n 's/^log.dirs=//p' "$4")/meta.properties"
"""


@pytest.mark.parametrize("service", ["controller", "kafka"])
def test_a_controller_formats_with_the_scram_arguments_from_its_secret_file(node: Path, service: str) -> None:
    """A secured cluster made on KRaft: the controller's format adds the admin's credential (--add-scram) from the
    secret file, as @FILE (the tool's argparse reads it): the password is no process argument, and the records the
    tool echoes reach the log without the credential's keys. A broker's format adds nothing."""
    (node / "kafka" / "bin" / "kafka-storage.sh").write_text(ECHOING_TOOL)
    secrets = node / "secrets"
    secrets.mkdir()
    args = secrets / contract.KRAFT_FORMAT_ARGS_FILE
    args.write_text("--add-scram\nSCRAM-SHA-512=[name=admin,password=s3cret-pw_x]\n")
    meta = node / "data" / "meta"
    (node / "data" / f".kctl-format-{service}").touch()
    conf = node / "c.properties"
    conf.write_text(f"log.dirs={meta}\n")
    p = subprocess.run(["bash", "-c", f'. "{node}/lib/jvm-common.sh"; kraft_storage {service} "$1" "$2"; echo READY',
                        "_", str(conf), str(meta)], capture_output=True, text=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin", "KAFKA_HOME": str(node / "kafka"), "LOG_DIR": str(node),
                            "KCTL_LIB_DIR": str(node / "lib"), "KCTL_FORMAT_PERMIT_DIR": str(node / "data"),
                            "KCTL_CLUSTER_ID_FILE": str(node / "cluster-id"), "KCTL_SECRETS_DIR": str(secrets),
                            "KCTL_SCRAM_USER": "admin"})
    assert p.returncode == 0 and p.stdout.strip().endswith("READY"), p.stdout + p.stderr
    [argv] = [line for line in p.stdout.splitlines() if line.startswith("ARGV ")]
    assert "s3cret" not in p.stdout + p.stderr  # neither in the arguments nor in what reaches the log
    if service == "controller":
        assert argv.endswith(f"--ignore-formatted @{args}")
        assert "the bootstrap metadata gets the SCRAM credential of admin" in p.stdout
        assert "UserScramCredentialRecord(...)" in p.stdout and "storedKey" not in p.stdout
    else:
        assert argv.endswith("--ignore-formatted") and "@" not in argv


def test_the_scripts_use_the_contract_permit() -> None:
    common = (NODE / "jvm-common.sh").read_text()
    assert contract.DATA_ROOT in common and contract.FORMAT_PERMIT_PREFIX in common
    assert contract.format_permit("kafka").rsplit("/", 1)[1] in (NODE / "kafka-start").read_text()
    for script in ("controller-start", "kafka-start"):
        assert "kraft_storage " in (NODE / script).read_text()
    assert "kafka-storage.sh\" format" not in (NODE / "controller-start").read_text()  # only through kraft_storage
    assert f"{contract.SECRETS_DIR}/{contract.KRAFT_FORMAT_ARGS_FILE}" in common.replace(
        "${KCTL_SECRETS_DIR:-/run/kctl/secrets}", contract.SECRETS_DIR)
    dockerfile = (NODE.parents[3] / "Dockerfile").read_text()
    assert "/usr/local/lib/kctl/unformatted" in dockerfile and contract.format_permit("controller") in dockerfile


def test_unformatted_is_a_state_of_its_own_and_says_what_to_do() -> None:
    lines = ["/usr/bin/python3 /usr/bin/supervisord -n", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
             "/bin/bash /usr/local/lib/kctl/unformatted controller /var/opt/kctl/controller/metadata",
             "/bin/bash /usr/local/lib/kctl/unformatted kafka /var/opt/kctl/kafka/logs"]
    assert docker_api.process_states(lines, ("zookeeper", "kafka")) == {
        "zookeeper": "RUNNING", "controller": "UNFORMATTED", "kafka": "UNFORMATTED"}
    assert "UNFORMATTED" not in docker_api.NOT_RUNNING  # `kctl up` does not start it again: it waits on purpose
    from kctl.cluster import health
    from kctl.model.spec import parse_spec

    spec, _ = parse_spec({"versions": {"kafka": "4.1.1"}, "metadata": "kraft"})
    said = health.process_problems(spec, "logger1", {"zookeeper": "RUNNING", "kafka": "UNFORMATTED"})
    assert len(said) == 1 and "kctl node format-storage logger1 --service kafka" in said[0]


def test_a_new_node_gets_permits_and_a_lost_data_dir_of_a_known_node_none(tmp_path: Path) -> None:
    import json

    from kctl.kraft import phases as ph
    from kctl.model.render import render, write
    from kctl.model.spec import ClusterSpec, parse_spec, resolve_cluster

    spec, _ = parse_spec({"versions": {"kafka": "4.1.1"}, "metadata": "kraft"})
    resolved = resolve_cluster(spec, tmp_path / "kctl.yaml")
    ph.made_on_kraft(Path(resolved.state_dir or ""), resolved.versions.kafka)
    spec = resolve_cluster(spec, tmp_path / "kctl.yaml")
    rendered = render(spec, tmp_path)
    write(rendered, tmp_path)
    for c in rendered.containers:
        made = sorted(p.name for p in (tmp_path / c.name / "data").iterdir())
        assert made == [".kctl-format-controller", ".kctl-format-kafka"]
    # a node kctl made (applied.json names it) whose data dir is gone: a lost disk, no permit
    (tmp_path / contract.APPLIED_FILE).write_text(json.dumps({"hashes": {"logger1": "x"}}))
    import shutil

    shutil.rmtree(tmp_path / "logger1" / "data")
    shutil.rmtree(tmp_path / "logger2" / "data")
    write(rendered, tmp_path)
    assert list((tmp_path / "logger1" / "data").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "logger2" / "data").iterdir())[1:] == [".kctl-format-kafka"]
    # an existing data dir is never given one again
    (tmp_path / "logger3" / "data" / ".kctl-format-kafka").unlink()
    write(rendered, tmp_path)
    assert not (tmp_path / "logger3" / "data" / ".kctl-format-kafka").exists()
    zk = ClusterSpec()  # on ZooKeeper: the broker's permit only (its first start takes it away)
    zr = render(zk, tmp_path / "zk")
    write(zr, tmp_path / "zk")
    assert [p.name for p in (tmp_path / "zk" / "logger1" / "data").iterdir()] == [".kctl-format-kafka"]
