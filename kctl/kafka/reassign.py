"""Partition reassignment: kctl plans (:mod:`kctl.kafka.balance`), Kafka's own tool moves.

confluent-kafka has no reassignment call, so ``execute``, ``verify`` and ``cancel``
run ``kafka-reassign-partitions.sh`` inside a node (``kctl.runtime.cluster.run_kafka_tool``).
What is moving is read from ZooKeeper while the cluster has one: the controller keeps an ongoing
reassignment in each topic's znode (``adding_replicas``/``removing_replicas``, KIP-455), and the
legacy path in ``/admin/reassign_partitions``; on KRaft from Kafka itself (the tool's ``--list``:
ListPartitionReassignments), and the throttles from the brokers' dynamic configs. Bytes left come from
``kafka-log-dirs.sh`` (the leader's log size minus what each new replica has).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kafka import balance as bal
from kctl.kafka import bytes_balance, leaders
from kctl.kafka.client import Target, admin, require_reachable, require_topics
from kctl.model.spec import ClusterSpec
from kctl.runtime.cluster import run_kafka_tool
from kctl.wait import wait_until
from kctl.zk.znodes import connect, guarded_reader

Progress = Callable[[str], None]
TOOL = "kafka-reassign-partitions.sh"
PLAN_PATH = "/tmp/kctl-reassign.json"  # inside the node container the tool runs in
POLL = 1.0


@dataclass
class PlanResult:
    brokers: list[int]
    topics: list[str]
    moves: list[dict[str, Any]]
    replicas_moved: int
    leaders_changed: int
    replicas_per_broker: dict[str, dict[int, int]]
    leaders_per_broker: dict[str, dict[int, int]]
    kafka_json: dict[str, Any]  # Kafka's reassignment file: the partitions that change
    by: str = "replicas"
    # --by bytes: each broker's bytes (its replicas' partition sizes) before and after, and what the move copies
    bytes_per_broker: dict[str, dict[int, int]] | None = None
    bytes_moved: int | None = None
    # --replication-factor N: the factor each planned topic gets (its execute needs --replication-factor-change)
    replication_factor: int | None = None


@dataclass
class Moving:
    partition: str
    replicas: list[int]
    adding: list[int]
    removing: list[int]
    bytes_left: int | None = None


@dataclass
class ReassignStatus:
    moving: list[Moving] = field(default_factory=list)
    bytes_left: int | None = None
    throttled_brokers: list[int] = field(default_factory=list)
    # About how long the move still takes: from the bytes copied since `kctl reassign execute` started it (its
    # record in the state dir) and the throttle it set, as the most it can go at; None when neither says.
    seconds_left: float | None = None
    started: float | None = None  # when that execute started the move (seconds since the epoch)
    throttle: int | None = None  # the replication throttle it set, bytes/s per broker

    @property
    def active(self) -> bool:
        return bool(self.moving)


@dataclass
class ExecuteResult:
    partitions: int
    throttle: int | None
    waited: bool
    seconds: float = 0.0
    output: str = ""
    verify: str = ""
    election: Any = None  # kctl.kafka.leaders.ElectionResult after --wait
    host: str = ""
    warnings: list[str] = field(default_factory=list)


# ----- the cluster's assignment ----------------------------------------------------------------------


def assignment(spec: ClusterSpec, topics: list[str] | None = None) -> tuple[bal.Assignment, list[int]]:
    """({(topic, partition): replicas in assignment order}, registered broker ids), from Kafka's metadata."""
    cluster = Target.of(spec)
    a = admin(cluster)
    if topics:
        require_topics(cluster, topics, client=a)
    md = require_reachable(cluster, client=a)
    out: bal.Assignment = {}
    for name, t in md.topics.items():
        if t.error is not None or (topics and name not in topics):
            continue
        for p, pm in t.partitions.items():
            out[(name, int(p))] = [int(b) for b in pm.replicas]
    return out, sorted(int(b) for b in md.brokers)


def plan(spec: ClusterSpec, brokers: list[int] | None, topics: list[str] | None = None, *, by: str = "replicas",
         replication_factor: int | None = None) -> PlanResult:
    """The balanced assignment of ``topics`` (all, internal ones included, when None) over ``brokers`` (every
    registered broker when None): by replica count, or with ``by="bytes"`` by each broker's bytes (partition sizes
    from kafka-log-dirs.sh). With ``replication_factor``, ``topics`` (named) get that many replicas per partition
    instead, new ones on the brokers holding the fewest bytes (:func:`kctl.kafka.bytes_balance.change_rf`)."""
    if by not in ("replicas", "bytes"):  # before the cluster is asked anything
        raise UsageError(f"--by {by!r}: expected replicas or bytes", hint="--by bytes balances the bytes on disk")
    if replication_factor is not None and not topics:
        raise UsageError("--replication-factor needs --topics: the topics whose factor changes",
                         hint="kctl reassign plan --topics orders --replication-factor 3")
    current, live = assignment(spec, topics)
    brokers = list(live) if brokers is None else brokers
    unknown = sorted(set(brokers) - set(live))
    if unknown:
        raise UsageError(f"broker(s) {','.join(map(str, unknown))} not registered in the cluster",
                         hint=f"registered brokers: {','.join(map(str, live))}; a new node's broker must be up"
                              " first (`kctl node add`, `kctl status`)")
    if replication_factor is not None:
        sizes = _partition_sizes(spec, current)
        racks = _racks(spec)
        target: bal.Assignment = {}
        for t in sorted({t for t, _ in current}):
            target.update(bytes_balance.change_rf(current, sizes, brokers, t, replication_factor, racks=racks))
        _check_rf(spec, target, current)
        p: bal.BalancePlan = bytes_balance.BytesPlan(sorted(set(brokers)), dict(current),
                                                     {**current, **target}, sizes=sizes)
        p.moves = [bal.Move(t, n, list(current[(t, n)]), r) for (t, n), r in sorted(target.items())]
    elif by == "bytes":
        p = bytes_balance.balance_bytes(current, _partition_sizes(spec, current), brokers, racks=_racks(spec))
    else:
        p = bal.balance(current, brokers)
    res = PlanResult(
        brokers=p.brokers,
        topics=sorted({t for t, _ in current}),
        moves=[{"partition": f"{m.topic}-{m.partition}", "current": m.current, "target": m.target,
                "adding": m.adding, "removing": m.removing} for m in p.moves],
        replicas_moved=p.replicas_moved,
        leaders_changed=p.leaders_changed,
        replicas_per_broker={"current": p.replica_counts("current"), "target": p.replica_counts()},
        leaders_per_broker={"current": p.leader_counts("current"), "target": p.leader_counts()},
        kafka_json=bal.to_kafka_json({(m.topic, m.partition): m.target for m in p.moves}),
        by=by,
        replication_factor=replication_factor,
    )
    if isinstance(p, bytes_balance.BytesPlan):
        res.bytes_per_broker = {"current": p.bytes_per_broker("current"), "target": p.bytes_per_broker()}
        res.bytes_moved = p.bytes_moved
    return res


def _partition_sizes(spec: ClusterSpec, current: bal.Assignment) -> dict[bal.TopicPartition, int]:
    """{(topic, partition): its size}: the largest of its replicas' sizes on disk (kafka-log-dirs.sh)."""
    on_disk = _sizes(spec, sorted({t for t, _ in current})) if current else {}
    return {(t, p): max((v for (_b, name), v in on_disk.items() if name == f"{t}-{p}"), default=0)
            for (t, p) in current}


def _racks(spec: ClusterSpec) -> dict[int, str | None] | None:
    """{broker: its broker.rack} from Kafka's DescribeCluster, or None when no broker has a rack."""
    try:
        nodes = admin(Target.of(spec)).describe_cluster().result(15).nodes
    except Exception:  # noqa: BLE001 - racks refine a plan; a plan without them is still a valid one
        return None
    racks = {int(n.id): (n.rack or None) for n in nodes}
    return racks if any(racks.values()) else None


def _check_rf(spec: ClusterSpec, target: bal.Assignment, current: bal.Assignment) -> None:
    """UsageError when a plan lowers a partition's replicas below its topic's min.insync.replicas: every write
    with acks=all to it would then fail (NOT_ENOUGH_REPLICAS)."""
    lowered = {t for (t, p), r in target.items() if len(r) < len(current.get((t, p), r))}
    if not lowered:
        return
    mins = leaders.min_insync_replicas(Target.of(spec), lowered)
    low = sorted(f"{t}-{p} ({len(r)} < min.insync.replicas {mins[t]})" for (t, p), r in target.items()
                 if t in mins and len(r) < mins[t])
    if low:
        topic = low[0].rsplit("-", 1)[0]
        raise UsageError(f"the plan leaves fewer replicas than min.insync.replicas: {', '.join(low[:5])}; producers"
                         " with acks=all could no longer write", hint=f"lower the topic's min.insync.replicas first:"
                         f" `kctl config set topic {topic} min.insync.replicas=N`; nothing was changed")


# ----- what is moving --------------------------------------------------------------------------------


def _moving(spec: ClusterSpec) -> list[Moving]:
    """The partitions being moved now: from ZooKeeper, or on KRaft from Kafka's ListPartitionReassignments."""
    return _moving_from_kafka(spec) if spec.on_kraft else _moving_from_zk(spec)


_LISTED = re.compile(r"(\S+-\d+): replicas: ([\d,]*)\.(?: adding: ([\d,]+)\.)?(?: removing: ([\d,]+)\.)?")


def parse_list(text: str) -> list[Moving]:
    """Pure: the partitions of ``kafka-reassign-partitions.sh --list``'s output ("foo-1: replicas: 1,2,4.
    adding: 4. removing: 1." under "Current partition reassignments:", or "No partition reassignments found.")."""
    def ids(part: str | None) -> list[int]:
        return [int(x) for x in (part or "").split(",") if x]

    return [Moving(m[1], ids(m[2]), ids(m[3]), ids(m[4]))
            for line in text.splitlines() if (m := _LISTED.fullmatch(line.strip()))]


def _moving_from_kafka(spec: ClusterSpec) -> list[Moving]:
    run = run_kafka_tool(spec, TOOL, ["--list"], timeout=60, stderr=False)
    if run.exit_code != 0 or not ("No partition reassignments found." in run.output
                                  or "Current partition reassignments:" in run.output):
        raise ClusterError(f"{TOOL} --list failed (exit {run.exit_code}) in {run.host}: {run.output.strip()[-400:]}",
                           hint="`kctl status` shows whether the brokers answer")
    return parse_list(run.output)


def _moving_from_zk(spec: ClusterSpec) -> list[Moving]:
    out: list[Moving] = []
    from kazoo.exceptions import NoNodeError

    with connect(spec) as zk:
        topics = zk.get_children("/brokers/topics") if zk.exists("/brokers/topics") else []
        # Every topic's znode asked at once (pipelined), not one round trip after another: 500 topics are one
        # wait, not 500.
        asks = [(t, zk.get_async(f"/brokers/topics/{t}")) for t in sorted(topics)]
        for t, ask in asks:
            try:
                raw, _ = ask.get(timeout=10)
                d = json.loads(raw or b"{}")
            except (NoNodeError, ValueError):  # deleted since listed, or not JSON
                continue
            adding, removing = d.get("adding_replicas") or {}, d.get("removing_replicas") or {}
            for p in sorted(set(adding) | set(removing), key=int):
                out.append(Moving(f"{t}-{p}", list((d.get("partitions") or {}).get(p, [])),
                                  list(adding.get(p, [])), list(removing.get(p, []))))
        if zk.exists("/admin/reassign_partitions"):  # the pre-KIP-455 path, still honoured by the controller
            raw, _ = zk.get("/admin/reassign_partitions")
            try:
                legacy = json.loads(raw or b"{}").get("partitions") or []
            except ValueError:
                legacy = []
            seen = {m.partition for m in out}
            for e in legacy:
                name = f"{e.get('topic')}-{e.get('partition')}"
                if name not in seen:
                    out.append(Moving(name, list(e.get("replicas") or []), [], []))
    return out


def _sizes(spec: ClusterSpec, topics: list[str]) -> dict[tuple[int, str], int]:
    """{(broker, "topic-partition"): bytes} from kafka-log-dirs.sh (future replicas excluded)."""
    run = run_kafka_tool(spec, "kafka-log-dirs.sh", ["--describe", "--topic-list", ",".join(topics)], timeout=60,
                         stderr=False)
    line = next((ln for ln in run.output.splitlines() if ln.startswith("{")), None)
    if run.exit_code != 0 or line is None:
        raise KctlError(f"kafka-log-dirs.sh failed (exit {run.exit_code}): {run.output.strip()[-300:]}")
    out: dict[tuple[int, str], int] = {}
    for b in json.loads(line).get("brokers", []):
        for d in b.get("logDirs", []):
            for p in d.get("partitions", []):
                if not p.get("isFuture"):
                    key = (int(b["broker"]), str(p["partition"]))
                    out[key] = out.get(key, 0) + int(p.get("size", 0))
    return out


def bytes_left(moving: list[Moving], sizes: dict[tuple[int, str], int]) -> int:
    """Per partition, what each adding replica still lacks of the largest original replica (pure)."""
    total = 0
    for m in moving:
        sources = [sizes.get((b, m.partition), 0) for b in m.replicas if b not in m.adding]
        full = max(sources, default=0)
        m.bytes_left = sum(max(0, full - sizes.get((b, m.partition), 0)) for b in m.adding)
        total += m.bytes_left
    return total


# ----- the record of a started move: when it started, the bytes it had to copy, its throttle ------------------
RECORD = "reassignment.json"  # in the state dir


def _write_record(state_dir: Path | None, target: bal.Assignment, bytes_total: int | None,
                  throttle: int | None) -> None:
    if state_dir is None:
        return
    doc = {"started": time.time(), "partitions": sorted(f"{t}-{p}" for t, p in target),
           "bytes_total": bytes_total, "throttle": throttle}
    path = state_dir / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)  # a reader sees the old record or the new one, never half of one


def read_record(state_dir: Path | None) -> dict[str, Any] | None:
    try:
        doc = json.loads((state_dir / RECORD).read_text()) if state_dir is not None else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("started"), (int, float)) else None


def _forget_record(state_dir: Path | None) -> None:
    if state_dir is not None:
        (state_dir / RECORD).unlink(missing_ok=True)


def _receiving(moving: list[Moving]) -> int:
    """How many brokers receive new replicas: each copies at most the throttle's rate."""
    return len({b for m in moving for b in m.adding}) or 1


def estimate(st: ReassignStatus, record: dict[str, Any] | None, now: float | None = None,
             samples: list[tuple[float, int]] | None = None) -> None:
    """Fill ``st.seconds_left`` (pure but for the clock): the rate seen since the move started (its record: the
    bytes it had to copy then; ``samples`` of (time, bytes left) seen since), capped by its throttle times the
    brokers receiving. A record of another move (no partition in common) says nothing."""
    if st.bytes_left is None or not st.moving:
        return
    now = time.time() if now is None else now
    pts = list(samples or [])
    if record is not None and {m.partition for m in st.moving} & set(record.get("partitions") or []):
        st.started = float(record["started"])
        st.throttle = int(record["throttle"]) if record.get("throttle") else None
        if isinstance(record.get("bytes_total"), int):
            pts.insert(0, (st.started, int(record["bytes_total"])))
    pts.append((now, st.bytes_left))
    cap = st.throttle * _receiving(st.moving) if st.throttle else None
    st.seconds_left = bytes_balance.seconds_left(st.bytes_left, throttle=cap, samples=pts)


def about(seconds: float) -> str:
    """A time left as people read it: 45s, 12m05s, 3h20m."""
    s = int(round(seconds))
    return f"{s}s" if s < 120 else f"{s // 60}m{s % 60:02d}s" if s < 7200 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def status(spec: ClusterSpec, with_bytes: bool = True, state_dir: Path | None = None) -> ReassignStatus:
    """The partitions being moved now, and (when any) the bytes their new replicas still lack and, from the
    record ``kctl reassign execute`` left in ``state_dir``, about how long the move still takes."""
    import concurrent.futures as cf

    # Two ZooKeeper sessions (the throttles are read as the guarded reader on a secured cluster), at once.
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        throttled = pool.submit(_throttled, spec)
        st = ReassignStatus(_moving(spec))
        st.throttled_brokers = throttled.result()
    if st.moving and with_bytes:
        topics = sorted({m.partition.rsplit("-", 1)[0] for m in st.moving})
        try:
            st.bytes_left = bytes_left(st.moving, _sizes(spec, topics))
        except KctlError:
            st.bytes_left = None  # the sizes are a courtesy: what moves is known without them
        estimate(st, read_record(state_dir))
    return st


THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def _throttled(spec: ClusterSpec) -> list[int]:
    """Brokers with a replication throttle rate set (a reassignment's throttle not yet removed)."""
    if spec.on_kraft:
        return _throttled_from_kafka(spec)
    out = []
    try:
        # /config/brokers is the brokers' only on a secured cluster (dynamic configs may hold passwords)
        with connect(spec, principal=guarded_reader(spec)) as zk:
            for b in zk.get_children("/config/brokers") if zk.exists("/config/brokers") else []:
                raw, _ = zk.get(f"/config/brokers/{b}")
                cfg = (json.loads(raw or b"{}").get("config") or {})
                if b.isdigit() and set(THROTTLE_RATES) & set(cfg):
                    out.append(int(b))
    except (KctlError, ValueError):
        return []
    return sorted(out)


def _throttled_from_kafka(spec: ClusterSpec) -> list[int]:
    """On KRaft: the brokers whose dynamic config sets a throttle rate (DescribeConfigs of each broker)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    try:
        a = admin(Target.of(spec))
        brokers = sorted(a.list_topics(timeout=10).brokers)
        asked = a.describe_configs([ConfigResource(ConfigResource.Type.BROKER, str(b)) for b in brokers])
        out = []
        for res, fut in asked.items():
            entries = fut.result(timeout=15)
            if any(k in entries and not entries[k].is_default for k in THROTTLE_RATES):
                out.append(int(res.name))
    except (KafkaException, KctlError):
        return []
    return sorted(out)


# ----- execute / verify / cancel ---------------------------------------------------------------------


def load_plan(text: str, source: str) -> bal.Assignment:
    return bal.parse_kafka_json(text, source)


def check_plan(spec: ClusterSpec, target: bal.Assignment, *, change_rf: bool = False) -> None:
    """UsageError when the plan names an unknown broker, topic or partition, or changes an RF (``change_rf``: it
    may, but never below a topic's min.insync.replicas)."""
    current, live = assignment(spec)
    bal.validate_against(target, live, current, change_rf=change_rf)
    if change_rf:
        _check_rf(spec, target, current)


def _run(spec: ClusterSpec, args: list[str], target: bal.Assignment, timeout: float = 120) -> tuple[str, str]:
    doc = json.dumps(bal.to_kafka_json(target))
    run = run_kafka_tool(spec, TOOL, ["--reassignment-json-file", PLAN_PATH, *args], timeout=timeout,
                         files={PLAN_PATH: doc}, stderr=False)
    if run.exit_code != 0:
        raise ClusterError(f"{TOOL} {args[0]} failed (exit {run.exit_code}) in {run.host}:"
                           f" {run.output.strip()[-600:]}", hint="`kctl reassign status` shows what is moving")
    return run.output, run.host


def execute(spec: ClusterSpec, target: bal.Assignment, *, throttle: int | None = None, wait: bool = False,
            timeout: float = 900, progress: Progress | None = None, change_rf: bool = False,
            state_dir: Path | None = None) -> ExecuteResult:
    """Start the reassignment with Kafka's tool (throttled if asked); ``wait``: follow it, verify, elect.

    ``change_rf``: the plan may change replication factors (on purpose: `kctl reassign plan --replication-factor`).
    ``state_dir``: where the move's record goes (when it started, the bytes to copy, the throttle), from which
    `kctl reassign status` estimates the time left."""
    say = progress or (lambda _m: None)
    busy = _moving(spec)
    if busy:
        raise ClusterError(f"a reassignment is already running ({len(busy)} partition(s), e.g."
                           f" {', '.join(m.partition for m in busy[:3])}); nothing was started",
                           hint="wait for it (`kctl reassign status`), or `kctl reassign cancel`")
    check_plan(spec, target, change_rf=change_rf)
    t0 = time.monotonic()
    total: int | None = None
    if state_dir is not None and not wait:
        # For `kctl reassign status` in another process: the bytes the move must copy, from which it reads the rate
        # (a --wait run measures its own rate from its progress reports instead, and saves kafka-log-dirs.sh here).
        current = assignment(spec, sorted({t for t, _ in target}))[0]
        try:
            sizes = _partition_sizes(spec, current)
            total = sum(sizes.get(k, 0) * len(set(r) - set(current.get(k, []))) for k, r in target.items())
        except KctlError:
            total = None  # without sizes the estimate goes by the throttle alone
    _write_record(state_dir, target, total, throttle)
    args = ["--execute"] + (["--throttle", str(throttle)] if throttle else [])
    out, host = _run(spec, args, target)
    res = ExecuteResult(len(target), throttle, wait, output=out, host=host)
    say(f"reassignment of {len(target)} partition(s) started in {host}"
        + (f", throttled to {throttle} B/s" if throttle else "")
        + (f", {total} bytes to copy" if total else ""))
    if wait:
        wait_done(spec, set(f"{t}-{p}" for t, p in target), timeout, say, record=read_record(state_dir))
        res.verify = verify(spec, target)
        say("verified: every partition has its new replicas; the throttle is removed")
        try:
            res.election = leaders.elect(Target.of(spec))
            say(f"preferred leader election: {len(res.election.elected)} leader(s) moved")
        except KctlError as exc:  # the move is done and verified; the leaders can be moved back later
            res.warnings.append(f"{exc.message} ({exc.hint})" if exc.hint else exc.message)
            say(f"warning: {res.warnings[-1]}")
    res.seconds = time.monotonic() - t0
    return res


def wait_done(spec: ClusterSpec, partitions: set[str], timeout: float, say: Progress, *,
              record: dict[str, Any] | None = None) -> None:
    """Poll ZooKeeper until none of ``partitions`` is being moved (reporting bytes left now and then, and the time
    left from the rate seen so far and ``record``'s throttle).

    TimeoutReached (the partitions still moving) when ``timeout`` passes first.
    """
    last_report = [0.0]
    samples: list[tuple[float, int]] = []

    def probe() -> tuple[bool, str]:
        moving = [m for m in _moving(spec) if m.partition in partitions]
        if not moving:
            return True, "no partition moving"
        if time.monotonic() - last_report[0] >= 10:
            st = ReassignStatus(moving)
            try:
                topics = sorted({m.partition.rsplit("-", 1)[0] for m in moving})
                st.bytes_left = bytes_left(moving, _sizes(spec, topics))
            except KctlError:
                st.bytes_left = None
            estimate(st, record, samples=samples)
            if st.bytes_left is not None:
                samples.append((time.time(), st.bytes_left))
            say(f"moving {len(moving)} partition(s)"
                + (f", {st.bytes_left} bytes left" if st.bytes_left is not None else "")
                + (f", about {about(st.seconds_left)} left" if st.seconds_left is not None else ""))
            last_report[0] = time.monotonic()
        return False, f"{len(moving)} partition(s) still moving ({', '.join(m.partition for m in moving[:5])})"

    wait_until("the reassignment to finish", probe, timeout, poll=POLL,
               hint="it goes on in the background: `kctl reassign status`; a low --throttle slows it;"
                    " `kctl reassign verify plan.json` removes the throttle when done")


def verify(spec: ClusterSpec, target: bal.Assignment) -> str:
    """Kafka's --verify: reports each partition, and removes the throttle once all are complete."""
    out, _ = _run(spec, ["--verify"], target)
    return out


def cancel(spec: ClusterSpec, state_dir: Path | None = None) -> list[Moving]:
    """Cancel every ongoing reassignment (Kafka's --cancel: back to the original replicas, throttle removed)."""
    moving = _moving(spec)
    if not moving:
        _forget_record(state_dir)
        return []
    target: bal.Assignment = {}
    for m in moving:
        t, _, p = m.partition.rpartition("-")
        target[(t, int(p))] = [b for b in m.replicas if b not in m.removing] or m.replicas
    _run(spec, ["--cancel"], target)
    _forget_record(state_dir)
    return moving
