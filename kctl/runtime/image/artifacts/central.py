"""Kafka's jars from Maven Central, with generated ``bin/*.sh`` wrappers of the tarball's names."""

from __future__ import annotations

from pathlib import Path

from kctl.contract import kraft_only
from kctl.runtime.image import maven
from kctl.runtime.image.artifacts.layout import Progress
from kctl.runtime.image.artifacts.scripts import write_bin_scripts

NAME = "maven"
ORIGIN = "Maven Central"
# Artifacts resolved from Maven Central when no tarball is available. The
# broker (kafka_2.13) and the admin tools (kafka-tools) pull in the rest of
# what the tarball's libs/ holds for a ZooKeeper-mode node: kafka-server,
# kafka-storage, kafka-group-coordinator, ZooKeeper 3.8, jackson, argparse4j,
# jopt-simple; they are listed so that a change upstream fails loudly.
MAVEN_ARTIFACTS = (
    "org.apache.kafka:kafka_{scala}:{kafka}",
    "org.apache.kafka:kafka-tools:{kafka}",
    "org.apache.kafka:kafka-server:{kafka}",
    "org.apache.kafka:kafka-storage:{kafka}",
    "org.apache.kafka:kafka-group-coordinator:{kafka}",
    "org.apache.kafka:kafka-clients:{kafka}",
    # MirrorMaker 2 in dedicated mode (`kctl mirror`): Connect's runtime, json and the mirror connectors.
    "org.apache.kafka:connect-mirror:{kafka}",
    "org.slf4j:slf4j-reload4j:1.7.36",
)
# Kafka 4 logs through Log4j 2 (its jars pull log4j-api and log4j-core): SLF4J's binding to it, and the bridge
# that reads the log4j 1.x properties files kctl renders (as Kafka 4's own scripts still accept them), of the
# Log4j 2 release that Kafka's jars name (kafka-server's POM: log4j-core).
LOG4J2_VERSIONS = {"4.1.1": "2.24.3", "4.3.1": "2.25.4"}
MAVEN_ARTIFACTS_4 = (
    *(c for c in MAVEN_ARTIFACTS if not c.startswith("org.slf4j:slf4j-reload4j")),
    "org.apache.logging.log4j:log4j-slf4j-impl:{log4j2}",
    "org.apache.logging.log4j:log4j-1.2-api:{log4j2}",
)


def artifacts(kafka_version: str, scala_version: str) -> list[maven.Artifact]:
    coordinates = MAVEN_ARTIFACTS_4 if kraft_only(kafka_version) else MAVEN_ARTIFACTS
    log4j2 = LOG4J2_VERSIONS.get(kafka_version, "")
    return [maven.Artifact.parse(c.format(scala=scala_version, kafka=kafka_version, log4j2=log4j2))
            for c in coordinates]


def resolve_maven(kafka_version: str, scala_version: str, dest: Path, progress: Progress | None = None) -> Path:
    """Resolve the jars into ``dest/libs`` with Maven and generate ``bin/``; returns ``dest``."""
    maven.copy_dependencies(
        artifacts(kafka_version, scala_version), dest / "libs", what=f"Kafka {kafka_version}",
        hint=f"pass --kafka-dist kafka_{scala_version}-{kafka_version}.tgz", progress=progress,
    )
    write_bin_scripts(dest, overwrite=True, kafka_version=kafka_version)
    return dest


class MavenCentral:
    """The last resort: the jars of the release, resolved with ``mvn``."""

    name = NAME

    def fetch(self, work: Path, kafka_version: str, scala_version: str, progress: Progress | None) -> \
            tuple[Path, str] | None:
        return resolve_maven(kafka_version, scala_version, work / "x", progress), ORIGIN
