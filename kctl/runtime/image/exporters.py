"""The metrics exporters baked into the node image, resolved from Maven Central and cached.

Two pieces (docs/monitoring.md):

- the Prometheus JMX exporter's Java agent (one shaded jar), which each broker loads (kafka-start);
- ZooKeeper's own ``PrometheusMetricsProvider``: Kafka's distribution does not carry it. Its jar and the
  Prometheus ``simpleclient`` 0.9 family it is built against, plus the servlet container it serves with
  (``jetty-servlet`` 9.4, ``javax.servlet-api`` 3.1, which Kafka's ``libs/`` usually holds already).

The coordinates are pinned, so they are the exporters' identity: part of the image's recipe hash. The build
context gets only the ZooKeeper jars that Kafka's ``libs/`` lacks (:func:`missing_from`), so one class never
comes from two versions.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kctl import cache
from kctl.runtime.image import maven

Progress = Callable[[str], None]

JMX_EXPORTER = "io.prometheus.jmx:jmx_prometheus_javaagent:1.0.1"
# ZooKeeper 3.8.4 (Kafka 3.9's) runs the provider of 3.8.3, the newest of the 3.8 line on Maven Central; what
# ZooKeeper itself brings (its server, jute, netty, logging) is Kafka's already.
ZOOKEEPER_METRICS = (
    "org.apache.zookeeper:zookeeper-prometheus-metrics:3.8.3",
    "org.eclipse.jetty:jetty-servlet:9.4.57.v20241219",
    "javax.servlet:javax.servlet-api:3.1.0",
)
ZOOKEEPER_EXCLUSIONS = (
    "org.apache.zookeeper:zookeeper", "org.apache.zookeeper:zookeeper-jute", "io.netty:*", "org.slf4j:*",
    "ch.qos.logback:*", "org.apache.yetus:audience-annotations", "commons-io:commons-io",
)
AGENT_JAR = "jmx_prometheus_javaagent.jar"
ZOOKEEPER_DIR = "zookeeper"
HINT = "the node image carries the exporters' jars, resolved from Maven Central with Maven (make setup installs it)"


def identity() -> str:
    """The exporters' identity: their pinned coordinates."""
    text = "\n".join((JMX_EXPORTER, *ZOOKEEPER_METRICS, *ZOOKEEPER_EXCLUSIONS))
    return hashlib.sha256(text.encode()).hexdigest()


def cache_dir() -> Path:
    return cache.root() / "exporters" / identity()[:16]


def _complete(entry: Path) -> bool:
    return cache.is_complete(entry) and (entry / AGENT_JAR).is_file() and any((entry / ZOOKEEPER_DIR).glob("*.jar"))


def prepare(progress: Progress | None = None) -> Path:
    """A directory with ``jmx_prometheus_javaagent.jar`` and ``zookeeper/*.jar``, from the cache or Maven (filled
    beside the entry under its lock and renamed into place whole: a second kctl waits, then uses it). To read
    from it, :func:`prepared`: this only makes sure it is there."""
    return cache.fill_dir(cache_dir(), _make(progress), complete=_complete, note=_note, progress=progress)


@contextmanager
def prepared(progress: Progress | None = None) -> Iterator[Path]:
    """:func:`prepare`, and the directory held for reading until the block ends (:func:`kctl.cache.use_dir`):
    another kctl's refill of the entry waits, so what is copied or packed from it is all there."""
    with cache.use_dir(cache_dir(), _make(progress), complete=_complete, note=_note, progress=progress) as entry:
        yield entry


def _note() -> str:
    return "\n".join((JMX_EXPORTER, *ZOOKEEPER_METRICS))


def _make(progress: Progress | None) -> Callable[[Path], None]:
    def make(work: Path) -> None:
        agent = maven.copy_dependencies([maven.Artifact.parse(JMX_EXPORTER, ["*:*"])], work / "agent",
                                        what="the Prometheus JMX exporter", hint=HINT, progress=progress)
        (work / "agent" / agent[0].name).rename(work / AGENT_JAR)
        shutil.rmtree(work / "agent")
        maven.copy_dependencies([maven.Artifact.parse(c, ZOOKEEPER_EXCLUSIONS) for c in ZOOKEEPER_METRICS],
                                work / ZOOKEEPER_DIR, what="ZooKeeper's Prometheus metrics provider", hint=HINT,
                                progress=progress)

    return make


_VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.+-]*\.jar$")


def artifact_name(jar: str) -> str:
    """``jetty-servlet-9.4.57.v20241219.jar`` -> ``jetty-servlet``."""
    m = _VERSIONED.match(jar)
    return m.group("name") if m else jar.removesuffix(".jar")


def missing_from(jars: list[Path], libs: Path) -> list[Path]:
    """The jars whose artifact ``libs/`` does not hold in any version."""
    have = {artifact_name(p.name) for p in libs.glob("*.jar")}
    return [j for j in jars if artifact_name(j.name) not in have]


def lay_out(source: Path, dest: Path, kafka_libs: Path) -> None:
    """The build context's ``monitoring/``: the agent, and the ZooKeeper jars ``kafka_libs`` lacks."""
    (dest / ZOOKEEPER_DIR).mkdir(parents=True)
    shutil.copy2(source / AGENT_JAR, dest / AGENT_JAR)
    for jar in missing_from(sorted((source / ZOOKEEPER_DIR).glob("*.jar")), kafka_libs):
        shutil.copy2(jar, dest / ZOOKEEPER_DIR / jar.name)
