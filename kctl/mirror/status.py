"""What a mirror is doing, read from the target cluster (MirrorMaker's own topics), the source, and Docker.

- task states: the last status record of each connector and task (``mm2-status.<source>.internal``);
- per source partition: the source's end offset against the last offset MirrorMaker committed as replicated
  (``mm2-offsets.<source>.internal``, committed every ``config.OFFSET_FLUSH_MS``): the lag in records, and in
  seconds (how old the oldest record not yet replicated is, by its timestamp on the source);
- the age of the last heartbeat of this flow and of the last checkpoint: a mirror that stopped silently
  stops both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError
from kctl.kafka.client import Target, consumer
from kctl.mirror import config, records
from kctl.mirror import stack as mirrors
from kctl.model.spec import ClusterSpec, MirrorSpec
from kctl.runtime import docker_api
from kctl.wait import Deadline

READ_TIMEOUT = 20.0
# A heartbeat is emitted every second; older than this, the flow is reported stalled.
HEARTBEAT_STALE_S = 30.0


@dataclass
class PartitionLag:
    source_topic: str
    partition: int
    target_topic: str
    source_end: int | None  # None: the source did not answer
    replicated: int  # the next source offset to replicate (last committed + 1)
    lag: int | None
    lag_seconds: float | None


@dataclass
class MirrorStatus:
    mirror: str
    source: str
    target: str
    container: str  # running, exited, ... or missing
    source_reachable: bool
    tasks: dict[str, str] = field(default_factory=dict)
    partitions: list[PartitionLag] = field(default_factory=list)
    total_lag: int | None = None
    heartbeat_age_seconds: float | None = None
    checkpoint_age_seconds: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def health(self) -> str:
        return "ok" if not self.problems else "down" if self.container != "running" else "degraded"


def read_whole(target: Target, topic: str, timeout: float = READ_TIMEOUT, *,
               last: int | None = None, strict: bool = False) -> list[Any]:
    """Every record of ``topic`` (only the ``last`` ones of each partition when given) up to its end offsets,
    with a fresh consumer that commits nothing; [] when the topic does not exist. ``strict``: a partition not
    read to its end offset within ``timeout`` is an error naming it (else what was read is returned)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    c = consumer(target, group=f"kctl-mirror-{time.monotonic_ns()}")
    try:
        md = c.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return []
        ends: dict[int, int] = {}
        assign = []
        for p in sorted(t.partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            if high > low:
                ends[p] = int(high)
                start = OFFSET_BEGINNING if last is None else max(int(low), int(high) - last)
                assign.append(TopicPartition(topic, p, start))
        out: list[Any] = []
        if not assign:
            return out
        c.assign(assign)
        todo = set(ends)
        deadline = Deadline(timeout)
        while todo and not deadline.passed():  # bounded: timeout
            for m in c.consume(1000, timeout=0.5):
                if m.error() is not None:
                    continue
                out.append(m)
                part, off = int(m.partition() or 0), int(m.offset() or 0)
                if off + 1 >= ends[part]:
                    todo.discard(part)
            for tp in c.position([TopicPartition(topic, p) for p in sorted(todo)]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
        if todo and strict:
            raise KctlError(f"{topic} was not read to its end within {timeout:g}s: partition(s)"
                            f" {', '.join(map(str, sorted(todo)))} short of their end offsets, so what it says is"
                            " not known whole; nothing was changed",
                            hint="`kctl status` (a broker down or slow?); run the command again")
        return out
    finally:
        c.close()


def tasks(spec: ClusterSpec, mirror: MirrorSpec) -> dict[str, str]:
    """connector/task -> state, from the flow's status topic in the target."""
    topic = config.internal_topics(mirror, spec.name)["status"]
    states: dict[str, str] = {}
    for m in read_whole(Target.of(spec), topic):
        got = records.status(m.key(), m.value())
        if got is None:
            continue
        name, value = got
        if value is None:
            states.pop(name, None)
        else:
            states[name] = str(value.get("state", "UNKNOWN"))
    return states


def running(spec: ClusterSpec, mirror: MirrorSpec) -> tuple[bool, str]:
    """Whether the flow's source connector and each of its tasks report RUNNING (a probe for `mirror up`)."""
    try:
        st = tasks(spec, mirror)
    except Exception as exc:  # noqa: BLE001 - not yet readable: the probe says what it saw
        return False, f"status not readable yet ({exc})"
    source = {k: v for k, v in st.items() if "MirrorSourceConnector" in k}
    if not any(k.startswith("task ") for k in source):
        return False, "no source task yet" + (f" ({', '.join(f'{k} {v}' for k, v in sorted(st.items()))})"
                                              if st else "")
    bad = {k: v for k, v in source.items() if v != "RUNNING"}
    if bad:
        return False, ", ".join(f"{k} {v}" for k, v in sorted(bad.items()))
    return True, ", ".join(f"{k} {v}" for k, v in sorted(st.items()))


def replicated_offsets(spec: ClusterSpec, mirror: MirrorSpec) -> dict[tuple[str, int], int]:
    """(source topic, partition) -> the last source offset MirrorMaker committed as replicated."""
    topic = config.internal_topics(mirror, spec.name)["offsets"]
    out: dict[tuple[str, int], int] = {}
    for m in read_whole(Target.of(spec), topic):
        got = records.source_offset(m.key(), m.value())
        if got is None or got[0] != "MirrorSourceConnector":
            continue
        _, t, p, off = got
        if off is None:
            out.pop((t, p), None)
        else:
            out[(t, p)] = off
    return out


def _heartbeat_age(spec: ClusterSpec, mirror: MirrorSpec, now: float) -> float | None:
    newest = None
    for m in read_whole(Target.of(spec), "heartbeats", last=50):
        if records.heartbeat_source(m.key()) == mirror.name:
            ts = m.timestamp()[1] / 1000
            newest = ts if newest is None else max(newest, ts)
    return None if newest is None else max(0.0, now - newest)


def _checkpoint_age(spec: ClusterSpec, mirror: MirrorSpec, now: float) -> float | None:
    topic = config.internal_topics(mirror, spec.name)["checkpoints"]
    stamps = [m.timestamp()[1] / 1000 for m in read_whole(Target.of(spec), topic, last=100)]
    return max(0.0, now - max(stamps)) if stamps else None


def _containers(spec: ClusterSpec, mirror: MirrorSpec) -> list[Any]:
    return list(docker_api.client().containers.list(all=True, filters={"label": [
        f"com.docker.compose.project={mirrors.project(spec)}",
        f"com.docker.compose.service={config.service(mirror)}"]}, ignore_removed=True))


def container_state(spec: ClusterSpec, mirror: MirrorSpec) -> str:
    """The mirror's container's state as Docker says it (running, exited, ...), "missing" without one."""
    try:
        found = _containers(spec, mirror)
    except Exception:  # noqa: BLE001 - Docker away: said as the container's state
        return "unknown (Docker did not answer)"
    return str(found[0].status) if found else "missing"


def running_since(spec: ClusterSpec, mirror: MirrorSpec) -> str | None:
    """The mirror's running container and when it started ("<id>@<StartedAt>"); None when none runs (or Docker
    does not answer). The same value before and after a ``compose up`` means the JVM kept running."""
    try:
        found = _containers(spec, mirror)
    except Exception:  # noqa: BLE001 - Docker away: no container known to run
        return None
    if not found or found[0].status != "running":
        return None
    return f"{found[0].id}@{(found[0].attrs.get('State') or {}).get('StartedAt', '')}"


def source_ends(source: config.Source, topics: list[str]) -> tuple[dict[tuple[str, int], int], str | None]:
    """The source's end offset of every partition of ``topics``; ({}, why) when it does not answer."""
    from confluent_kafka import KafkaException, TopicPartition

    c = consumer(source.target, group=f"kctl-mirror-{time.monotonic_ns()}")
    try:
        try:
            md = c.list_topics(timeout=5)
        except KafkaException as exc:
            return {}, f"the source at {source.target.bootstrap_servers} does not answer ({exc.args[0].str()})"
        out: dict[tuple[str, int], int] = {}
        for t in topics:
            for p in sorted(md.topics[t].partitions) if t in md.topics else ():
                try:
                    out[(t, p)] = int(c.get_watermark_offsets(TopicPartition(t, p), timeout=5, cached=False)[1])
                except KafkaException:
                    continue
        return out, None
    finally:
        c.close()


def _age_of(source: config.Source, topic: str, partition: int, offset: int, now: float) -> float | None:
    """How old the source record at ``offset`` is (its timestamp), or None."""
    from confluent_kafka import TopicPartition

    c = consumer(source.target, group=f"kctl-mirror-{time.monotonic_ns()}")
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        for m in c.consume(1, timeout=5):
            if m.error() is None:
                return max(0.0, now - float(m.timestamp()[1]) / 1000)
        return None
    finally:
        c.close()


def status(spec: ClusterSpec, mirror: MirrorSpec, source: config.Source, *, ages: bool = True) -> MirrorStatus:
    now = time.time()
    st = MirrorStatus(mirror.name, source.target.bootstrap_servers, spec.name, container_state(spec, mirror), True)
    if st.container != "running":
        st.problems.append(f"the mirror's container is {st.container} (`kctl mirror up` starts it)")
    st.tasks = tasks(spec, mirror)
    for name, state in sorted(st.tasks.items()):
        if state != "RUNNING":
            st.problems.append(f"{name} is {state}")
    if not st.tasks:
        st.problems.append("no connector has reported a state yet")
    done = replicated_offsets(spec, mirror)
    ends, why = source_ends(source, sorted({t for t, _p in done}))
    if why is not None:
        st.source_reachable = False
        st.problems.append(why + "; replication resumes when it answers")
    # A partition of a mirrored topic that MirrorMaker has not committed for yet is behind by all it holds (not
    # left out: a total of 0 over the committed partitions alone would say "caught up" too soon).
    for (t, p), off in sorted({**{tp: -1 for tp in ends}, **done}.items()):
        end = ends.get((t, p))
        nxt = off + 1
        lag = None if end is None else max(0, end - nxt)
        age = None
        if lag == 0:
            age = 0.0
        elif lag and ages:
            age = _age_of(source, t, p, nxt, now)
        st.partitions.append(PartitionLag(t, p, config.remote_topic(mirror, t), end, nxt, lag, age))
    lags = [x.lag for x in st.partitions]
    st.total_lag = sum(x for x in lags if x is not None) if lags and None not in lags else None
    st.heartbeat_age_seconds = _heartbeat_age(spec, mirror, now)
    st.checkpoint_age_seconds = _checkpoint_age(spec, mirror, now)
    if st.container == "running" and (st.heartbeat_age_seconds is None
                                      or st.heartbeat_age_seconds > HEARTBEAT_STALE_S):
        seen = "none yet" if st.heartbeat_age_seconds is None else f"{st.heartbeat_age_seconds:.0f}s ago"
        st.problems.append(f"last heartbeat {seen}: the flow is not emitting")
    return st
