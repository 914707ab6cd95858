"""Readiness as objects: a stage has a probe, a timeout comes with what it last saw.

``wait_for_stages`` runs stages in order under one overall deadline; each probe
returns ``(done, what_it_saw)``. A timeout error names the stage, what it saw
last and, when a stage knows where to look, the tail of the relevant log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kctl.errors import TimeoutReached

Probe = Callable[[], tuple[bool, str]]


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
) -> list[StageResult]:
    """Run the stages in order; raise TimeoutReached when the overall deadline passes."""
    start = clock()
    deadline = start + timeout
    results: list[StageResult] = []
    for stage in stages:
        stage_start = clock()
        saw = "nothing yet"
        while True:
            try:
                done, saw = stage.probe()
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
                msg = f"timed out after {timeout:.0f}s waiting for: {stage.name}\nlast seen: {saw}"
                if tail:
                    msg += f"\n--- log tail ---\n{tail.rstrip()}"
                raise TimeoutReached(
                    msg, hint="inspect with `kctl status` and `kctl logs NODE`; clean up with `kctl down`"
                )
            sleep(min(poll, max(0.0, deadline - clock())))
    return results
