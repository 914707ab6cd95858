"""The console under a hostile or careless user: the login lockout under parallel attempts, the audit log's
bounds and completeness, bad input answered 4xx, argon2 off the event loop, concurrent changes of the users
file, sessions ending when they should, page titles and security headers. Kafka is faked as in
tests/unit/test_console_matrix.py (its fixtures)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from kctl.console import audit as audit_mod  # noqa: E402
from kctl.console import ops, server  # noqa: E402
from kctl.console.audit import AuditLog, csv_cell, to_csv  # noqa: E402
from kctl.console.config import ConsoleConfig  # noqa: E402
from kctl.console.users import UserStore, new_user  # noqa: E402
from tests.unit.test_console_matrix import (  # noqa: E402
    PASSWORD,
    ROWS,
    World,
    fill,
    hash_users,
    make_config,
    make_world,
)


@pytest.fixture(scope="module")
def users_yaml(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return hash_users(tmp_path_factory.mktemp("users"))


@pytest.fixture()
def config(tmp_path: Path, users_yaml: bytes) -> ConsoleConfig:
    return make_config(tmp_path, users_yaml)


@pytest.fixture()
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(monkeypatch)


def client(cfg: ConsoleConfig, **kw: Any) -> TestClient:
    return TestClient(server.build(cfg, **kw), base_url="http://127.0.0.1")


def login(c: TestClient, name: str) -> dict[str, str]:
    r = c.post("/api/login", json={"username": name, "password": PASSWORD})
    assert r.status_code == 200, r.text
    return {"X-CSRF-Token": r.json()["csrf"]}


def audit_of(cfg: ConsoleConfig) -> list[dict[str, Any]]:
    return list(AuditLog(cfg.audit_file).records())


# ----- 5: the lockout is decided and counted at once ---------------------------------------------------------


def test_parallel_wrong_passwords_are_counted_before_any_is_checked(config: ConsoleConfig,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    real = UserStore.verify

    def verify(self: UserStore, name: str, password: str) -> Any:
        checked.append(name)
        time.sleep(0.05)  # every attempt in flight at once
        return real(self, name, password)

    monkeypatch.setattr(UserStore, "verify", verify)
    app = server.build(config)
    # the guard's clock held still: the first lock lasts 1 s, which 30 requests on a loaded machine can outlast
    app.state.console.guard.clock = lambda: 1000.0
    with TestClient(app, base_url="http://127.0.0.1") as c, ThreadPoolExecutor(30) as pool:
        codes = list(pool.map(lambda _: c.post("/api/login", json={"username": "all-op",
                                                                   "password": "wrong password"}).status_code,
                              range(30)))
    free = app.state.console.guard.free_failures
    assert len(checked) == free + 1, checked  # the free failures, and the one that locks
    assert codes.count(401) == free and codes.count(429) == 30 - free
    # each checked attempt is recorded, the one that locked saying so; the ones refused unchecked are counted
    logins = [a for a in audit_of(config) if a["action"] == "login"]
    assert len(logins) == free + 1 and sum("locked for" in a["message"] for a in logins) == 1
    assert {a["client"] for a in logins} == {"testclient"} and {a["user"] for a in logins} == {"all-op"}
    app.state.console.guard.clock = lambda: time.monotonic() + 3600  # the lock over: the next failure says so
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert c.post("/api/login", json={"username": "all-op", "password": "wrong again"}).status_code == 429
    assert locked_told(audit_of(config)) == 30 - free - 1  # in the lockout's record, or in this one's
    assert "locked for" in audit_of(config)[-1]["message"]


def locked_told(recs: list[dict[str, Any]], client: str = "testclient") -> int:
    """How many attempts refused unchecked while locked the records say were left out."""
    pattern = re.compile(rf"(\d+) login attempt\(s\) from {client} refused unchecked while locked")
    return sum(int(m.group(1)) for r in recs for m in [pattern.search(r["message"] or "")] if m)


def test_a_right_password_clears_the_names_count_not_the_addresss(config: ConsoleConfig) -> None:
    app = server.build(config)
    now = [1000.0]
    app.state.console.guard.clock = lambda: now[0]
    c = TestClient(app, base_url="http://127.0.0.1")
    for name in ("root-adm", "alpha-adm", "teama-adm"):  # one failure on each of three names: the address's 3
        assert c.post("/api/login", json={"username": name, "password": "nope nope"}).status_code == 401
    assert c.post("/api/login", json={"username": "all-view", "password": PASSWORD}).status_code == 200
    r = c.post("/api/login", json={"username": "both-adm", "password": "nope nope"})
    assert r.status_code == 429  # the address's fourth failure, though a login of its own came between


# ----- 6: what anyone can make the audit log cost ------------------------------------------------------------


def test_a_huge_user_name_costs_the_audit_log_a_bounded_line(config: ConsoleConfig) -> None:
    c = client(config)
    huge = "=x" * 100_000  # 200 kB: a form's field may hold up to 1 MB
    assert c.post("/api/login", json={"username": huge, "password": "p"}).status_code == 422
    r = c.get("/login")
    token = r.cookies.get("kctl_console_login") or c.cookies.get("kctl_console_login")
    for _ in range(5):  # the form has no model: the name is cut, locked attempts as well
        c.post("/login", data={"username": huge, "password": "p", "csrf": token})
    size = config.audit_file.stat().st_size
    assert 0 < size < 6 * 4000, size
    assert all(len(json.dumps(a)) < 4000 for a in audit_of(config))


def test_requests_without_a_session_are_recorded_up_to_a_budget_per_address(config: ConsoleConfig) -> None:
    c = client(config)
    for _ in range(audit_mod.ANON_BURST + 40):
        assert c.post("/api/clusters/alpha/topics", json={"name": "x"}).status_code == 401
    recs = audit_of(config)
    assert len(recs) == audit_mod.ANON_BURST and all(r["user"] is None and r["client"] == "testclient"
                                                      for r in recs)
    log = app_audit(c)
    log.clock = lambda: time.monotonic() + 61  # a minute later: the next one says how many were left out
    c.post("/api/clusters/alpha/topics", json={"name": "x"})
    assert "40 similar record(s)" in audit_of(config)[-1]["message"]


def test_an_anonymous_flood_of_wrong_logins_writes_a_bounded_number_of_records(config: ConsoleConfig) -> None:
    """500 wrong logins from one address without a session, as fast as they come and spread over minutes:
    the checked failures count against the address's budget, a lockout is recorded once, and the attempts it
    refuses are summarised in the next record, never written one by one."""
    for spread in (0.0, 1.0):  # seconds between two attempts
        config.audit_file.unlink(missing_ok=True)
        app = server.build(config)
        now = [1000.0]
        app.state.console.guard.clock = app.state.console.audit.clock = lambda now=now: now[0]
        c = TestClient(app, base_url="http://127.0.0.1")
        for i in range(500):
            name = f"guess-{i}" if i % 2 else "root-adm"  # other names, and an existing one
            assert c.post("/api/login", json={"username": name, "password": "nope nope"}).status_code in (401, 429)
            now[0] += spread
        recs = audit_of(config)
        assert all(r["action"] == "login" and r["result"] == "refused" for r in recs)
        # quick: 3 free failures and the one that locks; over 500 s, a lock per back-off step (1, 2, 4 ... s)
        assert len(recs) <= (4 if not spread else 3 + 12), (spread, len(recs), [r["message"] for r in recs])
        lockouts = [r for r in recs if "locked for" in r["message"]]
        assert lockouts and all("refused unchecked" in r["message"] for r in lockouts)
        assert not any("locked for 0 s" in r["message"] for r in recs)
        told = locked_told(recs)
        pending = app.state.console.audit._anon["testclient"].locked
        assert len(recs) + told + pending == 500  # every attempt written, or counted in a later record

    # the budget holds even without a lockout (a guard that never locks)
    config.audit_file.unlink()
    app = server.build(config)
    app.state.console.guard.free_failures = 10_000
    c = TestClient(app, base_url="http://127.0.0.1")
    for _ in range(audit_mod.ANON_BURST + 50):  # a known name: its hash is the cheap one of these tests
        assert c.post("/api/login", json={"username": "root-adm", "password": "nope nope"}).status_code == 401
    r = c.get("/login")
    token = r.cookies.get("kctl_console_login") or c.cookies.get("kctl_console_login")
    for _ in range(10):  # the form's CSRF refusals too, named or not
        c.post("/login", data={"username": "root-adm", "password": "x", "csrf": "wrong"})
    assert token and len(audit_of(config)) == audit_mod.ANON_BURST


def app_audit(c: TestClient) -> AuditLog:
    return c.app.state.console.audit  # type: ignore[attr-defined,no-any-return]


def test_the_audit_views_read_the_end_of_the_log_not_all_of_it(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append(user="first", action="login", result="done")
    with log.path.open("a") as fh:
        for i in range(20_000):
            fh.write(json.dumps({"user": f"u{i}", "action": "topic.create", "result": "done"}) + "\n")
    newest = log.query(limit=3)
    assert [r["user"] for r in newest] == ["u19999", "u19998", "u19997"]
    assert log.query(user="first", limit=1, scan_limit=100_000) == []  # beyond what a view reads
    assert [r["user"] for r in log.query(user="first", limit=1)] == ["first"]
    # a block boundary in the middle of a line loses nothing
    assert len(list(log.newest())) == 20_001 == len(list(log.records()))


# ----- 7: every refusal and failure recorded; the CSV export runs no formula -------------------------------


def test_every_kind_of_refusal_and_failure_is_recorded_with_who_what_and_where(
        config: ConsoleConfig, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("disk on fire")

    def refuse(*a: Any, **k: Any) -> Any:
        from kctl.errors import KctlError
        raise KctlError("the cluster said no")

    monkeypatch.setattr(ops, "add_partitions", boom)
    monkeypatch.setattr(ops, "delete_topic", refuse)
    c = TestClient(server.build(config), base_url="http://127.0.0.1", raise_server_exceptions=False)
    op = login(c, "teama-op")
    adm_c = client(config)
    adm = login(adm_c, "root-adm")
    viewer_c = client(config)
    viewer = login(viewer_c, "all-view")
    ro_c = client(dataclasses.replace(config, read_only=True))  # the same audit log, a read-only console
    ro = login(ro_c, "root-adm")
    cases = [
        (c.post("/api/clusters/alpha/topics", json={"name": "team-a.x"}, headers={}), 403, "topic.create",
         "teama-op"),  # CSRF
        (viewer_c.post("/api/clusters/alpha/topics", json={"name": "x"}, headers=viewer), 403, "topic.create",
         "all-view"),  # role
        (c.post("/api/clusters/beta/topics", json={"name": "team-a.x"}, headers=op), 404, "topic.create",
         "teama-op"),  # a hidden cluster
        (c.post("/api/clusters/alpha/topics", json={"name": 5}, headers=op), 422, "topic.create", "teama-op"),
        (c.post("/api/clusters/alpha/reassignment", json={"plan": {"version": 1, "partitions": [
            {"topic": "hidden-orders", "partition": 0, "replicas": [1]}]}}, headers=op), 404,
         "reassignment.execute", "teama-op"),  # scope, in the body
        (c.post("/api/clusters/alpha/groups/hidden-group/offsets", json={"topic": "team-a.events",
                                                                          "strategy": "earliest"}, headers=op),
         404, "group.reset-offsets", "teama-op"),
        (c.post("/api/clusters/alpha/groups/g-team-a/offsets", json={"topic": "hidden-orders",
                                                                      "strategy": "earliest"}, headers=op),
         404, "group.reset-offsets", "teama-op"),
        (c.post("/api/clusters/alpha/topics/team-a.events/partitions", json={"partitions": 9}, headers=op), 500,
         "topic.partitions", "teama-op"),  # an unexpected error
        (adm_c.delete("/api/clusters/alpha/topics/orders", headers=adm), 409, "topic.delete", "root-adm"),
        (c.post("/clusters/alpha/topics", data={"csrf": op["X-CSRF-Token"], "name": "team-a.x",
                                                "partitions": "many"}), 422, "topic.create", "teama-op"),
        (TestClient(c.app, base_url="http://127.0.0.1").post("/api/users", json={}), 401, "user.add", None),
        (ro_c.post("/api/clusters/alpha/topics", json={"name": "x"}, headers=ro), 403, "topic.create",
         "root-adm"),  # the read-only switch, for everyone
        (ro_c.post("/clusters/alpha/topics/orders/delete", data={"csrf": ro["X-CSRF-Token"], "confirm": "orders"}),
         403, "topic.delete", "root-adm"),
    ]
    recs = audit_of(config)
    assert len([r for r in recs if r["action"] != "login"]) == len(cases)
    for (r, status, action, user), rec in zip(cases, [r for r in recs if r["action"] != "login"], strict=True):
        assert r.status_code == status, (action, r.text)
        assert (rec["action"], rec["user"], rec["client"]) == (action, user, "testclient"), rec
        assert rec["result"] == ("failed" if status in (409, 500) else "refused"), rec
        assert rec["message"], rec
    assert [r["message"] for r in recs if r["user"] == "root-adm" and r["action"] != "login"][-2:] == [
        "the console is read-only"] * 2
    assert "disk on fire" not in json.dumps(recs)  # the log has the exception; the audit says what failed
    assert {r["cluster"] for r in recs if r["action"] == "group.reset-offsets"} == {"alpha"}
    assert [r["target"] for r in recs if r["action"] == "group.reset-offsets"] == ["hidden-group", "g-team-a"]
    assert all(r["client"] == "testclient" for r in recs if r["action"] == "login")


def test_the_cli_changes_of_console_users_are_audited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from kctl.cli.main import main

    (tmp_path / "solo").mkdir()
    spec_file = tmp_path / "solo" / "kctl.yaml"
    spec_file.write_text(yaml.safe_dump({"name": "solo"}))

    def cli(*args: str, stdin: str = "") -> int:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            main([*args, "-f", str(spec_file)])
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    assert cli("console", "user", "add", "ada", "--role", "admin", stdin="long enough\n") == 0
    assert cli("console", "user", "add", "ada", "--role", "viewer", "--cluster", "solo",
               stdin="long enough 2\n") == 0
    assert cli("console", "user", "remove", "ada") == 0
    assert cli("console", "user", "remove", "ada") == 1
    capsys.readouterr()
    log = AuditLog(tmp_path / "solo" / ".kctl" / "solo" / "console" / "audit.jsonl")
    recs = list(log.records())
    assert [(r["action"], r["target"], r["result"], r["client"]) for r in recs] == [
        ("user.add", "ada", "done", "cli"), ("user.change", "ada", "done", "cli"),
        ("user.remove", "ada", "done", "cli"), ("user.remove", "ada", "failed", "cli")]
    assert recs[1]["params"] == {"role": "viewer", "clusters": ["solo"], "topic_prefixes": []}
    assert all(r["user"].startswith("cli:") for r in recs) and "long enough" not in json.dumps(recs)


def test_the_csv_export_escapes_cells_a_spreadsheet_would_run(config: ConsoleConfig) -> None:
    assert [csv_cell(v) for v in ("=HYPERLINK(\"x\")", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "ok", None)] == [
        "'=HYPERLINK(\"x\")", "'+1", "'-1", "'@SUM(A1)", "'\tx", "'\rx", "ok", ""]
    c = client(config)
    c.post("/api/login", json={"username": '=HYPERLINK("http://evil.example","x")', "password": "nope nope"})
    login(c, "root-adm")
    text = c.get("/audit.csv").text
    assert "'=HYPERLINK(" in text and ',=HYPERLINK' not in text and '"=HYPERLINK' not in text
    assert to_csv([{"time": "t", "user": "-2+3"}]).splitlines()[1] == "t,'-2+3,,,,,null,,"


# ----- 8: bad input answers 4xx with a message, never 500 --------------------------------------------------

def test_the_reported_bad_inputs_get_a_4xx_with_a_message(config: ConsoleConfig, world: World) -> None:
    c = client(config)
    h = login(c, "root-adm")
    answers = [
        c.get("/api/clusters/alpha/groups/g-team-a/offsets", params={"topic": "team-a.events", "strategy": "bogus"}),
        c.post("/api/clusters/alpha/reassignment", json={"plan": {"partitions": 5}}, headers=h),
        c.post("/clusters/alpha/reassignment", data={"csrf": h["X-CSRF-Token"], "plan": "{}", "throttle": "inf"}),
        c.post("/clusters/alpha/reassignment", data={"csrf": h["X-CSRF-Token"], "plan": "{}", "throttle": "nan"}),
        c.post("/clusters/alpha/reassignment", data={"csrf": h["X-CSRF-Token"], "plan": "[" * 5000 + "]" * 5000}),
        c.post("/api/clusters/alpha/reassignment", content='{"plan": ' + '{"a": ' * 5000 + "1" + "}" * 5001,
               headers={**h, "content-type": "application/json"}),
        c.post("/api/clusters/alpha/reassignment", content="not json", headers={**h, "content-type":
                                                                                "application/json"}),
    ]
    for r in answers:
        assert 400 <= r.status_code < 500, (r.request.url, r.status_code, r.text[:200])
        assert "Traceback" not in r.text and r.text.strip()
    assert world.calls == []


BAD_BODIES: list[Any] = [None, [], "text", 5, {"name": None}, {"name": "x" * 100_000}, {"plan": []},
                         {"partitions": "many"}, {"set": {"k": 5}}, {"topic": {"a": 1}}, {"value": ["x"]}]


def test_a_sweep_of_bad_bodies_over_every_mutating_api_route_never_answers_500(config: ConsoleConfig,
                                                                               world: World) -> None:
    c = client(config)
    h = login(c, "root-adm")
    for (method, path), row in sorted(ROWS.items()):
        if method == "GET" or not path.startswith("/api/") or row.needs == "session":
            continue
        for body in BAD_BODIES:
            r = c.request(method, fill(path), json=body, headers=h)
            assert r.status_code < 500, (method, path, body if not isinstance(body, dict) else list(body),
                                         r.status_code, r.text[:200])
    assert c.get("/api/me").status_code == 200


# ----- 9: argon2 never on the event loop -------------------------------------------------------------------


def test_a_login_being_checked_does_not_hold_up_other_requests(config: ConsoleConfig,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    entered = threading.Event()
    real = UserStore.verify

    def slow(self: UserStore, name: str, password: str) -> Any:
        entered.set()
        release.wait(10)
        return real(self, name, password)

    monkeypatch.setattr(UserStore, "verify", slow)
    with TestClient(server.build(config), base_url="http://127.0.0.1") as c:
        token = c.get("/login").cookies.get("kctl_console_login") or c.cookies.get("kctl_console_login")
        with ThreadPoolExecutor(2) as pool:
            form = pool.submit(c.post, "/login", data={"username": "all-view", "password": PASSWORD,
                                                       "csrf": token}, follow_redirects=False)
            assert entered.wait(10)
            static = pool.submit(c.get, "/static/console.css")
            try:
                assert static.result(timeout=5).status_code == 200  # while the login still waits
            finally:
                release.set()
            assert form.result(timeout=10).status_code == 303


# ----- 10: concurrent changes of the users file ------------------------------------------------------------


def test_concurrent_user_changes_lose_nothing_and_a_removed_user_stays_removed(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    from kctl.console import users as users_mod

    path = tmp_path / "users.yaml"
    hashed = new_user("seed", "viewer", "long enough pw")
    monkeypatch.setattr(users_mod, "hash_password", lambda pw: hashed.password_hash)
    UserStore(path).put(hashed)
    UserStore(path).put(new_user("doomed", "viewer", "long enough pw"))

    def work(i: int) -> None:
        store = UserStore(path)  # each its own, as several consoles and the CLI are
        for j in range(6):
            store.put(new_user(f"u{i}-{j}", "viewer", "long enough pw"))
            if i == 0 and j == 0:
                assert store.remove("doomed")

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(work, range(12)))
    names = set(UserStore(path).users())
    assert names == {"seed"} | {f"u{i}-{j}" for i in range(12) for j in range(6)}


def _add_in_process(args: tuple[str, int]) -> None:
    path, i = args
    from kctl.console.users import Role as R
    from kctl.console.users import User, UserStore

    store = UserStore(Path(path))
    for j in range(10):
        store.put(User(f"p{i}-{j}", R.viewer, "$argon2id$fake"))


def test_concurrent_user_changes_from_processes_lose_nothing(tmp_path: Path) -> None:
    import multiprocessing

    path = tmp_path / "users.yaml"
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        pool.map(_add_in_process, [(str(path), i) for i in range(4)])
    assert set(UserStore(path).users()) == {f"p{i}-{j}" for i in range(4) for j in range(10)}


# ----- 11: sessions, titles, the favicon, security headers -------------------------------------------------


def test_a_session_ends_when_the_password_changes_even_from_the_cli(config: ConsoleConfig) -> None:
    c = client(config)
    login(c, "all-view")
    assert c.get("/api/me").status_code == 200
    UserStore(config.users_file).put(new_user("all-view", "viewer", "a new password"))  # as the CLI does
    assert c.get("/api/me").status_code == 401
    assert c.get("/api/me").status_code == 401  # and stays ended


def test_a_session_has_an_absolute_lifetime_however_busy(config: ConsoleConfig) -> None:
    config.session_hours = 1
    app = server.build(config)
    now = [5000.0]
    app.state.console.sessions.clock = lambda: now[0]
    c = TestClient(app, base_url="http://127.0.0.1")
    login(c, "all-view")
    for _ in range(7):  # busy: never idle for long
        now[0] += 500
        assert c.get("/api/me").status_code == 200
    now[0] += 200  # 3700 s after the login
    assert c.get("/api/me").status_code == 401


def test_each_page_has_its_own_title_and_the_favicon_is_served(config: ConsoleConfig, world: World) -> None:
    import re

    c = client(config)
    login(c, "root-adm")
    titles = {}
    for path in ("/", "/clusters/alpha", "/clusters/alpha/topics", "/clusters/alpha/topics/team-a.events",
                 "/clusters/alpha/topics/team-a.events/messages", "/clusters/alpha/groups",
                 "/clusters/alpha/groups/g-team-a", "/clusters/alpha/reassignment", "/clusters/alpha/brokers",
                 "/clusters/alpha/alerts", "/clusters/alpha/security", "/audit", "/users"):
        r = c.get(path)
        assert r.status_code == 200, path
        titles[path] = re.search(r"<title>(.*?)</title>", r.text).group(1)  # type: ignore[union-attr]
        assert titles[path].endswith(" — kctl console"), titles[path]
        assert 'rel="icon"' in r.text
    assert len(set(titles.values())) == len(titles), titles
    assert titles["/clusters/alpha/topics/team-a.events"] == "team-a.events · topic · alpha — kctl console"
    assert c.get("/favicon.ico").status_code == 200 and c.get("/static/favicon.svg").status_code == 200


def test_every_answer_carries_the_security_headers(config: ConsoleConfig, world: World) -> None:
    c = client(config)
    answers = [c.get("/login"), c.get("/api/me"), c.get("/static/htmx.min.js"), c.get("/clusters/x"),
               c.post("/api/login", json={"username": "x", "password": "wrong password"})]
    login(c, "all-view")
    answers += [c.get("/"), c.get("/api/clusters"), c.get("/clusters/alpha/topics/hidden-orders")]
    for r in answers:
        h = r.headers
        assert "script-src 'self'" in h["content-security-policy"] and "unsafe" not in h["content-security-policy"]
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin" and "strict-transport-security" not in h
    tls = TestClient(server.build(config, tls=True), base_url="https://127.0.0.1")
    assert tls.get("/login").headers["strict-transport-security"].startswith("max-age=")
    # the pages hold no inline script or style for the policy to refuse
    page = c.get("/").text
    assert "<script>" not in page and "style=" not in page and "javascript:" not in page


# ----- 3: a file path of the console's host is for admins without limits only ---------------------------------


def test_a_clusters_error_naming_its_directory_reaches_only_unlimited_admins(config: ConsoleConfig,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.cluster import health
    from kctl.errors import KctlError

    root = str(config.cluster_files[0].parent.parent)  # every cluster's directory is under it

    def status(spec: Any, timeout: float = 0) -> Any:
        raise KctlError(f"cannot read the secrets in {spec.state_dir}/secrets: permission denied")

    monkeypatch.setattr(health, "status", status)
    for name, shown in (("root-adm", True), ("alpha-adm", False), ("all-op", False), ("all-view", False)):
        c = client(config)
        login(c, name)
        cards = {card["name"]: card for card in c.get("/api/clusters").json()}
        assert "cannot read the secrets in" in cards["alpha"]["error"], cards
        assert (root in cards["alpha"]["error"]) is shown and ("path" in cards["alpha"]) is shown, (name, cards)
        if "gamma" in cards:  # the cluster whose kctl.yaml is missing (no cluster limit)
            assert cards["gamma"]["health"] == "unreadable"
            assert (str(config.cluster_files[2]) in cards["gamma"]["error"]) is shown, (name, cards["gamma"])
            if not shown:
                assert cards["gamma"]["error"] == "its kctl.yaml cannot be read (see the console's log)"
        for text in (c.get("/").text, c.get("/clusters/cards").text, c.get("/api/clusters").text):
            assert (root in text) is shown, name
