# Sourced by zookeeper-start and kafka-start: the JVM flags kafka-run-class.sh
# of Kafka 3.9 uses, each overridable from the environment like there.
# The image's distribution; a host's systemd units set KAFKA_HOME to the one kctl's bundle installed.
KAFKA_HOME="${KAFKA_HOME:-/opt/kafka}"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true}"

# cds_opts SERVICE: the flags that map the image's class-data sharing archive of SERVICE (zookeeper, kafka;
# made at image build by cds-archive), none when the image has none. An archive that does not fit the JVM
# is skipped by the JVM itself with a warning (-Xshare:auto, Java's default).
cds_opts() {
  local archive="$KAFKA_HOME/cds/$1.jsa"
  if [ -r "$archive" ]; then
    echo "-XX:SharedArchiveFile=$archive"
  fi
}

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

# supervise SERVICE: run first by zookeeper-start and kafka-start. supervisord starts a process that exits
# on its own again (autorestart=true; a stop through supervisorctl stays stopped). This adds what supervisord
# lacks for a process that had been running:
# - a hold: while /tmp/kctl-hold-SERVICE exists (a failure drill or a test keeps the process down), wait in
#   `held` (its command line names neither wrapper nor JVM, so the process shows as STOPPED), then start;
# - a back-off and a limit: every start since the last deliberate one is recorded; a start with earlier ones
#   within KCTL_RESTART_INTERVAL s (1800) is a crash loop, however long each run lasted (a broker that dies
#   every few minutes loops as surely as one that dies at once); it waits 1, 2, 4, then 8 s, and once
#   KCTL_RESTART_LIMIT (5) starts lie within the interval it gives up: exit 75 at once, a failed start to
#   supervisord (it exits within startsecs), which after startretries marks the program FATAL; `kctl
#   status` shows the service FAILED (its supervisor gave up) until `kctl up` or `kctl restart` starts it.
#   (systemd's StartLimitBurst within StartLimitIntervalSec, which the hosts' units use, is the same rule.)
# A deliberate start (kctl's supervisorctl start) removes the record first: it is no crash.
# Under systemd (a host's units set KCTL_SUPERVISOR=systemd) it does nothing: Restart=on-failure, RestartSec
# and StartLimitBurst are systemd's own back-off and limit, and a drill stops the unit itself.
supervise() {
  local svc="$1"; local rec="/tmp/kctl-starts-$svc" now t kept="" count=0 delay
  local interval="${KCTL_RESTART_INTERVAL:-1800}" limit="${KCTL_RESTART_LIMIT:-5}"
  if [ "${KCTL_SUPERVISOR:-}" = systemd ]; then
    return 0
  fi
  if [ -e "/tmp/kctl-hold-$svc" ]; then
    exec /usr/local/lib/kctl/held "$svc"
  fi
  now="$(date +%s)"
  if [ -r "$rec" ]; then
    for t in $(head -n 1 "$rec"); do
      case "$t" in *[!0-9]*|"") continue ;; esac
      if [ $((now - t)) -lt "$interval" ]; then kept="$kept $t"; count=$((count + 1)); fi
    done
  fi
  echo "${kept# } $now" | sed 's/^ //' > "$rec"
  if [ "$count" -ge "$limit" ]; then
    echo "kctl: $svc started $count times within ${interval}s without a deliberate start; giving up" \
      "(\`kctl up\` or \`kctl restart ${KCTL_NODE:-<node>} --service $svc\` starts it again)" >&2
    exit 75
  fi
  if [ "$count" -gt 0 ]; then
    delay=$((1 << (count > 4 ? 3 : count - 1)))
    echo "kctl: $svc restarted after an unexpected exit (restart $count in a row); waiting ${delay}s first"
    sleep "$delay"
  fi
}

# kraft_storage SERVICE CONF DIR...: the KRaft storage of SERVICE (controller: its metadata log; kafka: a KRaft
# broker's log dirs) formatted with the cluster's id (/etc/kctl/cluster-id), only where kctl made it. kctl leaves
# a permit, /var/opt/kctl/.kctl-format-SERVICE on the node's data storage, when it makes that storage (a new
# node's data dir: `kctl up` of a new cluster, `kctl node add`; a migration's controllers; `kctl node
# format-storage`); the first start that finds the storage formatted takes the permit away. A DIR without
# meta.properties and no permit is a lost, wiped or unmounted disk: Kafka refuses such storage, and so does
# this (the image's `unformatted` says so in the service's log and waits).
KCTL_FORMAT_PERMIT_DIR="${KCTL_FORMAT_PERMIT_DIR:-/var/opt/kctl}"
kraft_storage() {
  local svc="$1" conf="$2" d cluster_id
  shift 2
  local permit="$KCTL_FORMAT_PERMIT_DIR/.kctl-format-$svc" missing=()
  for d in "$@"; do [ -e "$d/meta.properties" ] || missing+=("$d"); done
  if [ "${#missing[@]}" -eq 0 ]; then
    rm -f "$permit"
    return 0
  fi
  if [ ! -e "$permit" ]; then
    exec "${KCTL_LIB_DIR:-/usr/local/lib/kctl}/unformatted" "$svc" "${missing[@]}"
  fi
  cluster_id="$(tr -d '[:space:]' < "${KCTL_CLUSTER_ID_FILE:-/etc/kctl/cluster-id}" 2>/dev/null || true)"
  [ -n "$cluster_id" ] || { echo "kctl: ${KCTL_CLUSTER_ID_FILE:-/etc/kctl/cluster-id} is missing or empty" >&2; exit 64; }
  mkdir -p "${missing[@]}"
  echo "kctl: formatting ${missing[*]} for cluster $cluster_id (storage kctl made: $permit)"
  # A controller of a secured cluster made on KRaft: its bootstrap metadata gets the admin's SCRAM credential
  # (KIP-900's --add-scram), read by the tool from a secret file (@FILE: one argument a line), never an argument
  # of a process; the tool's echo of the bootstrap records (Kafka 4.2+) keeps the credential's keys out of the log.
  local extra=() scram_args="${KCTL_SECRETS_DIR:-/run/kctl/secrets}/kraft-format.args"
  if [ "$svc" = controller ] && [ -r "$scram_args" ]; then
    extra=("@$scram_args")
    echo "kctl: the bootstrap metadata gets the SCRAM credential of ${KCTL_SCRAM_USER:-the admin} (--add-scram in" \
      "$scram_args)"
  fi
  env -u KAFKA_JMX_PORT -u KAFKA_OPTS KAFKA_HEAP_OPTS="-Xmx128m" LOG_DIR="$LOG_DIR" \
    KAFKA_LOG4J_OPTS="-Dlog4j.configuration=file:$KAFKA_HOME/config/tools-log4j.properties" \
    "$KAFKA_HOME/bin/kafka-storage.sh" format --cluster-id="$cluster_id" --config "$conf" --ignore-formatted \
    ${extra[@]+"${extra[@]}"} 2>&1 \
    | sed -E -e 's/UserScramCredentialRecord\([^)]*\)/UserScramCredentialRecord(...)/g' -e '/[Pp]assword/d'
  rm -f "$permit"
}
