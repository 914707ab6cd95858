"""The job's parser on static DataFrames: the seed's record verbatim, bare lines, and bad input.

A local Spark session (a JVM), no containers: kept out of tests/unit, which start neither.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from kctl.agent.nginx import generate, malformed

pytestmark = pytest.mark.spark

# The filebeat record of the project's seed (000_*), verbatim: note the empty $remote_addr.
SEED_RECORD = (
    '{"@timestamp":"2019-04-17T09:45:22.361Z","@metadata":{"beat":"filebeat","type":"_doc","version":"7.0.0",'
    '"topic":"var-logs"},"message":" - - [17/Apr/2019:09:45:19 +0000] \\"GET /index.html HTTP/1.1\\" 200 3700 '
    '\\"-\\" \\"curl/7.29.0\\" \\"-\\"","log":{"offset":505,"file":{"path":"/var/log/nginx/access.log"}},'
    '"input":{"type":"log"},"ecs":{"version":"1.0.0"},"host":{"name":"76595710480d","architecture":"x86_64",'
    '"os":{"platform":"centos","version":"7 (Core)","family":"redhat","name":"CentOS Linux","kernel":'
    '"3.10.0-693.el7.x86_64","codename":"Core"},"containerized":true,"hostname":"76595710480d"},"agent":'
    '{"ephemeral_id":"8909f3d3-8037-4288-bf12-7f22e821181b","hostname":"76595710480d","id":'
    '"0c54a8df-1b11-421a-b91b-98a18b4d1ff0","version":"7.0.0","type":"filebeat"},"cloud":{"instance":'
    '{"id":"i-00000472","name":"apple-dev.novalocal"},"machine":{"type":"8C16G100G"},"availability_zone":"nova",'
    '"provider":"openstack"}}'
)


def _df(spark, values, keys=None):  # type: ignore[no-untyped-def]
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

    schema = StructType([
        StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
        StructField("partition", IntegerType()), StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ])
    now = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    keys = keys or [None] * len(values)
    rows = [(k.encode() if k else None, v.encode() if v is not None else None, "t", 0, i, now)
            for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    return spark.createDataFrame(rows, schema)


def _parse(spark, values, keys=None):  # type: ignore[no-untyped-def]
    from kctl.stream.job import parse

    return [r.asDict() for r in parse(_df(spark, values, keys)).orderBy("offset").collect()]


def test_seed_record_parses_as_it_stands(spark) -> None:  # type: ignore[no-untyped-def]
    assert json.loads(SEED_RECORD)["@timestamp"] == "2019-04-17T09:45:22.361Z"
    [r] = _parse(spark, [SEED_RECORD])
    assert r["ok"] and r["reason"] is None
    assert r["host"] == "76595710480d"
    assert r["remote_addr"] == ""
    assert (r["method"], r["path"], r["protocol"]) == ("GET", "/index.html", "HTTP/1.1")
    assert (r["status"], r["bytes"]) == (200, 3700)
    assert r["user_agent"] == "curl/7.29.0"
    assert r["x_forwarded_for"] == "-"
    assert r["log_offset"] == 505 and r["log_file_path"] == "/var/log/nginx/access.log"
    # event time is the request time of the line, not @timestamp (09:45:22.361)
    assert r["event_time"].replace(tzinfo=None) == dt.datetime(2019, 4, 17, 9, 45, 19)


def test_bare_nginx_lines_take_host_from_key(spark) -> None:  # type: ignore[no-untyped-def]
    lines = [
        '203.0.113.9 - alice [01/Feb/2024:23:59:59 +0100] "POST /api/v1/orders HTTP/2.0" 201 512 '
        '"https://example.com/" "Mozilla/5.0 (X11)" "198.51.100.7"',
        '10.0.0.1 - - [01/Feb/2024:10:00:00 +0000] "GET / HTTP/1.1" 304 - "-" "curl/8"',  # plain combined, bytes -
    ]
    a, b = _parse(spark, lines, keys=["web-1", None])
    assert a["ok"] and a["host"] == "web-1" and a["status"] == 201 and a["bytes"] == 512
    assert a["x_forwarded_for"] == "198.51.100.7" and a["remote_user"] == "alice"
    assert a["event_time"].replace(tzinfo=None) == dt.datetime(2024, 2, 1, 22, 59, 59)  # +0100 -> UTC
    assert b["ok"] and b["host"] == "-" and b["bytes"] == 0 and b["x_forwarded_for"] is None


def test_request_time_falls_back_to_timestamp(spark) -> None:  # type: ignore[no-untyped-def]
    ev = json.loads(SEED_RECORD)
    ev["message"] = ev["message"].replace("17/Apr/2019:09:45:19 +0000", "not a time")
    [r] = _parse(spark, [json.dumps(ev)])
    assert r["ok"]
    assert r["event_time"].replace(tzinfo=None) == dt.datetime(2019, 4, 17, 9, 45, 22, 361000)


def test_malformed_go_to_deadletter_with_reason(spark) -> None:  # type: ignore[no-untyped-def]
    huge = '1.2.3.4 - - [01/Feb/2024:10:00:00 +0000] "GET / HTTP/1.1" 200 99999999999999999999999 "-" "-" "-"'
    bad = malformed(6, seed=3) + ['{"message": "x", "host": ', huge]
    rows = _parse(spark, bad)
    assert [r["ok"] for r in rows] == [False] * len(bad)
    reasons = [r["reason"] for r in rows]
    assert reasons == [
        "invalid JSON",
        "JSON event without a message field",
        "message is not an nginx access-log line",
        "message is not an nginx access-log line",
        "no parsable request time nor @timestamp",
        "empty value",
        "invalid JSON",
        "bytes sent out of range",
    ]
    assert all(r["value"] == v for r, v in zip(rows, bad, strict=True))


def test_generated_events_all_parse_and_match_ground_truth(spark) -> None:  # type: ignore[no-untyped-def]
    from kctl.agent.nginx import ground_truth
    from kctl.stream.job import batch_counts, parse

    start = dt.datetime(2024, 5, 1, 12, 0, 30, tzinfo=dt.timezone.utc)
    events = list(generate(500, seed=7, hosts=3, start=start, rate=3.0))
    parsed = parse(_df(spark, [e.value for e in events], [e.key for e in events]))
    assert parsed.where("not ok").count() == 0
    counts = batch_counts(parsed)
    assert all(r["ok"] for r in counts)
    got = {(dt.datetime.fromtimestamp(r["ws"], dt.timezone.utc), r["host"], r["status"]): (r["requests"], r["bytes"])
           for r in counts}
    assert len(got) == len(counts) and got == ground_truth(events)
