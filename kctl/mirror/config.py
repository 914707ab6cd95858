"""A mirror of kctl.yaml as MirrorMaker 2's dedicated-mode configuration, and the Compose project that runs it.

Every mirror of a cluster is one flow ``<mirror name> -> <cluster name>`` in its own container
(``mm-<name>`` of the Compose project ``kctl-<cluster>-mirror``), from the node image, on the host's network:
MirrorMaker reaches both clusters at their published ports on 127.0.0.1 (two clusters of this machine both
call their brokers logger1..3 inside their own networks, so a container on both networks could not tell them
apart), and listens on nothing (dedicated mode without its internal REST server).

A secured cluster on either side is reached as :class:`Login` says: the protocol, the SASL user and the CA.
Passwords and CA files go into the mirror's secrets directory (``<state>/mirror/<name>/secrets``, mode 0700,
files 0600, mounted read-only and copied by the entrypoint to a directory only the JVM's user reads), and
mm2.properties names them through Kafka's FileConfigProvider: no secret is in mm2.properties, the Compose
file, an environment variable or a process argument.

Everything MirrorMaker keeps lives in the target cluster: its Connect topics (``mm2-configs|offsets|status.
<source>.internal``), the checkpoints (``<source>.checkpoints.internal``), the heartbeats, and the offset syncs
(``offset-syncs.topic.location = target``), so it needs nothing but reads of the source.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kctl import contract
from kctl.errors import KctlError
from kctl.kafka.client import Target
from kctl.mirror.stack import directory, project
from kctl.model.spec import ClusterSpec, MirrorPolicy, MirrorSpec

# What MirrorMaker leaves out whatever the spec says (its defaults, kept when the spec adds its own excludes).
DEFAULT_TOPICS_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
DEFAULT_GROUPS_EXCLUDE = r"console-consumer-.*, connect-.*, __.*"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
CONF = "/etc/kctl"
# How often MirrorMaker commits the source offsets it replicated (Connect's default is 60 s): what a restart
# replays, and how fresh `kctl mirror lag` is.
OFFSET_FLUSH_MS = 2000


# The groups failed over to this cluster (`kctl mirror failover`), in <state>/mirror/<name>/.
FAILED_OVER_FILE = "failed-over.json"
SECRETS_FILE = "mirror.properties"  # alias.password = ..., in the mirror's secrets directory
FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
LOGIN_MODULES = {"SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule"}


@dataclass(frozen=True)
class Login:
    """How MirrorMaker reaches one cluster: PLAINTEXT, or a protocol with a SASL user and a CA. ``password``
    and ``ca_pem`` only ever reach the secrets directory."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_pem: bytes | None = field(default=None, repr=False)


PLAINTEXT = Login()


@dataclass(frozen=True)
class Source:
    """Where a mirror reads: the source as kctl's clients reach it (its bootstrap servers, which MirrorMaker uses
    too, its spec when it is a kctl.yaml, kctl's own client settings for it: {} for PLAINTEXT), and MirrorMaker's
    login there."""

    alias: str
    target: Target
    login: Login = PLAINTEXT


def service(mirror: MirrorSpec) -> str:
    return f"mm-{mirror.name.lower()}"


def find(spec: ClusterSpec, name: str | None) -> MirrorSpec:
    """The named mirror, or the only one; KctlError (exit 2 by its hint) otherwise."""
    if not spec.mirrors:
        raise KctlError(f"{spec.name} has no mirrors", hint="add one under `mirrors:` in kctl.yaml"
                                                            " (docs/mirroring.md)")
    if name is None:
        if len(spec.mirrors) > 1:
            raise KctlError(f"{spec.name} has {len(spec.mirrors)} mirrors: name one with --mirror",
                            hint="--mirror " + " | ".join(m.name for m in spec.mirrors))
        return spec.mirrors[0]
    for m in spec.mirrors:
        if m.name == name:
            return m
    raise KctlError(f"no mirror {name!r} in {spec.name}", hint="its mirrors: "
                    + ", ".join(m.name for m in spec.mirrors))


REST_PORT_BASE = 18083


def rest_port(spec: ClusterSpec, mirror: MirrorSpec) -> int:
    """The internal REST server's port of an exactly-once mirror (on 127.0.0.1)."""
    return mirror.rest_port or REST_PORT_BASE + spec.mirrors.index(mirror)


def replicates(mirror: MirrorSpec, topic: str) -> bool:
    """Whether the mirror copies source ``topic``: its topics pattern, less its excludes and MirrorMaker's."""
    if not re.fullmatch(mirror.topics, topic):
        return False
    excl = _excludes(mirror.topics_exclude, DEFAULT_TOPICS_EXCLUDE)
    return not any(re.fullmatch(p.strip(), topic) for p in excl.split(",") if p.strip())


def foreign_targets(mirror: MirrorSpec, source_topics: set[str], target_topics: set[str],
                    replicated: set[str]) -> list[str]:
    """Pure: with the identity policy, the target topics MirrorMaker would write into that are not its own: a
    source topic the mirror copies whose name a target topic has already, which MirrorMaker never replicated
    into (``replicated``: the source topics in its Connect offsets here). MirrorMaker would append into it and
    sync the source's configs over its own (a shorter retention included)."""
    if mirror.policy is not MirrorPolicy.identity:
        return []  # a prefixed replica's name cannot be a topic of the target's own, except by design
    return sorted(t for t in source_topics & target_topics if replicates(mirror, t) and t not in replicated)


def remote_topic(mirror: MirrorSpec, topic: str) -> str:
    """The name a source topic has in this cluster."""
    return topic if mirror.policy is MirrorPolicy.identity else f"{mirror.name}.{topic}"


def internal_topics(mirror: MirrorSpec, target: str) -> dict[str, str]:
    """MirrorMaker's topics in the target cluster for this flow (dedicated mode's names)."""
    return {
        "offsets": f"mm2-offsets.{mirror.name}.internal",
        "status": f"mm2-status.{mirror.name}.internal",
        "configs": f"mm2-configs.{mirror.name}.internal",
        "checkpoints": f"{mirror.name}.checkpoints.internal",
        "heartbeats": "heartbeats",
        "offset_syncs": f"mm2-offset-syncs.{target}.internal",
    }


def _excludes(user: str | None, defaults: str) -> str:
    return f"{user}, {defaults}" if user else defaults


def login_properties(alias: str, login: Login) -> dict[str, str]:
    """``<alias>.*`` client settings of one cluster; its password as a FileConfigProvider reference."""
    if login.protocol == "PLAINTEXT":
        return {}
    props = {f"{alias}.security.protocol": login.protocol}
    if login.mechanism is not None:
        pw = f"${{file:{contract.secret_path(SECRETS_FILE)}:{alias}.password}}"
        props[f"{alias}.sasl.mechanism"] = login.mechanism
        props[f"{alias}.sasl.jaas.config"] = (f'{LOGIN_MODULES[login.mechanism]} required'
                                              f' username="{login.username}" password="{pw}";')
    if login.ca_pem is not None:
        props[f"{alias}.ssl.truststore.type"] = "PEM"
        props[f"{alias}.ssl.truststore.location"] = contract.secret_path(f"{alias}-ca.pem")
    return props


def secrets(mirror: MirrorSpec, target: str, source: Source, target_login: Login) -> dict[str, bytes]:
    """The files of one mirror's secrets directory (name -> content); {} when both sides are PLAINTEXT."""
    files: dict[str, bytes] = {}
    passwords = []
    for alias, login in ((mirror.name, source.login), (target, target_login)):
        if login.password is not None:
            passwords.append(f"{alias}.password={_escape(login.password)}")
        if login.ca_pem is not None:
            files[f"{alias}-ca.pem"] = login.ca_pem
    if passwords:
        files[SECRETS_FILE] = ("\n".join(passwords) + "\n").encode()
    return files


def _escape(value: str) -> str:
    """A value as java.util.Properties reads it back unchanged."""
    out = value.replace("\\", "\\\\")
    for c in ":=#! ":
        out = out.replace(c, "\\" + c)
    return out


def failed_over_path(state_dir: Path, mirror: MirrorSpec) -> Path:
    return directory(state_dir) / mirror.name / FAILED_OVER_FILE


def failed_over(state_dir: Path, mirror: MirrorSpec) -> list[str]:
    """The groups ``kctl mirror failover`` moved from ``mirror``'s source to this cluster
    (kctl.mirror.failover.stop_sync): MirrorMaker's offset sync leaves them alone."""
    path = failed_over_path(state_dir, mirror)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise KctlError(f"{path} cannot be read ({exc})",
                        hint='it lists the groups failed over to this cluster ({"groups": [...]}); fix or remove'
                             " it, then `kctl mirror up`") from None
    return sorted({str(g) for g in data.get("groups", [])}) if isinstance(data, dict) else []


def properties(spec: ClusterSpec, mirror: MirrorSpec, source: Source,
               target_login: Login = PLAINTEXT, failed_over: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """mm2.properties of one flow, as ordered key -> value. ``failed_over``: groups moved to this cluster,
    which MirrorMaker no longer checkpoints nor syncs (each matched literally in ``groups.exclude``)."""
    src, dst = mirror.name, spec.name
    flow = f"{src}->{dst}"
    rf = min(3, len(spec.brokers))
    props: dict[str, Any] = {
        "clusters": f"{src}, {dst}",
        f"{src}.bootstrap.servers": source.target.bootstrap_servers,
        f"{dst}.bootstrap.servers": spec.bootstrap_servers,
        f"{flow}.enabled": "true",
        f"{dst}->{src}.enabled": "false",
        f"{flow}.topics": mirror.topics,
        f"{flow}.topics.exclude": _excludes(mirror.topics_exclude, DEFAULT_TOPICS_EXCLUDE),
        f"{flow}.groups": mirror.groups,
        f"{flow}.groups.exclude": ", ".join([_excludes(mirror.groups_exclude, DEFAULT_GROUPS_EXCLUDE),
                                             *(re.escape(g) for g in failed_over)]),
        f"{flow}.emit.heartbeats.enabled": "true",
        f"{flow}.emit.checkpoints.enabled": "true",
        f"{flow}.emit.checkpoints.interval.seconds": mirror.checkpoint_seconds,
        f"{flow}.sync.group.offsets.enabled": str(mirror.sync_group_offsets).lower(),
        f"{flow}.sync.group.offsets.interval.seconds": mirror.checkpoint_seconds,
        f"{flow}.refresh.topics.interval.seconds": mirror.refresh_topics_seconds,
        f"{flow}.refresh.groups.interval.seconds": mirror.refresh_topics_seconds,
        f"{flow}.offset-syncs.topic.location": "target",
        # Topic configs follow the source; ACLs are not copied (a plain target has no authorizer to take them,
        # and a secured one keeps the ACLs its operator gives with `kctl acl`).
        f"{flow}.sync.topic.configs.enabled": "true",
        f"{flow}.sync.topic.acls.enabled": "false",
        "tasks.max": mirror.tasks,
        "replication.factor": rf,
        "checkpoints.topic.replication.factor": rf,
        "heartbeats.topic.replication.factor": rf,
        "offset-syncs.topic.replication.factor": rf,
        "config.storage.replication.factor": rf,
        "offset.storage.replication.factor": rf,
        "status.storage.replication.factor": rf,
        "offset.flush.interval.ms": OFFSET_FLUSH_MS,
    }
    logins = {**login_properties(src, source.login), **login_properties(dst, target_login)}
    if logins:
        props["config.providers"] = "file"
        props["config.providers.file.class"] = FILE_PROVIDER
        props.update(logins)
    if mirror.policy is MirrorPolicy.identity:
        props["replication.policy.class"] = IDENTITY_POLICY
    if mirror.exactly_once:
        # KIP-618 in dedicated mode: the target's source tasks write each batch and its offsets in one
        # transaction, which needs the workers' internal REST server (KIP-710), on 127.0.0.1 only; what is read
        # from the source skips aborted transactions.
        props[f"{dst}.exactly.once.source.support"] = "enabled"
        props["dedicated.mode.enable.internal.rest"] = "true"
        props["listeners"] = f"http://127.0.0.1:{rest_port(spec, mirror)}"
        props["rest.advertised.host.name"] = "127.0.0.1"
        props[f"{src}.consumer.isolation.level"] = "read_committed"
    props.update(mirror.overrides)
    return props


def render_properties(props: dict[str, Any], note: str) -> str:
    lines = [f"# {note}", "# Rendered by kctl from kctl.yaml (mirrors); `kctl mirror up` rewrites it."]
    lines += [f"{k} = {_value(v)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return str(v).replace("\\", "\\\\")


def log4j() -> str:
    """log4j (reload4j) of the MirrorMaker JVM: a rolling file beside its stdout."""
    a = "log4j.appender.ROLLINGFILE"
    return "\n".join([
        "# log4j of MirrorMaker, rendered by kctl.",
        "log4j.rootLogger=INFO, ROLLINGFILE",
        f"{a}=org.apache.log4j.RollingFileAppender",
        f"{a}.File=${{kafka.logs.dir}}/mirrormaker.log",
        f"{a}.MaxFileSize=10MB",
        f"{a}.MaxBackupIndex=5",
        f"{a}.layout=org.apache.log4j.PatternLayout",
        f"{a}.layout.ConversionPattern=[%d] %p %m (%c)%n",
        "log4j.logger.org.reflections=ERROR",
        "log4j.logger.org.apache.kafka.clients=WARN",
    ]) + "\n"


def compose_document(spec: ClusterSpec, state_dir: Path, with_secrets: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The mirrors' Compose project; the mirrors named in ``with_secrets`` mount their secrets directory."""
    base = directory(state_dir)
    services: dict[str, Any] = {}
    for m in spec.mirrors:
        labels = {**spec.labels, contract.LABEL_CLUSTER + ".mirror": spec.name, "io.kctl.mirror": m.name}
        services[service(m)] = {
            "image": spec.local_image_ref,
            "network_mode": "host",
            "restart": "unless-stopped",
            "labels": labels,
            "environment": {"KCTL_SERVICES": "mirrormaker", "KCTL_NODE": service(m), "KCTL_MM2_TARGET": spec.name,
                            "KAFKA_HEAP_OPTS": f"-Xms{m.heap} -Xmx{m.heap}",
                            # mirrors[].jvm_options (flags, never a secret: the spec refuses those)
                            **({"KAFKA_OPTS": " ".join(m.jvm_options)} if m.jvm_options else {})},
            "volumes": [f"{base / m.name / 'conf'}:{CONF}:ro", f"{base / m.name / 'logs'}:/var/log/kctl"]
            + ([f"{secrets_dir(state_dir, m)}:{contract.SECRETS_MOUNT}:ro"] if m.name in with_secrets else []),
            "stop_grace_period": "60s",
        }
    return {"name": project(spec), "services": services}


def secrets_dir(state_dir: Path, mirror: MirrorSpec) -> Path:
    return directory(state_dir) / mirror.name / "secrets"


def render(spec: ClusterSpec, state_dir: Path, sources: dict[str, Source],
           target_logins: dict[str, Login] | None = None) -> tuple[dict[str, str], dict[str, dict[str, bytes]]]:
    """The files under ``<state>/mirror`` (relative path -> text), and each mirror's secrets (mirror -> its
    secrets directory's files), which the caller writes 0600. ``target_logins``: each mirror's login to this
    cluster (PLAINTEXT when not given)."""
    files: dict[str, str] = {}
    hidden: dict[str, dict[str, bytes]] = {}
    for m in spec.mirrors:
        login = (target_logins or {}).get(m.name, PLAINTEXT)
        files[f"{m.name}/conf/mm2.properties"] = render_properties(
            properties(spec, m, sources[m.name], login, failed_over(state_dir, m)),
            f"MirrorMaker 2: {m.name} -> {spec.name}")
        files[f"{m.name}/conf/log4j-mirrormaker.properties"] = log4j()
        own = secrets(m, spec.name, sources[m.name], login)
        if own:
            hidden[m.name] = own
    doc = compose_document(spec, state_dir, frozenset(hidden))
    files["compose.yaml"] = ("# Rendered by kctl from kctl.yaml (mirrors); `kctl mirror up` rewrites it.\n"
                             + yaml.safe_dump(doc, sort_keys=False, width=1 << 16))
    return files, hidden
