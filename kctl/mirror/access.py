"""How MirrorMaker logs in to secured clusters: its own users and their ACLs, made by ``kctl mirror up``.

MirrorMaker never runs as kctl's admin user. On a secured cluster that kctl runs, each flow gets a SCRAM user
of its own, its password kept 0600 in that cluster's state dir like any ``kctl user create``:

- on the source, ``mirror-to-<target>``, allowed to read: topics (read, describe, their configs), groups
  (describe: their committed offsets for the checkpoints) and the cluster (describe);
- on the target, ``mirror-from-<mirror>``, allowed to write what a flow writes: the replicas (topics
  ``<mirror>.`` with the prefix policy, any topic with identity), MirrorMaker's own topics (``mm2-``,
  ``heartbeats``, ``<mirror>.checkpoints.internal``), the Connect group ``<mirror>-mm2``, the offsets of the
  groups it syncs (groups: read), creating topics (cluster: create, describe, describe configs,
  idempotent write) and, with exactly_once, its transactional ids.

Every step is idempotent: a user with its password kept is left as it is, ACLs already there are kept.
"""

from __future__ import annotations

from kctl.errors import KctlError
from kctl.kafka.security import Grant, ensure_user
from kctl.mirror.config import Login
from kctl.model.properties import security_protocol
from kctl.model.spec import ClusterSpec, MirrorPolicy, MirrorSpec
from kctl.security import store


def source_user(target: ClusterSpec) -> str:
    return f"mirror-to-{target.name}"


def target_user(mirror: MirrorSpec) -> str:
    return f"mirror-from-{mirror.name}"


def source_grants() -> list[Grant]:
    return [Grant("topic", "*", op) for op in ("read", "describe", "describe_configs")] + [
        Grant("group", "*", "describe"), Grant("cluster", "kafka-cluster", "describe")]


def target_grants(mirror: MirrorSpec) -> list[Grant]:
    group = f"{mirror.name}-mm2"  # dedicated mode's Connect group: <source alias>-mm2
    grants = [Grant("cluster", "kafka-cluster", op) for op in
              ("describe", "create", "describe_configs", "idempotent_write")]
    if mirror.policy is MirrorPolicy.identity:
        grants.append(Grant("topic", "*", "all"))  # a replica has its source's name: any topic
    else:
        grants.append(Grant("topic", f"{mirror.name}.", "all", prefixed=True))  # replicas, checkpoints
    grants += [Grant("topic", "mm2-", "all", prefixed=True), Grant("topic", "heartbeats", "all"),
               Grant("topic", f"{mirror.name}.checkpoints.internal", "all"),
               Grant("group", group, "all"), Grant("group", "*", "read")]
    if mirror.exactly_once:
        # Connect's transactional ids: <group>-<connector>-<task> for the tasks, connect-cluster-<group> for
        # the leader's writes to its config topic.
        grants += [Grant("transactional_id", group, "all", prefixed=True),
                   Grant("transactional_id", f"connect-cluster-{group}", "all")]
    return grants


def login_of(spec: ClusterSpec, user: str, password: str) -> Login:
    """MirrorMaker's login to the secured cluster ``spec`` that kctl runs."""
    ca = store.client_ca_file(store.state_dir_of(spec))  # both CAs while one is rotated
    try:
        ca_pem = ca.read_bytes() if spec.security.tls else None
    except OSError as exc:
        raise KctlError(f"cannot read {spec.name}'s CA {ca}: {exc.strerror}",
                        hint="`kctl up` of that cluster makes it") from None
    return Login(security_protocol(spec), spec.security.sasl_mechanism, user, password, ca_pem)


def provision(target: ClusterSpec, mirror: MirrorSpec, source_spec: ClusterSpec | None,
              source_login: Login) -> tuple[Login, Login]:
    """(MirrorMaker's login to the source, to the target), making its users and ACLs where kctl runs a
    secured cluster; a source kctl does not run keeps the login its `client` settings gave."""
    if source_spec is not None and source_spec.security.enabled:
        user = source_user(target)
        source_login = login_of(source_spec, user, ensure_user(source_spec, user, source_grants()))
    target_login = Login()
    if target.security.enabled:
        user = target_user(mirror)
        target_login = login_of(target, user, ensure_user(target, user, target_grants(mirror)))
    return source_login, target_login
