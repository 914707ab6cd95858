"""Streams groups (KIP-1071, Kafka 4.1+ on KRaft; on by default from 4.2): list, describe.

A streams group is a Kafka Streams application whose members use ``group.protocol=streams``: the group
coordinator assigns its tasks (a subtopology and a partition), and it commits offsets as a consumer group does.
librdkafka lists and describes none (its ListGroups leaves them out, its DescribeGroups calls one DEAD), so
Kafka's own StreamsGroupCommand (kafka-streams-groups.sh's class, in 4.3.1's kafka-tools jar) runs in a node
for the group's state, coordinator and members, and its tables are parsed here (pure functions, tested on the
tool's own output). Its committed offsets come through the AdminClient (OffsetFetch answers for a streams group
as for any other), with the partitions' end offsets: the tool's own offsets table lists only the partitions of
the members' active tasks, so an empty group's would be empty.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
from dataclasses import dataclass, field

from kctl.errors import KctlError
from kctl.kafka import groups, share_groups
from kctl.kafka.client import Target, admin, require_reachable
from kctl.model.spec import ClusterSpec

MAIN_CLASS = "org.apache.kafka.tools.streams.StreamsGroupCommand"
LABEL = "kafka streams groups"
# An empty group: the tool prints this as an "Error:" line, and its table after it.
BENIGN = ("Streams group '",)
LIVE = ("STABLE", "ASSIGNING", "RECONCILING", "NOT_READY")  # states with members taking part


@dataclass
class StreamsMember:
    member_id: str
    process: str
    client_id: str
    # task ids as Kafka Streams names them: SUBTOPOLOGY_PARTITION
    active: list[str] = field(default_factory=list)
    standby: list[str] = field(default_factory=list)
    warmup: list[str] = field(default_factory=list)


@dataclass
class StreamsGroupDescription:
    group: str
    state: str
    coordinator: int | None
    members: list[StreamsMember] = field(default_factory=list)
    partitions: list[groups.PartitionLag] = field(default_factory=list)
    total_lag: int = 0
    type: str = "streams"


def supported(spec: ClusterSpec) -> bool:
    """Streams groups may exist on this cluster's release (on KRaft, Kafka 4.1 or newer)."""
    return share_groups.supported(spec)


def _run(spec: ClusterSpec, args: list[str], timeout: float = 90) -> str:
    return share_groups.run_tool(spec, MAIN_CLASS, LABEL, args, timeout, benign=BENIGN)


def parse_list(text: str) -> list[tuple[str, str]]:
    """Pure: `--list --state`'s GROUP STATE table, as (group, state) sorted by group (NotReady: NOT_READY)."""
    return sorted((r[0], state_name(r[1])) for r in _table(text) if len(r) >= 2)


def state_name(text: str) -> str:
    """The tool's state (``Stable``, ``NotReady``) as kctl names group states (``STABLE``, ``NOT_READY``)."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text).upper()


def _table(text: str) -> list[list[str]]:
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("GROUP "):
            inside = True
            continue
        if inside and line.strip() and not line.startswith(("Error:", "WARN", "[", "\t", " ")):
            rows.append(line.split())
    return rows


def parse_state(text: str) -> tuple[str, int | None, int]:
    """Pure: `--describe --state`' GROUP COORDINATOR (ID) STATE #MEMBERS row: (state, coordinator id, members);
    ("DEAD", None, 0) for a group that does not exist."""
    for line in text.splitlines():
        m = re.match(r"^\S+\s+\S+\s+\((\d+)\)\s+(\S+)\s+(\d+)\s*$", line.strip())
        if m:
            return state_name(m.group(2)), int(m.group(1)), int(m.group(3))
    if "GroupIdNotFoundException" in text or "not found" in text:
        return "DEAD", None, 0
    return "UNKNOWN", None, 0


def _tasks(cell: str) -> list[str]:
    """``0:[0,1]; 1:[0,1];`` -> ["0_0", "0_1", "1_0", "1_1"]."""
    return [f"{sub}_{p}" for sub, ps in re.findall(r"(\d+):\[([\d,\s]*)\]", cell) for p in re.split(r"[,\s]+", ps)
            if p]


def parse_members(text: str) -> list[StreamsMember]:
    """Pure: `--describe --members`' GROUP MEMBER PROCESS CLIENT-ID ASSIGNMENTS table; an assignment is
    ``ACTIVE: 0:[0,1]; 1:[0,1]; STANDBY: ...; WARMUP: ...`` (the kinds the member has)."""
    out = []
    for r in _table(text):
        if len(r) < 4:
            continue
        rest = " ".join(r[4:])
        kinds = dict(re.findall(r"\b(ACTIVE|STANDBY|WARMUP):\s*((?:\d+:\[[^\]]*\];?\s*)*)", rest))
        out.append(StreamsMember(r[1], r[2], r[3], _tasks(kinds.get("ACTIVE", "")), _tasks(kinds.get("STANDBY", "")),
                                 _tasks(kinds.get("WARMUP", ""))))
    return sorted(out, key=lambda m: m.member_id)


def list_groups(spec: ClusterSpec) -> list[tuple[str, str]]:
    """Every streams group and its state (empty where the release has none)."""
    if not supported(spec):
        return []
    return parse_list(_run(spec, ["--list", "--state"]))


def lags(target: Target, group: str, client: object = None) -> list[groups.PartitionLag]:
    """The group's committed offsets, the partitions' end offsets and lag (AdminClient)."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    if client is None:
        require_reachable(target)
    a = client if client is not None else admin(target)
    committed = groups.committed_offsets(a, group)
    keys = sorted(committed)
    ends = groups.offsets(a, keys, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    return [groups.PartitionLag(t, p, committed[(t, p)], ends.get((t, p)), groups.lag(committed[(t, p)],
                                                                                     ends.get((t, p))))
            for t, p in keys]


def describe(spec: ClusterSpec, target: Target, group: str) -> StreamsGroupDescription:
    """State, coordinator, members with their tasks (the tool: two JVMs side by side) and every partition the
    group committed an offset for, with its end offset and lag."""
    if not supported(spec):
        raise KctlError(f"streams group {group!r}: cluster {spec.name} has no streams groups (Kafka 4.1+ on KRaft)")
    asks = {"state": ["--describe", "--group", group, "--state"],
            "members": ["--describe", "--group", group, "--members"]}
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(_run, spec, v) for k, v in asks.items()}
        said: dict[str, str] = {}
        for k, f in futures.items():
            try:
                said[k] = f.result()
            except KctlError as exc:
                if "not found" in exc.message:
                    raise KctlError(f"streams group {group!r} does not exist",
                                    hint="`kctl group list` names the groups") from None
                raise
    state, coordinator, _ = parse_state(said["state"])
    if state == "DEAD":
        raise KctlError(f"streams group {group!r} does not exist", hint="`kctl group list` names the groups")
    parts = lags(target, group)
    return StreamsGroupDescription(group, state, coordinator, parse_members(said["members"]), parts,
                                   sum(p.lag or 0 for p in parts))
