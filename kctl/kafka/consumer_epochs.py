"""A KIP-848 consumer group's epochs (``type: consumer``, Kafka 4.0+ on KRaft): the group epoch, the target
assignment's epoch and each member's current and target epoch, which say whether the members have reached the
assignment the coordinator computed (a member whose epoch lags the group's is still reconciling).

confluent-kafka's DescribeConsumerGroups gives each member's target assignment but none of the epochs, so Kafka's
own ConsumerGroupCommand (kafka-consumer-groups.sh's class) runs in a node, ``--describe --state --verbose`` and
``--describe --members --verbose`` side by side, and its two tables are parsed here (pure functions, tested on the
tool's own output) by their headers' names.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
from dataclasses import dataclass, field

from kctl.kafka import groups, share_groups
from kctl.model.spec import ClusterSpec

MAIN_CLASS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
LABEL = "kafka consumer groups"
FIRST_RELEASE = (4, 0)  # KIP-848's consumer protocol generally available
STATE_HEADER = ("GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH")
MEMBERS_HEADER = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
                  "TARGET-EPOCH", "TARGET-ASSIGNMENT")


@dataclass
class Epochs:
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None
    # member id -> (its current epoch, the epoch of the target assignment it is given)
    members: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)


def supported(spec: ClusterSpec) -> bool:
    """Consumer groups of KIP-848's protocol may exist on this cluster (on KRaft, Kafka 4.0 or newer)."""
    return spec.on_kraft and share_groups.release(spec) >= FIRST_RELEASE


def _int(cell: str) -> int | None:
    return int(cell) if re.fullmatch(r"-?\d+", cell) else None


def _table(text: str, first: str) -> tuple[list[str], list[list[str]]]:
    """The header (its names) and rows of the tool's table whose header starts with ``first``; the rows split on
    blanks. "COORDINATOR (ID)" is one name in the header and "host:port  (id)" two cells in a row: both joined."""
    header: list[str] = []
    rows: list[list[str]] = []
    for line in text.splitlines():
        cells = line.split()
        if not cells or line.startswith(("Error:", "WARN", "[", "Consumer group '")):
            continue
        if cells[0] == first and len(cells) > 1 and cells[1] != first:
            header = [c for c in cells if c != "(ID)"]
            continue
        if header:
            rows.append([c for c in cells if not re.fullmatch(r"\(\d+\)", c)])
    return header, rows


def parse_state(text: str) -> tuple[int | None, int | None]:
    """Pure: (group epoch, target assignment epoch) from ``--describe --state --verbose``."""
    header, rows = _table(text, "GROUP")
    if not rows or not all(h in header for h in STATE_HEADER):
        return None, None
    row = dict(zip(header, rows[0], strict=False))
    return _int(row.get("GROUP-EPOCH", "")), _int(row.get("TARGET-ASSIGNMENT-EPOCH", ""))


def parse_members(text: str) -> dict[str, tuple[int | None, int | None]]:
    """Pure: member id -> (current epoch, target epoch) from ``--describe --members --verbose`` (rows whose cells
    do not line up with the header, a client id with a blank in it, are left out rather than misread)."""
    header, rows = _table(text, "GROUP")
    if tuple(header) != MEMBERS_HEADER:
        return {}
    out: dict[str, tuple[int | None, int | None]] = {}
    for cells in rows:
        if len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        out[row["CONSUMER-ID"]] = (_int(row["CURRENT-EPOCH"]), _int(row["TARGET-EPOCH"]))
    return out


def read(spec: ClusterSpec, group: str) -> Epochs:
    """The group's epochs as Kafka's tool reports them (two JVMs side by side in a node)."""
    asks = {"state": ["--describe", "--group", group, "--state", "--verbose"],
            "members": ["--describe", "--group", group, "--members", "--verbose"]}
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(share_groups.run_tool, spec, MAIN_CLASS, LABEL, v) for k, v in asks.items()}
        said = {k: f.result() for k, f in futures.items()}
    group_epoch, target_epoch = parse_state(said["state"])
    return Epochs(group_epoch, target_epoch, parse_members(said["members"]))


def attach(spec: ClusterSpec, d: groups.GroupDescription) -> groups.GroupDescription:
    """``d`` (a consumer group's description) with its epochs and its members'."""
    e = read(spec, d.group)
    d.group_epoch, d.target_assignment_epoch = e.group_epoch, e.target_assignment_epoch
    for m in d.members:
        m.member_epoch, m.target_epoch = e.members.get(m.consumer_id, (None, None))
    return d
