"""The cluster's contents declared in kctl.yaml (``topics:``, ``users:``, ``acls:``, ``quotas:``) against the
live cluster: the plan that converges one to the other, and the export of a live cluster in kctl.yaml's shape.

Pure: the live state comes in as plain dataclasses (the caller reads it through ``kctl.kafka.topics``,
``kctl.kafka.security`` and ``kctl.kafka.configs``), and the plan goes out as actions for the caller to run.

- A section left out of kctl.yaml is not managed: nothing in it is created, changed, kept or deleted.
- Topics are created, their partitions added (never removed: a lower count is refused), their own configs set,
  and a config the file no longer names reset to the cluster's default (its dynamic override deleted). A changed
  replication factor is not made in place: it is an action of its own, for the reassignment planner.
- What the live cluster has and the file does not (a topic, a user's credential, an ACL, a quota entity) is
  deleted only with ``prune``; without it each is listed as kept. Deletions come first in a plan.
- Never touched: Kafka's and kctl's own topics (named ``__...``) and kctl's admin user.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import yaml

from kctl.errors import UsageError
from kctl.model.spec import (
    ACL_RESOURCE_TYPES,
    CLUSTER_RESOURCE,
    QUOTA_KEYS,
    ClusterSpec,
    default_topic_partitions,
    default_topic_replication_factor,
)

DEFAULT = "<default>"  # a quota entity's default user or client id, as Kafka names it
PASSWORD_PLACEHOLDER = "secrets/{user}.password"  # export's password_file for a user kctl cannot read back
EXPORT_NOTE = ("users: Kafka keeps only a salted hash of each password, so none is exported: each password_file"
               " is a placeholder; write the user's password there (mode 0600) before kctl creates the user again")


def protected_topic(name: str) -> bool:
    """Kafka's own topics (__consumer_offsets, __transaction_state) and kctl's (__kctl_health): never planned."""
    return name.startswith("__")


def managed_acl(a: Acl) -> bool:
    """An ACL on a resource type kctl.yaml can declare (not a delegation token's or a user's: never planned)."""
    return a.resource_type in ACL_RESOURCE_TYPES


# ----- the two states ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)  # the topic's own (dynamic topic) configs only


@dataclass(frozen=True, order=True)
class Credential:
    user: str
    mechanism: str  # SCRAM-SHA-512 or SCRAM-SHA-256


@dataclass(frozen=True, order=True)
class Acl:
    """One ACL binding, in kctl.yaml's words (lowercase; the cluster resource named kafka-cluster)."""

    principal: str
    permission: str  # allow, deny
    operation: str
    resource_type: str  # topic, group, cluster, transactional_id
    resource: str
    pattern: str = "literal"  # literal, prefixed
    host: str = "*"

    @classmethod
    def of(cls, principal: str, permission: str, operation: str, resource_type: str, resource: str | None,
           pattern: str = "literal", host: str = "*") -> Acl:
        """From Kafka's spelling too (ALLOW, LITERAL, BROKER / kctl.kafka.security.AclRow's words)."""
        rt = resource_type.lower()
        rt = "cluster" if rt in ("broker", "cluster") else rt
        return cls(principal, permission.lower(), operation.lower(), rt,
                   CLUSTER_RESOURCE if rt == "cluster" and not resource else str(resource), pattern.lower(), host)

    def __str__(self) -> str:
        prefix = " prefix" if self.pattern == "prefixed" else ""
        where = "the cluster" if self.resource_type == "cluster" else \
            f"{self.resource_type.replace('_', ' ')}{prefix} {self.resource!r}"
        host = f" from {self.host}" if self.host != "*" else ""
        return f"{self.permission} {self.principal} {self.operation} on {where}{host}"


@dataclass(frozen=True)
class QuotaEntity:
    """A user, a client id, or both; DEFAULT for the default one. None: not part of the entity."""

    user: str | None = None
    client: str | None = None

    def __lt__(self, other: QuotaEntity) -> bool:
        return self._order < other._order

    @property
    def _order(self) -> tuple[bool, str, bool, str]:
        return (self.user is not None, self.user or "", self.client is not None, self.client or "")

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append("user default" if self.user == DEFAULT else f"user {self.user!r}")
        if self.client is not None:
            parts.append("client-id default" if self.client == DEFAULT else f"client-id {self.client!r}")
        return " and ".join(parts)

    @property
    def tool_args(self) -> list[str]:
        """kafka-configs' entity arguments (as kctl.kafka.security.quota_entity makes them)."""
        args: list[str] = []
        for kind, name in (("users", self.user), ("clients", self.client)):
            if name is not None:
                args += ["--entity-type", kind] + (["--entity-default"] if name == DEFAULT
                                                   else ["--entity-name", name])
        return args


@dataclass
class State:
    """Topics, users, ACLs and quotas: declared (a section None: not managed) or live (None: not read, e.g. users on
    a cluster without the secured profile)."""

    topics: dict[str, Topic] | None = None
    credentials: set[Credential] | None = None
    acls: set[Acl] | None = None
    quotas: dict[QuotaEntity, dict[str, float]] | None = None
    password_files: dict[Credential, str] = field(default_factory=dict)  # declared: where each password is
    admin_user: str | None = None  # never planned


def declared_from(spec: ClusterSpec) -> State:
    """What kctl.yaml declares, its defaults resolved (a topic's partitions and replication factor)."""
    topics = None if spec.topics is None else {
        t.name: Topic(t.name, t.partitions or default_topic_partitions(spec),
                      t.replication_factor or default_topic_replication_factor(spec), dict(t.configs))
        for t in spec.topics}
    creds = None if spec.users is None else {Credential(u.name, u.mechanism) for u in spec.users}
    acls = None if spec.acls is None else {
        Acl.of(a.principal, a.permission, a.operation, a.resource_type, a.resource_name, a.pattern, a.host)
        for a in spec.acls}
    quotas = None if spec.quotas is None else {
        QuotaEntity(DEFAULT if q.user_default else q.user, DEFAULT if q.client_default else q.client): q.values
        for q in spec.quotas}
    files = {Credential(u.name, u.mechanism): u.password_file for u in spec.users or []}
    return State(topics, creds, acls, quotas, files, spec.security.admin_user)


# ----- the plan -----------------------------------------------------------------------------------


class Kind(str, Enum):
    delete_topic = "delete-topic"
    delete_credential = "delete-credential"  # a user's credential of one mechanism (its last: the user)
    delete_acl = "delete-acl"
    delete_quota = "delete-quota"  # every quota of an entity
    kept = "kept"  # not in kctl.yaml, kept (--prune deletes it): listed where its deletion would be
    create_topic = "create-topic"
    add_partitions = "add-partitions"
    set_topic_configs = "set-topic-configs"
    reset_topic_configs = "reset-topic-configs"  # the dynamic overrides deleted: back to the default
    reassign_replication = "reassign-replication"  # for the reassignment planner, not done in place
    create_credential = "create-credential"  # a new user, or a user's credential of another mechanism
    create_acl = "create-acl"
    set_quota = "set-quota"
    remove_quota_keys = "remove-quota-keys"  # quotas an entity the file still names no longer has
    refused = "refused"  # what kctl.yaml asks and Kafka cannot do (a topic's partitions shrunk)


DELETIONS = (Kind.delete_topic, Kind.delete_credential, Kind.delete_acl, Kind.delete_quota)
NOT_CHANGES = (Kind.kept, Kind.refused)
_ORDER = {k: i for i, k in enumerate(Kind)}


@dataclass(frozen=True)
class Action:
    kind: Kind
    subject: str  # what it is on: a topic's, user's, entity's name, or the ACL
    description: str  # one line for --dry-run
    params: Mapping[str, Any] = field(default_factory=dict)  # what the caller runs it with

    def __str__(self) -> str:
        return self.description


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)

    @property
    def changes(self) -> list[Action]:
        """What to do, deletions first."""
        return [a for a in self.actions if a.kind not in NOT_CHANGES]

    @property
    def reassignments(self) -> list[Action]:
        return [a for a in self.actions if a.kind is Kind.reassign_replication]

    @property
    def kept(self) -> list[Action]:
        return [a for a in self.actions if a.kind is Kind.kept]

    @property
    def refused(self) -> list[Action]:
        return [a for a in self.actions if a.kind is Kind.refused]

    @property
    def empty(self) -> bool:
        """The live cluster is what kctl.yaml declares: nothing to do, keep or refuse."""
        return not self.actions

    def lines(self) -> list[str]:
        """--dry-run's lines, in the plan's order."""
        return [a.description for a in self.actions]

    def check(self) -> None:
        """UsageError naming every refused change; nothing may be applied while one is left."""
        if self.refused:
            raise UsageError("kctl.yaml asks what Kafka cannot do:\n" + "\n".join(f"  - {a}" for a in self.refused),
                             hint="change kctl.yaml; nothing was changed")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _topics(want: dict[str, Topic], live: dict[str, Topic], prune: bool) -> list[Action]:
    out: list[Action] = []
    for name in sorted(n for n in live if n not in want and not protected_topic(n)):
        if prune:
            out.append(Action(Kind.delete_topic, name, f"delete topic {name!r} (not in kctl.yaml; --prune)",
                              {"topic": name}))
        else:
            out.append(Action(Kind.kept, name, f"topic {name!r}: not in kctl.yaml (kept; --prune deletes)",
                              {"topic": name}))
    for name, t in sorted(want.items()):
        have = live.get(name)
        if have is None:
            configs = "".join(f", {k}={v}" for k, v in sorted(t.configs.items()))
            out.append(Action(Kind.create_topic, name, f"create topic {name!r}: {t.partitions} partition(s),"
                              f" replication factor {t.replication_factor}{configs}",
                              {"topic": name, "partitions": t.partitions, "replication_factor": t.replication_factor,
                               "configs": dict(t.configs)}))
            continue
        if t.partitions < have.partitions:
            out.append(Action(Kind.refused, name, f"topic {name!r}: cannot shrink from {have.partitions} to"
                              f" {t.partitions} partitions (Kafka only adds partitions; a topic with fewer is a new"
                              " topic, its records copied)",
                              {"topic": name, "partitions": have.partitions, "wanted": t.partitions}))
        elif t.partitions > have.partitions:
            out.append(Action(Kind.add_partitions, name, f"add partitions to topic {name!r}: {have.partitions} ->"
                              f" {t.partitions}", {"topic": name, "partitions": t.partitions,
                                                   "from": have.partitions}))
        changed = {k: v for k, v in sorted(t.configs.items()) if have.configs.get(k) != v}
        if changed:
            what = ", ".join(f"{k}={v}" + (f" (was {have.configs[k]})" if k in have.configs else "")
                             for k, v in changed.items())
            out.append(Action(Kind.set_topic_configs, name, f"set configs of topic {name!r}: {what}",
                              {"topic": name, "configs": changed}))
        reset = sorted(k for k in have.configs if k not in t.configs)
        if reset:
            what = ", ".join(f"{k} (was {have.configs[k]})" for k in reset)
            out.append(Action(Kind.reset_topic_configs, name, f"reset configs of topic {name!r} to the cluster's"
                              f" default: {what}", {"topic": name, "keys": reset}))
        if t.replication_factor != have.replication_factor:
            out.append(Action(Kind.reassign_replication, name, f"change the replication factor of topic {name!r}:"
                              f" {have.replication_factor} -> {t.replication_factor} (a partition reassignment,"
                              " not in place)", {"topic": name, "replication_factor": t.replication_factor,
                                                 "from": have.replication_factor}))
    return out


def _credentials(want: set[Credential], live: set[Credential], files: Mapping[Credential, str],
                 admin: str | None, prune: bool) -> list[Action]:
    out: list[Action] = []
    for c in sorted(live - want):
        if c.user == admin:
            continue
        last = not any(o.user == c.user for o in live if o != c)
        what = f"user {c.user!r}" if last else f"user {c.user!r}'s {c.mechanism} credential"
        if prune:
            out.append(Action(Kind.delete_credential, c.user, f"delete {what} (not in kctl.yaml; --prune)",
                              {"user": c.user, "mechanism": c.mechanism, "last": last}))
        else:
            out.append(Action(Kind.kept, c.user, f"{what}: not in kctl.yaml (kept; --prune deletes)",
                              {"user": c.user, "mechanism": c.mechanism}))
    live_users = {c.user for c in live}
    for c in sorted(want - live):
        verb = f"add a {c.mechanism} credential to user {c.user!r}" if c.user in live_users else \
            f"create user {c.user!r} ({c.mechanism})"
        pw = files.get(c)
        out.append(Action(Kind.create_credential, c.user, f"{verb}, its password from {pw}",
                          {"user": c.user, "mechanism": c.mechanism, "password_file": pw}))
    return out


def _acls(want: set[Acl], live: set[Acl], prune: bool) -> list[Action]:
    out: list[Action] = []
    for a in sorted(a for a in live - want if managed_acl(a)):
        if prune:
            out.append(Action(Kind.delete_acl, a.principal, f"delete ACL: {a} (not in kctl.yaml; --prune)",
                              {"acl": a}))
        else:
            out.append(Action(Kind.kept, a.principal, f"ACL {a}: not in kctl.yaml (kept; --prune deletes)",
                              {"acl": a}))
    out += [Action(Kind.create_acl, a.principal, f"add ACL: {a}", {"acl": a}) for a in sorted(want - live)]
    return out


def _quotas(want: dict[QuotaEntity, dict[str, float]], live: dict[QuotaEntity, dict[str, float]],
            prune: bool) -> list[Action]:
    out: list[Action] = []
    for e in sorted(e for e in live if e not in want and live[e]):
        shown = ", ".join(f"{k}={_num(v)}" for k, v in sorted(live[e].items()))
        if prune:
            out.append(Action(Kind.delete_quota, str(e), f"delete the quotas of {e}: {shown} (not in kctl.yaml;"
                              " --prune)", {"entity": e, "keys": sorted(live[e])}))
        else:
            out.append(Action(Kind.kept, str(e), f"quotas of {e} ({shown}): not in kctl.yaml (kept; --prune"
                              " deletes)", {"entity": e}))
    for e, values in sorted(want.items()):
        have = live.get(e, {})
        changed = {k: v for k, v in values.items() if k not in have or not _same(have[k], v)}
        if changed:
            what = ", ".join(f"{k}={_num(v)}" + (f" (was {_num(have[k])})" if k in have else "")
                             for k, v in sorted(changed.items(), key=lambda kv: QUOTA_KEYS.index(kv[0])))
            out.append(Action(Kind.set_quota, str(e), f"set quotas of {e}: {what}",
                              {"entity": e, "values": {k: _num(v) for k, v in changed.items()}}))
        removed = sorted(k for k in have if k not in values)
        if removed:
            out.append(Action(Kind.remove_quota_keys, str(e), f"remove quotas of {e}: "
                              + ", ".join(f"{k} (was {_num(have[k])})" for k in removed),
                              {"entity": e, "keys": removed}))
    return out


def plan(declared: State, live: State, *, prune: bool) -> Plan:
    """The actions that make ``live`` what ``declared`` says, for the sections ``declared`` manages: deletions
    first (or, without ``prune``, what would be deleted listed as kept), then creations and changes, then the
    replication factors for the reassignment planner; what cannot be done is an action of kind refused."""
    actions: list[Action] = []
    if declared.topics is not None:
        actions += _topics(declared.topics, live.topics or {}, prune)
    if declared.credentials is not None:
        actions += _credentials(declared.credentials, live.credentials or set(), declared.password_files,
                                declared.admin_user or live.admin_user, prune)
    if declared.acls is not None:
        actions += _acls(declared.acls, live.acls or set(), prune)
    if declared.quotas is not None:
        actions += _quotas(declared.quotas, live.quotas or {}, prune)
    # stable: within a kind, each section's own order (by name)
    return Plan(sorted(actions, key=lambda a: _ORDER[a.kind]))


# ----- export -------------------------------------------------------------------------------------


def _quota_value(key: str, v: float) -> int | float:
    return int(v) if key.endswith("_byte_rate") or float(v).is_integer() else float(v)


def export(live: State) -> dict[str, Any]:
    """The live cluster in kctl.yaml's shape (the sections the live state has): ``plan`` of a spec made from it
    against ``live`` is empty. Users without passwords: each password_file is a placeholder (EXPORT_NOTE)."""
    out: dict[str, Any] = {}
    if live.topics is not None:
        out["topics"] = [{"name": t.name, "partitions": t.partitions, "replication_factor": t.replication_factor,
                          **({"configs": dict(sorted(t.configs.items()))} if t.configs else {})}
                         for _, t in sorted(live.topics.items()) if not protected_topic(t.name)]
    if live.credentials is not None:
        out["users"] = [{"name": c.user, "mechanism": c.mechanism,
                         "password_file": PASSWORD_PLACEHOLDER.format(user=c.user)}
                        for c in sorted(live.credentials) if c.user != live.admin_user]
    if live.acls is not None:
        acls = []
        for a in sorted(a for a in live.acls if managed_acl(a)):
            row: dict[str, Any] = {"principal": a.principal}
            if a.permission != "allow":
                row["permission"] = a.permission
            row |= {"operation": a.operation, "resource_type": a.resource_type}
            if a.resource_type != "cluster":
                row["resource"] = a.resource
            if a.pattern != "literal":
                row["pattern"] = a.pattern
            if a.host != "*":
                row["host"] = a.host
            acls.append(row)
        out["acls"] = acls
    if live.quotas is not None:
        quotas = []
        for e, values in sorted(live.quotas.items()):
            if not values:
                continue
            row = {}
            for name, value in (("user", e.user), ("client", e.client)):
                if value == DEFAULT:
                    row[f"{name}_default"] = True
                elif value is not None:
                    row[name] = value
            row |= {k: _quota_value(k, values[k]) for k in QUOTA_KEYS if k in values}
            quotas.append(row)
        out["quotas"] = quotas
    return out


def export_yaml(live: State) -> str:
    """:func:`export` as kctl.yaml text, the note on passwords above the users."""
    data = export(live)
    parts = []
    for key, value in data.items():
        text = yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False)
        if key == "users" and value:
            text = f"# {EXPORT_NOTE}\n{text}"
        parts.append(text)
    return "".join(parts)


def live_state(topics: Iterable[Topic] | None = None, credentials: Iterable[Credential] | None = None,
               acls: Iterable[Acl] | None = None, quotas: Mapping[QuotaEntity, Mapping[str, float]] | None = None,
               admin_user: str | None = None) -> State:
    """A live state from what the caller read (each section None when it was not read)."""
    return State(None if topics is None else {t.name: t for t in topics},
                 None if credentials is None else set(credentials),
                 None if acls is None else set(acls),
                 None if quotas is None else {e: {k: float(v) for k, v in q.items()} for e, q in quotas.items()},
                 admin_user=admin_user)
