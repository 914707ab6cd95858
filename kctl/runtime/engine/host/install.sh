#!/bin/bash
# install.sh: installs this node's kctl bundle on this host (run as root; `kctl up` of engine hosts runs it
# over ssh). Idempotent: a second run changes nothing and says so.
#
#   service user and group   logger (uid/gid 555 where free, as in the seed), no login shell
#   Kafka and exporters      /opt/kctl/dists/<identity>/{<dist>,monitoring}; /opt/kctl/kafka, monitoring -> them
#   wrappers                 /opt/kctl/bin
#   configuration            /etc/kctl (root, 0644), secrets /etc/kctl/secrets (service user, 0700, files 0400)
#   data, logs               /var/opt/kctl, /var/log/kctl (service user, 0750)
#   systemd units            /etc/systemd/system/kctl-zookeeper.service, kctl-kafka.service (on KRaft:
#                            kctl-controller.service, kctl-kafka.service): installed and enabled; started by
#                            `kctl up`, or here with --start
#   format permits           on KRaft, on a host that held nothing of kctl: /var/opt/kctl/.kctl-format-SERVICE,
#                            the permit to format the storage kctl makes here (at the service's first start)
#
# Every line "changed: WHAT" names what this run changed; "restart: SERVICE" a service whose running process
# predates a change it reads (recorded in /run/kctl/restart-pending until it starts again; kctl restarts it
# through the cluster's gates); the last line is "kctl-install: N changed".
set -euo pipefail
HERE="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
START=0
for arg in "$@"; do
  case "$arg" in
    --start) START=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $arg (--start, --help)" >&2; exit 64 ;;
  esac
done

die() { echo "install.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0)"
[ -d /run/systemd/system ] || die "this host does not run systemd (no /run/systemd/system): kctl's units need it"
# shellcheck source=/dev/null
. "$HERE/bundle.env"
U="$KCTL_SERVICE_USER"

JAVA="$(command -v java || true)"
[ -n "$JAVA" ] || die "no java on PATH: install a Java 17 or newer runtime first (Debian: apt-get install openjdk-17-jre-headless)"
java_major="$("$JAVA" -version 2>&1 | sed -n -E '1s/.*version "([0-9]+).*/\1/p')"
[ "${java_major:-0}" -ge 17 ] || die "java on PATH is version ${java_major:-unknown}; Kafka $KCTL_KAFKA_VERSION here needs 17 or newer"

# --- whose host this is, before anything is written (kctl up asks the same over ssh first): a host whose
# /etc/kctl/identity, installed bundle or data is another cluster's or another node's is refused, and so is a
# data directory with data but no kctl marker where this node is not installed (kctl never writes over it).
ident() { grep -v '^#' "$1" | tr '\n' ' '; }
# a host that holds nothing of kctl yet (no identity, no earlier install): the only one whose KRaft storage this
# install permits formatting (below)
FRESH=1
if [ -e /etc/kctl/identity ] || [ -e /opt/kctl/bundle.env ]; then FRESH=0; fi
if [ -f "$HERE/conf/identity" ]; then
  want="$(ident "$HERE/conf/identity")"
  ours=0
  if [ -f /etc/kctl/identity ]; then
    [ "$(ident /etc/kctl/identity)" = "$want" ] || die "this host is $(ident /etc/kctl/identity)(/etc/kctl/identity), not ${want}: refusing to install another cluster's or node's bundle over it; nothing was changed"
    ours=1
  elif [ -r /opt/kctl/bundle.env ]; then
    have="$(. /opt/kctl/bundle.env; echo "$KCTL_CLUSTER $KCTL_NODE")"
    [ "$have" = "$KCTL_CLUSTER $KCTL_NODE" ] || die "this host holds kctl's install of node ${have#* } of cluster ${have%% *} (/opt/kctl/bundle.env), not of node $KCTL_NODE of $KCTL_CLUSTER; nothing was changed"
    ours=1
  fi
  prop() {
    [ -r "$1" ] || return 0
    sed -n -E "s/^[[:space:]]*$2[[:space:]]*[=:][[:space:]]*(.*[^[:space:]])[[:space:]]*$/\1/p" "$1" | tail -n 1
  }
  dirs="/var/opt/kctl $(prop "$HERE/conf/zoo.cfg" dataDir) $(prop "$HERE/conf/zoo.cfg" dataLogDir)"
  dirs="$dirs $(prop "$HERE/conf/server.properties" log.dirs | tr ',' ' ')"
  for d in $dirs; do
    if [ -f "$d/.kctl-identity" ]; then
      [ "$(ident "$d/.kctl-identity")" = "$want" ] || die "$d holds the data of $(ident "$d/.kctl-identity")not of ${want}: refusing to install over it; nothing was changed"
    elif [ "$ours" -eq 0 ] && [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then
      die "$d holds data that kctl did not install here (no .kctl-identity): refusing to install over it; move it away first; nothing was changed"
    fi
  done
fi

CHANGED=0
RESTART=""
changed() { echo "changed: $1"; CHANGED=$((CHANGED + 1)); }
restart() { for s in "$@"; do case " $RESTART " in *" $s "*) ;; *) RESTART="$RESTART $s" ;; esac; done; }

# install_file SRC DEST MODE OWNER SERVICES...: copy when the content, mode or owner differ.
install_file() {
  local src="$1" dest="$2" mode="$3" owner="$4"; shift 4
  if [ -f "$dest" ] && cmp -s "$src" "$dest" && [ "$(stat -c '%a %U:%G' "$dest")" = "${mode#0} $owner" ]; then
    return 0
  fi
  install -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$src" "$dest"
  changed "$dest"
  restart "$@"
}

# --- service user and group
if ! getent group "$U" >/dev/null; then
  if getent group "$KCTL_SERVICE_ID" >/dev/null; then groupadd --system "$U"; else groupadd --system --gid "$KCTL_SERVICE_ID" "$U"; fi
  changed "group $U"
fi
if ! getent passwd "$U" >/dev/null; then
  if getent passwd "$KCTL_SERVICE_ID" >/dev/null; then uid_opt=(); else uid_opt=(--uid "$KCTL_SERVICE_ID"); fi
  useradd --system "${uid_opt[@]}" --gid "$U" --home-dir /var/opt/kctl --no-create-home --shell /usr/sbin/nologin "$U"
  changed "user $U"
fi

# --- directories
for d in /opt/kctl /opt/kctl/bin /etc/kctl; do
  if [ ! -d "$d" ]; then install -d -m 0755 "$d"; changed "$d"; fi
done
for d in /var/opt/kctl /var/log/kctl; do
  if [ ! -d "$d" ] || [ "$(stat -c '%U' "$d")" != "$U" ]; then install -d -m 0750 -o "$U" -g "$U" "$d"; changed "$d"; fi
done

# --- KRaft storage kctl makes here: a node new to kctl (the bundle names its services in KCTL_FORMAT_PERMITS) on a
# host that held nothing of kctl gets the permit to format it at the service's first start (controller-start,
# kafka-start: kraft_storage in jvm-common.sh; the first start on formatted storage takes it away). Written before
# anything else, so that an install that stops part way and is run again (no longer FRESH) keeps it. Anywhere
# else an empty metadata or log dir is a lost, wiped or unmounted disk: refused (UNFORMATTED), never formatted.
for svc in ${KCTL_FORMAT_PERMITS:-}; do
  permit="/var/opt/kctl/.kctl-format-$svc"
  if [ "$FRESH" -eq 1 ] && [ ! -e "$permit" ]; then
    install -m 0644 -o "$U" -g "$U" /dev/null "$permit"
    changed "$permit (the permit to format the $svc's new storage)"
  fi
done

# --- the Kafka distribution and the exporters: each identity in a directory of its own, /opt/kctl/dists/<identity>,
# unpacked beside the running one and renamed into place whole; then /opt/kctl/kafka and /opt/kctl/monitoring
# switched to it by renaming a new symlink over each (rename(2): whoever looks sees the old target or the new,
# never none). A failed unpack leaves the installed distribution as it was, and its temporary directory is
# removed. The units name the versioned directory itself, so a running JVM keeps reading the jars it started
# from until its restart; the distribution it runs on is kept (the current one and the one before stay).
DISTS=/opt/kctl/dists
new_dist="$DISTS/$KCTL_DIST_IDENTITY"
if [ ! -d "$DISTS" ]; then install -d -m 0755 "$DISTS"; changed "$DISTS"; fi
if [ "$(cat "$new_dist/$KCTL_DIST/.kctl-identity" 2>/dev/null || true)" != "$KCTL_DIST_IDENTITY" ]; then
  tmp="$(mktemp -d "$DISTS/.unpack.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  tar -C "$tmp" -xf "$HERE/kafka.tar" \
    || die "cannot unpack $HERE/kafka.tar; the installed distribution is left as it was (/opt/kctl/kafka -> $(readlink /opt/kctl/kafka 2>/dev/null || echo none))"
  compgen -G "$tmp/$KCTL_DIST/libs/kafka_*.jar" >/dev/null \
    || die "$HERE/kafka.tar holds no $KCTL_DIST distribution; the installed one is left as it was"
  echo "$KCTL_DIST_IDENTITY" > "$tmp/$KCTL_DIST/.kctl-identity"
  chown -R root:root "$tmp"
  chmod -R go-w,a+rX "$tmp"
  rm -rf "$new_dist"  # an unpack of this identity that did not finish
  mv -T "$tmp" "$new_dist"
  trap - EXIT
  changed "$new_dist"
  restart $KCTL_BUNDLE_SERVICES
fi
# switch_link NAME TARGET: /opt/kctl/NAME -> TARGET by renaming a new symlink over it; an earlier kctl's real
# directory there is moved into $DISTS first (its JVMs still read it). Says nothing when it points there already.
switch_link() {
  local link="/opt/kctl/$1" target="$2"
  [ "$(readlink "$link" 2>/dev/null || true)" != "$target" ] || return 0
  if [ -d "$link" ] && [ ! -L "$link" ]; then aside="$DISTS/.earlier-$1-$(date +%s)"; mv -T "$link" "$aside"; fi
  ln -sfn "$target" "$link.kctl-new"
  mv -T "$link.kctl-new" "$link"
  changed "$link -> $target"
  restart $KCTL_BUNDLE_SERVICES
}
before="$(readlink -f /opt/kctl/kafka 2>/dev/null || true)"
aside=""
switch_link kafka "dists/$KCTL_DIST_IDENTITY/$KCTL_DIST"
if [ -d "$new_dist/monitoring" ]; then
  switch_link monitoring "dists/$KCTL_DIST_IDENTITY/monitoring"
elif [ -e /opt/kctl/monitoring ] || [ -L /opt/kctl/monitoring ]; then
  rm -rf /opt/kctl/monitoring
  changed "/opt/kctl/monitoring (removed)"
fi
# Distributions that are neither the new one, nor the one /opt/kctl/kafka named until now, nor one a running
# process names (an earlier kctl's /opt/kctl/kafka_* directories included).
for d in "$DISTS"/* "$DISTS"/.earlier-* "$DISTS"/.unpack.* /opt/kctl/kafka_*; do
  [ -e "$d" ] && [ ! -L "$d" ] || continue
  case "$before/" in "$d"/*) continue ;; esac
  [ "$d" = "$new_dist" ] || [ "$d" = "$aside" ] && continue
  grep -qsaF "$d/" /proc/[0-9]*/cmdline && continue  # a JVM still runs from it (not restarted since)
  rm -rf "$d"
  changed "$d (removed)"
done

# --- wrappers, configuration, secrets
for f in "$HERE"/bin/*; do
  install_file "$f" "/opt/kctl/bin/$(basename "$f")" 0755 root:root $KCTL_BUNDLE_SERVICES
done
for f in "$HERE"/conf/*; do
  name="$(basename "$f")"
  case "$name" in
    zoo.cfg|zoo.cfg.dynamic|myid|log4j-zookeeper.properties) svcs=zookeeper ;;
    server.properties|log4j-kafka.properties|jmx-exporter.yaml) svcs=kafka ;;
    controller.properties|log4j-controller.properties|controller-jvm.options) svcs=controller ;;
    config-hash|README|identity) svcs="" ;;  # for kctl and the operator: no process reads them
    *) svcs="$KCTL_BUNDLE_SERVICES" ;;
  esac
  install_file "$f" "/etc/kctl/$name" 0644 root:root $svcs
done
# Files of an earlier bundle that this one no longer has (a node that lost its broker, monitoring turned off).
for f in /etc/kctl/*; do
  [ -f "$f" ] || continue
  if [ ! -e "$HERE/conf/$(basename "$f")" ]; then rm -f "$f"; changed "$f (removed)"; restart $KCTL_BUNDLE_SERVICES; fi
done
if [ -d "$HERE/secrets" ]; then
  if [ ! -d /etc/kctl/secrets ] || [ "$(stat -c '%a %U' /etc/kctl/secrets)" != "700 $U" ]; then
    install -d -m 0700 -o "$U" -g "$U" /etc/kctl/secrets
    changed /etc/kctl/secrets
  fi
  for f in "$HERE"/secrets/*; do
    install_file "$f" "/etc/kctl/secrets/$(basename "$f")" 0400 "$U:$U" $KCTL_BUNDLE_SERVICES
  done
elif [ -d /etc/kctl/secrets ]; then
  rm -rf /etc/kctl/secrets /run/kctl/secrets
  changed "/etc/kctl/secrets (removed)"
  restart $KCTL_BUNDLE_SERVICES
fi

# --- what `kctl down` (or an operator) runs to remove it all again
install_file "$HERE/uninstall.sh" /opt/kctl/uninstall.sh 0755 root:root
install_file "$HERE/bundle.env" /opt/kctl/bundle.env 0644 root:root

# --- systemd units: installed, the daemon reloaded when one changed, enabled
units_changed=0
for svc in $KCTL_BUNDLE_SERVICES; do
  unit="kctl-$svc.service"
  before=$CHANGED
  install_file "$HERE/units/$unit" "/etc/systemd/system/$unit" 0644 root:root "$svc"
  [ "$CHANGED" -eq "$before" ] || units_changed=1
done
for svc in controller zookeeper kafka; do  # a unit this node no longer runs (`broker: false`)
  case " $KCTL_BUNDLE_SERVICES " in *" $svc "*) continue ;; esac
  unit="kctl-$svc.service"
  if [ -e "/etc/systemd/system/$unit" ]; then
    systemctl disable --now "$unit" >/dev/null 2>&1 || true
    rm -f "/etc/systemd/system/$unit"
    units_changed=1
    changed "/etc/systemd/system/$unit (removed)"
  fi
done
[ "$units_changed" -eq 0 ] || systemctl daemon-reload
for svc in $KCTL_BUNDLE_SERVICES; do
  unit="kctl-$svc.service"
  if [ "$(systemctl is-enabled "$unit" 2>/dev/null || true)" != enabled ]; then
    systemctl enable --quiet "$unit"
    changed "$unit enabled"
  fi
done

# A change matters to a running process only: one that is not running reads it when it starts. The record in
# /run/kctl/restart-pending is what `kctl up` restarts through its roll; kctl-prepare clears it at the next start.
for svc in $RESTART; do
  if systemctl is-active --quiet "kctl-$svc.service"; then
    echo "restart: $svc"
    install -d -m 0755 /run/kctl /run/kctl/restart-pending
    : > "/run/kctl/restart-pending/$svc"
  fi
done
if [ "$START" -eq 1 ]; then
  for svc in $KCTL_BUNDLE_SERVICES; do systemctl start "kctl-$svc.service"; done
fi
echo "kctl-install: $CHANGED changed"
