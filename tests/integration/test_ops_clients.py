"""kctl produce, consume and group against the shared cluster, cross-checked with kafka-consumer-groups.sh."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from tests.integration.cli import js, kctl, tool_config
from tests.kafka_tools import parse_kafka_groups_describe

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka_cluster(profiled_cluster: Any) -> Any:
    """This module's tests take the profile matrix's cluster (tests/integration/conftest.py)."""
    return profiled_cluster




@pytest.fixture
def topic(kafka_cluster: Any) -> Any:
    t = f"ops-pc-{uuid.uuid4().hex[:8]}"
    p = kctl(kafka_cluster, "topic", "create", t, "-p", "3", "-r", str(min(3, len(kafka_cluster.spec.nodes))))
    assert p.returncode == 0, p.stderr
    yield t
    kctl(kafka_cluster, "topic", "delete", t, "--yes")


@pytest.mark.both_profiles
def test_produce_consume_with_keys(kafka_cluster: Any, topic: str) -> None:
    lines = "".join(f"k{i}:v{i}\n" for i in range(20))
    p = kctl(kafka_cluster, "produce", topic, "--key-separator", ":", "--acks", "all", "-o", "json", stdin=lines)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["delivered"] == 20 and json.loads(p.stdout)["failed"] == 0
    p = kctl(kafka_cluster, "consume", topic, "--from-beginning", "--max", "20", "--timeout", "10", "--print-key")
    assert p.returncode == 0, p.stderr
    got = sorted(p.stdout.splitlines())
    assert got == sorted(f"k{i}\tv{i}" for i in range(20))
    assert "stopped by max" in p.stderr


def test_produce_errors(kafka_cluster: Any, topic: str) -> None:
    p = kctl(kafka_cluster, "produce", f"ops-missing-{uuid.uuid4().hex[:6]}", stdin="x\n")
    assert p.returncode == 1 and "does not exist" in p.stderr
    p = kctl(kafka_cluster, "produce", topic, "--key-separator", ":", stdin="a:b\nno-separator\n")
    assert p.returncode == 1 and "delivered 1, failed 1" in p.stderr


def test_consume_partition_offset_and_timeout(kafka_cluster: Any, topic: str) -> None:
    # Keyed, so the records spread over the partitions by murmur2 (unkeyed ones may all land in one).
    lines = "".join(f"k{i}:m{i}\n" for i in range(30))
    assert kctl(kafka_cluster, "produce", topic, "--key-separator", ":", stdin=lines).returncode == 0
    p = kctl(kafka_cluster, "consume", topic, "--partition", "0", "--offset", "1", "--timeout", "3", "-o", "json")
    assert p.returncode == 0, p.stderr
    recs = [json.loads(x) for x in p.stdout.splitlines()]  # -o json: one JSON object per line
    assert recs and recs[0]["offset"] == 1 and {r["partition"] for r in recs} == {0}
    assert "stopped by timeout" in p.stderr
    p = kctl(kafka_cluster, "consume", topic, "--partition", "7", "--timeout", "1")
    assert p.returncode == 2 and "has partitions 0..2" in p.stderr


def test_group_commits_exactly_what_was_printed(kafka_cluster: Any, topic: str) -> None:
    g = f"ops-group-{uuid.uuid4().hex[:8]}"
    assert kctl(kafka_cluster, "produce", topic, stdin="".join(f"m{i}\n" for i in range(30))).returncode == 0
    p = kctl(kafka_cluster, "consume", topic, "--from-beginning", "--group", g, "--max", "10", "--timeout", "10")
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 10
    d = js(kafka_cluster, "group", "describe", g)
    assert sum(x["committed"] or 0 for x in d["partitions"]) == 10
    # lag is over the partitions the group has offsets for, as kafka-consumer-groups shows them
    assert d["total_lag"] == sum(x["log_end"] - x["committed"] for x in d["partitions"])
    assert d["state"] in ("EMPTY", "STABLE")

    rc, out = kafka_cluster.exec("logger1", ["/opt/kafka/bin/kafka-consumer-groups.sh", "--bootstrap-server",
                                             "logger1:9092", *tool_config(kafka_cluster), "--describe",
                                             "--group", g], stderr=False)
    assert rc == 0, out
    theirs = {(r["topic"], r["partition"]): r for r in parse_kafka_groups_describe(out)}
    for x in d["partitions"]:
        r = theirs[(x["topic"], x["partition"])]
        assert (r["current_offset"], r["log_end_offset"], r["lag"]) == (x["committed"], x["log_end"], x["lag"])

    # the rest: the group resumes where it stopped (partitions without offsets from the beginning)
    p = kctl(kafka_cluster, "consume", topic, "--group", g, "--from-beginning", "--timeout", "5")
    assert len(p.stdout.splitlines()) == 20
    assert js(kafka_cluster, "group", "describe", g)["total_lag"] == 0
    assert g in [x["group"] for x in js(kafka_cluster, "group", "list")]

    # reset: a dry run changes nothing, --execute does
    plan = js(kafka_cluster, "group", "reset-offsets", g, "--topic", topic, "--to-earliest")
    assert not plan["executed"] and all(m["target"] == m["earliest"] for m in plan["moves"])
    assert js(kafka_cluster, "group", "describe", g)["total_lag"] == 0
    plan = js(kafka_cluster, "group", "reset-offsets", g, "--topic", topic, "--to-offset", "2", "--execute")
    assert plan["executed"]
    d = js(kafka_cluster, "group", "describe", g)
    assert all(x["committed"] == min(2, x["log_end"]) for x in d["partitions"])
    plan = js(kafka_cluster, "group", "reset-offsets", g, "--topic", topic, "--to-datetime", "2000-01-01T00:00:00",
              "--execute")
    assert all(m["target"] == m["earliest"] for m in plan["moves"])
    assert js(kafka_cluster, "group", "describe", g)["total_lag"] == 30
    plan = js(kafka_cluster, "group", "reset-offsets", g, "--topic", topic, "--to-latest", "--execute")
    assert js(kafka_cluster, "group", "describe", g)["total_lag"] == 0

    assert kctl(kafka_cluster, "group", "delete", g).returncode == 0
    p = kctl(kafka_cluster, "group", "describe", g)
    assert p.returncode == 1 and "does not exist" in p.stderr
    p = kctl(kafka_cluster, "group", "delete", g)
    assert p.returncode == 1 and "does not exist" in p.stderr


def test_consume_stops_cleanly_on_ctrl_c(kafka_cluster: Any, topic: str) -> None:
    g = f"ops-sigint-{uuid.uuid4().hex[:8]}"
    assert kctl(kafka_cluster, "produce", topic, stdin="".join(f"m{i}\n" for i in range(5))).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "kctl", "consume", topic, "--from-beginning", "--group", g,
                             "-f", str(kafka_cluster.spec_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a tty
    lines: list[str] = []
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while len(lines) < 5 and time.monotonic() < deadline:
        lines.append(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopped by interrupt" in err
    assert js(kafka_cluster, "group", "describe", g)["total_lag"] == 0
    kctl(kafka_cluster, "group", "delete", g)


# ----- keyed records: the Java client's partition --------------------------------------------------


def java_murmur2(data: bytes) -> int:
    """org.apache.kafka.common.utils.Utils.murmur2, as an unsigned 32-bit value."""
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[4 * n4:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: bytes, partitions: int) -> int:
    """The Java producer's partition for a keyed record: toPositive(murmur2(key)) % partitions."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def test_java_murmur2_matches_kafkas_own_test_vectors() -> None:
    # Kafka's UtilsTest.testMurmur2 (signed Java ints)
    cases = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
             "a-little-bit-longer-string": -1486304829, "abc": 479470107,
             "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    for text, want in cases.items():
        assert java_murmur2(text.encode()) == want & 0xFFFFFFFF, text


@pytest.mark.both_profiles
def test_keyed_records_land_where_the_java_client_puts_them(kafka_cluster: Any) -> None:
    t = f"ops-keys-{uuid.uuid4().hex[:8]}"
    parts = 5
    p = kctl(kafka_cluster, "topic", "create", t, "-p", str(parts), "-r", str(min(3, len(kafka_cluster.spec.nodes))))
    assert p.returncode == 0, p.stderr
    try:
        keys = [f"key-{i}" for i in range(40)] + ["host-a", "web01", "x"]
        p = kctl(kafka_cluster, "produce", t, "--key-separator", ":", stdin="".join(f"{k}:kctl\n" for k in keys))
        assert p.returncode == 0, p.stderr
        # The same keys through Kafka's own console producer (the Java client) in a node container.
        java_keys = keys[:8]
        text = "".join(f"{k}:java\\n" for k in java_keys)
        rc, out = kafka_cluster.exec("logger1", [
            "bash", "-c", f"printf '{text}' | /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server "
                          f"logger1:9092 --topic {t} --property parse.key=true --property key.separator=:"
                          + "".join(f" --producer.config {f}" for f in tool_config(kafka_cluster)[1:])])
        assert rc == 0, out
        p = kctl(kafka_cluster, "consume", t, "--from-beginning", "--max", str(len(keys) + len(java_keys)),
                 "--timeout", "15", "-o", "json")
        assert p.returncode == 0, p.stderr
        recs = [json.loads(x) for x in p.stdout.splitlines()]
        assert len(recs) == len(keys) + len(java_keys)
        seen = {(r["key"], r["value"]): r["partition"] for r in recs}
        assert len({seen[(k, "kctl")] for k in keys}) > 1  # the keys spread over partitions
        for k in keys:
            assert seen[(k, "kctl")] == java_partition(k.encode(), parts), k
        for k in java_keys:
            assert seen[(k, "java")] == seen[(k, "kctl")], k
    finally:
        kctl(kafka_cluster, "topic", "delete", t, "--yes")


@pytest.mark.both_profiles
def test_gen_logs_goes_through_the_same_loop_and_partitioner(kafka_cluster: Any) -> None:
    t = f"ops-gen-{uuid.uuid4().hex[:8]}"
    p = kctl(kafka_cluster, "topic", "create", t, "-p", "4", "-r", str(min(3, len(kafka_cluster.spec.nodes))))
    assert p.returncode == 0, p.stderr
    try:
        p = subprocess.run([sys.executable, "-m", "kctl", "gen", "logs", "--topic", t, "--count", "300", "--rate",
                            "2000", "--hosts", "5", "--malformed", "4", "-b", kafka_cluster.bootstrap_servers,
                            "-f", str(kafka_cluster.spec_file), "-o", "json"], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        res = json.loads(p.stdout)
        assert (res["produced"], res["delivered"], res["failed"]) == (304, 304, 0)
        p = kctl(kafka_cluster, "consume", t, "--from-beginning", "--max", "304", "--timeout", "15", "-o", "json")
        recs = [json.loads(x) for x in p.stdout.splitlines()]
        keyed = [r for r in recs if r["key"] is not None]
        assert len(recs) == 304 and len(keyed) == 300 and len({r["key"] for r in keyed}) == 5
        for r in keyed:  # each host's events in the Java client's partition for that host
            assert r["partition"] == java_partition(r["key"].encode(), 4), r["key"]
    finally:
        kctl(kafka_cluster, "topic", "delete", t, "--yes")
