"""Users (SCRAM credentials), ACLs and quotas of a secured cluster, and the client settings to reach it.

Users and ACLs go through confluent-kafka's AdminClient as the admin user
(AlterUserScramCredentials, CreateAcls/DescribeAcls/DeleteAcls); quotas through
Kafka's kafka-configs in a node (librdkafka has no client-quota API), including the
``--entity-default`` entities ``kctl config`` does not name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.kafka.client import REQUEST_TIMEOUT, Target, admin, kafka_error
from kctl.kafka.configs import run_tool
from kctl.model.spec import ACL_OPERATIONS, QUOTA_KEYS, ClusterSpec
from kctl.security import store

SCRAM_ITERATIONS = 8192
OPERATIONS = ACL_OPERATIONS  # kctl.yaml's `acls:` and `kctl acl` spell them alike


def _ck() -> Any:
    """confluent_kafka.admin, untyped: its stubs do not export the ACL and SCRAM types."""
    import importlib

    return importlib.import_module("confluent_kafka.admin")


def require_secured(spec: ClusterSpec, what: str) -> None:
    if not spec.security.enabled:
        raise UsageError(f"{what} needs the secured profile: cluster {spec.name!r} has no authentication",
                         hint="set security.enabled: true in kctl.yaml (`kctl init --secure` writes it); see"
                              " docs/security.md for moving a running cluster")


def _state_dir(spec: ClusterSpec) -> Path:
    return store.state_dir_of(spec)


# ----- users ---------------------------------------------------------------------------------


@dataclass
class UserChange:
    user: str
    action: str  # created, password changed, deleted
    mechanism: str
    password_file: str | None = None


@dataclass
class UserRow:
    user: str
    mechanisms: list[str]
    password_kept: bool  # kctl has its password in the state dir (`--user NAME` works)
    super_user: bool


def _mechanism(spec: ClusterSpec) -> Any:
    ScramMechanism = _ck().ScramMechanism

    return ScramMechanism.SCRAM_SHA_512 if spec.security.sasl_mechanism == "SCRAM-SHA-512" \
        else ScramMechanism.SCRAM_SHA_256


def _result(client: Any, futures: dict[Any, Any], what: str) -> None:
    """Wait for every future; ``client`` stays referenced until they resolve (a collected client cancels them)."""
    from confluent_kafka import KafkaException

    for fut in futures.values():
        try:
            fut.result(REQUEST_TIMEOUT)
        except KafkaException as exc:
            raise kafka_error(exc, what) from None


def set_password(spec: ClusterSpec, user: str, password: str | None, *, create: bool) -> UserChange:
    """Create a user (or change its password): its SCRAM credential, and the password kept 0600 in the state dir."""
    ScramCredentialInfo = _ck().ScramCredentialInfo
    UserScramCredentialUpsertion = _ck().UserScramCredentialUpsertion

    require_secured(spec, "users")
    store.check_user(user)
    if user == spec.security.admin_user:
        raise UsageError(f"{user!r} is kctl's admin user", hint="its password is generated at `kctl up` and kept in"
                                                                " the state dir; pick another name")
    exists = user in {r.user for r in list_users(spec)}
    if create and exists:
        raise KctlError(f"user {user!r} already exists", hint=f"`kctl user passwd {user}` changes its password")
    if not create and not exists:
        raise KctlError(f"user {user!r} does not exist", hint=f"`kctl user create {user}` makes it")
    pw = password or store.new_password()
    if len(pw) < 8:
        raise UsageError("the password is shorter than 8 characters", hint="pass a longer one on stdin")
    mech = _mechanism(spec)
    up = UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, SCRAM_ITERATIONS), pw.encode())
    a = admin(Target.of(spec))
    _result(a, a.alter_user_scram_credentials([up]), f"user {user}")
    path = store.save_user_password(_state_dir(spec), user, pw)
    return UserChange(user, "created" if create else "password changed", spec.security.sasl_mechanism, str(path))


def alter_scram(spec: ClusterSpec, user: str, mechanism: str, password: str | None) -> None:
    """One SCRAM credential of ``user`` set (``password``) or, with None, deleted: what kctl.yaml's declared users
    need (the password read from the user's file by the caller)."""
    require_secured(spec, "users")
    ck = _ck()
    mech = getattr(ck.ScramMechanism, mechanism.replace("-", "_"))
    change = ck.UserScramCredentialDeletion(user, mech) if password is None else ck.UserScramCredentialUpsertion(
        user, ck.ScramCredentialInfo(mech, SCRAM_ITERATIONS), password.encode())
    a = admin(Target.of(spec))
    _result(a, a.alter_user_scram_credentials([change]), f"user {user}")


def delete_user(spec: ClusterSpec, user: str) -> UserChange:
    UserScramCredentialDeletion = _ck().UserScramCredentialDeletion

    require_secured(spec, "users")
    store.check_user(user)
    if user == spec.security.admin_user:
        raise UsageError(f"{user!r} is kctl's admin user and cannot be deleted")
    rows = {r.user: r for r in list_users(spec)}
    if user not in rows:
        raise KctlError(f"user {user!r} does not exist", hint="`kctl user list` shows the users")
    ScramMechanism = _ck().ScramMechanism

    dels = [UserScramCredentialDeletion(user, getattr(ScramMechanism, m.replace("-", "_")))
            for m in rows[user].mechanisms]
    a = admin(Target.of(spec))
    _result(a, a.alter_user_scram_credentials(dels), f"user {user}")
    store.forget_user(_state_dir(spec), user)
    return UserChange(user, "deleted", ",".join(rows[user].mechanisms))


def list_users(spec: ClusterSpec) -> list[UserRow]:
    from confluent_kafka import KafkaException

    require_secured(spec, "users")
    a = admin(Target.of(spec))
    res = a.describe_user_scram_credentials()
    try:
        found = res.result(REQUEST_TIMEOUT) if hasattr(res, "result") else \
            {u: f.result(REQUEST_TIMEOUT) for u, f in res.items()}
    except KafkaException as exc:
        raise kafka_error(exc, "users") from None
    kept = set(store.known_users(_state_dir(spec))) | {spec.security.admin_user}
    rows = []
    for user, desc in sorted(found.items()):
        mechs = sorted(str(getattr(i.mechanism, "name", i.mechanism)).replace("_", "-")
                       for i in desc.scram_credential_infos)
        rows.append(UserRow(user, mechs, user in kept, user == spec.security.admin_user))
    return rows


# ----- ACLs ----------------------------------------------------------------------------------


@dataclass
class AclRow:
    principal: str
    permission: str  # ALLOW or DENY
    operation: str
    resource_type: str
    resource: str
    pattern: str  # LITERAL or PREFIXED
    host: str = "*"


@dataclass
class AclChange:
    action: str  # added, removed
    acls: list[AclRow] = field(default_factory=list)


def _principal(p: str) -> str:
    if not p.startswith("User:") or len(p) <= 5:
        raise UsageError(f"{p!r} is not a principal", hint="write it as User:NAME")
    return p


def _resource(topic: str | None, group: str | None, cluster: bool, *, required: bool) -> tuple[Any, str] | None:
    ResourceType = _ck().ResourceType

    chosen = [(ResourceType.TOPIC, topic) if topic else None, (ResourceType.GROUP, group) if group else None,
              (ResourceType.BROKER, "kafka-cluster") if cluster else None]
    picked = [c for c in chosen if c is not None]
    if len(picked) > 1:
        raise UsageError("name one resource: --topic, --group or --cluster")
    if not picked:
        if required:
            raise UsageError("no resource", hint="pass --topic T, --group G or --cluster")
        return None
    return picked[0]


def _operation(op: str) -> Any:
    AclOperation = _ck().AclOperation

    if op.lower() not in OPERATIONS:
        raise UsageError(f"unknown operation {op!r}", hint=f"one of {', '.join(OPERATIONS)}")
    return getattr(AclOperation, op.upper())


def _row(b: Any) -> AclRow:
    rt = b.restype.name
    return AclRow(b.principal, b.permission_type.name, b.operation.name.lower(),
                  "cluster" if rt == "BROKER" else rt.lower(), b.name, b.resource_pattern_type.name, b.host)


def _binding(principal: str, allow: bool, operation: str, topic: str | None, group: str | None, cluster: bool,
             prefixed: bool, host: str) -> Any:
    AclBinding = _ck().AclBinding
    AclPermissionType = _ck().AclPermissionType
    ResourcePatternType = _ck().ResourcePatternType

    res = _resource(topic, group, cluster, required=True)
    assert res is not None
    if prefixed and cluster:
        raise UsageError("--prefixed names a topic or group prefix, not the cluster")
    return AclBinding(res[0], res[1], ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL,
                      _principal(principal), host,
                      _operation(operation), AclPermissionType.ALLOW if allow else AclPermissionType.DENY)


def add_acl(spec: ClusterSpec, principal: str, allow: bool, operation: str, *, topic: str | None = None,
            group: str | None = None, cluster: bool = False, prefixed: bool = False, host: str = "*") -> AclChange:
    require_secured(spec, "ACLs")
    b = _binding(principal, allow, operation, topic, group, cluster, prefixed, host)
    a = admin(Target.of(spec))
    _result(a, a.create_acls([b]), "acl add")
    return AclChange("added", [_row(b)])


def add_bindings(spec: ClusterSpec, bindings: list[Any], what: str) -> None:
    """Create confluent-kafka AclBindings as they are (kept when already there)."""
    require_secured(spec, "ACLs")
    a = admin(Target.of(spec))
    _result(a, a.create_acls(bindings), what)


def remove_acl(spec: ClusterSpec, principal: str, allow: bool, operation: str, *, topic: str | None = None,
               group: str | None = None, cluster: bool = False, prefixed: bool = False,
               host: str = "*") -> AclChange:
    from confluent_kafka import KafkaException
    AclBindingFilter = _ck().AclBindingFilter

    require_secured(spec, "ACLs")
    b = _binding(principal, allow, operation, topic, group, cluster, prefixed, host)
    f = AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                         b.permission_type)
    removed: list[AclRow] = []
    a = admin(Target.of(spec))
    for fut in a.delete_acls([f]).values():
        try:
            removed.extend(_row(x) for x in fut.result(REQUEST_TIMEOUT))
        except KafkaException as exc:
            raise kafka_error(exc, "acl remove") from None
    if not removed:
        raise KctlError("no such ACL; nothing was removed", hint="`kctl acl list` shows the ACLs")
    return AclChange("removed", removed)


def list_acls(spec: ClusterSpec, principal: str | None = None, topic: str | None = None,
              group: str | None = None, cluster: bool = False) -> list[AclRow]:
    from confluent_kafka import KafkaException
    AclBindingFilter = _ck().AclBindingFilter
    AclOperation = _ck().AclOperation
    AclPermissionType = _ck().AclPermissionType
    ResourcePatternType = _ck().ResourcePatternType
    ResourceType = _ck().ResourceType

    require_secured(spec, "ACLs")
    res = _resource(topic, group, cluster, required=False)
    f = AclBindingFilter(res[0] if res else ResourceType.ANY, res[1] if res else None,
                         ResourcePatternType.ANY if res else ResourcePatternType.ANY,
                         _principal(principal) if principal else None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    try:
        a = admin(Target.of(spec))
        found = a.describe_acls(f).result(REQUEST_TIMEOUT)
    except KafkaException as exc:
        raise kafka_error(exc, "acl list") from None
    rows = [_row(b) for b in found]
    return sorted(rows, key=lambda r: (r.principal, r.resource_type, r.resource, r.operation))


# ----- users kctl makes for its own services (MirrorMaker, the stream job on kctl.yaml's Spark cluster) ----------


@dataclass(frozen=True)
class Grant:
    """One ACL: allow ``operation`` on a resource (topic, group, transactional_id or cluster)."""

    resource: str
    name: str
    operation: str
    prefixed: bool = False


def grant_binding(principal: str, g: Grant) -> Any:
    ck = _ck()
    rtype = {"topic": ck.ResourceType.TOPIC, "group": ck.ResourceType.GROUP, "cluster": ck.ResourceType.BROKER,
             "transactional_id": ck.ResourceType.TRANSACTIONAL_ID}[g.resource]
    pattern = ck.ResourcePatternType.PREFIXED if g.prefixed else ck.ResourcePatternType.LITERAL
    return ck.AclBinding(rtype, g.name, pattern, principal, "*", getattr(ck.AclOperation, g.operation.upper()),
                         ck.AclPermissionType.ALLOW)


def ensure_user(spec: ClusterSpec, user: str, grants: list[Grant]) -> str:
    """The user's password: the SCRAM user made (or its password reset when kctl does not keep it) and its
    ACLs added, on the secured cluster ``spec``. Idempotent: a user with its password kept is left as it is,
    ACLs already there are kept."""
    state = store.state_dir_of(spec)
    kept = store.user_file(state, user)
    users = {r.user for r in list_users(spec)}
    if user not in users:
        set_password(spec, user, None, create=True)
    elif not kept.exists():
        set_password(spec, user, None, create=False)
    add_bindings(spec, [grant_binding(f"User:{user}", g) for g in grants], f"ACLs of {user}")
    return store.user_password(spec, state, user)[1]


# ----- quotas ----------------------------------------------------------------------------------


@dataclass
class QuotaChange:
    entity: str
    action: str  # set, deleted
    values: dict[str, str | None]


def quota_entity(user: str | None, client: str | None, user_default: bool, client_default: bool) -> list[str]:
    """kafka-configs' entity arguments for one user and/or client id (or their defaults)."""
    if user and user_default or client and client_default:
        raise UsageError("--user and --user-default (or --client and --client-default) exclude each other")
    args: list[str] = []
    if user or user_default:
        args += ["--entity-type", "users"] + (["--entity-default"] if user_default else ["--entity-name", str(user)])
    if client or client_default:
        args += ["--entity-type", "clients"] + (["--entity-default"] if client_default
                                                else ["--entity-name", str(client)])
    if not args:
        raise UsageError("no quota entity", hint="pass --user NAME, --client ID, --user-default or --client-default")
    return args


def _describe_entity(args: list[str]) -> str:
    parts, i = [], 0
    while i < len(args):
        kind = args[i + 1][:-1]
        if args[i + 2] == "--entity-default":
            parts.append(f"{kind} default")
            i += 3
        else:
            parts.append(f"{kind} {args[i + 3]!r}")
            i += 4
    return " and ".join(parts)


def set_quota(spec: ClusterSpec, entity_args: list[str], values: dict[str, str]) -> QuotaChange:
    check_quotas(values)
    run_tool(spec, "kafka-configs.sh", [*entity_args, "--alter", "--add-config",
                                        ",".join(f"{k}={v}" for k, v in values.items())])
    return QuotaChange(_describe_entity(entity_args), "set", dict(values))


def check_quotas(values: dict[str, str]) -> None:
    """UsageError for an unknown quota name, a value that is not a number, or no quota at all."""
    bad = [k for k in values if k not in QUOTA_KEYS]
    if bad:
        raise UsageError(f"not a quota: {', '.join(bad)}", hint=f"quotas are {', '.join(QUOTA_KEYS)}")
    for k, v in values.items():
        try:
            float(v)
        except ValueError:
            raise UsageError(f"{k}={v}: not a number") from None
    if not values:
        raise UsageError("no quota given", hint="e.g. producer_byte_rate=1048576")


def delete_quota(spec: ClusterSpec, entity_args: list[str], keys: list[str]) -> QuotaChange:
    bad = [k for k in keys if k not in QUOTA_KEYS]
    if bad or not keys:
        raise UsageError(f"not a quota: {', '.join(bad) or '(none given)'}", hint=f"quotas are {', '.join(QUOTA_KEYS)}")
    run_tool(spec, "kafka-configs.sh", [*entity_args, "--alter", "--delete-config", ",".join(keys)])
    return QuotaChange(_describe_entity(entity_args), "deleted", {k: None for k in keys})


# ----- client settings ----------------------------------------------------------------------------

FORMATS = ("librdkafka", "java", "kcat")


def client_config(spec: ClusterSpec, user: str | None = None, fmt: str = "librdkafka") -> str:
    """The properties a client needs: bootstrap, protocol, mechanism, credentials, the CA file."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
    if user and not spec.security.enabled:
        raise UsageError(f"--user {user}: cluster {spec.name!r} has no users (security is off)")
    settings = store.client_settings(spec, user)
    # While a migration runs, the secured listeners the clients move to (their own ports).
    props: dict[str, str] = {"bootstrap.servers": spec.secured_bootstrap_servers,
                             **(store.java_settings(settings) if fmt == "java" else settings)}
    head = {
        "librdkafka": f"# librdkafka client settings of cluster {spec.name}",
        "java": f"# Java client settings of cluster {spec.name} (kafka-*.sh --command-config /"
                " --producer.config / --consumer.config FILE)",
        "kcat": f"# kcat settings of cluster {spec.name}: kcat -F FILE -t TOPIC -P (or -C)",
    }[fmt]
    who = f" as user {settings['sasl.username']}" if settings else ""
    secret = "; it holds a password: keep it mode 0600" if settings else ""
    return f"{head}{who}{secret}\n" + "".join(f"{k}={v}\n" for k, v in props.items())
