"""Benchmark: the migration to KRaft, phase by phase, under a steady acks=all load.

On a 3-node cluster of its own (kctl.testing, the JVMs' default flags): a topic of 6 partitions, replication factor
3, ``min.insync.replicas=2``; the drills' producer (:mod:`kctl.drill.load`: acks=all, idempotence on) writes
``--rate`` records/s throughout. After ``--settle`` seconds, `kctl migrate kraft next --yes` three times
(controllers, dual-write, kraft-brokers), then `kctl migrate kraft rollback --yes` (back to ZooKeeper: two broker
rolls), the three again, and `kctl migrate kraft finalize --yes` (the controllers' roll, ZooKeeper retired), each
from the CLI and timed, ``--settle`` seconds apart; then Kafka 4 on the finalized cluster: kctl.yaml's
``versions.kafka`` set to ``--upgrade-to``, its node image built first (`kctl image build`, not timed: an operator
builds it ahead), and `kctl apply --yes` timed (every node's container made again from it, the active controller's
node last, then ``metadata.version`` raised). Then a fresh consumer of its own reads every
partition from the beginning and every acknowledged record must be there (:func:`kctl.drill.check.compare`).
Rewrites the "Migration to KRaft" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from kctl.bench.doc import add_output_args, publish
from kctl.wait import pause_until

TOPIC = "bench-kraft"
PARTITIONS = 6
STEPS = (("next", "zookeeper -> controllers"), ("next", "controllers -> dual-write"),
         ("next", "dual-write -> kraft-brokers"), ("rollback", "kraft-brokers -> zookeeper"),
         ("next", "zookeeper -> controllers (again)"), ("next", "controllers -> dual-write (again)"),
         ("next", "dual-write -> kraft-brokers (again)"), ("finalize", "kraft-brokers -> kraft (finalize)"))


def _migrate(spec_file: Any, workdir: Any, action: str) -> tuple[float, dict[str, Any]]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kctl", "migrate", "kraft", action, "--yes", "-o", "json",
                        "-f", str(spec_file)], capture_output=True, text=True, cwd=workdir, timeout=1800,
                       env={**os.environ, "COLUMNS": "200"})
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"kctl migrate kraft {action} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return wall, dict(json.loads(p.stdout))


def _kctl(spec_file: Any, workdir: Any, *args: str) -> tuple[float, str]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], capture_output=True, text=True,
                       cwd=workdir, timeout=1800, env={**os.environ, "COLUMNS": "200"})
    if p.returncode != 0:
        raise SystemExit(f"kctl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return time.monotonic() - t0, p.stdout


def _upgrade(spec_file: Any, workdir: Any, version: str) -> tuple[float, float, dict[str, Any]]:
    """versions.kafka set to ``version``; (image build seconds, apply seconds, apply's JSON)."""
    import yaml

    data = yaml.safe_load(spec_file.read_text())
    data.setdefault("versions", {})["kafka"] = version
    spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    built, _ = _kctl(spec_file, workdir, "image", "build")
    applied, out = _kctl(spec_file, workdir, "apply", "--yes", "-o", "json")
    return built, applied, dict(json.loads(out))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="records per second produced throughout")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds of load before, between and after the phases")
    ap.add_argument("--upgrade-to", default="4.1.1", help="the Kafka 4 release the finalized cluster is upgraded to")
    add_output_args(ap)
    args = ap.parse_args(argv)
    from kctl.drill import check
    from kctl.drill.load import Load
    from kctl.testing.cluster import KafkaCluster

    runs: list[dict[str, Any]] = []
    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        load = Load(c.spec, TOPIC, PARTITIONS, rate=args.rate, acks="all").start()
        try:
            time.sleep(args.settle)
            for action, what in STEPS:
                print(f"bench: {what}", file=sys.stderr, flush=True)
                start = load.elapsed()
                wall, result = _migrate(c.spec_file, c.workdir, action)
                runs.append({"what": what, "wall": wall, "start": start, "end": load.elapsed(), "result": result})
                print(f"bench:   {wall:.1f} s", file=sys.stderr, flush=True)
                pause_until(time.monotonic() + args.settle)
            what = f"kraft (3.9.1) -> Kafka {args.upgrade_to} (`kctl apply`)"
            print(f"bench: {what}", file=sys.stderr, flush=True)
            start = load.elapsed()
            built, wall, result = _upgrade(c.spec_file, c.workdir, args.upgrade_to)
            start += built  # the image build before the apply is not the upgrade's
            before, after = result.get("metadata_version") or (None, None)
            rolls = result.get("rolls") or []
            upgrade_steps = [{"step": f"roll of {sum(len(r.get('steps') or []) for r in rolls)} node(s)",
                              "seconds": sum(float(r.get("seconds") or 0) for r in rolls)},
                             {"step": f"metadata.version {before} -> {after}", "seconds": 0.0}]
            runs.append({"what": what, "wall": wall, "start": start, "end": load.elapsed(),
                         "result": {"steps": upgrade_steps}, "built": built})
            print(f"bench:   {wall:.1f} s (image build before it {built:.1f} s)", file=sys.stderr, flush=True)
            time.sleep(args.settle)
        finally:
            rec = load.stop()
        read = check.read_topic(c.spec, TOPIC)  # a fresh consumer of its own, from the beginning
        cmp = check.compare(rec.acked, read, rec.produced)
    errors = ", ".join(f"{k} {v}" for k, v in sorted(rec.errors.items())) or "none"
    rows = []
    for r in runs:
        steps = ", ".join(f"{s['step']} {s['seconds']:.1f} s" if s["seconds"] else s["step"]
                          for s in r["result"]["steps"])
        stall = check.longest_gap(rec.ack_times, r["start"], r["end"])
        rows.append(f"| {r['what']} | **{r['wall']:.1f} s** | {stall:.1f} s | {steps} |")
    table = "\n".join(rows)
    section = f"""## Migration to KRaft

`python -m kctl.bench.kraft --rate {args.rate:g}` (part of `make bench`), on this machine,
{time.strftime('%Y-%m-%d')}: a 3-node colocated cluster (the JVMs' default flags), topic `{TOPIC}` ({PARTITIONS}
partitions, replication factor 3, `min.insync.replicas=2`), one producer with `acks=all` and idempotence on
writing {args.rate:g} records/s throughout. `kctl migrate kraft next --yes` three times, `kctl migrate kraft
rollback --yes`, the three again and `kctl migrate kraft finalize --yes`, then Kafka {args.upgrade_to} on the
finalized cluster (`versions.kafka: {args.upgrade_to}`, its image built first: {runs[-1]['built']:.1f} s, not counted;
`kctl apply --yes`), {args.settle:g} s of load before, between and after them. The stall is the longest stretch
without an acknowledgement while the command ran; each broker roll goes through `kctl restart`'s gates.

| phase | wall time | longest stall | its steps |
|---|---|---|---|
{table}

Over the whole run: {rec.produced} records produced, {cmp.acked} acknowledged, {cmp.read} read back;
**records lost: {cmp.lost}** (acknowledged but not read back), duplicates {cmp.duplicates}, out of order
{cmp.reordered}; producer errors: {errors}; still unacknowledged after the final flush: {rec.unfinished}.
"""
    publish(section, args)
    if cmp.lost or cmp.offset_mismatches:
        raise SystemExit(f"records lost: {cmp.lost} (sample {cmp.lost_sample}); offset mismatches"
                         f" {cmp.offset_mismatches}")


if __name__ == "__main__":
    main()
