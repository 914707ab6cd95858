"""What the console's pages show and do, as plain data: each function calls the same domain module as the CLI
(kctl.health, kctl.kafka.topics, kctl.kafka.groups, kctl.monitor's store) and returns JSON-ready dicts, which
the JSON API returns as they are and the pages render. No Kafka or Docker operation is written here.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from pathlib import Path
from typing import Any

from kctl.console.config import Entry
from kctl.console.users import User
from kctl.errors import KctlError
from kctl.spec import ClusterSpec, state_dir_for

STATUS_TIMEOUT = 1.5


def _state_dir(spec: ClusterSpec) -> Path:
    return state_dir_for(spec, None)


def open_alerts(spec: ClusterSpec) -> list[dict[str, Any]] | None:
    """The monitor's open alerts for this cluster; None when no monitor ever ran for it."""
    from kctl.monitor.store import Store, db_path

    path = db_path(_state_dir(spec))
    if not path.exists():
        return None
    store = Store(path, readonly=True)
    try:
        rows = store.alert_rows()
    finally:
        store.close()
    return [{"alert": a["rule"], "subject": a["subject"], "details": a.get("details"), "opened_at": a["opened"]}
            for a in rows if a.get("opened") is not None]


def cluster_card(entry: Entry) -> dict[str, Any]:
    """One cluster's card: health, brokers, under-replicated and offline partitions, open alerts. A cluster
    that does not answer is a card saying so, never an error of the page."""
    from kctl import health

    card: dict[str, Any] = {"name": entry.name, "path": str(entry.path), "error": entry.error}
    spec = entry.spec
    if spec is None:
        card["health"] = "unreadable"
        return card
    card["engine"] = spec.engine
    try:
        st = health.status(spec, timeout=STATUS_TIMEOUT)
    except KctlError as exc:
        card.update(health="unknown", error=exc.message)
        return card
    card.update(health=st.health, quorum=st.quorum, brokers_registered=st.brokers_registered,
                brokers_expected=st.brokers_expected, controller=st.controller,
                under_replicated_partitions=st.under_replicated_partitions,
                offline_partitions=st.offline_partitions, problems=st.problems)
    try:
        card["open_alerts"] = open_alerts(spec)
    except Exception as exc:  # noqa: BLE001 - a monitor database being written is no reason to fail the card
        card["open_alerts"] = None
        card["alerts_error"] = str(exc)
    return card


def cluster_cards(entries: list[Entry]) -> list[dict[str, Any]]:
    """Every card, asked in parallel: one slow cluster costs its own timeout, not the others'."""
    if not entries:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
        return list(pool.map(cluster_card, entries))


def cluster_detail(spec: ClusterSpec) -> dict[str, Any]:
    """ZooKeeper ensemble and brokers as `kctl status` sees them, with the partitions that need attention."""
    from kctl import health
    from kctl.kafka import topics

    st = health.status(spec, timeout=STATUS_TIMEOUT)
    doc: dict[str, Any] = {"name": spec.name, "health": st.health, "quorum": st.quorum, "leader": st.leader,
                           "controller": st.controller, "zookeeper": st.zookeeper, "brokers": st.brokers,
                           "problems": st.problems, "bootstrap_servers": st.bootstrap_servers,
                           "under_replicated": [], "offline": []}
    if st.brokers_registered:
        try:
            for t in topics.list_topics(spec, internal=True):
                if t.under_replicated:
                    d = topics.describe(spec, t.name)
                    for p in d.partitions:
                        if p.under_replicated or p.offline:
                            row = {"topic": t.name, "partition": p.partition, "leader": p.leader,
                                   "replicas": p.replicas, "isr": p.isr}
                            doc["offline" if p.offline else "under_replicated"].append(row)
        except KctlError as exc:
            doc["problems"] = [*doc["problems"], exc.message]
    return doc


def topic_list(spec: ClusterSpec, user: User, internal: bool = False) -> list[dict[str, Any]]:
    from kctl.kafka import topics

    return [dataclasses.asdict(t) for t in topics.list_topics(spec, internal)
            if user.may_see_topic(t.name)]


def topic_detail(spec: ClusterSpec, name: str) -> dict[str, Any]:
    from kctl.kafka import topics

    d = topics.describe(spec, name)
    doc = dataclasses.asdict(d)
    doc["under_replicated"], doc["offline"] = d.under_replicated, d.offline
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    for p in d.partitions:
        if p.leader is not None:
            leaders[p.leader] = leaders.get(p.leader, 0) + 1
        for r in p.replicas:
            replicas[r] = replicas.get(r, 0) + 1
    brokers = sorted(set(leaders) | set(replicas))
    doc["distribution"] = [{"broker": b, "leaders": leaders.get(b, 0), "replicas": replicas.get(b, 0)}
                           for b in brokers]
    doc["leader_skew"] = (max(leaders.values()) - min(leaders.get(b, 0) for b in brokers)) if leaders else 0
    return doc


def create_topic(spec: ClusterSpec, name: str, partitions: int | None, replication_factor: int | None,
                 configs: dict[str, str]) -> dict[str, Any]:
    from kctl.kafka import topics

    return dataclasses.asdict(topics.create(spec, name, partitions, replication_factor, configs, False))


def delete_topic(spec: ClusterSpec, name: str) -> dict[str, Any]:
    from kctl.kafka import topics

    return dataclasses.asdict(topics.delete(spec, name))


def add_partitions(spec: ClusterSpec, name: str, partitions: int) -> dict[str, Any]:
    from kctl.kafka import topics

    return dataclasses.asdict(topics.add_partitions(spec, name, partitions))


def group_list(spec: ClusterSpec, user: User) -> list[dict[str, Any]]:
    """Every group with its state and, where the monitor keeps history, its last Burrow status and lag."""
    from kctl.kafka import groups
    from kctl.monitor.store import Store, db_path

    latest: dict[str, dict[str, Any]] = {}
    path = db_path(_state_dir(spec))
    if path.exists():
        store = Store(path, readonly=True)
        try:
            latest = store.latest_groups()
        finally:
            store.close()
    out = []
    for g in groups.list_groups(spec):
        seen = latest.get(g.group) or {}
        out.append({"group": g.group, "state": g.state, "type": g.type, "status": seen.get("status"),
                    "total_lag": seen.get("total_lag")})
    if not user.topic_prefixes:
        return out
    # A user limited to topic prefixes sees only the groups that read nothing but their topics.
    return [g for g in out if _group_topics_visible(spec, str(g["group"]), user)]


def _group_topics_visible(spec: ClusterSpec, group: str, user: User) -> bool:
    from kctl.kafka import groups

    d = groups.describe(spec, group)
    return bool(d.partitions) and all(user.may_see_topic(p.topic) for p in d.partitions)


def group_detail(spec: ClusterSpec, group: str, user: User) -> dict[str, Any] | None:
    from kctl.kafka import groups

    d = groups.describe(spec, group)
    if user.topic_prefixes and not (d.partitions and all(user.may_see_topic(p.topic) for p in d.partitions)):
        return None
    return dataclasses.asdict(d)
