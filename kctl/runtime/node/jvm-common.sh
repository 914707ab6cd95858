# Sourced by zookeeper-start and kafka-start: the JVM flags kafka-run-class.sh
# of Kafka 3.9 uses, each overridable from the environment like there.
KAFKA_HOME=/opt/kafka
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true}"

# zk_4lw HOST PORT WORD: print ZooKeeper's reply to a four-letter word.
# bash /dev/tcp rather than nc: netcat-openbsd may quit on stdin EOF before the
# reply arrives; here `cat` reads until ZooKeeper closes the connection.
zk_4lw() {
  timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "%s" "$3" >&3 && cat <&3' _ "$1" "$2" "$3" 2>/dev/null
}

zk_srvr() {
  zk_4lw "$1" "$2" srvr
}

# conf_prop FILE KEY: last value of KEY in a Java properties / zoo.cfg file.
conf_prop() {
  sed -n -E "s/^[[:space:]]*$2[[:space:]]*[=:][[:space:]]*(.*[^[:space:]])[[:space:]]*$/\1/p" "$1" 2>/dev/null | tail -n 1
}
