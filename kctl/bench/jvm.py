"""Benchmark of a node's JVMs starting alone, with and without the image's class-data sharing archives.

In one container of the node image, in one run, alternating the order each round: a one-node ZooKeeper from
its start to its first ``srvr`` answer with a Mode, then a broker from its start to Kafka's "started" line,
each with the archive the image built (``-XX:SharedArchiveFile``, as the wrappers start them) and without.
No Docker, network or kctl in the measured path: this is the floor under `kctl up`.
Figures are printed and written to docs/benchmarks.md ("## JVM start").
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
from typing import Any

from kctl.bench.doc import add_output_args, publish, table

SECTION = "## JVM start"

# Runs in the node container; prints one line per start: "<service> <on|off> <milliseconds>".
SCRIPT = r"""
set -u
K=/opt/kafka; w=$(mktemp -d); mkdir -p $w/logs
cat > $w/zoo.cfg <<CFG
dataDir=$w/zk
clientPort=21811
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr
CFG
cat > $w/server.properties <<CFG
broker.id=0
zookeeper.connect=127.0.0.1:21811
listeners=PLAINTEXT://127.0.0.1:19093
log.dirs=$w/kafka
offsets.topic.replication.factor=1
CFG
cat > $w/log4j.properties <<CFG
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
CFG
. /usr/local/lib/kctl/jvm-common.sh
jvm=(java $KAFKA_JVM_PERFORMANCE_OPTS -Xms512m -Xmx512m -cp "$K/libs/*" -Dlog4j.configuration=file:$w/log4j.properties
     -Dkafka.logs.dir=$w/logs -Dzookeeper.log.dir=$w/logs)
ms() { date +%s%3N; }
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then modes="off on"; else modes="on off"; fi
  for mode in $modes; do
    rm -rf $w/zk $w/kafka; mkdir -p $w/zk
    zc=""; kc=""
    if [ $mode = on ]; then zc=$(cds_opts zookeeper); kc=$(cds_opts kafka); fi
    t=$(ms)
    "${jvm[@]}" $zc org.apache.zookeeper.server.quorum.QuorumPeerMain $w/zoo.cfg > $w/zk.out 2>&1 & zk=$!
    for _ in $(seq 1 1200); do
      zk_srvr 127.0.0.1 21811 | grep -q '^Mode' && break  # jvm-common.sh's, bounded by its timeout
      sleep 0.05
    done
    echo "zookeeper $mode $(( $(ms) - t ))"
    t=$(ms)
    "${jvm[@]}" $kc kafka.Kafka $w/server.properties > $w/k.out 2>&1 & k=$!
    for _ in $(seq 1 1200); do grep -q "started (kafka.server.KafkaServer)" $w/k.out && break; sleep 0.05; done
    echo "kafka $mode $(( $(ms) - t ))"
    kill -TERM $k; wait $k 2>/dev/null; kill -TERM $zk; wait $zk 2>/dev/null
  done
done
rm -rf $w
"""


def measure(rounds: int = 5, log: Any = None) -> dict[str, list[float]]:
    """{"zookeeper on": [seconds...], "zookeeper off": [...], "kafka on": [...], "kafka off": [...]}."""
    from kctl.runtime import docker_api
    from kctl.runtime.image import build as image

    dc = docker_api.client()
    tag = image.image_tag()
    container = dc.containers.run(tag, ["infinity"], entrypoint=["sleep"], detach=True,
                                  labels={"io.kctl.bench": "jvm"}, network_mode="none")
    try:
        if log:
            log(f"{rounds} rounds of ZooKeeper and Kafka starts, with and without the archives, in {tag}")
        rc, out = container.exec_run(["bash", "-c", SCRIPT], environment={"ROUNDS": str(rounds)})
        text = out.decode(errors="replace")
        if rc != 0:
            raise RuntimeError(f"the JVM start measurement failed ({rc}): {text[-2000:]}")
    finally:
        container.remove(force=True)
    got: dict[str, list[float]] = {f"{s} {m}": [] for s in ("zookeeper", "kafka") for m in ("on", "off")}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and f"{parts[0]} {parts[1]}" in got:
            got[f"{parts[0]} {parts[1]}"].append(int(parts[2]) / 1000)
    if any(len(v) != rounds for v in got.values()):
        raise RuntimeError(f"the JVM start measurement printed {got}; expected {rounds} of each:\n{text[-2000:]}")
    return got


def medians(got: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in got.items()}


def render_section(got: dict[str, list[float]]) -> str:
    m = medians(got)
    host = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    rounds = len(got["kafka on"])
    rows = []
    for service, what in (("zookeeper", "ZooKeeper (one node) to its first `srvr` answer with a Mode"),
                          ("kafka", "Kafka broker to its \"started\" line")):
        off, on = m[f"{service} off"], m[f"{service} on"]
        rows.append((f"{what}, without archive", f"{off:.2f} s"))
        rows.append((f"{what}, with the image's archive", f"{on:.2f} s"))
        rows.append((f"ratio with / without ({service})", f"{on / off:.2f}"))
    both_off = m["zookeeper off"] + m["kafka off"]
    both_on = m["zookeeper on"] + m["kafka on"]
    rows.append(("one node's JVMs one after the other (ZooKeeper, then Kafka), with archives", f"{both_on:.2f} s"))
    rows.append(("the same without archives", f"{both_off:.2f} s"))
    return "\n".join([
        SECTION,
        "",
        f"Measured by `python -m kctl.bench.jvm` on {dt.date.today().isoformat()} ({host}; load average at the"
        f" end {load}): in one container of the node image, no network, medians of {rounds} rounds whose order"
        " alternates (without first, then with first).",
        "",
        *table(("measure", "value"), rows),
        "",
        "The archives (`kctl/runtime/image/node/cds-archive`, made at image build) hold the classes ZooKeeper and a",
        "broker load while starting and serving a topic, a produce and a consumer group; the JVM maps them",
        "parsed and verified instead of reading them from the jars. This is the floor under `kctl up`, which",
        "starts three such nodes at once on the same CPUs (\"## Cluster lifecycle\").",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.jvm", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="starts of each JVM with and without the archive")
    add_output_args(ap)
    args = ap.parse_args(argv)
    got = measure(args.rounds, lambda m: print(f"bench: {m}", file=sys.stderr, flush=True))
    publish(render_section(got), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
