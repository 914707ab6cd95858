"""The time left of a running reassignment (kctl.kafka.reassign.estimate) and the record execute leaves for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kctl.kafka import reassign as ra
from kctl.kafka.reassign import Moving, ReassignStatus


def moving(left: int, *adding: int, partition: str = "t-0") -> ReassignStatus:
    st = ReassignStatus([Moving(partition, [1, *adding], list(adding), [])])
    st.bytes_left = left
    return st


def test_the_rate_since_the_move_started_gives_the_time_left() -> None:
    st = moving(600, 2)
    # 1000 bytes to copy at t=100; 600 left at t=110: 40 B/s, so 15 s more
    ra.estimate(st, {"started": 100.0, "partitions": ["t-0"], "bytes_total": 1000, "throttle": None}, now=110.0)
    assert st.seconds_left == pytest.approx(15.0) and st.started == 100.0 and st.throttle is None


def test_the_throttle_caps_the_rate_per_receiving_broker() -> None:
    # 900 of 1000 copied in 1 s (Kafka lets a fetch through before the throttle bites), throttled to 10 B/s on
    # each of two receiving brokers: at most 20 B/s, so 100 bytes take 5 s at least, not 0.1 s
    st = ReassignStatus([Moving("t-0", [1, 2], [2], []), Moving("t-1", [1, 3], [3], [])])
    st.bytes_left = 100
    ra.estimate(st, {"started": 0.0, "partitions": ["t-0", "t-1"], "bytes_total": 1000, "throttle": 10}, now=1.0)
    assert st.seconds_left == pytest.approx(5.0) and st.throttle == 10


def test_the_throttle_alone_gives_the_quickest_end_and_nothing_gives_none() -> None:
    st = moving(1000, 2)
    ra.estimate(st, {"started": 0.0, "partitions": ["t-0"], "bytes_total": None, "throttle": 100}, now=5.0)
    assert st.seconds_left == pytest.approx(10.0)
    st = moving(1000, 2)
    ra.estimate(st, None, now=5.0)
    assert st.seconds_left is None  # no record, no samples: it cannot say


def test_a_record_of_another_move_says_nothing() -> None:
    st = moving(1000, 2, partition="other-0")
    ra.estimate(st, {"started": 0.0, "partitions": ["t-0"], "bytes_total": 5000, "throttle": 100}, now=5.0)
    assert st.seconds_left is None and st.started is None and st.throttle is None


def test_no_progress_and_no_throttle_is_no_estimate() -> None:
    st = moving(1000, 2)
    ra.estimate(st, {"started": 0.0, "partitions": ["t-0"], "bytes_total": 1000, "throttle": None}, now=30.0)
    assert st.seconds_left is None


def test_samples_of_a_waiting_execute_add_to_the_record() -> None:
    st = moving(200, 2)
    ra.estimate(st, None, now=20.0, samples=[(0.0, 1000), (10.0, 600)])  # 40 B/s
    assert st.seconds_left == pytest.approx(5.0)


def test_nothing_moving_or_no_bytes_is_left_alone() -> None:
    st = ReassignStatus()
    ra.estimate(st, {"started": 0.0, "partitions": [], "bytes_total": 1, "throttle": 1}, now=1.0)
    assert st.seconds_left is None
    st = moving(0, 2)
    st.bytes_left = None
    ra.estimate(st, None, now=1.0)
    assert st.seconds_left is None


def test_the_record_is_written_whole_read_back_and_forgotten(tmp_path: Path) -> None:
    ra._write_record(tmp_path, {("t", 0): [1, 2], ("t", 1): [2, 3]}, 1234, 50)
    rec = ra.read_record(tmp_path)
    assert rec is not None and rec["partitions"] == ["t-0", "t-1"] and rec["bytes_total"] == 1234
    assert rec["throttle"] == 50 and isinstance(rec["started"], float)
    assert not list(tmp_path.glob("*.tmp"))  # written beside and renamed: never half a record
    ra._forget_record(tmp_path)
    assert ra.read_record(tmp_path) is None
    ra._write_record(None, {("t", 0): [1]}, None, None)  # no state dir: nothing written, nothing raised


@pytest.mark.parametrize("text", ["", "{", "[]", json.dumps({"partitions": []}), json.dumps({"started": "x"})])
def test_a_damaged_record_is_no_record(tmp_path: Path, text: str) -> None:
    (tmp_path / ra.RECORD).write_text(text)
    assert ra.read_record(tmp_path) is None
