"""The console's web application: server-rendered pages (Jinja2, htmx vendored in ./static) and the JSON API
under ``/api/``, both calling the same functions of :mod:`kctl.console.ops`.

Authorisation: whether a user may see or change anything is decided by one function,
:func:`kctl.console.authz.decide`, for reads (what an answer holds) as for changes. Every route that changes
something declares the role it needs and the action it is audited as with ``Depends(Guard(role, action))``
(tests/unit/test_console_matrix.py enumerates every route of the application and fails on one without its row).
A guard checks, in order: a session (401, or the login page), the CSRF token (403), the read-only switch (403),
that the user may see the cluster and topic named in the path (404, as for one that does not exist: nothing
leaks) and has the role (403); the handler then asks :func:`authz.require` about what its body names.

Every mutating request owes the audit log one record: the guard opens it, the change writes it (done or
failed), and whatever else ends the request (a refusal, a 422, an unexpected error, a page answering 4xx)
writes it on the way out (:class:`Headers` below, which also sets the security headers of every answer).
"""

from __future__ import annotations

import logging
import math
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kctl.console import actions, authz, charts, ops, views
from kctl.console.audit import AuditLog, to_csv
from kctl.console.auth import COOKIE, LOGIN_COOKIE, LoginGuard, Session, Sessions, same
from kctl.console.authz import Refused
from kctl.console.config import ConsoleConfig, Entry, Registry
from kctl.console.jobs import Jobs
from kctl.console.users import Role, User, UserStore
from kctl.errors import KctlError

HERE = Path(__file__).parent
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
log = logging.getLogger("kctl.console")

__all__ = ["Console", "Ctx", "Guard", "Reader", "Refused", "create_app"]


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


@dataclass
class Pending:
    """The audit record a request owes: opened by its guard, written once (done, failed or refused)."""

    action: str
    client: str
    user: str | None = None
    cluster: str | None = None
    target: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    written: bool = False
    reading: bool = False  # a read: only the decisions' refusals (403, 404) are recorded
    anonymous: bool = False  # made without a session (a login): counted against its address's budget, named or not
    always: bool = False  # written whatever that budget (a lockout)


def _console(request: Request) -> Console:
    return request.app.state.console  # type: ignore[no-any-return]


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def client_of(request: Request) -> str:
    return request.client.host if request.client else "?"


def _pending(scope_or_request: Any) -> Pending | None:
    state = scope_or_request.get("state") if isinstance(scope_or_request, dict) else \
        scope_or_request.scope.get("state")
    return (state or {}).get("kctl_audit")


def _open_record(request: Request, action: str, *, reading: bool = False) -> Pending:
    p = Pending(action, client_of(request), cluster=request.path_params.get("cluster"),
                target=request.path_params.get("topic") or request.path_params.get("group")
                or request.path_params.get("name"), reading=reading)
    request.scope.setdefault("state", {})["kctl_audit"] = p
    return p


def _write(audit: AuditLog, p: Pending | None, result: str, message: str = "", status: int | None = None) -> None:
    """Write the request's record once; a read's only for the refusals of a decision."""
    if p is None or p.written:
        return
    if p.reading and (result != "refused" or status not in (403, 404) or p.user is None):
        return
    p.written = True
    audit.append(user=p.user, action=p.action, result=result, cluster=p.cluster, target=p.target, params=p.params,
                 message=message or p.message, client=p.client, anonymous=p.user is None or p.anonymous,
                 always=p.always)


def record(request: Request, result: str, message: str = "", status: int | None = None) -> None:
    _write(_console(request).audit, _pending(request), result, message, status)


def _session(request: Request) -> tuple[User, Session] | None:
    c = _console(request)
    token = request.cookies.get(COOKIE)
    s = c.sessions.peek(token)
    if s is None:
        return None
    user = c.users.get(s.user)
    if user is None:  # removed while logged in
        c.sessions.close(s.token)
        return None
    s = c.sessions.get(token, user.fingerprint())  # ends when the password, role or scope changed
    return (user, s) if s is not None else None


def _path_resource(request: Request) -> authz.Resource | None:
    name = request.path_params.get("cluster")
    if name is None:
        return None
    topic = request.path_params.get("topic")
    return authz.Topic(name, topic) if topic is not None else authz.Cluster(name)


def _resolve(request: Request, user: User, role: Role = Role.viewer) -> Entry | None:
    """The cluster (and topic) the path names, refused as missing when the user may not see them."""
    res = _path_resource(request)
    if res is None:
        if user.role < role:
            authz.require(user, "see", authz.Console(), role)
        return None
    authz.require(user, "see", res, role)
    name = request.path_params["cluster"]
    entry = _console(request).registry.get(name)
    if entry is None:
        raise Refused(404, f"no cluster {name!r}")
    return entry


class Reader:
    """A route that only reads: a session and, for a cluster's routes, the right to see it."""

    async def __call__(self, request: Request) -> Ctx:
        p = _open_record(request, "read " + request.url.path[:200], reading=True)
        found = _session(request)
        if found is None:
            raise Refused(401, "log in first")
        user, session = found
        p.user = user.name
        return Ctx(user, session, _resolve(request, user))


def unreadable(user: User, entry: Entry) -> str:
    """Why a cluster cannot be served, in the words this user may read: the reason with its file's path for an
    admin without limits, who sees the paths anyway; for everyone else words without a path (the console's log
    has the reason)."""
    return f"cluster {entry.name!r} cannot be read: {entry.detail if authz.sees_paths(user) else entry.error}"


class Guard:
    """A route that changes something: session, CSRF token, read-only switch, role and scope, audited.
    ``needs_spec``: the change reads the cluster's kctl.yaml (all but removing a cluster from the console)."""

    def __init__(self, role: Role, action: str, needs_spec: bool = True) -> None:
        self.role, self.action, self.needs_spec = role, action, needs_spec

    async def __call__(self, request: Request) -> Ctx:
        c = _console(request)
        p = _open_record(request, self.action)
        found = _session(request)
        if found is None:
            raise Refused(401, "log in first")
        user, session = found
        p.user = user.name
        token = request.headers.get("x-csrf-token")
        if token is None and request.headers.get("content-type", "").startswith(
                ("application/x-www-form-urlencoded", "multipart/form-data")):
            token = str((await request.form()).get("csrf") or "")
        if not same(token, session.csrf):
            raise Refused(403, "missing or wrong CSRF token")
        if c.config.read_only:
            raise Refused(403, "the console is read-only")
        entry = _resolve(request, user, self.role)
        if entry is not None and entry.spec is None and self.needs_spec:
            raise Refused(409, unreadable(user, entry))
        return Ctx(user, session, entry)


read = Depends(Reader())


def guard(role: Role, action: str, needs_spec: bool = True) -> Any:
    return Depends(Guard(role, action, needs_spec))


def _done(request: Request, ctx: Ctx, action: str, target: str | None, params: dict[str, Any], fn: Any) -> Any:
    """Run a change and audit its result (done, failed with the error's message, refused)."""
    p = _pending(request) or _open_record(request, action)
    p.user, p.action = ctx.user.name, action
    p.cluster = ctx.entry.name if ctx.entry else p.cluster
    p.target, p.params = target, dict(params)
    try:
        result = fn()
    except Refused as r:
        record(request, "refused", r.message)
        raise
    except KctlError as exc:
        record(request, "failed", exc.message)
        raise Refused(400 if exc.exit_code == 2 else 409, exc.message, exc.hint) from None
    except Exception as exc:
        record(request, "failed", f"unexpected {type(exc).__name__} (the console's log has it)")
        raise
    record(request, "done")
    return result


def refusal(request: Request, r: Refused | KctlError | str) -> str:
    """A form route that answers a refusal with its page: the record first; the message for the page."""
    message = r if isinstance(r, str) else r.message
    record(request, "failed" if isinstance(r, KctlError) else "refused", message)
    return message


class Headers:
    """Pure ASGI middleware: the security headers of every answer, and the audit record a request still owes
    when it ends in a 4xx/5xx page or an unexpected error."""

    def __init__(self, app: ASGIApp, audit: Callable[[], AuditLog], tls: bool) -> None:
        self.app, self.audit, self.tls = app, audit, tls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [0]
        static = str(scope.get("path", "")).startswith("/static/")

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                for k, v in _security_headers(self.tls, static):
                    if k.encode() not in names:
                        headers.append((k.encode(), v.encode()))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            _write(self.audit(), _pending(scope), "failed", "unexpected error (the console's log has it)", 500)
            raise
        if status[0] >= 400:
            _write(self.audit(), _pending(scope), "failed" if status[0] >= 500 else "refused",
                   f"answered HTTP {status[0]}", status[0])


CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
       " font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def _security_headers(tls: bool, static: bool) -> list[tuple[str, str]]:
    out = [("content-security-policy", CSP), ("x-frame-options", "DENY"), ("x-content-type-options", "nosniff"),
           ("referrer-policy", "same-origin"), ("cross-origin-opener-policy", "same-origin"),
           ("permissions-policy", "camera=(), microphone=(), geolocation=()")]
    if not static:
        out.append(("cache-control", "no-store"))
    if tls:
        out.append(("strict-transport-security", "max-age=31536000"))
    return out


# ----- request bodies ----------------------------------------------------------------------------------


class LoginBody(BaseModel):
    username: str = Field(..., min_length=1, max_length=64)
    password: str = Field(..., min_length=1, max_length=1024)


# ----- the application ---------------------------------------------------------------------------------


def create_app(console: Console) -> FastAPI:
    app = FastAPI(title="kctl console", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.console = console
    app.add_middleware(Headers, audit=lambda: console.audit, tls=console.secure_cookies)
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

    # ----- errors: JSON under /api/, a page elsewhere; never a stack trace; each refusal audited -------------

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        record(request, "refused", exc.message, exc.status)
        if _is_api(request):
            return JSONResponse({"error": exc.message, "hint": exc.hint}, status_code=exc.status)
        if exc.status == 401:
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        found = _session(request)
        ctx = Ctx(*found) if found else None
        return page(request, "error.html", ctx, exc.status, message=exc.message, hint=exc.hint, title="Not done")

    def invalid_fields(errors: Any) -> list[dict[str, str]]:
        return [{"field": ".".join(str(p) for p in e["loc"] if p not in ("body", "query", "path")),
                 "error": e["msg"]} for e in errors]

    def invalid_answer(request: Request, fields: list[dict[str, str]]) -> Response:
        text = "; ".join(f"{f['field']}: {f['error']}" for f in fields)
        record(request, "refused", "invalid request: " + text, 422)
        if _is_api(request):
            return JSONResponse({"error": "invalid request", "fields": fields}, status_code=422)
        return PlainTextResponse("invalid request: " + text, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return invalid_answer(request, invalid_fields(exc.errors()))

    @app.exception_handler(ValidationError)
    async def invalid_model(request: Request, exc: ValidationError) -> Response:
        return invalid_answer(request, invalid_fields(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = str(exc.detail)
        if message == "There was an error parsing the body":  # FastAPI's words for a JSON body it cannot read
            message = "the request's body cannot be read as JSON"
        record(request, "refused", message, exc.status_code)
        if _is_api(request):
            return JSONResponse({"error": message, "hint": None}, status_code=exc.status_code)
        return PlainTextResponse(message, status_code=exc.status_code)

    @app.exception_handler(RecursionError)
    async def too_deep(request: Request, exc: RecursionError) -> Response:
        message = "the request nests too deep"
        record(request, "refused", message, 400)
        if _is_api(request):
            return JSONResponse({"error": message, "hint": "send a flat document"}, status_code=400)
        return PlainTextResponse(message, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        ref = uuid.uuid4().hex[:8]
        log.exception("error %s on %s %s", ref, request.method, request.url.path)
        message = f"the console failed on this request (reference {ref} in its log)"
        record(request, "failed", message, 500)
        if _is_api(request):
            return JSONResponse({"error": message, "hint": None}, status_code=500)
        return PlainTextResponse(message, status_code=500)

    @app.exception_handler(KctlError)
    async def kctl_error(request: Request, exc: KctlError) -> Response:
        status = 400 if exc.exit_code == 2 else 502
        record(request, "failed", exc.message, status)
        if _is_api(request):
            return JSONResponse({"error": exc.message, "hint": exc.hint}, status_code=status)
        found = _session(request)
        return page(request, "error.html", Ctx(*found) if found else None, status, message=exc.message,
                    hint=exc.hint, title="Not done")

    # ----- login -------------------------------------------------------------------------------------------

    def _login(request: Request, username: str, password: str) -> tuple[User | None, float]:
        """Runs in a thread (argon2 is slow on purpose): never on the event loop.

        What it costs the audit log: anyone may try, so a failed attempt counts against its address's budget as
        any request without a session; an attempt refused unchecked while locked is only counted (the next
        record of the address says how many); the failure that sets a lock is always written (the lockout)."""
        p = _open_record(request, "login")
        p.user, p.anonymous = username, True
        addr = client_of(request)
        keys = (f"user:{username}", f"addr:{addr}")
        allowed, wait = console.guard.attempt(*keys)
        if not allowed:
            p.written = True
            console.audit.locked_attempt(addr)
            return None, wait
        user = console.users.verify(username, password) if len(username) <= 64 else None
        if user is None:
            message = "wrong name or password"
            if wait > 0:
                what = " and ".join(w for k, w in zip(keys, ("the name", "the address"), strict=True)
                                    if console.guard.wait_seconds(k) > 0)
                message += f"; {what} locked for {math.ceil(wait)} s (attempts until then are refused unchecked)"
                p.always = True
            _write(console.audit, p, "refused", message)
            return None, wait
        console.guard.succeeded(keys[0], refund=keys[1:])
        _write(console.audit, p, "done")
        return user, 0.0

    def _set_cookie(resp: Response, session: Session) -> None:
        resp.set_cookie(COOKIE, session.token, httponly=True, samesite="strict", secure=console.secure_cookies,
                        path="/")

    def _open(user: User) -> Session:
        return console.sessions.open(user.name, user.fingerprint())

    @app.post("/api/login")
    def api_login(request: Request, body: LoginBody) -> Response:
        user, wait = _login(request, body.username, body.password)
        if user is None:
            headers = {"Retry-After": str(int(wait + 0.999))} if wait > 0 else {}
            return JSONResponse({"error": "wrong name or password" if not headers else
                                 f"too many failed logins: wait {math.ceil(wait)} s"},
                                status_code=429 if headers else 401, headers=headers)
        s = _open(user)
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
        username, password = str(form.get("username") or "")[:1024], str(form.get("password") or "")[:1024]
        nxt = _safe_next(str(form.get("next") or "/"))
        if not same(str(form.get("csrf") or ""), request.cookies.get(LOGIN_COOKIE)):
            p = _open_record(request, "login")
            p.user, p.anonymous = username or None, True
            _write(console.audit, p, "refused", "missing or wrong CSRF token")
            return page(request, "login.html", None, 403, next=nxt, login_csrf=request.cookies.get(LOGIN_COOKIE),
                        error="the form expired: try again")
        user, wait = await run_in_threadpool(_login, request, username, password)
        if user is None:
            error = f"too many failed logins: wait {math.ceil(wait)} s" if wait > 0 else "wrong name or password"
            return page(request, "login.html", None, 429 if wait > 0 else 401, next=nxt,
                        login_csrf=request.cookies.get(LOGIN_COOKIE), error=error)
        s = _open(user)
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

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:  # browsers ask for it whatever the page links: no 404 in their console
        return Response((HERE / "static" / "favicon.svg").read_bytes(), media_type="image/svg+xml",
                        headers={"Cache-Control": "public, max-age=86400"})

    # ----- clusters ----------------------------------------------------------------------------------------

    def visible(ctx: Ctx) -> list[Entry]:
        return [e for e in console.registry.entries() if authz.may(ctx.user, "see", authz.Cluster(e.name))]

    def cards(ctx: Ctx) -> list[dict[str, Any]]:
        entries = visible(ctx)
        out = ops.cluster_cards(entries)
        by_name = {e.name: e for e in entries}
        for c in out:
            e = by_name.get(str(c.get("name")))
            if e is None:
                continue
            if authz.sees_paths(ctx.user):
                if e.detail:
                    c["error"] = e.detail
                continue
            c.pop("path", None)  # a file on the console's host
            for k, v in c.items():  # an error of the cluster's own may name its directory
                if isinstance(v, str):
                    c[k] = _no_paths(v, e)
        return out

    @app.get("/api/clusters")
    def api_clusters(ctx: Ctx = read) -> list[dict[str, Any]]:
        return cards(ctx)

    @app.get("/", response_class=HTMLResponse)
    def clusters_page(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "clusters.html", ctx, cards=cards(ctx), title="Clusters")

    @app.get("/clusters/cards", response_class=HTMLResponse)
    def cluster_cards_fragment(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "_cards.html", ctx, cards=cards(ctx))

    def cluster_doc(ctx: Ctx) -> dict[str, Any]:
        doc = ops.cluster_detail(_readable(ctx))
        name = ctx.entry.name  # type: ignore[union-attr]
        for k in ("under_replicated", "offline"):
            doc[k] = authz.visible_partitions(ctx.user, name, doc.get(k) or [])
        return doc

    @app.get("/api/clusters/{cluster}")
    def api_cluster(ctx: Ctx = read) -> dict[str, Any]:
        return cluster_doc(ctx)

    @app.get("/clusters/{cluster}", response_class=HTMLResponse)
    def cluster_page(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "cluster.html", ctx, doc=cluster_doc(ctx), title=f"{ctx.entry.name} · cluster")  # type: ignore[union-attr]

    # ----- topics ------------------------------------------------------------------------------------------

    def topic_rows(ctx: Ctx, internal: bool) -> list[dict[str, Any]]:
        name = ctx.entry.name  # type: ignore[union-attr]

        def keep(topic: str) -> bool:
            return authz.may(ctx.user, "see", authz.Topic(name, topic))

        return [t for t in ops.topic_list(_readable(ctx), internal, keep) if keep(str(t["name"]))]

    @app.get("/api/clusters/{cluster}/topics")
    def api_topics(internal: bool = False, ctx: Ctx = read) -> list[dict[str, Any]]:
        return topic_rows(ctx, internal)

    @app.get("/clusters/{cluster}/topics", response_class=HTMLResponse)
    def topics_page(request: Request, q: str = "", internal: bool = False, ctx: Ctx = read) -> Response:
        rows = [t for t in topic_rows(ctx, internal) if q.lower() in t["name"].lower()]
        return page(request, "topics.html", ctx, topics=rows, q=q, internal=internal, errors={}, form={},
                    title=f"topics · {ctx.entry.name}")  # type: ignore[union-attr]

    def topic_title(ctx: Ctx, topic: str) -> str:
        return f"{topic} · topic · {ctx.entry.name}"  # type: ignore[union-attr]

    @app.get("/api/clusters/{cluster}/topics/{topic}")
    def api_topic(topic: str, ctx: Ctx = read) -> dict[str, Any]:
        return ops.topic_detail(_readable(ctx), topic)

    @app.get("/clusters/{cluster}/topics/{topic}", response_class=HTMLResponse)
    def topic_page(request: Request, topic: str, ctx: Ctx = read) -> Response:
        return page(request, "topic.html", ctx, doc=ops.topic_detail(_readable(ctx), topic), error=None,
                    title=topic_title(ctx, topic))

    # ----- consumer groups ---------------------------------------------------------------------------------

    def group_rows(ctx: Ctx) -> list[dict[str, Any]]:
        name = ctx.entry.name  # type: ignore[union-attr]
        rows = ops.group_list(_readable(ctx), with_topics=bool(ctx.user.topic_prefixes))
        return [{k: v for k, v in g.items() if k != "topics"} for g in rows
                if authz.may(ctx.user, "see", authz.Group(name, str(g["group"]), _topics(g.get("topics"))))]

    def group_doc(ctx: Ctx, group: str) -> dict[str, Any]:
        """The group's detail, refused as missing when the user may not see it (the one check of a group)."""
        doc = ops.group_detail(_readable(ctx), group)
        topics = None if doc is None else tuple(sorted({str(p["topic"]) for p in doc.get("partitions") or []}))
        if doc is None:
            raise Refused(404, f"no group {group!r} in cluster {ctx.entry.name!r}")  # type: ignore[union-attr]
        authz.require(ctx.user, "see", authz.Group(ctx.entry.name, group, topics))  # type: ignore[union-attr]
        return doc

    @app.get("/api/clusters/{cluster}/groups")
    def api_groups(ctx: Ctx = read) -> list[dict[str, Any]]:
        return group_rows(ctx)

    @app.get("/clusters/{cluster}/groups", response_class=HTMLResponse)
    def groups_page(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "groups.html", ctx, groups=group_rows(ctx),
                    title=f"groups · {ctx.entry.name}")  # type: ignore[union-attr]

    @app.get("/api/clusters/{cluster}/groups/{group}")
    def api_group(group: str, ctx: Ctx = read) -> dict[str, Any]:
        return group_doc(ctx, group)

    @app.get("/clusters/{cluster}/groups/{group}", response_class=HTMLResponse)
    def group_page(request: Request, group: str, ctx: Ctx = read) -> Response:
        doc = group_doc(ctx, group)
        ev = doc.get("evaluation")
        marks = (ev or {}).get("by_partition") or {}
        lag = {"group": group, "type": doc.get("type"), "state": doc["state"], "total_lag": doc["total_lag"],
               "status": ev["status"] if ev else None,
               "partitions": [{**p, "status": marks.get(f"{p['topic']}-{p['partition']}")} for p in doc["partitions"]]}
        hist = ops.group_history(ctx.spec, group, 3600)
        chart = charts.line([(r["ts_ms"] / 1000, r["total_lag"]) for r in hist], title="total lag, last hour")
        topics = sorted({p["topic"] for p in doc["partitions"]})
        return page(request, "group.html", ctx, doc=doc, lag=lag, chart=chart, topics=topics,
                    title=f"{group} · group · {ctx.entry.name}")  # type: ignore[union-attr]

    # ----- audit log -----------------------------------------------------------------------------------------

    def audit_rows(ctx: Ctx, user: str | None, cluster: str | None, action: str | None, result: str | None,
                   limit: int) -> list[dict[str, Any]]:
        users = console.users.users()
        return console.audit.query(user=user, cluster=cluster, action=action, result=result, limit=limit,
                                   keep=lambda r: authz.audit_visible(ctx.user, r, users))

    @app.get("/api/audit")
    def api_audit(user: str | None = None, cluster: str | None = None, action: str | None = None,
                  result: str | None = None, limit: int = 200, ctx: Ctx = read) -> list[dict[str, Any]]:
        return audit_rows(ctx, user, cluster, action, result, max(1, min(limit, 10_000)))

    @app.get("/audit", response_class=HTMLResponse)
    def audit_page(request: Request, user: str | None = None, cluster: str | None = None,
                   action: str | None = None, result: str | None = None, ctx: Ctx = read) -> Response:
        rows = audit_rows(ctx, user or None, cluster or None, action or None, result or None, 500)
        return page(request, "audit.html", ctx, rows=rows, title="Audit log",
                    filters={"user": user or "", "cluster": cluster or "", "action": action or "",
                             "result": result or ""})

    @app.get("/audit.csv")
    def audit_csv(user: str | None = None, cluster: str | None = None, action: str | None = None,
                  result: str | None = None, ctx: Ctx = read) -> Response:
        rows = audit_rows(ctx, user or None, cluster or None, action or None, result or None, AUDIT_CSV_ROWS)
        return PlainTextResponse(to_csv(rows), media_type="text/csv",
                                 headers={"Content-Disposition": 'attachment; filename="kctl-console-audit.csv"'})

    # ----- console users (admins, each within their own scope) ---------------------------------------------

    def user_rows(ctx: Ctx) -> list[dict[str, Any]]:
        authz.require(ctx.user, "see", authz.Console(), Role.admin)
        return [u.public() for u in console.users.users().values()
                if authz.may(ctx.user, "see", authz.ConsoleUser.of(u), Role.admin)]

    @app.get("/api/users")
    def api_users(ctx: Ctx = read) -> list[dict[str, Any]]:
        return user_rows(ctx)

    @app.get("/users", response_class=HTMLResponse)
    def users_page(request: Request, ctx: Ctx = read) -> Response:
        return page(request, "users.html", ctx, users=user_rows(ctx), error=None, title="Console users")


    helpers = views.Helpers(page=page, fragment=fragment, read=read, guard=guard, done=_done, readable=_readable,
                            group_doc=group_doc, refusal=refusal, topic_rows=topic_rows, user_rows=user_rows)
    views.register(app, helpers)
    actions.register(app, helpers)  # every change: the table's rows, each as a JSON route and a form route
    return app


AUDIT_CSV_ROWS = 50_000


def _topics(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(t) for t in value)


def _form(default: Any = ...) -> Any:
    from fastapi import Form

    return Form(default)


def _utc(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _readable(ctx: Ctx) -> Any:
    if ctx.entry is None:
        raise Refused(409, "no cluster named")
    if ctx.entry.spec is None:
        raise Refused(409, unreadable(ctx.user, ctx.entry))
    return ctx.entry.spec


def _no_paths(text: str, entry: Entry) -> str:
    """``text`` without the cluster's directories (its kctl.yaml's, its state dir): for users who do not see
    the paths."""
    dirs = [str(entry.path.parent)]
    if entry.spec is not None and entry.spec.state_dir:
        dirs.append(str(entry.spec.state_dir))
    for d in sorted((d for d in dirs if len(d) > 1), key=len, reverse=True):
        text = text.replace(d, "…")
    return text


def _safe_next(nxt: str) -> str:
    """Only a path on this console (no //host, no scheme): the login page never sends a user elsewhere."""
    return nxt if nxt.startswith("/") and not nxt.startswith("//") and "\\" not in nxt else "/"


def _words(text: str) -> list[str]:
    return [w for w in text.replace(",", " ").split() if w]
