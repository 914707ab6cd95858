#!/bin/bash
# kctl node entrypoint: runs as root because the host directories mounted on
# /var/opt/kctl and /var/log/kctl are created by root on the host; it prepares
# them for the uid/gid 555 "logger" user and hands over to supervisord, which
# runs ZooKeeper and/or Kafka as "logger".
# With arguments it runs them instead (e.g. `docker run IMAGE java -version`).
set -euo pipefail

if [ "$#" -gt 0 ]; then
  exec "$@"
fi

CONF_DIR=/etc/kctl
DATA_DIR=/var/opt/kctl
LOG_DIR=/var/log/kctl
LIB_DIR=/usr/local/lib/kctl
SERVICES="${KCTL_SERVICES:-zookeeper,kafka}"

log() { echo "kctl-entrypoint[${KCTL_NODE:-$(hostname)}]: $*" >&2; }
die() { log "ERROR: $*"; exit 64; }

# prop FILE KEY: last value of KEY in a Java properties / zoo.cfg file.
prop() {
  sed -n -E "s/^[[:space:]]*$2[[:space:]]*[=:][[:space:]]*(.*[^[:space:]])[[:space:]]*$/\1/p" "$1" | tail -n 1
}

mkdir -p "$DATA_DIR" "$LOG_DIR"

# Secrets (secured clusters): the read-only mount belongs to the host user; the JVMs run as
# logger, so they get a private copy it owns, mode 0600 in a 0700 directory.
SECRETS_MOUNT=/etc/kctl-secrets
SECRETS_DIR=/run/kctl/secrets
if [ -d "$SECRETS_MOUNT" ]; then
  rm -rf "$SECRETS_DIR"
  install -d -m 0700 -o 555 -g 555 "$SECRETS_DIR"
  for f in "$SECRETS_MOUNT"/*; do
    [ -f "$f" ] && install -m 0600 -o 555 -g 555 "$f" "$SECRETS_DIR/"
  done
fi
rm -f /etc/supervisor/conf.d/*.conf

for svc in ${SERVICES//,/ }; do
  case "$svc" in
    zookeeper)
      [ -r "$CONF_DIR/zoo.cfg" ] || die "$CONF_DIR/zoo.cfg is missing (KCTL_SERVICES=$SERVICES)"
      data_dir="$(prop "$CONF_DIR/zoo.cfg" dataDir)"
      [ -n "$data_dir" ] || die "no dataDir in $CONF_DIR/zoo.cfg"
      data_log_dir="$(prop "$CONF_DIR/zoo.cfg" dataLogDir)"
      mkdir -p "$data_dir" ${data_log_dir:+"$data_log_dir"} "$LOG_DIR/zookeeper"
      if [ -r "$CONF_DIR/myid" ]; then
        # ZooKeeper reads myid from dataDir only; the config dir is read-only.
        cp "$CONF_DIR/myid" "$data_dir/myid"
      elif grep -qE '^[[:space:]]*server\.[0-9]+' "$CONF_DIR/zoo.cfg"; then
        die "$CONF_DIR/myid is missing but zoo.cfg lists an ensemble"
      fi
      ;;
    kafka)
      [ -r "$CONF_DIR/server.properties" ] || die "$CONF_DIR/server.properties is missing (KCTL_SERVICES=$SERVICES)"
      log_dirs="$(prop "$CONF_DIR/server.properties" log.dirs)"
      [ -n "$log_dirs" ] || log_dirs="$(prop "$CONF_DIR/server.properties" log.dir)"
      for d in ${log_dirs//,/ }; do mkdir -p "$d"; done
      mkdir -p "$LOG_DIR/kafka"
      ;;
    mirrormaker)
      [ -r "$CONF_DIR/mm2.properties" ] || die "$CONF_DIR/mm2.properties is missing (KCTL_SERVICES=$SERVICES)"
      # mm2.properties is the host user's, mode 0600: MirrorMaker's user gets a private copy, as the secrets do
      install -d -m 0700 -o 555 -g 555 /run/kctl/mirror
      install -m 0600 -o 555 -g 555 "$CONF_DIR/mm2.properties" /run/kctl/mirror/mm2.properties
      mkdir -p "$LOG_DIR/mirrormaker"
      ;;
    *)
      die "unknown service '$svc' in KCTL_SERVICES=$SERVICES (expected zookeeper, kafka or mirrormaker)"
      ;;
  esac
  cp "$LIB_DIR/supervisor-$svc.conf" "/etc/supervisor/conf.d/$svc.conf"
  if [ "$svc" = zookeeper ]; then
    # A node with a ZooKeeper may run a KRaft controller too (a migration to KRaft); its wrapper exits at once
    # while kctl has written no /etc/kctl/controller.properties (controller-start).
    mkdir -p "$LOG_DIR/controller"
    cp "$LIB_DIR/supervisor-controller.conf" /etc/supervisor/conf.d/controller.conf
  fi
done

# Only touch what is not owned yet: a recursive chown of a large Kafka log dir
# on every start would be slow.
find "$DATA_DIR" "$LOG_DIR" \( ! -user 555 -o ! -group 555 \) -exec chown -h 555:555 {} +

# supervisord starts its programs only after its main loop's first wait, which lasts its full second when there
# is nothing to read: a connection to its socket as soon as it listens ends that wait, and the programs start a
# second sooner (bounded: 2 s of tries; a socket file left by an earlier run of the container refuses until the
# new supervisord listens).
(
  for _ in $(seq 100); do
    nc -U -z /run/supervisor.sock 2>/dev/null && exit 0
    sleep 0.02
  done
) &

log "services: $SERVICES; starting supervisord"
exec /usr/bin/supervisord -n -c /etc/supervisor/supervisord.conf
