"""The console's reads beyond clusters, topics and groups: browsing records, reassignment plans and status
(followed live), offset-reset previews, a group's live lag and history, the secured profile's SCRAM users and
ACLs, alerts and broker figures. Every read behind ``read`` (a session, the path's cluster and topic seen), and
whatever else it shows filtered by :func:`kctl.console.authz.decide`. The changes are in
:mod:`kctl.console.actions` (the table)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from kctl.console import authz, charts, ops
from kctl.console.authz import Refused
from kctl.console.config import masked
from kctl.console.users import Role
from kctl.errors import KctlError
from kctl.kafka.groups import parse_datetime
from kctl.model.spec import ClusterSpec
from kctl.wait import Deadline, apause_until

LIVE_SECONDS = 2.0  # how often a live part (SSE) sends its fragment
LIVE_MAX_SECONDS = 3600.0  # a live stream ends after this; the page's htmx reconnects


class OffsetsBody(BaseModel):
    topic: str = Field(..., min_length=1, max_length=249)
    strategy: str = Field(..., pattern="^(earliest|latest|offset|datetime)$")
    value: int | None = Field(None, ge=0)
    datetime: str | None = Field(None, max_length=64)


@dataclass
class Helpers:
    """What app.py lends the views and the actions (they do not import app.py: the layers point one way)."""

    page: Callable[..., HTMLResponse]
    fragment: Callable[..., str]
    read: Any  # Depends(Reader())
    guard: Callable[..., Any]  # (role, action, needs_spec=True)
    done: Callable[..., Any]
    readable: Callable[[Any], ClusterSpec]
    group_doc: Callable[[Any, str], dict[str, Any]]  # the group's detail, or 404 when the user may not see it
    refusal: Callable[..., str]  # a form's refusal audited; its message for the page
    topic_rows: Callable[[Any, bool], list[dict[str, Any]]]  # the topics the user sees
    user_rows: Callable[[Any], list[dict[str, Any]]]  # the console users the admin manages


def ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise KctlError(f"{what}: whole numbers separated by commas, not {text!r}") from None


def names(text: str) -> list[str]:
    return [x for x in text.replace(",", " ").split() if x]


def register(app: FastAPI, h: Helpers) -> None:
    console = app.state.console
    page, read, readable = h.page, h.read, h.readable

    # ----- messages --------------------------------------------------------------------------------------

    def browse(ctx: Any, topic: str, q: dict[str, str]) -> dict[str, Any]:
        def num(k: str) -> int | None:
            v = (q.get(k) or "").strip()
            if not v:
                return None
            try:
                return int(v)
            except ValueError:
                raise Refused(422, f"{k}: a whole number, not {v[:40]!r}") from None

        since_ms = None
        if (q.get("since") or "").strip():
            since_ms = parse_datetime(q["since"].strip())
        mode = q.get("from") or ("offset" if num("offset") is not None else "since" if since_ms else "newest")
        limit = num("limit") or 50
        return ops.browse(readable(ctx), topic, masked=masked(console.config.masking, topic, ctx.user.role.name),
                          partition=num("partition"), newest=(num("newest") or limit) if mode == "newest" else None,
                          offset=num("offset") if mode == "offset" else None,
                          since_ms=since_ms if mode == "since" else None, limit=limit,
                          search=(q.get("q") or "").strip() or None)

    @app.get("/api/clusters/{cluster}/topics/{topic}/messages")
    def api_messages(request: Request, topic: str, ctx: Any = read) -> dict[str, Any]:
        return browse(ctx, topic, dict(request.query_params))

    @app.get("/clusters/{cluster}/topics/{topic}/messages", response_class=HTMLResponse)
    def messages_page(request: Request, topic: str, ctx: Any = read) -> Response:
        q = dict(request.query_params)
        status = 200
        try:
            doc, error = browse(ctx, topic, q), None
        except (Refused, KctlError) as exc:
            doc, error = None, exc.message
            status = exc.status if isinstance(exc, Refused) else 422
        return page(request, "messages.html", ctx, status, topic=topic, doc=doc, q=q,
                    error=error, produced=q.get("produced"), title=f"messages of {topic} · {ctx.entry.name}")

    # ----- reassignment ----------------------------------------------------------------------------------

    def plan(ctx: Any, brokers: str, topics: str) -> dict[str, Any]:
        listed = names(topics)
        for t in listed:
            authz.require(ctx.user, "see", authz.Topic(ctx.entry.name, t))
        authz.require(ctx.user, "change", authz.Reassignment(ctx.entry.name, tuple(listed) or None))
        return ops.reassign_plan(readable(ctx), ints(brokers, "brokers"), listed or None)

    def status(ctx: Any) -> dict[str, Any]:
        """What moves, of the topics the user sees; the console's job when it moves only topics of theirs."""
        st = ops.reassign_status(readable(ctx))
        name = ctx.entry.name
        if ctx.user.topic_prefixes:
            everything = len(st["moving"])
            st["moving"] = authz.visible_partitions(ctx.user, name, st["moving"])
            left = [m.get("bytes_left") for m in st["moving"]]
            st["bytes_left"] = None if not left or None in left else sum(left)
            st["active"] = bool(st["moving"])
            if len(st["moving"]) != everything:  # the whole move's time left tells of partitions they may not see
                st["seconds_left"] = st["time_left"] = None
        job = console.jobs.get(name)
        seen = job is not None and all(authz.may(ctx.user, "see", authz.Topic(name, t)) for t in job.topics)
        st["job"] = job.public() if job and seen else None
        if job and seen and not authz.may_name_user(ctx.user, job.user, console.users.users()):
            st["job"]["user"] = "another console user"
        return st

    @app.get("/api/clusters/{cluster}/reassignment/plan")
    def api_plan(brokers: str, topics: str = "", ctx: Any = read) -> dict[str, Any]:
        return plan(ctx, brokers, topics)

    @app.get("/api/clusters/{cluster}/reassignment")
    def api_reassignment(ctx: Any = read) -> dict[str, Any]:
        return status(ctx)

    @app.get("/clusters/{cluster}/reassignment", response_class=HTMLResponse)
    def reassignment_page(request: Request, brokers: str = "", topics: str = "", ctx: Any = read) -> Response:
        doc, error = None, None
        if brokers.strip():
            try:
                doc = plan(ctx, brokers, topics)
            except (Refused, KctlError) as exc:
                error = exc.message
        import concurrent.futures as cf

        with cf.ThreadPoolExecutor(max_workers=1) as pool:  # the metadata while ZooKeeper is read
            brokers_now = pool.submit(ops.registered_brokers, readable(ctx))
            rs = status(ctx)
        return page(request, "reassignment.html", ctx, plan=doc, error=error, brokers=brokers, topics=topics,
                    registered=brokers_now.result(), rs=rs, title=f"reassignment · {ctx.entry.name}")

    @app.get("/clusters/{cluster}/reassignment/events")
    async def reassignment_events(request: Request, ctx: Any = read) -> StreamingResponse:
        readable(ctx)  # a cluster that cannot be read is refused before the stream starts (no status after it)

        def fragment() -> str:
            return h.fragment(request, "_reassign_status.html", ctx, rs=status(ctx))

        return _sse(request, "progress", fragment)

    # ----- consumer groups: offsets preview, history, live lag --------------------------------------------

    @app.get("/api/clusters/{cluster}/groups/{group}/offsets")
    def api_offsets_preview(request: Request, group: str, topic: str, strategy: str, value: int | None = None,
                            datetime: str | None = None, ctx: Any = read) -> dict[str, Any]:  # noqa: A002
        body = OffsetsBody(topic=topic, strategy=strategy, value=value, datetime=datetime)
        h.group_doc(ctx, group)
        authz.require(ctx.user, "see", authz.Topic(ctx.entry.name, body.topic))
        return ops.reset_offsets(readable(ctx), group, body.topic, body.strategy, body.value, body.datetime, False)

    @app.get("/api/clusters/{cluster}/groups/{group}/history")
    def api_group_history(group: str, since: float = 3600, ctx: Any = read) -> list[dict[str, Any]]:
        h.group_doc(ctx, group)
        return ops.group_history(readable(ctx), group, max(60.0, min(since, 7 * 86400.0)))

    @app.get("/clusters/{cluster}/groups/{group}/events")
    async def group_events(request: Request, group: str, ctx: Any = read) -> StreamingResponse:
        await run_in_threadpool(h.group_doc, ctx, group)

        def fragment() -> str:
            doc = ops.group_lag(readable(ctx), group)
            doc["partitions"] = authz.visible_partitions(ctx.user, ctx.entry.name, doc["partitions"])
            hist = ops.group_history(readable(ctx), group, 3600)
            return h.fragment(request, "_group_lag.html", ctx, lag=doc,
                              chart=charts.line([(r["ts_ms"] / 1000, r["total_lag"]) for r in hist],
                                                title="total lag, last hour"))

        return _sse(request, "lag", fragment)

    # ----- the secured profile: SCRAM users and ACLs (admins) -----------------------------------------------

    def acl_rows(ctx: Any) -> list[dict[str, Any]]:
        authz.require(ctx.user, "see", authz.Console(), Role.admin)
        return [a for a in ops.acls(readable(ctx)) if authz.may(ctx.user, "see", acl_of(ctx.entry.name, a))]

    @app.get("/api/clusters/{cluster}/security/users")
    def api_scram_users(ctx: Any = read) -> list[dict[str, Any]]:
        authz.require(ctx.user, "see", authz.ScramUser(ctx.entry.name, "*"), Role.admin)
        return ops.scram_users(readable(ctx))

    @app.get("/api/clusters/{cluster}/security/acls")
    def api_acls(ctx: Any = read) -> list[dict[str, Any]]:
        return acl_rows(ctx)

    @app.get("/clusters/{cluster}/security", response_class=HTMLResponse)
    def security_page(request: Request, ctx: Any = read) -> Response:
        authz.require(ctx.user, "see", authz.Console(), Role.admin)
        spec = readable(ctx)
        title = f"security · {ctx.entry.name}"
        if not spec.security.enabled:
            return page(request, "security.html", ctx, secured=False, users=[], acls=[], error=None, title=title,
                        scram_allowed=False)
        scram_allowed = authz.may(ctx.user, "see", authz.ScramUser(ctx.entry.name, "*"), Role.admin)
        return page(request, "security.html", ctx, secured=True, users=ops.scram_users(spec) if scram_allowed else [],
                    acls=acl_rows(ctx), error=None, title=title, scram_allowed=scram_allowed)

    # ----- alerts and broker figures (the monitor's history) -------------------------------------------------

    def alerts(ctx: Any) -> dict[str, Any] | None:
        """The monitor's alerts; for a user limited to topic prefixes, a group's only when they see the group
        (its details name its topic-partitions)."""
        doc = ops.alerts(readable(ctx))
        if doc is None or not ctx.user.topic_prefixes:
            return doc
        mine: dict[str, bool] = {}

        def keep(a: dict[str, Any]) -> bool:
            subject = str(a.get("subject", ""))
            if not subject.startswith("group "):
                return True
            g = subject[len("group "):]
            if g not in mine:
                try:
                    h.group_doc(ctx, g)
                    mine[g] = True
                except Refused:
                    mine[g] = False
            return mine[g]

        return {"open": [a for a in doc["open"] if keep(a)], "recent": [r for r in doc["recent"] if keep(r)]}

    @app.get("/api/clusters/{cluster}/alerts")
    def api_alerts(ctx: Any = read) -> dict[str, Any]:
        doc = alerts(ctx)
        if doc is None:
            raise Refused(404, f"no monitor history for {ctx.entry.name}", "start one: `kctl monitor start --detach`")
        return doc

    @app.get("/clusters/{cluster}/alerts", response_class=HTMLResponse)
    def alerts_page(request: Request, ctx: Any = read) -> Response:
        return page(request, "alerts.html", ctx, doc=alerts(ctx), title=f"alerts · {ctx.entry.name}")

    @app.get("/api/clusters/{cluster}/brokers")
    def api_brokers(since: float = 3600, ctx: Any = read) -> dict[str, Any]:
        doc = ops.broker_history(readable(ctx), max(60.0, min(since, 7 * 86400.0)))
        if doc is None:
            raise Refused(404, f"no monitor history for {ctx.entry.name}", "start one: `kctl monitor start --detach`")
        return {"latest": doc["latest"], "reports": doc["reports"],
                "series": {str(b): dict(per.items()) for b, per in doc["series"].items()}}

    @app.get("/clusters/{cluster}/brokers", response_class=HTMLResponse)
    def brokers_page(request: Request, ctx: Any = read) -> Response:
        doc = ops.broker_history(readable(ctx))
        drawn: dict[int, list[Any]] = {}
        if doc is not None:
            for b, per in sorted(doc["series"].items()):
                drawn[b] = [charts.line(per[k], title=f"broker {b}: {title}", unit=unit)
                            for k, title, unit in ops.BROKER_CHARTS]
        return page(request, "brokers.html", ctx, doc=doc, drawn=drawn, title=f"brokers · {ctx.entry.name}")


def acl_of(cluster: str, row: dict[str, Any]) -> authz.Acl:
    """An ACL as Kafka lists it, as the resource authz decides on."""
    kind = str(row.get("resource_type", "")).lower()
    kind = "cluster" if kind in ("broker", "cluster") else kind
    return authz.Acl(cluster, kind, str(row.get("resource") or ""), str(row.get("pattern", "")).upper() == "PREFIXED")


def _sse(request: Request, event: str, fragment: Callable[[], str]) -> StreamingResponse:
    """Server-sent events: ``event`` with the fragment's HTML now and every LIVE_SECONDS, until the page goes."""

    async def stream() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        end = Deadline(LIVE_MAX_SECONDS, clock=loop.time)
        while not end.passed() and not await request.is_disconnected():
            started = loop.time()
            try:
                html = await run_in_threadpool(fragment)
            except (KctlError, Refused) as exc:
                html = f'<p class="error">{_escape(exc.message)} at {datetime.now(timezone.utc):%H:%M:%S} UTC</p>'
            yield f"event: {event}\n" + "".join(f"data: {line}\n" for line in html.splitlines()) + "\n"
            await apause_until(started + LIVE_SECONDS)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _escape(text: str) -> str:
    import html

    return html.escape(text)
