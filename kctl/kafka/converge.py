"""kctl.yaml's declared topics, users, ACLs and quotas against the live cluster: the live state read (only the
sections kctl.yaml declares), the plan made (:mod:`kctl.kafka.declared`, pure), and the plan run one action at a
time through the same calls as the imperative commands (`kctl topic`, `kctl config`, `kctl user`, `kctl acl`,
`kctl quota`).

Every action is idempotent and reads nothing it wrote: a run interrupted anywhere (Ctrl-C, kill -9, a broker
that refuses) leaves each action done or not done, and the next `kctl apply` plans from the live cluster again,
so it does what is left. A replication factor is not changed here: the plan names the reassignment that does it
(`kctl reassign plan --replication-factor`), and `kctl diff` goes on reporting it until it is done.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kafka import configs, reassign, security, topics
from kctl.kafka.client import REQUEST_TIMEOUT, Target, admin, kafka_error, require_reachable
from kctl.kafka.declared import (
    DEFAULT,
    Acl,
    Action,
    Credential,
    Kind,
    Plan,
    QuotaEntity,
    State,
    Topic,
    declared_from,
    live_state,
    protected_topic,
)
from kctl.kafka.declared import (
    export_yaml as declared_yaml,
)
from kctl.kafka.declared import plan as make_plan
from kctl.model.spec import ClusterSpec
from kctl.security import store

Progress = Callable[[str], None]


def declares(spec: ClusterSpec) -> bool:
    """kctl.yaml declares at least one of topics, users, acls, quotas."""
    return any(x is not None for x in (spec.topics, spec.users, spec.acls, spec.quotas))


# ----- the live state -----------------------------------------------------------------------------


def _topics(spec: ClusterSpec) -> list[Topic]:
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    target = Target.of(spec)
    a = admin(target)
    md = require_reachable(target, client=a)
    names = sorted(n for n, t in md.topics.items() if t.error is None and not protected_topic(n))
    own: dict[str, dict[str, str]] = {n: {} for n in names}
    if names:
        futs = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names],
                                  request_timeout=REQUEST_TIMEOUT)
        for res, fut in futs.items():
            try:
                entries = fut.result(REQUEST_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - one clear message for the topic that did not answer
                raise kafka_error(exc, f"configs of topic {res.name}", topic=res.name) from None
            own[res.name] = {k: str(e.value) for k, e in entries.items()
                             if _source(e) == "DYNAMIC_TOPIC_CONFIG"}
    out = []
    for n in names:
        parts = md.topics[n].partitions
        rf = max((len(p.replicas) for p in parts.values()), default=0)
        out.append(Topic(n, len(parts), rf, own[n]))
    return out


def _source(entry: Any) -> str:
    from confluent_kafka.admin import ConfigSource  # type: ignore[attr-defined]

    return str(ConfigSource(entry.source).name)


def _credentials(spec: ClusterSpec) -> list[Credential]:
    security.require_secured(spec, "users")
    return [Credential(r.user, m) for r in security.list_users(spec) for m in r.mechanisms]


def _acls(spec: ClusterSpec) -> list[Acl]:
    security.require_secured(spec, "ACLs")
    return [Acl.of(r.principal, r.permission, r.operation, r.resource_type, r.resource, r.pattern, r.host)
            for r in security.list_acls(spec)]


_ENTITY = re.compile(r"(the default (user-principal|client-id))|((user-principal|client-id) '([^']*)')")


def parse_quota_entities(text: str) -> dict[QuotaEntity, dict[str, float]]:
    """Pure: every ``Quota configs for <entity> are k=v, ...`` line of `kafka-configs.sh --describe` (users, client
    ids, or both; their defaults) by entity."""
    out: dict[QuotaEntity, dict[str, float]] = {}
    for line in text.splitlines():
        m = re.match(r"^Quota configs for (.*?) are (.*)$", line.strip())
        if not m:
            continue
        user: str | None = None
        client: str | None = None
        for e in _ENTITY.finditer(m.group(1)):
            kind = e.group(2) or e.group(4)
            name = DEFAULT if e.group(1) else e.group(5)
            if kind == "user-principal":
                user = name
            else:
                client = name
        values = configs.parse_quota_describe(line)
        if values and (user is not None or client is not None):
            out[QuotaEntity(user, client)] = values
    return out


def _quotas(spec: ClusterSpec) -> dict[QuotaEntity, dict[str, float]]:
    """Every quota entity's quotas: on ZooKeeper (not migrating), its znodes; else kafka-configs.sh's describe of
    users, of client ids and of both (confluent-kafka has no DescribeClientQuotas), the three at once."""
    import concurrent.futures as cf

    if spec.kraft_phase == "zookeeper":
        return {QuotaEntity(user, client): values
                for (user, client), values in configs.zookeeper_quotas(spec).items()}

    def describe(kinds: tuple[str, ...]) -> str:
        return configs.run_tool(spec, "kafka-configs.sh", [*(x for k in kinds for x in ("--entity-type", k)),
                                                           "--describe"])

    out: dict[QuotaEntity, dict[str, float]] = {}
    with cf.ThreadPoolExecutor(max_workers=3) as pool:
        for text in pool.map(describe, [("users",), ("clients",), ("users", "clients")]):
            out.update(parse_quota_entities(text))
    return out


# The users kctl makes for its own services: MirrorMaker's on a source and a target (kctl.mirror.access), the stream
# job's on kctl.yaml's Spark cluster (kctl.stream.login).
SERVICE_USERS = ("mirror-to-", "mirror-from-", "kctl-stream-")


def kctls_topic(spec: ClusterSpec, name: str) -> bool:
    """A topic Kafka, kctl or a mirror of kctl.yaml owns: never planned, exported or pruned (Kafka's and kctl's
    ``__...``; MirrorMaker's ``mm2-...``, ``heartbeats``, ``<alias>.checkpoints.internal``; a mirror's replicas:
    ``<alias>.<topic>``, or with the identity policy the topics its regex takes)."""
    if protected_topic(name) or name.startswith("mm2-") or name == "heartbeats" \
            or name.endswith(".checkpoints.internal"):
        return True
    for m in spec.mirrors:
        if m.policy.value == "prefix" and name.startswith(f"{m.name}."):
            return True
        if m.policy.value == "identity" and re.fullmatch(m.topics, name) and not (
                m.topics_exclude and re.fullmatch(m.topics_exclude, name)):
            return True
    return False


def kctls_user(name: str) -> bool:
    return name.startswith(SERVICE_USERS)


def read_live(spec: ClusterSpec, declared: State) -> State:
    """The live cluster's state of the sections ``declared`` manages (None for the others: not read), without
    what Kafka, kctl and its mirrors own (:func:`kctls_topic`, the users of kctl's services and their ACLs)
    unless kctl.yaml names it."""
    named = set(declared.topics or {})
    users = {c.user for c in declared.credentials or set()}
    return live_state(
        [t for t in _topics(spec) if t.name in named or not kctls_topic(spec, t.name)]
        if declared.topics is not None else None,
        [c for c in _credentials(spec) if c.user in users or not kctls_user(c.user)]
        if declared.credentials is not None else None,
        [a for a in _acls(spec) if not kctls_user(a.principal.removeprefix("User:"))]
        if declared.acls is not None else None,
        _quotas(spec) if declared.quotas is not None else None,
        admin_user=spec.security.admin_user if spec.security.enabled else None)


@dataclass
class Convergence:
    """What kctl.yaml's declared resources need (``plan``), and after a run what was done."""
    cluster: str
    plan: Plan
    done: list[str] = field(default_factory=list)
    prune: bool = False
    who: dict[str, str] = field(default_factory=dict)  # an action's line -> who last changed its subject (audit)

    @property
    def clean(self) -> bool:
        return self.plan.empty

    @property
    def next_steps(self) -> list[str]:
        """The commands a replication factor change needs: a reassignment, not done by apply."""
        return [f"kctl reassign plan --topics {a.subject} --replication-factor {a.params['replication_factor']}"
                f" -o json > rf-{a.subject}.json && kctl reassign execute rf-{a.subject}.json"
                " --replication-factor-change --wait" for a in self.plan.reassignments]


def plan(spec: ClusterSpec, *, prune: bool = False) -> Convergence:
    """The plan from the live cluster to kctl.yaml's declared sections (nothing changed)."""
    declared = declared_from(spec)
    return Convergence(spec.name, make_plan(declared, read_live(spec, declared), prune=prune), prune=prune)


def export_yaml(spec: ClusterSpec) -> str:
    """The live cluster's topics and quotas, and on the secured profile its users and ACLs, as kctl.yaml's
    sections (kctl.kafka.declared.export_yaml)."""
    secured = spec.security.enabled
    every = State(topics={}, credentials=set() if secured else None, acls=set() if secured else None, quotas={})
    return declared_yaml(read_live(spec, every))


# ----- running the plan ---------------------------------------------------------------------------


def read_password(spec_file: Path | None, password_file: str) -> str:
    """A declared user's password: the first line of its file (relative to kctl.yaml), which must not be readable by
    others. Never shown: a message names the file only."""
    import os
    import stat

    base = spec_file.parent if spec_file is not None else Path.cwd()
    path = Path(password_file) if Path(password_file).is_absolute() else base / password_file
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the password file {path}: {exc.strerror}",
                         hint="write the user's password there (mode 0600); nothing was changed for it") from None
    if mode & 0o077:
        raise UsageError(f"the password file {path} is readable by others (mode {mode:o})",
                         hint=f"chmod 600 {path}")
    pw = text.splitlines()[0].strip() if text.strip() else ""
    if len(pw) < 8:
        raise UsageError(f"the password in {path} is shorter than 8 characters", hint="write a longer one")
    return pw


def _quota_args(e: QuotaEntity) -> list[str]:
    return security.quota_entity(None if e.user == DEFAULT else e.user, None if e.client == DEFAULT else e.client,
                                 e.user == DEFAULT, e.client == DEFAULT)


def _acl_args(a: Acl) -> dict[str, Any]:
    return {"topic": a.resource if a.resource_type == "topic" else None,
            "group": a.resource if a.resource_type == "group" else None,
            "cluster": a.resource_type == "cluster", "prefixed": a.pattern == "prefixed", "host": a.host}


def run_action(spec: ClusterSpec, spec_file: Path | None, a: Action) -> None:
    """One action of the plan, through the imperative commands' own calls."""
    target = Target.of(spec)
    p = a.params
    if a.kind is Kind.delete_topic:
        topics.delete(target, p["topic"])
    elif a.kind is Kind.create_topic:
        topics.create(target, p["topic"], p["partitions"], p["replication_factor"], dict(p["configs"]) or None,
                      if_not_exists=True)
    elif a.kind is Kind.add_partitions:
        topics.add_partitions(target, p["topic"], p["partitions"])
    elif a.kind is Kind.set_topic_configs:
        configs.set_configs(target, configs.entity_from(topic=p["topic"]), dict(p["configs"]))
    elif a.kind is Kind.reset_topic_configs:
        configs.delete_configs(target, configs.entity_from(topic=p["topic"]), list(p["keys"]))
    elif a.kind is Kind.delete_credential:
        security.alter_scram(spec, p["user"], p["mechanism"], None)
    elif a.kind is Kind.create_credential:
        pw = read_password(spec_file, p["password_file"])
        security.alter_scram(spec, p["user"], p["mechanism"], pw)
        store.save_user_password(store.state_dir_of(spec), p["user"], pw)  # `--user NAME` works, as after user create
    elif a.kind is Kind.delete_acl:
        acl: Acl = p["acl"]
        security.remove_acl(spec, acl.principal, acl.permission == "allow", acl.operation, **_acl_args(acl))
    elif a.kind is Kind.create_acl:
        acl = p["acl"]
        security.add_acl(spec, acl.principal, acl.permission == "allow", acl.operation, **_acl_args(acl))
    elif a.kind in (Kind.delete_quota, Kind.remove_quota_keys):
        security.delete_quota(spec, _quota_args(p["entity"]), list(p["keys"]))
    elif a.kind is Kind.set_quota:
        security.set_quota(spec, _quota_args(p["entity"]), dict(p["values"]))


def check_passwords(spec_file: Path | None, p: Plan) -> None:
    """Every password file a user to create needs, read before anything changes (one bad file: nothing done)."""
    for a in p.changes:
        if a.kind is Kind.create_credential:
            read_password(spec_file, a.params["password_file"])


def apply(spec: ClusterSpec, spec_file: Path | None, *, prune: bool = False, progress: Progress | None = None,
          reassign_rf: bool = False, throttle: int | None = None, state_dir: Path | None = None,
          timeout: float = 900) -> Convergence:
    """Converge the declared sections: the plan's changes in order (deletions first, only with ``prune``), each
    reported; refused when kctl.yaml asks what Kafka cannot do (nothing changed then). A replication factor is
    changed only with ``reassign_rf``: through kctl reassign's plan and execute (throttled to ``throttle``, waited
    for, verified), after every other change; otherwise it stays in ``next_steps``."""
    say = progress or (lambda _m: None)
    c = plan(spec, prune=prune)
    c.plan.check()  # a shrink asked: refused before anything changes
    check_passwords(spec_file, c.plan)
    moves = []
    for a in c.plan.changes:
        if a.kind is Kind.reassign_replication:
            moves.append(a)  # after the rest: data moves, throttled
            continue
        try:
            run_action(spec, spec_file, a)
        except KctlError as exc:
            raise ClusterError(f"{a.description}: {exc.message}; {len(c.done)} change(s) made before it",
                               hint=(exc.hint + "; " if exc.hint else "")
                               + "`kctl apply` again does what is left (`kctl diff` shows it)") from None
        c.done.append(a.description)
        say(a.description)
    if reassign_rf:
        for a in moves:
            topic, rf = a.params["topic"], int(a.params["replication_factor"])
            try:
                p = reassign.plan(spec, None, [topic], replication_factor=rf)
                target = {(e["topic"], int(e["partition"])): list(e["replicas"]) for e in p.kafka_json["partitions"]}
                if target:
                    reassign.execute(spec, target, throttle=throttle, wait=True, timeout=timeout, progress=say,
                                     change_rf=True, state_dir=state_dir)
            except KctlError as exc:
                raise ClusterError(f"{a.description}: {exc.message}; {len(c.done)} change(s) made before it",
                                   hint=(exc.hint + "; " if exc.hint else "") + "`kctl reassign status`; `kctl apply"
                                   " --reassign` again does what is left") from None
            c.done.append(a.description)
            say(a.description)
        c.plan.actions = [a for a in c.plan.actions if a not in moves]
    return c
