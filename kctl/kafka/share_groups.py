"""Share groups (KIP-932, Kafka 4.1+ on KRaft): list, describe with each share-partition's start offset and lag,
reset their start offsets (dry run by default), delete.

confluent-kafka has no admin call for share groups (it has the share consumer), so Kafka's own
ShareGroupCommand (kafka-share-groups.sh's class) runs in a node, through the image's kafka-run-class.sh, and its
tables are parsed here (pure functions, tested on the tool's own output). A share group has no committed offsets:
its members acknowledge records one by one, and each share-partition's *start offset* (SPSO) is the first
record not yet acknowledged by all; records before it are done. Lag = records from the start offset to the end of
the log, as Kafka computes it.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import re
from dataclasses import dataclass, field

from kctl.deferred import defer_import
from kctl.errors import KctlError, UsageError
from kctl.kafka import groups
from kctl.model.spec import ClusterSpec

defer_import("kctl.runtime.cluster")
from kctl.runtime import cluster as runtime_cluster  # noqa: E402

MAIN_CLASS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
RUNNER = "kafka-run-class.sh"
FIRST_RELEASE = (4, 1)  # the first release whose tools and brokers have share groups
MISSING = "-"  # the tool's empty cell


@dataclass
class SharePartition:
    topic: str
    partition: int
    start_offset: int | None
    lag: int | None


@dataclass
class ShareMember:
    consumer_id: str
    host: str
    client_id: str
    assignment: list[str] = field(default_factory=list)


@dataclass
class ShareGroupDescription:
    group: str
    state: str
    coordinator: int | None
    members: list[ShareMember] = field(default_factory=list)
    partitions: list[SharePartition] = field(default_factory=list)
    total_lag: int = 0
    type: str = "share"


@dataclass
class ShareReset:
    group: str
    topic: str
    strategy: str
    executed: bool
    moves: list[dict[str, object]] = field(default_factory=list)


def release(spec: ClusterSpec) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", spec.versions.kafka)[:2])


def supported(spec: ClusterSpec) -> bool:
    """Share groups exist on this cluster's release (on KRaft, Kafka 4.1 or newer)."""
    return spec.on_kraft and release(spec) >= FIRST_RELEASE


def require_supported(spec: ClusterSpec) -> None:
    if not supported(spec):
        where = "on ZooKeeper" if not spec.on_kraft else f"on Kafka {spec.versions.kafka}"
        raise UsageError(f"cluster {spec.name} has no share groups: they need Kafka 4.1 or newer on KRaft, and it"
                         f" runs {where}", hint="`kctl migrate kraft` and `versions.kafka` in kctl.yaml")


def run_tool(spec: ClusterSpec, main_class: str, label: str, args: list[str], timeout: float = 90,
             benign: tuple[str, ...] = ()) -> str:
    """Kafka's ``main_class`` (a group tool) in a node; its output, or one clear error: the tool's ``Error:``
    lines (but those starting with one of ``benign``: a notice the tool prints as an error), a delete's reason
    per group, else the Java exception's message."""
    run = runtime_cluster.run_kafka_tool(spec, RUNNER, args, leading=[main_class], timeout=timeout)
    lines = [ln.strip() for ln in run.output.splitlines()]
    errors = [e for ln in lines if ln.startswith("Error:") if not (e := ln[len("Error:"):].strip()).startswith(benign)]
    errors += [ln[2:] for ln in lines if ln.startswith("* Group '")]  # a delete's reason per group
    # a Java exception's own line (not its stack's "at ..." lines) says what went wrong
    thrown = [m.group(1) for ln in lines if (m := re.match(r"^(?:Caused by: )?[\w.$]+(?:Exception|Error): (.+)$", ln))]
    if run.exit_code != 0 or errors:
        said = "; ".join(errors) if errors else thrown[0] if thrown else (
            [ln for ln in lines if ln and not ln.startswith("at ")] or ["no output"])[-1]
        raise KctlError(f"{label}: {said}", hint=f"ran in {run.host}: {label.replace(' ', '-')}.sh {' '.join(args)}")
    return run.output


def _run(spec: ClusterSpec, args: list[str], timeout: float = 90) -> str:
    return run_tool(spec, MAIN_CLASS, "share groups", args, timeout)


def _rows(text: str, header: str) -> list[list[str]]:
    """The rows of each of the tool's tables whose header starts with ``header`` (its cells split on blanks)."""
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if line.startswith(header):
            inside = True
            continue
        if inside and not line.startswith(("Share group '", "Error:", "WARN", "[")):
            rows.append(cells)
    return rows


def _int(cell: str) -> int | None:
    return int(cell) if re.fullmatch(r"-?\d+", cell) else None


def parse_list(text: str) -> list[tuple[str, str]]:
    """Pure: `--list --state`'s GROUP STATE table, as (group, state) sorted by group."""
    return sorted((r[0], r[1].upper()) for r in _rows(text, "GROUP ") if len(r) >= 2)


def parse_offsets(text: str) -> list[SharePartition]:
    """Pure: `--describe`'s GROUP TOPIC PARTITION START-OFFSET LAG table."""
    return [p for parts in parse_offsets_by_group(text).values() for p in parts]


def parse_offsets_by_group(text: str) -> dict[str, list[SharePartition]]:
    """Pure: `--describe`'s tables (``--all-groups``: one a group), each group's share-partitions."""
    out: dict[str, list[SharePartition]] = {}
    for r in _rows(text, "GROUP "):
        if len(r) >= 4 and r[2].isdigit():
            out.setdefault(r[0], []).append(SharePartition(r[1], int(r[2]), _int(r[3]),
                                                           _int(r[4]) if len(r) > 4 else None))
    return {g: sorted(ps, key=lambda p: (p.topic, p.partition)) for g, ps in out.items()}


def parse_members(text: str) -> list[ShareMember]:
    """Pure: `--describe --members`' GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT table (an assignment
    is ``topic:0,1;other:2``, empty when the member has none)."""
    return sorted((m for ms in parse_members_by_group(text).values() for m in ms), key=lambda m: m.consumer_id)


def parse_members_by_group(text: str) -> dict[str, list[ShareMember]]:
    """Pure: `--describe --members`' tables (``--all-groups``: one a group), each group's members."""
    out: dict[str, list[ShareMember]] = {}
    for r in _rows(text, "GROUP "):
        if len(r) < 5 or not r[4].isdigit():
            continue
        assignment = [f"{topic}-{p}" for part in (r[5].split(";") if len(r) > 5 else [])
                      for topic, _, ps in [part.rpartition(":")] if topic for p in ps.split(",") if p]
        out.setdefault(r[0], []).append(ShareMember(r[1], r[2], r[3], sorted(assignment)))
    return {g: sorted(ms, key=lambda m: m.consumer_id) for g, ms in out.items()}


def parse_state(text: str) -> tuple[str, int | None]:
    """Pure: `--describe --state`' GROUP COORDINATOR (ID) STATE #MEMBERS row: (state, coordinator id)."""
    for line in text.splitlines():
        m = re.match(r"^\S+\s+\S+\s+\((\d+)\)\s+(\S+)\s+(\d+)\s*$", line.strip())
        if m:
            return m.group(2).upper(), int(m.group(1))
    if "does not exist" in text:
        return "DEAD", None
    return "UNKNOWN", None


def list_groups(spec: ClusterSpec) -> list[tuple[str, str]]:
    """Every share group and its state (empty where the release has none)."""
    if not supported(spec):
        return []
    return parse_list(_run(spec, ["--list", "--state"]))


def describe(spec: ClusterSpec, group: str) -> ShareGroupDescription:
    """State, coordinator, members and every share-partition's start offset and lag (the tool's three
    describes at once: three JVMs side by side)."""
    require_supported(spec)
    asks = {"state": ["--describe", "--group", group, "--state"],
            "members": ["--describe", "--group", group, "--members"],
            "offsets": ["--describe", "--group", group]}
    with cf.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {k: pool.submit(_run, spec, v) for k, v in asks.items()}
        said = {k: f.result() for k, f in futures.items()}
    state, coordinator = parse_state(said["state"])
    if state == "DEAD":
        raise KctlError(f"share group {group!r} does not exist", hint="`kctl group list` names the groups")
    parts = parse_offsets(said["offsets"])
    return ShareGroupDescription(group, state, coordinator, parse_members(said["members"]), parts,
                                 sum(p.lag or 0 for p in parts))


def sample(spec: ClusterSpec, listed: list[tuple[str, str]] | None = None) -> list[ShareGroupDescription]:
    """The share groups ``listed`` (group, state; default: every one, listed here) with their members and
    share-partitions, for the lag evaluation: at most three JVMs whatever the number of groups: one lists them
    with their states (unless given), and only when there are some, ``--describe --all-groups`` and
    ``--describe --all-groups --members`` side by side (the coordinator is not asked for: None)."""
    if not supported(spec):
        return []
    if listed is None:
        listed = list_groups(spec)
    if not listed:
        return []
    asks = {"offsets": ["--describe", "--all-groups"], "members": ["--describe", "--all-groups", "--members"]}
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(_run, spec, v) for k, v in asks.items()}
        said = {k: f.result() for k, f in futures.items()}
    parts, members = parse_offsets_by_group(said["offsets"]), parse_members_by_group(said["members"])
    return [ShareGroupDescription(g, st, None, members.get(g, []), parts.get(g, []),
                                  sum(p.lag or 0 for p in parts.get(g, []))) for g, st in listed]


def tool_datetime(when: str | None) -> str:
    """An ISO 8601 time (naive: UTC), as `kctl group reset-offsets --to-datetime` takes it, in the tool's form
    (``YYYY-MM-DDTHH:mm:SS.sssZ``)."""
    if when is None:
        raise UsageError("--to-datetime needs a value")
    ms = groups.parse_datetime(when)
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_reset(text: str) -> list[dict[str, object]]:
    """Pure: the reset's GROUP TOPIC PARTITION NEW-OFFSET table."""
    return [{"topic": r[1], "partition": int(r[2]), "target": _int(r[3])}
            for r in _rows(text, "GROUP ") if len(r) >= 4 and r[2].isdigit()]


def reset_offsets(spec: ClusterSpec, group: str, topic: str, strategy: str, value: int | None = None,
                  when: str | None = None, execute: bool = False) -> ShareReset:
    """Move every share-partition of ``topic`` to a new start offset (the group must have no members): what the
    tool plans with --dry-run, or does with --execute."""
    require_supported(spec)
    if strategy == "offset":  # ShareGroupCommand of 4.1-4.3 takes no --to-offset
        raise UsageError(f"share group {group!r}: Kafka {spec.versions.kafka}'s share groups are reset to the earliest"
                         " or latest offset or to a time, not to an offset",
                         hint=f"`kctl group reset-offsets {group} --topic {topic} --to-datetime ISO` (or"
                              " --to-earliest, --to-latest)")
    how = {"earliest": ["--to-earliest"], "latest": ["--to-latest"], "offset": ["--to-offset", str(value)],
           "datetime": ["--to-datetime"]}[strategy]
    if strategy == "datetime":
        how.append(tool_datetime(when))
    try:
        text = _run(spec, ["--reset-offsets", "--group", group, "--topic", topic, *how,
                           "--execute" if execute else "--dry-run"])
    except KctlError as exc:
        if "is not empty" not in exc.message:
            raise
        raise KctlError(f"share group {group!r} has active members; its start offsets can only be reset while it"
                        " has none", hint="stop its consumers first (`kctl group describe` shows them)") from None
    moves = sorted(parse_reset(text), key=lambda m: (str(m["topic"]), int(str(m["partition"]))))
    return ShareReset(group, topic, strategy, execute, moves)


def delete(spec: ClusterSpec, group: str) -> str:
    require_supported(spec)
    text = _run(spec, ["--delete", "--group", group])
    if "was successful" not in text:
        raise KctlError(f"share group {group!r} was not deleted: {text.strip().splitlines()[-1]}",
                        hint="a share group is deleted only while it has no members")
    return group
