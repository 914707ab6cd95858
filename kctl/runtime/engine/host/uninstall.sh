#!/bin/bash
# uninstall.sh: removes what install.sh installed on this host (run as root; `kctl down` of engine hosts runs
# it over ssh): the units (stopped first, Kafka before ZooKeeper or the KRaft controller), /opt/kctl, /etc/kctl,
# /var/log/kctl, /run/kctl and the service user and group. The data in /var/opt/kctl (ZooKeeper's snapshots and
# transaction logs, a KRaft controller's metadata log, Kafka's log dirs) is kept unless --purge-data is given.
set -euo pipefail
HERE="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
PURGE=0
for arg in "$@"; do
  case "$arg" in
    --purge-data) PURGE=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "uninstall.sh: unknown option $arg (--purge-data, --help)" >&2; exit 64 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "uninstall.sh: run as root (sudo $0)" >&2; exit 1; }
U=logger
if [ -r "$HERE/bundle.env" ]; then
  # shellcheck source=/dev/null
  . "$HERE/bundle.env"
  U="$KCTL_SERVICE_USER"
fi

removed=0
gone() { echo "removed: $1"; removed=$((removed + 1)); }
for svc in spark-worker spark-master kafka controller zookeeper; do  # the Spark cluster's first (spark:)
  unit="kctl-$svc.service"
  if [ -e "/etc/systemd/system/$unit" ]; then
    systemctl disable --now "$unit" >/dev/null 2>&1 || true
    rm -f "/etc/systemd/system/$unit"
    gone "/etc/systemd/system/$unit"
  fi
done
systemctl daemon-reload
systemctl reset-failed kctl-kafka.service kctl-controller.service kctl-zookeeper.service kctl-spark-worker.service \
  kctl-spark-master.service >/dev/null 2>&1 || true
# Spark's work and recovery state is scratch (install-spark.sh), not data: removed with the node.
if [ -e /var/opt/kctl/spark ]; then rm -rf /var/opt/kctl/spark; gone /var/opt/kctl/spark; fi
for d in /opt/kctl /etc/kctl /var/log/kctl /run/kctl; do
  if [ -e "$d" ]; then rm -rf "$d"; gone "$d"; fi
done
if [ "$PURGE" -eq 1 ] && [ -e /var/opt/kctl ]; then
  rm -rf /var/opt/kctl
  gone /var/opt/kctl
fi
if getent passwd "$U" >/dev/null; then userdel "$U"; gone "user $U"; fi
if getent group "$U" >/dev/null; then groupdel "$U"; gone "group $U"; fi
[ -e /var/opt/kctl ] && echo "kept: /var/opt/kctl (data; --purge-data removes it)"
echo "kctl-uninstall: $removed removed"
