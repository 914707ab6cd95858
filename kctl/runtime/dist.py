"""Where the Kafka distribution baked into the node image comes from.

In order: the operator's ``--kafka-dist`` (a ``.tgz`` or an extracted
directory), the cache, Apache's official tarball (checked against its
``.sha512``), and finally the same jars resolved from Maven Central with
generated ``bin/*.sh`` wrappers that match the tarball's script names.

Every prepared distribution is a directory with ``bin/``, ``libs/``,
``config/tools-log4j.properties`` and a ``kctl-dist.json`` that records where it
came from, the ZooKeeper version found in ``libs/`` and a digest of its
content (its identity, part of the image's build hash).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kctl.errors import KctlError

Progress = Callable[[str], None]

MANIFEST = "kctl-dist.json"
SOURCE_OPERATOR = "operator"
SOURCE_APACHE = "apache"
SOURCE_MAVEN = "maven"

APACHE_MIRRORS = (
    "https://downloads.apache.org/kafka",
    "https://archive.apache.org/dist/kafka",
)
# Short connect timeout so that an unreachable host fails fast; the read
# timeout only bounds a stalled transfer, not a slow one.
HTTP_TIMEOUT_SECONDS = 10.0

MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
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
    "org.slf4j:slf4j-reload4j:1.7.36",
)


@dataclass(frozen=True)
class Tool:
    """A ``bin/*.sh`` script of the Kafka 3.9 tarball: its main class and default heap."""

    script: str
    main_class: str
    heap: str | None = None
    prefix_args: str = ""
    usage: str | None = None


# Verified against the jars of Kafka 3.9.1 (several tools moved from Scala
# ``kafka.*`` to ``org.apache.kafka.tools.*`` in 3.5-3.8; ConsoleProducer and
# ConfigCommand had not yet in 3.9).
TOOLS: tuple[Tool, ...] = (
    Tool("kafka-topics.sh", "org.apache.kafka.tools.TopicCommand"),
    Tool("kafka-configs.sh", "kafka.admin.ConfigCommand"),
    Tool("kafka-consumer-groups.sh", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"),
    Tool("kafka-console-producer.sh", "kafka.tools.ConsoleProducer", heap="-Xmx512M"),
    Tool("kafka-console-consumer.sh", "org.apache.kafka.tools.consumer.ConsoleConsumer", heap="-Xmx512M"),
    Tool("kafka-producer-perf-test.sh", "org.apache.kafka.tools.ProducerPerformance", heap="-Xmx512M"),
    Tool("kafka-consumer-perf-test.sh", "org.apache.kafka.tools.ConsumerPerformance", heap="-Xmx512M"),
    Tool(
        "zookeeper-shell.sh",
        "org.apache.zookeeper.ZooKeeperMainWithTlsSupportForKafka",
        prefix_args="-server ",
        usage="zookeeper_host:port[/path] [-zk-tls-config-file file] [args...]",
    ),
    Tool("kafka-reassign-partitions.sh", "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"),
    Tool("kafka-leader-election.sh", "org.apache.kafka.tools.LeaderElectionCommand"),
    Tool("kafka-acls.sh", "kafka.admin.AclCommand"),
    Tool("kafka-broker-api-versions.sh", "kafka.admin.BrokerApiVersionsCommand"),
    Tool("kafka-delete-records.sh", "org.apache.kafka.tools.DeleteRecordsCommand"),
    Tool("kafka-log-dirs.sh", "org.apache.kafka.tools.LogDirsCommand"),
    Tool("kafka-get-offsets.sh", "org.apache.kafka.tools.GetOffsetShell"),
    Tool("kafka-dump-log.sh", "kafka.tools.DumpLogSegments"),
    Tool("kafka-features.sh", "org.apache.kafka.tools.FeatureCommand"),
    Tool("kafka-transactions.sh", "org.apache.kafka.tools.TransactionsCommand"),
    Tool("kafka-delegation-tokens.sh", "org.apache.kafka.tools.DelegationTokenCommand"),
    Tool("kafka-replica-verification.sh", "org.apache.kafka.tools.ReplicaVerificationTool"),
    Tool("kafka-e2e-latency.sh", "org.apache.kafka.tools.EndToEndLatency"),
    Tool("kafka-verifiable-producer.sh", "org.apache.kafka.tools.VerifiableProducer", heap="-Xmx512M"),
    Tool("kafka-verifiable-consumer.sh", "org.apache.kafka.tools.VerifiableConsumer", heap="-Xmx512M"),
    Tool("zookeeper-security-migration.sh", "kafka.admin.ZkSecurityMigrator"),
)

# What a usable distribution must contain (relative to its root).
REQUIRED_SCRIPTS = (
    "kafka-run-class.sh",
    "kafka-topics.sh",
    "kafka-configs.sh",
    "kafka-consumer-groups.sh",
    "kafka-console-producer.sh",
    "kafka-console-consumer.sh",
    "kafka-producer-perf-test.sh",
    "kafka-consumer-perf-test.sh",
    "zookeeper-shell.sh",
)
REQUIRED_CLASSES = (
    "kafka.Kafka",
    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    *(t.main_class for t in TOOLS),
)

RUN_CLASS_SH = """\
#!/bin/bash
# Generated by kctl: the subset of Kafka 3.9's bin/kafka-run-class.sh that a
# release layout (libs/, config/) needs. Same environment variables.
if [ $# -lt 1 ]; then
  echo "USAGE: $0 [-daemon] [-name servicename] [-loggc] classname [opts]"
  exit 1
fi

base_dir=$(cd "$(dirname "$0")/.." && pwd)
CLASSPATH="${CLASSPATH:+$CLASSPATH:}$base_dir/libs/*"

if [ -z "$KAFKA_JMX_OPTS" ]; then
  KAFKA_JMX_OPTS="-Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.authenticate=false \
 -Dcom.sun.management.jmxremote.ssl=false "
fi
if [ $JMX_PORT ]; then
  KAFKA_JMX_OPTS="$KAFKA_JMX_OPTS -Dcom.sun.management.jmxremote.port=$JMX_PORT "
  if ! echo "$KAFKA_JMX_OPTS" | grep -qF -- '-Dcom.sun.management.jmxremote.rmi.port=' ; then
    KAFKA_JMX_OPTS="$KAFKA_JMX_OPTS -Dcom.sun.management.jmxremote.rmi.port=$JMX_PORT "
  fi
fi

if [ "x$LOG_DIR" = "x" ]; then
  LOG_DIR="$base_dir/logs"
fi
if [ "x$KAFKA_LOG4J_OPTS" = "x" ]; then
  KAFKA_LOG4J_OPTS="-Dlog4j.configuration=file:$base_dir/config/tools-log4j.properties"
else
  if [ ! -d "$LOG_DIR" ]; then
    mkdir -p "$LOG_DIR"
  fi
fi
KAFKA_LOG4J_OPTS="-Dkafka.logs.dir=$LOG_DIR $KAFKA_LOG4J_OPTS"

if [ -z "$JAVA_HOME" ]; then
  JAVA="java"
else
  JAVA="$JAVA_HOME/bin/java"
fi
if [ -z "$KAFKA_HEAP_OPTS" ]; then
  KAFKA_HEAP_OPTS="-Xmx256M"
fi
if [ -z "$KAFKA_JVM_PERFORMANCE_OPTS" ]; then
  KAFKA_JVM_PERFORMANCE_OPTS="-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 \
-Djava.awt.headless=true"
fi

while [ $# -gt 0 ]; do
  case $1 in
    -name) DAEMON_NAME=$2; CONSOLE_OUTPUT_FILE=$LOG_DIR/$DAEMON_NAME.out; shift 2 ;;
    -loggc) if [ -z "$KAFKA_GC_LOG_OPTS" ]; then GC_LOG_ENABLED="true"; fi; shift ;;
    -daemon) DAEMON_MODE="true"; shift ;;
    *) break ;;
  esac
done

if [ "x$GC_LOG_ENABLED" = "xtrue" ]; then
  KAFKA_GC_LOG_OPTS="-Xlog:gc*:file=$LOG_DIR/$DAEMON_NAME-gc.log:time,tags:filecount=10,filesize=100M"
fi

if [ "x$DAEMON_MODE" = "xtrue" ]; then
  nohup "$JAVA" $KAFKA_HEAP_OPTS $KAFKA_JVM_PERFORMANCE_OPTS $KAFKA_GC_LOG_OPTS $KAFKA_JMX_OPTS \
$KAFKA_LOG4J_OPTS -cp "$CLASSPATH" $KAFKA_OPTS "$@" > "$CONSOLE_OUTPUT_FILE" 2>&1 < /dev/null &
else
  exec "$JAVA" $KAFKA_HEAP_OPTS $KAFKA_JVM_PERFORMANCE_OPTS $KAFKA_GC_LOG_OPTS $KAFKA_JMX_OPTS \
$KAFKA_LOG4J_OPTS -cp "$CLASSPATH" $KAFKA_OPTS "$@"
fi
"""

TOOLS_LOG4J = """\
log4j.rootLogger=WARN, stderr

log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
"""


@dataclass(frozen=True)
class Dist:
    """A prepared Kafka distribution directory."""

    path: Path
    kafka_version: str
    scala_version: str
    zookeeper_version: str
    source: str
    identity: str


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def dist_name(kafka_version: str, scala_version: str) -> str:
    return f"kafka_{scala_version}-{kafka_version}"


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/kctl/dist``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kctl" / "dist"


# --- checksums ---------------------------------------------------------------

_HEX_ONLY = re.compile(r"[^0-9a-fA-F]")


def parse_sha512(text: str) -> str:
    """The SHA-512 digest in an Apache ``.sha512`` file, lower-case hex.

    Accepts the ``gpg --print-md SHA512`` layout Apache uses (``name: 8 groups
    of hex`` wrapped over several lines, upper case) as well as the
    coreutils ``sha512sum`` layout (``hex  name``) and a bare digest.
    """
    body = text.strip()
    if not body:
        raise KctlError("empty SHA-512 file")
    first = body.split()[0]
    if len(first) == 128 and not _HEX_ONLY.search(first):
        return first.lower()  # sha512sum layout or bare digest
    # gpg layout: "<file name>: <hex groups...>"; the name may contain no ':'.
    _, sep, rest = body.partition(":")
    digest = _HEX_ONLY.sub("", rest if sep else body)
    if len(digest) != 128:
        raise KctlError(
            "cannot find a SHA-512 digest in the checksum file",
            f"expected 128 hex digits, found {len(digest)}: {body[:200]!r}",
        )
    return digest.lower()


def sha512_of(path: Path) -> str:
    h = hashlib.sha512()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha512(path: Path, expected: str) -> None:
    actual = sha512_of(path)
    if actual != expected.lower():
        raise KctlError(
            f"SHA-512 mismatch for {path.name}",
            f"expected {expected[:16]}…, got {actual[:16]}…; the download is corrupt or tampered with "
            f"— delete {path} and retry, or pass a verified tarball with --kafka-dist",
        )


# --- inspecting a distribution -----------------------------------------------

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


def _identity(root: Path) -> str:
    return hashlib.sha256((root / MANIFEST).read_bytes()).hexdigest()


def _dist_from(root: Path) -> Dist | None:
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
            identity=_identity(root),
        )
    except KeyError:
        return None


# --- generated bin scripts ---------------------------------------------------


def render_tool_script(tool: Tool) -> str:
    lines = ["#!/bin/bash", f"# Generated by kctl: equivalent of Kafka 3.9's bin/{tool.script}."]
    if tool.usage:
        lines += [
            "if [ $# -lt 1 ];",
            "then",
            f'  echo "USAGE: $0 {tool.usage}"',
            "  exit 1",
            "fi",
        ]
    if tool.heap:
        lines += [
            'if [ "x$KAFKA_HEAP_OPTS" = "x" ]; then',
            f'    export KAFKA_HEAP_OPTS="{tool.heap}"',
            "fi",
        ]
    lines.append(f'exec $(dirname $0)/kafka-run-class.sh {tool.main_class} {tool.prefix_args}"$@"')
    return "\n".join(lines) + "\n"


def write_bin_scripts(root: Path, *, overwrite: bool) -> list[str]:
    """Write ``kafka-run-class.sh`` and the tool scripts; returns the names written."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {"kafka-run-class.sh": RUN_CLASS_SH} | {t.script: render_tool_script(t) for t in TOOLS}
    written = []
    for name, text in scripts.items():
        target = bin_dir / name
        if target.exists() and not overwrite:
            continue
        target.write_text(text)
        written.append(name)
    for script in bin_dir.glob("*.sh"):
        script.chmod(0o755)
    config = root / "config"
    config.mkdir(exist_ok=True)
    if overwrite or not (config / "tools-log4j.properties").exists():
        (config / "tools-log4j.properties").write_text(TOOLS_LOG4J)
    return written


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
    write_bin_scripts(root, overwrite=False)
    missing = missing_classes(libs, REQUIRED_CLASSES)
    if missing:
        raise KctlError(
            f"the Kafka distribution from {origin} lacks classes kctl needs: {', '.join(missing)}",
            "use the official kafka_2.13-3.9.1.tgz with --kafka-dist",
        )
    zk = zookeeper_version_in(libs)
    if zk is None:
        raise KctlError(f"no zookeeper-X.Y.Z.jar in {libs}", "Kafka 3.x ships ZooKeeper in libs/")
    manifest = {
        "kafka_version": kafka_version,
        "scala_version": scala_version,
        "zookeeper_version": zk,
        "source": source,
        "origin": origin,
        "content_sha256": content_digest(root),
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    dist = _dist_from(root)
    assert dist is not None
    return dist


# --- sources -------------------------------------------------------------------


def _extract_tgz(tgz: Path, dest: Path) -> Path:
    """Extract a Kafka tarball into ``dest``; returns the distribution root inside it."""
    try:
        with tarfile.open(tgz, "r:gz") as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:  # Python < 3.11.4
                tf.extractall(dest)  # noqa: S202
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise KctlError(f"cannot extract {tgz}: {exc}", "is it a Kafka .tgz?") from exc
    roots = [p for p in dest.iterdir() if p.is_dir()]
    if len(roots) == 1 and (roots[0] / "libs").is_dir():
        return roots[0]
    if (dest / "libs").is_dir():
        return dest
    raise KctlError(f"{tgz} does not look like a Kafka distribution", "expected a top directory with libs/")


def _fresh_dir(parent: Path, prefix: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def _install(tmp_root: Path, final: Path) -> None:
    """Move a finished distribution into place (atomic rename within the cache)."""
    if final.exists():
        shutil.rmtree(final)
    tmp_root.rename(final)


def _from_operator(path: Path, kafka_version: str, scala_version: str, progress: Progress | None) -> Dist:
    path = path.expanduser().resolve()
    if not path.exists():
        raise KctlError(f"--kafka-dist {path} does not exist", "pass a Kafka .tgz or its extracted dir")
    key = hashlib.sha256()
    if path.is_file():
        key.update(f"tgz {sha512_of(path)}".encode())
    else:
        key.update(f"dir {path}\n".encode())
        for f in sorted(path.rglob("*")):
            if f.is_file():
                key.update(f"{f.relative_to(path)} {f.stat().st_size} {f.stat().st_mtime_ns}\n".encode())
    cached = cache_root() / f"operator-{key.hexdigest()[:16]}"
    dist = _dist_from(cached)
    if dist is not None:
        _say(progress, f"using the cached copy of --kafka-dist {path}")
        return dist
    _say(progress, f"preparing the Kafka distribution from {path}")
    work = _fresh_dir(cache_root(), ".operator-")
    try:
        if path.is_file():
            root = _extract_tgz(path, work / "x")
        else:
            if not (path / "libs").is_dir():
                raise KctlError(f"--kafka-dist {path} has no libs/", "pass the extracted tarball's top dir")
            root = work / "x"
            shutil.copytree(path, root, symlinks=True)
        finish_dist(root, kafka_version=kafka_version, scala_version=scala_version,
                    source=SOURCE_OPERATOR, origin=str(path))
        _install(root, cached)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    dist = _dist_from(cached)
    assert dist is not None
    return dist


def _http_get(url: str, dest: Path, timeout: float) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "kctl"})
    with urllib.request.urlopen(req, timeout=timeout) as resp, dest.open("wb") as out:  # noqa: S310
        shutil.copyfileobj(resp, out, 1 << 20)


def fetch_apache_tarball(
    kafka_version: str,
    scala_version: str,
    dest_dir: Path,
    *,
    mirrors: Iterable[str] = APACHE_MIRRORS,
    timeout: float = HTTP_TIMEOUT_SECONDS,
    progress: Progress | None = None,
) -> Path | None:
    """Download and verify the official tarball; ``None`` if no mirror answers.

    A checksum mismatch is an error, not a reason to try the next source.
    """
    name = f"{dist_name(kafka_version, scala_version)}.tgz"
    dest_dir.mkdir(parents=True, exist_ok=True)
    for base in mirrors:
        url = f"{base}/{kafka_version}/{name}"
        sha_path = dest_dir / f"{name}.sha512.part"
        tgz_part = dest_dir / f"{name}.part"
        try:
            _say(progress, f"fetching {url}.sha512")
            _http_get(f"{url}.sha512", sha_path, timeout)
            expected = parse_sha512(sha_path.read_text(errors="replace"))
            _say(progress, f"fetching {url}")
            _http_get(url, tgz_part, timeout)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            _say(progress, f"{base} not reachable: {getattr(exc, 'reason', exc)}")
            continue
        finally:
            sha_path.unlink(missing_ok=True)
        try:
            verify_sha512(tgz_part, expected)
        except KctlError:
            tgz_part.unlink(missing_ok=True)
            raise
        final = dest_dir / name
        tgz_part.rename(final)
        return final
    return None


def maven_pom(kafka_version: str, scala_version: str) -> str:
    deps = []
    for coord in MAVEN_ARTIFACTS:
        group, artifact, version = coord.format(scala=scala_version, kafka=kafka_version).split(":")
        deps.append(
            f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>io.kctl</groupId><artifactId>kafka-dist</artifactId>"
        f"<version>{kafka_version}</version><packaging>pom</packaging>\n"
        "  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n</project>\n"
    )


def resolve_maven(
    kafka_version: str, scala_version: str, dest: Path, progress: Progress | None = None
) -> Path:
    """Resolve the jars into ``dest/libs`` with Maven and generate ``bin/``; returns ``dest``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KctlError(
            "no Kafka distribution: Apache's download hosts are unreachable and Maven is not installed",
            "install Maven (apt-get install maven, or `make setup`), or pass --kafka-dist <tarball>",
        )
    dest.mkdir(parents=True, exist_ok=True)
    pom_dir = dest / ".pom"
    pom_dir.mkdir()
    (pom_dir / "pom.xml").write_text(maven_pom(kafka_version, scala_version))
    cmd = [
        mvn, "-q", "-B", "-f", str(pom_dir / "pom.xml"),
        f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
        f"-DoutputDirectory={dest / 'libs'}", "-DincludeScope=runtime",
    ]
    _say(progress, f"resolving Kafka {kafka_version} from Maven Central with {mvn}")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    shutil.rmtree(pom_dir, ignore_errors=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise KctlError(
            f"Maven could not resolve Kafka {kafka_version} (exit {proc.returncode}):\n{tail}",
            "is Maven Central reachable (proxy settings in ~/.m2/settings.xml)? "
            "or pass --kafka-dist kafka_2.13-3.9.1.tgz",
        )
    write_bin_scripts(dest, overwrite=True)
    return dest


def prepare_dist(
    *,
    kafka_version: str = "3.9.1",
    scala_version: str = "2.13",
    kafka_dist: Path | None = None,
    refresh: bool = False,
    progress: Progress | None = None,
) -> Dist:
    """A ready distribution directory, from the first source that works."""
    if kafka_dist is not None:
        return _from_operator(Path(kafka_dist), kafka_version, scala_version, progress)
    name = dist_name(kafka_version, scala_version)
    cached = cache_root() / name
    if not refresh:
        dist = _dist_from(cached)
        if dist is not None and dist.kafka_version == kafka_version:
            _say(progress, f"using cached Kafka distribution {cached} (source: {dist.source})")
            return dist
    work = _fresh_dir(cache_root(), f".{name}-")
    try:
        tgz = fetch_apache_tarball(kafka_version, scala_version, work, progress=progress)
        if tgz is not None:
            root = _extract_tgz(tgz, work / "x")
            source, origin = SOURCE_APACHE, tgz.name
        else:
            _say(progress, "Apache download hosts unreachable; resolving the jars from Maven Central")
            root = resolve_maven(kafka_version, scala_version, work / "x", progress)
            source, origin = SOURCE_MAVEN, "Maven Central"
        finish_dist(root, kafka_version=kafka_version, scala_version=scala_version,
                    source=source, origin=origin)
        _install(root, cached)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    dist = _dist_from(cached)
    assert dist is not None
    return dist
