"""Node image and Kafka distribution: everything that can be checked without Docker."""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import http.server
import io
import json
import re
import socket
import socketserver
import stat
import subprocess
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import docker
import docker.errors
import pytest
from docker.api import APIClient
from docker.models.images import Image, ImageCollection

from kctl.errors import KctlError
from kctl.runtime.image import artifacts as distmod
from kctl.runtime.image import build as image
from kctl.runtime.image import maven
from kctl.runtime.image.artifacts import apache, central, layout, scripts

NODE = image.NODE_DIR
SHELL_FILES = ["entrypoint.sh", "healthcheck", "kafka-start", "zookeeper-start", "jvm-common.sh", "controller-start",
               "idle", "retired", "held"]


# --- helpers -----------------------------------------------------------------------


def gpg_sha512(name: str, data: bytes) -> str:
    """The ``gpg --print-md SHA512`` layout Apache publishes (upper case, wrapped)."""
    hexd = hashlib.sha512(data).hexdigest().upper()
    groups = [hexd[i : i + 8] for i in range(0, 128, 8)]
    return f"{name}: {' '.join(groups[:6])}\n{' ' * (len(name) + 2)}{' '.join(groups[6:12])}\n" + (
        f"{' ' * (len(name) + 2)}{' '.join(groups[12:])}\n"
    )


def make_fake_dist(root: Path, *, kafka: str = "3.9.1", scala: str = "2.13", zk: str = "3.8.4") -> Path:
    """A distribution tree whose jars hold (empty) class entries for every required class."""
    libs = root / "libs"
    libs.mkdir(parents=True)
    with zipfile.ZipFile(libs / f"kafka_{scala}-{kafka}.jar", "w") as zf:
        for cls in layout.REQUIRED_CLASSES:
            zf.writestr(cls.replace(".", "/") + ".class", b"")
    with zipfile.ZipFile(libs / f"zookeeper-{zk}.jar", "w") as zf:
        zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    return root


def make_fake_tgz(path: Path, **kw: str) -> bytes:
    staging = path.parent / "staging"
    top = make_fake_dist(staging / "kafka_2.13-3.9.1", **kw)
    (top / "bin").mkdir()
    (top / "bin" / "kafka-topics.sh").write_text("#!/bin/bash\necho from-tarball\n")
    with tarfile.open(path, "w:gz") as tf:
        tf.add(top, arcname=top.name)
    return path.read_bytes()


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "kctl" / "dist"


@pytest.fixture()
def http_dir(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A local HTTP server over a directory laid out like an Apache mirror."""
    root = tmp_path / "mirror"
    root.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a: Any) -> None:
            pass

    with socketserver.TCPServer(("127.0.0.1", 0), Handler) as srv:
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        yield f"http://127.0.0.1:{srv.server_address[1]}", root
        srv.shutdown()


def fake_client() -> Any:
    """A Docker client mock that only has what docker.DockerClient has (autospec, down to images and api)."""
    client = mock.create_autospec(docker.DockerClient, instance=True)
    client.images = mock.create_autospec(ImageCollection, instance=True)
    client.api = mock.create_autospec(APIClient, instance=True)
    return client


def fake_image(**attrs: Any) -> Any:
    img = mock.create_autospec(Image, instance=True)
    for k, v in attrs.items():
        setattr(img, k, v)
    return img


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- versions and names ------------------------------------------------------------


def test_image_tag_and_pinned_zookeeper() -> None:
    assert image.image_tag("3.9.1") == "kctl/node:3.9.1"
    assert image.IMAGE_REPO == "kctl/node"
    assert image.zookeeper_version_for("3.9.1") == "3.8.4"
    assert image.zookeeper_version_for("4.1.1") == ""  # Kafka 4 ships no ZooKeeper
    with pytest.raises(KctlError) as err:
        image.zookeeper_version_for("4.0.0")
    assert err.value.hint and "3.9.1" in err.value.hint and "4.1.1" in err.value.hint


# --- SHA-512 -----------------------------------------------------------------------


def test_parse_sha512_gpg_multiline_format() -> None:
    data = b"kafka bytes"
    text = gpg_sha512("kafka_2.13-3.9.1.tgz", data)
    assert "\n" in text.strip()
    assert apache.parse_sha512(text) == hashlib.sha512(data).hexdigest()


def test_parse_sha512_coreutils_and_bare() -> None:
    digest = hashlib.sha512(b"x").hexdigest()
    assert apache.parse_sha512(f"{digest}  kafka_2.13-3.9.1.tgz\n") == digest
    assert apache.parse_sha512(digest.upper()) == digest


@pytest.mark.parametrize("text", ["", "kafka.tgz: DEADBEEF\n", "<html>Not Found</html>"])
def test_parse_sha512_rejects_garbage(text: str) -> None:
    with pytest.raises(KctlError):
        apache.parse_sha512(text)


def test_verify_sha512(tmp_path: Path) -> None:
    f = tmp_path / "a.tgz"
    f.write_bytes(b"payload")
    apache.verify_sha512(f, hashlib.sha512(b"payload").hexdigest().upper())
    with pytest.raises(KctlError, match="SHA-512 mismatch"):
        apache.verify_sha512(f, hashlib.sha512(b"other").hexdigest())


# --- Apache download ---------------------------------------------------------------


def test_fetch_apache_tarball_verifies(tmp_path: Path, http_dir: tuple[str, Path]) -> None:
    base, root = http_dir
    (root / "3.9.1").mkdir()
    data = make_fake_tgz(root / "3.9.1" / "kafka_2.13-3.9.1.tgz")
    (root / "3.9.1" / "kafka_2.13-3.9.1.tgz.sha512").write_text(gpg_sha512("kafka_2.13-3.9.1.tgz", data))
    dead = f"http://127.0.0.1:{closed_port()}"
    seen: list[str] = []
    tgz = apache.fetch_apache_tarball("3.9.1", "2.13", tmp_path / "dl", mirrors=[dead, base],
                                       timeout=2, progress=seen.append)
    assert tgz is not None and tgz.read_bytes() == data
    assert any("not reachable" in m for m in seen)


def test_fetch_apache_tarball_checksum_mismatch_is_an_error(tmp_path: Path, http_dir: tuple[str, Path]) -> None:
    base, root = http_dir
    (root / "3.9.1").mkdir()
    make_fake_tgz(root / "3.9.1" / "kafka_2.13-3.9.1.tgz")
    (root / "3.9.1" / "kafka_2.13-3.9.1.tgz.sha512").write_text(gpg_sha512("kafka_2.13-3.9.1.tgz", b"nope"))
    with pytest.raises(KctlError, match="SHA-512 mismatch"):
        apache.fetch_apache_tarball("3.9.1", "2.13", tmp_path / "dl", mirrors=[base], timeout=2)
    assert not list((tmp_path / "dl").glob("*.tgz*"))


def test_fetch_apache_tarball_unreachable_fails_fast(tmp_path: Path) -> None:
    start = time.monotonic()
    mirrors = [f"http://127.0.0.1:{closed_port()}", "http://unresolvable.invalid"]
    assert apache.fetch_apache_tarball("3.9.1", "2.13", tmp_path, mirrors=mirrors, timeout=2) is None
    assert time.monotonic() - start < 10


# --- generated bin scripts ---------------------------------------------------------


def test_tool_classes_match_kafka_3_9() -> None:
    classes = {t.script: t.main_class for t in scripts.TOOLS}
    assert classes["kafka-topics.sh"] == "org.apache.kafka.tools.TopicCommand"
    assert classes["kafka-configs.sh"] == "kafka.admin.ConfigCommand"
    assert classes["kafka-consumer-groups.sh"] == "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    assert classes["kafka-console-producer.sh"] == "kafka.tools.ConsoleProducer"
    assert classes["kafka-console-consumer.sh"] == "org.apache.kafka.tools.consumer.ConsoleConsumer"
    assert classes["kafka-producer-perf-test.sh"] == "org.apache.kafka.tools.ProducerPerformance"
    assert classes["kafka-consumer-perf-test.sh"] == "org.apache.kafka.tools.ConsumerPerformance"
    assert classes["zookeeper-shell.sh"] == "org.apache.zookeeper.ZooKeeperMainWithTlsSupportForKafka"
    assert set(scripts.SCRIPTS) == {"kafka-run-class.sh", *classes}


def test_tool_classes_of_kafka_4_moved_and_the_zookeeper_tools_are_gone() -> None:
    # Checked against the jars of Kafka 4.1.1 (kafka-tools and kafka_2.13).
    classes = {t.script: t.main_class for t in scripts.tools_of("4.1.1")}
    assert classes["kafka-console-producer.sh"] == "org.apache.kafka.tools.ConsoleProducer"
    assert classes["kafka-acls.sh"] == "org.apache.kafka.tools.AclCommand"
    assert classes["kafka-broker-api-versions.sh"] == "org.apache.kafka.tools.BrokerApiVersionsCommand"
    assert classes["kafka-configs.sh"] == "kafka.admin.ConfigCommand"
    assert classes["kafka-storage.sh"] == "kafka.tools.StorageTool"
    assert "zookeeper-shell.sh" not in classes and "zookeeper-security-migration.sh" not in classes
    assert scripts.tools_of("3.9.1") == scripts.TOOLS
    assert "org.apache.zookeeper.server.quorum.QuorumPeerMain" not in layout.required_classes("4.1.1")
    assert "org.apache.kafka.tools.ConsoleProducer" in layout.required_classes("4.1.1")
    assert layout.required_classes("3.9.1") == layout.REQUIRED_CLASSES
    assert classes["kafka-dump-log.sh"] == "kafka.tools.DumpLogSegments"
    # Checked against the jars of Kafka 4.3.1: the log dump moved too, the rest as in 4.1.1.
    later = {t.script: t.main_class for t in scripts.tools_of("4.3.1")}
    assert later["kafka-dump-log.sh"] == "org.apache.kafka.tools.DumpLogSegments"
    assert {k: v for k, v in later.items() if k != "kafka-dump-log.sh"} == \
        {k: v for k, v in classes.items() if k != "kafka-dump-log.sh"}
    four_three = {f"{a.group}:{a.artifact}:{a.version}" for a in central.artifacts("4.3.1", "2.13")}
    assert "org.apache.logging.log4j:log4j-1.2-api:2.25.4" in four_three
    assert "org.apache.kafka:connect-mirror:4.3.1" in four_three


def test_kafka_4_resolves_log4j_2_with_its_bridges_instead_of_reload4j() -> None:
    three = {f"{a.group}:{a.artifact}" for a in central.artifacts("3.9.1", "2.13")}
    four = {f"{a.group}:{a.artifact}:{a.version}" for a in central.artifacts("4.1.1", "2.13")}
    assert "org.slf4j:slf4j-reload4j" in three
    assert "org.apache.kafka:kafka_2.13:4.1.1" in four and "org.apache.kafka:kafka-tools:4.1.1" in four
    assert "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3" in four
    assert "org.apache.logging.log4j:log4j-1.2-api:2.24.3" in four
    assert not any("reload4j" in a for a in four)


def test_write_bin_scripts(tmp_path: Path) -> None:
    written = scripts.write_bin_scripts(tmp_path, overwrite=True)
    assert sorted(written) == sorted(scripts.SCRIPTS)
    for name in written:
        script = tmp_path / "bin" / name
        assert script.stat().st_mode & stat.S_IXUSR, name
        subprocess.run(["bash", "-n", str(script)], check=True)
    shell = (tmp_path / "bin" / "zookeeper-shell.sh").read_text()
    assert "ZooKeeperMainWithTlsSupportForKafka -server \"$@\"" in shell
    assert 'KAFKA_HEAP_OPTS="-Xmx512M"' in (tmp_path / "bin" / "kafka-console-producer.sh").read_text()
    assert "KAFKA_HEAP_OPTS" not in (tmp_path / "bin" / "kafka-topics.sh").read_text()
    assert (tmp_path / "config" / "tools-log4j.properties").read_text().startswith("log4j.rootLogger=WARN")


def test_write_bin_scripts_keeps_tarball_scripts(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kafka-topics.sh").write_text("original\n")
    written = scripts.write_bin_scripts(tmp_path, overwrite=False)
    assert "kafka-topics.sh" not in written
    assert (tmp_path / "bin" / "kafka-topics.sh").read_text() == "original\n"


def test_generated_run_class_runs_the_class(tmp_path: Path) -> None:
    """kafka-run-class.sh puts libs/* on the classpath and passes the arguments through."""
    scripts.write_bin_scripts(tmp_path, overwrite=True)
    fake_java = tmp_path / "jdk" / "bin" / "java"
    fake_java.parent.mkdir(parents=True)
    fake_java.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    fake_java.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "JAVA_HOME": str(tmp_path / "jdk")}
    out = subprocess.run([str(tmp_path / "bin" / "zookeeper-shell.sh"), "zk:2181", "ls", "/"],
                         capture_output=True, text=True, env=env, check=True).stdout.splitlines()
    assert out[-5:] == ["org.apache.zookeeper.ZooKeeperMainWithTlsSupportForKafka", "-server", "zk:2181", "ls", "/"]
    assert f"{tmp_path}/libs/*" in out
    assert "-Xmx256M" in out
    assert any(o.startswith("-Dlog4j.configuration=file:") and o.endswith("tools-log4j.properties") for o in out)


# --- distribution preparation ------------------------------------------------------


def test_finish_dist_writes_manifest(tmp_path: Path) -> None:
    root = make_fake_dist(tmp_path / "d")
    d = layout.finish_dist(root, kafka_version="3.9.1", scala_version="2.13", source="maven", origin="test")
    manifest = json.loads((root / layout.MANIFEST).read_text())
    assert manifest["zookeeper_version"] == "3.8.4" == d.zookeeper_version
    assert manifest["source"] == "maven" == d.source
    assert re.fullmatch(r"[0-9a-f]{64}", d.identity)
    assert (root / "bin" / "kafka-topics.sh").exists()


def test_finish_dist_rejects_wrong_version(tmp_path: Path) -> None:
    root = make_fake_dist(tmp_path / "d", kafka="3.8.0")
    with pytest.raises(KctlError, match="not Kafka 3.9.1"):
        layout.finish_dist(root, kafka_version="3.9.1", scala_version="2.13", source="operator", origin="x")


def test_finish_dist_rejects_missing_classes(tmp_path: Path) -> None:
    root = tmp_path / "d"
    (root / "libs").mkdir(parents=True)
    with zipfile.ZipFile(root / "libs" / "kafka_2.13-3.9.1.jar", "w") as zf:
        zf.writestr("kafka/Kafka.class", b"")
    with pytest.raises(KctlError, match="lacks classes"):
        layout.finish_dist(root, kafka_version="3.9.1", scala_version="2.13", source="operator", origin="x")


def test_zookeeper_version_in(tmp_path: Path) -> None:
    (tmp_path / "zookeeper-jute-3.8.4.jar").write_bytes(b"")
    assert layout.zookeeper_version_in(tmp_path) is None
    (tmp_path / "zookeeper-3.8.4.jar").write_bytes(b"")
    assert layout.zookeeper_version_in(tmp_path) == "3.8.4"


def test_prepare_dist_from_operator_tgz_is_cached(tmp_path: Path, cache: Path) -> None:
    tgz = tmp_path / "kafka_2.13-3.9.1.tgz"
    make_fake_tgz(tgz)
    d1 = distmod.prepare_dist(kafka_dist=tgz)
    assert d1.source == "operator" and d1.path.parent == cache
    assert (d1.path / "bin" / "kafka-topics.sh").read_text().endswith("from-tarball\n")  # kept
    assert (d1.path / "bin" / "zookeeper-shell.sh").exists()  # filled in
    msgs: list[str] = []
    d2 = distmod.prepare_dist(kafka_dist=tgz, progress=msgs.append)
    assert d2 == d1 and any("cached" in m for m in msgs)


def test_prepare_dist_falls_back_to_maven_then_uses_cache(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apache, "fetch_apache_tarball", lambda *a, **kw: None)
    calls: list[Path] = []

    def fake_maven(kafka: str, scala: str, dest: Path, progress: Any = None) -> Path:
        calls.append(dest)
        make_fake_dist(dest)
        scripts.write_bin_scripts(dest, overwrite=True)
        return dest

    monkeypatch.setattr(central, "resolve_maven", fake_maven)
    d = distmod.prepare_dist()
    assert d.source == "maven" and d.path == cache / "kafka_2.13-3.9.1"
    assert json.loads((d.path / "kctl-dist.json").read_text())["origin"] == "Maven Central"
    assert distmod.prepare_dist() == d
    assert len(calls) == 1
    # no leftovers: only the entry's lock file beside it (kctl.cache)
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == [".kafka_2.13-3.9.1.lock"]


def test_resolve_maven_without_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maven.shutil, "which", lambda _name: None)
    with pytest.raises(KctlError) as err:
        central.resolve_maven("3.9.1", "2.13", tmp_path / "x")
    assert err.value.hint and "maven" in err.value.hint.lower() and "--kafka-dist" in err.value.hint
    assert not (tmp_path / "x").exists()


def test_maven_pom_lists_the_artifacts() -> None:
    pom = maven.pom(central.artifacts("3.9.1", "2.13"))
    for artifact in ("kafka_2.13", "kafka-tools", "kafka-server", "kafka-storage", "kafka-group-coordinator"):
        assert f"<artifactId>{artifact}</artifactId><version>3.9.1</version>" in pom
    assert "<artifactId>slf4j-reload4j</artifactId>" in pom


# --- apt sources / base image --------------------------------------------------------


DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_apt_sources_deb822_and_one_line(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    (tmp_path / "sources.list.d" / "other.list.disabled").write_text("deb http://nope/debian bookworm main\n")
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main\n"
    )
    sources = image.apt_sources(tmp_path)
    uris = [s.uri for s in sources]
    assert uris == ["http://one.example/debian", "http://mirror.example/debian",
                    "http://security.example/debian-security"]
    assert image.debian_mirror(sources) == "http://one.example/debian"


def test_debian_mirror_from_deb822_only(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    sources = image.apt_sources(tmp_path)
    assert image.debian_mirror(sources) == "http://mirror.example/debian"
    text = image.rootfs_sources_list(sources)
    assert text.splitlines() == [
        "deb http://mirror.example/debian bookworm main",
        "deb http://mirror.example/debian bookworm-updates main",
        "deb http://security.example/debian-security bookworm-security main",
    ]


def test_debian_mirror_defaults(tmp_path: Path) -> None:
    assert image.debian_mirror(image.apt_sources(tmp_path)) == "http://deb.debian.org/debian"
    ubuntu = [image.AptSource("http://archive.ubuntu.com/ubuntu", ("jammy",))]
    assert image.debian_mirror(ubuntu) == "http://deb.debian.org/debian"
    other = [image.AptSource("http://ftp.example.org/debian/", ("trixie",))]
    assert image.debian_mirror(other) == "http://ftp.example.org/debian"


def test_resolve_base_prefers_local_images() -> None:
    client = fake_client()

    def get(ref: str) -> object:
        if ref == image.LOCAL_BASE_IMAGE:
            return object()
        raise docker.errors.ImageNotFound(ref)

    client.images.get.side_effect = get
    assert image.resolve_base_image(client) == image.LOCAL_BASE_IMAGE
    client.images.pull.assert_not_called()


def test_resolve_base_pulls_before_debootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    client = fake_client()
    client.images.get.side_effect = docker.errors.ImageNotFound("x")
    client.images.pull.side_effect = docker.errors.APIError("no registry")
    built: list[str] = []
    monkeypatch.setattr(image, "build_local_base", lambda c, progress=None: built.append("x") or "kctl/debian:bookworm")
    assert image.resolve_base_image(client) == "kctl/debian:bookworm"
    assert built == ["x"]
    client.images.pull.side_effect = None
    assert image.resolve_base_image(client) == "debian:bookworm-slim"


# --- build context, hashes -----------------------------------------------------------


def test_assemble_context(tmp_path: Path) -> None:
    root = make_fake_dist(tmp_path / "dist")
    d = layout.finish_dist(root, kafka_version="3.9.1", scala_version="2.13", source="maven", origin="t")
    mon = tmp_path / "exporters"
    (mon / "zookeeper").mkdir(parents=True)
    (mon / "jmx_prometheus_javaagent.jar").write_bytes(b"agent")
    for jar in ("zookeeper-prometheus-metrics-3.8.3.jar", "simpleclient-0.9.0.jar", "jetty-servlet-9.4.50.jar"):
        (mon / "zookeeper" / jar).write_bytes(b"jar")
    (root / "libs" / "jetty-servlet-9.4.57.v20241219.jar").write_bytes(b"kafka's own")
    ctx = image.assemble_context(tmp_path / "ctx", d, mon)
    assert (ctx / "Dockerfile").read_text() == image.dockerfile_path().read_text()
    assert (ctx / "monitoring" / "jmx_prometheus_javaagent.jar").read_bytes() == b"agent"
    # Kafka's libs/ holds jetty-servlet already: only what it lacks goes to ZooKeeper's extra class path.
    assert sorted(p.name for p in (ctx / "monitoring" / "zookeeper").iterdir()) == [
        "simpleclient-0.9.0.jar", "zookeeper-prometheus-metrics-3.8.3.jar"]
    assert sorted(p.name for p in (ctx / "node").iterdir()) == sorted(p.name for p in image.node_files())
    assert (ctx / "kafka" / "libs" / "kafka_2.13-3.9.1.jar").is_file()
    assert (ctx / "kafka" / "kctl-dist.json").is_file()
    assert os_access_x(ctx / "kafka" / "bin" / "kafka-topics.sh")


def os_access_x(p: Path) -> bool:
    return bool(p.stat().st_mode & stat.S_IXUSR)


def test_hashes_and_labels(tmp_path: Path) -> None:
    recipe = image.recipe_hash()
    assert recipe == image.recipe_hash()
    root = make_fake_dist(tmp_path / "dist")
    d = layout.finish_dist(root, kafka_version="3.9.1", scala_version="2.13", source="maven", origin="t")
    labels = image.image_labels(d, recipe, "kctl/debian:bookworm")
    assert labels["io.kctl.image"] == "node"
    assert labels["io.kctl.zookeeper-version"] == "3.8.4"
    assert labels["io.kctl.dist-source"] == "maven"
    assert labels["io.kctl.build-hash"] == image.build_hash(recipe, d.identity)
    assert image.is_current(labels, recipe, d.identity)
    assert image.is_current(labels, recipe, None)
    assert not image.is_current(labels, recipe, "other")
    assert not image.is_current(labels, "0" * 64, d.identity)
    assert image.build_hash(recipe, "a") != image.build_hash(recipe, "b")


def test_ensure_image_reuses_current_image(cache: Path) -> None:
    recipe = image.recipe_hash()
    client = fake_client()
    existing = fake_image(id="sha256:" + "ab" * 32, attrs={"Size": 123})
    existing.labels = {
        "io.kctl.recipe-hash": recipe,
        "io.kctl.dist-identity": "d1",
        "io.kctl.build-hash": image.build_hash(recipe, "d1"),
        "io.kctl.kafka-version": "3.9.1",
        "io.kctl.zookeeper-version": "3.8.4",
        "io.kctl.dist-source": "maven",
    }
    client.images.get.return_value = existing
    info = image.ensure_image(client)
    assert info == image.ImageInfo("kctl/node:3.9.1", existing.id, 123, "3.9.1", "3.8.4", "maven", False)
    client.api.build.assert_not_called()


def test_ensure_image_builds_when_recipe_changed(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_fake_dist(tmp_path / "dist")
    d = layout.finish_dist(root, kafka_version="3.9.1", scala_version="2.13", source="maven", origin="t")
    monkeypatch.setattr(distmod, "prepare_dist", lambda **kw: d)
    monkeypatch.setattr(image, "resolve_base_image", lambda client, progress=None: "debian:bookworm-slim")
    mon = tmp_path / "exporters"
    (mon / "zookeeper").mkdir(parents=True)
    (mon / "jmx_prometheus_javaagent.jar").write_bytes(b"agent")
    monkeypatch.setattr(image.exporters, "prepared", lambda progress=None: contextlib.nullcontext(mon))
    client = fake_client()
    stale = fake_image(labels={"io.kctl.recipe-hash": "old"}, id="sha256:old", attrs={"Size": 1})
    built = fake_image(id="sha256:new", attrs={"Size": 2})
    client.images.get.side_effect = [stale, built]
    seen: dict[str, Any] = {}

    def fake_build(**kw: Any) -> Iterator[dict[str, Any]]:
        seen.update(kw)
        seen["context_files"] = sorted(p.name for p in Path(kw["path"]).iterdir())
        yield {"stream": "Step 1/2 : FROM x\n"}
        yield {"stream": "Successfully built new\n"}

    client.api.build.side_effect = fake_build
    built.labels = image.image_labels(d, image.recipe_hash(), "debian:bookworm-slim")
    log: list[str] = []
    info = image.ensure_image(client, progress=log.append)
    assert info.built and info.id == "sha256:new" and info.zookeeper_version == "3.8.4"
    assert seen["buildargs"] == {"BASE_IMAGE": "debian:bookworm-slim"}
    assert seen["tag"] == "kctl/node:3.9.1" and seen["rm"] is True
    assert seen["labels"]["io.kctl.build-hash"] == image.build_hash(image.recipe_hash(), d.identity)
    assert seen["context_files"] == ["Dockerfile", "kafka", "monitoring", "node"]
    assert "Step 1/2 : FROM x" in log


def test_build_error_is_a_kctl_error(tmp_path: Path) -> None:
    client = fake_client()
    client.api.build.return_value = iter([{"stream": "Step 4/20 : RUN apt-get\n"}, {"error": "exit code 100"}])
    with pytest.raises(KctlError) as err:
        image.build_from_context(client, tmp_path, tag="t", base_image="b", labels={})
    assert "exit code 100" in err.value.message and err.value.hint and "apt-get" in err.value.hint


# --- the node files ----------------------------------------------------------------


def test_dockerfile_layout() -> None:
    text = image.dockerfile_path().read_text()
    assert text.index("ARG BASE_IMAGE=debian:bookworm-slim") < text.index("FROM ${BASE_IMAGE}")
    assert "openjdk-17-jre-headless" in text and "supervisor" in text and "netcat-openbsd" in text
    assert "--uid 555" in text and "--gid 555" in text
    # apt first, then the big dist, then the small scripts: a script edit rebuilds fast.
    assert text.index("apt-get install") < text.index("COPY kafka/") < text.index("COPY node/")
    assert 'ENTRYPOINT ["/usr/local/bin/kctl-entrypoint"]' in text
    assert "/opt/kafka/bin" in text


@pytest.mark.parametrize("name", SHELL_FILES)
def test_node_shell_syntax(name: str) -> None:
    subprocess.run(["bash", "-n", str(NODE / name)], check=True)


def _supervisor(name: str) -> configparser.SectionProxy:
    cp = configparser.ConfigParser(inline_comment_prefixes=(";",))
    cp.read(NODE / f"supervisor-{name}.conf")
    return cp[f"program:{name}"]


def test_supervisor_programs() -> None:
    zk, kafka = _supervisor("zookeeper"), _supervisor("kafka")
    assert int(zk["priority"]) < int(kafka["priority"])  # ZooKeeper starts first, stops last
    for prog in (zk, kafka):
        assert prog["user"] == "logger"
        assert prog["autorestart"] == "true"  # self-healing (a stop through supervisorctl is not restarted)
        assert int(prog["startretries"]) >= 1
        assert prog["stopsignal"] == "TERM"
    assert int(kafka["stopwaitsecs"]) >= 120
    assert zk["stdout_logfile"] == "/var/log/kctl/zookeeper/zookeeper.out"
    assert kafka["stdout_logfile"] == "/var/log/kctl/kafka/kafka.out"
    main = configparser.ConfigParser(inline_comment_prefixes=(";",))
    main.read(NODE / "supervisord.conf")
    assert main["supervisorctl"]["serverurl"] == "unix://" + main["unix_http_server"]["file"]
    assert main["supervisord"]["logfile"].startswith("/var/log/kctl/")


class FourLetterServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


@pytest.fixture()
def fake_zk() -> Iterator[tuple[int, list[bytes]]]:
    replies: list[bytes] = [b"Zookeeper version: 3.8.4\nMode: follower\nNode count: 5\n"]

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(4)
            self.request.sendall(replies[0])

    with FourLetterServer(("127.0.0.1", 0), Handler) as srv:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        yield int(srv.server_address[1]), replies
        srv.shutdown()


def _healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(NODE / "healthcheck")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}, timeout=30, check=False)


def _conf(tmp_path: Path, zk_port: int, kafka_port: int) -> dict[str, str]:
    """Rendered-looking files with the given ports; the healthcheck reads its ports from them."""
    (tmp_path / "zoo.cfg").write_text(f"tickTime=2000\nclientPort={zk_port}\n")
    (tmp_path / "server.properties").write_text(
        f"listeners=INTERNAL://0.0.0.0:{kafka_port},EXTERNAL://0.0.0.0:19092\ninter.broker.listener.name=INTERNAL\n")
    return {"KCTL_CONF_DIR": str(tmp_path)}


def test_healthcheck_zookeeper(fake_zk: tuple[int, list[bytes]], tmp_path: Path) -> None:
    port, replies = fake_zk
    ok = _healthcheck({"KCTL_SERVICES": "zookeeper", **_conf(tmp_path, port, 9092)})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Mode: follower" in ok.stdout and f"port {port}" in ok.stdout
    replies[0] = b"This ZooKeeper instance is not currently serving requests\n"
    bad = _healthcheck({"KCTL_SERVICES": "zookeeper", **_conf(tmp_path, port, 9092)})
    assert bad.returncode == 1


def test_healthcheck_kafka_port(fake_zk: tuple[int, list[bytes]], tmp_path: Path) -> None:
    port, _ = fake_zk  # any listening TCP port will do for the Kafka probe
    both = {"KCTL_SERVICES": "zookeeper,kafka"}
    assert _healthcheck({**both, **_conf(tmp_path, port, port)}).returncode == 0
    closed = closed_port()
    down = _healthcheck({**both, **_conf(tmp_path, port, closed)})
    assert down.returncode == 1 and f"kafka: port {closed} closed" in down.stdout


def test_healthcheck_of_a_finalized_node_asks_no_zookeeper_and_probes_the_controller(
        fake_zk: tuple[int, list[bytes]], tmp_path: Path) -> None:
    port, replies = fake_zk  # a listening port stands in for the controller's and the broker's
    replies[0] = b"This ZooKeeper instance is not currently serving requests\n"  # asked, it would fail
    env = {"KCTL_SERVICES": "zookeeper,kafka", **_conf(tmp_path, closed_port(), port)}
    (tmp_path / "zookeeper-retired").write_text("the cluster is on KRaft\n")
    (tmp_path / "controller.properties").write_text(f"listeners=CONTROLLER://0.0.0.0:{port}\n")
    ok = _healthcheck(env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "zookeeper: retired" in ok.stdout and f"controller: port {port} open" in ok.stdout
    closed = closed_port()
    (tmp_path / "controller.properties").write_text(f"listeners=CONTROLLER://0.0.0.0:{closed}\n")
    down = _healthcheck(env)
    assert down.returncode == 1 and f"controller: port {closed} closed" in down.stdout
    # While a migration runs (no retired marker) the controller is not the healthcheck's to judge.
    (tmp_path / "zookeeper-retired").unlink()
    replies[0] = b"Zookeeper version: 3.8.4\nMode: follower\n"
    env = {"KCTL_SERVICES": "zookeeper,kafka", **_conf(tmp_path, port, port)}
    assert _healthcheck(env).returncode == 0


def test_tar_roundtrip_helper_is_sane(tmp_path: Path) -> None:
    """The fake tarball has the layout of the real one (top dir with libs/)."""
    tgz = tmp_path / "k.tgz"
    make_fake_tgz(tgz)
    with tarfile.open(fileobj=io.BytesIO(tgz.read_bytes())) as tf:
        assert "kafka_2.13-3.9.1/libs/kafka_2.13-3.9.1.jar" in tf.getnames()


# --- the benchmark section -----------------------------------------------------------




def test_exporter_jars_are_matched_to_kafkas_by_artifact_name(tmp_path: Path) -> None:
    from kctl.runtime.image import exporters

    assert exporters.artifact_name("jetty-servlet-9.4.57.v20241219.jar") == "jetty-servlet"
    assert exporters.artifact_name("javax.servlet-api-3.1.0.jar") == "javax.servlet-api"
    assert exporters.artifact_name("simpleclient_common-0.9.0.jar") == "simpleclient_common"
    assert exporters.artifact_name("kafka_2.13-3.9.1.jar") == "kafka_2.13"
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "jetty-servlet-9.4.57.v20241219.jar").write_bytes(b"")
    jars = [tmp_path / "jetty-servlet-9.4.50.v20221201.jar", tmp_path / "simpleclient-0.9.0.jar"]
    assert exporters.missing_from(jars, libs) == [tmp_path / "simpleclient-0.9.0.jar"]
    # The pinned coordinates are the exporters' identity, and part of the image's recipe.
    assert exporters.identity() == exporters.identity() and len(exporters.identity()) == 64


def test_two_callers_of_ensure_image_build_one_at_a_time(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    inside: list[int] = []
    most = [0]

    def build(client: Any, **kw: Any) -> str:
        inside.append(1)
        most[0] = max(most[0], len(inside))
        time.sleep(0.2)
        inside.pop()
        return "built"

    monkeypatch.setattr(image, "_ensure_image", build)
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(image.ensure_image(fake_client()))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["built"] * 3 and most[0] == 1


def test_node_scripts_pass_the_cluster_id_as_one_argument() -> None:
    # A ZooKeeper-mode cluster's id is random URL-safe base64 and may start with '-' (1 in 64): given as its own
    # argument, kafka-storage.sh takes it for an option ("argument --cluster-id/-t: expected one argument") and the
    # controller never formats (seen in a migration's test). `--cluster-id=ID` keeps it a value.
    # Both format through jvm-common.sh's kraft_storage (only storage kctl made: tests/unit/test_kraft_storage.py).
    for name in ("controller-start", "kafka-start"):
        assert "kraft_storage " in (NODE / name).read_text(), name
    for name in ("controller-start", "kafka-start", "jvm-common.sh"):
        text = (NODE / name).read_text()
        formats = [line for line in text.splitlines() if "kafka-storage.sh\" format" in line]
        assert (formats or name != "jvm-common.sh") and all('--cluster-id="$cluster_id"' in line
                                                              for line in formats), (name, formats)


def test_release_and_kraft_only_read_major_and_minor() -> None:
    from kctl import contract

    assert contract.release("3.9.1") == (3, 9) and contract.release("4.10.0") == (4, 10)
    assert contract.release("4") == (4, 0) and contract.release("x.y") == (0, 0)
    assert not contract.kraft_only("3.9.1") and contract.kraft_only("4.0.0") and contract.kraft_only("10.1.0")
    assert scripts.tools_of("4.10.0") == scripts.TOOLS_4_3 and scripts.tools_of("4.2.0") == scripts.TOOLS_4
