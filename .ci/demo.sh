#!/usr/bin/env bash
# `make demo`: bring up logger1..3, show it healthy, then the log pipeline end to end:
# kctl gen logs -> Kafka -> the PySpark Structured Streaming job -> the metrics table.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

if [ ! -f kctl.yaml ]; then
  step "kctl init"
  kctl init
fi

step "kctl up   (builds the node image the first time)"
kctl up

step "kctl status"
kctl status || true

step "kctl topic create access-logs --partitions 3 --replication-factor 3"
kctl topic create access-logs --partitions 3 --replication-factor 3 --if-not-exists
kctl topic describe access-logs

step "a produce/consume round trip with kctl"
kctl topic create demo --partitions 1 --replication-factor 3 --if-not-exists >/dev/null
printf 'hello, world\nfrom %s\n' "$(hostname)" | kctl produce demo
kctl consume demo --from-beginning --max 2 --timeout 10

step "kctl gen logs: 3000 nginx access-log events as filebeat JSON, keyed by host"
kctl gen logs --topic access-logs --count 3000 --rate 50 --seed 7 --hosts 3 --malformed 5 \
  --start "$(date -u -d '-10 min' +%Y-%m-%dT%H:%M:%SZ)"

step "kctl stream submit --available-now: the Spark job consumes what is in Kafka, then exits"
rm -rf .kctl/demo/out .kctl/demo/checkpoint  # each demo starts its tables afresh (and reads the topic from its start)
kctl stream submit --topic access-logs --out .kctl/demo/out --checkpoint .kctl/demo/checkpoint --available-now \
  --name demo

step "kctl stream metrics: requests and bytes per minute, host and status (the Delta table, read without a JVM)"
kctl stream metrics --out .kctl/demo/out

step "kctl stream query: SQL over the Delta tables (DuckDB)"
kctl stream query --out .kctl/demo/out \
  "SELECT host, sum(requests) AS requests, sum(bytes) AS bytes FROM metrics GROUP BY host ORDER BY host"
kctl stream query --out .kctl/demo/out "SELECT reason, count(*) AS events FROM deadletter GROUP BY reason"

step "kctl group describe kctl-stream-demo: the job's committed offsets and lag, as Kafka's tools see them"
kctl group describe kctl-stream-demo

printf '\nThe cluster is still running: `kctl status`, `kctl down` (add --volumes to delete its data).\n'
