"""kafka-configs: describe, set and delete dynamic configs of brokers, topics, clients and users.

Brokers and topics go through the AdminClient (incremental alter: other dynamic
keys are never touched). Two things confluent-kafka cannot do are delegated:
the cluster-wide broker default (it refuses an empty resource name) and client
or user quotas (no quota API) run Kafka's own ``kafka-configs.sh`` in a node
container; the cluster-wide defaults are read from ZooKeeper, where Kafka keeps
them (/config/brokers/<default>).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from kctl import contract
from kctl.deferred import defer_import
from kctl.errors import KctlError, UsageError
from kctl.kafka.client import Target, admin, kafka_error, require_reachable
from kctl.model.properties import KAFKA_SPEC_FIELDS, parse_properties
from kctl.model.spec import QUOTA_KEYS, ClusterSpec

# The static side (a node's rendered files, Kafka's config tool in a node, ZooKeeper's defaults) serves `kctl
# config` of a broker or a cluster default; `kctl topic describe` imports this module for a topic's configs only.
defer_import("kctl.model.render")
defer_import("kctl.runtime.cluster")
defer_import("kctl.zk.znodes")

from kctl.model import render as model_render  # noqa: E402
from kctl.runtime import cluster as runtime_cluster  # noqa: E402
from kctl.zk import znodes  # noqa: E402

TIMEOUT = 15.0



def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Kafka 3.9.1's dynamic update modes, generated from the broker jar itself
# (`kafka-run-class.sh kafka.server.KafkaConfig` prints the config docs with an
# "Update Mode" column, built from DynamicBrokerConfig). Every other broker key
# is read-only: it changes only with server.properties and a restart.
PER_BROKER = _words("""
    advertised.listeners listener.security.protocol.map listeners principal.builder.class
    sasl.enabled.mechanisms sasl.jaas.config sasl.kerberos.kinit.cmd sasl.kerberos.min.time.before.relogin
    sasl.kerberos.principal.to.local.rules sasl.kerberos.service.name sasl.kerberos.ticket.renew.jitter
    sasl.kerberos.ticket.renew.window.factor sasl.login.refresh.buffer.seconds
    sasl.login.refresh.min.period.seconds sasl.login.refresh.window.factor sasl.login.refresh.window.jitter
    sasl.mechanism.inter.broker.protocol ssl.cipher.suites ssl.client.auth ssl.enabled.protocols
    ssl.endpoint.identification.algorithm ssl.engine.factory.class ssl.key.password ssl.keymanager.algorithm
    ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.location ssl.keystore.password
    ssl.keystore.type ssl.protocol ssl.provider ssl.secure.random.implementation ssl.trustmanager.algorithm
    ssl.truststore.certificates ssl.truststore.location ssl.truststore.password ssl.truststore.type
""") | frozenset((
    # DynamicConfig.Broker: replication throttles, per broker and not in KafkaConfig's docs.
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
))
CLUSTER_WIDE = _words("""
    background.threads compression.gzip.level compression.lz4.level compression.type compression.zstd.level
    log.cleaner.backoff.ms log.cleaner.dedupe.buffer.size log.cleaner.delete.retention.ms
    log.cleaner.io.buffer.load.factor log.cleaner.io.buffer.size log.cleaner.io.max.bytes.per.second
    log.cleaner.max.compaction.lag.ms log.cleaner.min.cleanable.ratio log.cleaner.min.compaction.lag.ms
    log.cleaner.threads log.cleanup.policy log.flush.interval.messages log.flush.interval.ms
    log.index.interval.bytes log.index.size.max.bytes log.local.retention.bytes log.local.retention.ms
    log.message.downconversion.enable log.message.timestamp.after.max.ms log.message.timestamp.before.max.ms
    log.message.timestamp.difference.max.ms log.message.timestamp.type log.preallocate log.retention.bytes
    log.retention.ms log.roll.jitter.ms log.roll.ms log.segment.bytes log.segment.delete.delay.ms
    max.connection.creation.rate max.connections max.connections.per.ip max.connections.per.ip.overrides
    message.max.bytes metric.reporters min.insync.replicas num.io.threads num.network.threads
    num.recovery.threads.per.data.dir num.replica.fetchers producer.id.expiration.ms remote.fetch.max.wait.ms
    remote.log.index.file.cache.total.size.bytes remote.log.manager.copy.max.bytes.per.second
    remote.log.manager.fetch.max.bytes.per.second transaction.partition.verification.enable
    unclean.leader.election.enable
""")

READ_ONLY, PER_BROKER_MODE, CLUSTER_WIDE_MODE = "read-only", "per-broker", "cluster-wide"

SOURCE_NAMES = {
    "DYNAMIC_BROKER_CONFIG": "dynamic per-broker",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "dynamic cluster-wide default",
    "STATIC_BROKER_CONFIG": "static server.properties",
    "DEFAULT_CONFIG": "Kafka default",
    "DYNAMIC_TOPIC_CONFIG": "dynamic topic",
    "DYNAMIC_BROKER_LOGGER_CONFIG": "dynamic broker logger",
    "UNKNOWN_CONFIG": "unknown",
    "QUOTA": "dynamic quota",
}
# Precedence, highest first (the seed's "Dynamic Update Mode" list).
PRECEDENCE = ("DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG",
              "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG")


def update_mode(key: str) -> str:
    """read-only, per-broker or cluster-wide, as Kafka 3.9's docs say for broker configs."""
    if key in PER_BROKER or key.startswith("listener.name."):
        return PER_BROKER_MODE
    if key in CLUSTER_WIDE:
        return CLUSTER_WIDE_MODE
    return READ_ONLY


def source_name(source: str) -> str:
    return SOURCE_NAMES.get(source, source.lower())


def spec_setting(key: str) -> str:
    """The kctl.yaml setting that changes a server.properties key."""
    return KAFKA_SPEC_FIELDS.get(key, f"kafka.overrides[{key!r}] (or nodes[].overrides.kafka)")


@dataclass(frozen=True)
class Entity:
    """One kafka-configs entity: broker N, the broker default, a topic, a client id or a user."""

    kind: str  # broker, broker-default, topic, client, user
    name: str = ""

    def __str__(self) -> str:
        return {"broker": f"broker {self.name}", "broker-default": "the cluster-wide broker default",
                "topic": f"topic {self.name}", "client": f"client-id {self.name!r}",
                "user": f"user {self.name!r}"}[self.kind]

    @property
    def tool_args(self) -> list[str]:
        t = {"broker": "brokers", "broker-default": "brokers", "topic": "topics", "client": "clients",
             "user": "users"}[self.kind]
        return ["--entity-type", t, "--entity-default"] if self.kind == "broker-default" else \
            ["--entity-type", t, "--entity-name", self.name]


def entity_from(broker: int | None = None, broker_default: bool = False, topic: str | None = None,
                client: str | None = None, user: str | None = None) -> Entity:
    chosen = [e for e in (
        Entity("broker", str(broker)) if broker is not None else None,
        Entity("broker-default") if broker_default else None,
        Entity("topic", topic) if topic else None,
        Entity("client", client) if client is not None else None,
        Entity("user", user) if user is not None else None,
    ) if e is not None]
    if len(chosen) != 1:
        raise UsageError("pick exactly one entity: --broker ID, --broker-default, --topic NAME, --client ID"
                         " or --user NAME")
    return chosen[0]


@dataclass
class Layer:
    source: str
    value: str | None


@dataclass
class ConfigRow:
    key: str
    value: str | None
    source: str  # human name, e.g. "dynamic per-broker"
    update_mode: str | None  # brokers only
    read_only: bool
    sensitive: bool
    layers: list[Layer] = field(default_factory=list)  # highest precedence first


@dataclass
class ConfigDescription:
    entity: str
    rows: list[ConfigRow]
    # Brokers: where the static layer was read (the server.properties the running broker mounts) ...
    static_from: str | None = None
    # ... and server.properties keys on which today's kctl.yaml differs from it: {key: {running, spec}}.
    pending: dict[str, dict[str, str | None]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class RunningStatic:
    """The static config a broker runs with, and how today's kctl.yaml differs from it."""

    values: dict[str, str]
    source: str | None
    pending: dict[str, dict[str, str | None]]
    warnings: list[str]


@dataclass
class ConfigChange:
    entity: str
    action: str  # set, deleted
    keys: dict[str, str | None]
    note: str = ""


# ----- parsing of kafka-configs.sh output ------------------------------------------


def parse_quota_describe(text: str) -> dict[str, float]:
    """``Quota configs for client-id 'c1' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^Quota configs for .*? are (.*)$", line.strip())
        if not m:
            continue
        for item in m.group(1).split(","):
            k, sep, v = item.strip().partition("=")
            if sep:
                try:
                    out[k.strip()] = float(v)
                except ValueError:
                    continue
    return out


def tool_error(output: str) -> str:
    """The operator-facing sentence in a Kafka tool's failure output (no Java stack)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("Caused by:"):
            return re.sub(r"^Caused by: (\S+\.)*\S+(Exception|Error): ", "", ln)
    for ln in lines:
        if not ln.startswith("at ") and not ln.startswith("Error while executing") and "Exception" not in ln:
            return ln
    return lines[-1] if lines else "no output"


def _format_value(v: str) -> str:
    # kafka-configs' --add-config takes a,b lists in square brackets.
    return f"[{v}]" if "," in v and not v.startswith("[") else v


# ----- quotas as ZooKeeper keeps them ------------------------------------------------


def zookeeper_quotas(spec: ClusterSpec) -> dict[tuple[str | None, str | None], dict[str, float]]:
    """Every quota entity's quotas on a cluster on ZooKeeper, read from the znodes Kafka keeps them in
    (``/config/users/<user>[/clients/<client>]``, ``/config/clients/<client>``; names sanitized, ``<default>`` the
    default), as (user, client) -> quotas: what `kafka-configs.sh --describe` answers, without a JVM per entity
    type. /config/users also holds the users' SCRAM credentials (a guarded znode, read as the brokers' principal):
    only the quota keys are taken."""
    from urllib.parse import unquote

    from kazoo.exceptions import NoNodeError

    out: dict[tuple[str | None, str | None], dict[str, float]] = {}

    def take(zk: Any, path: str, key: tuple[str | None, str | None]) -> None:
        try:
            raw, _ = zk.get(path)
        except NoNodeError:
            return
        conf = json.loads(raw).get("config", {}) if raw else {}
        values = {k: float(v) for k, v in conf.items() if k in QUOTA_KEYS}
        if values:
            out[key] = values

    def children(zk: Any, path: str) -> list[str]:
        try:
            return sorted(zk.get_children(path))
        except NoNodeError:
            return []

    with znodes.connect(spec, principal=znodes.guarded_reader(spec)) as zk:
        for user in children(zk, "/config/users"):
            name = unquote(user)
            take(zk, f"/config/users/{user}", (name, None))
            for client in children(zk, f"/config/users/{user}/clients"):
                take(zk, f"/config/users/{user}/clients/{client}", (name, unquote(client)))
        for client in children(zk, "/config/clients"):
            take(zk, f"/config/clients/{client}", (None, unquote(client)))
    return out


# ----- Kafka's own tool in a node container --------------------------------------------


def run_tool(spec: ClusterSpec, tool: str, args: list[str], timeout: float = 60) -> str:
    """Run TOOL from the image's Kafka scripts (contract.KAFKA_BIN) in the first running node; KctlError
    with the tool's message if it fails."""
    run = runtime_cluster.run_kafka_tool(spec, tool, args, timeout=timeout)
    if run.exit_code != 0:
        raise KctlError(f"{tool} failed: {tool_error(run.output)}", hint=f"ran in {run.host}: {' '.join(run.argv)}")
    return run.output


# ----- describe --------------------------------------------------------------------


def _check_broker(target: Target, broker: str) -> None:
    md = require_reachable(target)
    ids = sorted(int(b) for b in md.brokers)
    if not broker.isdigit() or int(broker) not in ids:
        raise KctlError(f"broker {broker} does not exist in this cluster (no live broker {broker})",
                        hint=f"live brokers: {', '.join(map(str, ids)) or 'none'}")


def dynamic_of(target: Target, broker: str, source: str) -> dict[str, str]:
    """The broker configs of ``source`` (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG) that ``broker``
    reports ("": the cluster-wide defaults), as Kafka answers DescribeConfigs."""
    from confluent_kafka.admin import ConfigSource  # type: ignore[attr-defined]

    entries = _describe_resource(target, "broker", broker)
    return {k: str(e.value) for k, e in entries.items()
            if e.value is not None and not e.is_sensitive and ConfigSource(e.source).name == source}


def parse_entity_default(text: str) -> dict[str, str]:
    """Pure: `kafka-configs.sh --entity-type brokers --entity-default --describe`, one indented
    ``key=value sensitive=... synonyms={...}`` line per cluster-wide default (a sensitive value is left out)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^\s+([\w.\-]+)=(.*?) sensitive=(true|false) synonyms=", line)
        if m and m.group(3) == "false":
            out[m.group(1)] = m.group(2)
    return out


def cluster_defaults(spec: ClusterSpec) -> dict[str, str]:
    """Dynamic cluster-wide broker defaults, as Kafka stores them in /config/brokers/<default> (on KRaft, in its
    metadata: asked of a broker as the default broker resource)."""
    if spec.on_kraft:
        return parse_entity_default(run_tool(spec, "kafka-configs.sh", [
            "--entity-type", "brokers", "--entity-default", "--describe"]))
    with znodes.connect(spec, principal=znodes.guarded_reader(spec)) as zk:
        if not zk.exists("/config/brokers/<default>"):
            return {}
        node = znodes.get(zk, "/config/brokers/<default>")
    conf = (node.json or {}).get("config", {})
    return {str(k): str(v) for k, v in conf.items()}


def _describe_resource(target: Target, kind: str, name: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    rtype = ConfigResource.Type.BROKER if kind == "broker" else ConfigResource.Type.TOPIC
    res = ConfigResource(rtype, name)
    try:
        a = admin(target)  # keep a reference: a collected client cancels its futures
        entries: dict[str, Any] = a.describe_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
        return entries
    except Exception as exc:  # noqa: BLE001 - translated for the operator
        raise kafka_error(exc, f"{kind} {name}") from None


def describe(target: Target, entity: Entity, all_keys: bool = False,
             keys: list[str] | None = None) -> ConfigDescription:
    """Per key: effective value, its source, the update mode and every layer of the precedence."""
    from confluent_kafka.admin import ConfigSource  # type: ignore[attr-defined]

    spec = target.kctl_spec

    if entity.kind in ("client", "user"):
        quotas = parse_quota_describe(run_tool(spec, "kafka-configs.sh", [*entity.tool_args, "--describe"]))
        rows = [ConfigRow(k, _num(v), source_name("QUOTA"), None, False, False, [Layer("QUOTA", _num(v))])
                for k, v in sorted(quotas.items()) if not keys or k in keys]
        return ConfigDescription(str(entity), rows)
    if entity.kind == "broker-default":
        require_reachable(target)
        dyn = cluster_defaults(spec)
        rows = [ConfigRow(k, v, source_name("DYNAMIC_DEFAULT_BROKER_CONFIG"), update_mode(k), False, False,
                          [Layer("DYNAMIC_DEFAULT_BROKER_CONFIG", v)])
                for k, v in sorted(dyn.items()) if not keys or k in keys]
        return ConfigDescription(str(entity), rows)

    if entity.kind == "broker":
        _check_broker(target, entity.name)
    else:
        require_reachable(target)
    entries = _describe_resource(target, entity.kind, entity.name)
    unknown = [k for k in keys or [] if k not in entries]
    if unknown:
        raise KctlError(f"{entity} has no config {', '.join(unknown)}",
                        hint=f"`kctl config describe ... --all` lists every key of {entity}")
    static: dict[str, str] = {}
    defaults: dict[str, str] = {}
    running: RunningStatic | None = None
    if entity.kind == "broker":
        running = running_static(spec, int(entity.name))
        static = running.values
        try:
            defaults = cluster_defaults(spec)
        except KctlError:
            defaults = {}
    rows = []
    for key, e in sorted(entries.items()):
        src = ConfigSource(e.source).name
        if keys:
            if key not in keys:
                continue
        elif not all_keys and src == "DEFAULT_CONFIG":
            continue
        layers = _layers(key, e, src, static, defaults) if entity.kind == "broker" else _topic_layers(e, src)
        rows.append(ConfigRow(key, e.value, source_name(src),
                              update_mode(key) if entity.kind == "broker" else None,
                              bool(e.is_read_only), bool(e.is_sensitive), layers))
    if running is None:
        return ConfigDescription(str(entity), rows)
    return ConfigDescription(str(entity), rows, running.source, running.pending, running.warnings)


def static_drift(running: dict[str, str], wanted: dict[str, str]) -> dict[str, dict[str, str | None]]:
    """Keys whose value in today's kctl.yaml differs from the running server.properties."""
    return {k: {"running": running.get(k), "spec": wanted.get(k)}
            for k in sorted(set(running) | set(wanted)) if running.get(k) != wanted.get(k)}


def running_static(spec: ClusterSpec, broker: int) -> RunningStatic:
    """The server.properties the running broker was started with (its mounted render), not today's kctl.yaml.

    Kafka reads server.properties once, at start; kctl.yaml may have been edited since
    (without `kctl up`), so the spec alone can show values the broker does not have.
    """
    try:
        host = spec.kafka_host(spec.node(broker))
    except KctlError:
        return RunningStatic({}, None, {}, [f"broker {broker} is not in kctl.yaml: no static layer"])
    rendered = model_render.render(spec)
    wanted = parse_properties(rendered.files.get(f"{host}/{contract.HOST_CONF}/server.properties", ""))
    try:
        conf = runtime_cluster.mounted_conf(spec, host)
        path = conf.conf_dir / "server.properties"
        text = path.read_text(encoding="utf-8")
        mtime = path.stat().st_mtime
    except (KctlError, OSError) as exc:
        why = exc.message if isinstance(exc, KctlError) else str(exc)
        return RunningStatic(wanted, "kctl.yaml", {}, [
            f"cannot read the server.properties broker {broker} runs ({why}); the static layer is kctl.yaml's"])
    running = parse_properties(text)
    warnings: list[str] = []
    if conf.started_at is not None and mtime > conf.started_at + 1:
        warnings.append(f"{path} was written after {host} started (`kctl render`?); broker {broker} may run"
                        " an earlier render")
    pending: dict[str, dict[str, str | None]] = {}
    current_hash = next((c.config_hash for c in rendered.containers if c.name == host), None)
    # <state>/<host>/conf: `kctl apply` records there what the processes run when the label cannot follow.
    applied = runtime_cluster.applied_hashes(conf.conf_dir.parent.parent)
    if current_hash != conf.config_hash and applied.get(host) != current_hash:
        pending = static_drift(running, wanted)
        what = ", ".join(f"{k}: {v['running']} -> {v['spec']}" for k, v in list(pending.items())[:8])
        warnings.append(f"kctl.yaml differs from what {host} runs (render {conf.config_hash}, kctl.yaml renders"
                        f" {current_hash})" + (f": {what}" if what else "")
                        + "; `kctl apply` applies it (restarting only what changed, through the roll's gates)")
    return RunningStatic(running, str(path), pending, warnings)


def _default_of(e: Any) -> str | None:
    for syn in (e.synonyms or {}).values():
        if syn.source == 5:  # DEFAULT_CONFIG
            return str(syn.value) if syn.value is not None else None
    return None


def _layers(key: str, e: Any, src: str, static: dict[str, str], defaults: dict[str, str]) -> list[Layer]:
    """Every level that sets ``key`` on a broker, highest precedence first.

    confluent-kafka keys synonyms by name, so same-named levels collapse; the
    levels are rebuilt from the effective entry, ZooKeeper's cluster-wide
    defaults, kctl's rendered server.properties and the synonyms' default.
    """
    out: list[Layer] = []
    if src == "DYNAMIC_BROKER_CONFIG":
        out.append(Layer("DYNAMIC_BROKER_CONFIG", e.value))
    if key in defaults:
        out.append(Layer("DYNAMIC_DEFAULT_BROKER_CONFIG", defaults[key]))
    elif src == "DYNAMIC_DEFAULT_BROKER_CONFIG":
        out.append(Layer("DYNAMIC_DEFAULT_BROKER_CONFIG", e.value))
    if src == "STATIC_BROKER_CONFIG":
        out.append(Layer("STATIC_BROKER_CONFIG", e.value))
    elif key in static:
        out.append(Layer("STATIC_BROKER_CONFIG", static[key]))
    d = e.value if src == "DEFAULT_CONFIG" else _default_of(e)
    if d is not None or src == "DEFAULT_CONFIG":
        out.append(Layer("DEFAULT_CONFIG", d))
    return out


def _topic_layers(e: Any, src: str) -> list[Layer]:
    out = [Layer(src, e.value)]
    for syn in (e.synonyms or {}).values():
        from confluent_kafka.admin import ConfigSource  # type: ignore[attr-defined]

        s = ConfigSource(syn.source).name
        if s != src:
            out.append(Layer(s, syn.value))
    return sorted(out, key=lambda la: PRECEDENCE.index(la.source) if la.source in PRECEDENCE else 99)


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


# ----- set / delete ------------------------------------------------------------------


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise UsageError(f"{p!r} is not key=value")
        out[k.strip()] = v.strip()
    return out


def check_dynamic(entity: Entity, keys: list[str]) -> None:
    """Refuse keys that a broker cannot change without a restart, with the kctl.yaml setting to use."""
    if entity.kind not in ("broker", "broker-default"):
        return
    ro = [k for k in keys if update_mode(k) == READ_ONLY]
    if ro:
        where = "; ".join(f"{k} -> {spec_setting(k)}" for k in ro)
        raise KctlError(
            f"{', '.join(ro)} {'is' if len(ro) == 1 else 'are'} read-only: Kafka reads "
            f"{'it' if len(ro) == 1 else 'them'} from server.properties at start, so a change needs a broker "
            "restart",
            hint=f"change it in kctl.yaml ({where}) and run `kctl apply`, which restarts only the brokers"
                 " whose value changes, one at a time through the rolling restart's gates")
    if entity.kind == "broker-default":
        pb = [k for k in keys if update_mode(k) == PER_BROKER_MODE]
        if pb:
            raise KctlError(f"{', '.join(pb)}: per-broker key(s) cannot be set as a cluster-wide default",
                            hint="use --broker ID for each broker")


def check_quota_keys(entity: Entity, keys: list[str]) -> None:
    if entity.kind in ("client", "user"):
        bad = [k for k in keys if k not in QUOTA_KEYS]
        if bad:
            raise UsageError(f"{', '.join(bad)}: not a quota of {entity}", hint=f"quotas: {', '.join(QUOTA_KEYS)}")


def set_configs(target: Target, entity: Entity, values: dict[str, str]) -> ConfigChange:
    if not values:
        raise UsageError("nothing to set", hint="pass key=value ...")
    check_quota_keys(entity, list(values))
    # Which broker, then which key, then whether it can change: the first thing wrong is the one reported.
    entries = None if entity.kind in ("client", "user") else _known_keys(target, entity, list(values))
    check_dynamic(entity, list(values))
    if entity.kind in ("client", "user", "broker-default"):
        require_reachable(target)
        arg = ",".join(f"{k}={_format_value(v)}" for k, v in values.items())
        run_tool(target.kctl_spec, "kafka-configs.sh", [*entity.tool_args, "--alter", "--add-config", arg])
        return ConfigChange(str(entity), "set", dict(values))
    _alter(target, entity, {k: v for k, v in values.items()}, delete=False, entries=entries)
    return ConfigChange(str(entity), "set", dict(values))


def _known_keys(target: Target, entity: Entity, keys: list[str]) -> dict[str, Any]:
    """The entity's config entries, after checking that the broker exists and that Kafka knows every key."""
    if entity.kind == "broker":
        _check_broker(target, entity.name)
        kind, name = "broker", entity.name
    elif entity.kind == "broker-default":
        ids = sorted(int(b) for b in require_reachable(target).brokers)
        if not ids:
            raise KctlError("no live broker to check the keys against", hint="`kctl status`")
        kind, name = "broker", str(ids[0])
    else:
        require_reachable(target)
        kind, name = entity.kind, entity.name
    entries = _describe_resource(target, kind, name)
    unknown = [k for k in keys if k not in entries and not k.startswith("listener.name.")]
    if unknown:
        raise KctlError(f"{', '.join(unknown)}: not a {entity.kind.replace('-default', '')} config Kafka knows",
                        hint=f"`kctl config describe --{kind} {name} --all` lists the keys")
    return entries


def delete_configs(target: Target, entity: Entity, keys: list[str]) -> ConfigChange:
    if not keys:
        raise UsageError("nothing to delete", hint="pass the keys to delete")
    check_quota_keys(entity, keys)
    if entity.kind in ("client", "user", "broker-default"):
        require_reachable(target)
        current = {r.key for r in describe(target, entity).rows}
        absent = [k for k in keys if k not in current]
        if absent:
            raise KctlError(f"{', '.join(absent)} not set on {entity}", hint="`kctl config describe` shows what is")
        run_tool(target.kctl_spec, "kafka-configs.sh", [*entity.tool_args, "--alter", "--delete-config",
                                                        ",".join(keys)])
        return ConfigChange(str(entity), "deleted", {k: None for k in keys})
    _alter(target, entity, {k: None for k in keys}, delete=True)
    return ConfigChange(str(entity), "deleted", {k: None for k in keys})


def _alter(target: Target, entity: Entity, values: dict[str, str | None], delete: bool,
           entries: dict[str, Any] | None = None) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
    )

    describe_entries = entries if entries is not None else _known_keys(target, entity, list(values))
    if delete:
        dyn = ("DYNAMIC_BROKER_CONFIG",) if entity.kind == "broker" else ("DYNAMIC_TOPIC_CONFIG",)
        absent = [k for k in values if ConfigSource(describe_entries[k].source).name not in dyn]
        if absent:
            raise KctlError(f"{', '.join(absent)} not set dynamically on {entity}",
                            hint="only dynamic values can be deleted; `kctl config describe` shows the sources")
    op = AlterConfigOpType.DELETE if delete else AlterConfigOpType.SET
    changes = [ConfigEntry(k, v if v is not None else "", incremental_operation=op) for k, v in values.items()]
    rtype = ConfigResource.Type.BROKER if entity.kind == "broker" else ConfigResource.Type.TOPIC
    res = ConfigResource(rtype, entity.name, incremental_configs=changes)
    try:
        a = admin(target)
        a.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        raise kafka_error(exc, str(entity)) from None
