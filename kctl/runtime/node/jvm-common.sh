# Sourced by zookeeper-start and kafka-start: the JVM flags kafka-run-class.sh
# of Kafka 3.9 uses, each overridable from the environment like there.
KAFKA_HOME=/opt/kafka
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true}"

# zk_srvr HOST PORT: print the reply of ZooKeeper's `srvr` four-letter word.
zk_srvr() {
  timeout 5 nc -w 3 "$1" "$2" <<<"srvr" 2>/dev/null
}
