"""The drill's checker on synthetic acknowledged/read sets, its pre-checks, its timeline, and fault healing."""

from __future__ import annotations

from typing import Any

import pytest

from kctl.drill import check, report
from kctl.drill.run import DrillNotRun, parse_seconds, validate
from kctl.errors import UsageError
from kctl.model.spec import ClusterSpec
from kctl.runtime.faults import Faults


def _clean(n: int = 30, partitions: int = 3) -> tuple[list[tuple[int, int, int]], dict[int, list[tuple[int, int]]]]:
    """n records, seq % partitions, every one acknowledged and read back at its offset."""
    acked: list[tuple[int, int, int]] = []
    read: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    for seq in range(n):
        p = seq % partitions
        off = len(read[p])
        read[p].append((off, seq))
        acked.append((p, off, seq))
    return acked, read


def test_clean_run_has_nothing_to_report() -> None:
    acked, read = _clean()
    c = check.compare(acked, read, produced=30)
    assert (c.acked, c.read, c.lost, c.duplicates, c.reordered, c.unacked_present, c.offset_mismatches) == \
        (30, 30, 0, 0, 0, 0, 0)


def test_lost_records_are_found_and_named() -> None:
    acked, read = _clean()
    read[1] = [r for r in read[1] if r[1] not in (4, 13)]  # two acknowledged values gone
    c = check.compare(acked, read)
    assert c.lost == 2 and c.lost_sample == [4, 13]
    assert c.offset_mismatches >= 2


def test_a_record_acknowledged_without_an_offset_is_checked_by_its_value() -> None:
    acked, read = _clean()
    acked = [(p, -1 if seq in (7, 8) else o, seq) for p, o, seq in acked]  # a retry the broker had written already
    c = check.compare(acked, read)
    assert (c.lost, c.offset_mismatches) == (0, 0)
    read[1] = [r for r in read[1] if r[1] != 7]
    assert check.compare(acked, read).lost == 1  # gone all the same


def test_truncated_prefix_like_delete_records_is_loss() -> None:
    acked, read = _clean()
    read[0] = read[0][5:]  # the first five records of partition 0 deleted
    c = check.compare(acked, read)
    assert c.lost == 5 and c.lost_sample == [0, 3, 6, 9, 12]


def test_duplicates_are_counted_per_extra_copy() -> None:
    acked, read = _clean()
    read[2] = [*read[2], (len(read[2]), 5), (len(read[2]) + 1, 5)]  # seq 5 three times in all
    c = check.compare(acked, read)
    assert c.duplicates == 2 and c.duplicate_sample == [5] and c.lost == 0


def test_reordering_within_a_partition_is_detected() -> None:
    acked, read = _clean()
    p0 = read[0]
    p0[2], p0[3] = (p0[2][0], p0[3][1]), (p0[3][0], p0[2][1])  # offsets 2 and 3 swapped values
    c = check.compare(acked, read)
    assert c.reordered == 1 and c.reordered_sample == ["p0@3: 6 after 9"]
    assert c.lost == 0 and c.duplicates == 0


def test_order_across_partitions_is_not_reordering() -> None:
    acked, read = _clean()
    read = {0: read[2], 1: read[0], 2: read[1]}  # partitions read in any order
    assert check.compare(acked, read).reordered == 0


def test_unacknowledged_but_present_is_reported_not_lost() -> None:
    acked, read = _clean()
    acked = [a for a in acked if a[2] != 7]  # its acknowledgement timed out, but it was written
    c = check.compare(acked, read, produced=30)
    assert c.unacked_present == 1 and c.lost == 0 and c.acked == 29


def test_acked_ends_are_the_highest_acknowledged_offset_plus_one_per_partition() -> None:
    acked = [(0, 0, 0), (1, 0, 1), (0, 1, 3), (1, 4, 4), (2, -1, 5)]  # an offset of -1: not known, not needed
    assert check.acked_ends(acked) == {0: 2, 1: 5}
    assert check.acked_ends([]) == {}


def test_longest_gap() -> None:
    assert check.longest_gap([1.0, 1.5, 4.0, 4.2], 0.0, 5.0) == pytest.approx(2.5)
    assert check.longest_gap([], 0.0, 3.0) == pytest.approx(3.0)


def test_timeline_rows_and_text() -> None:
    from kctl.drill.load import Second

    seconds = {0: Second(0, acked=10, latencies_ms=[1.0] * 10), 2: Second(2, acked=3, errors=2, latencies_ms=[50.0])}
    rows = check.timeline_rows(seconds, [(1.2, "fault: kill"), (2.5, "healed: start")], 4)
    assert [r["acked"] for r in rows] == [10, 0, 3, 0]
    assert rows[1]["events"] == ["fault: kill"] and rows[2]["p99_ms"] == 50.0
    text = report.text_timeline(rows, [{"start": 1.2, "end": 2.5, "what": "kill"}])
    lines = text.splitlines()
    assert lines[0].startswith("acked/1s  |█ ") and "max 10" in lines[0]
    assert lines[1] == "errors     |  x | total 2"
    assert lines[3] == "fault      |.##.| # = fault in place"


@pytest.mark.parametrize(("args", "match"), [
    (("nope", 10, 10, 1, 0), "unknown scenario"),
    (("leader-kill", 0, 10, 1, 0), "--rate 0 is not positive"),
    (("leader-kill", 10, -1, 1, 0), "--duration -1 is not positive"),
    (("leader-kill", 10, 10, 0, 0), "--bounces 0 is not positive"),
    (("leader-kill", 10, 10, 1, -2), "--hold -2 is negative"),
])
def test_bad_input_is_refused_with_exit_2(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(DrillNotRun, match=match) as err:
        validate(*args)
    assert err.value.exit_code == 2 and "nothing was injected" in err.value.message


def test_parse_seconds() -> None:
    assert parse_seconds("60s") == 60 and parse_seconds("2m") == 120 and parse_seconds("90") == 90
    with pytest.raises(UsageError):
        parse_seconds("soon")


def test_heal_undoes_pending_faults_newest_first_and_survives_a_failing_undo() -> None:
    f = Faults(ClusterSpec(), dc=object())
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("container gone")

    f._remember("pause", "logger1", "logger1 paused", lambda: done.append("unpause logger1"))
    f._remember("network", "logger2", "logger2 disconnected", boom)
    f._remember("kafka", "logger3", "kafka on logger3 killed", lambda: done.append("start kafka logger3"))
    f._forget("pause", "logger1")  # healed by the scenario itself: not undone again
    rep = f.heal()
    assert done == ["start kafka logger3"]
    assert rep.undone == ["kafka on logger3 killed"]
    assert rep.failed == ["logger2 disconnected: container gone"] and f.pending == {}


def test_faults_context_heals_on_an_exception() -> None:
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt), Faults(ClusterSpec(), dc=object()) as f:
        f._remember("pause", "logger1", "logger1 paused", lambda: done.append("unpaused"))
        raise KeyboardInterrupt
    assert done == ["unpaused"]


def test_plot_writes_a_png(tmp_path: Any) -> None:
    pytest.importorskip("matplotlib")
    from kctl.drill.load import Second
    from kctl.drill.run import Verdict

    v = Verdict("leader-kill", "t", "all", True, 100, 4.0, 1, holds=True, acked=250, recovery_seconds=2.0)
    v.timeline = check.timeline_rows({0: Second(0, 100, 0, [2.0]), 3: Second(3, 150, 1, [900.0])}, [], 4)
    v.faults = [{"start": 1.0, "end": 2.5, "what": "kill"}]
    out = report.plot(v, tmp_path / "drill.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_bad_input_before_reading_any_spec(tmp_path: Any) -> None:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "kctl", "drill", "run", "nope", "-f", str(tmp_path / "none.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown scenario 'nope'" in p.stderr and "hint:" in p.stderr
    p = subprocess.run([sys.executable, "-m", "kctl", "drill", "list", "-o", "json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "leader-kill" in {r["scenario"] for r in __import__("json").loads(p.stdout)}


def test_the_load_waits_for_its_next_record_instead_of_spinning() -> None:
    """librdkafka's poll takes whole milliseconds: a wait shorter than one returned at once, and the load thread
    spun through the last millisecond before every record (most of a core at 500 records/s)."""
    import threading
    import time

    from kctl.drill.load import Load

    class Producer:
        def __init__(self) -> None:
            self.waits: list[float] = []
            self.produced = 0

        def poll(self, timeout: float) -> int:
            self.waits.append(timeout)
            if timeout > 0:
                time.sleep(timeout)
            return 0

        def produce(self, *_: Any, **__: Any) -> None:
            self.produced += 1

    load = Load(ClusterSpec.model_validate({"name": "x"}), "t", 3, rate=500.0, max_seconds=0.5)
    fake = Producer()
    load._producer = fake
    load.record.started = time.monotonic()
    thread = threading.Thread(target=load._run)
    thread.start()
    thread.join(5)
    waits = [w for w in fake.waits if w > 0]
    assert not thread.is_alive() and 200 <= fake.produced <= 300, fake.produced
    assert waits and min(waits) >= 0.001, min(waits)
    # every wait but the poll(0) after each send: about one per record, not thousands
    assert len(waits) < 3 * fake.produced, (len(waits), fake.produced)
