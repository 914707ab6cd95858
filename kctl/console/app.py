"""The console's web application: server-rendered pages (Jinja2, htmx vendored in ./static) and the JSON API
under ``/api/``, both calling the same functions of :mod:`kctl.console.ops`.

Authorisation lives on the server, in one place: every route that changes something declares the role it
needs and the action it is audited as with ``Depends(Guard(role, action))`` (tests/unit/test_console_auth.py
enumerates the routes and fails on a mutating one without it). A guard checks, in order: a session (401, or
the login page), the CSRF token (403), the read-only switch (403), the role (403), that the user may see the
cluster and topic named in the path (404, as for one that does not exist: nothing leaks). Every refusal is
audited as well as every change.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field, ValidationError

from kctl.console import ops
from kctl.console.audit import AuditLog, to_csv
from kctl.console.auth import COOKIE, LOGIN_COOKIE, LoginGuard, Session, Sessions, same
from kctl.console.config import ConsoleConfig, Entry, Registry
from kctl.console.jobs import Jobs
from kctl.console.users import Role, User, UserStore, new_user
from kctl.errors import KctlError

HERE = Path(__file__).parent
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass
class Console:
    """Everything the application holds: read by the routes through ``request.app.state.console``."""

    config: ConsoleConfig
    registry: Registry
    users: UserStore
    sessions: Sessions
    guard: LoginGuard
    audit: AuditLog
    jobs: Jobs
    secure_cookies: bool = False


class Refused(Exception):
    def __init__(self, status: int, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.hint = status, message, hint


@dataclass
class Ctx:
    """Who asks, through which session, about which cluster (resolved and allowed)."""

    user: User
    session: Session
    entry: Entry | None = None

    @property
    def spec(self) -> Any:
        assert self.entry is not None and self.entry.spec is not None
        return self.entry.spec


def _console(request: Request) -> Console:
    return request.app.state.console  # type: ignore[no-any-return]


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _session(request: Request) -> tuple[User, Session] | None:
    c = _console(request)
    s = c.sessions.get(request.cookies.get(COOKIE))
    if s is None:
        return None
    user = c.users.get(s.user)
    if user is None:  # removed while logged in
        c.sessions.close(s.token)
        return None
    return user, s


def _resolve(request: Request, user: User) -> Entry | None:
    """The cluster and topic the path names, refused as missing when the user may not see them."""
    name = request.path_params.get("cluster")
    if name is None:
        return None
    entry = _console(request).registry.get(name) if user.may_see_cluster(name) else None
    if entry is None:
        raise Refused(404, f"no cluster {name!r}")
    topic = request.path_params.get("topic")
    if topic is not None and not user.may_see_topic(topic):
        raise Refused(404, f"no topic {topic!r} in cluster {name!r}")
    return entry


class Reader:
    """A route that only reads: a session and, for a cluster's routes, the right to see it."""

    async def __call__(self, request: Request) -> Ctx:
        found = _session(request)
        if found is None:
            raise Refused(401, "log in first")
        user, session = found
        return Ctx(user, session, _resolve(request, user))


class Guard:
    """A route that changes something: session, CSRF token, read-only switch, role and scope, audited."""

    def __init__(self, role: Role, action: str) -> None:
        self.role, self.action = role, action

    async def __call__(self, request: Request) -> Ctx:
        c = _console(request)
        cluster = request.path_params.get("cluster")
        target = request.path_params.get("topic") or request.path_params.get("name")
        found = _session(request)

        def refuse(status: int, message: str, user: str | None) -> Refused:
            c.audit.append(user=user, action=self.action, result="refused", cluster=cluster, target=target,
                           message=message)
            return Refused(status, message)

        if found is None:
            raise refuse(401, "log in first", None)
        user, session = found
        token = request.headers.get("x-csrf-token")
        if token is None and request.headers.get("content-type", "").startswith(
                ("application/x-www-form-urlencoded", "multipart/form-data")):
            token = str((await request.form()).get("csrf") or "")
        if not same(token, session.csrf):
            raise refuse(403, "missing or wrong CSRF token", user.name)
        if c.config.read_only:
            raise refuse(403, "the console is read-only", user.name)
        if user.role < self.role:
            raise refuse(403, f"{self.action} needs the {self.role.name} role; {user.name} is {user.role.name}",
                         user.name)
        try:
            entry = _resolve(request, user)
        except Refused as r:
            raise refuse(r.status, r.message, user.name) from None
        if entry is not None and entry.spec is None:
            raise refuse(409, f"cluster {entry.name!r} cannot be read: {entry.error}", user.name)
        return Ctx(user, session, entry)


read = Depends(Reader())


def guard(role: Role, action: str) -> Any:
    return Depends(Guard(role, action))


def _done(request: Request, ctx: Ctx, action: str, target: str | None, params: dict[str, Any], fn: Any) -> Any:
    """Run a change and audit its result (done, or failed with the error's message)."""
    c = _console(request)
    cluster = ctx.entry.name if ctx.entry else None
    try:
        result = fn()
    except KctlError as exc:
        c.audit.append(user=ctx.user.name, action=action, result="failed", cluster=cluster, target=target,
                       params=params, message=exc.message)
        raise Refused(400 if exc.exit_code == 2 else 409, exc.message, exc.hint) from None
    c.audit.append(user=ctx.user.name, action=action, result="done", cluster=cluster, target=target, params=params)
    return result


# ----- request bodies ----------------------------------------------------------------------------------


class LoginBody(BaseModel):
    username: str = Field(..., min_length=1, max_length=64)
    password: str = Field(..., min_length=1, max_length=1024)


class TopicBody(BaseModel):
    name: str = Field(..., min_length=1, max_length=249)
    partitions: int | None = Field(None, ge=1, le=100_000)
    replication_factor: int | None = Field(None, ge=1, le=32)
    configs: dict[str, str] = Field(default_factory=dict)


class PartitionsBody(BaseModel):
    partitions: int = Field(..., ge=1, le=100_000)


class ClusterBody(BaseModel):
    path: str = Field(..., min_length=1)


class UserBody(BaseModel):
    name: str = Field(..., min_length=1, max_length=64)
    role: str
    password: str = Field(..., min_length=8, max_length=1024)
    clusters: list[str] = Field(default_factory=list)
    topic_prefixes: list[str] = Field(default_factory=list)


# ----- the application ---------------------------------------------------------------------------------


def create_app(console: Console) -> FastAPI:
    app = FastAPI(title="kctl console", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.console = console
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["datetime"] = _utc
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def context(ctx: Ctx | None, data: dict[str, Any]) -> dict[str, Any]:
        return {"user": ctx.user if ctx else None, "csrf": ctx.session.csrf if ctx else "", "Role": Role,
                "read_only": console.config.read_only, "cluster": ctx.entry.name if ctx and ctx.entry else None,
                **data}

    def page(request: Request, name: str, ctx: Ctx | None, status: int = 200, **data: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context(ctx, data), status_code=status)

    def fragment(request: Request, name: str, ctx: Ctx | None, **data: Any) -> str:
        return str(templates.get_template(name).render({"request": request, **context(ctx, data)}))

    # ----- errors: JSON under /api/, a page elsewhere; never a stack trace -----------------------------

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        if _is_api(request):
            return JSONResponse({"error": exc.message, "hint": exc.hint}, status_code=exc.status)
        if exc.status == 401:
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        found = _session(request)
        ctx = Ctx(*found) if found else None
        return page(request, "error.html", ctx, exc.status, message=exc.message, hint=exc.hint)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        fields = [{"field": ".".join(str(p) for p in e["loc"][1:]), "error": e["msg"]} for e in exc.errors()]
        if _is_api(request):
            return JSONResponse({"error": "invalid request", "fields": fields}, status_code=422)
        return PlainTextResponse("invalid request: " + "; ".join(f"{f['field']}: {f['error']}" for f in fields),
                                 status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        import logging
        import uuid

        ref = uuid.uuid4().hex[:8]
        logging.getLogger("kctl.console").exception("error %s on %s %s", ref, request.method, request.url.path)
        message = f"the console failed on this request (reference {ref} in its log)"
        if _is_api(request):
            return JSONResponse({"error": message, "hint": None}, status_code=500)
        return PlainTextResponse(message, status_code=500)

    @app.exception_handler(KctlError)
    async def kctl_error(request: Request, exc: KctlError) -> Response:
        status = 400 if exc.exit_code == 2 else 502
        if _is_api(request):
            return JSONResponse({"error": exc.message, "hint": exc.hint}, status_code=status)
        found = _session(request)
        return page(request, "error.html", Ctx(*found) if found else None, status, message=exc.message,
                    hint=exc.hint)

    # ----- login -------------------------------------------------------------------------------------------

    def _login(request: Request, username: str, password: str) -> tuple[User | None, float]:
        addr = request.client.host if request.client else "?"
        keys = (f"user:{username}", f"addr:{addr}")
        wait = console.guard.wait_seconds(*keys)
        if wait > 0:
            console.audit.append(user=username, action="login", result="refused",
                                 message=f"locked for {wait:.0f} s after failed logins")
            return None, wait
        user = console.users.verify(username, password)
        if user is None:
            wait = console.guard.failed(*keys)
            console.audit.append(user=username, action="login", result="refused", message="wrong name or password")
            return None, wait
        console.guard.succeeded(*keys)
        console.audit.append(user=user.name, action="login", result="done")
        return user, 0.0

    def _set_cookie(resp: Response, session: Session) -> None:
        resp.set_cookie(COOKIE, session.token, httponly=True, samesite="strict", secure=console.secure_cookies,
                        path="/")

    @app.post("/api/login")
    def api_login(request: Request, body: LoginBody) -> Response:
        user, wait = _login(request, body.username, body.password)
        if user is None:
            headers = {"Retry-After": str(int(wait + 0.999))} if wait > 0 else {}
            return JSONResponse({"error": "wrong name or password" if not headers else
                                 f"too many failed logins: wait {wait:.0f} s"},
                                status_code=429 if headers else 401, headers=headers)
        s = console.sessions.open(user.name)
        resp = JSONResponse({"csrf": s.csrf, "user": user.public()})
        _set_cookie(resp, s)
        return resp

    @app.post("/api/logout")
    def api_logout(request: Request, ctx: Ctx = read) -> Response:
        if not same(request.headers.get("x-csrf-token"), ctx.session.csrf):
            raise Refused(403, "missing or wrong CSRF token")
        console.sessions.close(ctx.session.token)
        resp = JSONResponse({"logged_out": True})
        resp.delete_cookie(COOKIE, path="/")
        return resp

    @app.get("/login", response_class=HTMLResponse)
    def login_page(request: Request, next: str = "/") -> Response:  # noqa: A002 - the query's name
        token = secrets.token_urlsafe(24)
        resp = page(request, "login.html", None, next=_safe_next(next), login_csrf=token, error=None)
        resp.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="strict", secure=console.secure_cookies)
        return resp

    @app.post("/login")
    async def login_form(request: Request) -> Response:
        form = await request.form()
        username, password = str(form.get("username") or ""), str(form.get("password") or "")
        nxt = _safe_next(str(form.get("next") or "/"))
        if not same(str(form.get("csrf") or ""), request.cookies.get(LOGIN_COOKIE)):
            console.audit.append(user=username or None, action="login", result="refused",
                                 message="missing or wrong CSRF token")
            return page(request, "login.html", None, 403, next=nxt, login_csrf=request.cookies.get(LOGIN_COOKIE),
                        error="the form expired: try again")
        user, wait = _login(request, username, password)
        if user is None:
            error = f"too many failed logins: wait {wait:.0f} s" if wait > 0 else "wrong name or password"
            return page(request, "login.html", None, 429 if wait > 0 else 401, next=nxt,
                        login_csrf=request.cookies.get(LOGIN_COOKIE), error=error)
        s = console.sessions.open(user.name)
        resp = RedirectResponse(nxt, status_code=303)
        _set_cookie(resp, s)
        resp.delete_cookie(LOGIN_COOKIE)
        return resp

    @app.post("/logout")
    def logout_form(request: Request, csrf: str = _form(""), ctx: Ctx = read) -> Response:
        if not same(csrf, ctx.session.csrf):
            raise Refused(403, "missing or wrong CSRF token")
        console.sessions.close(ctx.session.token)
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(COOKIE, path="/")
        return resp

    @app.get("/api/me")
    def api_me(ctx: Ctx = read) -> dict[str, Any]:
        return {**ctx.user.public(), "read_only": console.config.read_only}

    # ----- clusters ----------------------------------------------------------------------------------------

    def visible(ctx: Ctx) -> list[Entry]:
        return [e for e in console.registry.entries() if ctx.user.may_see_cluster(e.name)]

    @app.get("/api/clusters")
    def api_clusters(ctx: Ctx = read) -> list[dict[str, Any]]:
        return ops.cluster_cards(visible(ctx))

    @app.get("/", response_class=HTMLResponse)
    def clusters_page(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "clusters.html", ctx, cards=ops.cluster_cards(visible(ctx)))

    @app.get("/clusters/cards", response_class=HTMLResponse)
    def cluster_cards_fragment(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "_cards.html", ctx, cards=ops.cluster_cards(visible(ctx)))

    def add_cluster(request: Request, ctx: Ctx, path: str) -> dict[str, Any]:
        entry = _done(request, ctx, "cluster.add", path, {"path": path}, lambda: console.registry.add(Path(path)))
        return {"name": entry.name, "path": str(entry.path)}

    @app.post("/api/clusters", status_code=201)
    def api_add_cluster(request: Request, body: ClusterBody, ctx: Ctx = guard(Role.admin, "cluster.add")) -> Any:
        return add_cluster(request, ctx, body.path)

    @app.post("/clusters")
    def form_add_cluster(request: Request, path: str = _form(), ctx: Ctx = guard(Role.admin, "cluster.add")) -> Any:
        add_cluster(request, ctx, path)
        return RedirectResponse("/", status_code=303)

    @app.delete("/api/clusters/{cluster}")
    def api_remove_cluster(request: Request, ctx: Ctx = guard(Role.admin, "cluster.remove")) -> Any:
        _done(request, ctx, "cluster.remove", None, {}, lambda: console.registry.remove(ctx.entry.name))  # type: ignore[union-attr]
        return {"removed": ctx.entry.name}  # type: ignore[union-attr]

    @app.post("/clusters/{cluster}/remove")
    def form_remove_cluster(request: Request, ctx: Ctx = guard(Role.admin, "cluster.remove")) -> Any:
        _done(request, ctx, "cluster.remove", None, {}, lambda: console.registry.remove(ctx.entry.name))  # type: ignore[union-attr]
        return RedirectResponse("/", status_code=303)

    @app.get("/api/clusters/{cluster}")
    def api_cluster(ctx: Ctx = read) -> dict[str, Any]:
        return ops.cluster_detail(_readable(ctx))

    @app.get("/clusters/{cluster}", response_class=HTMLResponse)
    def cluster_page(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "cluster.html", ctx, doc=ops.cluster_detail(_readable(ctx)))

    # ----- topics ------------------------------------------------------------------------------------------

    @app.get("/api/clusters/{cluster}/topics")
    def api_topics(internal: bool = False, ctx: Ctx = read) -> list[dict[str, Any]]:
        return ops.topic_list(_readable(ctx), ctx.user, internal)

    @app.get("/clusters/{cluster}/topics", response_class=HTMLResponse)
    def topics_page(request: Request, q: str = "", internal: bool = False, ctx: Ctx = read) -> Response:
        rows = [t for t in ops.topic_list(_readable(ctx), ctx.user, internal) if q.lower() in t["name"].lower()]
        return page(request, "topics.html", ctx, topics=rows, q=q, internal=internal, errors={}, form={})

    def create_topic(request: Request, ctx: Ctx, body: TopicBody) -> dict[str, Any]:
        if not ctx.user.may_see_topic(body.name):
            c = console
            c.audit.append(user=ctx.user.name, action="topic.create", result="refused", cluster=ctx.entry.name,  # type: ignore[union-attr]
                           target=body.name, message="outside the user's topic prefixes")
            raise Refused(403, f"{ctx.user.name} may create only topics starting with "
                               + ", ".join(ctx.user.topic_prefixes))
        return _done(request, ctx, "topic.create", body.name, body.model_dump(exclude={"name"}),  # type: ignore[no-any-return]
                     lambda: ops.create_topic(ctx.spec, body.name, body.partitions, body.replication_factor,
                                              body.configs))

    @app.post("/api/clusters/{cluster}/topics", status_code=201)
    def api_create_topic(request: Request, body: TopicBody,
                         ctx: Ctx = guard(Role.operator, "topic.create")) -> dict[str, Any]:
        return create_topic(request, ctx, body)

    @app.post("/clusters/{cluster}/topics")
    async def form_create_topic(request: Request, ctx: Ctx = guard(Role.operator, "topic.create")) -> Response:
        form = dict(await request.form())
        raw = {"name": str(form.get("name") or "").strip(), "configs": _pairs(str(form.get("configs") or ""))}
        for k in ("partitions", "replication_factor"):
            if str(form.get(k) or "").strip():
                raw[k] = str(form[k]).strip()
        try:
            body = TopicBody.model_validate(raw)
        except ValidationError as exc:
            errors = {str(e["loc"][0]): e["msg"] for e in exc.errors()}
            return page(request, "topics.html", ctx, 422, topics=ops.topic_list(ctx.spec, ctx.user), q="",
                        internal=False, errors=errors, form=form)
        try:
            create_topic(request, ctx, body)
        except Refused as r:
            return page(request, "topics.html", ctx, r.status, topics=ops.topic_list(ctx.spec, ctx.user), q="",
                        internal=False, errors={"name": r.message}, form=form)
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/topics/{quote(body.name)}",  # type: ignore[union-attr]
                                status_code=303)

    @app.get("/api/clusters/{cluster}/topics/{topic}")
    def api_topic(topic: str, ctx: Ctx = read) -> dict[str, Any]:
        return ops.topic_detail(_readable(ctx), topic)

    @app.get("/clusters/{cluster}/topics/{topic}", response_class=HTMLResponse)
    def topic_page(request: Request, topic: str, ctx: Ctx = read) -> Response:
        return page(request, "topic.html", ctx, doc=ops.topic_detail(_readable(ctx), topic), error=None)

    @app.delete("/api/clusters/{cluster}/topics/{topic}")
    def api_delete_topic(request: Request, topic: str, ctx: Ctx = guard(Role.admin, "topic.delete")) -> Any:
        return _done(request, ctx, "topic.delete", topic, {}, lambda: ops.delete_topic(ctx.spec, topic))

    @app.post("/clusters/{cluster}/topics/{topic}/delete")
    def form_delete_topic(request: Request, topic: str, confirm: str = _form(""),
                          ctx: Ctx = guard(Role.admin, "topic.delete")) -> Response:
        if confirm != topic:
            return page(request, "topic.html", ctx, 400, doc=ops.topic_detail(ctx.spec, topic),
                        error="type the topic's name to confirm its deletion")
        _done(request, ctx, "topic.delete", topic, {}, lambda: ops.delete_topic(ctx.spec, topic))
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/topics", status_code=303)  # type: ignore[union-attr]

    @app.post("/api/clusters/{cluster}/topics/{topic}/partitions")
    def api_add_partitions(request: Request, topic: str, body: PartitionsBody,
                           ctx: Ctx = guard(Role.operator, "topic.partitions")) -> Any:
        return _done(request, ctx, "topic.partitions", topic, {"partitions": body.partitions},
                     lambda: ops.add_partitions(ctx.spec, topic, body.partitions))

    @app.post("/clusters/{cluster}/topics/{topic}/partitions")
    def form_add_partitions(request: Request, topic: str, partitions: str = _form(""),
                            ctx: Ctx = guard(Role.operator, "topic.partitions")) -> Response:
        try:
            body = PartitionsBody(partitions=partitions)
        except ValidationError:
            return page(request, "topic.html", ctx, 422, doc=ops.topic_detail(ctx.spec, topic),
                        error="partitions: a whole number of at least 1")
        try:
            _done(request, ctx, "topic.partitions", topic, {"partitions": body.partitions},
                  lambda: ops.add_partitions(ctx.spec, topic, body.partitions))
        except Refused as r:
            return page(request, "topic.html", ctx, r.status, doc=ops.topic_detail(ctx.spec, topic), error=r.message)
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/topics/{quote(topic)}",  # type: ignore[union-attr]
                                status_code=303)

    # ----- consumer groups ---------------------------------------------------------------------------------

    @app.get("/api/clusters/{cluster}/groups")
    def api_groups(ctx: Ctx = read) -> list[dict[str, Any]]:
        return ops.group_list(_readable(ctx), ctx.user)

    @app.get("/clusters/{cluster}/groups", response_class=HTMLResponse)
    def groups_page(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "groups.html", ctx, groups=ops.group_list(_readable(ctx), ctx.user))

    @app.get("/api/clusters/{cluster}/groups/{group}")
    def api_group(group: str, ctx: Ctx = read) -> dict[str, Any]:
        doc = ops.group_detail(_readable(ctx), group, ctx.user)
        if doc is None:
            raise Refused(404, f"no group {group!r}")
        return doc

    @app.get("/clusters/{cluster}/groups/{group}", response_class=HTMLResponse)
    def group_page(request: Request, group: str, ctx: Ctx = read) -> Response:
        from kctl.console import charts

        doc = ops.group_detail(_readable(ctx), group, ctx.user)
        if doc is None:
            raise Refused(404, f"no group {group!r}")
        ev = doc.get("evaluation")
        marks = (ev or {}).get("by_partition") or {}
        lag = {"group": group, "state": doc["state"], "total_lag": doc["total_lag"],
               "status": ev["status"] if ev else None,
               "partitions": [{**p, "status": marks.get(f"{p['topic']}-{p['partition']}")} for p in doc["partitions"]]}
        hist = ops.group_history(ctx.spec, group, 3600)
        chart = charts.line([(r["ts_ms"] / 1000, r["total_lag"]) for r in hist], title="total lag, last hour")
        topics = sorted({p["topic"] for p in doc["partitions"]})
        return page(request, "group.html", ctx, doc=doc, lag=lag, chart=chart, topics=topics)

    # ----- audit log -----------------------------------------------------------------------------------------

    def audit_rows(ctx: Ctx, user: str | None, cluster: str | None, action: str | None, result: str | None,
                   limit: int) -> list[dict[str, Any]]:
        mine = {e.name for e in visible(ctx)} if ctx.user.clusters else None
        if ctx.user.role < Role.admin:
            user = ctx.user.name  # a viewer or operator sees their own records only
        return console.audit.query(user=user, cluster=cluster, action=action, result=result, clusters=mine,
                                   limit=limit)

    @app.get("/api/audit")
    def api_audit(user: str | None = None, cluster: str | None = None, action: str | None = None,
                  result: str | None = None, limit: int = 200, ctx: Ctx = read) -> list[dict[str, Any]]:
        return audit_rows(ctx, user, cluster, action, result, max(1, min(limit, 10_000)))

    @app.get("/audit", response_class=HTMLResponse)
    def audit_page(request: Request, user: str | None = None, cluster: str | None = None,
                   action: str | None = None, result: str | None = None, ctx: Ctx = read) -> Response:
        rows = audit_rows(ctx, user or None, cluster or None, action or None, result or None, 500)
        return page(request, "audit.html", ctx, rows=rows, filters={"user": user or "", "cluster": cluster or "",
                                                                    "action": action or "", "result": result or ""})

    @app.get("/audit.csv")
    def audit_csv(user: str | None = None, cluster: str | None = None, action: str | None = None,
                  result: str | None = None, ctx: Ctx = read) -> Response:
        rows = audit_rows(ctx, user or None, cluster or None, action or None, result or None, 1_000_000)
        return PlainTextResponse(to_csv(rows), media_type="text/csv",
                                 headers={"Content-Disposition": 'attachment; filename="kctl-console-audit.csv"'})

    # ----- console users (admin) -----------------------------------------------------------------------------

    def _admin(ctx: Ctx) -> None:
        if ctx.user.role < Role.admin:
            raise Refused(403, "console users are managed by admins")

    @app.get("/api/users")
    def api_users(ctx: Ctx = read) -> list[dict[str, Any]]:
        _admin(ctx)
        return [u.public() for u in console.users.users().values()]

    @app.get("/users", response_class=HTMLResponse)
    def users_page(request: Request, ctx: Ctx = read) -> Response:
        _admin(ctx)
        return page(request, "users.html", ctx, users=[u.public() for u in console.users.users().values()],
                    error=None)

    def add_user(request: Request, ctx: Ctx, body: UserBody) -> dict[str, Any]:
        params = {"role": body.role, "clusters": body.clusters, "topic_prefixes": body.topic_prefixes}

        def put() -> dict[str, Any]:
            u = new_user(body.name, body.role, body.password, body.clusters, body.topic_prefixes)
            console.users.put(u)
            console.sessions.close_user(u.name)  # a changed role takes effect at once
            return u.public()

        return _done(request, ctx, "user.add", body.name, params, put)  # type: ignore[no-any-return]

    @app.post("/api/users", status_code=201)
    def api_add_user(request: Request, body: UserBody, ctx: Ctx = guard(Role.admin, "user.add")) -> Any:
        return add_user(request, ctx, body)

    @app.post("/users")
    async def form_add_user(request: Request, ctx: Ctx = guard(Role.admin, "user.add")) -> Response:
        form = await request.form()
        try:
            body = UserBody(name=str(form.get("name") or ""), role=str(form.get("role") or ""),
                            password=str(form.get("password") or ""),
                            clusters=_words(str(form.get("clusters") or "")),
                            topic_prefixes=_words(str(form.get("topic_prefixes") or "")))
            add_user(request, ctx, body)
        except ValidationError as exc:
            error = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
        except Refused as r:
            error = r.message
        else:
            return RedirectResponse("/users", status_code=303)
        return page(request, "users.html", ctx, 422, users=[u.public() for u in console.users.users().values()],
                    error=error)

    def remove_user(request: Request, ctx: Ctx, name: str) -> dict[str, Any]:
        def rm() -> dict[str, Any]:
            if name == ctx.user.name:
                raise KctlError("an admin cannot remove themselves", hint="ask another admin")
            if not console.users.remove(name):
                raise KctlError(f"no console user {name!r}")
            console.sessions.close_user(name)
            return {"removed": name}

        return _done(request, ctx, "user.remove", name, {}, rm)  # type: ignore[no-any-return]

    @app.delete("/api/users/{name}")
    def api_remove_user(request: Request, name: str, ctx: Ctx = guard(Role.admin, "user.remove")) -> Any:
        return remove_user(request, ctx, name)

    @app.post("/users/{name}/delete")
    def form_remove_user(request: Request, name: str, ctx: Ctx = guard(Role.admin, "user.remove")) -> Response:
        remove_user(request, ctx, name)
        return RedirectResponse("/users", status_code=303)

    from kctl.console import actions

    actions.register(app, actions.Helpers(page=page, fragment=fragment, read=read, guard=guard, done=_done,
                                          Refused=Refused, readable=_readable))
    return app


def _form(default: Any = ...) -> Any:
    from fastapi import Form

    return Form(default)


def _utc(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _readable(ctx: Ctx) -> Any:
    if ctx.entry is None or ctx.entry.spec is None:
        raise Refused(409, f"cluster {ctx.entry.name if ctx.entry else '?'} cannot be read: "
                           f"{ctx.entry.error if ctx.entry else ''}")
    return ctx.entry.spec


def _safe_next(nxt: str) -> str:
    """Only a path on this console (no //host, no scheme): the login page never sends a user elsewhere."""
    return nxt if nxt.startswith("/") and not nxt.startswith("//") and "\\" not in nxt else "/"


def _pairs(text: str) -> dict[str, str]:
    """``key=value`` pairs, one per line or separated by commas (the create form's configs field)."""
    out: dict[str, str] = {}
    for part in text.replace(",", "\n").splitlines():
        part = part.strip()
        if part:
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise Refused(422, f"configs: {part!r} is not key=value")
            out[key.strip()] = value.strip()
    return out


def _words(text: str) -> list[str]:
    return [w for w in text.replace(",", " ").split() if w]
