"""Snapshots of groups of every type for the lag evaluation: what the monitor's rounds and ``kctl lag``'s fresh
sampling both take, so that one moment gives one answer whatever a group's type.

- classic and consumer (KIP-848) groups: the AdminClient (:func:`kctl.kafka.groups.describe`);
- share groups (KIP-932): Kafka's ShareGroupCommand in a node (:func:`kctl.kafka.share_groups.sample`: each
  share-partition's start offset and Kafka's lag; :func:`kctl.monitor.sampler.share_snapshot_of` says how they
  are judged);
- streams groups (KIP-1071): their state from Kafka's StreamsGroupCommand, their committed and end offsets from
  the AdminClient.

librdkafka lists neither share nor streams groups, and Kafka's tools are a JVM a call, so their cost is bounded:
only on a cluster of this kctl.yaml on KRaft with Kafka 4.1 or newer; each sampling lists the share and the
streams groups once (two JVMs side by side), and only when there are share groups describes them all at once (two
more JVMs, whatever their number). Nothing here prints.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import KctlError
from kctl.kafka import groups as kgroups
from kctl.kafka import share_groups, streams_groups
from kctl.kafka.client import Target
from kctl.model.spec import ClusterSpec
from kctl.monitor.sampler import GroupSnapshot, share_snapshot_of, snapshot_of, streams_snapshot_of

SHARE, STREAMS = "share", "streams"


@dataclass
class Listing:
    """Every group with its type (as `kctl group list` names them: classic, consumer, share, streams) and
    its state as listed."""

    types: dict[str, str] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)


def with_tools(spec: ClusterSpec | None) -> bool:
    """Whether share and streams groups are looked for: a cluster of this kctl.yaml on a release that has them."""
    return spec is not None and share_groups.supported(spec)


def list_all(target: Target, spec: ClusterSpec | None, *, client: Any = None) -> Listing:
    """The groups of every type: librdkafka's list, and where :func:`with_tools`, the share and streams groups
    (their two tools side by side)."""
    found = kgroups.list_groups(target, client=client)
    out = Listing({g.group: g.type for g in found}, {g.group: g.state for g in found})
    if spec is None or not with_tools(spec):
        return out
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        share = pool.submit(share_groups.list_groups, spec)
        streams = pool.submit(streams_groups.list_groups, spec)
        for kind, fut in ((SHARE, share), (STREAMS, streams)):
            for g, state in fut.result():
                out.types[g] = kind
                out.states[g] = state
    return out


def tool_kind(spec: ClusterSpec | None, group: str) -> str | None:
    """share or streams when ``group`` is a share or a streams group of this kctl.yaml's cluster (their two
    lists side by side); None otherwise (and where :func:`with_tools` is false)."""
    if spec is None or not with_tools(spec):
        return None
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        share = pool.submit(share_groups.list_groups, spec)
        streams = pool.submit(streams_groups.list_groups, spec)
        if group in dict(share.result()):
            return SHARE
        if group in dict(streams.result()):
            return STREAMS
    return None


def describe_typed(target: Target, spec: ClusterSpec | None, group: str
                   ) -> kgroups.GroupDescription | streams_groups.StreamsGroupDescription | \
        share_groups.ShareGroupDescription:
    """A group of any type described by what speaks for its type: a classic or consumer group by the AdminClient,
    a streams or share group (which it does not know, or knows only by its offsets) by Kafka's tool in a node of
    ``spec``'s cluster (None: not kctl's own cluster, so only the AdminClient's answer)."""
    kind: str | None
    try:
        d = kgroups.describe(target, group)
        kind = tool_kind(spec, group) if d.state == "DEAD" else None  # a streams group's offsets alone
    except KctlError:
        kind = tool_kind(spec, group)
        if kind is None:
            raise
    if kind is None:
        return d
    assert spec is not None
    return streams_groups.describe(spec, target, group) if kind == STREAMS else share_groups.describe(spec, group)


def describe_any(target: Target, spec: ClusterSpec | None, group: str) -> dict[str, Any]:
    """A group of any type as one JSON-ready shape (the console's): group, type, state, coordinator, assignor,
    members (consumer_id, client_id, host, assignment), partitions (topic, partition, committed, log_end, lag,
    client_id) and total_lag. A share-partition's ``committed`` is its start offset and ``log_end`` None (Kafka's
    tool gives its lag, not the log end); a streams member's ``host`` is its process id, its assignment its
    active tasks."""
    import dataclasses

    found = describe_typed(target, spec, group)
    if isinstance(found, kgroups.GroupDescription):
        return {**dataclasses.asdict(found), "type": found.type}
    if isinstance(found, streams_groups.StreamsGroupDescription):
        st = found
        return {"group": group, "type": STREAMS, "state": st.state, "coordinator": st.coordinator, "assignor": "",
                "members": [{"consumer_id": m.member_id, "client_id": m.client_id, "host": m.process,
                             "assignment": m.active} for m in st.members],
                "partitions": [dataclasses.asdict(p) for p in st.partitions], "total_lag": st.total_lag}
    sh = found
    return {"group": group, "type": SHARE, "state": sh.state, "coordinator": sh.coordinator, "assignor": "",
            "members": [{"consumer_id": m.consumer_id, "client_id": m.client_id, "host": m.host,
                         "assignment": m.assignment} for m in sh.members],
            "partitions": [{"topic": p.topic, "partition": p.partition, "committed": p.start_offset, "log_end": None,
                            "lag": p.lag, "consumer_id": None, "host": None, "client_id": None}
                           for p in sh.partitions], "total_lag": sh.total_lag}


def topics_of(target: Target, spec: ClusterSpec | None, listing: Listing) -> dict[str, list[str]]:
    """The topics each share and streams group of ``listing`` reads (share groups: one sampling of them all)."""
    out: dict[str, list[str]] = {}
    shared = [(g, listing.states.get(g, "UNKNOWN")) for g, t in sorted(listing.types.items()) if t == SHARE]
    if shared and spec is not None:
        for d in share_groups.sample(spec, shared):
            out[d.group] = sorted({p.topic for p in d.partitions})
    for g, t in listing.types.items():
        if t == STREAMS:
            out[g] = sorted({p.topic for p in streams_groups.lags(target, g)})
    return out


@dataclass
class Sampled:
    snapshots: list[GroupSnapshot]
    errors: dict[str, KctlError]  # group -> why it has no snapshot this time


def snapshots(target: Target, spec: ClusterSpec | None, listing: Listing, names: Iterable[str], at_ms: int, *,
              client: Any = None) -> Sampled:
    """A snapshot of each of ``names`` (each by its type in ``listing``; a name the listing lacks is asked
    for as a consumer group, whose describe says clearly when it does not exist)."""
    wanted = list(names)
    out: list[GroupSnapshot] = []
    errors: dict[str, KctlError] = {}
    share_names = {g for g in wanted if listing.types.get(g) == SHARE}
    if share_names and spec is not None:
        try:
            for d in share_groups.sample(spec, [(g, listing.states.get(g, "UNKNOWN")) for g in sorted(share_names)]):
                out.append(share_snapshot_of(d, at_ms))
        except KctlError as exc:
            errors.update({g: exc for g in share_names})
    for g in wanted:
        kind = listing.types.get(g)
        if kind == SHARE:
            continue
        try:
            if kind == STREAMS:
                out.append(streams_snapshot_of(g, listing.states.get(g, "UNKNOWN"),
                                               streams_groups.lags(target, g, client), at_ms))
            else:
                out.append(snapshot_of(kgroups.describe(target, g, client=client), at_ms))
        except KctlError as exc:
            errors[g] = exc
    return Sampled(out, errors)
