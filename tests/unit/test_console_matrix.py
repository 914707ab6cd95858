"""The console's authorization matrix: every route the application has (a new route without a row here fails),
called by every role and scope shape, each answer checked for allow/deny and for names its user may not see.

The domain calls (kctl.console.ops) are fakes that answer with hidden names on purpose (topics, a group, ACLs,
a SCRAM user, moving partitions, alerts, a job's log); what is tested is that the console's decisions filter
and refuse them. The expected outcome of each call is computed here from the row (the role a route needs and
what its scope needs), not from kctl.console.authz."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("fastapi")

from fastapi.routing import APIRoute  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from kctl.console import ops, server, views  # noqa: E402
from kctl.console.config import ConsoleConfig, Registry  # noqa: E402
from kctl.console.jobs import Job, Jobs  # noqa: E402
from kctl.console.users import Role, UserStore  # noqa: E402

PASSWORD = "correct horse battery"
HIDDEN = "hidden"  # every name a topic-limited user may not see holds it

# name -> (role, clusters, topic prefixes): every shape of scope, for each role
USERS = {
    "root-adm": ("admin", [], []),
    "alpha-adm": ("admin", ["alpha"], []),
    "teama-adm": ("admin", [], ["team-a."]),
    "both-adm": ("admin", ["alpha"], ["team-a."]),
    "all-op": ("operator", [], []),
    "teama-op": ("operator", ["alpha"], ["team-a."]),
    "all-view": ("viewer", [], []),
    "teama-view": ("viewer", ["alpha"], ["team-a."]),
}


@dataclass(frozen=True)
class Row:
    role: Role | None  # None: no session needed (the login page, the favicon)
    needs: str = "path"  # path: see what the path names; unlimited: no limit at all; whole: no topic limit
    body: Any = None  # JSON body, or form fields for a page's route
    query: str = ""
    calls: str | None = None  # the fake domain call an allowed change makes


V, OP, A = Role.viewer, Role.operator, Role.admin
PLAN = {"version": 1, "partitions": [{"topic": "team-a.events", "partition": 0, "replicas": [1, 2]}]}
NEW_USER = {"name": "new-user", "role": "viewer", "password": "long enough pw", "clusters": ["alpha"],
            "topic_prefixes": ["team-a.x"]}
ACL = {"principal": "User:app", "operation": "read", "topic": "team-a.events"}

ROWS: dict[tuple[str, str], Row] = {
    ("POST", "/api/login"): Row(None, "session"),
    ("POST", "/login"): Row(None, "session"),
    ("GET", "/login"): Row(None, "public"),
    ("GET", "/favicon.ico"): Row(None, "public"),
    ("POST", "/api/logout"): Row(V, "session"),
    ("POST", "/logout"): Row(V, "session"),
    ("GET", "/api/me"): Row(V),
    ("GET", "/api/clusters"): Row(V),
    ("GET", "/"): Row(V),
    ("GET", "/clusters/cards"): Row(V),
    ("POST", "/api/clusters"): Row(A, "unlimited", {"path": "GAMMA"}, calls="registry.add"),
    ("POST", "/clusters"): Row(A, "unlimited", {"path": "GAMMA"}, calls="registry.add"),
    ("DELETE", "/api/clusters/{cluster}"): Row(A, "unlimited", calls="registry.remove"),
    ("POST", "/clusters/{cluster}/remove"): Row(A, "unlimited", {}, calls="registry.remove"),
    ("GET", "/api/clusters/{cluster}"): Row(V),
    ("GET", "/clusters/{cluster}"): Row(V),
    ("GET", "/api/clusters/{cluster}/topics"): Row(V),
    ("GET", "/clusters/{cluster}/topics"): Row(V),
    ("POST", "/api/clusters/{cluster}/topics"): Row(OP, body={"name": "team-a.new"}, calls="create_topic"),
    ("POST", "/clusters/{cluster}/topics"): Row(OP, body={"name": "team-a.new"}, calls="create_topic"),
    ("GET", "/api/clusters/{cluster}/topics/{topic}"): Row(V),
    ("GET", "/clusters/{cluster}/topics/{topic}"): Row(V),
    ("DELETE", "/api/clusters/{cluster}/topics/{topic}"): Row(A, calls="delete_topic"),
    ("POST", "/clusters/{cluster}/topics/{topic}/delete"): Row(A, body={"confirm": "TOPIC"}, calls="delete_topic"),
    ("POST", "/api/clusters/{cluster}/topics/{topic}/partitions"): Row(OP, body={"partitions": 6},
                                                                       calls="add_partitions"),
    ("POST", "/clusters/{cluster}/topics/{topic}/partitions"): Row(OP, body={"partitions": "6"},
                                                                   calls="add_partitions"),
    ("GET", "/api/clusters/{cluster}/groups"): Row(V),
    ("GET", "/clusters/{cluster}/groups"): Row(V),
    ("GET", "/api/clusters/{cluster}/groups/{group}"): Row(V),
    ("GET", "/clusters/{cluster}/groups/{group}"): Row(V),
    ("GET", "/api/audit"): Row(V),
    ("GET", "/audit"): Row(V),
    ("GET", "/audit.csv"): Row(V),
    ("GET", "/api/users"): Row(A),
    ("GET", "/users"): Row(A),
    ("POST", "/api/users"): Row(A, body=NEW_USER, calls="users"),
    ("POST", "/users"): Row(A, body={**NEW_USER, "clusters": "alpha", "topic_prefixes": "team-a.x"},
                            calls="users"),
    ("DELETE", "/api/users/{name}"): Row(A, calls="users"),
    ("POST", "/users/{name}/delete"): Row(A, body={}, calls="users"),
    ("GET", "/api/clusters/{cluster}/topics/{topic}/messages"): Row(V),
    ("GET", "/clusters/{cluster}/topics/{topic}/messages"): Row(V),
    ("POST", "/api/clusters/{cluster}/topics/{topic}/messages"): Row(OP, body={"value": "v"}, calls="produce"),
    ("POST", "/clusters/{cluster}/topics/{topic}/messages"): Row(OP, body={"value": "v"}, calls="produce"),
    ("POST", "/api/clusters/{cluster}/election"): Row(OP, body={"topic": "team-a.events"}, calls="elect"),
    ("POST", "/clusters/{cluster}/election"): Row(OP, body={"topic": "team-a.events"}, calls="elect"),
    ("GET", "/api/clusters/{cluster}/reassignment/plan"): Row(V, query="brokers=1,2&topics=team-a.events"),
    ("GET", "/api/clusters/{cluster}/reassignment"): Row(V),
    ("GET", "/clusters/{cluster}/reassignment"): Row(V),
    ("POST", "/api/clusters/{cluster}/reassignment"): Row(OP, body={"plan": PLAN}, calls="start_reassignment"),
    ("POST", "/clusters/{cluster}/reassignment"): Row(OP, body={"plan": json.dumps(PLAN)},
                                                      calls="start_reassignment"),
    # a partition of a hidden topic is moving (the fakes): only a user without a topic limit cancels
    ("DELETE", "/api/clusters/{cluster}/reassignment"): Row(OP, "whole", calls="reassign_cancel"),
    ("POST", "/clusters/{cluster}/reassignment/cancel"): Row(OP, "whole", {}, calls="reassign_cancel"),
    ("GET", "/clusters/{cluster}/reassignment/events"): Row(V),
    ("GET", "/api/clusters/{cluster}/groups/{group}/offsets"): Row(V, query="topic=team-a.events&strategy=earliest"),
    ("POST", "/api/clusters/{cluster}/groups/{group}/offsets"): Row(OP, body={"topic": "team-a.events",
                                                                              "strategy": "earliest"},
                                                                     calls="reset_offsets"),
    ("POST", "/clusters/{cluster}/groups/{group}/offsets"): Row(OP, body={"topic": "team-a.events",
                                                                          "strategy": "earliest", "execute": "yes"},
                                                                 calls="reset_offsets"),
    ("GET", "/api/clusters/{cluster}/groups/{group}/history"): Row(V),
    ("GET", "/clusters/{cluster}/groups/{group}/events"): Row(V),
    ("POST", "/api/clusters/{cluster}/topics/{topic}/configs"): Row(OP, body={"set": {"retention.ms": "1"}},
                                                                    calls="topic_configs"),
    ("POST", "/clusters/{cluster}/topics/{topic}/configs"): Row(OP, body={"set": "retention.ms=1"},
                                                                calls="topic_configs"),
    ("GET", "/api/clusters/{cluster}/security/users"): Row(A, "whole"),
    ("GET", "/api/clusters/{cluster}/security/acls"): Row(A),
    ("GET", "/clusters/{cluster}/security"): Row(A),
    ("POST", "/api/clusters/{cluster}/security/users"): Row(A, "whole", {"name": "app1"}, calls="scram_user_add"),
    ("POST", "/clusters/{cluster}/security/users"): Row(A, "whole", {"name": "app1"}, calls="scram_user_add"),
    ("DELETE", "/api/clusters/{cluster}/security/users/{name}"): Row(A, "whole", calls="scram_user_delete"),
    ("POST", "/clusters/{cluster}/security/users/{name}/delete"): Row(A, "whole", {}, calls="scram_user_delete"),
    ("POST", "/api/clusters/{cluster}/security/acls"): Row(A, body=ACL, calls="acl_change"),
    ("DELETE", "/api/clusters/{cluster}/security/acls"): Row(A, body=ACL, calls="acl_change"),
    ("POST", "/clusters/{cluster}/security/acls"): Row(A, body={"principal": "User:app", "operation": "read",
                                                                "resource_type": "topic",
                                                                "resource": "team-a.events"}, calls="acl_change"),
    ("GET", "/api/clusters/{cluster}/alerts"): Row(V),
    ("GET", "/clusters/{cluster}/alerts"): Row(V),
    ("GET", "/api/clusters/{cluster}/brokers"): Row(V),
    ("GET", "/clusters/{cluster}/brokers"): Row(V),
}


class World:
    """The fakes' record of what reached the cluster (or the registry, or the users file)."""

    def __init__(self) -> None:
        self.calls: list[str] = []


def _moving(name: str, left: int) -> dict[str, Any]:
    return {"partition": name, "replicas": [1, 2], "adding": [2], "removing": [], "bytes_left": left}


@pytest.fixture()
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(monkeypatch)


def make_world(monkeypatch: pytest.MonkeyPatch) -> World:
    """The fakes of the domain calls (also tests/unit/test_console_hardening.py's)."""
    w = World()

    def rec(name: str, result: Any) -> Any:
        def f(*args: Any, **kw: Any) -> Any:
            w.calls.append(name)
            return result(*args, **kw) if callable(result) else result
        return f

    topics = ["team-a.events", "hidden-orders", "hidden-pay"]
    group_topics = {"g-team-a": ["team-a.events"], "hidden-group": ["hidden-orders"]}
    real_card = ops.cluster_card  # an unreadable cluster's card asks nothing of a cluster: the real one
    monkeypatch.setattr(ops, "cluster_cards", lambda entries: [
        real_card(e) if e.spec is None else {"name": e.name, "path": str(e.path), "health": "healthy"}
        for e in entries])
    monkeypatch.setattr(ops, "cluster_detail", lambda spec: {
        "name": spec.name, "health": "healthy", "quorum": "ok", "leader": "n1", "controller": 1, "zookeeper": [],
        "brokers": [], "problems": [], "bootstrap_servers": "x",
        "under_replicated": [{"topic": "hidden-orders", "partition": 0, "leader": 1, "replicas": [1, 2], "isr": [1]},
                             {"topic": "team-a.events", "partition": 1, "leader": 1, "replicas": [1, 2],
                              "isr": [1]}],
        "offline": [{"topic": "hidden-pay", "partition": 0, "leader": -1, "replicas": [1], "isr": []}]})
    monkeypatch.setattr(ops, "topic_list", lambda spec, internal=False, keep=None: [
        {"name": n, "partitions": 3, "replication_factor": 2, "internal": False, "under_replicated": 0}
        for n in topics])
    monkeypatch.setattr(ops, "topic_detail", lambda spec, name: {
        "name": name, "partition_count": 3, "replication_factor": 3, "partitions": [], "configs": [],
        "distribution": [], "leader_skew": 0, "under_replicated": 0, "offline": 0})
    for name in ("create_topic", "delete_topic", "add_partitions", "topic_configs", "scram_user_add",
                 "scram_user_delete", "acl_change", "reassign_cancel"):
        monkeypatch.setattr(ops, name, rec(name, {"ok": True}))
    monkeypatch.setattr(ops, "produce", rec("produce", {"partition": 0, "offset": 7}))
    monkeypatch.setattr(ops, "elect", rec("elect", {"scope": "x", "elected": [], "not_needed": 0, "failed": [],
                                                    "ok": True}))
    monkeypatch.setattr(ops, "reset_offsets", rec("reset_offsets", lambda spec, g, t, s, v, d, ex: {
        "topic": t, "strategy": s, "moves": [], "executed": ex}))
    monkeypatch.setattr(ops, "group_list", lambda spec, with_topics=False: [
        {"group": g, "state": "Empty", "type": "classic", "status": None, "total_lag": 0,
         **({"topics": t} if with_topics else {})} for g, t in group_topics.items()])
    monkeypatch.setattr(ops, "group_detail", lambda spec, group: {
        "group": group, "state": "Empty", "coordinator": 1, "assignor": "range", "members": [], "total_lag": 0,
        "evaluation": None, "partitions": [{"topic": t, "partition": 0, "committed": 1, "log_end": 2, "lag": 1,
                                            "client_id": None} for t in group_topics.get(group, [])]})
    monkeypatch.setattr(ops, "group_history", lambda spec, group, since: [])
    monkeypatch.setattr(ops, "group_lag", lambda spec, group: {"group": group, "state": "Empty", "total_lag": 0,
                                                               "status": None, "partitions": []})
    monkeypatch.setattr(ops, "browse", lambda spec, topic, **kw: {
        "topic": topic, "start": "newest", "records": [], "scanned": 0, "ends": {}, "stopped_by": "end",
        "masked": False})
    monkeypatch.setattr(ops, "reassign_plan", lambda spec, brokers, topics: {
        "brokers": brokers, "topics": topics or [], "moves": [], "replicas_moved": 0, "leaders_changed": 0,
        "replicas_per_broker": {"current": {}, "target": {}}, "leaders_per_broker": {"current": {}, "target": {}},
        "kafka_json": {}})
    monkeypatch.setattr(ops, "registered_brokers", lambda spec: [1, 2])
    monkeypatch.setattr(ops, "reassign_status", lambda spec: {
        "active": True, "moving": [_moving("hidden-orders-0", 5), _moving("team-a.events-1", 7)], "bytes_left": 12,
        "throttled_brokers": [1], "seconds_left": 754.0, "time_left": "12m34s", "throttle": 1000})
    monkeypatch.setattr(ops, "scram_users", lambda spec: [{"user": "hidden-scram", "mechanisms": ["SCRAM-SHA-512"],
                                                           "password_kept": True, "super_user": False}])
    monkeypatch.setattr(ops, "acls", lambda spec: [
        {"principal": "User:a", "permission": "ALLOW", "operation": "READ", "resource_type": "TOPIC",
         "resource": "team-a.events", "pattern": "LITERAL", "host": "*"},
        {"principal": "User:b", "permission": "ALLOW", "operation": "READ", "resource_type": "TOPIC",
         "resource": "team-a.", "pattern": "PREFIXED", "host": "*"},
        {"principal": "User:hidden-lit", "permission": "ALLOW", "operation": "READ", "resource_type": "TOPIC",
         "resource": "hidden-orders", "pattern": "LITERAL", "host": "*"},
        {"principal": "User:hidden-star", "permission": "ALLOW", "operation": "ALL", "resource_type": "TOPIC",
         "resource": "*", "pattern": "LITERAL", "host": "*"},
        {"principal": "User:hidden-pre", "permission": "ALLOW", "operation": "ALL", "resource_type": "TOPIC",
         "resource": "team-", "pattern": "PREFIXED", "host": "*"},
        {"principal": "User:hidden-cl", "permission": "ALLOW", "operation": "ALL", "resource_type": "BROKER",
         "resource": "kafka-cluster", "pattern": "LITERAL", "host": "*"}])
    alerts = [{"alert": "group-status", "subject": "group hidden-group", "details": "hidden-orders-0 STALL"},
              {"alert": "group-status", "subject": "group g-team-a", "details": "team-a.events-0 ERR"},
              {"alert": "controller", "subject": "cluster", "details": "no active controller"}]
    monkeypatch.setattr(ops, "alerts", lambda spec: {
        "open": [{**a, "opened_at": 1.0} for a in alerts],
        "recent": [{**a, "at": 1.0, "kind": "open"} for a in alerts]})
    monkeypatch.setattr(ops, "broker_history", lambda spec, since=3600: {"series": {}, "latest": {}, "reports": 0})
    monkeypatch.setattr(Registry, "add", lambda self, path: (w.calls.append("registry.add"), self.entries()[0])[1])
    monkeypatch.setattr(Registry, "remove", lambda self, name: w.calls.append("registry.remove"))

    def start(self: Jobs, spec: Any, user: str, plan: Any, throttle: Any, timeout: float = 0) -> Job:
        w.calls.append("start_reassignment")
        return Job(spec.name, user, "reassignment", 1.0, topics=tuple(sorted({t for t, _ in plan})))

    monkeypatch.setattr(Jobs, "start_reassignment", start)
    monkeypatch.setattr(views, "LIVE_SECONDS", 0.0)
    monkeypatch.setattr(views, "LIVE_MAX_SECONDS", 0.05)
    return w


def _cluster(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir()
    (d / "kctl.yaml").write_text(yaml.safe_dump({"name": name}))
    return d / "kctl.yaml"


@pytest.fixture(scope="module")
def users_yaml(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return hash_users(tmp_path_factory.mktemp("users"))


def hash_users(where: Path) -> bytes:
    """The users file, hashed once for a module, with argon2id at its cheapest (the console's own hashes take
    their time on purpose; a check reads its cost from the hash, so logins here are quick)."""
    from argon2 import PasswordHasher

    from kctl.console.users import User

    cheap = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    store = UserStore(where / "users.yaml")
    for name, (role, clusters, prefixes) in USERS.items():
        store.put(User(name, Role[role], cheap.hash(PASSWORD), tuple(clusters), tuple(prefixes)))
    return store.path.read_bytes()


@pytest.fixture()
def config(tmp_path: Path, users_yaml: bytes) -> ConsoleConfig:
    return make_config(tmp_path, users_yaml)


UNREADABLE = "gamma"  # a cluster whose kctl.yaml cannot be read (the file is missing)


def make_config(tmp_path: Path, users_yaml: bytes) -> ConsoleConfig:
    files = [_cluster(tmp_path, "alpha"), _cluster(tmp_path, "beta"), tmp_path / UNREADABLE / "kctl.yaml"]
    home = tmp_path / "console"
    home.mkdir(mode=0o700)
    cfg = ConsoleConfig(files, home / "users.yaml", home / "audit.jsonl", home / "clusters.yaml")
    cfg.users_file.write_bytes(users_yaml)
    cfg.users_file.chmod(0o600)
    return cfg


def fill(path: str, cluster: str = "alpha", topic: str = "team-a.events", group: str = "g-team-a",
         name: str = "teama-view") -> str:
    return (path.replace("{cluster}", cluster).replace("{topic}", topic).replace("{group}", group)
            .replace("{name}", "app1" if "/security/" in path else name))


def allowed(user: str, row: Row) -> bool:
    role, clusters, prefixes = USERS[user]
    if row.role is not None and Role[role] < row.role:
        return False
    if row.needs == "unlimited":
        return not clusters and not prefixes
    if row.needs == "whole":
        return not prefixes
    return True


def leaks(user: str, text: str, tmp: Path) -> list[str]:
    """The names in ``text`` that ``user`` may not see."""
    _, clusters, prefixes = USERS[user]
    found = []
    if clusters and "beta" in text:
        found.append("beta")
    if clusters and UNREADABLE in text:
        found.append(UNREADABLE)
    if prefixes:
        found += sorted({w for w in (HIDDEN + "-orders", HIDDEN + "-pay", HIDDEN + "-group", HIDDEN + "-lit",
                                     HIDDEN + "-star", HIDDEN + "-pre", HIDDEN + "-cl", HIDDEN + "-scram",
                                     "kafka-cluster") if w in text})
    if (clusters or prefixes or USERS[user][0] != "admin") and str(tmp) in text:
        found.append("a cluster's file path")
    if USERS[user][0] == "admin":
        outside = [u for u in USERS if u != user and not _within(u, user)] if clusters or prefixes else []
    else:  # console users are an admin's business: a viewer or operator reads no other login name
        outside = [u for u in USERS if u != user]
    found += [f"user {u}" for u in outside if f'"{u}"' in text or f">{u}<" in text or f",{u}," in text]
    return found


def _within(other: str, of: str) -> bool:
    _, oc, op = USERS[other]
    _, c, p = USERS[of]
    return (not c or bool(oc) and set(oc) <= set(c)) and (not p or bool(op) and all(
        any(x.startswith(y) for y in p) for x in op))


def routes(app: Any) -> set[tuple[str, str]]:
    return {(m, r.path) for r in app.routes if isinstance(r, APIRoute) for m in r.methods}


def test_every_route_has_a_row(config: ConsoleConfig) -> None:
    app = server.build(config)
    assert routes(app) - set(ROWS) == set(), "routes without a row in the matrix: add one"
    assert set(ROWS) - routes(app) == set(), "rows for routes that are gone"


def _call(c: TestClient, csrf: str, method: str, path: str, row: Row, tmp: Path) -> Any:
    headers = {"X-CSRF-Token": csrf}
    url = path + (("?" + row.query) if row.query else "")
    body = row.body
    if isinstance(body, dict):
        body = {k: (str(tmp / "alpha" / "kctl.yaml") if v == "GAMMA" else v) for k, v in body.items()}
    if path.startswith("/api/"):
        return c.request(method, url, headers=headers, json=body, follow_redirects=False)
    data = {**(body or {}), "csrf": csrf}
    if "confirm" in data:
        data["confirm"] = path.split("/topics/")[1].split("/")[0]
    return c.request(method, url, headers=headers, data=data, follow_redirects=False)


@pytest.mark.parametrize("user", list(USERS))
def test_every_route_for_every_role_and_scope(user: str, config: ConsoleConfig, world: World,
                                              tmp_path: Path) -> None:
    app = server.build(config)
    console = app.state.console
    console.jobs._by_cluster["alpha"] = Job("alpha", "root-adm", "reassignment", 1.0,
                                            log=["moving hidden-orders-0"], topics=("hidden-orders",))
    c = TestClient(app, base_url="http://127.0.0.1")
    r = c.post("/api/login", json={"username": user, "password": PASSWORD})
    assert r.status_code == 200
    csrf = r.json()["csrf"]
    users_before = config.users_file.read_bytes()
    _, clusters, prefixes = USERS[user]
    for (method, path), row in sorted(ROWS.items()):
        if row.needs in ("session", "public"):
            continue
        world.calls.clear()
        r = _call(c, csrf, method, fill(path), row, tmp_path)
        where = (user, method, path, r.status_code, r.text[:300])
        if allowed(user, row):
            assert r.status_code < 400, where
            if row.calls == "users":
                assert config.users_file.read_bytes() != users_before, where
            elif row.calls:
                assert world.calls == [row.calls], where
        else:
            assert r.status_code == 403, where
            assert world.calls == [] and config.users_file.read_bytes() == users_before, where
        assert leaks(user, r.text, tmp_path) == [], where
        if config.users_file.read_bytes() != users_before:
            config.users_file.write_bytes(users_before)

        # The cluster whose kctl.yaml cannot be read, to those who see it: refused (or removed from the console),
        # never a 500, and its file's path in no answer but an unlimited admin's.
        if not clusters and "{cluster}" in path:
            world.calls.clear()
            r = _call(c, csrf, method, fill(path, cluster=UNREADABLE), row, tmp_path)
            where = (user, method, path, UNREADABLE, r.status_code, r.text[:300])
            if row.calls == "registry.remove" and allowed(user, row):
                assert r.status_code < 400 and world.calls == ["registry.remove"], where
            else:
                assert r.status_code in (403, 409), where
                assert world.calls == [], where
            assert leaks(user, r.text, tmp_path) == [], where

        # What the path names, hidden from this user: the answer of one that does not exist, nothing done.
        hidden: list[tuple[str, str, str]] = []
        if clusters and "{cluster}" in path:
            hidden = [("cluster", "beta", "nope"), ("cluster", UNREADABLE, "nope")]
        elif prefixes and "{topic}" in path:
            hidden = [("topic", "hidden-orders", "team-b.nope")]
        elif prefixes and "{group}" in path:
            hidden = [("group", "hidden-group", "nope-group")]
        elif (clusters or prefixes) and USERS[user][0] == "admin" and "{name}" in path and "/security/" not in path:
            hidden = [("name", "root-adm", "nobody-x")]  # a console user beyond the limited admin's scope
        for k, name, nope in hidden:
            world.calls.clear()
            r = _call(c, csrf, method, fill(path, **{k: name}), row, tmp_path)
            r2 = _call(c, csrf, method, fill(path, **{k: nope}), row, tmp_path)
            where = (user, method, path, k, r.status_code, r.text[:300])
            assert r.status_code == 404 or r.status_code == 303 and "/login" in r.headers.get("location", ""), where
            assert (r.status_code, r.text.replace(name, "X")) == (r2.status_code, r2.text.replace(nope, "X")), where
            assert world.calls == [] and config.users_file.read_bytes() == users_before, where
    assert c.get("/api/me").status_code == 200  # the session lived through it all


# ----- the audit log: whose records each role and scope reads ------------------------------------------------

OTHERS = ("cli:ops", "gone-user")  # the command line, and a console user since removed


def _seed(log: Any) -> list[dict[str, Any]]:
    """Records of every user, of the CLI and of a removed user: done and refused, on both clusters, on topics
    inside and outside team-a., on console users, and their failed logins. Each message is a unique marker."""
    recs = []
    for actor in (*USERS, *OTHERS):
        admin = actor not in USERS or USERS[actor][0] == "admin"
        for cluster in ("alpha", "beta"):
            recs += [(actor, cluster, "topic.create", "team-a.x", "done"),
                     (actor, cluster, "topic.delete", "hidden-orders", "refused"),
                     (actor, cluster, "topic.config", "hidden-pay", "done"),  # before a scope was narrowed
                     (actor, cluster, "group.reset-offsets", "g-team-a", "refused")]
        recs += [(actor, None, "user.add", "teama-view", "done" if admin else "refused"),
                 (actor, None, "user.remove", "root-adm", "refused"),
                 (actor, None, "user.remove", "nobody-x", "refused"),
                 (actor, None, "login", None, "refused")]
    out = []
    for i, (actor, cluster, action, target, result) in enumerate(recs):
        out.append(log.append(user=actor, action=action, result=result, cluster=cluster, target=target,
                              message=f"seed-{i:03d}", client="10.0.0.9"))
    return out


def _may_read(reader: str, rec: dict[str, Any]) -> bool:
    """docs/console.md's rule, written out here (not kctl.console.authz's code)."""
    role, clusters, prefixes = USERS[reader]
    actor, cluster, action, target = rec["user"], rec["cluster"], rec["action"], rec["target"]
    unlimited = not clusters and not prefixes

    def topic_seen(name: str) -> bool:
        return not prefixes or any(name.startswith(p) for p in prefixes)

    def user_named(name: str) -> bool:  # a console user's name, to this reader
        if name == reader or role == "admin" and unlimited:
            return True
        return role == "admin" and name in USERS and _within(name, reader)

    if actor != reader:
        if role != "admin":
            return False
        if unlimited:
            return True
        if rec["result"] == "refused" or actor not in USERS or not _within(actor, reader):
            return False
    if cluster and clusters and cluster not in clusters:
        return False
    if not target:
        return True
    if action.startswith(("topic.", "group.")):
        return topic_seen(target)
    if action.startswith("user.") and target != reader and (rec["result"] == "refused" or target in USERS):
        return user_named(target)
    return True


@pytest.mark.parametrize("user", list(USERS))
def test_each_role_and_scope_reads_the_audit_records_it_may(user: str, config: ConsoleConfig, world: World,
                                                           tmp_path: Path) -> None:
    from kctl.console.audit import AuditLog

    seeded = _seed(AuditLog(config.audit_file))
    want = sorted(r["message"] for r in seeded if _may_read(user, r))
    c = TestClient(server.build(config), base_url="http://127.0.0.1")
    assert c.post("/api/login", json={"username": user, "password": PASSWORD}).status_code == 200
    api = c.get("/api/audit", params={"limit": 10_000})
    page = c.get("/audit")
    csv_text = c.get("/audit.csv").text
    got_api = sorted(r["message"] for r in api.json() if r["message"].startswith("seed-"))
    assert got_api == want, (user, sorted(set(got_api) ^ set(want)))
    for text in (page.text, csv_text):
        assert sorted(set(re.findall(r"seed-\d{3}", text))) == want, user
    for text in (api.text, page.text, csv_text):
        assert leaks(user, text, tmp_path) == [], (user, leaks(user, text, tmp_path))
        if USERS[user][0] != "admin" or USERS[user][1] or USERS[user][2]:
            assert not any(o in text for o in OTHERS), user  # the CLI's and a removed user's: unlimited admins'
    # every shape reads something of its own, and the unlimited admin everything
    assert want and (len(want) == len(seeded)) is (user == "root-adm")
    # what a user's own session adds (its login) is theirs too; no one else's login appears
    logins = [r for r in api.json() if r["action"] == "login" and not r["message"].startswith("seed-")]
    assert {r["user"] for r in logins} == {user}


# ----- user management bounded by the admin's scope ---------------------------------------------------------


def test_within_is_a_subset_of_clusters_and_prefixes_under_the_admins() -> None:
    from kctl.console.authz import within
    from kctl.console.users import User

    def u(clusters: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()) -> User:
        return User("x", Role.admin, "h", clusters, prefixes)

    assert within([], [], u()) and within(["a"], ["p."], u())  # an unlimited admin: everything
    assert within(["a"], [], u(("a", "b"))) and within(["a", "b"], [], u(("a", "b")))
    assert not within([], [], u(("a",)))  # "every cluster" is wider than one
    assert not within(["a", "c"], [], u(("a", "b")))
    assert within([], ["team-a.x", "team-a."], u(prefixes=("team-a.",)))
    assert not within([], ["team-"], u(prefixes=("team-a.",)))  # a shorter prefix reaches more
    assert not within([], [], u(prefixes=("team-a.",)))
    assert not within(["a"], [], u(("a",), ("team-a.",)))  # both limits hold
    assert within(["a"], ["team-a.b"], u(("a",), ("team-a.",)))


def _as(config: ConsoleConfig, name: str) -> tuple[TestClient, dict[str, str]]:
    c = TestClient(server.build(config), base_url="http://127.0.0.1")
    r = c.post("/api/login", json={"username": name, "password": PASSWORD})
    assert r.status_code == 200, r.text
    return c, {"X-CSRF-Token": r.json()["csrf"]}


def test_a_cluster_limited_admin_manages_only_users_within_their_scope(config: ConsoleConfig) -> None:
    c, h = _as(config, "alpha-adm")
    body = {"name": "esc", "role": "admin", "password": "long enough pw"}
    r = c.post("/api/users", json=body, headers=h)  # an admin of every cluster: wider than alpha-adm
    assert r.status_code == 403 and "within their own" in r.json()["error"]
    assert c.post("/api/users", json={**body, "clusters": ["alpha", "beta"]}, headers=h).status_code == 403
    assert UserStore(config.users_file).get("esc") is None
    assert c.post("/api/users", json={**body, "clusters": ["alpha"]}, headers=h).status_code == 201
    # another admin outside the scope: as missing as a name that does not exist, and still there
    for name in ("root-adm", "teama-adm", "nobody"):
        r = c.delete(f"/api/users/{name}", headers=h)
        assert r.status_code == 404 and r.json()["error"] == f"no console user {name!r}"
    assert UserStore(config.users_file).get("root-adm") is not None
    # nor replaced by a user of the same name
    r = c.post("/api/users", json={**body, "name": "root-adm", "clusters": ["alpha"]}, headers=h)
    assert r.status_code == 404 and UserStore(config.users_file).get("root-adm").clusters == ()  # type: ignore[union-attr]
    listed = {u["name"] for u in c.get("/api/users").json()}
    assert listed == {"alpha-adm", "both-adm", "teama-op", "teama-view", "esc"}
    # their own role and scope are not theirs to change, nor may they remove themselves
    assert c.post("/api/users", json={**body, "name": "alpha-adm", "clusters": []}, headers=h).status_code == 403
    assert c.delete("/api/users/alpha-adm", headers=h).status_code == 403
    assert c.delete("/api/users/teama-view", headers=h).status_code == 200


def test_a_prefix_limited_admin_gives_only_prefixes_under_their_own_and_no_higher_role(
        config: ConsoleConfig) -> None:
    c, h = _as(config, "teama-adm")
    body = {"name": "new", "role": "operator", "password": "long enough pw"}
    assert c.post("/api/users", json={**body, "topic_prefixes": ["team-"]}, headers=h).status_code == 403
    assert c.post("/api/users", json=body, headers=h).status_code == 403
    assert c.post("/api/users", json={**body, "topic_prefixes": ["team-a.sub."]}, headers=h).status_code == 201
    # a user within their scope cannot be widened through them
    r = c.post("/api/users", json={**body, "name": "teama-op", "topic_prefixes": ["team-"]}, headers=h)
    assert r.status_code == 403 and UserStore(config.users_file).get("teama-op").topic_prefixes == ("team-a.",)  # type: ignore[union-attr]
    refused = [a for a in c.get("/api/audit", params={"action": "user.add"}).json() if a["result"] == "refused"]
    assert len(refused) == 3 and all(a["client"] == "testclient" for a in refused)


def test_acls_and_scram_users_stay_inside_the_admins_scope(config: ConsoleConfig, world: World) -> None:
    c, h = _as(config, "teama-adm")
    base = {"principal": "User:app", "operation": "all"}
    for body, status in (({"topic": "orders"}, 403), ({"topic": "*"}, 403), ({"cluster": True}, 403),
                         ({"topic": "team-", "prefixed": True}, 403), ({"group": "other"}, 403),
                         ({"topic": "team-a.x"}, 201), ({"topic": "team-a.x.", "prefixed": True}, 201),
                         ({"group": "team-a.consumers"}, 201), ({"topic": "team-a.x", "group": "team-a.g"}, 422)):
        world.calls.clear()
        r = c.post("/api/clusters/alpha/security/acls", json={**base, **body}, headers=h)
        assert r.status_code == status, (body, r.text)
        assert world.calls == (["acl_change"] if status == 201 else []), body
    assert c.post("/api/clusters/alpha/security/users", json={"name": "app"}, headers=h).status_code == 403
    assert c.get("/api/clusters/alpha/security/users").status_code == 403
    assert [a["principal"] for a in c.get("/api/clusters/alpha/security/acls").json()] == ["User:a", "User:b"]
    a, ah = _as(config, "alpha-adm")  # limited to a cluster, not to topics: the whole cluster's
    assert a.post("/api/clusters/alpha/security/acls", json={**base, "cluster": True}, headers=ah).status_code == 201
    assert a.post("/api/clusters/alpha/security/users", json={"name": "app"}, headers=ah).status_code == 201
    assert a.post("/api/clusters/beta/security/users", json={"name": "app"}, headers=ah).status_code == 404


def test_the_time_left_of_a_move_is_shown_only_to_those_who_see_all_it_moves(config: ConsoleConfig,
                                                                             world: World) -> None:
    a, _ = _as(config, "alpha-adm")  # the whole cluster's: the whole move's time left, as the CLI gives it
    st = a.get("/api/clusters/alpha/reassignment").json()
    assert st["time_left"] == "12m34s" and st["seconds_left"] == 754.0 and st["bytes_left"] == 12
    assert "about <span id=\"time-left\">12m34s</span> left" in a.get("/clusters/alpha/reassignment").text
    t, _ = _as(config, "teama-adm")  # sees one of the two partitions: its bytes left, not the whole move's time
    st = t.get("/api/clusters/alpha/reassignment").json()
    assert [m["partition"] for m in st["moving"]] == ["team-a.events-1"] and st["bytes_left"] == 7
    assert st["time_left"] is None and st["seconds_left"] is None
    assert "time-left" not in t.get("/clusters/alpha/reassignment").text
