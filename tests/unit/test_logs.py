"""Node logs read from a temp state dir: where they are, the last N lines, and tail -F through rotation."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kctl.errors import KctlError, UsageError
from kctl.files import follow_lines, tail_start
from kctl.model.spec import ClusterSpec, parse_spec
from kctl.runtime import logs


def spec_of(**extra: object) -> ClusterSpec:
    return parse_spec({"name": "t", **extra})[0]


def write_log(state: Path, host: str, rel: str, text: str) -> Path:
    p = state / host / "logs" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


# ----- where the logs are ------------------------------------------------------------------------


def test_locate_colocated_uses_the_contract_paths(tmp_path: Path) -> None:
    spec = spec_of()
    kafka = logs.locate(spec, tmp_path, "logger2", "kafka")
    assert kafka.path == tmp_path / "logger2" / "logs" / "kafka" / "server.log"
    assert logs.locate(spec, tmp_path, "3", "zookeeper").path == tmp_path / "logger3/logs/zookeeper/zookeeper.log"
    assert logs.locate(spec, tmp_path, "logger1", "supervisor").path == tmp_path / "logger1/logs/supervisord.log"


def test_locate_split_picks_the_container_that_runs_the_service(tmp_path: Path) -> None:
    spec = spec_of(topology="split")
    assert logs.locate(spec, tmp_path, "logger2", "zookeeper").container == "zk2"
    assert logs.locate(spec, tmp_path, "logger2", "kafka").container == "kafka2"
    assert logs.locate(spec, tmp_path, "zk2", "supervisor").container == "zk2"
    with pytest.raises(UsageError, match="zk2 has no kafka log"):
        logs.locate(spec, tmp_path, "zk2", "kafka")


def test_locate_rejects_unknown_node_and_service(tmp_path: Path) -> None:
    spec = spec_of()
    with pytest.raises(UsageError, match="unknown service 'nginx'") as e:
        logs.locate(spec, tmp_path, "logger1", "nginx")
    assert e.value.hint and "zookeeper" in e.value.hint and "supervisor" in e.value.hint
    with pytest.raises(UsageError, match="no node 'logger9'"):
        logs.locate(spec, tmp_path, "logger9", "kafka")


def test_missing_log_says_whether_the_cluster_ever_ran_here(tmp_path: Path) -> None:
    log = logs.locate(spec_of(), tmp_path, "logger1", "kafka")
    for follow in (False, True):  # never started here: following would wait forever
        with pytest.raises(KctlError, match="does not exist") as e:
            logs.lines(log, tail=10, follow=follow)
        assert e.value.hint and "kctl up" in e.value.hint
    (tmp_path / "logger1" / "logs").mkdir(parents=True)  # rendered, Kafka not started yet
    with pytest.raises(KctlError) as e:
        logs.lines(log, tail=10, follow=False)
    assert e.value.hint and "-F" in e.value.hint
    assert list(logs.lines(log, tail=10, follow=True, max_seconds=0.3)) == []


def test_lines_of_a_stopped_node_are_its_last_lines(tmp_path: Path) -> None:
    write_log(tmp_path, "logger1", "kafka/server.log", "".join(f"line {i}\n" for i in range(1, 501)) + "\n")
    log = logs.locate(spec_of(), tmp_path, "logger1", "kafka")
    assert list(logs.lines(log, tail=3, follow=False)) == ["line 499", "line 500", ""]
    assert len(list(logs.lines(log, tail=10_000, follow=False))) == 501
    assert list(logs.lines(log, tail=0, follow=False)) == []


# ----- tail_start ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, n, want", [
    ("a\nbb\nccc\n", 1, "ccc\n"),
    ("a\nbb\nccc\n", 2, "bb\nccc\n"),
    ("a\nbb\nccc\n", 3, "a\nbb\nccc\n"),
    ("a\nbb\nccc\n", 9, "a\nbb\nccc\n"),
    ("a\nbb\nccc", 1, "ccc"),  # a last line without its newline is a line
    ("a\nbb\nccc", 2, "bb\nccc"),
    ("a\n\n\n", 2, "\n\n"),
    ("", 5, ""),
    ("a\n", 0, ""),
])
def test_tail_start(tmp_path: Path, text: str, n: int, want: str) -> None:
    p = tmp_path / "f.log"
    p.write_text(text)
    assert text[tail_start(p, n):] == want
    assert text[tail_start(p, n, block=2):] == want  # the same across block boundaries


# ----- tail -F ---------------------------------------------------------------------------------


def follow_while(path: Path, steps: list[Callable[[], None]], waits: list[int], *, start: int, want: int,
                 ) -> list[str]:
    """Follow ``path`` while a writer runs ``steps[i]`` once ``waits[i]`` lines have been read."""
    got: list[str] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for step, after in zip(steps, waits, strict=True):
                deadline = time.monotonic() + 5
                while len(got) < after and time.monotonic() < deadline:
                    time.sleep(0.01)
                step()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    for _, line in follow_lines(path, follow=True, max_seconds=10, max_lines=want, poll_s=0.02, start=start):
        got.append(line)
    t.join(5)
    assert not errors
    return got


def append(p: Path, text: str) -> Callable[[], None]:
    def step() -> None:
        with p.open("a") as f:
            f.write(text)
    return step


def test_follow_survives_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("a1\na2\na3\n")

    def rotate_right_after_a_write() -> None:
        # Written just before the rename: in the old file, and still read.
        append(log, "a4\n")()
        os.rename(log, tmp_path / "server.log.1")
        log.write_text("b1\nb2\n")

    def truncate() -> None:
        with log.open("r+") as f:
            f.truncate(0)
        append(log, "c1\n")()

    t0 = time.monotonic()
    got = follow_while(log, [rotate_right_after_a_write, truncate, append(log, "c2\n")], [2, 5, 6],
                       start=tail_start(log, 2), want=7)
    assert got == ["a2", "a3", "a4", "b1", "b2", "c1", "c2"]
    assert time.monotonic() - t0 < 8


def test_follow_waits_for_a_deleted_log_to_come_back(tmp_path: Path) -> None:
    log = tmp_path / "zookeeper.log"
    log.write_text("x1\n")

    def delete() -> None:
        log.unlink()
        # A new file may get the deleted one's inode number: give the reader time to see it gone.
        time.sleep(0.3)

    got = follow_while(log, [delete, append(log, "y1\npartial"), append(log, " line\n")], [1, 1, 2],
                       start=0, want=3)
    assert got == ["x1", "y1", "partial line"]


def test_follow_stops_at_its_time_bound(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("only\n")
    t0 = time.monotonic()
    assert [line for _, line in follow_lines(log, follow=True, max_seconds=0.3, max_lines=None)] == ["only"]
    assert time.monotonic() - t0 < 3
