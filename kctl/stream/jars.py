"""Resolve Spark's Kafka source (``spark-sql-kafka-0-10``) for the installed pyspark.

PySpark does not ship the Kafka source. We resolve
``org.apache.spark:spark-sql-kafka-0-10_<scala>:<pyspark version>`` and its
runtime closure from Maven Central once, with ``mvn dependency:copy-dependencies`` (:mod:`kctl.runtime.image.maven`),
into ``${XDG_CACHE_HOME:-~/.cache}/kctl/jars/spark-sql-kafka-<version>/`` and pass
the jars with ``spark.jars``. Jars that pyspark already ships (slf4j, lz4, snappy,
zstd, hadoop client) are left out so that the classpath holds one copy of each.
Offline, ``--jars`` names them directly.

Exact pinning is the rule, and kctl pins pyspark 4.0.0 because that is the
newest release whose Kafka source *and* token provider both resolve from the
Maven Central that the build machines see (it lacks spark-sql-kafka 4.3.0 and
every spark-token-provider-kafka after 4.0.0). Should a mirror lack the exact
release, we fall back to the newest published release of the same major line
that is not newer than pyspark, say so on stderr, and record the versions used
in ``<cache>/.complete``. ``KCTL_SPARK_KAFKA_VERSION`` forces one.

The Delta Lake jars (``io.delta:delta-spark_<scala>`` and ``delta-storage``) are
resolved and cached the same way, into ``.../jars/delta-<version>/``, at the
version of the installed ``delta-spark`` Python package (which the ``stream``
extra pins to the release built against the pinned pyspark).
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from kctl import cache, output
from kctl.errors import KctlError
from kctl.extras import require
from kctl.runtime.image import maven

KAFKA_SOURCE_GROUP = "org.apache.spark"
_NAME_VERSION = re.compile(r"^(?P<name>.+?)-(?P<version>\d[\w.\-]*)\.jar$")


def spark_version() -> str:
    return str(require("pyspark", "stream").__version__)


def spark_home() -> Path:
    return Path(str(require("pyspark", "stream").__file__)).resolve().parent


def scala_binary_version() -> str:
    """The Scala binary version of the installed Spark, read from its own jars."""
    for jar in (spark_home() / "jars").glob("spark-core_*.jar"):
        m = re.match(r"spark-core_(\d+\.\d+)-", jar.name)
        if m:
            return m.group(1)
    return "2.13"


def kafka_source_coordinate(version: str | None = None) -> str:
    return f"{KAFKA_SOURCE_GROUP}:spark-sql-kafka-0-10_{scala_binary_version()}:{version or spark_version()}"


def cache_dir(version: str | None = None) -> Path:
    return cache.root() / "jars" / f"spark-sql-kafka-{version or spark_version()}"


def _artifact_name(jar: str) -> str:
    m = _NAME_VERSION.match(jar)
    return m.group("name") if m else jar


def _has_jars(d: Path) -> bool:
    return cache.is_complete(d) and any(d.glob("*.jar"))


def cached_jars(version: str | None = None) -> list[Path] | None:
    d = cache_dir(version)
    return sorted(d.glob("*.jar")) if _has_jars(d) else None


def _copy_unshipped(artifacts: list[maven.Artifact], work: Path, shipped: set[str], *, what: str,
                    timeout_s: float, hint: str) -> None:
    """The artifacts' runtime closure resolved into ``work``, but for the jars pyspark ships (one copy of
    each on the classpath)."""
    out = work / ".resolved"
    for jar in maven.copy_dependencies(artifacts, out, what=what, timeout_s=timeout_s, hint=hint):
        if _artifact_name(jar.name) not in shipped:
            shutil.copy2(jar, work / jar.name)
    shutil.rmtree(out)


_OFFLINE_HINT = "pass the jars with --jars (spark-sql-kafka-0-10 and its dependencies), or use --packages"
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _published(artifact: str, timeout_s: float = 20.0) -> list[str]:
    """Releases of ``org.apache.spark:<artifact>`` whose POM Maven Central actually serves, newest first."""
    base = f"{MAVEN_CENTRAL}/{KAFKA_SOURCE_GROUP.replace('.', '/')}/{artifact}"
    try:
        with urllib.request.urlopen(f"{base}/maven-metadata.xml", timeout=timeout_s) as r:
            meta = r.read().decode()
    except (urllib.error.URLError, OSError):
        return []
    versions = [v for v in re.findall(r"<version>([^<]+)</version>", meta) if re.fullmatch(r"\d+\.\d+\.\d+", v)]
    return sorted(set(versions), key=_vkey, reverse=True)


def _pom_exists(artifact: str, version: str, timeout_s: float = 20.0) -> bool:
    url = f"{MAVEN_CENTRAL}/{KAFKA_SOURCE_GROUP.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.pom"
    req = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return int(r.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _pick(artifact: str, version: str) -> str:
    """``version`` if Central serves it, else the newest release of the same major that is not newer."""
    if _pom_exists(artifact, version):
        return version
    major = _vkey(version)[0]
    for v in _published(artifact):
        if _vkey(v)[0] == major and _vkey(v) <= _vkey(version) and _pom_exists(artifact, v):
            return v
    return version  # let Maven report the failure


def resolve_kafka_jars(*, version: str | None = None, timeout_s: float = 600.0) -> list[Path]:
    """Return the jars of the Kafka source, resolving them into the cache on first use."""
    version = version or spark_version()
    hit = cached_jars(version)
    if hit:
        return hit
    maven.mvn_or_fail(f"the Kafka source for Spark {version} (not cached in {cache_dir(version)})", _OFFLINE_HINT)
    scala = scala_binary_version()
    forced = os.environ.get("KCTL_SPARK_KAFKA_VERSION")
    src_version = forced or _pick(f"spark-sql-kafka-0-10_{scala}", version)
    token_version = forced or _pick(f"spark-token-provider-kafka-0-10_{scala}", src_version)
    if (src_version, token_version) != (version, version):
        output.warn(f"Maven Central has no spark-sql-kafka-0-10_{scala}:{version}; using "
                    f"spark-sql-kafka {src_version} and spark-token-provider-kafka {token_version} "
                    f"with Spark {version}")
    dest = cache_dir(version)
    shipped = {_artifact_name(j.name) for j in (spark_home() / "jars").glob("*.jar")}
    source = f"spark-sql-kafka-0-10_{scala}"
    token = f"spark-token-provider-kafka-0-10_{scala}"
    artifacts = [
        # The source's own token provider is replaced by the one Central serves (see _pick).
        maven.Artifact.parse(f"{KAFKA_SOURCE_GROUP}:{source}:{src_version}",
                             exclusions=[f"{KAFKA_SOURCE_GROUP}:{token}"]),
        maven.Artifact.parse(f"{KAFKA_SOURCE_GROUP}:{token}:{token_version}"),
    ]

    def make(work: Path) -> None:
        _copy_unshipped(artifacts, work, shipped, what=kafka_source_coordinate(version), timeout_s=timeout_s,
                        hint=_OFFLINE_HINT)

    # Filled beside the entry under its lock and renamed into place whole, .complete last (kctl.cache).
    cache.fill_dir(dest, make, complete=_has_jars, note=lambda: (
        f"spark={version} spark-sql-kafka={src_version} spark-token-provider-kafka={token_version}"))
    jars = cached_jars(version)
    if not jars:
        raise KctlError(f"resolution of {kafka_source_coordinate(version)} produced no jars in {dest}")
    return jars


DELTA_GROUP = "io.delta"
_DELTA_HINT = "pass the jars with --jars (delta-spark, delta-storage and the Kafka source's), or use --packages"


def delta_version() -> str:
    """The version of the installed ``delta-spark`` Python package: its jars must be the same release."""
    from importlib import metadata

    require("delta", "stream")
    return metadata.version("delta-spark")


def delta_coordinates(version: str | None = None) -> list[str]:
    v = version or delta_version()
    return [f"{DELTA_GROUP}:delta-spark_{scala_binary_version()}:{v}"]


def delta_cache_dir(version: str | None = None) -> Path:
    return cache.root() / "jars" / f"delta-{version or delta_version()}"


def resolve_delta_jars(*, version: str | None = None, timeout_s: float = 600.0) -> list[Path]:
    """Return the Delta Lake jars (delta-spark, delta-storage), resolving them into the cache on first use."""
    version = version or delta_version()
    dest = delta_cache_dir(version)
    if _has_jars(dest):
        return sorted(dest.glob("*.jar"))
    what = delta_coordinates(version)[0]
    maven.mvn_or_fail(f"Delta Lake {version} (not cached in {dest})", _DELTA_HINT)
    shipped = {_artifact_name(j.name) for j in (spark_home() / "jars").glob("*.jar")}

    def make(work: Path) -> None:
        # scala-library, antlr4-runtime: pyspark ships them
        _copy_unshipped([maven.Artifact.parse(c) for c in delta_coordinates(version)], work, shipped, what=what,
                        timeout_s=timeout_s, hint=_DELTA_HINT)

    cache.fill_dir(dest, make, complete=_has_jars, note=lambda: f"delta={version}")
    jars = sorted(dest.glob("*.jar"))
    if not jars:
        raise KctlError(f"resolution of {what} produced no jars in {dest}")
    return jars


def jars_for_job(explicit: list[str] | None = None, *, s3: bool = False) -> list[str]:
    """Jars to put on ``spark.jars``: ``--jars`` when given (offline), else the resolved caches
    (the Kafka source and Delta Lake; hadoop-aws too for tables on S3)."""
    if explicit:
        missing = [j for j in explicit if not Path(j).exists()]
        if missing:
            raise KctlError(f"jar(s) not found: {', '.join(missing)}")
        return [str(Path(j).resolve()) for j in explicit]
    jars = [str(p) for p in resolve_kafka_jars()] + [str(p) for p in resolve_delta_jars()]
    return jars + [str(p) for p in resolve_s3_jars()] if s3 else jars


HADOOP_GROUP = "org.apache.hadoop"
_S3_HINT = ("pass the jars with --jars (hadoop-aws at the version of pyspark's hadoop-client jars and its "
            "software.amazon.awssdk:bundle, besides the Kafka source's and Delta's)")


def hadoop_version() -> str:
    """The Hadoop release pyspark ships (its hadoop-client-api jar): hadoop-aws must be the same."""
    for jar in (spark_home() / "jars").glob("hadoop-client-api-*.jar"):
        m = _NAME_VERSION.match(jar.name)
        if m:
            return m.group("version")
    raise KctlError(f"no hadoop-client-api jar in {spark_home() / 'jars'}",
                    hint="is pyspark installed whole? (kctl[stream])")


def s3_coordinate(version: str | None = None) -> str:
    return f"{HADOOP_GROUP}:hadoop-aws:{version or hadoop_version()}"


def s3_cache_dir(version: str | None = None) -> Path:
    return cache.root() / "jars" / f"hadoop-aws-{version or hadoop_version()}"


def resolve_s3_jars(*, version: str | None = None, timeout_s: float = 1200.0) -> list[Path]:
    """hadoop-aws (Spark's s3a:// file system) and its AWS SDK bundle, resolved into the cache on first use; the
    hadoop jars pyspark ships are left out."""
    version = version or hadoop_version()
    dest = s3_cache_dir(version)
    if _has_jars(dest):
        return sorted(dest.glob("*.jar"))
    what = s3_coordinate(version)
    maven.mvn_or_fail(f"hadoop-aws {version} (not cached in {dest})", _S3_HINT)
    shipped = {_artifact_name(j.name) for j in (spark_home() / "jars").glob("*.jar")}

    def make(work: Path) -> None:
        _copy_unshipped([maven.Artifact.parse(what)], work, shipped, what=what, timeout_s=timeout_s, hint=_S3_HINT)

    cache.fill_dir(dest, make, complete=_has_jars, note=lambda: f"hadoop-aws={version}")
    jars = sorted(dest.glob("*.jar"))
    if not jars:
        raise KctlError(f"resolution of {what} produced no jars in {dest}")
    return jars
