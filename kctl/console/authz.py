"""Every permission decision of the console, in one function: :func:`decide` says whether a user may see or
change a resource (the console itself, a cluster, a topic, a consumer group, an ACL, a SCRAM user, a console
user, a reassignment, an audit record). Reads filter what they answer with it, changes are refused by it; no
route decides on its own.

What a refusal answers:

- a resource the user may not *see* is refused with 404 and the words one that does not exist would get
  ("no topic 'x'"): its existence leaks nowhere;
- a resource the user may see but not *change* (their role is too low, or the change reaches beyond their
  scope: an ACL on another team's prefix, a user wider than themselves) is refused with 403 and the reason.

Scopes. A user's scope is a list of clusters and a list of topic-name prefixes; an empty list is no limit.
Scope A is **within** scope B when

- B has no cluster limit, or A names clusters and every one of them is among B's; and
- B has no topic limit, or A names prefixes and every one of them starts with one of B's (``team-a.orders.``
  is within ``team-a.``; ``team-`` is not, nor is "no limit").

An admin sees, adds, changes and removes only console users whose scope is within their own and whose role is
at most theirs; an admin without limits manages everyone. ACLs: a topic ACL is within a scope when its name (or,
for a prefixed pattern, its prefix) starts with one of the scope's prefixes; consumer-group and
transactional-id ACLs are held to the same prefixes (the usual convention: a team's groups and transactional
ids carry its prefix); the wildcard ``*`` and cluster ACLs need a scope without a topic limit. SCRAM users are
credentials for the whole cluster: only an admin without a topic limit sees or manages them. Serving another
cluster (its kctl.yaml, a path on the console's host) or removing one, and seeing the files' paths, is for an
admin without any limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kctl.console.users import Role, User

Verb = Literal["see", "change"]


class Refused(Exception):
    """A request the console does not do: its HTTP status, one message and an optional hint."""

    def __init__(self, status: int, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.hint = status, message, hint


# ----- resources --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Console:
    """The console itself: its list of clusters (serving another one is a change of it)."""


@dataclass(frozen=True)
class Cluster:
    name: str


@dataclass(frozen=True)
class Topic:
    cluster: str
    name: str


@dataclass(frozen=True)
class NewTopic:
    """A topic about to be created: its name must be one the user would see."""

    cluster: str
    name: str


@dataclass(frozen=True)
class Group:
    cluster: str
    name: str
    topics: tuple[str, ...] | None = None  # the topics it has offsets for; None: not looked up (unlimited users)


@dataclass(frozen=True)
class Acl:
    cluster: str
    kind: str  # topic, group, transactional_id, cluster
    name: str | None
    prefixed: bool = False


@dataclass(frozen=True)
class ScramUser:
    cluster: str
    name: str


@dataclass(frozen=True)
class ConsoleUser:
    name: str
    role: Role
    clusters: tuple[str, ...] = ()
    topic_prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, u: User) -> ConsoleUser:
        return cls(u.name, u.role, tuple(u.clusters), tuple(u.topic_prefixes))


@dataclass(frozen=True)
class Reassignment:
    cluster: str
    topics: tuple[str, ...] | None = None  # the topics it moves; None: every partition of the cluster


Resource = Console | Cluster | Topic | NewTopic | Group | Acl | ScramUser | ConsoleUser | Reassignment


@dataclass(frozen=True)
class Decision:
    allowed: bool
    status: int = 200  # 404 (hidden) or 403 (visible, not permitted) when refused
    message: str = ""

    def __bool__(self) -> bool:
        return self.allowed


OK = Decision(True)


def _hidden(message: str) -> Decision:
    return Decision(False, 404, message)


def _forbidden(message: str) -> Decision:
    return Decision(False, 403, message)


# ----- scopes ---------------------------------------------------------------------------------------------


def within(clusters: Iterable[str], prefixes: Iterable[str], of: User) -> bool:
    """Whether the scope (clusters, prefixes) is within ``of``'s scope (the module's docstring defines it)."""
    clusters, prefixes = tuple(clusters), tuple(prefixes)
    if of.clusters and not (clusters and set(clusters) <= set(of.clusters)):
        return False
    return not of.topic_prefixes or bool(prefixes) and all(_topic_in(p, of) for p in prefixes)


def _topic_in(name: str, user: User) -> bool:
    return not user.topic_prefixes or any(name.startswith(p) for p in user.topic_prefixes)


def unlimited(user: User) -> bool:
    return not user.clusters and not user.topic_prefixes


def sees_paths(user: User) -> bool:
    """Whether answers may hold the console host's file paths (a cluster's kctl.yaml, why it cannot be read):
    for an admin without limits, who may serve any file of the host as a cluster anyway."""
    return user.role >= Role.admin and unlimited(user)


def _limits(user: User) -> str:
    parts = []
    if user.clusters:
        parts.append("clusters " + ", ".join(user.clusters))
    if user.topic_prefixes:
        parts.append("topics starting with " + ", ".join(user.topic_prefixes))
    return " and ".join(parts)


# ----- the decision -----------------------------------------------------------------------------------------


def decide(user: User, verb: Verb, res: Resource, role: Role = Role.viewer) -> Decision:
    """May ``user`` ``verb`` (see, change) ``res``, an action that needs ``role``? Hidden resources first (404,
    before the role is looked at: a viewer learns nothing from a 403 either), then the role and the scope."""
    seen = _see(user, res, verb)
    if not seen:
        return seen
    if user.role < role:
        return _forbidden(f"this needs the {role.name} role; {user.name} is {user.role.name}")
    if verb == "see":
        return OK
    return _change(user, res)


def _see(user: User, res: Resource, verb: Verb = "see") -> Decision:
    if isinstance(res, Console):
        return OK
    if isinstance(res, ConsoleUser):
        if user.role < Role.admin:
            return _forbidden("console users are managed by admins")
        if res.name != user.name and not (within(res.clusters, res.topic_prefixes, user) and res.role <= user.role):
            return _hidden(f"no console user {res.name!r}")
        return OK
    cluster = res.cluster if not isinstance(res, Cluster) else res.name
    if user.clusters and cluster not in user.clusters:
        return _hidden(f"no cluster {cluster!r}")
    if isinstance(res, Topic) and not _topic_in(res.name, user):
        return _hidden(f"no topic {res.name!r} in cluster {cluster!r}")
    # A user limited to topic prefixes sees the groups that read their topics only (and at least one).
    if isinstance(res, Group) and user.topic_prefixes and not (res.topics and all(_topic_in(t, user)
                                                                                 for t in res.topics)):
        return _hidden(f"no group {res.name!r} in cluster {cluster!r}")
    if isinstance(res, ScramUser):
        if user.role < Role.admin:
            return _forbidden("SCRAM users are an admin's")
        if user.topic_prefixes:
            return _forbidden(f"SCRAM users hold for the whole cluster: not for {user.name}, limited to"
                              f" {_limits(user)}")
    if isinstance(res, Acl):
        if user.role < Role.admin:
            return _forbidden("ACLs are an admin's")
        if not acl_within(res, user):  # listed: not there; asked for by name (a change): beyond the scope
            return (_hidden(f"no such ACL in cluster {cluster!r}") if verb == "see" else
                    _forbidden(f"this ACL reaches beyond {_limits(user)}"))
    return OK


def acl_within(acl: Acl, user: User) -> bool:
    """Whether an ACL's resource lies inside the user's topic prefixes (the module's docstring says how)."""
    if not user.topic_prefixes:
        return True
    if acl.kind == "cluster" or not acl.name or acl.name == "*":
        return False
    return _topic_in(acl.name, user)  # a prefixed pattern's prefix, or a literal name, under one of the user's


def _change(user: User, res: Resource) -> Decision:
    if isinstance(res, (Console, Cluster)):
        if not unlimited(user):
            return _forbidden(f"serving or removing clusters is for an admin without limits; {user.name} is"
                              f" limited to {_limits(user)}")
        return OK
    if isinstance(res, NewTopic) and not _topic_in(res.name, user):
        return _forbidden(f"{user.name} may create only topics starting with {', '.join(user.topic_prefixes)}")
    if isinstance(res, Reassignment) and user.topic_prefixes:
        if res.topics is None:
            return _forbidden(f"a change of every partition is not for {user.name}, who is limited to"
                              f" {_limits(user)}: name the topics")
        if not all(_topic_in(t, user) for t in res.topics):  # Kafka moves, elects or cancels them all at once
            return _forbidden(f"partitions of topics outside {_limits(user)} are part of it: an admin without a"
                              " topic limit does it")
    return OK


def may(user: User, verb: Verb, res: Resource, role: Role = Role.viewer) -> bool:
    return decide(user, verb, res, role).allowed


def require(user: User, verb: Verb, res: Resource, role: Role = Role.viewer) -> None:
    """:func:`decide`, raising :class:`Refused` with its status and message when it says no."""
    d = decide(user, verb, res, role)
    if not d:
        raise Refused(d.status, d.message)


def user_change(actor: User, old: User | None, new: ConsoleUser | None) -> Decision:
    """May ``actor`` turn console user ``old`` (None: a new one) into ``new`` (None: removed)? Both sides must be
    within the actor's scope and role; nobody removes themselves or changes their own role or scope."""
    if old is not None:
        d = decide(actor, "change", ConsoleUser.of(old), Role.admin)
        if not d:
            return d
    if new is not None:
        if actor.role < Role.admin:
            return _forbidden("console users are managed by admins")
        if not within(new.clusters, new.topic_prefixes, actor):
            return _forbidden(f"{actor.name} may give only a scope within their own ({_limits(actor)}): name"
                              " clusters and topic prefixes inside it")
        if new.role > actor.role:
            return _forbidden(f"{actor.name} cannot give a role above their own ({actor.role.name})")
    if old is not None and old.name == actor.name:
        if new is None:
            return _forbidden("an admin cannot remove themselves")
        if (new.role, tuple(new.clusters), tuple(new.topic_prefixes)) != (old.role, old.clusters, old.topic_prefixes):
            return _forbidden("an admin cannot change their own role or scope: ask another admin")
    return OK


# ----- filters for reads ------------------------------------------------------------------------------------


def topic_of_partition(partition: str) -> str:
    """``orders-3`` -> ``orders`` (a topic name may hold dashes; the partition is after the last one)."""
    return partition.rsplit("-", 1)[0]


def visible_partitions(user: User, cluster: str, rows: Iterable[Mapping[str, Any]],
                       key: str = "topic") -> list[dict[str, Any]]:
    """The rows (each naming a topic under ``key``, or a ``topic-N`` partition under ``partition``) the user may
    see."""
    out = []
    for r in rows:
        topic = r[key] if key in r else topic_of_partition(str(r.get("partition", "")))
        if may(user, "see", Topic(cluster, str(topic))):
            out.append(dict(r))
    return out


def _sees_all_users(user: User) -> bool:
    return user.role >= Role.admin and unlimited(user)


def may_name_user(user: User, name: str, users: Mapping[str, User]) -> bool:
    """Whether an answer may name console user ``name`` to ``user`` (who started a job, say): their own name to
    everyone; others' to an admin without limits, and to a limited admin the users they manage. Console users
    are an admin's business: a viewer or operator reads no other login name (one less name to guess a password
    for)."""
    if name == user.name or _sees_all_users(user):
        return True
    other = users.get(name)
    return user.role >= Role.admin and other is not None and may(user, "see", ConsoleUser.of(other))


_NAMES_TOPIC = ("topic.", "leaders.", "group.", "read ")  # actions whose target is a topic's or a group's name


def audit_visible(user: User, rec: Mapping[str, Any], users: Mapping[str, User]) -> bool:
    """Whether an audit record is the user's to read: their own; for an admin without limits, every record; for
    a limited admin, also what the users they manage (within their scope) did. Others' *refused* attempts go to
    admins without limits only: they may name what the reader may not see (a topic typed by hand, a name tried
    at the login). And a limited user reads no record naming what they may not see, their own included: a
    cluster, a topic or group beyond their prefixes (done before their scope was narrowed, or a probe), a
    console user they may not name (a viewer or operator names no other; a refused attempt on a name beyond
    the scope reads as one on a name that does not exist, so it is hidden alike)."""
    cluster = rec.get("cluster")
    target, action = rec.get("target"), str(rec.get("action", ""))
    if rec.get("user") != user.name:
        if user.role < Role.admin:
            return False
        if unlimited(user):
            return True
        if rec.get("result") == "refused":
            return False
        actor = users.get(str(rec.get("user")))
        if actor is None or not may(user, "see", ConsoleUser.of(actor)):
            return False
    if cluster is not None and not may(user, "see", Cluster(str(cluster))):
        return False
    if not target:
        return True
    if action.startswith(_NAMES_TOPIC):
        return _topic_in(str(target), user)
    named = action.startswith("user.") and target != user.name  # a console user's name
    if named and (rec.get("result") == "refused" or str(target) in users):
        return may_name_user(user, str(target), users)
    return True
