"""Pure logic of kctl's ops modules: no Docker, no cluster."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

from kctl.bench import clients as bench
from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kafka import client, configs, console, groups, produce, topics
from kctl.kafka.client import Target
from kctl.model.spec import ClusterSpec
from kctl.zk import fourlw, words
from tests import kafka_tools
from tests.unit.fake_zk import free_port

# ----- configs -----------------------------------------------------------------------------


def test_update_modes_from_kafka_docs() -> None:
    assert configs.update_mode("log.cleaner.threads") == "cluster-wide"
    assert configs.update_mode("min.insync.replicas") == "cluster-wide"
    assert configs.update_mode("advertised.listeners") == "per-broker"
    assert configs.update_mode("listener.name.external.ssl.keystore.location") == "per-broker"
    assert configs.update_mode("follower.replication.throttled.rate") == "per-broker"
    assert configs.update_mode("log.dirs") == "read-only"
    assert configs.update_mode("num.partitions") == "read-only"
    assert configs.update_mode("zookeeper.connect") == "read-only"
    assert not configs.PER_BROKER & configs.CLUSTER_WIDE


def test_source_names_follow_the_precedence() -> None:
    assert [configs.source_name(s) for s in configs.PRECEDENCE[1:]] == [
        "dynamic per-broker", "dynamic cluster-wide default", "static server.properties", "Kafka default"]


def test_read_only_key_refused_with_spec_setting() -> None:
    with pytest.raises(KctlError) as e:
        configs.check_dynamic(configs.Entity("broker", "1"), ["log.dirs", "log.cleaner.threads"])
    assert "log.dirs is read-only" in e.value.message and "restart" in e.value.message
    assert e.value.hint is not None and "kafka.log_dirs" in e.value.hint
    with pytest.raises(KctlError) as e:
        configs.check_dynamic(configs.Entity("broker", "1"), ["background.threads.x"])
    assert e.value.hint is not None and "kafka.overrides" in e.value.hint
    with pytest.raises(KctlError, match="per-broker"):
        configs.check_dynamic(configs.Entity("broker-default"), ["listeners"])
    configs.check_dynamic(configs.Entity("broker", "1"), ["log.cleaner.threads"])
    configs.check_dynamic(configs.Entity("topic", "t"), ["anything"])


def test_entity_selection() -> None:
    assert configs.entity_from(broker=2) == configs.Entity("broker", "2")
    assert configs.entity_from(broker_default=True).tool_args == ["--entity-type", "brokers", "--entity-default"]
    assert configs.entity_from(client="c").tool_args == ["--entity-type", "clients", "--entity-name", "c"]
    with pytest.raises(UsageError):
        configs.entity_from()
    with pytest.raises(UsageError):
        configs.entity_from(broker=1, topic="t")


def test_parse_pairs_and_quota_keys() -> None:
    assert configs.parse_pairs(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(UsageError):
        configs.parse_pairs(["novalue"])
    with pytest.raises(UsageError):
        configs.check_quota_keys(configs.Entity("client", "c"), ["producer_byte_rate", "bogus"])


KAFKA_CONFIGS_OUT = """Dynamic configs for broker 2 are:
  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.threads=2, \
DEFAULT_CONFIG:log.cleaner.threads=1}
  alter.config.policy.class.name=null sensitive=false synonyms={}
  advertised.listeners=INTERNAL://logger2:9092,EXTERNAL://127.0.0.1:29093 sensitive=false \
synonyms={STATIC_BROKER_CONFIG:advertised.listeners=INTERNAL://logger2:9092,EXTERNAL://127.0.0.1:29093}
"""


def test_parse_kafka_configs_describe() -> None:
    d = kafka_tools.parse_kafka_configs(KAFKA_CONFIGS_OUT)
    assert d["log.cleaner.threads"]["value"] == "2"
    assert d["log.cleaner.threads"]["synonyms"] == [("DYNAMIC_BROKER_CONFIG", "log.cleaner.threads", "2"),
                                                   ("DEFAULT_CONFIG", "log.cleaner.threads", "1")]
    assert d["alter.config.policy.class.name"]["value"] is None
    assert d["advertised.listeners"]["value"] == "INTERNAL://logger2:9092,EXTERNAL://127.0.0.1:29093"


def test_parse_quota_and_tool_error() -> None:
    q = configs.parse_quota_describe(
        "Quota configs for client-id 'c1' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0\n")
    assert q == {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0}
    assert configs.parse_quota_describe("") == {}
    out = ("Error while executing config command with args '...'\njava.util.concurrent.ExecutionException: x\n"
           "\tat java.base/Foo.bar(Foo.java:1)\nCaused by: org.apache.kafka.common.errors.InvalidRequestException: "
           "Cannot update these configs dynamically: Set(log.dirs)\n")
    assert configs.tool_error(out) == "Cannot update these configs dynamically: Set(log.dirs)"


# ----- topics ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ok", "a.b_c-D9", "x" * 249])
def test_valid_topic_names(name: str) -> None:
    topics.validate_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "bad name", "bad!", "é"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(UsageError, match="invalid topic name"):
        topics.validate_name(name)


KAFKA_TOPICS_OUT = (
    "Topic: t1\tTopicId: 6E2ZPfYVQ7-AEHUiASkkng\tPartitionCount: 2\tReplicationFactor: 2\t"
    "Configs: min.insync.replicas=2,segment.bytes=1073741824\n"
    "\tTopic: t1\tPartition: 0\tLeader: 2\tReplicas: 2,1\tIsr: 2,1\tElr: N/A\tLastKnownElr: N/A\n"
    "\tTopic: t1\tPartition: 1\tLeader: none\tReplicas: 3,2\tIsr: \tElr: N/A\tLastKnownElr: N/A\n"
)


def test_parse_kafka_topics_describe() -> None:
    d = kafka_tools.parse_kafka_topics_describe(KAFKA_TOPICS_OUT)
    assert (d["topic"], d["partition_count"], d["replication_factor"]) == ("t1", 2, 2)
    assert d["configs"] == {"min.insync.replicas": "2", "segment.bytes": "1073741824"}
    assert d["partitions"][0] == {"leader": 2, "replicas": [2, 1], "isr": [2, 1]}
    assert d["partitions"][1] == {"leader": None, "replicas": [3, 2], "isr": []}


# ----- groups: offsets math ---------------------------------------------------------------------


def test_clamp() -> None:
    assert groups.clamp(5, 0, 10) == (5, "")
    assert groups.clamp(-3, 2, 10)[0] == 2
    assert groups.clamp(50, 2, 10)[0] == 10


def test_plan_targets() -> None:
    cur = {0: 3, 1: None}
    e, lt = {0: 1, 1: 0}, {0: 10, 1: 4}
    assert groups.plan_targets("earliest", None, cur, e, lt) == {0: (1, ""), 1: (0, "")}
    assert groups.plan_targets("latest", None, cur, e, lt) == {0: (10, ""), 1: (4, "")}
    t = groups.plan_targets("offset", 6, cur, e, lt)
    assert t[0] == (6, "") and t[1][0] == 4
    t = groups.plan_targets("datetime", None, cur, e, lt, by_time={0: 7, 1: -1})
    assert t[0] == (7, "") and t[1][0] == 4 and "latest" in t[1][1]
    with pytest.raises(UsageError):
        groups.plan_targets("sideways", None, cur, e, lt)


def test_lag_and_datetime() -> None:
    assert groups.lag(3, 10) == 7 and groups.lag(None, 10) is None and groups.lag(12, 10) == 0
    assert groups.parse_datetime("1970-01-01T00:00:01") == 1000
    assert groups.parse_datetime("1970-01-01T01:00:00+01:00") == 0
    assert groups.parse_datetime("2024-01-01T00:00:00Z") == 1704067200000
    with pytest.raises(UsageError):
        groups.parse_datetime("yesterday")


def test_parse_kafka_groups_describe() -> None:
    out = ("\nConsumer group 'g' has no active members.\n\n"
           "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID HOST CLIENT-ID\n"  # noqa: E501
           "g               t               0          4               10              6               -               -               -\n"  # noqa: E501
           "g               t               1          -               3               -               -               -               -\n")  # noqa: E501
    rows = kafka_tools.parse_kafka_groups_describe(out)
    assert rows[0]["partition"] == 0 and rows[0]["current_offset"] == 4 and rows[0]["lag"] == 6
    assert rows[1]["current_offset"] is None and rows[1]["log_end_offset"] == 3


# ----- produce -------------------------------------------------------------------------------------


class _Msg:
    """The few Message methods render() calls."""

    def __init__(self, value: bytes | None, key: bytes | None = None, partition: int = 0, offset: int = 0) -> None:
        self._v, self._k, self._p, self._o = value, key, partition, offset

    def value(self) -> bytes | None:
        return self._v

    def key(self) -> bytes | None:
        return self._k

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def timestamp(self) -> tuple[int, int]:
        return 1, 1700000000000


def _blocks(data: bytes, sep: str | None = None, block: int = 4) -> tuple[list[tuple[bytes | None, bytes]], Any]:
    res = produce.ProduceResult("t")
    stream = io.BufferedReader(io.BytesIO(data), buffer_size=block)  # type: ignore[arg-type]
    blocks = console.records(stream, sep, res, block)
    return [r for b in blocks for r in (b.pairs() if isinstance(b, produce.Values) else b)], res


def test_input_lines_across_block_boundaries() -> None:
    got, res = _blocks(b"alpha\nbe\r\n\ngamma-long-line\nlast")
    assert [v for _, v in got] == [b"alpha", b"be", b"", b"gamma-long-line", b"last"]
    assert all(k is None for k, _ in got) and res.bytes == 5 + 2 + 15 + 4 and res.failed == 0


def test_input_keys_and_missing_separator() -> None:
    got, res = _blocks(b"k1:v1:x\nnosep\nk2:\n:v3\n", ":")
    assert got == [(b"k1", b"v1:x"), (b"k2", b""), (b"", b"v3")]
    assert res.failed == 1 and res.errors == ["line 2: no key separator ':' in line"]


def test_offsets() -> None:
    assert console.parse_offset("earliest") == "earliest"
    assert console.parse_offset("end") == "latest"
    assert console.parse_offset("12") == 12
    for bad in ("-1", "x"):
        with pytest.raises(UsageError):
            console.parse_offset(bad)


def test_render_blocks() -> None:
    msgs = [_Msg(b"v1", b"k1", 2, 7), _Msg(None, None), _Msg("é".encode(), b"k")]
    assert console.render(msgs, "value") == "v1\n\né\n".encode()
    assert console.render(msgs, "key") == "k1\tv1\nnull\tnull\nk\té\n".encode()
    rows = [json.loads(x) for x in console.render(msgs, "json").decode().splitlines()]
    assert rows[0] == {"topic": "t", "partition": 2, "offset": 7, "timestamp_ms": 1700000000000, "key": "k1",
                       "value": "v1"}
    assert rows[1]["key"] is None and rows[1]["value"] is None and rows[2]["value"] == "é"


def test_render_blocks_in_c_match_a_plain_loop() -> None:
    msgs = [_Msg(None if i % 7 == 0 else b"v%d" % i, None if i % 5 == 0 else b"k%d" % i) for i in range(100)]
    assert console.render(msgs, "value") == b"".join((m.value() or b"") + b"\n" for m in msgs)
    assert console.render(msgs, "key") == b"".join(
        (m.key() or b"null") + b"\t" + (m.value() or b"null") + b"\n" for m in msgs)
    assert console.render([], "value") == console.render([], "key") == b""


def test_error_events_are_split_from_messages() -> None:
    class _Err(_Msg):
        def __init__(self, err: object, v: bytes | None = None) -> None:
            super().__init__(v, None)
            self._e = err

        def error(self) -> object:
            return self._e

    ok = [_Err(None, b"a"), _Err(None, b"b")]
    assert console.split_errors(ok) == (ok, [])
    bad = [_Err(None, b"a"), _Err("eof"), _Err(None, b"c")]
    good, errors = console.split_errors(bad)
    assert [m.value() for m in good] == [b"a", b"c"] and errors == ["eof"]
    assert console.split_errors([]) == ([], [])
    # A real KafkaError, whose == raises when compared with None (a missing topic's error event did that).
    from confluent_kafka import KafkaError

    real = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    good, errors = console.split_errors([_Err(None, b"a"), _Err(real)])
    assert [m.value() for m in good] == [b"a"] and errors == [real]


def test_one_translation_of_kafka_errors() -> None:
    from confluent_kafka import KafkaError, KafkaException

    def exc(code: int) -> KafkaException:
        return KafkaException(KafkaError(code, "broker said so"))

    e = client.kafka_error(exc(KafkaError.UNKNOWN_TOPIC_OR_PART), "topic 't1'", topic="t1")
    assert e.message == "topic 't1' does not exist" and e.hint and "topic list" in e.hint
    e = client.kafka_error(exc(KafkaError.UNKNOWN_TOPIC_OR_PART), "topic t2")  # configs' wording
    assert e.message == "topic t2 does not exist"
    e = client.kafka_error(exc(KafkaError.GROUP_ID_NOT_FOUND), "cannot describe 'g'", group="g")
    assert e.message == "consumer group 'g' does not exist"
    e = client.kafka_error(exc(KafkaError.NON_EMPTY_GROUP), "cannot delete 'g'", group="g")
    assert "still has active members" in e.message
    e = client.kafka_error(exc(KafkaError._TIMED_OUT), "topic 't'")
    assert isinstance(e, ClusterError) and "did not answer in time" in e.message
    e = client.kafka_error(exc(KafkaError.POLICY_VIOLATION), "cannot create 't'")
    assert e.message == "cannot create 't': POLICY_VIOLATION: broker said so"
    assert client.error_code(ValueError("plain")) == ("", "plain")


def test_produce_loop_counts_every_record_when_no_broker_answers() -> None:
    # A real librdkafka producer, nobody listening (on a port the test bound and closed): every record must
    # come back failed, none delivered, none lost between the counters (only failures are reported).
    blocks = [[(None, b"x" * 10)] * 50, [(b"k", b"y")] * 25, [(None, b"z" * 2_000_000)]]
    res = produce.send(Target.of(None, f"127.0.0.1:{free_port()}"), "t", blocks, timeout=1.0, check=False,
                       **{"message.max.bytes": 1_000_000})
    assert res.produced == 75 and res.delivered == 0 and res.failed == 76
    assert any("timed out" in e.lower() for e in res.errors) and any("too large" in e.lower() for e in res.errors)


def test_produce_block_with_a_refused_record_and_a_full_queue() -> None:
    # Blocks go through produce_batch: a record librdkafka refuses fails alone, records the local
    # queue has no room for wait for room (here: until the first ones time out), nothing is lost.
    block = [(None, b"a")] * 30 + [(None, b"z" * 2_000_000)] + [(b"k", b"b")] * 30
    res = produce.send(Target.of(None, f"127.0.0.1:{free_port()}"), "t", [block], timeout=1.0, check=False,
                       **{"message.max.bytes": 1_000_000, "queue.buffering.max.messages": 20})
    assert res.produced == 60 and res.delivered == 0 and res.failed == 61
    assert any("too large" in e.lower() for e in res.errors)


def test_value_blocks_are_sent_like_pairs() -> None:
    # Keyless input goes as Values (no (None, value) pair per record), in batch and one by one.
    blocks = [produce.Values([b"x" * 10] * 40), produce.Values([b"y"]), [(b"k", b"v")] * 3]
    res = produce.send(Target.of(None, f"127.0.0.1:{free_port()}"), "t", blocks, timeout=1.0, check=False)
    assert res.produced == 44 and res.delivered == 0 and res.failed == 44
    assert list(produce.Values([b"a", b"b"]).pairs()) == [(None, b"a"), (None, b"b")]


def test_bad_acks_refused() -> None:
    with pytest.raises(UsageError):
        produce.send(Target.of(None, "127.0.0.1:1"), "t", [], acks="2", check=False)


def test_cli_imports_no_kafka_client_and_agent_no_stream() -> None:
    code = ("import sys, kctl.cli.clients, kctl.agent.produce; "
            "print('confluent_kafka' in sys.modules, any(m.startswith('kctl.stream') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


# ----- bench parsing -------------------------------------------------------------------------------


def test_parse_perf_tools() -> None:
    text = ("100000 records sent, 50000.0 records/sec (4.77 MB/sec), 5.0 ms avg latency\n"
            "200000 records sent, 40000.0 records/sec (3.81 MB/sec), 10.0 ms avg latency, 200 ms max latency\n")
    assert bench.parse_producer_perf(text) == (200000, 5.0)
    csv = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
           "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
           "2024-01-01 00:00:00:000, 2024-01-01 00:00:03:000, 19.07, 6.35, 200000, 66666.6, 1000, 2000, 9.5, 100000\n")
    assert bench.parse_consumer_perf(csv) == (200000, 2.0)
    with pytest.raises(KctlError):
        bench.parse_producer_perf("nothing")


# ----- zk words ----------------------------------------------------------------------------------------


def test_word_explanations() -> None:
    spec = ClusterSpec()
    text = "mntr is not executed because it is not in the whitelist."
    why = words.explain("mntr", text, spec)
    assert why is not None and "zookeeper.four_letter_words" in why
    assert "quorum" in (words.explain("srvr", fourlw.NOT_SERVING, spec) or "")
    assert words.explain("ruok", "imok", spec) is None
    with pytest.raises(UsageError):
        words.run(spec, "xyzw")
    assert set(words.DESCRIPTIONS) == set(fourlw.WORDS)


def test_word_against_fake_server_not_whitelisted(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec()

    def fake_ask(host: str, port: int, word: str, timeout: float = 1.0) -> fourlw.Answer:
        return fourlw.Answer(word, host, port, f"{word} is not executed because it is not in the whitelist.\n", 1.0)

    monkeypatch.setattr(fourlw, "ask", fake_ask)
    res = words.run(spec, "wchc", "logger1")
    assert len(res) == 1 and not res[0].ok and not res[0].whitelisted
    assert res[0].explanation is not None and "four_letter_words" in res[0].explanation

    def down(host: str, port: int, word: str, timeout: float = 1.0) -> fourlw.Answer:
        raise fourlw.FourLetterError("refused")

    monkeypatch.setattr(fourlw, "ask", down)
    res = words.run(spec, "srvr")
    assert len(res) == 3 and all(r.error == "refused" for r in res)


def test_bench_section_prints_both_sides_and_the_ratio() -> None:
    sides = [bench.Side("produce", "kctl produce T", 1.3, "kcat -P -t T", 1.0, 3, 2.6, 1.2),
             bench.Side("topic describe", "kctl topic describe T", 0.25, "kcat -L -t T", None, 7)]
    figures = [bench.Figure("kctl produce", "produce", 1000, 1.0),
               bench.Figure("kafka-producer-perf-test", "produce", 1000, 0.5)]
    text = bench.render(sides, figures, 1000, ClusterSpec(), ("2.0.2", "2.16.0"))
    assert text.startswith(bench.SECTION + "\n") and "librdkafka 2.0.2" in text and "librdkafka 2.16.0" in text
    assert ("| produce | `kctl produce T` | 1.300 | `kcat -P -t T` | 1.000 | 1.30 | 2.600 | 0.50 | 1.200 | **1.08**"
            " | 0.46 | <= 1.3x kcat; <= 1.2x floor |") in text
    assert ("| topic describe | `kctl topic describe T` | 0.250 | `kcat -L -t T` | (no kcat) |  |  |  |  |  |  "
            "| < 0.2 s |" in text)
    assert "| kctl produce | produce | 1000 | 1.00 | 1,000 | 0.10 | 0.50 |" in text
