"""Long actions the console starts and follows in the background: a reassignment runs as `kctl reassign execute
--wait` does (start, follow, verify and remove the throttle, preferred election), in a thread of the console,
while its page shows what moves. One job per cluster at a time; its outcome is audited when it ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError
from kctl.kafka import reassign
from kctl.model.spec import ClusterSpec, state_dir_for


@dataclass
class Job:
    cluster: str
    user: str
    kind: str
    started: float
    log: list[str] = field(default_factory=list)
    state: str = "running"  # running, done, failed
    error: str | None = None
    ended: float | None = None
    topics: tuple[str, ...] = ()  # what it moves (whose users may read its log)

    def public(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "user": self.user, "kind": self.kind, "state": self.state,
                "started": self.started, "ended": self.ended, "error": self.error, "log": list(self.log)}


@dataclass
class Jobs:
    on_end: Callable[[Job], None]
    _by_cluster: dict[str, Job] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, cluster: str) -> Job | None:
        with self._lock:
            return self._by_cluster.get(cluster)

    def start_reassignment(self, spec: ClusterSpec, user: str, plan: Any, throttle: int | None,
                           timeout: float = 3600) -> Job:
        reassign.check_plan(spec, plan)  # refused before anything starts
        with self._lock:
            running = self._by_cluster.get(spec.name)
            if running is not None and running.state == "running":
                raise KctlError(f"a {running.kind} started by {running.user} still runs on {spec.name}",
                                hint="wait for it, or cancel the reassignment")
            job = Job(spec.name, user, "reassignment", time.time(), topics=tuple(sorted({t for t, _ in plan})))
            self._by_cluster[spec.name] = job
        started = threading.Event()
        failure: list[BaseException] = []

        def say(line: str) -> None:
            job.log.append(time.strftime("%H:%M:%S ") + line)
            if "started" in line:
                started.set()

        def run() -> None:
            try:
                reassign.execute(spec, plan, throttle=throttle, wait=True, timeout=timeout, progress=say,
                                 state_dir=state_dir_for(spec, None))  # its record: the CLI's time left too
                job.state = "done"
            except KctlError as exc:
                job.state, job.error = "failed", exc.message
                failure.append(exc)
            except Exception as exc:  # noqa: BLE001 - a job's thread reports, never dies silently
                job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
                failure.append(exc)
            finally:
                job.ended = time.time()
                started.set()
                self.on_end(job)

        threading.Thread(target=run, name=f"reassign-{spec.name}", daemon=True).start()
        started.wait(120)  # the start itself (Kafka's tool in a container) is part of the request
        if failure and job.state == "failed" and not any("started" in line for line in job.log):
            err = failure[0]
            raise err if isinstance(err, KctlError) else KctlError(str(err))
        return job
