"""The polls built on kctl.wait.wait_until: each raises on timeout with what it last saw."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kctl.errors import KctlError, TimeoutReached
from kctl.wait import GiveUp


def _topic(leaders: list[int], error: Any = None) -> SimpleNamespace:
    return SimpleNamespace(error=error, partitions={i: SimpleNamespace(leader=v, replicas=[1, 2, 3])
                                                    for i, v in enumerate(leaders)})


class FakeAdmin:
    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers

    def list_topics(self, timeout: float) -> SimpleNamespace:
        topics = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return SimpleNamespace(topics=topics)


def test_wait_for_topic_returns_once_every_partition_has_a_leader() -> None:
    from kctl.kafka.client import wait_for_topic

    admin = FakeAdmin([{}, {"t": _topic([1, -1, 3])}, {"t": _topic([1, 2, 3])}])
    assert list(wait_for_topic(admin, "t", 3, timeout=5).partitions) == [0, 1, 2]


def test_wait_for_topic_says_what_it_last_saw() -> None:
    from kctl.kafka.client import wait_for_topic

    with pytest.raises(TimeoutReached) as err:
        wait_for_topic(FakeAdmin([{"t": _topic([1, -1, 3])}]), "t", 3, timeout=0.3)
    assert "waiting for: topic t known with a leader for every partition" in err.value.message
    assert "last seen: partition leaders {0: 1, 1: -1, 2: 3}" in err.value.message
    assert err.value.hint and "kctl topic describe t" in err.value.hint
    with pytest.raises(TimeoutReached, match="2 of 3 partitions known"):
        wait_for_topic(FakeAdmin([{"t": _topic([1, 2])}]), "t", 3, timeout=0.2)


def test_reassignment_wait_reports_progress_and_raises_with_what_still_moves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.kafka import reassign
    from kctl.model.spec import ClusterSpec

    moving = [SimpleNamespace(partition="t-0"), SimpleNamespace(partition="t-1"), SimpleNamespace(partition="u-0")]
    answers = iter([moving, moving[:1], []])
    monkeypatch.setattr(reassign, "POLL", 0.01)
    monkeypatch.setattr(reassign, "_moving_from_zk", lambda _spec: next(answers))
    monkeypatch.setattr(reassign, "_sizes", lambda _spec, _topics: {})
    monkeypatch.setattr(reassign, "bytes_left", lambda _m, _s: 2048)
    said: list[str] = []
    reassign.wait_done(ClusterSpec(), {"t-0", "t-1"}, 5, said.append)
    assert said == ["moving 2 partition(s), 2048 bytes left"]  # u-0 is not this move's; one report per 10 s

    monkeypatch.setattr(reassign, "_moving_from_zk", lambda _spec: moving)
    with pytest.raises(TimeoutReached) as err:
        reassign.wait_done(ClusterSpec(), {"t-0", "t-1"}, 0.1, said.append)
    assert "waiting for: the reassignment to finish" in err.value.message
    assert "last seen: 2 partition(s) still moving (t-0, t-1)" in err.value.message
    assert err.value.hint and "kctl reassign status" in err.value.hint


def _job(tmp_path: Path, **job: Any) -> Path:
    sd = tmp_path / "cp" / "_kctl"
    sd.mkdir(parents=True)
    (sd / "job.json").write_text(json.dumps(job))
    return sd


def test_stream_stop_waits_then_sigterm_then_says_it_did_not_stop(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.stream import state

    _job(tmp_path, pid=4242, state="running")
    alive = {"on": True}
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(state, "pid_alive", lambda pid: alive["on"])
    monkeypatch.setattr(state.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    monkeypatch.setattr(state, "SIGTERM_GRACE", 0.2)
    with pytest.raises(KctlError) as err:
        state.stop(tmp_path / "cp", timeout_s=0.2)
    assert sent == [(4242, signal.SIGTERM)]
    assert "stream job 4242 did not stop within 0s" in err.value.message and "pid 4242 running" in err.value.message
    assert err.value.hint and "kill -9 4242" in err.value.hint

    threading.Timer(0.1, lambda: alive.update(on=False)).start()  # acts on the stop marker
    sent.clear()
    alive["on"] = True
    assert state.stop(tmp_path / "cp", timeout_s=5)["stopped"] is True and sent == []


def test_submit_waits_for_running_and_gives_up_when_the_job_exits(tmp_path: Path) -> None:
    from kctl.stream.submit import _wait_running

    sd = _job(tmp_path, pid=0, state="starting")
    log = tmp_path / "job.log"
    log.write_text("line 1\nExecutor lost\n")
    proc = SimpleNamespace(pid=77, returncode=None, poll=lambda: None)
    with pytest.raises(TimeoutReached) as err:
        _wait_running(proc, sd, log, timeout_s=0.2)  # type: ignore[arg-type]
    assert "stream job (pid 77) running" in err.value.message and "state starting" in err.value.message
    assert "Executor lost" in err.value.message and err.value.hint == f"see {log}"

    (sd / "job.json").write_text(json.dumps({"pid": 77, "state": "running"}))
    _wait_running(proc, sd, log, timeout_s=5)  # type: ignore[arg-type]

    started = time.monotonic()
    dead = SimpleNamespace(pid=78, returncode=1, poll=lambda: 1)
    with pytest.raises(GiveUp, match="exited at start with code 1:\nline 1\nExecutor lost"):
        _wait_running(dead, sd, log, timeout_s=60)  # type: ignore[arg-type]
    assert time.monotonic() - started < 5


def test_optimize_of_a_running_job_raises_when_it_exits_first(tmp_path: Path) -> None:
    from kctl.stream import tables

    (tmp_path / "out").mkdir()
    job = subprocess.Popen(["sleep", "30"])
    try:
        sd = _job(tmp_path, pid=job.pid, state="running", config={"vacuum_retain_hours": 168.0})

        def answer() -> None:
            time.sleep(0.3)
            (sd / "optimize.json").write_text(json.dumps({"seconds": 1.5, "tables": {"metrics": {}}}))

        threading.Thread(target=answer).start()
        res = tables.optimize(tmp_path / "out", tmp_path / "cp", timeout_s=10)
        assert res.seconds == 1.5 and f"pid {job.pid}" in res.by

        (sd / "optimize.json").unlink()
        threading.Timer(0.3, lambda: (job.kill(), job.wait())).start()  # reaped: no zombie left
        started = time.monotonic()
        with pytest.raises(KctlError, match="exited before it optimized its tables") as err:
            tables.optimize(tmp_path / "out", tmp_path / "cp", timeout_s=60)
        assert time.monotonic() - started < 10 and not (sd / "optimize.request").exists()
        assert "did not optimize its tables in time" in err.value.message
    finally:
        job.kill()
        job.wait()


def test_the_job_stops_between_batches_or_cuts_one_that_runs_too_long() -> None:
    from kctl.stream.job import _graceful_stop

    class Query:
        def __init__(self, busy_polls: int) -> None:
            self.isActive, self.busy, self.stopped = True, busy_polls, False

        @property
        def status(self) -> dict[str, Any]:
            self.busy -= 1
            return {"isTriggerActive": self.busy >= 0}

        def stop(self) -> None:
            self.stopped = True

    q = Query(busy_polls=2)
    _graceful_stop(q, timeout_s=5)
    assert q.stopped and q.busy < 0
    q = Query(busy_polls=10_000)
    started = time.monotonic()
    _graceful_stop(q, timeout_s=0.3)
    assert q.stopped and q.busy > 0 and time.monotonic() - started < 3
