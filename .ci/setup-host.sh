#!/usr/bin/env bash
# Idempotent host setup for kctl (called by `make setup`).
# - a virtualenv at .venv with kctl (editable), the dev tools and the stream and plot extras;
# - a Docker engine when none is reachable (Debian's docker.io), started in the background;
# - the Docker Compose v2 plugin;
# - Java 17 (the Spark job runs on the host), Maven (the exporters' jars for the node image, and Kafka's when Apache is unreachable),
#   debootstrap (a local base image when no registry answers).
# On a machine that already has a working Docker, nothing system-wide changes.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }
is_root() { [ "$(id -u)" = 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }

APT_UPDATED=0
apt_install() {
  if ! is_root || ! have apt-get; then
    log "cannot install $* here (need root and apt-get); install it yourself"
    return 1
  fi
  if [ "$APT_UPDATED" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  log "installing $* from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# ---- Python virtualenv --------------------------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
# Everything the checkout's own tests and demo use: the core, the dev tools and the optional extras
# (kctl[stream]: pyspark, pyarrow; kctl[plot]; kctl[console]: FastAPI, uvicorn, argon2). `pip install kctl` alone is the core CLI.
EXTRAS=dev,stream,plot,console
stamp=.venv/.kctl-installed
# The stamp covers the extras as well as pyproject.toml: a .venv made with fewer extras is topped up.
want=$( (cat pyproject.toml; echo "extras=$EXTRAS") | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -x .venv/bin/kctl ]; then
  log "installing kctl[$EXTRAS] into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  echo "$want" > "$stamp"
fi
# kctl is installed editable: byte-compile its modules once here, so that each CLI run does not compile
# them again where PYTHONDONTWRITEBYTECODE is set (about 25 ms of every command's start-up on this machine).
PYTHONDONTWRITEBYTECODE= .venv/bin/python -m compileall -q kctl >/dev/null || true

# ---- Docker engine ------------------------------------------------------------------
engine_up() { timeout 10 docker info >/dev/null 2>&1; }
if ! engine_up; then
  if ! have dockerd; then
    apt_install docker.io || true
  fi
  if have dockerd && ! engine_up; then
    if is_root; then
      if ! pgrep -x dockerd >/dev/null; then
        log "starting dockerd in the background (log: /var/log/kctl-dockerd.log)"
        rm -f /var/run/docker.pid
        nohup dockerd >/var/log/kctl-dockerd.log 2>&1 </dev/null &
      fi
      for _ in $(seq 1 60); do engine_up && break; sleep 0.5; done
    fi
  fi
  if ! engine_up; then
    log "no Docker engine is reachable; start one (dockerd) and run make setup again"
    exit 1
  fi
fi
if ! have docker; then
  log "the docker client is missing; install Docker"
  exit 1
fi

# ---- Compose v2 plugin ----------------------------------------------------------------
if ! docker compose version >/dev/null 2>&1; then
  if [ -x .venv/bin/docker-compose ]; then
    mkdir -p "$HOME/.docker/cli-plugins"
    cp .venv/bin/docker-compose "$HOME/.docker/cli-plugins/docker-compose"
    chmod +x "$HOME/.docker/cli-plugins/docker-compose"
    log "installed the Compose v2 plugin: $(docker compose version --short)"
  else
    log "Docker Compose v2 is missing and .venv has no docker-compose binary"
    exit 1
  fi
fi

# ---- Java, Maven, debootstrap (only what is missing) ------------------------------------
have java || apt_install openjdk-17-jre-headless || log "no Java: the Spark job will not run"
have mvn || apt_install maven || log "no Maven: the node image cannot be built (its exporters' jars come from Maven Central); install Maven"
have kcat || apt_install kcat || log "no kcat: make bench measures kctl's side only"
# engine hosts: kctl reaches the hosts with OpenSSH's client; the tests make keys with ssh-keygen
have ssh && have ssh-keygen || apt_install openssh-client || log "no ssh: engine hosts and its tests need OpenSSH's client"
# The console's browser tests drive Debian's Chromium through Playwright (Playwright's own browser download is
# not reachable everywhere; a Chromium from the distribution is).
have chromium || apt_install chromium || log "no chromium: the console's browser tests are skipped"
if ! have debootstrap; then
  # Only needed when no image registry answers (a local base image is built instead).
  if ! timeout 20 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
    apt_install debootstrap || log "no debootstrap: the node image needs debian:bookworm-slim"
  fi
fi
# ---- Spark's Kafka source jars (cached; the job passes them with spark.jars) --------------
if have mvn && have java; then
  .venv/bin/python -c "from kctl.stream.jars import resolve_kafka_jars; resolve_kafka_jars()" >/dev/null \
    || log "could not resolve spark-sql-kafka jars now; the job will try again (or pass --jars)"
fi
log "ready: $(.venv/bin/kctl --version), $(docker compose version --short 2>/dev/null | sed 's/^/compose /')"
