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
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


def plan(spec: ClusterSpec, brokers: list[int], topics: list[str] | None = None, *, by: str = "replicas") -> PlanResult:
    """The balanced assignment of ``topics`` (all, internal ones included, when None) over ``brokers``: by replica
    count, or with ``by="bytes"`` by each broker's bytes (partition sizes from kafka-log-dirs.sh)."""
    current, live = assignment(spec, topics)
    unknown = sorted(set(brokers) - set(live))
    if unknown:
        raise UsageError(f"broker(s) {','.join(map(str, unknown))} not registered in the cluster",
                         hint=f"registered brokers: {','.join(map(str, live))}; a new node's broker must be up"
                              " first (`kctl node add`, `kctl status`)")
    if by not in ("replicas", "bytes"):
        raise UsageError(f"--by {by!r}: expected replicas or bytes", hint="--by bytes balances the bytes on disk")
    if by == "bytes":
        on_disk = _sizes(spec, sorted({t for t, _ in current})) if current else {}
        sizes = {(t, p): max((v for (_b, name), v in on_disk.items() if name == f"{t}-{p}"), default=0)
                 for (t, p) in current}
        p: bal.BalancePlan = bytes_balance.balance_bytes(current, sizes, brokers)
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
    )
    if isinstance(p, bytes_balance.BytesPlan):
        res.bytes_per_broker = {"current": p.bytes_per_broker("current"), "target": p.bytes_per_broker()}
        res.bytes_moved = p.bytes_moved
    return res


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


def status(spec: ClusterSpec, with_bytes: bool = True) -> ReassignStatus:
    """The partitions being moved now, and (when any) the bytes their new replicas still lack."""
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


def check_plan(spec: ClusterSpec, target: bal.Assignment) -> None:
    """UsageError when the plan names an unknown broker, topic or partition, or changes an RF."""
    current, live = assignment(spec)
    bal.validate_against(target, live, current)


def _run(spec: ClusterSpec, args: list[str], target: bal.Assignment, timeout: float = 120) -> tuple[str, str]:
    doc = json.dumps(bal.to_kafka_json(target))
    run = run_kafka_tool(spec, TOOL, ["--reassignment-json-file", PLAN_PATH, *args], timeout=timeout,
                         files={PLAN_PATH: doc}, stderr=False)
    if run.exit_code != 0:
        raise ClusterError(f"{TOOL} {args[0]} failed (exit {run.exit_code}) in {run.host}:"
                           f" {run.output.strip()[-600:]}", hint="`kctl reassign status` shows what is moving")
    return run.output, run.host


def execute(spec: ClusterSpec, target: bal.Assignment, *, throttle: int | None = None, wait: bool = False,
            timeout: float = 900, progress: Progress | None = None) -> ExecuteResult:
    """Start the reassignment with Kafka's tool (throttled if asked); ``wait``: follow it, verify, elect."""
    say = progress or (lambda _m: None)
    busy = _moving(spec)
    if busy:
        raise ClusterError(f"a reassignment is already running ({len(busy)} partition(s), e.g."
                           f" {', '.join(m.partition for m in busy[:3])}); nothing was started",
                           hint="wait for it (`kctl reassign status`), or `kctl reassign cancel`")
    check_plan(spec, target)
    t0 = time.monotonic()
    args = ["--execute"] + (["--throttle", str(throttle)] if throttle else [])
    out, host = _run(spec, args, target)
    res = ExecuteResult(len(target), throttle, wait, output=out, host=host)
    say(f"reassignment of {len(target)} partition(s) started in {host}"
        + (f", throttled to {throttle} B/s" if throttle else ""))
    if wait:
        wait_done(spec, set(f"{t}-{p}" for t, p in target), timeout, say)
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


def wait_done(spec: ClusterSpec, partitions: set[str], timeout: float, say: Progress) -> None:
    """Poll ZooKeeper until none of ``partitions`` is being moved (reporting bytes left now and then).

    TimeoutReached (the partitions still moving) when ``timeout`` passes first.
    """
    last_report = [0.0]

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
            say(f"moving {len(moving)} partition(s)"
                + (f", {st.bytes_left} bytes left" if st.bytes_left is not None else ""))
            last_report[0] = time.monotonic()
        return False, f"{len(moving)} partition(s) still moving ({', '.join(m.partition for m in moving[:5])})"

    wait_until("the reassignment to finish", probe, timeout, poll=POLL,
               hint="it goes on in the background: `kctl reassign status`; a low --throttle slows it;"
                    " `kctl reassign verify plan.json` removes the throttle when done")


def verify(spec: ClusterSpec, target: bal.Assignment) -> str:
    """Kafka's --verify: reports each partition, and removes the throttle once all are complete."""
    out, _ = _run(spec, ["--verify"], target)
    return out


def cancel(spec: ClusterSpec) -> list[Moving]:
    """Cancel every ongoing reassignment (Kafka's --cancel: back to the original replicas, throttle removed)."""
    moving = _moving(spec)
    if not moving:
        return []
    target: bal.Assignment = {}
    for m in moving:
        t, _, p = m.partition.rpartition("-")
        target[(t, int(p))] = [b for b in m.replicas if b not in m.removing] or m.replicas
    _run(spec, ["--cancel"], target)
    return moving
