"""Readiness logic against a fake four-letter-word server and a fake clock."""

from __future__ import annotations

import threading
import time

import pytest

from kctl.cluster.health import zk_state
from kctl.errors import TimeoutReached
from kctl.wait import GiveUp, Stage, wait_for_stages, wait_until
from kctl.zk import fourlw
from tests.unit.fake_zk import fake_zk, free_port


def test_srvr_parsed() -> None:
    with fake_zk("leader") as zk:
        ans = fourlw.ask("127.0.0.1", zk.port, "srvr")
    s = fourlw.parse_srvr(ans.text)
    assert (s.mode, s.zxid, s.outstanding, s.connections, s.node_count) == ("leader", "0x100000042", 0, 3, 37)
    assert s.latency_avg == 0.5 and s.version and s.version.startswith("3.8.4")


def test_zk_state_modes() -> None:
    with fake_zk("follower") as zk:
        assert zk_state("logger1", zk.port, 1.0).mode == "follower"
        zk.mode = "not-serving"
        st = zk_state("logger1", zk.port, 1.0)
        assert st.mode == "not-serving" and "quorum" in (st.error or "")
    assert zk_state("logger1", free_port(), 0.5).mode == "down"


def test_hung_server_is_bounded() -> None:
    with fake_zk() as zk:
        zk.hang = True
        t0 = time.monotonic()
        st = zk_state("logger1", zk.port, 0.5)
        assert st.mode == "down"
        assert time.monotonic() - t0 < 2.0


def test_whitelist_detection() -> None:
    with fake_zk() as zk:
        ans = fourlw.ask("127.0.0.1", zk.port, "dump")
    assert not ans.whitelisted


def test_mntr_and_conf_parsing() -> None:
    m = fourlw.parse_mntr("zk_version\t3.8.4\nzk_avg_latency\t0.25\nzk_server_state\tleader\nzk_znode_count\t40\n")
    assert m == {"zk_version": "3.8.4", "zk_avg_latency": 0.25, "zk_server_state": "leader", "zk_znode_count": 40}
    c = fourlw.parse_kv("clientPort=2181\ndataDir=/var/opt/kctl/zookeeper/snapshots/version-2\ntickTime=2000\n")
    assert c["clientPort"] == 2181 and c["tickTime"] == 2000


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += max(s, 0.01)


def test_stages_run_in_order_until_done() -> None:
    clock = FakeClock()
    seen: list[str] = []
    answers = iter([False, False, True])

    def first() -> tuple[bool, str]:
        seen.append("first")
        return next(answers), "modes: follower"

    def second() -> tuple[bool, str]:
        seen.append("second")
        return True, "ok"

    res = wait_for_stages([Stage("a", first), Stage("b", second)], timeout=10, poll=1, clock=clock, sleep=clock.sleep)
    assert [r.name for r in res] == ["a", "b"]
    assert seen == ["first", "first", "first", "second"]


def test_timeout_names_stage_last_seen_and_log_tail() -> None:
    clock = FakeClock()
    with fake_zk("looking") as zk:
        def probe() -> tuple[bool, str]:
            st = zk_state("logger1", zk.port, 0.5)
            return st.mode == "leader", f"logger1={st.mode}"

        with pytest.raises(TimeoutReached) as ei:
            wait_for_stages([Stage("exactly one ZooKeeper leader", probe, lambda saw: "LOOKING...election")],
                            timeout=3, poll=1, clock=clock, sleep=clock.sleep)
    msg = ei.value.message
    assert "exactly one ZooKeeper leader" in msg and "logger1=looking" in msg and "LOOKING...election" in msg
    assert ei.value.hint and "kctl down" in ei.value.hint


def test_probe_exception_is_not_ready() -> None:
    clock = FakeClock()

    def boom() -> tuple[bool, str]:
        raise ConnectionRefusedError("refused")

    with pytest.raises(TimeoutReached) as ei:
        wait_for_stages([Stage("s", boom)], timeout=2, poll=1, clock=clock, sleep=clock.sleep)
    assert "ConnectionRefusedError" in ei.value.message


def test_wait_until_returns_what_it_saw_when_done() -> None:
    clock = FakeClock()
    sizes = iter([0, 10, 20])

    def grown() -> tuple[bool, str]:
        n = next(sizes)
        return n >= 20, f"size {n}"

    res = wait_until("the file to grow", grown, timeout=10, poll=1, clock=clock, sleep=clock.sleep)
    assert (res.name, res.saw) == ("the file to grow", "size 20") and clock.now == 2


def test_wait_until_timeout_says_what_it_waited_for_what_it_saw_and_the_log() -> None:
    clock = FakeClock()
    seen: list[str] = []
    with pytest.raises(TimeoutReached) as ei:
        wait_until("topic t with a leader for every partition", lambda: (False, "leaders [1, -1]"), timeout=5,
                   poll=1, log_tail=lambda saw: f"broker log after {saw}", hint="`kctl topic describe t`",
                   on_progress=lambda name, saw: seen.append(saw), clock=clock, sleep=clock.sleep)
    lines = ei.value.message.splitlines()
    assert lines[0] == "timed out after 5s waiting for: topic t with a leader for every partition"
    assert lines[1] == "last seen: leaders [1, -1]"
    assert "broker log after leaders [1, -1]" in ei.value.message
    assert ei.value.hint == "`kctl topic describe t`"
    assert clock.now >= 5 and len(seen) == 6  # one probe a second, the first at once


def test_give_up_ends_the_wait_at_once() -> None:
    clock = FakeClock()
    calls = [0]

    def exited() -> tuple[bool, str]:
        calls[0] += 1
        if calls[0] == 2:
            raise GiveUp("stream job exited at start with code 1", hint="see its log")
        return False, "starting"

    with pytest.raises(GiveUp) as ei:
        wait_until("stream job running", exited, timeout=60, poll=1, clock=clock, sleep=clock.sleep)
    assert ei.value.message == "stream job exited at start with code 1" and calls[0] == 2 and clock.now == 1


# ----- pacing: ticks, pause_until, apause_until -----------------------------------------------------------------


class ScheduleClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(round(s, 6))
        self.now += s


def test_ticks_keep_their_period_from_each_start_and_do_not_bunch_after_a_slow_body() -> None:
    from kctl.wait import ticks

    clock, at = ScheduleClock(), []
    for n in ticks(1.0, count=5, clock=clock, sleep=clock.sleep):
        at.append(round(clock.now - 100, 6))
        clock.now += {1: 0.25, 2: 3.0}.get(n, 0.0)  # the body's own time: a quarter, then three periods
    # 0; 1 (a period after 0); 2 (after a 0.25 s body: 0.75 s asleep); 5 (at once after the slow body); 6
    assert at == [0.0, 1.0, 2.0, 5.0, 6.0]
    assert clock.slept == [1.0, 0.75, 1.0]


def test_ticks_end_at_until_yet_run_once_and_at_a_stop_at_once() -> None:
    from kctl.wait import ticks

    clock = ScheduleClock()
    assert list(ticks(1.0, until=103.5, clock=clock, sleep=clock.sleep)) == [0, 1, 2, 3]
    assert list(ticks(1.0, until=0.0, clock=clock, sleep=clock.sleep)) == [0]  # like a probe: once at least
    stop = threading.Event()
    t0 = time.monotonic()
    threading.Timer(0.2, stop.set).start()
    got = list(ticks(30.0, stop=stop))
    assert got == [0] and time.monotonic() - t0 < 5  # woken by the set, not after 30 s
    assert list(ticks(0.01, stop=stop)) == []  # already set: nothing


def test_pause_until_a_moment_of_the_schedule() -> None:
    from kctl.wait import pause_until

    clock = ScheduleClock()
    assert pause_until(102.5, clock=clock, sleep=clock.sleep) and clock.now == 102.5
    assert pause_until(50.0, clock=clock, sleep=clock.sleep) and clock.slept == [2.5]  # past: at once
    stop = threading.Event()
    stop.set()
    assert pause_until(time.monotonic() + 30, stop=stop) is False


def test_apause_until_a_moment_of_the_event_loop() -> None:
    import asyncio

    from kctl.wait import apause_until

    async def run() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await apause_until(t0 + 0.1)
        waited = loop.time() - t0
        t1 = loop.time()
        await apause_until(t1 - 5)  # past: at once
        return waited, loop.time() - t1

    waited, past = asyncio.run(run())
    assert waited >= 0.095 and past < 0.05


def test_no_module_but_kctl_wait_sleeps_inside_a_loop() -> None:
    """Every poll and every schedule goes through kctl.wait: a loop elsewhere that calls a ``sleep`` (time's,
    asyncio's, an injected one) or waits on an event with a timeout is a wait of its own, without a deadline's
    message or a stop that wakes it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "kctl"
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel == "kctl/wait.py":
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        for loop in ast.walk(tree):
            if not isinstance(loop, (ast.While, ast.For, ast.AsyncFor)):
                continue
            for node in ast.walk(loop):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                timed_wait = name == "wait" and isinstance(f, ast.Attribute) and bool(node.args or node.keywords)
                if name == "sleep" or timed_wait:
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(f)}")
    assert sorted(set(found)) == [], "wait through kctl.wait (ticks, pause_until, wait_until) instead"


def test_no_module_but_kctl_wait_reads_the_clock_to_end_or_pace_a_loop() -> None:
    """A loop paced by something else (a consumer's poll, a thread's event) ends by a Deadline and acts by an
    Every: a comparison with ``time.monotonic()`` (or ``time.time()``, ``loop.time()``) inside a loop elsewhere
    is a wait of its own."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "kctl"
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel == "kctl/wait.py" or rel.startswith("kctl/bench/"):
            continue
        for loop in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if not isinstance(loop, (ast.While, ast.For, ast.AsyncFor)):
                continue
            for node in ast.walk(loop):
                if isinstance(node, ast.Compare) and any(
                        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                        and c.func.attr in ("monotonic", "time", "perf_counter") for c in ast.walk(node)):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert sorted(set(found)) == [], "end or pace the loop through kctl.wait (Deadline, Every, ticks) instead"


def test_a_deadline_and_an_every_on_a_given_clock() -> None:
    from kctl.wait import Deadline, Every, since

    now = [100.0]
    d = Deadline(5, clock=lambda: now[0])
    assert d.at == 105 and d.left() == 5 and not d.passed() and not d.passed(margin=0.3)
    now[0] = 104.8
    assert d.passed(margin=0.3) and not d.passed() and round(d.left(), 3) == 0.2
    now[0] = 106
    assert d.passed() and d.left() == 0.0
    assert Deadline(at=3.0, clock=lambda: 1.0).left() == 2.0
    every = Every(0.5, clock=lambda: now[0])
    assert not every.due()
    now[0] = 106.5
    assert every.due() and not every.due()  # once per period
    now[0] = 108
    assert every.due() and not every.due()
    assert since(100.0, clock=lambda: now[0]) == 8
