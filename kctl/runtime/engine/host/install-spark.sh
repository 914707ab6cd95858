#!/bin/bash
# install-spark.sh: installs this host's part of the cluster's Spark standalone cluster (kctl.yaml's spark
# section; run as root, after this node's install.sh; `kctl up` runs it over ssh). Idempotent.
#
#   Spark                 /opt/kctl/spark-dists/<identity>/spark (the jars and bin/ of the pyspark kctl runs);
#                         /opt/kctl/spark -> it
#   configuration         /etc/kctl/spark/spark-defaults.conf
#   work, recovery, logs  /var/opt/kctl/spark (the service user's: a worker's executors, the master's recovery
#                         state), /var/log/kctl/spark-*.log
#   systemd units         kctl-spark-master.service (the master's host), kctl-spark-worker.service (a worker's)
#
# Every line "changed: WHAT" names what this run changed; "restart: UNIT" a running unit whose files changed (kctl
# restarts it); the last line is "kctl-spark-install: N changed".
set -euo pipefail
HERE="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
die() { echo "install-spark.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0)"
# shellcheck source=/dev/null
. "$HERE/spark.env"
[ -r /opt/kctl/bundle.env ] || die "kctl's bundle of node $KCTL_NODE is not installed on this host (/opt/kctl/bundle.env): \`kctl up\` installs it first"
have="$(. /opt/kctl/bundle.env; echo "$KCTL_CLUSTER $KCTL_NODE")"
[ "$have" = "$KCTL_CLUSTER $KCTL_NODE" ] || die "this host holds node ${have#* } of cluster ${have%% *}, not node $KCTL_NODE of $KCTL_CLUSTER; nothing was changed"
U="$(. /opt/kctl/bundle.env; echo "$KCTL_SERVICE_USER")"

CHANGED=0
RESTART=""
changed() { echo "changed: $1"; CHANGED=$((CHANGED + 1)); }
restart() { for s in "$@"; do case " $RESTART " in *" $s "*) ;; *) RESTART="$RESTART $s" ;; esac; done; }
install_file() {
  local src="$1" dest="$2" mode="$3"; shift 3
  if [ -f "$dest" ] && cmp -s "$src" "$dest" && [ "$(stat -c '%a %U:%G' "$dest")" = "${mode#0} root:root" ]; then
    return 0
  fi
  install -m "$mode" -o root -g root "$src" "$dest"
  changed "$dest"
  restart "$@"
}

# --- Spark's distribution: unpacked beside the running one and renamed into place whole, then /opt/kctl/spark
# switched to it (a rename of a new symlink). The units name the versioned directory: a running daemon keeps its
# jars until its restart.
DISTS=/opt/kctl/spark-dists
new="$DISTS/$KCTL_SPARK_IDENTITY"
[ -d "$DISTS" ] || { install -d -m 0755 "$DISTS"; changed "$DISTS"; }
if [ "$(cat "$new/.kctl-identity" 2>/dev/null || true)" != "$KCTL_SPARK_IDENTITY" ]; then
  tmp="$(mktemp -d "$DISTS/.unpack.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  tar -C "$tmp" -xf "$HERE/spark.tar" || die "cannot unpack $HERE/spark.tar; the installed Spark is left as it was"
  [ -x "$tmp/spark/bin/spark-class" ] && compgen -G "$tmp/spark/jars/spark-core_*.jar" >/dev/null \
    || die "$HERE/spark.tar holds no Spark distribution (bin/spark-class, jars/); the installed one is left as it was"
  echo "$KCTL_SPARK_IDENTITY" > "$tmp/.kctl-identity"
  chown -R root:root "$tmp"
  chmod -R go-w,a+rX "$tmp"
  rm -rf "$new"
  mv -T "$tmp" "$new"
  trap - EXIT
  changed "$new"
  restart $KCTL_SPARK_UNITS
fi
if [ "$(readlink /opt/kctl/spark 2>/dev/null || true)" != "spark-dists/$KCTL_SPARK_IDENTITY/spark" ]; then
  ln -sfn "spark-dists/$KCTL_SPARK_IDENTITY/spark" /opt/kctl/spark.kctl-new
  mv -T /opt/kctl/spark.kctl-new /opt/kctl/spark
  changed "/opt/kctl/spark -> spark-dists/$KCTL_SPARK_IDENTITY/spark"
fi
for d in "$DISTS"/* "$DISTS"/.unpack.*; do  # earlier distributions no running daemon reads
  [ -e "$d" ] && [ "$d" != "$new" ] || continue
  grep -qsaF "$d/" /proc/[0-9]*/cmdline && continue
  rm -rf "$d"
  changed "$d (removed)"
done

# --- configuration, directories
[ -d /etc/kctl/spark ] || { install -d -m 0755 /etc/kctl/spark; changed /etc/kctl/spark; }
install_file "$HERE/spark-defaults.conf" /etc/kctl/spark/spark-defaults.conf 0644 $KCTL_SPARK_UNITS
install_file "$HERE/uninstall-spark.sh" /opt/kctl/uninstall-spark.sh 0755
for d in /var/opt/kctl/spark /var/opt/kctl/spark/work /var/opt/kctl/spark/recovery; do
  if [ ! -d "$d" ] || [ "$(stat -c '%U' "$d")" != "$U" ]; then install -d -m 0750 -o "$U" -g "$U" "$d"; changed "$d"; fi
done

# --- units: this host's, installed and enabled; one it no longer runs stopped and removed
units_changed=0
for svc in $KCTL_SPARK_UNITS; do
  before=$CHANGED
  install_file "$HERE/units/kctl-$svc.service" "/etc/systemd/system/kctl-$svc.service" 0644 "$svc"
  [ "$CHANGED" -eq "$before" ] || units_changed=1
done
for svc in spark-worker spark-master; do
  case " $KCTL_SPARK_UNITS " in *" $svc "*) continue ;; esac
  if [ -e "/etc/systemd/system/kctl-$svc.service" ]; then
    systemctl disable --now "kctl-$svc.service" >/dev/null 2>&1 || true
    rm -f "/etc/systemd/system/kctl-$svc.service"
    units_changed=1
    changed "/etc/systemd/system/kctl-$svc.service (removed)"
  fi
done
[ "$units_changed" -eq 0 ] || systemctl daemon-reload
for svc in $KCTL_SPARK_UNITS; do
  if [ "$(systemctl is-enabled "kctl-$svc.service" 2>/dev/null || true)" != enabled ]; then
    systemctl enable --quiet "kctl-$svc.service"
    changed "kctl-$svc.service enabled"
  fi
done
for svc in $RESTART; do
  if systemctl is-active --quiet "kctl-$svc.service"; then echo "restart: $svc"; fi
done
echo "kctl-spark-install: $CHANGED changed"
