#!/bin/bash
# uninstall-spark.sh: removes what install-spark.sh installed on this host (run as root): the Spark units (the
# workers' before the master's), Spark's distribution, its configuration, and its work and recovery state in
# /var/opt/kctl/spark (scratch: a worker's executors' files, the master's registrations). `kctl up` runs it
# when kctl.yaml no longer declares a Spark cluster; uninstall.sh removes the same as part of the node.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "uninstall-spark.sh: run as root (sudo $0)" >&2; exit 1; }
removed=0
gone() { echo "removed: $1"; removed=$((removed + 1)); }
for svc in spark-worker spark-master; do
  unit="kctl-$svc.service"
  if [ -e "/etc/systemd/system/$unit" ]; then
    systemctl disable --now "$unit" >/dev/null 2>&1 || true
    rm -f "/etc/systemd/system/$unit"
    gone "/etc/systemd/system/$unit"
  fi
done
systemctl daemon-reload
systemctl reset-failed kctl-spark-worker.service kctl-spark-master.service >/dev/null 2>&1 || true
for d in /opt/kctl/spark /opt/kctl/spark-dists /etc/kctl/spark /var/opt/kctl/spark /opt/kctl/uninstall-spark.sh; do
  if [ -e "$d" ] || [ -L "$d" ]; then rm -rf "$d"; gone "$d"; fi
done
echo "kctl-spark-uninstall: $removed removed"
