"""`python -m kctl.bench.clients [-f kctl.yaml]`: kctl's client commands beside kcat and Kafka's perf tools.

Same run, same cluster, 100-byte records, acks=all, replication factor 3.
Side by side with kcat (Debian's, librdkafka's own CLI), each timed as a whole
process from the host through the published EXTERNAL ports: `kctl status` and
`kctl topic describe` against `kcat -L` (median of 7), `kctl produce` against
`kcat -P` with the same producer settings and `kctl consume` against
`kcat -C -e` (median of 7, each beside the Python floor). Kafka's perf tools
run in a node container on the INTERNAL listener. Every loop is bounded: a record cap and a timeout on each
step. The figures are printed and written to the "## Produce and consume"
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.bench.doc import write_section
from kctl.errors import KctlError
from kctl.kafka import topics
from kctl.kafka.client import Target, consumer
from kctl.kafka.console import FETCH_BACKOFF_MS
from kctl.model.spec import ClusterSpec, load_cluster
from kctl.runtime.engine import engines

RECORD_SIZE = 100
MAX_RECORDS = 2_000_000
STEP_TIMEOUT = 300.0
SECTION = "## Produce and consume"
NOTE = ("Caveats: the host has 2 cores shared by the three brokers, ZooKeepers and other clusters, so "
        "figures vary by 2x between runs; kafka-producer-perf-test runs with kctl's batching settings "
        "(linger.ms=5, batch.size=1000000) but in a JVM that starts cold inside a broker container, so its "
        "figure includes JIT warm-up.")
KCAT = "kcat"
# kctl produce's producer settings, spelled for kcat: the comparison is between clients, not settings.
KCAT_PRODUCER = ("acks=all", "enable.idempotence=true", "partitioner=murmur2_random", "linger.ms=5")
QUICK_RUNS = 7  # status, describe: median of 7
# produce, consume: median of 7. A bulk transfer's time on this cluster is bimodal (one run in three or so takes
# twice as long on the brokers' side, for kctl and the floor alike): three runs let one draw decide the median.
BULK_RUNS = 7
# The targets: kctl within these of kcat (issue "clients") and of the Python floor (issue #29); whole processes,
# same machine, same run.
TARGETS = {"status": "< 0.3 s (aim 0.15 s)", "produce": "<= 1.3x kcat; <= 1.2x floor",
           "consume": "<= 1.3x kcat; <= 1.2x floor", "topic describe": "< 0.2 s"}


@dataclass
class Side:
    """One operation timed as whole processes: kctl beside kcat."""

    operation: str
    kctl_cmd: str
    kctl_s: float
    kcat_cmd: str
    kcat_s: float | None
    runs: int
    kcat_same_lib_s: float | None = None  # kcat run on the librdkafka that kctl's confluent-kafka bundles
    floor_s: float | None = None  # the least a Python process does with confluent-kafka (FLOOR_PRODUCE/CONSUME)

    @property
    def ratio(self) -> float | None:
        return self.kctl_s / self.kcat_s if self.kcat_s else None


@dataclass
class Figure:
    tool: str
    direction: str
    records: int
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_second(self) -> float:
        return self.records_per_second * RECORD_SIZE / (1024 * 1024)


def parse_producer_perf(text: str) -> tuple[int, float]:
    """Last summary line: ``N records sent, R records/sec (M MB/sec), ...`` -> (records, seconds)."""
    found = list(re.finditer(r"(\d+) records sent, ([\d.]+) records/sec", text))
    if not found:
        raise KctlError("kafka-producer-perf-test printed no summary", hint=text[-500:])
    m = found[-1]
    n, rate = int(m.group(1)), float(m.group(2))
    return n, n / rate if rate else 0.0


def parse_consumer_perf(text: str) -> tuple[int, float]:
    """CSV after the header: ``start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    rebalance.time.ms, fetch.time.ms, ...`` -> (records, fetch seconds)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith("start.time"):
            head = [h.strip() for h in ln.split(",")]
            vals = [v.strip() for v in lines[i + 1].split(",")]
            row = dict(zip(head, vals, strict=False))
            n = int(float(row["data.consumed.in.nMsg"]))
            fetch_ms = float(row.get("fetch.time.ms", "0") or 0)
            if fetch_ms <= 0:
                fetch_ms = n / float(row["nMsg.sec"]) * 1000 if float(row["nMsg.sec"]) else 0
            return n, fetch_ms / 1000
    raise KctlError("kafka-consumer-perf-test printed no CSV summary", hint=text[-500:])


def _kctl(spec_file: Path, *args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=STEP_TIMEOUT)
    if proc.returncode != 0:
        raise KctlError(f"kctl {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return proc


def _timed(argv: list[str], *, stdin: Path | None = None, env: dict[str, str] | None = None) -> float:
    """Wall-clock seconds of one whole process (stdout to /dev/null); a KctlError when it fails."""
    t0 = time.perf_counter()
    with (stdin.open("rb") if stdin else open(os.devnull, "rb")) as fin:
        proc = subprocess.run(argv, stdin=fin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=STEP_TIMEOUT, env=env)
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise KctlError(f"{' '.join(argv[:6])} ... failed (exit {proc.returncode})",
                        hint=proc.stderr.decode(errors="replace")[-500:])
    return secs


def _median(argv_of: Any, runs: int, **kw: Any) -> float:
    return statistics.median(_timed(argv_of(i), **kw) for i in range(runs))


def kcat_available() -> bool:
    return shutil.which(KCAT) is not None


def kcat_librdkafka(env: dict[str, str] | None = None) -> str:
    """The librdkafka version kcat runs on (from ``kcat -V``)."""
    out = subprocess.run([KCAT, "-V"], capture_output=True, text=True, timeout=10, env=env).stdout
    m = re.search(r"librdkafka ([\w.\-]+)", out)
    return m.group(1) if m else "?"


def same_lib_env(tmp: Path) -> dict[str, str] | None:
    """An environment in which kcat loads the librdkafka bundled with confluent-kafka, or None.

    The two clients then differ only above librdkafka: kctl's Python against kcat's C.
    """
    import confluent_kafka

    libs = sorted(Path(confluent_kafka.__file__).resolve().parents[1].glob("confluent_kafka.libs/librdkafka*.so*"))
    if not libs or not kcat_available():
        return None
    link = tmp / "librdkafka.so.1"
    link.unlink(missing_ok=True)
    link.symlink_to(libs[0])
    return {**os.environ, "LD_LIBRARY_PATH": str(tmp)}


def versus_kcat(spec: ClusterSpec, spec_file: Path, data: Path, records: int,
                same_lib: dict[str, str] | None = None) -> list[Side]:
    """status, topic describe, produce and consume: kctl and kcat, alternating, same topic sizes."""
    rf = min(3, len(spec.nodes))
    suffix = uuid.uuid4().hex[:6]
    t_kctl, t_kcat = f"kctl-vs-{suffix}", f"kcat-vs-{suffix}"
    bs = spec.bootstrap_servers
    kctl = [sys.executable, "-m", "kctl"]
    spec_args = ["-f", str(spec_file)]
    have_kcat = kcat_available()
    for t in (t_kctl, t_kcat):
        topics.create(Target.of(spec), t, 3, rf, {"min.insync.replicas": str(max(1, rf - 1))})
    sides: list[Side] = []
    try:
        _timed([*kctl, "topic", "describe", t_kctl, *spec_args])  # warm the page cache, not measured
        # The floor under every kctl figure: Python start-up and the CLI's imports, no Kafka at all.
        start = _median(lambda _i: [*kctl, "--help"], QUICK_RUNS)
        kstart = _median(lambda _i: [KCAT, "-V"], QUICK_RUNS) if have_kcat else None
        sides.append(Side("start-up (no Kafka)", "kctl --help", start, "kcat -V", kstart, QUICK_RUNS))
        status = _median(lambda _i: [*kctl, "status", *spec_args], QUICK_RUNS)
        meta = _median(lambda _i: [KCAT, "-b", bs, "-L"], QUICK_RUNS) if have_kcat else None
        sides.append(Side("status", "kctl status", status, "kcat -L", meta, QUICK_RUNS))
        desc = _median(lambda _i: [*kctl, "topic", "describe", t_kctl, *spec_args], QUICK_RUNS)
        meta_t = _median(lambda _i: [KCAT, "-b", bs, "-L", "-t", t_kctl], QUICK_RUNS) if have_kcat else None
        sides.append(Side("topic describe", "kctl topic describe T", desc, "kcat -L -t T", meta_t, QUICK_RUNS))

        kcat_x = [a for kv in KCAT_PRODUCER for a in ("-X", kv)]
        kp, cp, sp, fp = [], [], [], []
        kcat_p = [KCAT, "-b", bs, "-P", "-t", t_kcat, *kcat_x]
        for _ in range(BULK_RUNS):
            kp.append(_timed([*kctl, "produce", t_kctl, "--acks", "all", *spec_args], stdin=data))
            if have_kcat:
                cp.append(_timed(kcat_p, stdin=data))
            if same_lib:
                sp.append(_timed(kcat_p, stdin=data, env=same_lib))
            fp.append(_timed([sys.executable, "-c", FLOOR_PRODUCE, bs, t_kcat], stdin=data))
        sides.append(Side("produce", f"kctl produce T --acks all < {records} lines", statistics.median(kp),
                          f"kcat -P -t T {' '.join(kcat_x)}", statistics.median(cp) if cp else None, BULK_RUNS,
                          statistics.median(sp) if sp else None, statistics.median(fp)))
        _check_count(spec, t_kctl, records * BULK_RUNS)
        _check_count(spec, t_kcat, records * (len(cp) + len(sp) + len(fp)))
        kc, cc, sc, fc = [], [], [], []
        kcat_c = [KCAT, "-b", bs, "-C", "-t", t_kctl, "-o", "beginning", "-e", "-q", "-c", str(records)]
        for _ in range(BULK_RUNS):
            kc.append(_timed([*kctl, "consume", t_kctl, "--from-beginning", "--max", str(records), "--timeout", "15",
                              *spec_args]))
            if have_kcat:
                cc.append(_timed(kcat_c))
            if same_lib:
                sc.append(_timed(kcat_c, env=same_lib))
            fc.append(_timed([sys.executable, "-c", FLOOR_CONSUME, bs, t_kctl, str(records), str(FETCH_BACKOFF_MS)]))
        sides.append(Side("consume", f"kctl consume T --from-beginning --max {records}", statistics.median(kc),
                          f"kcat -C -t T -o beginning -e -c {records}", statistics.median(cc) if cc else None,
                          BULK_RUNS, statistics.median(sc) if sc else None, statistics.median(fc)))
    finally:
        _drop_topics(spec, t_kctl, t_kcat)
    return sides


# The floor under kctl produce/consume in Python: a script that does nothing but the transfer with
# confluent-kafka (the same client library, producer settings and fetch backoff, no CLI, no spec, no checks, no
# options), timed as a whole process like the others. kctl cannot be quicker than this; the gap
# between this and kcat is Python's and the library's, not kctl's.
FLOOR_PRODUCE = """
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "enable.idempotence": True, "linger.ms": 5,
              "partitioner": "murmur2_random", "queue.buffering.max.messages": 1000000, "log_level": 0})
topic = sys.argv[2]
for line in sys.stdin.buffer:
    while True:
        try:
            p.produce(topic, line[:-1])
            break
        except BufferError:
            p.poll(0.05)
sys.exit(1 if p.flush(60) else 0)
"""
FLOOR_CONSUME = """
import sys, time
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "kctl-bench-floor", "enable.auto.commit": False,
              "fetch.queue.backoff.ms": int(sys.argv[4]), "log_level": 0})
topic, want, n, out = sys.argv[2], int(sys.argv[3]), 0, sys.stdout.buffer
parts = c.list_topics(topic, timeout=10).topics[topic].partitions
c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
deadline = time.monotonic() + 60
while n < want and time.monotonic() < deadline:
    values = [m.value() for m in c.consume(min(50000, want - n), 0.2)]
    n += len(values)
    values.append(b"")
    out.write(b"\\n".join(values))
c.close()
sys.exit(0 if n == want else 1)
"""


def _check_count(spec: ClusterSpec, topic: str, want: int) -> None:
    """Both producers must have delivered every record: the sum of the partitions' log-end offsets."""
    from confluent_kafka import TopicPartition

    c = consumer(Target.of(spec))
    try:
        md = c.list_topics(timeout=10)
        total = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in md.topics[topic].partitions)
    finally:
        c.close()
    if total != want:
        raise KctlError(f"{topic} holds {total} records after the produce runs, not {want}")


def write_records(path: Path, records: int) -> None:
    with path.open("w") as fh:
        for i in range(records):
            fh.write(f"{i:010d}".ljust(RECORD_SIZE, "x") + "\n")


def run(spec: ClusterSpec, spec_file: Path, records: int) -> tuple[list[Side], list[Figure]]:
    records = max(1000, min(records, MAX_RECORDS))
    rf = min(3, len(spec.nodes))
    suffix = uuid.uuid4().hex[:6]
    t_kctl, t_kafka = f"kctl-bench-{suffix}", f"kafka-bench-{suffix}"
    for t in (t_kctl, t_kafka):
        topics.create(Target.of(spec), t, 3, rf, {"min.insync.replicas": str(max(1, rf - 1))})
    figures: list[Figure] = []
    try:
        with tempfile.TemporaryDirectory() as d:
            data = Path(d) / "records.txt"
            write_records(data, records)
            sides = versus_kcat(spec, spec_file, data, records, same_lib_env(Path(d)))
            out = json.loads(_kctl(spec_file, "produce", t_kctl, "--input", str(data), "--acks", "all",
                                   "-o", "json").stdout)
            figures.append(Figure("kctl produce", "produce", int(out["delivered"]), float(out["seconds"])))
        brokers = spec.internal_bootstrap_servers
        text = _exec(spec, [f"{contract.KAFKA_BIN}/kafka-producer-perf-test.sh", "--topic", t_kafka,
                            "--num-records", str(records), "--record-size", str(RECORD_SIZE), "--throughput", "-1",
                            # The same batching as kctl's librdkafka producer (linger 5 ms, ~1 MB
                            # batches), so the two differ in client, not in settings.
                            "--producer-props", f"bootstrap.servers={brokers}", "acks=all", "linger.ms=5",
                            "batch.size=1000000"])
        n, s = parse_producer_perf(text)
        figures.append(Figure("kafka-producer-perf-test", "produce", n, s))

        proc = _kctl(spec_file, "consume", t_kctl, "--from-beginning", "--max", str(records), "--timeout", "15",
                     stdout=subprocess.DEVNULL)
        m = re.search(r"consumed (\d+) message\(s\) in ([\d.]+)s", proc.stderr)
        if not m:
            raise KctlError("kctl consume printed no summary", hint=proc.stderr[-500:])
        figures.append(Figure("kctl consume", "consume", int(m.group(1)), float(m.group(2))))
        text = _exec(spec, [f"{contract.KAFKA_BIN}/kafka-consumer-perf-test.sh", "--bootstrap-server", brokers,
                            "--topic", t_kafka, "--messages", str(records), "--timeout", "60000"])
        n, s = parse_consumer_perf(text)
        figures.append(Figure("kafka-consumer-perf-test", "consume", n, s))
    finally:
        _drop_topics(spec, t_kctl, t_kafka)
    return sides, figures


def _exec(spec: ClusterSpec, argv: list[str]) -> str:
    rc, out = engines.exec_in(spec, spec.kafka_host(spec.nodes[0]), argv, timeout=STEP_TIMEOUT)
    if rc != 0:
        raise KctlError(f"{argv[0].rsplit('/', 1)[-1]} failed (exit {rc})", hint=out[-800:])
    return out


def render(sides: list[Side], figures: list[Figure], records: int, spec: ClusterSpec,
           libs: tuple[str, str] = ("?", "?")) -> str:
    by = {f.tool: f for f in figures}
    lines = [
        SECTION, "",
        f"Measured {_dt.date.today().isoformat()} by `python -m kctl.bench.clients` against cluster `{spec.name}` "
        f"({len(spec.nodes)} brokers on one host, Kafka {spec.versions.kafka}): {records} records of "
        f"{RECORD_SIZE} bytes, acks=all (idempotent), replication factor {min(3, len(spec.nodes))}, 3 partitions, "
        "fresh topics.", "",
        "### kctl beside kcat", "",
        "Each side timed as a whole process from the host (Python start-up, imports and connection included), "
        "through the published EXTERNAL ports, output to /dev/null; kcat is Debian's (librdkafka's own CLI), "
        f"with kctl's producer settings (`{' '.join(KCAT_PRODUCER)}`). Median of {QUICK_RUNS} runs for status and "
        f"describe, of {BULK_RUNS} for produce and consume; both producers' records are counted on the brokers "
        "afterwards.", "",
        f"kcat runs on Debian's librdkafka {libs[0]}; kctl on the librdkafka {libs[1]} that confluent-kafka "
        "bundles. The last two columns run the same kcat on kctl's librdkafka (LD_LIBRARY_PATH), so that the two "
        "sides differ only above librdkafka. The Python floor is a script that does only the transfer with "
        "confluent-kafka (same library and producer settings; no CLI, spec, identity check or options; "
        "`FLOOR_PRODUCE`/`FLOOR_CONSUME` in kctl/bench/clients.py): the least any Python command can take.", "",
        "| operation | kctl | seconds | kcat | seconds | kctl / kcat | kcat on kctl's librdkafka, s | kctl / that |"
        " Python floor, s | **kctl / floor** | floor / kcat on kctl's librdkafka | target |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for sd in sides:
        kc = f"{sd.kcat_s:.3f}" if sd.kcat_s is not None else "(no kcat)"
        ratio = f"{sd.ratio:.2f}" if sd.ratio is not None else ""
        same = f"{sd.kcat_same_lib_s:.3f}" if sd.kcat_same_lib_s else ""
        same_ratio = f"{sd.kctl_s / sd.kcat_same_lib_s:.2f}" if sd.kcat_same_lib_s else ""
        floor = f"{sd.floor_s:.3f}" if sd.floor_s else ""
        over_floor = f"**{sd.kctl_s / sd.floor_s:.2f}**" if sd.floor_s else ""
        floor_ratio = f"{sd.floor_s / sd.kcat_same_lib_s:.2f}" if sd.floor_s and sd.kcat_same_lib_s else ""
        lines.append(f"| {sd.operation} | `{sd.kctl_cmd}` | {sd.kctl_s:.3f} | `{sd.kcat_cmd}` | {kc} | {ratio} "
                     f"| {same} | {same_ratio} | {floor} | {over_floor} | {floor_ratio} "
                     f"| {TARGETS.get(sd.operation, '')} |")
    lines += [
        "", "Reading the table: every kctl figure includes the start-up row (the Python interpreter and the CLI's "
        "imports), which kcat does not pay. For produce, the bundled librdkafka's idempotent producer waits about "
        "0.5 s for its producer id before it sends (Debian's older librdkafka does not), so kcat on the same "
        "librdkafka is the like-for-like comparison; kctl's own timing of the transfer is in the next table. "
        "Against the Python floor, produce and consume differ: kctl hands records to librdkafka in blocks "
        "(produce_batch), so its transfer is quicker than the floor's record-at-a-time loop and makes up for its "
        "start-up; a consume is short enough that the start-up decides, and what kctl pays over the floor there "
        "is its imports (the CLI's typer, the spec's YAML and pydantic models), not its transfer. A bulk "
        "transfer's time on this cluster is bimodal (some runs take about twice as long on the brokers' side, "
        f"for kctl and the floor alike), hence medians of {BULK_RUNS} runs, each kctl run beside a floor run.",
        "", "### kctl beside Kafka's perf tools", "",
        "kctl runs as the CLI, timed by itself (produce: first send to last acknowledgement; consume: from the "
        "assignment to the last message); Kafka's perf tools run inside logger1 on the INTERNAL listener (their own "
        "timing; the consumer figure is fetch time).", "",
        NOTE, "",
        "| tool | direction | records | seconds | records/s | MB/s | kctl / Kafka |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for f in figures:
        ref = by.get("kafka-producer-perf-test" if f.direction == "produce" else "kafka-consumer-perf-test")
        ratio = f"{f.records_per_second / ref.records_per_second:.2f}" \
            if f.tool.startswith("kctl") and ref and ref.records_per_second else ""
        lines.append(f"| {f.tool} | {f.direction} | {f.records} | {f.seconds:.2f} | {f.records_per_second:,.0f} "
                     f"| {f.mb_per_second:.2f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.clients", description=__doc__)
    ap.add_argument("-f", "--file", type=Path, default=Path("kctl.yaml"), help="cluster spec")
    ap.add_argument("-n", "--records", type=int, default=200_000, help=f"records per tool (max {MAX_RECORDS})")
    ap.add_argument("--docs", type=Path, default=Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    try:
        spec, _ = load_cluster(args.file)
        if not kcat_available():
            print("warning: no kcat on PATH (make setup installs Debian's); kctl's side only", file=sys.stderr)
        sides, figures = run(spec, args.file, args.records)
    except KctlError as exc:
        print(f"error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1
    import confluent_kafka

    libs = (kcat_librdkafka() if kcat_available() else "(none)", confluent_kafka.libversion()[0])
    section = render(sides, figures, min(max(1000, args.records), MAX_RECORDS), spec, libs)
    print(section)
    if not args.no_write:
        write_section(section, args.docs)
        print(f"wrote {args.docs}", file=sys.stderr)
    return 0


def _drop_topics(spec: ClusterSpec, *names: str) -> None:
    """Best effort: a benchmark's topics go when it ends, also when it failed half-way."""
    for t in names:
        try:
            topics.delete(Target.of(spec), t)
        except KctlError:
            pass


if __name__ == "__main__":
    sys.exit(main())

