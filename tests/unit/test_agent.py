"""The log generator, its ground truth and the file follower: no Kafka, no Spark."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from kctl.agent.nginx import format_time_local, generate, ground_truth, malformed, malformed_records
from kctl.agent.produce import follow_lines

START = dt.datetime(2019, 4, 17, 9, 45, 19, tzinfo=dt.timezone.utc)
LINE = re.compile(r'^(\S*) - (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" "([^"]*)"$')


def test_same_seed_same_events() -> None:
    a = [e.value for e in generate(200, seed=4, start=START)]
    b = [e.value for e in generate(200, seed=4, start=START)]
    c = [e.value for e in generate(200, seed=5, start=START)]
    assert a == b and a != c


def test_events_are_filebeat_json_with_combined_plus_xff_lines() -> None:
    offsets: dict[str, int] = {}
    last: dict[str, str] = {}
    for e in generate(300, seed=1, hosts=3, start=START, rate=10):
        ev = json.loads(e.value)
        assert set(ev) >= {"@timestamp", "@metadata", "message", "host", "log"}
        assert ev["host"]["name"] == e.key == e.host
        assert ev["log"]["file"]["path"] == "/var/log/nginx/access.log"
        assert ev["log"]["offset"] == offsets.get(e.host, 0)  # filebeat's byte offset per file
        offsets[e.host] = ev["log"]["offset"] + len(ev["message"].encode()) + 1
        m = LINE.match(ev["message"])
        assert m, ev["message"]
        assert int(m.group(5)) == e.status and int(m.group(6)) == e.bytes
        assert m.group(3) == format_time_local(e.time)
        assert last.get(e.host, "") <= e.time.isoformat()  # each host's lines in order
        last[e.host] = e.time.isoformat()
    assert len(offsets) == 3


def test_time_local_matches_seed_format() -> None:
    assert format_time_local(START) == "17/Apr/2019:09:45:19 +0000"


def test_ground_truth_sums_per_minute_host_status() -> None:
    events = list(generate(1000, seed=2, hosts=2, start=START, rate=5))
    truth = ground_truth(events)
    assert sum(r for r, _ in truth.values()) == 1000
    assert sum(b for _, b in truth.values()) == sum(e.bytes for e in events)
    assert all(w.second == 0 for w, _, _ in truth)


def test_malformed_records_are_interleaved_and_counted() -> None:
    recs = list(malformed_records(((str(i), "v") for i in range(20)), 5, seed=1))
    assert len(recs) == 25 and sum(1 for k, _ in recs if k is None) == 5
    assert len(set(malformed(6))) == 6


def test_follow_lines_reads_whole_lines_with_offsets(tmp_path: Path) -> None:
    p = tmp_path / "access.log"
    p.write_text("a\nbb\nccc\n")
    assert list(follow_lines(p, follow=False, max_seconds=5, max_lines=None)) == [(0, "a"), (2, "bb"), (5, "ccc")]
