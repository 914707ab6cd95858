"""A prepared Kafka distribution on disk: its checks, its manifest, the cache it lives in.

Every prepared distribution is a directory with ``bin/``, ``libs/``,
``config/tools-log4j.properties`` and a ``kctl-dist.json`` that records where it
came from, the ZooKeeper version found in ``libs/`` and a digest of its content
(its identity, part of the image's build hash).
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kctl import cache
from kctl.contract import kraft_only
from kctl.errors import KctlError
from kctl.runtime.image.artifacts.scripts import TOOLS, tools_of, write_bin_scripts

Progress = Callable[[str], None]

MANIFEST = "kctl-dist.json"

# Main classes a usable distribution must hold: the two servers and every tool's.
REQUIRED_CLASSES = (
    "kafka.Kafka",
    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    *(t.main_class for t in TOOLS),
)


def required_classes(kafka_version: str) -> tuple[str, ...]:
    """:data:`REQUIRED_CLASSES` of a release: Kafka 4 has no ZooKeeper, and its tools' classes moved."""
    if not kraft_only(kafka_version):
        return REQUIRED_CLASSES
    return ("kafka.Kafka", *(t.main_class for t in tools_of(kafka_version)))


@dataclass(frozen=True)
class Dist:
    """A prepared Kafka distribution directory."""

    path: Path
    kafka_version: str
    scala_version: str
    zookeeper_version: str
    source: str
    identity: str
    classes: tuple[str, ...] = ()  # the main classes checked when it was prepared (REQUIRED_CLASSES then)

    @property
    def current(self) -> bool:
        """Whether it was checked for every class kctl needs today (a cache made before a tool was added is
        prepared again)."""
        return set(required_classes(self.kafka_version)) <= set(self.classes)


class Source(Protocol):
    """Where a distribution can come from (the Apache tarball, Maven Central, the operator's copy)."""

    name: str  # recorded as the manifest's "source" and the image's io.kctl.dist-source label

    def fetch(self, work: Path, kafka_version: str, scala_version: str, progress: Progress | None) -> \
            tuple[Path, str] | None:
        """Lay out a distribution below ``work``: (its root, where it came from), or ``None`` when out of reach."""
        ...


def say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def dist_name(kafka_version: str, scala_version: str) -> str:
    return f"kafka_{scala_version}-{kafka_version}"


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/kctl/dist`` (entries filled through :mod:`kctl.cache`)."""
    return cache.root() / "dist"


_ZK_JAR = re.compile(r"^zookeeper-(\d+\.\d+\.\d+)\.jar$")


def zookeeper_version_in(libs: Path) -> str | None:
    """The version of ``zookeeper-X.Y.Z.jar`` in a ``libs/`` directory."""
    for jar in sorted(libs.glob("zookeeper-*.jar")):
        m = _ZK_JAR.match(jar.name)
        if m:
            return m.group(1)
    return None


def missing_classes(libs: Path, classes: Iterable[str]) -> list[str]:
    """The main classes not found in any jar of ``libs/``."""
    wanted = {c.replace(".", "/") + ".class": c for c in classes}
    for jar in sorted(libs.glob("*.jar")):
        if not wanted:
            break
        try:
            with zipfile.ZipFile(jar) as zf:
                names = set(zf.namelist())
        except zipfile.BadZipFile as exc:
            raise KctlError(f"corrupt jar in the Kafka distribution: {jar}", "delete the cache and retry") \
                from exc
        for entry in [e for e in wanted if e in names]:
            del wanted[entry]
    return sorted(wanted.values())


def content_digest(root: Path) -> str:
    """A digest of libs/ (names and sizes) and bin/ + config/ (names and bytes)."""
    h = hashlib.sha256()
    for jar in sorted((root / "libs").glob("*")):
        h.update(f"lib {jar.name} {jar.stat().st_size}\n".encode())
    for sub in ("bin", "config"):
        for f in sorted((root / sub).rglob("*")):
            if f.is_file():
                h.update(f"{sub} {f.relative_to(root).as_posix()}\n".encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def read_manifest(root: Path) -> dict[str, str] | None:
    try:
        data = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()}


def read_dist(root: Path) -> Dist | None:
    """The prepared distribution at ``root``, or ``None`` when there is none (or its manifest is bad)."""
    m = read_manifest(root)
    if m is None:
        return None
    try:
        return Dist(
            path=root,
            kafka_version=m["kafka_version"],
            scala_version=m["scala_version"],
            zookeeper_version=m["zookeeper_version"],
            source=m["source"],
            identity=hashlib.sha256((root / MANIFEST).read_bytes()).hexdigest(),
            classes=tuple(c for c in m.get("classes", "").split(",") if c),
        )
    except KeyError:
        return None


def finish_dist(root: Path, *, kafka_version: str, scala_version: str, source: str, origin: str) -> Dist:
    """Check a distribution directory, fill gaps in bin/, write its manifest."""
    libs = root / "libs"
    core = libs / f"kafka_{scala_version}-{kafka_version}.jar"
    if not core.is_file():
        found = sorted(p.name for p in libs.glob("kafka_*.jar")) if libs.is_dir() else []
        raise KctlError(
            f"{origin} is not Kafka {kafka_version} for Scala {scala_version}",
            f"expected libs/{core.name}; found {', '.join(found) or 'no kafka_*.jar'}",
        )

    write_bin_scripts(root, overwrite=False, kafka_version=kafka_version)
    required = required_classes(kafka_version)
    missing = missing_classes(libs, required)
    if missing:
        raise KctlError(
            f"the Kafka distribution from {origin} lacks classes kctl needs: {', '.join(missing)}",
            f"use the official kafka_{scala_version}-{kafka_version}.tgz with --kafka-dist",
        )
    zk = zookeeper_version_in(libs)
    if zk is None and not kraft_only(kafka_version):
        raise KctlError(f"no zookeeper-X.Y.Z.jar in {libs}", "Kafka 3.x ships ZooKeeper in libs/")
    manifest = {
        "kafka_version": kafka_version,
        "scala_version": scala_version,
        "zookeeper_version": zk or "",
        "source": source,
        "origin": origin,
        "content_sha256": content_digest(root),
        "classes": ",".join(sorted(required)),
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    dist = read_dist(root)
    assert dist is not None
    return dist


def intact(root: Path) -> bool:
    """Whether the distribution at ``root`` is still what its manifest recorded (bin/ and config/ byte for
    byte, libs/ by name and size): a cache entry that lost files (a cleanup cut short) is made again."""
    m = read_manifest(root)
    try:
        return m is not None and m.get("content_sha256") == content_digest(root)
    except OSError:
        return False
