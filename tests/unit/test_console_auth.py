"""The console's authorisation, CSRF, login back-off, scoping and audit, over HTTP (FastAPI's TestClient, in
process). The domain calls of kctl.console.ops are replaced by recorders: what is tested here is who may call
them; tests/integration/test_console.py calls them for real against a cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("fastapi")

from fastapi.routing import APIRoute  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from kctl.console import app as capp  # noqa: E402
from kctl.console import ops, server  # noqa: E402
from kctl.console.config import ConsoleConfig, load_config  # noqa: E402
from kctl.console.users import UserStore, new_user  # noqa: E402

PASSWORD = "correct horse battery"
# Routes that change nothing but the caller's own session: no role to check (logging out still needs the
# session's CSRF token, logging in the login form's own).
SESSION_ROUTES = {("POST", "/api/login"), ("POST", "/login"), ("POST", "/api/logout"), ("POST", "/logout")}


class Calls:
    def __init__(self) -> None:
        self.made: list[tuple[str, tuple[Any, ...]]] = []


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    rec = Calls()

    def fake(name: str, result: Any) -> Any:
        def f(*args: Any, **kw: Any) -> Any:
            rec.made.append((name, args[1:] if args else ()))
            return result(*args) if callable(result) else result
        return f

    topics = [{"name": n, "partitions": 3, "replication_factor": 3, "internal": False, "under_replicated": 0}
              for n in ("orders", "payments.in", "team-a.events")]
    monkeypatch.setattr(ops, "cluster_cards", lambda entries: [{"name": e.name, "path": str(e.path),
                                                                "health": "healthy"} for e in entries])
    monkeypatch.setattr(ops, "cluster_detail", fake("cluster_detail", lambda spec: {
        "name": spec.name, "health": "healthy", "quorum": "ok", "leader": "logger1", "controller": 1,
        "zookeeper": [], "brokers": [], "problems": [], "bootstrap_servers": "x", "under_replicated": [],
        "offline": []}))
    monkeypatch.setattr(ops, "topic_list", lambda spec, internal=False, keep=None: [dict(t) for t in topics])
    monkeypatch.setattr(ops, "topic_detail", fake("topic_detail", lambda spec, name: {
        "name": name, "partition_count": 3, "replication_factor": 3, "partitions": [], "configs": [],
        "distribution": [], "leader_skew": 0, "under_replicated": 0, "offline": 0}))
    monkeypatch.setattr(ops, "create_topic", fake("create_topic", {"topic": "t", "action": "created"}))
    monkeypatch.setattr(ops, "delete_topic", fake("delete_topic", {"topic": "t", "action": "deleted"}))
    monkeypatch.setattr(ops, "add_partitions", fake("add_partitions", {"topic": "t", "action": "altered"}))
    monkeypatch.setattr(ops, "group_list", lambda spec, with_topics=False: [])
    monkeypatch.setattr(ops, "group_detail", lambda spec, group: {"group": group, "state": "Stable",
                                                                        "coordinator": 1, "assignor": "range",
                                                                        "members": [], "partitions": [],
                                                                        "total_lag": 0})
    return rec


def _cluster(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir()
    (d / "kctl.yaml").write_text(yaml.safe_dump({"name": name}))
    return d / "kctl.yaml"


@pytest.fixture()
def config(tmp_path: Path) -> ConsoleConfig:
    files = [_cluster(tmp_path, "alpha"), _cluster(tmp_path, "beta")]
    home = tmp_path / "console"
    cfg = ConsoleConfig(files, home / "users.yaml", home / "audit.jsonl", home / "clusters.yaml")
    store = UserStore(cfg.users_file)
    for name, role, clusters, prefixes in (("ada", "admin", [], []), ("otto", "operator", [], []),
                                           ("vera", "viewer", [], []), ("lim", "operator", ["alpha"], ["team-a."])):
        store.put(new_user(name, role, PASSWORD, clusters, prefixes))
    return cfg


def client_for(cfg: ConsoleConfig) -> TestClient:
    return TestClient(server.build(cfg), base_url="http://127.0.0.1")


def login(c: TestClient, name: str) -> str:
    r = c.post("/api/login", json={"username": name, "password": PASSWORD})
    assert r.status_code == 200, r.text
    return str(r.json()["csrf"])


def mutating_routes(app: Any) -> list[tuple[str, str, APIRoute]]:
    out = []
    for r in app.routes:
        if isinstance(r, APIRoute):
            for m in sorted(r.methods & capp.MUTATING):
                out.append((m, r.path, r))
    return out


def guards(route: APIRoute) -> list[capp.Guard]:
    return [d.call for d in route.dependant.dependencies if isinstance(d.call, capp.Guard)]


def fill(path: str) -> str:
    return path.replace("{cluster}", "alpha").replace("{topic}", "orders").replace("{name}", "vera")


def test_every_mutating_route_declares_a_role_and_an_action(config: ConsoleConfig) -> None:
    app = server.build(config)
    routes = mutating_routes(app)
    assert len(routes) >= 12  # the table of actions, as pages and as API
    missing = [(m, p) for m, p, r in routes if (m, p) not in SESSION_ROUTES and len(guards(r)) != 1]
    assert missing == [], f"mutating routes without a Guard: {missing}"


def test_a_viewer_is_refused_every_mutating_route_and_each_refusal_is_audited(config: ConsoleConfig,
                                                                               calls: Calls) -> None:
    c = client_for(config)
    csrf = login(c, "vera")
    tried = 0
    for method, path, _route in mutating_routes(c.app):
        if (method, path) in SESSION_ROUTES:
            continue
        r = c.request(method, fill(path), headers={"X-CSRF-Token": csrf}, json={})
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        tried += 1
    assert calls.made == []  # nothing reached the cluster
    refused = [a for a in c.get("/api/audit", params={"limit": 1000}).json() if a["result"] == "refused"]
    assert len(refused) == tried and {a["user"] for a in refused} == {"vera"}


def test_a_missing_or_wrong_csrf_token_is_refused(config: ConsoleConfig, calls: Calls) -> None:
    c = client_for(config)
    csrf = login(c, "otto")
    body = {"name": "new-topic", "partitions": 1}
    assert c.post("/api/clusters/alpha/topics", json=body).status_code == 403
    assert c.post("/api/clusters/alpha/topics", json=body, headers={"X-CSRF-Token": "x" + csrf}).status_code == 403
    # a form without the token, and one with another session's token
    assert c.post("/clusters/alpha/topics", data={"name": "new-topic"}).status_code == 403
    other = client_for(config)
    other_csrf = login(other, "otto")
    assert c.post("/clusters/alpha/topics", data={"name": "new-topic", "csrf": other_csrf}).status_code == 403
    assert calls.made == []
    r = c.post("/api/clusters/alpha/topics", json=body, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 201 and calls.made[0][0] == "create_topic"


def test_without_a_session_the_api_answers_401_and_pages_send_to_the_login(config: ConsoleConfig) -> None:
    c = client_for(config)
    assert c.get("/api/clusters").status_code == 401
    assert c.delete("/api/clusters/alpha/topics/orders").status_code == 401
    r = c.get("/clusters/alpha/topics", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/clusters/alpha/topics"


def test_the_session_cookie_is_httponly_and_samesite_strict(config: ConsoleConfig) -> None:
    c = client_for(config)
    r = c.post("/api/login", json={"username": "ada", "password": PASSWORD})
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "Secure" not in cookie
    tls = TestClient(server.build(config, tls=True), base_url="https://127.0.0.1")
    assert "Secure" in tls.post("/api/login", json={"username": "ada", "password": PASSWORD}).headers["set-cookie"]


def test_failed_logins_back_off_and_a_locked_user_waits_even_with_the_right_password(config: ConsoleConfig) -> None:
    app = server.build(config)
    now = [1000.0]
    app.state.console.guard.clock = lambda: now[0]
    c = TestClient(app, base_url="http://127.0.0.1")
    for _ in range(3):  # the free failures
        assert c.post("/api/login", json={"username": "otto", "password": "wrong-password"}).status_code == 401
    r = c.post("/api/login", json={"username": "otto", "password": "wrong-password"})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"  # the fourth failure locks for 1 s
    r = c.post("/api/login", json={"username": "otto", "password": PASSWORD})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"  # the right password waits too
    now[0] += 1.01
    r = c.post("/api/login", json={"username": "otto", "password": "wrong-password"})
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    r = c.post("/api/login", json={"username": "otto", "password": PASSWORD})
    assert r.status_code == 429 and r.headers["retry-after"] == "2"  # doubled
    now[0] += 2.01
    assert c.post("/api/login", json={"username": "otto", "password": PASSWORD}).status_code == 200
    logins = [a for a in app.state.console.audit.records() if a["action"] == "login"]
    assert [a["result"] for a in logins][-3:] == ["refused", "refused", "done"]
    assert "locked" in logins[-2]["message"]


def test_nothing_of_a_cluster_a_user_may_not_see_leaks(config: ConsoleConfig, calls: Calls) -> None:
    c = client_for(config)
    csrf = login(c, "lim")  # alpha only, topics team-a.*
    assert [x["name"] for x in c.get("/api/clusters").json()] == ["alpha"]
    assert "beta" not in c.get("/").text
    for path in ("/api/clusters/beta", "/api/clusters/beta/topics", "/api/clusters/beta/groups",
                 "/clusters/beta", "/clusters/beta/topics"):
        r = c.get(path)
        # the same answer as for a cluster that does not exist
        assert r.status_code == 404 and r.text == c.get(path.replace("beta", "nope")).text.replace("nope", "beta")
    r = c.post("/api/clusters/beta/topics", json={"name": "team-a.x"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 404
    assert [t["name"] for t in c.get("/api/clusters/alpha/topics").json()] == ["team-a.events"]
    assert c.get("/api/clusters/alpha/topics/orders").status_code == 404
    r = c.post("/api/clusters/alpha/topics", json={"name": "orders2"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 403
    assert calls.made == []
    r = c.post("/api/clusters/alpha/topics", json={"name": "team-a.new"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 201
    # their audit view holds their own records only, and nothing about beta
    assert {a["user"] for a in c.get("/api/audit").json()} == {"lim"}


def test_a_read_only_console_refuses_every_change_even_to_an_admin(config: ConsoleConfig, calls: Calls) -> None:
    config.read_only = True
    c = client_for(config)
    csrf = login(c, "ada")
    r = c.delete("/api/clusters/alpha/topics/orders", headers={"X-CSRF-Token": csrf})
    assert r.status_code == 403 and "read-only" in r.json()["error"]
    assert calls.made == []
    assert "read-only" in c.get("/").text and 'id="create-topic"' not in c.get("/clusters/alpha/topics").text


def test_an_operator_cannot_delete_but_an_admin_can_and_both_are_audited(config: ConsoleConfig,
                                                                          calls: Calls) -> None:
    c = client_for(config)
    csrf = login(c, "otto")
    assert c.delete("/api/clusters/alpha/topics/orders", headers={"X-CSRF-Token": csrf}).status_code == 403
    a = client_for(config)
    acsrf = login(a, "ada")
    assert a.delete("/api/clusters/alpha/topics/orders", headers={"X-CSRF-Token": acsrf}).status_code == 200
    assert calls.made == [("delete_topic", ("orders",))]
    recs = [r for r in a.get("/api/audit", params={"action": "topic.delete"}).json()]
    assert [(r["user"], r["result"], r["cluster"], r["target"]) for r in recs] == [
        ("ada", "done", "alpha", "orders"), ("otto", "refused", "alpha", "orders")]


def test_a_malformed_form_value_gets_its_fields_error(config: ConsoleConfig, calls: Calls) -> None:
    c = client_for(config)
    login(c, "otto")
    page = c.get("/clusters/alpha/topics").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = c.post("/clusters/alpha/topics", data={"csrf": csrf, "name": "x", "partitions": "many"})
    assert r.status_code == 422 and 'id="error-partitions"' in r.text and "Traceback" not in r.text
    r = c.post("/api/clusters/alpha/topics", json={"name": "x", "partitions": 0}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "partitions"
    assert calls.made == []
    r = c.post("/clusters/alpha/topics", data={"csrf": csrf, "name": "fine", "partitions": "2"},
               follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/clusters/alpha/topics/fine"


def test_deleting_from_a_page_needs_the_name_typed(config: ConsoleConfig, calls: Calls) -> None:
    c = client_for(config)
    csrf = login(c, "ada")
    r = c.post("/clusters/alpha/topics/orders/delete", data={"csrf": csrf, "confirm": "order"})
    assert r.status_code == 400 and calls.made == [("topic_detail", ("orders",))]
    r = c.post("/clusters/alpha/topics/orders/delete", data={"csrf": csrf, "confirm": "orders"},
               follow_redirects=False)
    assert r.status_code == 303 and ("delete_topic", ("orders",)) in calls.made


def test_the_login_form_needs_its_own_token_and_never_redirects_off_site(config: ConsoleConfig) -> None:
    c = client_for(config)
    page = c.get("/login", params={"next": "//evil.example/x"}).text
    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    assert 'name="next" value="/"' in page
    r = c.post("/login", data={"username": "vera", "password": PASSWORD, "csrf": "forged"})
    assert r.status_code == 403
    r = c.post("/login", data={"username": "vera", "password": PASSWORD, "csrf": token, "next": "/audit"},
               follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/audit"
    assert c.get("/api/me").json()["name"] == "vera"


def test_console_users_by_api_need_an_admin_and_never_show_a_hash(config: ConsoleConfig) -> None:
    c = client_for(config)
    csrf = login(c, "ada")
    r = c.post("/api/users", json={"name": "newbie", "role": "viewer", "password": "long enough pw"},
               headers={"X-CSRF-Token": csrf})
    assert r.status_code == 201 and "hash" not in r.text
    assert "newbie" in [u["name"] for u in c.get("/api/users").json()]
    audit = c.get("/api/audit", params={"action": "user.add"}).json()[0]
    assert "long enough pw" not in str(audit) and audit["params"]["role"] == "viewer"
    assert UserStore(config.users_file).verify("newbie", "long enough pw") is not None
    assert config.users_file.stat().st_mode & 0o077 == 0
    v = client_for(config)
    login(v, "vera")
    assert v.get("/api/users").status_code == 403


def test_removing_a_user_ends_their_sessions(config: ConsoleConfig) -> None:
    v = client_for(config)
    login(v, "vera")
    assert v.get("/api/me").status_code == 200
    a = client_for(config)
    csrf = login(a, "ada")
    assert a.delete("/api/users/vera", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert v.get("/api/me").status_code == 401


def test_listening_beyond_loopback_needs_tls(tmp_path: Path) -> None:
    from kctl.errors import UsageError

    server.check_listen("127.0.0.1", None, None)
    with pytest.raises(UsageError, match="only with TLS"):
        server.check_listen("0.0.0.0", None, None)
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("y")
    server.check_listen("0.0.0.0", cert, key)
    with pytest.raises(UsageError, match="go together"):
        server.check_listen("127.0.0.1", cert, None)


def test_without_a_console_file_the_console_serves_the_kctl_yaml_here(tmp_path: Path) -> None:
    _cluster(tmp_path, "here")
    cfg = load_config(None, tmp_path / "here" / "kctl.yaml")
    assert cfg.cluster_files == [(tmp_path / "here" / "kctl.yaml").resolve()]
    assert cfg.users_file == tmp_path / "here" / ".kctl" / "here" / "console" / "users.yaml"


def test_the_console_command_refuses_with_a_hint_and_starts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import sys

    from kctl.cli.main import main

    started: list[Any] = []
    monkeypatch.setattr(server, "serve", lambda *a, **k: started.append(a))
    spec_file = _cluster(tmp_path, "solo")

    def cli(*args: str, stdin: str = "") -> tuple[int, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            main([*args, "-f", str(spec_file)])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return code, out.out + out.err

    code, out = cli("console", "--host", "0.0.0.0")
    assert code == 2 and "only with TLS" in out and "hint:" in out
    code, out = cli("console")
    assert code == 2 and "no users yet" in out and "kctl console user add" in out
    code, out = cli("console", "user", "add", "ada", "--role", "boss", stdin="x" * 12 + "\n")
    assert code == 1 and "not a console role" in out
    code, out = cli("console", "user", "add", "ada", "--role", "admin", stdin="short\n")
    assert code == 1 and "at least 8" in out
    code, out = cli("console", "user", "add", "ada", "--role", "admin", stdin="long enough\n")
    assert code == 0, out
    users_file = tmp_path / "solo" / ".kctl" / "solo" / "console" / "users.yaml"
    assert "long enough" not in users_file.read_text() and users_file.stat().st_mode & 0o077 == 0
    code, out = cli("console", "user", "list", "-o", "json")
    assert code == 0 and '"role": "admin"' in out and "hash" not in out
    assert started == []


def test_the_cluster_page_shows_a_kraft_quorum_and_the_spark_cluster_as_status_does(
        config: ConsoleConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster page and its API take the quorum and the Spark cluster from the one status (kctl.cluster.health,
    as `kctl status`): on KRaft the controllers' table, not an empty ZooKeeper one; a dead worker both a problem
    (degraded) and a row; the Spark applications' names are not shown."""
    from types import SimpleNamespace

    from kctl.cluster import health
    from kctl.cluster.health import ContainerObs, Observations
    from kctl.kafka import describe as kmd
    from kctl.kafka.controllers import ControllerView
    from kctl.model.spec import parse_spec

    spec = parse_spec({"name": "alpha", "spark": {"workers": 2}})[0].with_kraft("kraft", "AAAAAAAAAAAAAAAAAAAAAA")
    procs = {"zookeeper": "RETIRED", "controller": "RUNNING", "kafka": "RUNNING"}
    spark = {"master": "spark://spark-master:7077", "ui": "http://127.0.0.1:18080", "status": "ALIVE",
             "workers": [{"name": "spark-worker-1", "state": "ALIVE", "cores": 1, "cores_used": 1, "memory_mb": 1024,
                          "ui": "http://127.0.0.1:18081"},
                         {"name": "spark-worker-2", "state": "DEAD", "cores": 1, "cores_used": 0, "memory_mb": 1024,
                          "ui": "http://127.0.0.1:18082"}],
             "applications": [{"id": "app-1", "name": "secret-job-name", "state": "RUNNING", "cores": 1}]}
    obs = Observations(
        containers={h: ContainerObs(h, "running", "healthy", dict(procs)) for h in ("logger1", "logger2", "logger3")},
        controllers={h: ControllerView(h, 3001 + i, 3002, 9) for i, h in enumerate(("logger1", "logger2", "logger3"))},
        kafka=kmd.Metadata((1, 2, 3), 2, ()), spark=spark)
    st = health.assess(spec, obs)
    assert st.health == "degraded" and st.spark == spark and any("spark-worker-2 is DEAD" in p for p in st.problems)
    monkeypatch.setattr(health, "status", lambda *_a, **_k: st)  # the real cluster_detail, over that status
    monkeypatch.setattr(ops, "require_reachable", lambda _t: SimpleNamespace(topics={}))
    doc = ops.cluster_detail(spec)
    assert (doc["metadata"], doc["quorum"], doc["health"]) == ("kraft", "ok", "degraded")
    assert [(c["node"], c["leader"]) for c in doc["controllers"]] == [("logger1", 3002), ("logger2", 3002),
                                                                      ("logger3", 3002)]
    assert [(w["name"], w["state"]) for w in doc["spark"]["workers"]] == [("spark-worker-1", "ALIVE"),
                                                                          ("spark-worker-2", "DEAD")]
    assert "secret-job-name" not in str(doc)
    c = client_for(config)
    login(c, "vera")
    monkeypatch.setattr(ops, "cluster_detail", lambda _spec: doc)
    page = c.get("/clusters/alpha").text
    assert "KRaft controller quorum (quorum ok)" in page and 'id="zookeeper"' not in page
    assert 'data-controller="3002"' in page and "Spark cluster (master ALIVE)" in page
    assert 'data-worker="spark-worker-2"><td>spark-worker-2</td><td>DEAD</td>' in page
    assert "spark-worker-2 is DEAD at the master" in page and "secret-job-name" not in page
    assert c.get("/api/clusters/alpha").json()["spark"]["workers"][1]["state"] == "DEAD"
