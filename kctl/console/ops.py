"""What the console's pages show and do, as plain data: each function calls the same domain module as the CLI
(kctl.cluster.health, kctl.kafka.topics, kctl.kafka.groups, kctl.monitor's store) and returns JSON-ready dicts, which
the JSON API returns as they are and the pages render. No Kafka or Docker operation is written here.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kctl.cluster import health
from kctl.console.config import Entry
from kctl.errors import KctlError
from kctl.kafka import browse as kafka_browse
from kctl.kafka import configs as kafka_configs
from kctl.kafka import groups as kafka_groups
from kctl.kafka import leaders as kafka_leaders
from kctl.kafka import reassign
from kctl.kafka import security as kafka_security
from kctl.kafka import topics as kafka_topics
from kctl.kafka.client import Target, admin, require_reachable
from kctl.kafka.groups import offsets
from kctl.model.spec import ClusterSpec, state_dir_for
from kctl.monitor import process, sampler, sources
from kctl.monitor.store import Store, db_path
from kctl.zk.znodes import connect

STATUS_TIMEOUT = 1.5
T = TypeVar("T")


def _state_dir(spec: ClusterSpec) -> Path:
    return state_dir_for(spec, None)


def _from_store(spec: ClusterSpec, read: Callable[[Any], T]) -> T | None:
    """``read(store)`` on the monitor's store of this cluster, opened read-only; None when no monitor ever ran."""
    path = db_path(_state_dir(spec))
    if not path.exists():
        return None
    store = Store(path, readonly=True)
    try:
        return read(store)
    finally:
        store.close()


def open_alerts(spec: ClusterSpec) -> list[dict[str, Any]] | None:
    """The monitor's open alerts for this cluster; None when no monitor ever ran for it."""
    rows = _from_store(spec, lambda store: store.alert_rows())
    if rows is None:
        return None
    return [{"alert": a["rule"], "subject": a["subject"], "details": a.get("details"), "opened_at": a["opened"]}
            for a in rows if a.get("opened") is not None]


def cluster_card(entry: Entry) -> dict[str, Any]:
    """One cluster's card: health, brokers, under-replicated and offline partitions, open alerts. A cluster
    that does not answer is a card saying so, never an error of the page."""
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


def spark_view(st: dict[str, Any] | None) -> dict[str, Any] | None:
    """kctl.yaml's Spark cluster as the cluster page shows it: the master's state and UI, each worker's state,
    cores and memory (its applications' names are no part of it)."""
    if st is None:
        return None
    return {"master": st.get("master"), "ui": st.get("ui"), "status": st.get("status"), "error": st.get("error"),
            "workers": [{k: w.get(k) for k in ("name", "state", "cores", "cores_used", "memory_mb", "ui")}
                        for w in st.get("workers") or []]}


def cluster_detail(spec: ClusterSpec) -> dict[str, Any]:
    """ZooKeeper ensemble and brokers as `kctl status` sees them, each broker with the partitions and leaders it
    holds (one metadata answer) and, when a monitor runs, its latest messages in/s and log size; the partitions
    that need attention."""
    st = health.status(spec, timeout=STATUS_TIMEOUT)
    doc: dict[str, Any] = {"name": spec.name, "health": st.health, "quorum": st.quorum, "leader": st.leader,
                           "controller": st.controller, "zookeeper": st.zookeeper, "brokers": st.brokers,
                           "problems": st.problems, "bootstrap_servers": st.bootstrap_servers,
                           "metadata": st.metadata, "controllers": st.controllers, "spark": spark_view(st.spark),
                           "under_replicated": [], "offline": []}
    held: dict[int, list[int]] = {}
    if st.brokers_registered:
        try:
            md = require_reachable(Target.of(spec))
        except KctlError as exc:
            doc["problems"] = [*doc["problems"], exc.message]
        else:
            for name, t in sorted(md.topics.items()):
                for p in sorted(t.partitions.values(), key=lambda p: p.id):
                    for r in p.replicas:
                        held.setdefault(int(r), [0, 0])[0] += 1
                    if p.leader is not None and p.leader >= 0:
                        held.setdefault(int(p.leader), [0, 0])[1] += 1
                    offline = p.leader is None or p.leader < 0
                    if offline or len(p.isrs) < len(p.replicas):
                        doc["offline" if offline else "under_replicated"].append(
                            {"topic": name, "partition": p.id, "leader": p.leader, "replicas": list(p.replicas),
                             "isr": list(p.isrs)})
    latest = _latest_broker_figures(spec)
    doc["brokers"] = [{**b, "partitions": held.get(b["id"], [0, 0])[0], "leaders": held.get(b["id"], [0, 0])[1],
                       "messages_in_per_sec": (latest.get(b["id"]) or {}).get("messages_in_per_sec"),
                       "log_size_bytes": (latest.get(b["id"]) or {}).get("log_size_bytes")} for b in st.brokers]
    return doc


def _latest_broker_figures(spec: ClusterSpec) -> dict[int, dict[str, Any]]:
    rep = _from_store(spec, lambda store: store.latest_metrics()) or {}
    return {int(b["id"]): b for b in rep.get("brokers") or []}


def topic_list(spec: ClusterSpec, internal: bool = False,
               keep: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """Topics with their records (log end minus log start, summed over partitions: two ListOffsets asks for
    every partition at once) and whether they are marked for deletion (ZooKeeper's /admin/delete_topics);
    ``keep``: the names to look at (the ones the asking user may see; the console filters again)."""
    import concurrent.futures as cf

    rows = [dataclasses.asdict(t) for t in kafka_topics.list_topics(Target.of(spec), internal)
            if keep is None or keep(t.name)]
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        counts = pool.submit(_records, spec, [(r["name"], r["partitions"]) for r in rows])
        marked = pool.submit(_marked_for_deletion, spec)
        (per_topic, ends), deleting = counts.result(), marked.result()
    rates = _rates(spec.name, ends)
    for r in rows:
        r["records"] = per_topic.get(r["name"])
        r["messages_in_per_sec"] = rates.get(r["name"])
        r["marked_for_deletion"] = r["name"] in deleting
    return rows


# The last log-end totals seen per cluster: a topic's messages in/s is the growth of its log end offsets since
# the previous look (at most RATE_MAX_AGE_S old); the topics page refreshes itself, so it shows a live rate.
_LAST_ENDS: dict[str, tuple[float, dict[str, int]]] = {}
RATE_MAX_AGE_S = 300.0


def _rates(cluster: str, ends: dict[str, int]) -> dict[str, float]:
    import time

    now = time.monotonic()
    prev = _LAST_ENDS.get(cluster)
    _LAST_ENDS[cluster] = (now, ends)
    if prev is None or not 0.5 <= now - prev[0] <= RATE_MAX_AGE_S:
        return {}
    dt = now - prev[0]
    return {t: round(max(0, n - prev[1][t]) / dt, 1) for t, n in ends.items() if t in prev[1]}


def _offsets(spec: ClusterSpec, tps: list[tuple[str, int]]) -> tuple[dict[tuple[str, int], int],
                                                                       dict[tuple[str, int], int]]:
    """(log start, log end) offsets of these partitions, two ListOffsets asks; empty when they fail (the
    offsets are a courtesy of the page: it stands without them)."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    if not tps:
        return {}, {}
    try:
        a = admin(Target.of(spec))
        return (offsets(a, tps, OffsetSpec.earliest()),  # type: ignore[no-untyped-call]
                offsets(a, tps, OffsetSpec.latest()))  # type: ignore[no-untyped-call]
    except KctlError:
        return {}, {}


def _records(spec: ClusterSpec, topics_: list[tuple[str, int]]) -> tuple[dict[str, int], dict[str, int]]:
    """Per topic: records (log end minus log start, summed over partitions) and the sum of its log ends."""
    lo, hi = _offsets(spec, [(t, p) for t, n in topics_ for p in range(n)])
    records: dict[str, int] = {}
    ends: dict[str, int] = {}
    for (t, p), end in hi.items():
        records[t] = records.get(t, 0) + max(0, end - lo.get((t, p), 0))
        ends[t] = ends.get(t, 0) + end
    return records, ends


def _marked_for_deletion(spec: ClusterSpec) -> set[str]:
    try:
        with connect(spec, timeout=2.0) as zk:
            return set(zk.get_children("/admin/delete_topics")) if zk.exists("/admin/delete_topics") else set()
    except Exception:  # noqa: BLE001 - a ZooKeeper that does not answer leaves the column empty, not the page
        return set()


def topic_detail(spec: ClusterSpec, name: str) -> dict[str, Any]:
    d = kafka_topics.describe(Target.of(spec), name)
    doc = dataclasses.asdict(d)
    doc["under_replicated"], doc["offline"] = d.under_replicated, d.offline
    lo, hi = _offsets(spec, [(name, p.partition) for p in d.partitions])
    for p in doc["partitions"]:
        p["earliest"], p["latest"] = lo.get((name, p["partition"])), hi.get((name, p["partition"]))
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
    return dataclasses.asdict(kafka_topics.create(Target.of(spec), name, partitions, replication_factor, configs,
                                                  False))


def delete_topic(spec: ClusterSpec, name: str) -> dict[str, Any]:
    return dataclasses.asdict(kafka_topics.delete(Target.of(spec), name))


def add_partitions(spec: ClusterSpec, name: str, partitions: int) -> dict[str, Any]:
    return dataclasses.asdict(kafka_topics.add_partitions(Target.of(spec), name, partitions))


def group_list(spec: ClusterSpec, with_topics: bool = False) -> list[dict[str, Any]]:
    """Every group of every type (classic, consumer, and on Kafka 4.1+ on KRaft share and streams groups, as
    `kctl group list`) with its state and, where the monitor keeps history, its last Burrow status and lag (the
    status `kctl lag` gives); ``with_topics``: also the topics each reads (a describe per classic or consumer
    group, one sampling of the share groups: the console asks for them for a user limited to topic prefixes,
    whose groups are the ones reading their topics)."""
    latest = _from_store(spec, lambda store: store.latest_groups()) or {}
    cluster = Target.of(spec)
    listing = sources.list_all(cluster, spec)
    tool_topics = sources.topics_of(cluster, spec, listing) if with_topics else {}
    out = []
    for g, kind in sorted(listing.types.items()):
        seen = latest.get(g) or {}
        row: dict[str, Any] = {"group": g, "state": listing.states.get(g),
                               "type": kind, "status": seen.get("status"), "total_lag": seen.get("total_lag")}
        if with_topics:
            row["topics"] = tool_topics[g] if g in tool_topics else \
                sorted({p.topic for p in kafka_groups.describe(cluster, g).partitions})
        out.append(row)
    return out


def group_detail(spec: ClusterSpec, group: str) -> dict[str, Any] | None:
    """The group of any type (:func:`kctl.monitor.sources.describe_any`) and its evaluation by the monitor."""
    return {**sources.describe_any(Target.of(spec), spec, group), "evaluation": group_evaluation(spec, group)}


# ----- messages -------------------------------------------------------------------------------------------

MASK = "••••••"


def browse(spec: ClusterSpec, topic: str, *, masked: bool, partition: int | None = None, newest: int | None = None,
           offset: int | None = None, since_ms: int | None = None, limit: int = 50,
           search: str | None = None) -> dict[str, Any]:
    """Records of a topic (kctl.kafka.browse); with ``masked``, values (and header values) are hidden and a
    search does not look into them: a masked value is not found by guessing it either."""
    res = kafka_browse.browse(Target.of(spec), topic, partition=partition, newest=newest, offset=offset,
                              since_ms=since_ms, limit=limit, search=None if masked else search)
    records = [dataclasses.asdict(r) for r in res.records]
    if masked:
        if search:
            records = [r for r in records if r["key"] and search.lower() in r["key"].lower()]
        for r in records:
            r["value"] = MASK if r["value"] is not None else None
            r["headers"] = [(k, MASK) for k, _ in r["headers"]]
    return {"topic": topic, "start": res.start, "records": records, "scanned": res.scanned,
            "ends": {str(p): o for p, o in res.ends.items()}, "stopped_by": res.stopped_by, "masked": masked}


def produce(spec: ClusterSpec, topic: str, value: str | None, key: str | None,
            headers: dict[str, str], partition: int | None) -> dict[str, Any]:
    return dataclasses.asdict(kafka_browse.produce_one(Target.of(spec), topic, value, key, headers, partition))


# ----- leaders and reassignment -------------------------------------------------------------------------


def elect(spec: ClusterSpec, topic: str | None) -> dict[str, Any]:
    r = kafka_leaders.elect(Target.of(spec), "preferred", topic)
    return {**dataclasses.asdict(r), "ok": r.ok}


def reassign_plan(spec: ClusterSpec, brokers: list[int], topics: list[str] | None) -> dict[str, Any]:
    return dataclasses.asdict(reassign.plan(spec, brokers, topics or None))


def registered_brokers(spec: ClusterSpec) -> list[int]:
    """The broker ids the cluster answers with (DescribeCluster: no topic metadata)."""
    cluster = Target.of(spec)
    try:
        return sorted(int(n.id) for n in admin(cluster).describe_cluster(request_timeout=10).result(15).nodes)
    except Exception:  # noqa: BLE001 - the metadata path says why the cluster does not answer
        return sorted(int(b) for b in require_reachable(cluster).brokers)


def reassign_status(spec: ClusterSpec) -> dict[str, Any]:
    st = reassign.status(spec, state_dir=_state_dir(spec))  # the CLI's answer, time left included
    return {"active": st.active, "moving": [dataclasses.asdict(m) for m in st.moving], "bytes_left": st.bytes_left,
            "throttled_brokers": st.throttled_brokers, "seconds_left": st.seconds_left,
            "time_left": reassign.about(st.seconds_left) if st.seconds_left is not None else None,
            "throttle": st.throttle}


def reassign_cancel(spec: ClusterSpec) -> dict[str, Any]:
    return {"cancelled": [m.partition for m in reassign.cancel(spec, _state_dir(spec))]}


# ----- groups: offsets ------------------------------------------------------------------------------------


def reset_offsets(spec: ClusterSpec, group: str, topic: str, strategy: str, value: int | None, when: str | None,
                  execute: bool) -> dict[str, Any]:
    """A classic or consumer group's offsets; a share or streams group's are refused (the CLI resets them)."""
    kind = sources.tool_kind(spec, group)
    if kind is not None:
        raise KctlError(f"{group!r} is a {kind.lower()} group: the console resets the offsets of classic and consumer"
                        " groups only", hint=f"`kctl group reset-offsets {group} --topic {topic} ...`"
                        + (" (its start offsets)" if kind == sources.SHARE else
                           " or Kafka's kafka-streams-groups.sh --reset-offsets"))
    return dataclasses.asdict(kafka_groups.reset_offsets(Target.of(spec), group, topic, strategy, value, when, execute))


def group_lag(spec: ClusterSpec, group: str) -> dict[str, Any]:
    """The group's lag now (what the live part of its page shows), whatever its type."""
    d = sources.describe_any(Target.of(spec), spec, group)
    ev = group_evaluation(spec, group)
    marks = (ev or {}).get("by_partition") or {}
    return {"group": group, "type": d["type"], "state": d["state"], "total_lag": d["total_lag"],
            "status": ev["status"] if ev else None,
            "partitions": [{**p, "status": marks.get(f"{p['topic']}-{p['partition']}")} for p in d["partitions"]]}


def group_history(spec: ClusterSpec, group: str, since_s: float) -> list[dict[str, Any]]:
    """The monitor's history of the group's status and total lag ([] without a monitor)."""
    import time

    since_ms = int((time.time() - since_s) * 1000)
    return _from_store(spec, lambda store: store.group_history(group, since_ms)) or []


# ----- configs, security, alerts, broker figures ------------------------------------------------------------


def topic_configs(spec: ClusterSpec, topic: str, set_: dict[str, str], delete: list[str]) -> dict[str, Any]:
    """Set and delete a topic's dynamic configs (kctl config set/delete --topic): the deletes first."""
    entity = kafka_configs.entity_from(topic=topic)
    cluster = Target.of(spec)
    done: dict[str, Any] = {}
    if delete:
        done["deleted"] = dataclasses.asdict(kafka_configs.delete_configs(cluster, entity, delete))
    if set_:
        done["set"] = dataclasses.asdict(kafka_configs.set_configs(cluster, entity, set_))
    return done


def scram_users(spec: ClusterSpec) -> list[dict[str, Any]]:
    return [dataclasses.asdict(u) for u in kafka_security.list_users(spec)]


def scram_user_add(spec: ClusterSpec, name: str, password: str | None) -> dict[str, Any]:
    return dataclasses.asdict(kafka_security.set_password(spec, name, password, create=True))


def scram_user_delete(spec: ClusterSpec, name: str) -> dict[str, Any]:
    return dataclasses.asdict(kafka_security.delete_user(spec, name))


def acls(spec: ClusterSpec) -> list[dict[str, Any]]:
    return [dataclasses.asdict(a) for a in kafka_security.list_acls(spec)]


def acl_change(spec: ClusterSpec, add: bool, principal: str, permission: str, operation: str, topic: str | None,
               group: str | None, cluster: bool, prefixed: bool) -> dict[str, Any]:
    fn = kafka_security.add_acl if add else kafka_security.remove_acl
    res = fn(spec, principal, permission.upper() == "ALLOW", operation, topic=topic, group=group, cluster=cluster,
             prefixed=prefixed)
    return dataclasses.asdict(res)


def alerts(spec: ClusterSpec, since_s: float = 86400) -> dict[str, Any] | None:
    """Open alerts and recent notifications from the monitor's store; None without a monitor."""
    import time

    found = _from_store(spec, lambda store: (store.alert_rows(), store.alert_log(time.time() - since_s)))
    if found is None:
        return None
    held, log = found
    return {"open": [{"alert": a["rule"], "subject": a["subject"], "details": a.get("details"),
                      "opened_at": a["opened"]} for a in held if a.get("opened") is not None],
            "recent": [{"at": r["ts"], "kind": r["kind"], "alert": r["rule"], "subject": r["subject"],
                        "details": r["body"].get("details")} for r in reversed(log)]}


BROKER_CHARTS = (("messages_in_per_sec", "messages in /s", ""), ("bytes_in_per_sec", "bytes in /s", "B"),
                 ("bytes_out_per_sec", "bytes out /s", "B"), ("produce_p99_ms", "produce p99", " ms"),
                 ("request_handler_idle_pct", "request handler idle", " %"))


def broker_history(spec: ClusterSpec, since_s: float = 3600) -> dict[str, Any] | None:
    """Per broker, the monitor's series of each charted figure, and its latest row; None without a monitor."""
    import time

    since_ms = int((time.time() - since_s) * 1000)
    reports = _from_store(spec, lambda store: store.metrics_history(since_ms))
    if reports is None:
        return None
    series: dict[int, dict[str, list[tuple[float, float]]]] = {}
    latest: dict[int, dict[str, Any]] = {}
    for ts_ms, rep in reports:
        for b in rep.get("brokers") or []:
            per = series.setdefault(int(b["id"]), {k: [] for k, _, _ in BROKER_CHARTS})
            for k, _, _ in BROKER_CHARTS:
                if b.get(k) is not None:
                    per[k].append((ts_ms / 1000, float(b[k])))
            latest[int(b["id"])] = b
    return {"series": series, "latest": latest, "reports": len(reports)}


def group_evaluation(spec: ClusterSpec, group: str) -> dict[str, Any] | None:
    """Burrow's evaluation of the group over the monitor's window (as `kctl lag GROUP` reads it from the
    monitor's store): its status and each partition's; None when the monitor has no samples of it."""
    rec = process.running(_state_dir(spec))
    window = rec.window if rec is not None else spec.monitoring.window
    judged = _from_store(spec, lambda store: sampler.stored_status(store, group, window=window,
                                                                   allowed_lag=spec.monitoring.allowed_lag))
    if judged is None:
        return None
    doc = judged.to_json()
    doc["by_partition"] = {f"{p['topic']}-{p['partition']}": p["status"] for p in doc["partitions"]}
    doc["monitor_running"] = rec is not None
    return doc
