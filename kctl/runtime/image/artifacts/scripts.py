"""The ``bin/`` scripts and tools log4j configuration of a Kafka 3.9 release layout.

A distribution resolved from Maven Central has jars only; these scripts give it
the tarball's ``bin/*.sh`` names. A tarball keeps its own scripts; only missing
ones are filled in, so every prepared distribution has all of :data:`TOOLS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kctl.contract import release


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
    # A migration to KRaft: a controller formats its metadata log; kctl asks the controller quorum for its state.
    Tool("kafka-storage.sh", "kafka.tools.StorageTool"),
    Tool("kafka-metadata-quorum.sh", "org.apache.kafka.tools.MetadataQuorumCommand"),
    # On KRaft: a removed broker's registration taken out of the controllers (`unregister --id`).
    Tool("kafka-cluster.sh", "org.apache.kafka.tools.ClusterTool"),
    Tool("connect-mirror-maker.sh", "org.apache.kafka.connect.mirror.MirrorMaker", heap="-Xmx256M"),
)

# Kafka 4.0 moved the last Scala tools above to org.apache.kafka.tools and removed those of ZooKeeper mode
# (checked against the jars of 4.1.1).
_MOVED_IN_4 = {
    "kafka-console-producer.sh": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-broker-api-versions.sh": "org.apache.kafka.tools.BrokerApiVersionsCommand",
}
_ZOOKEEPER_TOOLS = ("zookeeper-shell.sh", "zookeeper-security-migration.sh")
TOOLS_4: tuple[Tool, ...] = tuple(
    Tool(t.script, _MOVED_IN_4.get(t.script, t.main_class), t.heap, t.prefix_args, t.usage)
    for t in TOOLS if t.script not in _ZOOKEEPER_TOOLS)
# Later 4.x releases moved more (checked against the jars of 4.3.1: the log dump; 4.4.0's also move
# kafka-configs.sh's ConfigCommand to org.apache.kafka.tools).
_MOVED_IN_4_3 = {"kafka-dump-log.sh": "org.apache.kafka.tools.DumpLogSegments"}
TOOLS_4_3: tuple[Tool, ...] = tuple(
    Tool(t.script, _MOVED_IN_4_3.get(t.script, t.main_class), t.heap, t.prefix_args, t.usage) for t in TOOLS_4)


def tools_of(kafka_version: str) -> tuple[Tool, ...]:
    """The tools a distribution of ``kafka_version`` has (with their main classes in that release)."""
    if release(kafka_version) < (4, 0):
        return TOOLS
    return TOOLS_4_3 if release(kafka_version) >= (4, 3) else TOOLS_4


# What every prepared distribution's bin/ holds: a tarball's own scripts, and ours where it lacks one.
SCRIPTS = ("kafka-run-class.sh", *(t.script for t in TOOLS))

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


def write_bin_scripts(root: Path, *, overwrite: bool, kafka_version: str = "3.9.1") -> list[str]:
    """Write ``kafka-run-class.sh`` and the tool scripts of ``kafka_version``; returns the names written."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {"kafka-run-class.sh": RUN_CLASS_SH} | {t.script: render_tool_script(t)
                                                      for t in tools_of(kafka_version)}
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
