"""Readiness as objects: a stage has a probe, a timeout comes with what it last saw.

The one wait of kctl: every poll goes through here. ``wait_for_stages`` runs stages
in order under one overall deadline; each probe returns ``(done, what_it_saw)``.
``wait_until`` is one stage on its own. A timeout raises :class:`TimeoutReached`
naming what it waited for, what it saw last and, when a stage knows where to look,
the tail of the relevant log. A probe that finds the awaited state can no longer
come (the process it waits for exited) raises :class:`GiveUp`, which ends the wait
at once; any other exception of a probe counts as "not yet".

A loop that does its work on a schedule rather than waiting for a state (a sampling
round, a load's pace, a drill's planned fault length) is paced here too: ``ticks``
(every ``period`` seconds, ended by a count, a deadline or a stop event, which wakes
it at once), ``pause_until`` (one moment of a schedule) and ``apause_until`` (the
same in an event loop). No other module sleeps inside a loop (tests/unit/test_wait.py).

A loop paced by something else (a consumer's poll timeout, a thread's event) that must end by a moment asks a
:class:`Deadline`, and one that acts every so often inside it (a commit each half second) an :class:`Every`:
no other module reads the clock inside a loop to decide when to stop or act.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from kctl.deferred import defer_import
from kctl.errors import KctlError, TimeoutReached

# asyncio (~12 ms) serves apause_until, the console's server-sent streams only.
defer_import("asyncio")

import asyncio  # noqa: E402

Probe = Callable[[], tuple[bool, str]]
# How often `kctl up`'s stages, a roll's gates and wait_until_healthy (a node change) ask: a stage passes at
# most this long after its condition holds. Other waits name their own period (the default below: 0.5 s).
# One ask is a few ZooKeeper words or each broker's metadata (tens of milliseconds of CPU), small beside the
# JVMs it waits for.
POLL_S = 0.2
HINT = "inspect with `kctl status` and `kctl logs NODE`; clean up with `kctl down`"


class GiveUp(KctlError):
    """Raised by a probe: what the wait is for can no longer happen; the wait ends with this error."""


@dataclass(frozen=True)
class Stage:
    name: str
    probe: Probe
    log_tail: Callable[[str], str] | None = None  # given what it saw, return a log excerpt


@dataclass(frozen=True)
class StageResult:
    name: str
    seconds: float
    saw: str


def wait_for_stages(
    stages: Sequence[Stage],
    timeout: float,
    poll: float = 0.5,
    on_progress: Callable[[str, str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    hint: str | None = HINT,
) -> list[StageResult]:
    """Run the stages in order; raise TimeoutReached (with ``hint``) when the overall deadline passes."""
    start = clock()
    deadline = start + timeout
    results: list[StageResult] = []
    for stage in stages:
        stage_start = clock()
        saw = "nothing yet"
        while True:
            try:
                done, saw = stage.probe()
            except GiveUp:
                raise
            except Exception as exc:  # noqa: BLE001 - a failing probe is "not ready yet"
                done, saw = False, f"{type(exc).__name__}: {exc}"
            if on_progress:
                on_progress(stage.name, saw)
            if done:
                results.append(StageResult(stage.name, clock() - stage_start, saw))
                break
            if clock() >= deadline:
                tail = ""
                if stage.log_tail is not None:
                    try:
                        tail = stage.log_tail(saw)
                    except Exception as exc:  # noqa: BLE001
                        tail = f"(log unavailable: {exc})"
                msg = f"timed out after {timeout:g}s waiting for: {stage.name}\nlast seen: {saw}"
                if tail:
                    msg += f"\n--- log tail ---\n{tail.rstrip()}"
                raise TimeoutReached(msg, hint=hint)
            sleep(min(poll, max(0.0, deadline - clock())))
    return results


def wait_until(
    description: str,
    probe: Probe,
    timeout: float,
    poll: float = 0.5,
    *,
    log_tail: Callable[[str], str] | None = None,
    hint: str | None = HINT,
    on_progress: Callable[[str, str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StageResult:
    """Poll ``probe`` every ``poll`` seconds until it says done; what it saw last when it did.

    TimeoutReached after ``timeout`` seconds: "timed out after Ns waiting for: ``description``",
    what the probe last saw, the ``log_tail`` when given, and ``hint``. The probe runs at least once.
    """
    return wait_for_stages([Stage(description, probe, log_tail)], timeout=timeout, poll=poll,
                           on_progress=on_progress, clock=clock, sleep=sleep, hint=hint)[0]


class Deadline:
    """A moment to stop by, ``seconds`` from now on ``clock`` (``at`` gives an absolute moment instead)."""

    def __init__(self, seconds: float = 0.0, *, at: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.at = clock() + seconds if at is None else at

    def left(self) -> float:
        """Seconds until the moment, 0 once it has come."""
        return max(0.0, self.at - self._clock())

    def passed(self, margin: float = 0.0) -> bool:
        """The moment (less ``margin`` seconds) has come."""
        return self._clock() >= self.at - margin


class Every:
    """``due()`` is True once per ``period`` seconds of ``clock``, the first time ``period`` after it was made
    (``since(moment)``: how long ago a moment of the same clock was)."""

    def __init__(self, period: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.period = period
        self._clock = clock
        self._next = clock() + period

    def due(self) -> bool:
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.period
        return True


def since(moment: float, clock: Callable[[], float] = time.monotonic) -> float:
    """Seconds since ``moment`` (a reading of ``clock``)."""
    return clock() - moment


def pause_until(moment: float, *, stop: threading.Event | None = None,
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until ``clock()`` reaches ``moment`` (a schedule's next point, not a state of the cluster); True
    then, False at once when ``stop`` is set first (its wait wakes on the set, not after the rest)."""
    while True:
        left = moment - clock()
        if stop is not None and stop.is_set():
            return False
        if left <= 0:
            return True
        if stop is not None:
            if stop.wait(left):
                return False
        else:
            sleep(left)


def ticks(period: float, *, count: int | None = None, until: float | None = None,
          stop: threading.Event | None = None, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> Iterator[int]:
    """0, 1, 2, ... one every ``period`` seconds of ``clock``, the first at once (even past ``until``, as a
    wait's probe runs at least once, unless ``stop`` is set): the loop body runs at each
    tick, and a body that took longer than ``period`` is followed by the next tick at once (the schedule goes
    on from that late tick; ticks never bunch up to catch up). Ends after ``count`` ticks, when ``until`` (a
    time of ``clock``) comes before the next tick, or when ``stop`` is set (its wait wakes at once)."""
    n = 0
    due = clock()
    while count is None or n < count:
        if n and until is not None and due >= until:
            return
        if not pause_until(due, stop=stop, clock=clock, sleep=sleep):
            return
        started = clock()
        yield n
        n += 1
        due = max(started + period, clock())


async def apause_until(moment: float) -> None:
    """``pause_until`` in an event loop (its clock, ``loop.time()``): the next moment of a server-sent stream."""
    if (left := moment - asyncio.get_running_loop().time()) > 0:
        await asyncio.sleep(left)
