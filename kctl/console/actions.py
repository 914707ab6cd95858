"""Every change the console makes, as one declarative table: :data:`ACTIONS`. Each row names the action (as
audited), the role it needs, its JSON route and its page's form route, its body model, the resources it
touches (which :func:`kctl.console.authz.require` decides on, inside the audited change) and the operation
(a function of :mod:`kctl.console.ops`). :func:`register` generates both routes of every row from it:

- the JSON route: the guard (session, CSRF, read-only, the path's cluster and topic, the role), the body
  validated by its model (422 with the fields), the resources decided, the operation run in a thread and
  audited (done, failed or refused), its answer as JSON;
- the form route: the same guard, the form's fields read into the same model, the same decision and
  operation; the answer a redirect or a page, and a refusal the page again with its message (recorded).

No route of a change is written by hand. What a row does not say is the same for all.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from kctl.console import authz, ops
from kctl.console.authz import Refused
from kctl.console.users import Role, User, new_user
from kctl.console.views import Helpers, OffsetsBody, names
from kctl.errors import KctlError
from kctl.kafka import balance

# ----- the bodies ---------------------------------------------------------------------------------------------


class ClusterBody(BaseModel):
    path: str = Field(..., min_length=1, max_length=4096)


class TopicBody(BaseModel):
    name: str = Field(..., min_length=1, max_length=249)
    partitions: int | None = Field(None, ge=1, le=100_000)
    replication_factor: int | None = Field(None, ge=1, le=32)
    configs: dict[str, str] = Field(default_factory=dict)


class PartitionsBody(BaseModel):
    partitions: int = Field(..., ge=1, le=100_000)


class ConfigsBody(BaseModel):
    set: dict[str, str] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)


class ProduceBody(BaseModel):
    value: str | None = Field(None, max_length=1_000_000)
    key: str | None = Field(None, max_length=10_000)
    headers: dict[str, str] = Field(default_factory=dict)
    partition: int | None = Field(None, ge=0)


class ElectionBody(BaseModel):
    topic: str | None = Field(None, max_length=249)


class ReassignBody(BaseModel):
    plan: dict[str, Any]  # Kafka's reassignment JSON: {"version": 1, "partitions": [...]}
    throttle: int | None = Field(None, ge=1024, le=10 * 1024 ** 4, description="bytes/s for the replicas that move")


class ScramUserBody(BaseModel):
    name: str = Field(..., min_length=1, max_length=64)
    password: str | None = Field(None, min_length=8, max_length=1024, description="default: generated, kept 0600"
                                                                                   " in the state dir")


class AclBody(BaseModel):
    principal: str = Field(..., pattern="^User:.+", max_length=300)
    permission: str = Field("ALLOW", pattern="^(ALLOW|DENY|allow|deny)$")
    operation: str = Field(..., max_length=40)
    topic: str | None = Field(None, max_length=249)
    group: str | None = Field(None, max_length=249)
    cluster: bool = False
    prefixed: bool = False


class UserBody(BaseModel):
    name: str = Field(..., min_length=1, max_length=64)
    role: str = Field(..., max_length=20)
    password: str = Field(..., min_length=8, max_length=1024)
    clusters: list[str] = Field(default_factory=list, max_length=100)
    topic_prefixes: list[str] = Field(default_factory=list, max_length=100)


# ----- a call: one request of an action ---------------------------------------------------------------------


@dataclass
class Call:
    request: Request
    ctx: Any  # app.Ctx: the user, their session, the path's cluster
    body: Any  # the row's body model, validated (None without one)
    options: dict[str, Any] = field(default_factory=dict)  # what only a form says (a preview, the confirmation)

    @property
    def path(self) -> dict[str, str]:
        return dict(self.request.path_params)

    @property
    def cluster(self) -> str:
        return str(self.ctx.entry.name)

    @property
    def topic(self) -> str:
        return self.path["topic"]

    @property
    def spec(self) -> Any:
        return self.ctx.spec

    @property
    def user(self) -> User:
        return self.ctx.user  # type: ignore[no-any-return]


FormPage = Callable[[Helpers, Call, int, str, dict[str, str]], Response]


@dataclass(frozen=True)
class Action:
    """One row of the table."""

    name: str  # as audited
    role: Role
    method: str  # of the JSON route
    api: str  # the JSON route's path
    form: str | None  # the page's POST route (None: the JSON route only)
    body: type[BaseModel] | None
    touches: Callable[[Call], list[authz.Resource]]  # decided with authz.require(user, "change", ...)
    run: Callable[[Call], Any]  # the operation
    status: int = 200  # of the JSON answer
    target: Callable[[Call], str | None] = lambda c: None
    params: Callable[[Call], dict[str, Any]] = lambda c: c.body.model_dump() if c.body is not None else {}
    from_form: Callable[[dict[str, str]], tuple[dict[str, Any], dict[str, Any]]] | None = None  # -> body, options
    after: Callable[[Helpers, Call, Any], Response] = lambda h, c, r: RedirectResponse("/", status_code=303)
    on_error: FormPage | None = None  # the page that shows a form's refusal (default: the error page)
    audited: Callable[[Call], bool] = lambda c: True  # False: a preview, nothing changes
    needs_spec: bool = True  # False: done without reading the cluster's kctl.yaml (removing it from the console)


def _cluster_page(c: Call, rest: str = "") -> str:
    return f"/clusters/{quote(c.cluster)}{rest}"


def _topic_page(c: Call) -> str:
    return _cluster_page(c, f"/topics/{quote(c.topic)}")


def _back(url: Callable[[Call], str]) -> Callable[[Helpers, Call, Any], Response]:
    return lambda h, c, r: RedirectResponse(url(c), status_code=303)


def _topic_error(h: Helpers, c: Call, status: int, message: str, fields: dict[str, str]) -> Response:
    doc = ops.topic_detail(c.spec, c.topic)
    return h.page(c.request, "topic.html", c.ctx, status, doc=doc, error=message,
                  title=f"{c.topic} · topic · {c.cluster}")


def _topics_error(h: Helpers, c: Call, status: int, message: str, fields: dict[str, str]) -> Response:
    return h.page(c.request, "topics.html", c.ctx, status, topics=h.topic_rows(c.ctx, False), q="", internal=False,
                  errors=fields or {"name": message}, form=c.options.get("form", {}),
                  title=f"topics · {c.cluster}")


def _messages_error(h: Helpers, c: Call, status: int, message: str, fields: dict[str, str]) -> Response:
    return h.page(c.request, "messages.html", c.ctx, status, topic=c.topic, doc=None, q={}, produced=None,
                  error=message, title=f"messages of {c.topic} · {c.cluster}")


def _offsets_page(h: Helpers, c: Call, status: int, message: str | None, result: Any) -> Response:
    group = c.path["group"]
    return h.page(c.request, "offsets.html", c.ctx, status, group=group, preview=result, error=message,
                  form=c.options.get("form", {}), title=f"offsets of {group} · {c.cluster}")


def _users_error(h: Helpers, c: Call, status: int, message: str, fields: dict[str, str]) -> Response:
    return h.page(c.request, "users.html", c.ctx, status, users=h.user_rows(c.ctx), error=message,
                  title="Console users")


def _pairs(text: str, what: str) -> dict[str, str]:
    """``key=value`` pairs, one per line or separated by commas (a form's configs or headers)."""
    out: dict[str, str] = {}
    for part in text.replace(",", "\n").splitlines():
        part = part.strip()
        if part:
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise Refused(422, f"{what}: {part[:80]!r} is not key=value")
            out[key.strip()] = value.strip()
    return out


def _lines(text: str, what: str) -> dict[str, str]:
    """``key=value``, one per line (values may hold commas: a record's headers)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip():
            k, sep, v = line.partition("=")
            if not sep:
                raise Refused(422, f"{what}: {line[:80]!r} is not key=value")
            out[k.strip()] = v.strip()
    return out


def _given(form: dict[str, str], *keys: str) -> dict[str, str]:
    return {k: form[k].strip() for k in keys if str(form.get(k) or "").strip()}


# ----- the operations that need more than one call --------------------------------------------------------


def _start_reassignment(c: Call) -> dict[str, Any]:
    target = balance.parse_kafka_json(json.dumps(c.body.plan), "the plan")
    job = c.request.app.state.console.jobs.start_reassignment(c.spec, c.user.name, target, c.body.throttle)
    return {"started": len(target), "job": job.public()}


def _plan_topics(c: Call) -> list[authz.Resource]:
    listed = c.body.plan.get("partitions")
    if not isinstance(listed, list):
        raise Refused(422, 'the plan has no "partitions" list',
                      'expected {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}')
    topics = sorted({str(p.get("topic")) for p in listed if isinstance(p, dict) and p.get("topic")})
    return [*(authz.Topic(c.cluster, t) for t in topics), authz.Reassignment(c.cluster, tuple(topics))]


def _moving_topics(c: Call) -> list[authz.Resource]:
    moving = ops.reassign_status(c.spec)["moving"]
    topics = tuple(sorted({authz.topic_of_partition(str(m["partition"])) for m in moving}))
    return [authz.Reassignment(c.cluster, topics)]  # Kafka cancels every moving partition at once


def _group(c: Call) -> authz.Resource:
    h: Helpers = c.request.app.state.helpers
    doc = h.group_doc(c.ctx, c.path["group"])  # 404 for a group the user may not see, as for a missing one
    return authz.Group(c.cluster, c.path["group"], tuple(sorted({str(p["topic"]) for p in doc["partitions"]})))


def _acl(c: Call) -> list[authz.Resource]:
    b = c.body
    named = [(k, v) for k, v in (("topic", b.topic), ("group", b.group)) if v]
    if len(named) + b.cluster != 1:
        raise Refused(422, "name one resource: topic, group or cluster")
    kind, name = named[0] if named else ("cluster", None)
    return [authz.Acl(c.cluster, kind, name, b.prefixed)]


def _put_user(c: Call) -> dict[str, Any]:
    b = c.body
    u = new_user(b.name, b.role, b.password, b.clusters, b.topic_prefixes)
    console = c.request.app.state.console

    def change(users: dict[str, User]) -> None:
        # decided under the users file's lock, on the file's users of this moment
        d = authz.user_change(c.user, users.get(u.name), authz.ConsoleUser.of(u))
        if not d:
            raise Refused(d.status, d.message)
        users[u.name] = u

    console.users.change(change)
    console.sessions.close_user(u.name)  # a changed password, role or scope takes effect at once
    return u.public()


def _remove_user(c: Call) -> dict[str, Any]:
    name = c.path["name"]
    console = c.request.app.state.console

    def change(users: dict[str, User]) -> None:
        old = users.get(name)
        if old is None:
            raise Refused(404, f"no console user {name!r}")
        d = authz.user_change(c.user, old, None)
        if not d:
            raise Refused(d.status, d.message)
        del users[name]

    console.users.change(change)
    console.sessions.close_user(name)
    return {"removed": name}


def _add_cluster(c: Call) -> dict[str, Any]:
    entry = c.request.app.state.console.registry.add(Path(c.body.path))
    return {"name": entry.name, "path": str(entry.path)}


def _remove_cluster(c: Call) -> dict[str, Any]:
    c.request.app.state.console.registry.remove(c.cluster)
    return {"removed": c.cluster}


def _count(listed: Any) -> int | None:
    return len(listed) if isinstance(listed, list) else None


def _throttle(form: dict[str, str]) -> int | None:
    text = str(form.get("throttle") or "").strip()
    if not text:
        return None
    try:
        mb = float(text)
    except ValueError:
        mb = float("nan")
    if not 0 < mb < 10 * 1024 * 1024:  # also nan and inf
        raise Refused(422, f"throttle: a number of MB/s above 0, not {text[:40]!r}")
    return int(mb * 1024 * 1024)


def _plan_form(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        plan = json.loads(str(form.get("plan") or "{}"))
    except (ValueError, RecursionError) as exc:
        raise Refused(422, f"the plan is not JSON: {str(exc)[:200]}") from None
    return {"plan": plan, "throttle": _throttle(form)}, {}


def _offsets_form(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    strategy, value = str(form.get("strategy") or ""), str(form.get("value") or "").strip()
    body: dict[str, Any] = {"topic": str(form.get("topic") or ""), "strategy": strategy}
    if value and strategy == "offset":
        body["value"] = value
    if strategy == "datetime":
        body["datetime"] = value
    return body, {"preview": form.get("execute") != "yes", "form": form}


def _topic_form(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    body: dict[str, Any] = {"name": str(form.get("name") or "").strip(),
                            "configs": _pairs(str(form.get("configs") or ""), "configs"),
                            **_given(form, "partitions", "replication_factor")}
    return body, {"form": form}


def _user_form(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"name": str(form.get("name") or ""), "role": str(form.get("role") or ""),
            "password": str(form.get("password") or ""), "clusters": names(str(form.get("clusters") or "")),
            "topic_prefixes": names(str(form.get("topic_prefixes") or ""))}, {}


def _acl_form(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    kind, resource = str(form.get("resource_type") or "topic"), str(form.get("resource") or "").strip() or None
    return {"principal": str(form.get("principal") or ""), "permission": str(form.get("permission") or "ALLOW"),
            "operation": str(form.get("operation") or ""), "topic": resource if kind == "topic" else None,
            "group": resource if kind == "group" else None, "cluster": kind == "cluster",
            "prefixed": form.get("prefixed") == "yes"}, {"remove": form.get("remove") == "yes"}


def _confirm_form(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {}, {"confirm": str(form.get("confirm") or "")}


def _topic_res(c: Call) -> list[authz.Resource]:
    return [authz.Topic(c.cluster, c.topic)]


def _delete_topic(c: Call) -> Any:
    if c.options.get("confirm") is not None and c.options["confirm"] != c.topic:
        raise Refused(400, "type the topic's name to confirm its deletion")
    return ops.delete_topic(c.spec, c.topic)


def _reset(c: Call) -> Any:
    b = c.body
    return ops.reset_offsets(c.spec, c.path["group"], b.topic, b.strategy, b.value, b.datetime,
                             not c.options.get("preview"))


# ----- the table ----------------------------------------------------------------------------------------------

T = "/clusters/{cluster}/topics/{topic}"
SEC = "/clusters/{cluster}/security"

ACTIONS: tuple[Action, ...] = (
    Action("cluster.add", Role.admin, "POST", "/api/clusters", "/clusters", ClusterBody,
           touches=lambda c: [authz.Console()], run=_add_cluster, status=201, target=lambda c: c.body.path,
           from_form=lambda f: ({"path": str(f.get("path") or "")}, {})),
    Action("cluster.remove", Role.admin, "DELETE", "/api/clusters/{cluster}", "/clusters/{cluster}/remove", None,
           touches=lambda c: [authz.Cluster(c.cluster)], run=_remove_cluster, needs_spec=False),
    Action("topic.create", Role.operator, "POST", "/api/clusters/{cluster}/topics", "/clusters/{cluster}/topics",
           TopicBody, touches=lambda c: [authz.NewTopic(c.cluster, c.body.name)],
           run=lambda c: ops.create_topic(c.spec, c.body.name, c.body.partitions, c.body.replication_factor,
                                          c.body.configs),
           status=201, target=lambda c: c.body.name, params=lambda c: c.body.model_dump(exclude={"name"}),
           from_form=_topic_form, on_error=_topics_error,
           after=_back(lambda c: _cluster_page(c, f"/topics/{quote(c.body.name)}"))),
    Action("topic.delete", Role.admin, "DELETE", "/api" + T, T + "/delete", None, touches=_topic_res,
           run=_delete_topic, target=lambda c: c.topic, params=lambda c: {}, from_form=_confirm_form,
           on_error=_topic_error, after=_back(lambda c: _cluster_page(c, "/topics"))),
    Action("topic.partitions", Role.operator, "POST", "/api" + T + "/partitions", T + "/partitions", PartitionsBody,
           touches=_topic_res, run=lambda c: ops.add_partitions(c.spec, c.topic, c.body.partitions),
           target=lambda c: c.topic, from_form=lambda f: (_given(f, "partitions"), {}), on_error=_topic_error,
           after=_back(_topic_page)),
    Action("topic.config", Role.operator, "POST", "/api" + T + "/configs", T + "/configs", ConfigsBody,
           touches=_topic_res, run=lambda c: ops.topic_configs(c.spec, c.topic, c.body.set, c.body.delete),
           target=lambda c: c.topic,
           from_form=lambda f: ({"set": _pairs(str(f.get("set") or ""), "set"),
                                 "delete": names(str(f.get("delete") or ""))}, {}),
           on_error=_topic_error, after=_back(_topic_page)),
    Action("topic.produce", Role.operator, "POST", "/api" + T + "/messages", T + "/messages", ProduceBody,
           touches=_topic_res,
           run=lambda c: ops.produce(c.spec, c.topic, c.body.value, c.body.key, c.body.headers, c.body.partition),
           status=201, target=lambda c: c.topic,
           params=lambda c: {"key": c.body.key, "partition": c.body.partition, "headers": sorted(c.body.headers),
                             "value_bytes": len((c.body.value or "").encode())},
           from_form=lambda f: ({"value": str(f.get("value") or ""), "key": str(f.get("key") or "") or None,
                                 "headers": _lines(str(f.get("headers") or ""), "headers"),
                                 **_given(f, "partition")}, {}),
           on_error=_messages_error,
           after=lambda h, c, r: RedirectResponse(
               _topic_page(c) + f"/messages?partition={r['partition']}&offset={r['offset']}&produced="
               + quote(f"partition {r['partition']} offset {r['offset']}"), status_code=303)),
    Action("leaders.elect", Role.operator, "POST", "/api/clusters/{cluster}/election", "/clusters/{cluster}/election",
           ElectionBody,
           touches=lambda c: ([authz.Topic(c.cluster, c.body.topic), authz.Reassignment(c.cluster, (c.body.topic,))]
                              if c.body.topic else [authz.Reassignment(c.cluster, None)]),
           run=lambda c: ops.elect(c.spec, c.body.topic), target=lambda c: c.body.topic or "all partitions",
           params=lambda c: {}, from_form=lambda f: ({"topic": str(f.get("topic") or "").strip() or None}, {}),
           after=lambda h, c, r: h.page(c.request, "election.html", c.ctx, result=r,
                                        title=f"preferred election · {c.cluster}")),
    Action("reassignment.execute", Role.operator, "POST", "/api/clusters/{cluster}/reassignment",
           "/clusters/{cluster}/reassignment", ReassignBody, touches=_plan_topics, run=_start_reassignment,
           status=202, params=lambda c: {"partitions": _count(c.body.plan.get("partitions")),
                                         "throttle": c.body.throttle},
           from_form=_plan_form, after=_back(lambda c: _cluster_page(c, "/reassignment"))),
    Action("reassignment.cancel", Role.operator, "DELETE", "/api/clusters/{cluster}/reassignment",
           "/clusters/{cluster}/reassignment/cancel", None, touches=_moving_topics,
           run=lambda c: ops.reassign_cancel(c.spec), after=_back(lambda c: _cluster_page(c, "/reassignment"))),
    Action("group.reset-offsets", Role.operator, "POST", "/api/clusters/{cluster}/groups/{group}/offsets",
           "/clusters/{cluster}/groups/{group}/offsets", OffsetsBody,
           touches=lambda c: [_group(c), authz.Topic(c.cluster, c.body.topic)], run=_reset,
           target=lambda c: c.path["group"], from_form=_offsets_form,
           on_error=lambda h, c, s, m, f: _offsets_page(h, c, s, m, None),
           after=lambda h, c, r: _offsets_page(h, c, 200, None, r), audited=lambda c: not c.options.get("preview")),
    Action("scram.user.add", Role.admin, "POST", "/api/clusters/{cluster}/security/users", SEC + "/users",
           ScramUserBody, touches=lambda c: [authz.ScramUser(c.cluster, c.body.name)],
           run=lambda c: ops.scram_user_add(c.spec, c.body.name, c.body.password), status=201,
           target=lambda c: c.body.name, params=lambda c: {"password": "given" if c.body.password else "generated"},
           from_form=lambda f: ({"name": str(f.get("name") or ""), "password": str(f.get("password") or "") or None},
                                {}),
           after=_back(lambda c: _cluster_page(c, "/security"))),
    Action("scram.user.delete", Role.admin, "DELETE", "/api/clusters/{cluster}/security/users/{name}",
           SEC + "/users/{name}/delete", None, touches=lambda c: [authz.ScramUser(c.cluster, c.path["name"])],
           run=lambda c: ops.scram_user_delete(c.spec, c.path["name"]), target=lambda c: c.path["name"],
           after=_back(lambda c: _cluster_page(c, "/security"))),
    Action("acl.add", Role.admin, "POST", "/api/clusters/{cluster}/security/acls", SEC + "/acls", AclBody,
           touches=_acl, status=201, target=lambda c: c.body.principal, from_form=_acl_form,
           run=lambda c: ops.acl_change(c.spec, True, c.body.principal, c.body.permission, c.body.operation,
                                        c.body.topic, c.body.group, c.body.cluster, c.body.prefixed),
           after=_back(lambda c: _cluster_page(c, "/security"))),
    Action("acl.remove", Role.admin, "DELETE", "/api/clusters/{cluster}/security/acls", None, AclBody,
           touches=_acl, target=lambda c: c.body.principal,
           run=lambda c: ops.acl_change(c.spec, False, c.body.principal, c.body.permission, c.body.operation,
                                        c.body.topic, c.body.group, c.body.cluster, c.body.prefixed),
           after=_back(lambda c: _cluster_page(c, "/security"))),
    Action("user.add", Role.admin, "POST", "/api/users", "/users", UserBody, touches=lambda c: [],  # _put_user
           run=_put_user, status=201, target=lambda c: c.body.name,
           params=lambda c: {"role": c.body.role, "clusters": c.body.clusters,
                             "topic_prefixes": c.body.topic_prefixes},
           from_form=_user_form, on_error=_users_error, after=_back(lambda c: "/users")),
    Action("user.remove", Role.admin, "DELETE", "/api/users/{name}", "/users/{name}/delete", None,
           touches=lambda c: [], run=_remove_user, target=lambda c: c.path["name"],  # decided in _remove_user
           after=_back(lambda c: "/users")),
)
# A form of one route that may ask for another action of the table: (form action, the field, the action then).
FORM_SWITCH = {"acl.add": ("remove", "acl.remove")}
BY_NAME = {a.name: a for a in ACTIONS}


# ----- the routes, generated -------------------------------------------------------------------------------


def execute(h: Helpers, action: Action, call: Call) -> Any:
    """Decide what the call touches, then run it: audited as ``action`` (a preview is not, its refusals are)."""
    def run() -> Any:
        for res in action.touches(call):
            authz.require(call.user, "change", res, action.role)
        return action.run(call)

    if not action.audited(call):
        try:
            return run()
        except KctlError as exc:
            raise Refused(400 if exc.exit_code == 2 else 409, exc.message, exc.hint) from None
    return h.done(call.request, call.ctx, action.name, action.target(call), action.params(call), run)


def register(app: FastAPI, h: Helpers) -> None:
    app.state.helpers = h
    for action in ACTIONS:
        _json_route(app, h, action)
        if action.form is not None:
            _form_route(app, h, action)


def _json_route(app: FastAPI, h: Helpers, action: Action) -> None:
    async def endpoint(*, request: Request, ctx: Any, body: Any = None) -> Response:
        result = await run_in_threadpool(execute, h, action, Call(request, ctx, body))
        return JSONResponse(jsonable_encoder(result), status_code=action.status)

    # FastAPI reads the signature: the guard as a dependency, the body validated by the row's model
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("request", kw, annotation=Request),
              inspect.Parameter("ctx", kw, default=h.guard(action.role, action.name, action.needs_spec))]
    if action.body is not None:
        params.append(inspect.Parameter("body", kw, annotation=action.body))
    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    endpoint.__name__ = "api_" + action.name.replace(".", "_").replace("-", "_")
    app.add_api_route(action.api, endpoint, methods=[action.method], status_code=action.status,
                      name=endpoint.__name__, summary=f"{action.name} ({action.role.name})")


def _form_route(app: FastAPI, h: Helpers, first: Action) -> None:
    async def endpoint(request: Request, ctx: Any = h.guard(first.role, first.name, first.needs_spec)) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        action = first
        switch = FORM_SWITCH.get(first.name)
        if switch and form.get(switch[0]) == "yes":
            action = BY_NAME[switch[1]]
        call = Call(request, ctx, None, {"form": form})

        def refused(status: int, message: str, fields: dict[str, str] | None = None) -> Response:
            if action.on_error is None or status in (401, 404):  # a hidden name: the answer of a missing one
                raise Refused(status, message)
            return action.on_error(h, call, status, message, fields or {})

        try:
            raw, options = action.from_form(form) if action.from_form else ({}, {})
            call.options.update(options)
            if action.body is not None:
                call.body = action.body.model_validate(raw)
        except ValidationError as exc:
            fields = {".".join(str(p) for p in e["loc"]) or "body": e["msg"] for e in exc.errors()}
            message = "; ".join(f"{k}: {v}" for k, v in fields.items())
            h.refusal(request, "invalid request: " + message)
            return await run_in_threadpool(refused, 422, message, fields)
        except Refused as r:
            h.refusal(request, r)
            return await run_in_threadpool(refused, r.status, r.message)
        try:
            result = await run_in_threadpool(execute, h, action, call)
        except Refused as r:  # audited by h.done
            return await run_in_threadpool(refused, r.status, r.message)
        return await run_in_threadpool(action.after, h, call, result)

    endpoint.__name__ = "form_" + first.name.replace(".", "_").replace("-", "_")
    app.add_api_route(first.form, endpoint, methods=["POST"], name=endpoint.__name__,  # type: ignore[arg-type]
                      include_in_schema=False)
