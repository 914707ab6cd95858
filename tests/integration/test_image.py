"""The node image, for real: build it if missing, then run single containers from it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from kctl import contract
from kctl.runtime.image import build as image

pytestmark = pytest.mark.integration

TEST_LABEL = "io.kctl.test"
TEST_VALUE = "image"


def _cleanup(client: docker.DockerClient) -> None:
    for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={TEST_VALUE}"}):
        c.remove(force=True)


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    try:
        c = docker.from_env(timeout=600)
        c.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine: {exc}")
    _cleanup(c)
    yield c
    _cleanup(c)


@pytest.fixture(scope="module")
def node_image(client: docker.DockerClient) -> image.ImageInfo:
    return image.ensure_image(client)


def _run(client: docker.DockerClient, *cmd: str, user: str | None = None) -> str:
    out = client.containers.run(image.image_tag(), list(cmd), remove=True, user=user or "",
                                labels={TEST_LABEL: TEST_VALUE}, stdout=True, stderr=True)
    return out.decode() if isinstance(out, bytes) else str(out)


def test_image_labels(client: docker.DockerClient, node_image: image.ImageInfo) -> None:
    labels = client.images.get(node_image.tag).labels
    assert labels["io.kctl.image"] == "node"
    assert labels["io.kctl.kafka-version"] == "3.9.1"
    assert labels["io.kctl.zookeeper-version"] == image.zookeeper_version_for("3.9.1")
    assert labels["io.kctl.dist-source"] in ("operator", "apache", "maven")
    assert node_image.size_bytes > 100_000_000


def test_ensure_image_is_idempotent(client: docker.DockerClient, node_image: image.ImageInfo) -> None:
    again = image.ensure_image(client)
    assert not again.built and again.id == node_image.id


def test_java_user_and_tools(client: docker.DockerClient, node_image: image.ImageInfo) -> None:
    assert 'version "17' in _run(client, "java", "-version")
    assert _run(client, "id", "logger").startswith("uid=555(logger) gid=555(logger)")
    assert _run(client, "kafka-topics.sh", "--version").strip().startswith("3.9.1")
    assert _run(client, "kafka-configs.sh", "--version").strip().startswith("3.9.1")
    assert _run(client, "kafka-consumer-groups.sh", "--version").strip().startswith("3.9.1")
    libs = _run(client, "ls", "/opt/kafka/libs")
    assert f"zookeeper-{node_image.zookeeper_version}.jar" in libs
    for tool in ("nc", "ps", "supervisorctl", "kctl-healthcheck", "zookeeper-shell.sh"):
        assert _run(client, "bash", "-c", f"command -v {tool}").strip(), tool


def test_class_data_sharing_archives_fit_the_images_jvm(client: docker.DockerClient,
                                                        node_image: image.ImageInfo) -> None:
    # -Xshare:on fails instead of falling back when an archive cannot be mapped or does not match the JDK
    # and the classpath the wrappers use (-cp libs/*)
    for service in ("zookeeper", "kafka"):
        out = _run(client, "java", "-Xshare:on", f"-XX:SharedArchiveFile=/opt/kafka/cds/{service}.jsa",
                   "-Xlog:cds=info", "-cp", "/opt/kafka/libs/*", "-version")
        assert "sharing" in out and f"{service}.jsa" in out, out
    # the tools' archive, as kctl runs a tool (kctl.model.properties.tool_env), through kafka-run-class.sh's
    # classpath: -Xshare:on fails if it could not be mapped
    out = _run(client, "env", f"KAFKA_OPTS=-Xshare:on {contract.TOOL_CDS} -Xlog:cds=info", "kafka-topics.sh",
               "--version")
    assert "tools.jsa" in out and out.strip().splitlines()[-1].startswith(node_image.kafka_version), out


ZOO_CFG = """\
tickTime=2000
dataDir=/var/opt/kctl/zookeeper/snapshots
dataLogDir=/var/opt/kctl/zookeeper/txnlogs
clientPort=2181
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr,stat,dump
"""
SERVER_PROPERTIES = """\
broker.id=1
zookeeper.connect=localhost:2181
listeners=INTERNAL://0.0.0.0:9092
advertised.listeners=INTERNAL://localhost:9092
listener.security.protocol.map=INTERNAL:PLAINTEXT
inter.broker.listener.name=INTERNAL
log.dirs=/var/opt/kctl/kafka/data
offsets.topic.replication.factor=1
"""
LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${%s}/%s
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%%d] %%p %%m (%%c)%%n
"""


def _exec(c: Container, *cmd: str) -> tuple[int, str]:
    rc, out = c.exec_run(list(cmd))
    return int(rc), out.decode()


def _wait(what: str, check: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture()
def standalone(client: docker.DockerClient, node_image: image.ImageInfo, tmp_path: Path) -> Iterator[Container]:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "zoo.cfg").write_text(ZOO_CFG)
    (etc / "server.properties").write_text(SERVER_PROPERTIES)
    (etc / "log4j-zookeeper.properties").write_text(LOG4J % ("zookeeper.log.dir", "zookeeper.log"))
    (etc / "log4j-kafka.properties").write_text(LOG4J % ("kafka.logs.dir", "server.log"))
    for d in ("data", "log"):
        (tmp_path / d).mkdir()
    c = client.containers.run(
        node_image.tag, detach=True, name=f"kctl-test-image-{uuid.uuid4().hex[:8]}", hostname="logger1",
        labels={TEST_LABEL: TEST_VALUE},
        environment={"KCTL_NODE": "logger1", "KCTL_SERVICES": "zookeeper,kafka",
                     "KCTL_ZK_SERVERS": "localhost:2181", "ZK_HEAP_OPTS": "-Xms128m -Xmx128m",
                     "KAFKA_HEAP_OPTS": "-Xms256m -Xmx256m"},
        volumes={str(etc): {"bind": "/etc/kctl", "mode": "ro"},
                 str(tmp_path / "data"): {"bind": "/var/opt/kctl", "mode": "rw"},
                 str(tmp_path / "log"): {"bind": "/var/log/kctl", "mode": "rw"}},
    )
    try:
        yield c
    finally:
        c.remove(force=True)


def test_standalone_node_lifecycle(standalone: Container, tmp_path: Path) -> None:
    c = standalone
    _wait("healthcheck", lambda: _exec(c, "kctl-healthcheck")[0] == 0)
    rc, status = _exec(c, "supervisorctl", "status")
    states = {line.split()[0]: line.split()[1] for line in status.splitlines() if len(line.split()) > 1}
    # the KRaft controller's program waits for a controller.properties this node does not have (idle)
    assert (states.get("zookeeper"), states.get("kafka"), states.get("controller")) == ("RUNNING",) * 3, status
    _rc, procs = _exec(c, "ps", "-eo", "args")
    assert "idle controller /etc/kctl/controller.properties" in procs and "kafka.Kafka /etc/kctl/controller" not in \
        procs, procs
    # both JVMs run with their class-data sharing archive mapped
    for main, archive in (("QuorumPeerMain", "zookeeper.jsa"), ("kafka.Kafka", "kafka.jsa")):
        script = (f"for p in $(pgrep -x java); do tr '\\0' ' ' < /proc/$p/cmdline | grep -q {main}"
                  f" && grep -q /opt/kafka/cds/{archive} /proc/$p/maps && exit 0; done; exit 1")
        rc, raw = c.exec_run(["bash", "-c", script], user="logger")  # the JVMs' own user reads their maps
        assert rc == 0, (main, raw)
    assert (tmp_path / "log" / "kafka" / "kafka.out").exists()
    assert (tmp_path / "log" / "zookeeper" / "zookeeper.out").exists()
    assert (tmp_path / "data" / "zookeeper" / "snapshots").stat().st_uid == 555
    # one process at a time
    assert _exec(c, "supervisorctl", "stop", "kafka")[0] == 0
    assert "STOPPED" in _exec(c, "supervisorctl", "status", "kafka")[1]
    assert "shut down completed" in (tmp_path / "log" / "kafka" / "server.log").read_text()
    assert _exec(c, "supervisorctl", "start", "kafka")[0] == 0
    _wait("kafka back", lambda: _exec(c, "kctl-healthcheck")[0] == 0)
    # a killed broker comes back by itself: its supervisor starts it again (a new JVM, healthy again)
    rc, pid = _exec(c, "pgrep", "-f", "kafka\\.Kafka /etc/kctl")
    assert rc == 0, pid
    _exec(c, "kill", "-9", pid.split()[0])
    _wait("a new broker JVM", lambda: _exec(c, "pgrep", "-f", "kafka\\.Kafka /etc/kctl")[1].split()[:1]
          not in ([], pid.split()[:1]), timeout=60)
    _wait("kafka back by itself", lambda: _exec(c, "kctl-healthcheck")[0] == 0)
    # held down (a drill's hold file), a killed broker stays down until the hold is released
    rc, pid = _exec(c, "pgrep", "-f", "kafka\\.Kafka /etc/kctl")
    _exec(c, "touch", "/tmp/kctl-hold-kafka")
    _exec(c, "kill", "-9", pid.split()[0])
    _wait("kafka held", lambda: "is held down" in (tmp_path / "log" / "kafka" / "kafka.out").read_text(), timeout=30)
    time.sleep(3)
    assert _exec(c, "pgrep", "-f", "kafka\\.Kafka /etc/kctl")[0] != 0  # no JVM while held
    assert _exec(c, "kctl-healthcheck")[0] != 0
    assert "RUNNING" in _exec(c, "supervisorctl", "status", "zookeeper")[1]
    _exec(c, "rm", "-f", "/tmp/kctl-hold-kafka")
    _wait("kafka back after the hold", lambda: _exec(c, "kctl-healthcheck")[0] == 0)
