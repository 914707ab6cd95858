"""The ``mirror-failover`` drill: the primary is lost under load, a consumer group fails over to the replica.

Run against the replica's kctl.yaml (a cluster with ``mirrors:``), whose mirror reads another kctl.yaml:

1. pre-checks: both clusters healthy, the mirror replicating, and its topic and group regexes taking the
   drill's own topic and group (``kctl-drill-...``); else nothing is done (exit 2);
2. the drill's topic on the primary (3 partitions); the load (acks=all, idempotent) and an application
   consumer of the drill's group, which commits what it has read every half second;
3. halfway, the primary is lost: every broker of it stopped; the application stops with it;
4. ``kctl mirror failover``'s translation applied on the replica (the loss waits for the group's first
   checkpoint there: one never checkpointed cannot fail over), and the application goes on there, reading the
   replica topic until it has been quiet for 5 s;
5. the primary's brokers started again; the verdict, from independent reads: the replica topic read back with
   a fresh consumer. **lost**: a record the replica holds that the group read neither on the primary nor on
   the replica (a failover that skipped it); **read again**: read on both (allowed: translation is at least
   once); **not replicated**: acknowledged by the primary but not in the replica when it was lost (what the
   failover cannot have: the replication lag at that moment, reported).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kctl.cluster import health
from kctl.drill import check
from kctl.drill.load import Load
from kctl.drill.run import DrillNotRun, Verdict, create_topic, pre_check_cluster
from kctl.errors import KctlError, TimeoutReached
from kctl.kafka.client import Target, consumer
from kctl.mirror import config, failover, status
from kctl.mirror import run as mirror_run
from kctl.model.spec import ClusterSpec, MirrorSpec
from kctl.runtime.faults import Faults
from kctl.wait import Every, pause_until, since, ticks, wait_until

Progress = Callable[[str], None]
SCENARIO = "mirror-failover"
QUIET_S = 5.0


def _matches(pattern: str, exclude: str | None, name: str) -> bool:
    return re.fullmatch(pattern, name) is not None and not (exclude and re.fullmatch(exclude, name))


class _App(threading.Thread):
    """The application: a consumer of the drill's group that commits what it has read every half second."""

    def __init__(self, cluster: Target, group: str, topic: str, *, reset: str = "earliest") -> None:
        super().__init__(daemon=True, name="kctl-drill-app")
        self.cluster, self.group, self.topic, self.reset = cluster, group, topic, reset
        self.seen: list[int] = []
        self.last = time.monotonic()
        self._halt = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        extra: dict[str, Any] = {"auto.offset.reset": self.reset, "session.timeout.ms": 6000}
        c = consumer(self.cluster, group=self.group, **extra)
        c.subscribe([self.topic])
        commit = Every(0.5)
        try:
            while not self._halt.is_set():
                for m in c.consume(200, timeout=0.2):
                    raw = m.value() if m.error() is None else None
                    if raw is not None:
                        try:
                            self.seen.append(int(raw))
                        except ValueError:
                            continue
                        self.last = time.monotonic()
                if commit.due():
                    try:
                        c.commit(asynchronous=False)
                    except Exception:  # noqa: BLE001 - nothing to commit yet, or the cluster is going away
                        pass
        except Exception as exc:  # noqa: BLE001 - reported with the verdict
            self.error = str(exc)
        finally:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a lost primary: leaving the group cannot reach it
                pass

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def run(target: ClusterSpec, spec_path: Path, *, mirror_name: str | None = None, duration: float = 30.0,
        rate: float = 200.0, gate_timeout: float = 180.0, progress: Progress | None = None) -> Verdict:
    say = progress or (lambda _m: None)
    try:
        mirror: MirrorSpec = config.find(target, mirror_name)
        source = mirror_run.sources(target, spec_path)[mirror.name]
    except KctlError as exc:
        raise DrillNotRun(f"{exc.message}; nothing was injected", hint=exc.hint) from None
    if source.target.spec is None:
        raise DrillNotRun(f"mirror {mirror.name} reads bootstrap servers, not a kctl.yaml: the drill stops the"
                          " primary's brokers, so it needs the primary's kctl.yaml; nothing was injected",
                          hint="mirrors[].source.spec")
    primary = source.target.spec
    suffix = uuid.uuid4().hex[:6]
    topic, group = f"kctl-drill-{SCENARIO}-{suffix}", f"kctl-drill-{SCENARIO}-{suffix}"
    if not _matches(mirror.topics, mirror.topics_exclude, topic) or \
            not _matches(mirror.groups, mirror.groups_exclude, group):
        raise DrillNotRun(f"mirror {mirror.name} does not take the drill's topic and group ({topic}); nothing was"
                          " injected", hint=f"let mirrors[{mirror.name}].topics and .groups match 'kctl-drill-.*'"
                                            " too, then `kctl mirror up`")
    pre_check_cluster(target)
    pre_check_cluster(primary)
    ok, saw = status.running(target, mirror)
    if not ok:
        raise DrillNotRun(f"mirror {mirror.name} is not replicating ({saw}); nothing was injected",
                          hint="`kctl mirror up`, `kctl mirror status`")
    brokers = len(health.status(primary).registered_ids)
    partitions, _ = create_topic(primary, topic, brokers, unclean=False)
    remote = config.remote_topic(mirror, topic)
    v = Verdict(SCENARIO, topic, "all", True, rate, 0.0, 1)
    say(f"drill {SCENARIO}: {primary.name} -> {target.name} through mirror {mirror.name}; topic {topic}"
        f" ({partitions} partitions) and group {group} on {primary.name}; {rate:g} records/s for {duration:g}s,"
        f" the primary lost halfway")
    load = Load(primary, topic, partitions, rate=rate, acks="all", message_timeout=10.0,
                max_seconds=duration + 600)
    app = _App(Target.of(primary), group, topic)
    marks: list[tuple[float, str]] = []
    with Faults(primary, state_dir=Path(primary.state_dir or ".")) as faults:
        load.start()
        app.start()
        clock = load.elapsed
        # A group can fail over only once the replica holds a checkpoint of it: MirrorMaker reads the group's
        # offsets from the primary, so one not checkpointed before the loss never will be. The loss waits for
        # the first one (bounded), then for the schedule.
        try:
            wait_until(f"a checkpoint of {group} on {target.name}",
                       lambda: (bool(failover.checkpoints(target, mirror, group)), "no checkpoint yet"),
                       gate_timeout, poll=0.5)
        except TimeoutReached:
            raise KctlError(f"MirrorMaker did not checkpoint {group} into {target.name} within"
                            f" {gate_timeout:.0f}s, so no failover was tried; nothing was injected",
                            hint="`kctl mirror status`; mirrors[].checkpoint_seconds") from None
        marks.append((clock(), f"the first checkpoint of {group} is on {target.name}"))
        pause_until(duration / 2, clock=clock)
        hosts = [primary.kafka_host(n) for n in primary.brokers]
        marks.append((clock(), f"the primary {primary.name} is lost: every broker stopped"))
        say(f"[{clock():6.1f}s] the primary is lost: stopping every broker of {primary.name}")
        for h in hosts:
            faults.stop(h, "kafka")
        start = clock()
        app.stop()
        rec = load.stop()
        v.faults = [{"start": round(start, 2), "end": None, "what": f"{primary.name}'s brokers stopped"}]
        # What the replica holds when the primary is gone: an independent read of the replica topic.
        replica = {seq for parts in check.read_topic(target, remote).values() for _, seq in parts}
        deadline = time.monotonic() + gate_timeout
        # The primary is gone: the checkpoints alone decide; a partition without one starts at its first offset
        # (read again, never skipped), and the verdict's duplicates count it.
        plan = failover.plan(target, mirror, group, execute=True, untranslated=failover.Untranslated.earliest)
        marks.append((clock(), f"group {group} failed over: {len(plan.moves)} partition(s) set on {target.name}"))
        say(f"[{clock():6.1f}s] failover of {group}: {len(plan.moves)} partition(s) at their translated offsets")
        after = _App(Target.of(target), group, remote)
        after.start()
        for _ in ticks(0.2, until=deadline):  # until the group has read nothing for QUIET_S
            if since(after.last) >= QUIET_S:
                break
        after.stop()
        marks.append((clock(), f"the group read {len(after.seen)} record(s) on {target.name}"))
        report = faults.heal()
        v.faults[0]["end"] = round(clock(), 2)
        v.healed_on_exit = report.undone + [f"FAILED: {f}" for f in report.failed]
    health.wait_until_healthy(primary, timeout=gate_timeout)
    marks.append((clock(), f"{primary.name} healthy again"))
    acked = {s for _, _, s in rec.acked}
    on_primary, on_replica = set(app.seen), set(after.seen)
    lost = sorted(replica - on_primary - on_replica)
    again = on_primary & on_replica
    v.produced, v.acked, v.read = rec.produced, len(acked), len(app.seen) + len(after.seen)
    v.lost, v.lost_sample, v.duplicates = len(lost), lost[:10], len(again)
    v.duplicate_sample = sorted(again)[:10]
    v.errors = dict(sorted(rec.errors.items()))
    v.duration_seconds = round(clock(), 2)
    v.events = [{"second": round(t, 2), "event": e} for t, e in marks]
    not_replicated = len(acked - replica)
    v.notes.append(f"{len(replica)} record(s) in the replica when the primary was lost; {not_replicated}"
                   " acknowledged by the primary were not replicated yet (the replication lag at that moment)")
    v.notes.append(f"the group read {len(app.seen)} on the primary and {len(after.seen)} on the replica;"
                   f" {len(again)} read on both (the translation is at least once)")
    if lost:
        v.failures.append(f"{len(lost)} record(s) of the replica the group never read (e.g. {lost[:5]})")
    if replica - acked - set(range(rec.produced)):
        v.failures.append("the replica holds records the load never produced")
    for who, a in (("primary", app), ("replica", after)):
        if a.error:
            v.failures.append(f"the application on the {who} failed: {a.error}")
    if any(h.startswith("FAILED") for h in v.healed_on_exit):
        v.failures.append("a fault could not be removed: " + "; ".join(v.healed_on_exit))
    v.holds = not v.failures
    return v
