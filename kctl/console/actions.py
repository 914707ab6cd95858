"""The console's operations beyond topics: browsing and producing records, preferred elections,
reassignments followed live, consumer-group offsets with a preview, and the live lag of a group. Same rules as
kctl/console/app.py: every change behind ``guard(role, action)``, every read behind ``read``, pages and
``/api/`` calling the same functions of :mod:`kctl.console.ops`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from kctl.console import authz, charts, ops
from kctl.console.config import masked
from kctl.console.users import Role
from kctl.errors import KctlError
from kctl.spec import ClusterSpec

LIVE_SECONDS = 2.0  # how often a live part (SSE) sends its fragment
LIVE_MAX_SECONDS = 3600.0  # a live stream ends after this; the page's htmx reconnects


class ProduceBody(BaseModel):
    value: str | None = Field(None, max_length=1_000_000)
    key: str | None = Field(None, max_length=10_000)
    headers: dict[str, str] = Field(default_factory=dict)
    partition: int | None = Field(None, ge=0)


class ElectionBody(BaseModel):
    topic: str | None = None


class ReassignBody(BaseModel):
    plan: dict[str, Any]  # Kafka's reassignment JSON: {"version": 1, "partitions": [...]}
    throttle: int | None = Field(None, ge=1024, le=10 * 1024 ** 4, description="bytes/s for the replicas that move")


class ConfigsBody(BaseModel):
    set: dict[str, str] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)


class ScramUserBody(BaseModel):
    name: str = Field(..., min_length=1, max_length=64)
    password: str | None = Field(None, min_length=8, max_length=1024, description="default: generated, kept 0600"
                                                                                   " in the state dir")


class AclBody(BaseModel):
    principal: str = Field(..., pattern="^User:.+")
    permission: str = Field("ALLOW", pattern="^(ALLOW|DENY|allow|deny)$")
    operation: str
    topic: str | None = None
    group: str | None = None
    cluster: bool = False
    prefixed: bool = False


class OffsetsBody(BaseModel):
    topic: str
    strategy: str = Field(..., pattern="^(earliest|latest|offset|datetime)$")
    value: int | None = Field(None, ge=0)
    datetime: str | None = None


def _ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise KctlError(f"{what}: whole numbers separated by commas, not {text!r}") from None


def _names(text: str) -> list[str]:
    return [x for x in text.replace(",", " ").split() if x]


@dataclass
class Helpers:
    """What app.py lends these routes (this module does not import app.py: the layers point one way)."""

    page: Callable[..., HTMLResponse]
    fragment: Callable[..., str]
    read: Any  # Depends(Reader())
    guard: Callable[[Role, str], Any]
    done: Callable[..., Any]
    Refused: type[Any]  # noqa: N815 - the exception class's own name
    readable: Callable[[Any], ClusterSpec]
    group_doc: Callable[[Any, str], dict[str, Any]]  # the group's detail, or 404 when the user may not see it
    refusal: Callable[..., str]  # a form's refusal audited; its message for the page


def register(app: FastAPI, h: Helpers) -> None:
    """Add the routes, with app.py's helpers."""
    console = app.state.console
    page, read, guard, done, Refused, readable = h.page, h.read, h.guard, h.done, h.Refused, h.readable

    def scope_topics(ctx: Any, topics: list[str] | None, what: str = "") -> None:
        """Partitions moved or elected: each named topic must be one the user sees (404 otherwise), and "every
        partition" (no names) is for a user without a topic limit (authz decides both)."""
        for t in topics or []:
            authz.require(ctx.user, "see", authz.Topic(ctx.entry.name, t))
        authz.require(ctx.user, "change", authz.Reassignment(ctx.entry.name, tuple(topics) if topics else None))

    # ----- messages --------------------------------------------------------------------------------------

    def browse(ctx: Any, topic: str, q: dict[str, str]) -> dict[str, Any]:
        def num(k: str) -> int | None:
            v = (q.get(k) or "").strip()
            if not v:
                return None
            try:
                return int(v)
            except ValueError:
                raise Refused(422, f"{k}: a whole number, not {v!r}") from None

        since_ms = None
        if (q.get("since") or "").strip():
            from kctl.kafka.groups import parse_datetime

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
        try:
            doc, error = browse(ctx, topic, q), None
        except (Refused, KctlError) as exc:
            doc, error = None, exc.message
        return page(request, "messages.html", ctx, 200 if error is None else 422, topic=topic, doc=doc, q=q,
                    error=error, produced=q.get("produced"), title=f"messages of {topic} · {ctx.entry.name}")

    def produce(request: Request, ctx: Any, topic: str, body: ProduceBody) -> dict[str, Any]:
        params = {"key": body.key, "partition": body.partition, "headers": sorted(body.headers),
                  "value_bytes": len((body.value or "").encode())}
        return done(request, ctx, "topic.produce", topic, params,  # type: ignore[no-any-return]
                    lambda: ops.produce(ctx.spec, topic, body.value, body.key, body.headers, body.partition))

    @app.post("/api/clusters/{cluster}/topics/{topic}/messages", status_code=201)
    def api_produce(request: Request, topic: str, body: ProduceBody,
                    ctx: Any = guard(Role.operator, "topic.produce")) -> dict[str, Any]:
        return produce(request, ctx, topic, body)

    @app.post("/clusters/{cluster}/topics/{topic}/messages")
    async def form_produce(request: Request, topic: str, ctx: Any = guard(Role.operator, "topic.produce")) -> Response:
        form = await request.form()
        headers: dict[str, str] = {}
        for line in str(form.get("headers") or "").splitlines():
            if line.strip():
                k, sep, v = line.partition("=")
                if not sep:
                    return page(request, "messages.html", ctx, 422, topic=topic, doc=None, q={}, produced=None,
                                title=f"messages of {topic} · {ctx.entry.name}",
                                error=f"headers: {line!r} is not key=value")
                headers[k.strip()] = v.strip()
        try:
            body = ProduceBody(value=str(form.get("value") or ""), key=str(form.get("key") or "") or None,
                               headers=headers, partition=str(form.get("partition") or "").strip() or None)
        except ValidationError as exc:
            return page(request, "messages.html", ctx, 422, topic=topic, doc=None, q={}, produced=None,
                                title=f"messages of {topic} · {ctx.entry.name}",
                        error="; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors()))
        res = await run_in_threadpool(produce, request, ctx, topic, body)
        where = f"partition {res['partition']} offset {res['offset']}"
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/topics/{quote(topic)}/messages?"
                                f"partition={res['partition']}&offset={res['offset']}&produced={quote(where)}",
                                status_code=303)

    # ----- preferred election ----------------------------------------------------------------------------

    def elect(request: Request, ctx: Any, topic: str | None) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            scope_topics(ctx, [topic] if topic else None)
            return ops.elect(ctx.spec, topic)

        return done(request, ctx, "leaders.elect", topic or "all partitions", {}, run)  # type: ignore[no-any-return]

    @app.post("/api/clusters/{cluster}/election")
    def api_elect(request: Request, body: ElectionBody, ctx: Any = guard(Role.operator, "leaders.elect")) -> Any:
        return elect(request, ctx, body.topic)

    @app.post("/clusters/{cluster}/election", response_class=HTMLResponse)
    async def form_elect(request: Request, ctx: Any = guard(Role.operator, "leaders.elect")) -> Response:
        topic = str((await request.form()).get("topic") or "").strip() or None
        res = await run_in_threadpool(elect, request, ctx, topic)
        return page(request, "election.html", ctx, result=res, title=f"preferred election · {ctx.entry.name}")

    # ----- reassignment ----------------------------------------------------------------------------------

    def plan(ctx: Any, brokers: str, topics: str) -> dict[str, Any]:
        names = _names(topics)
        scope_topics(ctx, names, "a reassignment")
        return ops.reassign_plan(readable(ctx), _ints(brokers, "brokers"), names or None)

    def status(ctx: Any) -> dict[str, Any]:
        """What moves, of the topics the user sees; the console's job when it moves only topics of theirs."""
        st = ops.reassign_status(readable(ctx))
        name = ctx.entry.name
        if ctx.user.topic_prefixes:
            st["moving"] = authz.visible_partitions(ctx.user, name, st["moving"])
            left = [m.get("bytes_left") for m in st["moving"]]
            st["bytes_left"] = None if not left or None in left else sum(left)
            st["active"] = bool(st["moving"])
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

    def execute(request: Request, ctx: Any, body: ReassignBody) -> dict[str, Any]:
        from kctl.kafka import balance

        def start() -> dict[str, Any]:
            target = balance.parse_kafka_json(json.dumps(body.plan), "the plan")
            scope_topics(ctx, sorted({t for t, _ in target}), "a reassignment")
            job = console.jobs.start_reassignment(ctx.spec, ctx.user.name, target, body.throttle)
            return {"started": len(target), "job": job.public()}

        listed = body.plan.get("partitions")
        params = {"partitions": len(listed) if isinstance(listed, list) else None, "throttle": body.throttle}
        return done(request, ctx, "reassignment.execute", None, params, start)  # type: ignore[no-any-return]

    @app.post("/api/clusters/{cluster}/reassignment", status_code=202)
    def api_execute(request: Request, body: ReassignBody,
                    ctx: Any = guard(Role.operator, "reassignment.execute")) -> dict[str, Any]:
        return execute(request, ctx, body)

    @app.post("/clusters/{cluster}/reassignment")
    async def form_execute(request: Request, ctx: Any = guard(Role.operator, "reassignment.execute")) -> Response:
        form = await request.form()
        throttle_text = str(form.get("throttle") or "").strip()
        try:
            mb = float(throttle_text) if throttle_text else None
            if mb is not None and not 0 < mb < 10 * 1024 * 1024:  # also nan and inf
                raise ValueError("the throttle is a number of MB/s above 0")
            plan_doc = json.loads(str(form.get("plan") or "{}"))
            body = ReassignBody(plan=plan_doc, throttle=int(mb * 1024 * 1024) if mb is not None else None)
        except (ValueError, ValidationError, RecursionError) as exc:
            raise Refused(422, f"the plan or the throttle is malformed: {str(exc)[:300]}") from None
        await run_in_threadpool(execute, request, ctx, body)
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/reassignment", status_code=303)

    def cancel(request: Request, ctx: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            # Kafka cancels every moving partition at once: only a user who sees each of them cancels
            moving = ops.reassign_status(ctx.spec)["moving"]
            topics = tuple(sorted({authz.topic_of_partition(str(m["partition"])) for m in moving}))
            if not all(authz.may(ctx.user, "see", authz.Topic(ctx.entry.name, t)) for t in topics):
                raise Refused(403, f"partitions of topics outside {ctx.user.name}'s scope are moving too: an"
                                   " admin without a topic limit cancels them")
            return ops.reassign_cancel(ctx.spec)

        return done(request, ctx, "reassignment.cancel", None, {}, run)  # type: ignore[no-any-return]

    @app.delete("/api/clusters/{cluster}/reassignment")
    def api_cancel(request: Request, ctx: Any = guard(Role.operator, "reassignment.cancel")) -> dict[str, Any]:
        return cancel(request, ctx)

    @app.post("/clusters/{cluster}/reassignment/cancel")
    def form_cancel(request: Request, ctx: Any = guard(Role.operator, "reassignment.cancel")) -> Response:
        cancel(request, ctx)
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/reassignment", status_code=303)

    @app.get("/clusters/{cluster}/reassignment/events")
    async def reassignment_events(request: Request, ctx: Any = read) -> StreamingResponse:
        def fragment() -> str:
            return h.fragment(request, "_reassign_status.html", ctx, rs=status(ctx))

        return _sse(request, "progress", fragment)

    # ----- consumer groups: offsets and live lag ------------------------------------------------------------

    def visible_group(ctx: Any, group: str) -> None:
        h.group_doc(ctx, group)

    def offsets(request: Request, ctx: Any, group: str, body: OffsetsBody, execute: bool) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            # the group and the topic, each one the user sees: the preview and the reset decide alike
            h.group_doc(ctx, group)
            authz.require(ctx.user, "see", authz.Topic(ctx.entry.name, body.topic))
            return ops.reset_offsets(readable(ctx), group, body.topic, body.strategy, body.value, body.datetime,
                                     execute)

        if not execute:
            return run()
        return done(request, ctx, "group.reset-offsets", group,  # type: ignore[no-any-return]
                    body.model_dump(), run)

    @app.get("/api/clusters/{cluster}/groups/{group}/offsets")
    def api_offsets_preview(request: Request, group: str, topic: str, strategy: str, value: int | None = None,
                            datetime: str | None = None, ctx: Any = read) -> dict[str, Any]:  # noqa: A002
        body = OffsetsBody(topic=topic, strategy=strategy, value=value, datetime=datetime)
        return offsets(request, ctx, group, body, execute=False)

    @app.post("/api/clusters/{cluster}/groups/{group}/offsets")
    def api_offsets(request: Request, group: str, body: OffsetsBody,
                    ctx: Any = guard(Role.operator, "group.reset-offsets")) -> dict[str, Any]:
        return offsets(request, ctx, group, body, execute=True)

    @app.post("/clusters/{cluster}/groups/{group}/offsets", response_class=HTMLResponse)
    async def form_offsets(request: Request, group: str,
                           ctx: Any = guard(Role.operator, "group.reset-offsets")) -> Response:
        form = await request.form()
        execute_now = form.get("execute") == "yes"
        title = f"offsets of {group} · {ctx.entry.name}"
        try:
            value = str(form.get("value") or "").strip()
            body = OffsetsBody(topic=str(form.get("topic") or ""), strategy=str(form.get("strategy") or ""),
                               value=int(value) if value and form.get("strategy") == "offset" else None,
                               datetime=value if form.get("strategy") == "datetime" else None)
        except (ValueError, ValidationError) as exc:
            return page(request, "offsets.html", ctx, 422, group=group, preview=None, form=form, title=title,
                        error=h.refusal(request, f"invalid request: {str(exc)[:300]}"))
        try:
            res = await run_in_threadpool(offsets, request, ctx, group, body, execute_now)
        except Refused as exc:
            if exc.status == 404:  # a group or topic the user may not see: the answer of one that does not exist
                raise
            return page(request, "offsets.html", ctx, exc.status, group=group, preview=None, form=form, title=title,
                        error=h.refusal(request, exc))
        except KctlError as exc:
            return page(request, "offsets.html", ctx, 409, group=group, preview=None, form=form, title=title,
                        error=h.refusal(request, exc))
        return page(request, "offsets.html", ctx, group=group, preview=res, error=None, form=form, title=title)

    @app.get("/api/clusters/{cluster}/groups/{group}/history")
    def api_group_history(group: str, since: float = 3600, ctx: Any = read) -> list[dict[str, Any]]:
        visible_group(ctx, group)
        return ops.group_history(readable(ctx), group, max(60.0, min(since, 7 * 86400.0)))

    @app.get("/clusters/{cluster}/groups/{group}/events")
    async def group_events(request: Request, group: str, ctx: Any = read) -> StreamingResponse:
        await run_in_threadpool(visible_group, ctx, group)

        def fragment() -> str:
            doc = ops.group_lag(readable(ctx), group)
            hist = ops.group_history(readable(ctx), group, 3600)
            return h.fragment(request, "_group_lag.html", ctx, lag=doc,
                              chart=charts.line([(r["ts_ms"] / 1000, r["total_lag"]) for r in hist],
                                                title="total lag, last hour"))

        return _sse(request, "lag", fragment)


    # ----- topic configs ----------------------------------------------------------------------------------

    def configs(request: Request, ctx: Any, topic: str, body: ConfigsBody) -> dict[str, Any]:
        return done(request, ctx, "topic.config", topic, body.model_dump(),  # type: ignore[no-any-return]
                    lambda: ops.topic_configs(ctx.spec, topic, body.set, body.delete))

    @app.post("/api/clusters/{cluster}/topics/{topic}/configs")
    def api_configs(request: Request, topic: str, body: ConfigsBody,
                    ctx: Any = guard(Role.operator, "topic.config")) -> dict[str, Any]:
        return configs(request, ctx, topic, body)

    @app.post("/clusters/{cluster}/topics/{topic}/configs")
    async def form_configs(request: Request, topic: str, ctx: Any = guard(Role.operator, "topic.config")) -> Response:
        form = await request.form()
        title = f"{topic} · topic · {ctx.entry.name}"
        sets: dict[str, str] = {}
        for line in str(form.get("set") or "").replace(",", "\n").splitlines():
            if line.strip():
                k, sep, v = line.partition("=")
                if not sep or not k.strip():
                    raise Refused(422, f"set: {line.strip()!r} is not key=value")
                sets[k.strip()] = v.strip()
        body = ConfigsBody(set=sets, delete=_names(str(form.get("delete") or "")))
        try:
            await run_in_threadpool(configs, request, ctx, topic, body)
        except Refused as r:
            doc = await run_in_threadpool(ops.topic_detail, ctx.spec, topic)
            return page(request, "topic.html", ctx, r.status, doc=doc, error=r.message, title=title)
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/topics/{quote(topic)}", status_code=303)

    # ----- the secured profile: SCRAM users and ACLs (admins) -----------------------------------------------

    def scram(ctx: Any, name: str = "*") -> authz.ScramUser:
        return authz.ScramUser(ctx.entry.name, name)

    def acl_rows(ctx: Any) -> list[dict[str, Any]]:
        authz.require(ctx.user, "see", authz.Console(), Role.admin)
        return [a for a in ops.acls(readable(ctx)) if authz.may(ctx.user, "see", acl_of(ctx, a))]

    def acl_of(ctx: Any, row: dict[str, Any]) -> authz.Acl:
        kind = str(row.get("resource_type", "")).lower()
        kind = "cluster" if kind in ("broker", "cluster") else kind
        return authz.Acl(ctx.entry.name, kind, str(row.get("resource") or ""),
                         str(row.get("pattern", "")).upper() == "PREFIXED")

    @app.get("/api/clusters/{cluster}/security/users")
    def api_scram_users(ctx: Any = read) -> list[dict[str, Any]]:
        authz.require(ctx.user, "see", scram(ctx), Role.admin)
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
        scram_allowed = authz.may(ctx.user, "see", scram(ctx), Role.admin)
        return page(request, "security.html", ctx, secured=True, users=ops.scram_users(spec) if scram_allowed else [],
                    acls=acl_rows(ctx), error=None, title=title, scram_allowed=scram_allowed)

    def scram_add(request: Request, ctx: Any, body: ScramUserBody) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            authz.require(ctx.user, "change", scram(ctx, body.name), Role.admin)
            return ops.scram_user_add(ctx.spec, body.name, body.password)

        return done(request, ctx, "scram.user.add", body.name,  # type: ignore[no-any-return]
                    {"password": "given" if body.password else "generated"}, run)

    @app.post("/api/clusters/{cluster}/security/users", status_code=201)
    def api_scram_add(request: Request, body: ScramUserBody,
                      ctx: Any = guard(Role.admin, "scram.user.add")) -> dict[str, Any]:
        return scram_add(request, ctx, body)

    @app.post("/clusters/{cluster}/security/users")
    async def form_scram_add(request: Request, ctx: Any = guard(Role.admin, "scram.user.add")) -> Response:
        form = await request.form()
        try:
            body = ScramUserBody(name=str(form.get("name") or ""), password=str(form.get("password") or "") or None)
        except ValidationError as exc:
            raise Refused(422, "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())) from None
        await run_in_threadpool(scram_add, request, ctx, body)
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/security", status_code=303)

    def scram_delete(request: Request, ctx: Any, name: str) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            authz.require(ctx.user, "change", scram(ctx, name), Role.admin)
            return ops.scram_user_delete(ctx.spec, name)

        return done(request, ctx, "scram.user.delete", name, {}, run)  # type: ignore[no-any-return]

    @app.delete("/api/clusters/{cluster}/security/users/{name}")
    def api_scram_delete(request: Request, name: str,
                         ctx: Any = guard(Role.admin, "scram.user.delete")) -> dict[str, Any]:
        return scram_delete(request, ctx, name)

    @app.post("/clusters/{cluster}/security/users/{name}/delete")
    def form_scram_delete(request: Request, name: str, ctx: Any = guard(Role.admin, "scram.user.delete")) -> Response:
        scram_delete(request, ctx, name)
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/security", status_code=303)

    def acl(request: Request, ctx: Any, body: AclBody, add: bool) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            named = [(k, v) for k, v in (("topic", body.topic), ("group", body.group)) if v]
            if len(named) + body.cluster != 1:
                raise Refused(422, "name one resource: topic, group or cluster")
            kind, name = named[0] if named else ("cluster", None)
            authz.require(ctx.user, "change", authz.Acl(ctx.entry.name, kind, name, body.prefixed), Role.admin)
            return ops.acl_change(ctx.spec, add, body.principal, body.permission, body.operation, body.topic,
                                  body.group, body.cluster, body.prefixed)

        return done(request, ctx, "acl.add" if add else "acl.remove", body.principal,  # type: ignore[no-any-return]
                    body.model_dump(), run)

    @app.post("/api/clusters/{cluster}/security/acls", status_code=201)
    def api_acl_add(request: Request, body: AclBody, ctx: Any = guard(Role.admin, "acl.add")) -> dict[str, Any]:
        return acl(request, ctx, body, True)

    @app.delete("/api/clusters/{cluster}/security/acls")
    def api_acl_remove(request: Request, body: AclBody,
                       ctx: Any = guard(Role.admin, "acl.remove")) -> dict[str, Any]:
        return acl(request, ctx, body, False)

    @app.post("/clusters/{cluster}/security/acls")
    async def form_acl(request: Request, ctx: Any = guard(Role.admin, "acl.add")) -> Response:
        form = await request.form()
        kind, resource = str(form.get("resource_type") or "topic"), str(form.get("resource") or "").strip() or None
        try:
            body = AclBody(principal=str(form.get("principal") or ""), permission=str(form.get("permission") or
                                                                                   "ALLOW"),
                           operation=str(form.get("operation") or ""), topic=resource if kind == "topic" else None,
                           group=resource if kind == "group" else None, cluster=kind == "cluster",
                           prefixed=form.get("prefixed") == "yes")
        except ValidationError as exc:
            raise Refused(422, "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())) from None
        await run_in_threadpool(acl, request, ctx, body, form.get("remove") != "yes")
        return RedirectResponse(f"/clusters/{quote(ctx.entry.name)}/security", status_code=303)

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
                "series": {str(b): {k: v for k, v in per.items()} for b, per in doc["series"].items()}}

    @app.get("/clusters/{cluster}/brokers", response_class=HTMLResponse)
    def brokers_page(request: Request, ctx: Any = read) -> Response:
        doc = ops.broker_history(readable(ctx))
        drawn: dict[int, list[Any]] = {}
        if doc is not None:
            for b, per in sorted(doc["series"].items()):
                drawn[b] = [charts.line(per[k], title=f"broker {b}: {title}", unit=unit)
                            for k, title, unit in ops.BROKER_CHARTS]
        return page(request, "brokers.html", ctx, doc=doc, drawn=drawn, title=f"brokers · {ctx.entry.name}")


def _sse(request: Request, event: str, fragment: Callable[[], str]) -> StreamingResponse:
    """Server-sent events: ``event`` with the fragment's HTML now and every LIVE_SECONDS, until the page goes."""

    async def stream() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        end = loop.time() + LIVE_MAX_SECONDS
        while loop.time() < end and not await request.is_disconnected():
            try:
                html = await run_in_threadpool(fragment)
            except KctlError as exc:
                html = f'<p class="error">{_escape(exc.message)} at {datetime.now(timezone.utc):%H:%M:%S} UTC</p>'
            yield f"event: {event}\n" + "".join(f"data: {line}\n" for line in html.splitlines()) + "\n"
            await asyncio.sleep(LIVE_SECONDS)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _escape(text: str) -> str:
    import html

    return html.escape(text)
