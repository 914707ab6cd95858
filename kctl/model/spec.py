"""The cluster spec: one validated description of a ZooKeeper + Kafka cluster.

``kctl.yaml`` is loaded into a frozen :class:`ClusterSpec`. Validation happens
entirely here, before any side effect: field-level rules come from pydantic,
cross-field rules from :func:`check_rules`. Every problem is reported with its
field path, all at once (``SpecError``), and nothing is written.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from kctl import contract
from kctl.deferred import defer_import
from kctl.errors import SpecError, UsageError
from kctl.files import write_durable
from kctl.kraft.phases import Phase, check_downgrade, check_pins, read

# pydantic's plugin loader takes importlib.metadata's entry_points at import time and calls it only
# when plugins are enabled (kctl's CLI disables them): the ~15 ms import waits for that call.
defer_import("importlib.metadata", calls=("entry_points",))

import yaml  # noqa: E402
from pydantic import (  # noqa: E402
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

KAFKA_VERSION = contract.DEFAULT_KAFKA_VERSION
SCALA_VERSION = contract.DEFAULT_SCALA_VERSION
# Kafka 3.9 is published for these Scala builds.
SCALA_VERSIONS = ("2.12", "2.13")

# Four-letter words kctl itself uses (status, readiness, `kctl zk`), not `*`: the container contract's.
DEFAULT_FOUR_LETTER_WORDS = contract.FOUR_LETTER_WORDS

_HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_CLUSTER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
_HEAP = re.compile(r"^[1-9][0-9]*[mMgG]$")

Scalar = str | int | float | bool
Overrides = dict[str, Scalar]
Port = Annotated[int, Field(ge=1, le=65535)]


class _Model(BaseModel):
    # defer_build: each model's validator is built when first used, not at import; a command that validates a
    # kctl.yaml builds ClusterSpec's once, its sections' inside it, instead of every section's on its own first
    # (import and load of the spec: 70 ms against 78, every command).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


class Topology(Enum):
    colocated = "colocated"
    split = "split"


class Engine(Enum):
    compose = "compose"
    swarm = "swarm"
    hosts = "hosts"


class MetadataMode(Enum):
    zookeeper = "zookeeper"
    kraft = "kraft"


class ZkRole(Enum):
    participant = "participant"
    observer = "observer"


class NodeOverrides(_Model):
    zookeeper: Overrides = Field(default_factory=dict, description="zoo.cfg keys for this node only.")
    kafka: Overrides = Field(default_factory=dict, description="server.properties keys for this node only.")


class NodeSpec(_Model):
    id: int = Field(ge=1, le=255, description="ZooKeeper myid and Kafka broker.id of this node (1..255).")
    hostname: str = Field(description="Container hostname and Compose service name, e.g. logger1.")
    role: ZkRole = Field(ZkRole.participant, description="ZooKeeper role: participant or observer.")
    broker: bool = Field(
        True, description="Run a Kafka broker on this node; false makes it a ZooKeeper-only node (a participant"
                          " or an observer with no broker: `kctl node add --no-broker`)."
    )
    zookeeper_port: Port | None = Field(
        None, description="Host port (127.0.0.1) for this node's ZooKeeper client port; default base + index."
    )
    kafka_port: Port | None = Field(
        None, description="Host port (127.0.0.1) of this broker's external listener; default base + index."
    )
    jmx_port: Port | None = Field(None, description="Host port for this broker's JMX; default base + index.")
    kafka_metrics_port: Port | None = Field(
        None, description="Host port (127.0.0.1) of this broker's Prometheus exporter (monitoring.enabled);"
                          " default base + index.")
    zookeeper_metrics_port: Port | None = Field(
        None, description="Host port (127.0.0.1) of this node's ZooKeeper Prometheus metrics (monitoring.enabled);"
                          " default base + index.")
    advertised_host: str | None = Field(
        None, description="engine swarm: the address clients outside the Swarm reach this node's host on (its"
                          " EXTERNAL listener is advertised there, and kctl reaches its published ports there);"
                          " default kafka.external_host. engine hosts: the host's address, required (kctl reaches"
                          " it there over ssh, and clients its listeners). Unused by engine compose."
    )
    swarm_node: str | None = Field(
        None, description="engine swarm: the Swarm node (hostname or id) this node's service runs on; default"
                          " round-robin over the Swarm's nodes."
    )
    overrides: NodeOverrides = Field(
        default_factory=NodeOverrides, description="Per-node overrides; they win over component overrides."
    )

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, v: str) -> str:
        if not _HOSTNAME.match(v):
            raise ValueError(
                f"{v!r} is not a valid hostname (lowercase letters, digits and '-', 1-63 characters,"
                " not starting or ending with '-')"
            )
        return v


class Versions(_Model):
    kafka: str = Field(
        KAFKA_VERSION,
        description="Apache Kafka version; kctl's image build produces "
        + ", ".join(sorted(contract.ZOOKEEPER_VERSIONS))
        + " (ZooKeeper is the one that Kafka release ships; with `image:` set, any 3.9.x). Kafka 4 has no"
        " ZooKeeper mode: a 4.x release needs a cluster on KRaft (`metadata: kraft`, or a finalized"
        " `kctl migrate kraft`). From a migration's first step to its end it stays the release the migration"
        " started on, and it never goes below the release of the cluster's metadata.version: the one its storage"
        " was formatted at (a cluster made on KRaft) or `kctl apply` raised, whichever is newer (all recorded in"
        " the state dir's kraft.json; docs/runbooks/migrate-to-kraft.md).",
    )
    scala: str = Field(SCALA_VERSION, description="Scala build of Kafka: " + " or ".join(SCALA_VERSIONS) + ".")

    @field_validator("kafka")
    @classmethod
    def _kafka(cls, v: str) -> str:
        if not re.match(r"^(3\.9|4\.\d+)\.\d+$", v):
            raise ValueError(f"Kafka {v} is not supported: kctl runs Kafka 3.9.x, and 4.x on a cluster on KRaft")
        return v

    @field_validator("scala")
    @classmethod
    def _scala(cls, v: str) -> str:
        if v not in SCALA_VERSIONS:
            raise ValueError(f"Scala {v}: Kafka 3.9 is built for Scala {' and '.join(SCALA_VERSIONS)} only")
        return v

    @property
    def zookeeper(self) -> str | None:
        """The ZooKeeper the node image runs: the one this Kafka release ships (None if kctl cannot build it)."""
        return contract.ZOOKEEPER_VERSIONS.get(self.kafka)


def _check_jvm_options(v: list[str], heap: str = "heap") -> list[str]:
    """JVM flags: one flag per item, no whitespace (the start scripts split on it), the heap kept to the setting
    ``heap`` names."""
    for flag in v:
        if not re.match(r"^-\S+$", flag):
            raise ValueError(f"{flag!r} is not one JVM flag (it starts with '-' and has no whitespace)")
        if re.match(r"^-Xm[sx]", flag):
            raise ValueError(f"{flag!r} sets the heap: use the `{heap}` setting instead")
        if re.search(r"(?i)password|secret", flag):
            raise ValueError(f"{flag.split('=', 1)[0]!r} would put a secret in the process's arguments and"
                             " environment; kctl passes secrets as files (docs/security.md)")
    return v


class ZooKeeperSpec(_Model):
    tick_time: int = Field(
        1000, ge=100, le=60000,
        description="tickTime in ms: the basic time unit. ZooKeeper expires sessions on tick boundaries and"
                    " grants clients 2 to 20 ticks of session (ZooKeeper's default 2000; kctl's 1000 lets a dead"
                    " broker's session end within a second of its timeout: docs/configs.md).")
    init_limit: int = Field(20, ge=1, le=1000,
                            description="initLimit in ticks: followers connecting to the leader (20 s at 1000 ms).")
    sync_limit: int = Field(10, ge=1, le=1000,
                            description="syncLimit in ticks: followers falling behind the leader (10 s at 1000 ms).")
    data_dir: str = Field(f"{contract.DATA_ROOT}/zookeeper/snapshots", description="dataDir: snapshots and myid.")
    data_log_dir: str = Field(
        f"{contract.DATA_ROOT}/zookeeper/txnlogs",
        description="dataLogDir: transaction logs, kept apart from snapshots.",
    )
    autopurge_snap_retain_count: int = Field(
        3, ge=3, description="autopurge.snapRetainCount: snapshots kept on purge (at least 3)."
    )
    autopurge_purge_interval: int = Field(
        24, ge=0, description="autopurge.purgeInterval in hours; 0 disables autopurge."
    )
    client_port: Port = Field(2181, description="clientPort inside the container.")
    peer_port: Port = Field(2888, description="Quorum port: followers to the leader.")
    election_port: Port = Field(3888, description="Leader election port.")
    max_client_connections: int = Field(60, ge=0, description="maxClientCnxns per client IP.")
    four_letter_words: list[str] = Field(
        default_factory=lambda: list(DEFAULT_FOUR_LETTER_WORDS),
        description="4lw.commands.whitelist: the words kctl uses by default; ['*'] enables all.",
    )
    admin_server: bool = Field(False, description="admin.enableServer: the Jetty AdminServer (off).")
    heap: str = Field("256m", description="JVM heap of each ZooKeeper (-Xms/-Xmx).")
    jvm_options: list[str] = Field(
        default_factory=list,
        description="Extra JVM flags of each ZooKeeper, after kctl's own (e.g. -XX:TieredStopAtLevel=1: starts"
                    " sooner on less CPU, lower peak speed; docs/configs.md). Not the heap: use heap.")
    host_port_base: Port = Field(
        12181, description="First host port for ZooKeeper client ports, published on 127.0.0.1."
    )
    overrides: Overrides = Field(default_factory=dict, description="Extra zoo.cfg keys; win over kctl's values.")

    @field_validator("heap")
    @classmethod
    def _heap(cls, v: str) -> str:
        if not _HEAP.match(v):
            raise ValueError(f"{v!r} is not a JVM heap size such as 256m or 1g")
        return v

    @field_validator("jvm_options")
    @classmethod
    def _jvm_options(cls, v: list[str]) -> list[str]:
        return _check_jvm_options(v)

    @field_validator("four_letter_words")
    @classmethod
    def _words(cls, v: list[str]) -> list[str]:
        bad = [w for w in v if w != "*" and not re.match(r"^[a-z]{4}$", w)]
        if bad:
            raise ValueError(f"not four-letter words: {', '.join(bad)}")
        return v


class KafkaSpec(_Model):
    internal_port: Port = Field(9092, description="Port of the INTERNAL listener (loggerN:9092) in the network.")
    external_host: str = Field("127.0.0.1", description="Host advertised on the EXTERNAL listener.")
    external_port_base: Port = Field(
        19092, description="First host port of the EXTERNAL listeners; one published port per broker."
    )
    inter_broker_listener: str = Field("INTERNAL", description="inter.broker.listener.name.")
    listener_security_protocol_map: dict[str, str] = Field(
        default_factory=lambda: {"INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT"},
        description="listener.security.protocol.map: listener name -> security protocol.",
    )
    log_dirs: list[str] = Field(
        default_factory=lambda: [f"{contract.DATA_ROOT}/kafka/data"], description="log.dirs: commit log directories."
    )
    num_partitions: int = Field(3, ge=1, description="num.partitions: default partitions per new topic.")
    default_replication_factor: int = Field(3, ge=1, description="default.replication.factor.")
    offsets_topic_replication_factor: int = Field(3, ge=1, description="offsets.topic.replication.factor.")
    transaction_state_log_replication_factor: int = Field(
        3, ge=1, description="transaction.state.log.replication.factor."
    )
    min_insync_replicas: int = Field(2, ge=1, description="min.insync.replicas.")
    delete_topic_enable: bool = Field(True, description="delete.topic.enable.")
    auto_create_topics_enable: bool = Field(False, description="auto.create.topics.enable.")
    log_retention_hours: int = Field(168, ge=-1, description="log.retention.hours.")
    log_retention_bytes: int = Field(-1, ge=-1, description="log.retention.bytes per partition; -1 unlimited.")
    log_segment_bytes: int = Field(1073741824, ge=14, description="log.segment.bytes.")
    log_retention_check_interval_ms: int = Field(300000, ge=1, description="log.retention.check.interval.ms.")
    message_max_bytes: int = Field(1048588, ge=0, description="message.max.bytes: largest record batch.")
    replica_fetch_max_bytes: int = Field(
        1048576, ge=1024, description="replica.fetch.max.bytes: bytes fetched per partition by followers."
    )
    replica_fetch_backoff_ms: int = Field(
        100, ge=0,
        description="replica.fetch.backoff.ms: how long a follower waits after an error in its fetch before it"
                    " asks that leader again. Kafka's default is 1000; kctl's 100 spares a new partition's"
                    " followers the second they lose when they ask the leader before it knows the partition"
                    " (UNKNOWN_TOPIC_ID), which every acks=all write to a new topic waited out, and a new"
                    " leader's followers the same after a failover: docs/configs.md.")
    zookeeper_chroot: str | None = Field(None, description="Optional chroot appended to zookeeper.connect.")
    zookeeper_session_timeout_ms: int = Field(
        4000, ge=1000,
        description="zookeeper.session.timeout.ms (and zookeeper.connection.timeout.ms): how long a dead broker"
                    " stays registered, so how long its partitions wait for new leaders. Kafka's default is 18000;"
                    " kctl's 4000 (on 1000 ms ticks) ends a killed broker's stall about four times sooner, and"
                    " expires the session of a broker stalled longer than that (a GC pause, a network hiccup):"
                    " docs/configs.md.")
    broker_session_timeout_ms: int = Field(
        4000, ge=1000,
        description="On KRaft: the controllers' broker.session.timeout.ms, how long a broker that stopped"
                    " heartbeating stays unfenced, so how long a killed broker's partitions wait for new leaders (the"
                    " brokers heartbeat every quarter of it: broker.heartbeat.interval.ms). Kafka's default is 9000"
                    " (heartbeats every 2000); kctl's 4000 matches its ZooKeeper session timeout:"
                    " docs/configs.md.")
    heap: str = Field("512m", description="JVM heap of each broker (-Xms/-Xmx).")
    jvm_options: list[str] = Field(
        default_factory=list,
        description="Extra JVM flags of each broker, after kctl's own (e.g. -XX:TieredStopAtLevel=1: starts"
                    " sooner on less CPU, lower peak speed; docs/configs.md). Not the heap: use heap.")
    controller_jvm_options: list[str] = Field(
        default_factory=list,
        description="Extra JVM flags of each KRaft controller (the node's controller process, on KRaft and while"
                    " migrating to it), after kctl's own; jvm_options are the brokers' alone. Not the heap: use"
                    " controller_heap.")
    controller_heap: str | None = Field(
        None, description="JVM heap of each KRaft controller (-Xms/-Xmx); unset: 256m, the node image's default"
                          " (a controller holds the cluster's metadata, not its data).")
    jmx: bool = Field(False, description="Expose JMX on a published port per broker.")
    jmx_port_base: Port = Field(19999, description="First host port for JMX when enabled.")
    overrides: Overrides = Field(
        default_factory=dict, description="Extra server.properties keys; win over kctl's values."
    )

    @field_validator("heap", "controller_heap")
    @classmethod
    def _heap(cls, v: str | None) -> str | None:
        if v is not None and not _HEAP.match(v):
            raise ValueError(f"{v!r} is not a JVM heap size such as 512m or 1g")
        return v

    @field_validator("jvm_options")
    @classmethod
    def _jvm_options(cls, v: list[str]) -> list[str]:
        return _check_jvm_options(v)

    @field_validator("controller_jvm_options")
    @classmethod
    def _controller_jvm_options(cls, v: list[str]) -> list[str]:
        return _check_jvm_options(v, "controller_heap")

    @field_validator("zookeeper_chroot")
    @classmethod
    def _chroot(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(/[A-Za-z0-9_.-]+)+$", v):
            raise ValueError(f"{v!r} is not a ZooKeeper chroot such as /kafka")
        return v

    @field_validator("listener_security_protocol_map")
    @classmethod
    def _protocols(cls, v: dict[str, str]) -> dict[str, str]:
        allowed = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
        bad = [f"{k}={p}" for k, p in v.items() if p not in allowed]
        if bad:
            raise ValueError(f"unknown security protocol in {', '.join(bad)} (one of {', '.join(sorted(allowed))})")
        return v


class AlertRuleSpec(_Model):
    enabled: bool = Field(True, description="Evaluate this rule.")
    threshold_seconds: float = Field(0.0, ge=0, description="How long the condition must hold before the alert"
                                                            " opens.")
    repeat_seconds: float = Field(3600.0, ge=0, description="Notify again at this interval while it stays open"
                                                            " (0: once).")
    send_close: bool = Field(True, description="Notify when it closes, with how long it was open.")


# The default rules (docs/monitoring.md): what each watches, and its threshold where it is not 0.
ALERT_RULES = {
    "offline-partitions": "any partition without a leader",
    "controller": "no active controller, or more than one",
    "under-replicated": "under-replicated partitions for longer than the threshold (30 s)",
    "zookeeper": "the ZooKeeper quorum lost, or a server not answering",
    "group-status": "a consumer group's status WARN or worse",
    "disk": "a broker's data disk fuller than monitoring.disk_percent (85 %)",
    "exporter": "an exporter not answering",
    "certificate": "a certificate of the secured profile expired or expiring within"
                   " monitoring.certificate_warn_days (30); repeated daily",
    "spark": "kctl.yaml's Spark cluster: its master not answering, or a declared worker not ALIVE at it",
}


def _default_alerts() -> dict[str, AlertRuleSpec]:
    return {name: AlertRuleSpec(threshold_seconds=30.0 if name == "under-replicated" else 0.0,
                                repeat_seconds=86400.0 if name == "certificate" else 3600.0)
            for name in ALERT_RULES}


_NOTIFIER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110's token
SMTP_TLS = ("starttls", "smtps", "none")
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token",
                            "x-vault-token"})
SMTP_PORTS = {"starttls": 587, "smtps": 465, "none": 25}


def _has_control(s: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in s)


class NotifierSpec(_Model):
    name: str | None = Field(None, description="A stable name for this receiver: the outbox keeps each queued"
                                               " notification with it, so reordering the list sends nothing to"
                                               " the wrong receiver (default: derived from its type and address).")
    type: str = Field(description="webhook (an HTTP POST of the notification's JSON) or email (SMTP).")
    url: str | None = Field(None, description="webhook: where to POST (http or https; a redirect is a failure).")
    url_file: str | None = Field(None, description="webhook: a file holding the URL, for a URL that carries a"
                                                   " token (never the token in kctl.yaml).")
    url_env: str | None = Field(None, description="webhook: an environment variable holding the URL.")
    headers: dict[str, str] = Field(default_factory=dict, description="webhook: extra request headers (no"
                                                                      " secrets: they would sit in kctl.yaml;"
                                                                      " Authorization, Cookie and the like are"
                                                                      " refused here).")
    headers_file: str | None = Field(None, description="webhook: a file of secret request headers, one"
                                                       " `Name: value` a line (an Authorization, an API key), read"
                                                       " at each delivery.")
    timeout_seconds: float = Field(10.0, gt=0, le=300, description="How long one delivery may take.")
    host: str | None = Field(None, description="email: the SMTP server.")
    tls: str = Field("starttls", description="email: starttls (STARTTLS before anything is sent, refused if the"
                                             " server does not offer it), smtps (TLS from the start) or none"
                                             " (plain text: only without a password, or to localhost).")
    port: Port | None = Field(None, description="email: the SMTP port (default 587 for starttls, 465 for smtps,"
                                                " 25 for none).")
    ca_file: str | None = Field(None, description="The CA bundle (PEM) that verifies the server's certificate"
                                                  " (default: the system's); certificates are always verified.")
    sender: str | None = Field(None, alias="from", description="email: the From address.")
    to: list[str] = Field(default_factory=list, description="email: the recipients.")
    username: str | None = Field(None, description="email: log in as this user (with the password below).")
    password_file: str | None = Field(None, description="email: a file holding the SMTP password (never the"
                                                        " password itself in kctl.yaml).")
    password_env: str | None = Field(None, description="email: an environment variable holding the SMTP password.")

    @model_validator(mode="before")
    @classmethod
    def _starttls(cls, data: Any) -> Any:
        # The old spelling, `starttls: true | false`: true is tls: starttls; false (the old default, plain text)
        # becomes an explicit tls: none, which is refused with a password to another host.
        if isinstance(data, dict) and "starttls" in data:
            data = dict(data)
            old = data.pop("starttls")
            if "tls" in data:
                raise ValueError("`starttls` is the old spelling of `tls`: give `tls` alone")
            data["tls"] = "starttls" if old is True else "none"
        return data

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v not in ("webhook", "email"):
            raise ValueError(f"{v!r} is not a notifier type (webhook or email)")
        return v

    @field_validator("tls")
    @classmethod
    def _tls(cls, v: str) -> str:
        if v not in SMTP_TLS:
            raise ValueError(f"{v!r} is not an SMTP tls mode ({', '.join(SMTP_TLS)})")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not _NOTIFIER_NAME.match(v):
            raise ValueError(f"{v!r} is not a notifier name (letters, digits, '.', '_', '-'; up to 64)")
        return v

    @property
    def smtp_port(self) -> int:
        return self.port if self.port is not None else SMTP_PORTS[self.tls]

    @property
    def key(self) -> str:
        """The notifier's identity in the outbox: its ``name``, else one derived from what it sends to (its type
        and address), so that neither a reordered list nor another notifier's change moves its notifications."""
        if self.name:
            return self.name
        import hashlib

        if self.type == "webhook":
            where = self.url or (f"file:{self.url_file}" if self.url_file else f"env:{self.url_env}")
        else:
            where = f"{self.host}:{self.smtp_port}:{','.join(sorted(self.to))}"
        return f"{self.type}-{hashlib.sha256(f'{self.type}|{where}'.encode()).hexdigest()[:10]}"

    def problems(self) -> list[str]:
        """What is wrong with it beyond each field (the spec's cross-field rules)."""
        from urllib.parse import urlsplit

        out: list[str] = []
        if self.type == "webhook":
            given = [k for k in ("url", "url_file", "url_env") if getattr(self, k)]
            if len(given) != 1:
                out.append("a webhook needs one of `url: https://...`, `url_file` or `url_env`"
                           + (f", not {' and '.join(given)}" if given else ""))
            if self.url is not None:
                parts = urlsplit(self.url)
                if parts.scheme not in ("http", "https") or not parts.hostname or _has_control(self.url):
                    out.append(f"a webhook's url must be http:// or https:// with a host, not {parts.scheme or '?'}:"
                               " (file:, ftp: and the like are refused)")
            for k, v in self.headers.items():
                if not _HEADER_NAME.match(k) or _has_control(v):
                    out.append(f"header {k!r}: a header name is a token, and no value may hold a line break")
                elif k.lower() in SECRET_HEADERS:
                    out.append(f"header {k!r} holds a secret, which kctl.yaml must not: put it in a file named by"
                               " `headers_file` (one `Name: value` a line)")
            stray = [k for k in ("host", "sender", "username", "password_file", "password_env") if getattr(self, k)]
            if self.to:
                stray.append("to")
            if stray:
                out.append(f"{', '.join('from' if s == 'sender' else s for s in stray)}: e-mail settings on a webhook")
        else:
            missing = [k for k, v in (("host", self.host), ("from", self.sender), ("to", self.to)) if not v]
            if missing:
                out.append(f"an email notifier needs {', '.join(missing)}")
            bad = [a for a in [self.sender or "", *self.to] if a and (_has_control(a) or "@" not in a)]
            if bad:
                out.append(f"not an e-mail address: {', '.join(repr(a) for a in bad)}")
            if self.password_file and self.password_env:
                out.append("password_file or password_env, not both")
            if (self.password_file or self.password_env) and not self.username:
                out.append("a password needs `username`")
            local = (self.host or "").lower() in ("127.0.0.1", "::1", "localhost")
            if self.tls == "none" and self.username and not local:
                out.append(f"tls: none would send the SMTP password in clear to {self.host}; use tls: starttls"
                           " (port 587) or smtps (port 465)")
            stray = [k for k in ("url", "url_file", "url_env") if getattr(self, k)]
            if self.headers or self.headers_file:
                stray.append("headers")
            if stray:
                out.append(f"{', '.join(stray)}: webhook settings on an e-mail notifier")
        return out


_LABEL = r"[A-Za-z0-9][A-Za-z0-9-]{0,62}"
_API_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::\d{{1,5}})?")


class MonitoringSpec(_Model):
    enabled: bool = Field(
        True, description="Exporters on every node: the Prometheus JMX exporter as a Java agent in each broker,"
                          " ZooKeeper's own PrometheusMetricsProvider in each ZooKeeper (docs/monitoring.md).")
    kafka_exporter_port: Port = Field(7071, description="Port of a broker's JMX exporter inside its container.")
    kafka_exporter_host_port_base: Port = Field(
        17071, description="First host port of the brokers' exporters, one per broker, published on 127.0.0.1.")
    zookeeper_exporter_port: Port = Field(
        7000, description="metricsProvider.httpPort: ZooKeeper's metrics port inside its container.")
    zookeeper_exporter_host_port_base: Port = Field(
        17000, description="First host port of the ZooKeepers' metrics, one per node, published on 127.0.0.1.")
    monitor_port: Port = Field(17600, description="Where `kctl monitor` serves its HTTP API (Burrow's consumer"
                                                  " endpoints, /metrics) on 127.0.0.1.")
    interval_seconds: float = Field(10.0, ge=1, le=3600, description="How often the monitor samples offsets and"
                                                                     " the exporters.")
    window: int = Field(10, ge=2, le=1000, description="Samples per partition the lag evaluation looks at.")
    allowed_lag: int = Field(0, ge=0, description="Burrow's allowed-lag: a partition whose lag is at most this"
                                                  " many records counts as caught up (its current lag: OK; a"
                                                  " sample's lag: the zero-lag rule). 0: only no lag at all.")
    api_hosts: list[str] = Field(
        default_factory=list, description="Host names the monitor's API answers to besides 127.0.0.1, localhost"
                                          " and [::1] on its port (a name behind a proxy or tunnel): `name` for"
                                          " any port, `name:port` for that port. Any other Host header is"
                                          " refused (421), which keeps a DNS-rebinding web page out.")
    retention_hours: float = Field(24.0, gt=0, le=24 * 366, description="How long the monitor keeps its history.")
    disk_percent: float = Field(85.0, gt=0, le=100, description="The `disk` rule: a broker's data disk fuller"
                                                                " than this.")
    certificate_warn_days: float = Field(30.0, gt=0, le=3650, description="The `certificate` rule and `kctl cert"
                                         " status`: a certificate expiring within this many days.")
    prometheus: bool = Field(
        False, description="Also run a Prometheus (scraping every exporter and the kctl monitor, with alert rules"
                           " equal to kctl's) and an Alertmanager (sending to the notifiers), built from Debian's"
                           " packages; engine compose. `kctl up` waits until every exporter target is up.")
    prometheus_port: Port = Field(17690, description="Prometheus' web UI and API on 127.0.0.1.")
    alertmanager_port: Port = Field(17693, description="Alertmanager's web UI and API on 127.0.0.1.")
    alerts: dict[str, AlertRuleSpec] = Field(
        default_factory=_default_alerts,
        description="Alert rules by name (" + ", ".join(ALERT_RULES) + "); a rule left out keeps its default.")
    notifiers: list[NotifierSpec] = Field(default_factory=list, description="Where notifications go: webhooks"
                                                                            " and e-mail.")

    @field_validator("api_hosts")
    @classmethod
    def _api_hosts(cls, v: list[str]) -> list[str]:
        for h in v:
            if not _API_HOST.fullmatch(h):
                raise ValueError(f"{h!r} is not a host name or host:port (e.g. monitor.example.org,"
                                 " monitor.example.org:8443, [fd00::1]:17600)")
        return [h.lower() for h in v]

    @field_validator("alerts", mode="before")
    @classmethod
    def _alerts(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        unknown = sorted(set(v) - set(ALERT_RULES))
        if unknown:
            raise ValueError(f"unknown alert rule {', '.join(unknown)} (rules: {', '.join(ALERT_RULES)})")
        merged: dict[str, Any] = {k: r.model_dump() for k, r in _default_alerts().items()}
        for k, r in v.items():
            merged[k] = {**merged[k], **(r if isinstance(r, dict) else {"enabled": bool(r)})}
        return merged


SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
MIRROR_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MIRROR_SASL = (*SASL_MECHANISMS, "PLAIN")
# The ZooKeeper DIGEST-MD5 principals of the brokers and of the quorum.
RESERVED_PRINCIPALS = ("kafka", "zkquorum")
_PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ZooKeeperSecuritySpec(_Model):
    sasl: bool = Field(True, description="DIGEST-MD5 between brokers and ZooKeeper, and between ZooKeepers"
                                         " (quorum SASL).")
    enforce_auth: bool = Field(True, description="Refuse unauthenticated ZooKeeper sessions (enforce.auth.enabled"
                                                 " with enforce.auth.schemes=sasl).")
    set_acl: bool = Field(True, description="zookeeper.set.acl: Kafka's znodes writable only by the brokers'"
                                            " principal.")


class Migration(str, Enum):
    """The steps of moving a running PLAINTEXT cluster to the secured profile, one ``kctl apply`` each, in this
    order (docs/runbooks/secure-running-cluster.md); the last step is removing ``security.migration``."""

    secure_listeners = "secure-listeners"
    secure_inter_broker = "secure-inter-broker"
    close_plaintext = "close-plaintext"
    inter_broker_home = "inter-broker-home"


# Where a cluster is on the way to the secured profile: 0 PLAINTEXT, 1-4 the migration steps, 5 secured.
PHASE_PLAIN, PHASE_SECURED = 0, 5
MIGRATION_PHASES = {m: i for i, m in enumerate(Migration, 1)}
PHASE_NAMES = {PHASE_PLAIN: "PLAINTEXT", **{i: m.value for m, i in MIGRATION_PHASES.items()},
               PHASE_SECURED: "secured"}


class SecuritySpec(_Model):
    enabled: bool = Field(False, description="The secured profile: TLS, SASL/SCRAM, ACLs and ZooKeeper"
                                             " authentication (`kctl init --secure` writes true). On KRaft"
                                             " (`metadata: kraft`, `kctl init --kraft --secure`): the same"
                                             " listeners, SCRAM users and ACLs (Kafka's StandardAuthorizer),"
                                             " the controllers' listener SASL/PLAIN over TLS, no ZooKeeper.")
    migration: Migration | None = Field(
        None, description="A step of moving a running PLAINTEXT cluster to the secured profile without stopping"
                          " it (" + ", then ".join(m.value for m in Migration) + ", then none: one `kctl apply`"
                          " each; docs/runbooks/secure-running-cluster.md). None: the profile itself.")
    migration_port_offset: int = Field(
        100, ge=1, le=10000,
        description="While `migration` is set: the secured listeners beside the PLAINTEXT ones listen on"
                    " kafka.internal_port + 1 (INTERNAL_SECURE) and on each broker's external port + this offset"
                    " (EXTERNAL_SECURE, published on 127.0.0.1).")
    tls: bool = Field(True, description="TLS on the external and internal listeners (SASL_SSL; false:"
                                        " SASL_PLAINTEXT).")
    sasl_mechanism: str = Field("SCRAM-SHA-512", description="SASL mechanism of clients and brokers: "
                                + " or ".join(SASL_MECHANISMS) + ".")
    authorizer: bool = Field(True, description="kafka.security.authorizer.AclAuthorizer (on KRaft Kafka's"
                                               " org.apache.kafka.metadata.authorizer.StandardAuthorizer) with"
                                               " allow.everyone.if.no.acl.found=false.")
    admin_user: str = Field("admin", description="The super user kctl itself uses; its password is generated"
                                                 " into the state dir, never written to kctl.yaml.")
    zookeeper: ZooKeeperSecuritySpec = Field(default_factory=ZooKeeperSecuritySpec,
                                             description="ZooKeeper authentication and znode ACLs.")

    @field_validator("sasl_mechanism")
    @classmethod
    def _mechanism(cls, v: str) -> str:
        if v not in SASL_MECHANISMS:
            raise ValueError(f"{v!r} is not supported (one of {', '.join(SASL_MECHANISMS)})")
        return v

    @field_validator("admin_user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not _PRINCIPAL.match(v):
            raise ValueError(f"{v!r} is not a user name (letters, digits, '.', '_' and '-', max 64)")
        return v


class ImageSpec(_Model):
    ref: str | None = Field(None, description="Node image; default kctl/node:<kafka version>.")
    registry: str | None = Field(
        None, description="engine swarm: a registry (host:port[/path]) kctl pushes the node image to before"
                          " deploying, so every Swarm node can pull it; none: the image must already be on every"
                          " Swarm node (see docs/multi-host.md)."
    )


# A line break or another control character (what would end a line of a properties file, or hide in one).
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")
_MIRROR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")


class MirrorClientSpec(_Model):
    security_protocol: str = Field("PLAINTEXT", description="How MirrorMaker and kctl reach the source: "
                                   + ", ".join(MIRROR_PROTOCOLS) + ".")
    sasl_mechanism: str = Field("SCRAM-SHA-512", description="With SASL_*: " + " or ".join(MIRROR_SASL) + ".")
    username: str | None = Field(None, description="With SASL_*: the source's user MirrorMaker logs in as.")
    password_file: str | None = Field(
        None, description="With SASL_*: a file holding that user's password (relative to this kctl.yaml). kctl"
                          " reads it at `kctl mirror up` into the mirror's 0600 secrets; the password is never"
                          " written in kctl.yaml, mm2.properties, an environment variable or a process argument.")
    ca_file: str | None = Field(None, description="With SSL or SASL_SSL: the PEM file of the CA the source's"
                                                  " certificates chain to (default: the JVM's and the system's"
                                                  " trusted CAs).")

    @field_validator("username")
    @classmethod
    def _username(cls, v: str | None) -> str | None:
        # it goes into mm2.properties' JAAS line between quotes: no quote, backslash or line break
        if v is not None and (not v or _CONTROL.search(v) or any(c in v for c in '"\\;=')):
            raise ValueError("a user name holds no quote, backslash, ';', '=', line break or control character")
        return v

    @field_validator("security_protocol")
    @classmethod
    def _protocol(cls, v: str) -> str:
        if v not in MIRROR_PROTOCOLS:
            raise ValueError(f"{v!r} is not a security protocol (one of {', '.join(MIRROR_PROTOCOLS)})")
        return v

    @field_validator("sasl_mechanism")
    @classmethod
    def _mechanism(cls, v: str) -> str:
        if v not in MIRROR_SASL:
            raise ValueError(f"{v!r} is not supported (one of {', '.join(MIRROR_SASL)})")
        return v

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    @model_validator(mode="after")
    def _complete(self) -> MirrorClientSpec:
        if self.sasl and not (self.username and self.password_file):
            raise ValueError(f"{self.security_protocol} needs `username` and `password_file`")
        if not self.sasl and (self.username or self.password_file):
            raise ValueError(f"`username` and `password_file` need SASL_PLAINTEXT or SASL_SSL, not"
                             f" {self.security_protocol}")
        if self.ca_file and not self.tls:
            raise ValueError(f"`ca_file` needs SSL or SASL_SSL, not {self.security_protocol}")
        return self


class MirrorSourceSpec(_Model):
    spec: str | None = Field(None, description="The source cluster's kctl.yaml (relative to this kctl.yaml): its"
                                               " bootstrap servers and client settings come from there (with the"
                                               " secured profile, `kctl mirror up` gives MirrorMaker a read-only"
                                               " user of its own there).")
    bootstrap_servers: str | None = Field(
        None, description="Or the source's bootstrap servers (host:port,...), for a cluster kctl does not run;"
                          " `client` says how to reach it.")
    client: MirrorClientSpec | None = Field(
        None, description="With bootstrap_servers: the source's security protocol, SASL user and password file,"
                          " and CA file (default PLAINTEXT).")

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9._\[\]:-]+(,[A-Za-z0-9._\[\]:-]+)*", v.replace(" ", "")):
            raise ValueError(f"{v!r} is not a list of host:port (comma-separated)")
        return v

    @model_validator(mode="after")
    def _one(self) -> MirrorSourceSpec:
        if (self.spec is None) == (self.bootstrap_servers is None):
            raise ValueError("a mirror's source is either `spec` (another kctl.yaml) or `bootstrap_servers`")
        if self.spec is not None and self.client is not None:
            raise ValueError("`client` goes with `bootstrap_servers`; a source kctl.yaml brings its own settings")
        return self


class MirrorPolicy(str, Enum):
    prefix = "prefix"
    identity = "identity"


class MirrorSpec(_Model):
    name: str = Field(description="The source cluster's alias in MirrorMaker: the prefix of replicated topics"
                                  " (policy prefix) and of its internal topics.")
    source: MirrorSourceSpec = Field(description="Where the records come from.")
    topics: str = Field(".*", description="Regex of the source topics to replicate.")
    topics_exclude: str | None = Field(None, description="Regex of source topics never replicated (MirrorMaker's"
                                                         " own internal topics are always left out).")
    groups: str = Field(".*", description="Regex of the consumer groups whose offsets are checkpointed.")
    groups_exclude: str | None = Field(None, description="Regex of consumer groups left out.")
    policy: MirrorPolicy = Field(MirrorPolicy.prefix, description="prefix: topic T arrives as <name>.T (Kafka's"
                                                                  " DefaultReplicationPolicy); identity: as T.")
    sync_group_offsets: bool = Field(True, description="MirrorMaker also writes the translated offsets of groups"
                                                       " with no member on the target (sync.group.offsets).")
    tasks: int = Field(1, ge=1, le=64, description="tasks.max of the source connector.")
    refresh_topics_seconds: int = Field(10, ge=1, description="How often new matching topics are looked for.")
    checkpoint_seconds: int = Field(5, ge=1, description="emit.checkpoints.interval.seconds and"
                                                         " sync.group.offsets.interval.seconds.")
    exactly_once: bool = Field(
        False, description="Exactly-once delivery into this cluster (KIP-618 in dedicated mode, Kafka 3.5+): each"
                           " batch and its source offsets in one transaction; consumers of the replicas read with"
                           " isolation.level=read_committed. Needs MirrorMaker's internal REST server"
                           " (rest_port).")
    rest_port: Port | None = Field(None, description="With exactly_once: the port of MirrorMaker's internal REST"
                                                     " server on 127.0.0.1 (default 18083 + the mirror's index).")
    heap: str = Field("256m", description="JVM heap of the MirrorMaker process.")
    jvm_options: list[str] = Field(
        default_factory=list,
        description="Extra JVM flags of the MirrorMaker process, after kctl's own (e.g. -XX:TieredStopAtLevel=1:"
                    " starts sooner on less CPU, lower peak speed). Not the heap: use heap.")
    overrides: Overrides = Field(
        default_factory=dict, description="Extra mm2.properties settings (MirrorMaker's and its clients' tuning)."
        " Refused: a key or value with a line break or another control character, a key kctl sets from another"
        " setting (clusters, bootstrap servers, replication.policy.*, the flows, topics and groups, security"
        " protocol, SASL mechanism, truststore, config providers, exactly once), and a secret (a password, a JAAS"
        " config, a private key: use `source.client.password_file`).")

    @field_validator("jvm_options")
    @classmethod
    def _jvm_options(cls, v: list[str]) -> list[str]:
        return _check_jvm_options(v)

    @field_validator("name")
    @classmethod
    def _alias(cls, v: str) -> str:
        if not _MIRROR_NAME.match(v):
            raise ValueError(f"{v!r} is not a mirror name (letters, digits, '-' and '_', max 40)")
        return v

    @field_validator("topics", "topics_exclude", "groups", "groups_exclude")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            if _CONTROL.search(v):  # one line of mm2.properties: a line break would start another property
                raise ValueError("holds a line break or another control character; one line")
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"{v!r} is not a regular expression: {exc}") from None
        return v


# mirrors[].overrides go into mm2.properties beside what kctl renders from the spec: each key below is kctl's own
# (its value comes from a setting, which the override would contradict unseen) or a secret's (never written in
# kctl.yaml or mm2.properties). Matched on the key's end, whatever its `<alias>.`, `<a>-><b>.` or client prefix.
_MIRROR_OWN_KEYS: tuple[tuple[str, str], ...] = (
    (r"clusters", "kctl names the two aliases: the mirror's name and this cluster's"),
    (r"replication\.policy\.(class|separator)", "set by `policy` (prefix: `<name>.<topic>`; identity: the same name);"
                                               " kctl's failover and lag read the names that way"),
    (r"bootstrap\.servers", "from `source` (its kctl.yaml or `bootstrap_servers`) and this cluster's listeners"),
    (r"security\.protocol|sasl\.mechanism|ssl\.truststore\.[a-z.]+",
     "the login kctl manages: `source.client` (or the source kctl.yaml's security), and this cluster's"),
    (r"config\.providers(\.[a-z.]+)?", "kctl's FileConfigProvider, which reads the mirror's 0600 secrets"),
    (r"[A-Za-z0-9_-]+->[A-Za-z0-9_-]+\.enabled", "kctl enables the one flow source -> this cluster"),
    (r"topics(\.exclude)?|groups(\.exclude)?", "`topics`, `topics_exclude`, `groups`, `groups_exclude`"),
    (r"sync\.group\.offsets\.enabled", "`sync_group_offsets`"),
    (r"(emit\.checkpoints|sync\.group\.offsets)\.interval\.seconds", "`checkpoint_seconds`"),
    (r"refresh\.(topics|groups)\.interval\.seconds", "`refresh_topics_seconds`"),
    (r"tasks\.max", "`tasks`"),
    (r"offset-syncs\.topic\.location", "kctl keeps every MirrorMaker topic in the target (failover reads them there)"),
    (r"exactly\.once\.source\.support|dedicated\.mode\.enable\.internal\.rest|listeners|rest\.advertised\."
     r"host\.name|isolation\.level", "`exactly_once` and `rest_port`"),
)
_MIRROR_SECRET_KEY = re.compile(r"(?i)password|secret|sasl\.jaas\.config|ssl\.key(store)?\.(key|password)|"
                                r"ssl\.keystore\.certificate\.chain|token|credential|private")


def mirror_override_problems(where: str, overrides: dict[str, Scalar]) -> list[str]:
    """Why each of a mirror's ``overrides`` cannot go into mm2.properties: a line break or another control
    character (a second property, injected), a key kctl sets itself, or a secret. Never names a value."""
    out: list[str] = []
    for key, value in overrides.items():
        here = f"{where}.{key}" if not _CONTROL.search(key) else f"{where} (a key {key.encode()[:40]!r}...)"
        if _CONTROL.search(key) or _CONTROL.search(str(value)):
            out.append(f"{here}: holds a line break or another control character (in mm2.properties it would"
                       " end the line and start another property); one line each")
            continue
        if not key.strip() or any(c in key for c in " =:#!\\"):
            out.append(f"{here}: not a property name (no spaces, '=', ':', '#', '!' or '\\')")
            continue
        if _MIRROR_SECRET_KEY.search(key):
            out.append(f"{here}: a secret (it would be written in kctl.yaml and mm2.properties): a source's login"
                       " is `source.client.username` with `password_file` (kctl keeps it in the mirror's 0600 secrets"
                       " and mm2.properties names it through FileConfigProvider), a kctl source's comes from its"
                       " own kctl.yaml")
            continue
        for pattern, why in _MIRROR_OWN_KEYS:
            if re.search(rf"(^|\.)({pattern})$", key):
                out.append(f"{here}: kctl sets it itself ({why}); an override would contradict kctl.yaml")
                break
    return out


class SshSpec(_Model):
    """How kctl reaches the hosts of engine hosts: OpenSSH's own `ssh` (so ~/.ssh/config, agents and jump
    hosts work as for any other ssh session), one multiplexed connection per host."""

    user: str | None = Field(None, description="The login user on every host (default: ssh's own, from"
                                               " ~/.ssh/config or the local user name); kctl runs what needs"
                                               " root through `sudo -n` unless it is root.")
    port: Port = Field(22, description="sshd's port on every host.")
    key_file: str | None = Field(None, description="The private key to log in with (default: ssh's own keys and"
                                                   " agent); relative paths are from kctl.yaml's directory.")
    known_hosts_file: str | None = Field(
        None, description="The known-hosts file kctl checks host keys against (default: OpenSSH's own, your"
                          " ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts, or what ~/.ssh/config names). A host"
                          " whose key is not there, or differs, is refused (StrictHostKeyChecking=yes); a regular"
                          " file only (not /dev/null); relative paths are from kctl.yaml's directory; `kctl down"
                          " --volumes` never deletes it.")
    trust_on_first_use: bool = Field(
        False, description="Trust a host whose key is in no known-hosts file on first use: `kctl up` (and `kctl"
                           " node add`) records its key in the known-hosts file (StrictHostKeyChecking=accept-new)"
                           " and prints its fingerprint; a changed key is still refused. `kctl up"
                           " --accept-new-host-keys` does the same once. Off: add the keys yourself, fingerprints"
                           " checked (ssh-keyscan).")
    connect_timeout: int = Field(10, ge=1, le=120, description="Seconds to wait for a host to answer.")

    @field_validator("known_hosts_file")
    @classmethod
    def _known_hosts(cls, v: str | None) -> str | None:
        if v is not None:
            if not v.strip():
                raise ValueError("an empty path is no known-hosts file (leave it out for OpenSSH's own)")
            path = Path(v).expanduser()
            device = path.is_absolute() and str(path.resolve()).startswith(("/dev/", "/proc/"))
            if device or v.strip().lower() == "none":
                raise ValueError(f"{v!r} checks no host key: kctl needs a real known-hosts file (leave"
                                 " ssh.known_hosts_file out for OpenSSH's own ~/.ssh/known_hosts)")
        return v


# ----- the cluster's contents declared in kctl.yaml: topics, users, ACLs, quotas (kctl.kafka.declared plans them) -----

# Kafka's own topic name rule (org.apache.kafka.common.internals.Topic): at most 249 of [a-zA-Z0-9._-], not "." or
# "..". kctl.kafka.topics checks names given on the command line with it too.
TOPIC_NAME_MAX = 249
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_problem(name: str) -> str | None:
    """What is wrong with a topic name by Kafka's rule (``it ...``), or None."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return "cannot be '.' or '..'"
    if len(name) > TOPIC_NAME_MAX:
        return f"is {len(name)} characters long; the limit is {TOPIC_NAME_MAX}"
    if not _TOPIC_NAME.match(name):
        bad = "".join(sorted({c for c in name if not re.match(r"[a-zA-Z0-9._-]", c)}))
        return f"contains {bad!r}; only ASCII letters, digits, '.', '_' and '-' are allowed"
    return None


# A topic's own configs in Kafka 3.9 (org.apache.kafka.common.config.TopicConfig and LogConfig); a key outside this
# set is a warning (Kafka refuses an unknown one when it is set).
TOPIC_CONFIGS = frozenset((
    "cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
))

# ACLs as `kctl acl` spells them (kctl.kafka.security takes these words from here).
ACL_OPERATIONS = ("read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs",
                  "cluster_action", "idempotent_write", "all")
ACL_RESOURCE_TYPES = ("topic", "group", "cluster", "transactional_id")
ACL_PERMISSIONS = ("allow", "deny")
ACL_PATTERNS = ("literal", "prefixed")
# The one name of the cluster resource.
CLUSTER_RESOURCE = "kafka-cluster"
# The operations Kafka accepts on each resource type (AclEntry.supportedOperations; `all` on every one).
ACL_SUPPORTED = {
    "topic": ("read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs", "all"),
    "group": ("read", "describe", "delete", "all"),
    "cluster": ("create", "cluster_action", "describe_configs", "alter_configs", "idempotent_write", "alter",
                "describe", "all"),
    "transactional_id": ("describe", "write", "all"),
}
# Client quotas as Kafka names them (`kctl quota`, kafka-configs' --add-config).
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")


def _one_of(v: str, allowed: tuple[str, ...], what: str) -> str:
    low = v.lower()
    if low not in allowed:
        raise ValueError(f"{v!r} is not {what} (one of {', '.join(allowed)})")
    return low


def _config_value(v: Any) -> Any:
    """A topic config's value as Kafka writes it: booleans lowercase, a list comma-joined, numbers as written."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return ",".join(v)
    return v


class TopicSpec(_Model):
    name: str = Field(description="The topic's name (Kafka's rule: 1 to 249 of a-z A-Z 0-9 . _ -). Names that"
                                  " start with `__` are Kafka's and kctl's own and cannot be declared.")
    partitions: int | None = Field(None, ge=1, description="Partitions; default `kafka.num_partitions` (or its"
                                                           " `kafka.overrides` value). They only grow: a lower"
                                                           " number than the live topic's is refused.")
    replication_factor: int | None = Field(
        None, ge=1, description="Replicas of each partition; default `kafka.default_replication_factor` (or its"
                                " `kafka.overrides` value); at most the broker count. A change of a live topic's is"
                                " made by a partition reassignment, not in place.")
    configs: dict[str, str] = Field(
        default_factory=dict, description="The topic's own configs (retention.ms, cleanup.policy, ...): values as"
                                          " Kafka writes them (a list is comma-joined). A config the file no longer"
                                          " names is reset to the cluster's default.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = topic_name_problem(v)
        if problem:
            raise ValueError(f"{v!r} is not a topic name: it {problem}")
        return v

    @field_validator("configs", mode="before")
    @classmethod
    def _configs(cls, v: Any) -> Any:
        return {k: _config_value(x) for k, x in v.items()} if isinstance(v, dict) else v


class UserSpec(_Model):
    name: str = Field(description="The SCRAM user's name (letters, digits, '.', '_' and '-', at most 64); its"
                                  " principal in ACLs is `User:<name>`.")
    mechanism: str = Field("SCRAM-SHA-512", description="Its SCRAM credential's mechanism: "
                           + " or ".join(SASL_MECHANISMS) + ". The same name twice, once per mechanism, gives it"
                           " both.")
    password_file: str = Field(description="A file holding its password (relative to kctl.yaml; the first line,"
                                            " at least 8 characters). kctl reads it when it creates the user; the"
                                            " password is never written in kctl.yaml. A live user's password is not"
                                            " compared (Kafka keeps only a salted hash).")
    password: Any = Field(None, exclude=True, description="Refused: kctl.yaml holds no password. Put it in a file"
                                                          " and name the file in `password_file`.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _PRINCIPAL.match(v):
            raise ValueError(f"{v!r} is not a user name (letters, digits, '.', '_' and '-', at most 64, not"
                             " starting with '.', '_' or '-')")
        return v

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, v: str) -> str:
        if v.upper() not in SASL_MECHANISMS:
            raise ValueError(f"{v!r} is not a SCRAM mechanism (one of {', '.join(SASL_MECHANISMS)})")
        return v.upper()

    @field_validator("password_file")
    @classmethod
    def _password_file(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("an empty path is no password file")
        return v

    @field_validator("password")
    @classmethod
    def _password(cls, v: Any) -> Any:
        if v is not None:
            raise ValueError("kctl.yaml holds no password (it would sit in version control and in every support"
                             " bundle's copy of kctl.yaml); hint: write it to a file of mode 0600 and name that"
                             " file in `password_file`")
        return v


class AclSpec(_Model):
    principal: str = Field(description="Whom it is for: `User:<name>` (`User:*` for every user).")
    permission: str = Field("allow", description="allow or deny (a deny wins over any allow).")
    operation: str = Field(description="What it permits or denies: " + ", ".join(ACL_OPERATIONS) + " (as `kctl acl`"
                                       " spells them; each resource type takes some of them, and all).")
    resource_type: str = Field(description="What it is on: " + ", ".join(ACL_RESOURCE_TYPES) + ".")
    resource: str | None = Field(None, description="The topic, group or transactional id (or its prefix, with"
                                                   " pattern prefixed; `*` for every one). The cluster has the one"
                                                   " name " + CLUSTER_RESOURCE + ", the default there.")
    pattern: str = Field("literal", description="literal (the name as written, or `*`) or prefixed (every name"
                                                " that starts with it).")
    host: str = Field("*", description="The client host it holds for; `*` for any.")

    @field_validator("principal")
    @classmethod
    def _principal(cls, v: str) -> str:
        if not v.startswith("User:") or len(v) <= 5:
            raise ValueError(f"{v!r} is not a principal; write it as User:NAME")
        return v

    @field_validator("permission")
    @classmethod
    def _permission(cls, v: str) -> str:
        return _one_of(v, ACL_PERMISSIONS, "a permission")

    @field_validator("operation")
    @classmethod
    def _operation(cls, v: str) -> str:
        return _one_of(v, ACL_OPERATIONS, "an ACL operation")

    @field_validator("resource_type")
    @classmethod
    def _resource_type(cls, v: str) -> str:
        return _one_of(v, ACL_RESOURCE_TYPES, "a resource type")

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        return _one_of(v, ACL_PATTERNS, "a pattern")

    @property
    def resource_name(self) -> str | None:
        """The resource's name, the cluster's filled in."""
        return CLUSTER_RESOURCE if self.resource_type == "cluster" and self.resource is None else self.resource


class QuotaSpec(_Model):
    user: str | None = Field(None, description="The user it limits (with `client`: that user's client id only).")
    user_default: bool = Field(False, description="Instead of `user`: every user without a quota of its own.")
    client: str | None = Field(None, description="The client id it limits (client.id of the producer or"
                                                 " consumer).")
    client_default: bool = Field(False, description="Instead of `client`: every client id without a quota of its"
                                                    " own.")
    producer_byte_rate: int | None = Field(None, ge=0, description="Bytes per second produced, per broker.")
    consumer_byte_rate: int | None = Field(None, ge=0, description="Bytes per second fetched, per broker.")
    request_percentage: float | None = Field(None, gt=0, description="Percent of one request handler and network"
                                                                     " thread's time, per broker.")
    controller_mutation_rate: float | None = Field(None, gt=0, description="Partitions created or deleted per"
                                                                           " second (topic creations, partition"
                                                                           " additions, deletions).")

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        # A key of kafka-configs' own spelling (producer-byte-rate) or another quota word: say what quotas are.
        if isinstance(data, dict):
            bad = [k for k in data if isinstance(k, str) and k not in cls.model_fields]
            if bad:
                raise ValueError(f"not a quota or a quota entity: {', '.join(bad)} (quotas are"
                                 f" {', '.join(QUOTA_KEYS)}; the entity is user or user_default, and/or client or"
                                 " client_default)")
        return data

    @property
    def values(self) -> dict[str, float]:
        """The quotas it sets, by Kafka's name."""
        return {k: float(getattr(self, k)) for k in QUOTA_KEYS if getattr(self, k) is not None}


class SparkSpec(_Model):
    """A Spark standalone cluster beside the brokers (issue #46; docs/pipeline.md)."""

    workers: int = Field(1, description="Spark workers (each a container beside the brokers, on the cluster"
                                        " network; on engine swarm a service pinned beside the N-th node's"
                                        " container, on its Swarm node; on engine hosts a systemd unit on the"
                                        " first `workers` nodes' hosts, the master on the first's); `kctl stream"
                                        " submit` runs the job's executors on them.")
    worker_cores: int = Field(1, description="Cores each worker offers to executors.")
    worker_memory: str = Field("1g", description="Memory each worker offers to executors (a JVM size: 512m, 1g);"
                                                 " `kctl up` refuses more than the machine has.")
    ui_port: Port = Field(18080, description="Host port (127.0.0.1) of the master's web UI and JSON endpoint;"
                                             " worker N's UI is published on ui_port + N (on engine hosts: the"
                                             " ports on the master's and worker's own host addresses).")
    warm_driver: bool = Field(False, description="Keep one stream-job driver started and warmed (its JVM, its"
                                                 " Spark session, an executor on a worker, the writer run once) while"
                                                 " no job holds the cluster: `kctl stream submit` hands it the job"
                                                 " instead of starting a driver (seconds to the first batch, not"
                                                 " tens). It holds a driver's and an executor's memory and the"
                                                 " workers' cores while it waits (docs/pipeline.md).")

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: int) -> int:
        if not 1 <= v <= 16:
            raise ValueError(f"{v} workers: a Spark cluster needs 1 to 16 workers (leave the spark section out"
                             " for no Spark cluster: the job then runs in local[N])")
        return v

    @field_validator("worker_cores")
    @classmethod
    def _cores(cls, v: int) -> int:
        if not 1 <= v <= 64:
            raise ValueError(f"{v} worker cores: each worker offers 1 to 64 cores")
        return v

    @field_validator("worker_memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        if not _HEAP.match(v):
            raise ValueError(f"{v!r} is not a memory size such as 512m or 1g")
        if spark_memory_mb(v) < 512:
            raise ValueError(f"{v}: a worker needs at least 512m (its executor's JVM)")
        return v


# The Spark master's and each worker's own JVM (SPARK_DAEMON_MEMORY; executors get worker_memory).
SPARK_DAEMON_MEMORY = "256m"


def spark_memory_mb(size: str) -> int:
    """A JVM size (512m, 1g, 2G) in MiB."""
    n, unit = int(size[:-1]), size[-1].lower()
    return {"k": n // 1024, "m": n, "g": n * 1024}.get(unit, n // (1024 * 1024))


def _default_nodes() -> list[NodeSpec]:
    return [NodeSpec(id=i, hostname=f"logger{i}") for i in (1, 2, 3)]


class ClusterSpec(_Model):
    name: str = Field("logger", description="Cluster name: Compose project kctl-<name>, state dir .kctl/<name>.")
    topology: Topology = Field(
        Topology.colocated,
        description="colocated: each node runs ZooKeeper N and Kafka N; split: zkN and kafkaN containers.",
    )
    engine: Engine = Field(
        Engine.compose, description="compose: every node a container on this Docker engine (Docker Compose);"
                                    " swarm: one Swarm service per node across the Swarm's hosts (docker stack"
                                    " deploy; docs/multi-host.md); hosts: every node a host of its own, its"
                                    " ZooKeeper and Kafka systemd units installed over ssh (docs/bare-metal.md)."
                                    " `kctl up --engine` overrides it once."
    )
    ssh: SshSpec = Field(default_factory=SshSpec, description="engine hosts: how kctl logs in to the hosts.")
    image: ImageSpec = Field(default_factory=ImageSpec,
                             description="The node image; a plain string is taken as `image.ref`.")
    versions: Versions = Field(default_factory=Versions, description="Kafka and ZooKeeper versions.")
    metadata: MetadataMode = Field(
        MetadataMode.zookeeper,
        description="Where the cluster's metadata lives. zookeeper: the ZooKeeper ensemble (ZooKeeper N beside broker"
                    " N on each node). kraft: a KRaft controller quorum from the start (`kctl init --kraft`), with"
                    " the layout a cluster has after `kctl migrate kraft finalize`: controller N beside broker N"
                    " on each ZooKeeper participant's node (node id 3000 + N), no ZooKeeper. A cluster made on"
                    " zookeeper moves to KRaft with `kctl migrate kraft` (engines compose and swarm), whatever"
                    " this says; a cluster made on kraft stays there. kraft runs on every engine (on hosts: a"
                    " kctl-controller.service unit beside kctl-kafka.service; docs/bare-metal.md), plain or secured"
                    " (`security.enabled`, `kctl init --kraft --secure`, engines compose and swarm: each controller"
                    " formats its metadata log with the admin's SCRAM credential, Kafka's KIP-900 bootstrap;"
                    " docs/security.md).")
    nodes: list[NodeSpec] = Field(default_factory=_default_nodes, min_length=1, description="The nodes.")
    zookeeper: ZooKeeperSpec = Field(default_factory=ZooKeeperSpec, description="ZooKeeper settings.")
    kafka: KafkaSpec = Field(default_factory=KafkaSpec, description="Kafka broker settings.")
    state_dir: str | None = Field(
        None, description="Where rendered files and data live; default .kctl/<name> next to kctl.yaml."
    )
    security: SecuritySpec = Field(default_factory=SecuritySpec,
                                   description="TLS, SASL/SCRAM, ACLs and ZooKeeper authentication.")
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec,
                                       description="Metrics exporters on every node (on by default).")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra Docker labels on every container and the network."
    )
    mirrors: list[MirrorSpec] = Field(
        default_factory=list, description="MirrorMaker 2 flows into this cluster from others (`kctl mirror`,"
                                          " docs/mirroring.md).")
    topics: list[TopicSpec] | None = Field(
        None, description="The cluster's topics, declared (kctl.kafka.declared plans the live cluster to them: new"
                          " topics created, partitions added, configs set and reset, a changed replication factor"
                          " reassigned). Left out: kctl manages no topic. With `--prune`, a topic not listed is"
                          " deleted (never Kafka's or kctl's own `__` topics).")
    users: list[UserSpec] | None = Field(
        None, description="SCRAM users, declared (the secured profile; never kctl's admin user). Left out: kctl"
                          " manages no user. Their passwords are files, never kctl.yaml.")
    acls: list[AclSpec] | None = Field(
        None, description="ACL bindings, declared (the secured profile). Left out: kctl manages no ACL; listed,"
                          " `--prune` deletes every other one.")
    quotas: list[QuotaSpec] | None = Field(
        None, description="Client quotas, declared: per user, client id, or both, or their defaults (a quota"
                          " naming a user needs the secured profile). A quota the file no longer names for a"
                          " listed entity is deleted; another entity's only with `--prune`.")
    spark: SparkSpec | None = Field(
        None, description="A Spark standalone cluster (master and workers from the installed pyspark's"
                          " distribution) beside the brokers, started by `kctl up`; `kctl stream submit` then runs"
                          " the job there (docs/pipeline.md). Left out: no Spark cluster, the job runs in"
                          " local[N]. Engines compose and swarm (on swarm the Spark containers run on the engine kctl"
                          " talks to, on the stack's overlay network).")
    cluster_id: str | None = Field(
        None, description="Kafka's cluster id of the cluster this spec made (`kctl up` records it in the state"
                          " dir); set it to bind a spec restored from version control to that cluster: every command"
                          " refuses a cluster with another id."
    )

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, v: Any) -> Any:
        return {"ref": v} if isinstance(v, str) or v is None else v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _CLUSTER_NAME.match(v):
            raise ValueError(f"{v!r} is not a cluster name (lowercase letters, digits, '-' and '_', max 40)")
        return v

    # ----- derived facts (pure) -------------------------------------------------
    @property
    def project(self) -> str:
        return f"kctl-{self.name}"

    @property
    def image_ref(self) -> str:
        local = self.image.ref or contract.image_tag(self.versions.kafka)
        if self.image.registry and self.engine is Engine.swarm:
            return f"{self.image.registry.rstrip('/')}/{local}"
        return local

    @property
    def local_image_ref(self) -> str:
        """The node image as this engine knows it (the one kctl builds), before any registry prefix."""
        return self.image.ref or contract.image_tag(self.versions.kafka)

    def node_address(self, node: NodeSpec) -> str:
        """Where kctl and clients reach this node's published ports: 127.0.0.1 (compose), or on Swarm the
        node's advertised_host (default kafka.external_host)."""
        if self.engine in (Engine.swarm, Engine.hosts):
            return node.advertised_host or self.kafka.external_host
        return self.kafka.external_host

    @property
    def participants(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role is ZkRole.participant]

    @property
    def brokers(self) -> list[NodeSpec]:
        """The nodes that run a Kafka broker (every node but the ZooKeeper-only ones)."""
        return [n for n in self.nodes if n.broker]

    def zk_host(self, node: NodeSpec) -> str:
        """Hostname of the container running this node's ZooKeeper."""
        return node.hostname if self.topology is Topology.colocated else f"zk{node.id}"

    def kafka_host(self, node: NodeSpec) -> str:
        """Hostname of the container running this node's Kafka broker."""
        return node.hostname if self.topology is Topology.colocated else f"kafka{node.id}"

    def zk_host_port(self, node: NodeSpec) -> int:
        if self.engine is Engine.hosts:  # nothing is published on a host: ZooKeeper's own client port
            return self.zookeeper.client_port
        return node.zookeeper_port or self.zookeeper.host_port_base + self.nodes.index(node)

    def _index(self, node: NodeSpec) -> int:
        """The offset of a node's ports from their base: its index, except on engine hosts, where every node is
        a host of its own and listens on the base port itself."""
        return 0 if self.engine is Engine.hosts else self.nodes.index(node)

    def kafka_host_port(self, node: NodeSpec) -> int:
        return node.kafka_port or self.kafka.external_port_base + self._index(node)

    def jmx_host_port(self, node: NodeSpec) -> int | None:
        if node.jmx_port:
            return node.jmx_port
        return self.kafka.jmx_port_base + self._index(node) if self.kafka.jmx else None

    def kafka_metrics_host_port(self, node: NodeSpec) -> int | None:
        """The published port of this broker's exporter; None when monitoring is off or the node has no broker."""
        if not (self.monitoring.enabled and node.broker):
            return None
        if self.engine is Engine.hosts:
            return self.monitoring.kafka_exporter_port
        return node.kafka_metrics_port or self.monitoring.kafka_exporter_host_port_base + self.nodes.index(node)

    def zk_metrics_host_port(self, node: NodeSpec) -> int | None:
        """The published port of this node's ZooKeeper metrics; None when monitoring is off."""
        if not self.monitoring.enabled:
            return None
        if self.engine is Engine.hosts:
            return self.monitoring.zookeeper_exporter_port
        return node.zookeeper_metrics_port or (self.monitoring.zookeeper_exporter_host_port_base
                                               + self.nodes.index(node))

    def published_ports(self, node: NodeSpec) -> list[tuple[int, str, str]]:
        """Every host port this node publishes on 127.0.0.1: (port, service, what), the one list that
        validation, `kctl doctor`, port picking and Swarm's checks read."""
        out = [(self.zk_host_port(node), "zookeeper", "zookeeper_port")]
        zkm = self.zk_metrics_host_port(node)
        if zkm is not None:
            out.append((zkm, "zookeeper", "zookeeper_metrics_port"))
        if node.broker:  # a ZooKeeper-only node publishes no Kafka, JMX or exporter port
            out.append((self.kafka_host_port(node), "kafka", "kafka_port"))
            if self.migrating:
                out.append((self.secure_host_port(node), "kafka", "kafka_port + security.migration_port_offset"))
            for port, what in ((self.jmx_host_port(node), "jmx_port"),
                               (self.kafka_metrics_host_port(node), "kafka_metrics_port")):
                if port is not None:
                    out.append((port, "kafka", what))
        return out

    def metrics_endpoints(self) -> list[tuple[NodeSpec, str, str]]:
        """(node, service, url) of every exporter, as kctl reaches them. On KRaft no ZooKeeper runs, so none of
        its exporters is listed (their ports stay in the nodes' published ports until they are made again)."""
        out: list[tuple[NodeSpec, str, str]] = []
        for n in self.nodes:
            for port, service in ((self.zk_metrics_host_port(n), "zookeeper"),
                                  (self.kafka_metrics_host_port(n), "kafka")):
                if port is not None and not (service == "zookeeper" and self.on_kraft):
                    out.append((n, service, f"http://{self.node_address(n)}:{port}/metrics"))
        return out

    def node(self, ref: str | int) -> NodeSpec:
        """Find a node by hostname, container host (zkN/kafkaN) or id."""
        for n in self.nodes:
            if str(ref) in (n.hostname, str(n.id), self.zk_host(n), self.kafka_host(n)):
                return n

        names = ", ".join(n.hostname for n in self.nodes)
        raise UsageError(f"no node {ref!r} in cluster {self.name}", hint=f"nodes are: {names}")

    # ----- the secured profile, and the steps of moving a running cluster to it ---------------------------

    @property
    def security_phase(self) -> int:
        """0 PLAINTEXT, 1-4 a ``security.migration`` step, 5 the secured profile."""
        sec = self.security
        if not sec.enabled:
            return PHASE_PLAIN
        return MIGRATION_PHASES[sec.migration] if sec.migration is not None else PHASE_SECURED

    @property
    def migrating(self) -> bool:
        """The secured listeners run beside the PLAINTEXT-era ones (INTERNAL_SECURE, EXTERNAL_SECURE)."""
        return PHASE_PLAIN < self.security_phase < PHASE_SECURED

    @property
    def kctl_logs_in(self) -> bool:
        """kctl's own Kafka and ZooKeeper clients log in (SASL): from the second migration step on, when every
        broker has a secured listener and every ZooKeeper takes SASL logins."""
        return self.security_phase >= 2

    @property
    def kctl_uses_secure_listener(self) -> bool:
        """kctl's clients use the transitional EXTERNAL_SECURE / INTERNAL_SECURE listeners: at steps 2 and 3, the
        rolls during which INTERNAL and EXTERNAL are PLAINTEXT on some brokers (from step 4 on they are SASL
        on every broker)."""
        return self.security_phase in (2, 3)

    def secure_host_port(self, node: NodeSpec) -> int:
        """The host port of a broker's EXTERNAL_SECURE listener while ``security.migration`` is set."""
        return self.kafka_host_port(node) + self.security.migration_port_offset

    @property
    def secure_internal_port(self) -> int:
        """The port of the INTERNAL_SECURE listener while ``security.migration`` is set."""
        return self.kafka.internal_port + 1

    def client_port(self, node: NodeSpec) -> int:
        """The host port kctl's own clients use for this broker."""
        return self.secure_host_port(node) if self.kctl_uses_secure_listener else self.kafka_host_port(node)

    @property
    def client_internal_port(self) -> int:
        """The port Kafka's tools run by kctl inside a node use."""
        return self.secure_internal_port if self.kctl_uses_secure_listener else self.kafka.internal_port

    @property
    def bootstrap_servers(self) -> str:
        """Bootstrap servers usable from the host (the EXTERNAL listeners; while a migration runs, the ones kctl
        itself uses at that step)."""
        return ",".join(f"{self.node_address(n)}:{self.client_port(n)}" for n in self.brokers)

    @property
    def secured_bootstrap_servers(self) -> str:
        """Bootstrap servers of the SASL listeners a user's client moves to (``kctl client-config``): after
        migration steps 1 and 2 the transitional EXTERNAL_SECURE ones; from step 3 on, EXTERNAL (the clients'
        second move, before the last step removes EXTERNAL_SECURE)."""
        if self.security_phase in (1, 2):
            return ",".join(f"{self.node_address(n)}:{self.secure_host_port(n)}" for n in self.brokers)
        return ",".join(f"{self.node_address(n)}:{self.kafka_host_port(n)}" for n in self.brokers)

    @property
    def internal_bootstrap_servers(self) -> str:
        """Bootstrap servers for containers on the cluster network (the INTERNAL listeners)."""
        return ",".join(f"{self.kafka_host(n)}:{self.client_internal_port}" for n in self.brokers)

    # ----- a ZooKeeper-to-KRaft migration (kctl.kraft): not in kctl.yaml; resolve_cluster reads it from the
    # state dir's record. (the phase the node's files are rendered for, the cluster id the controllers format
    # their metadata log with)
    _kraft: tuple[str, str | None] = PrivateAttr(default=("zookeeper", None))

    @property
    def kraft_phase(self) -> str:
        """The migration phase the nodes' files are rendered for: ``zookeeper`` unless a migration is recorded
        (the phase it reached, or the one a transition under way is moving to)."""
        return self._kraft[0]

    @property
    def kraft_cluster_id(self) -> str | None:
        return self._kraft[1]

    @property
    def on_kraft(self) -> bool:
        """The cluster's metadata lives in its KRaft controllers alone: the migration is finalized (or a finalize
        is under way), and its ZooKeeper is retired."""
        return self._kraft[0] == "kraft"

    def with_kraft(self, phase: str, cluster_id: str | None) -> ClusterSpec:
        """This spec, its files rendered for migration ``phase`` with ``cluster_id``."""
        out = self.model_copy()
        out._kraft = (phase, cluster_id)
        return out

    # The controller quorum is dynamic (KIP-853, kraft.version 1: `kctl quorum make-dynamic`), as the state dir's
    # kraft.json records it: the nodes name the quorum by controller.quorum.bootstrap.servers, not by its voters.
    _dynamic_quorum: bool = PrivateAttr(default=False)

    @property
    def dynamic_quorum(self) -> bool:
        return self.on_kraft and self._dynamic_quorum

    def with_dynamic_quorum(self, dynamic: bool = True) -> ClusterSpec:
        out = self.model_copy()
        out._dynamic_quorum = dynamic
        return out

    # The state dir's kraft.json record as resolve_cluster read it (kctl.kraft.phases.Record), or None.
    _migration: Any = PrivateAttr(default=None)

    @property
    def migration_pins(self) -> dict[str, str]:
        """What a migration to KRaft keeps from its first step to its last (kctl.kraft.phases.check_pins): the
        release and its build, the image, the security profile, and the controllers' nodes (the quorum's voters
        are static)."""
        return {"versions.kafka": self.versions.kafka, "versions.scala": self.versions.scala,
                "image": self.image.ref or "", "security.enabled": str(self.security.enabled).lower(),
                "controllers": ",".join(str(n.id) for n in self.participants)}

    def check_migration(self) -> None:
        """UsageError (exit 2) before anything is rendered for this spec, when it contradicts the state dir's
        migration record: a pinned setting changed while a migration is under way, versions.kafka older than the
        metadata.version kctl raised, or the split topology on KRaft (kctl's controllers run beside the brokers:
        it has no roll for split KRaft nodes)."""
        record = self._migration
        if record is not None:
            check_pins(record, self.migration_pins)
            check_downgrade(record, self.versions.kafka)
        if self.on_kraft and self.topology is Topology.split:
            raise UsageError(f"cluster {self.name} is on KRaft with topology split: kctl runs each KRaft controller"
                             " beside its broker (topology colocated) and makes no roll of split KRaft nodes;"
                             " nothing was rendered or written",
                             hint="docs/runbooks/migrate-to-kraft.md: a split cluster is not migrated")

    @property
    def zookeeper_connect(self) -> str:
        """zookeeper.connect as the brokers use it, chroot included."""
        hosts = ",".join(f"{self.zk_host(n)}:{self.zookeeper.client_port}" for n in self.nodes)
        return hosts + (self.kafka.zookeeper_chroot or "")

    @property
    def zookeeper_connect_host(self) -> str:
        """ZooKeeper connect string usable from the host (published client ports, no chroot)."""
        return ",".join(f"{self.node_address(n)}:{self.zk_host_port(n)}" for n in self.nodes)


# ----- cross-field rules ----------------------------------------------------------

# What check_rules enforces, one entry per rule in its order: docs/spec.md is generated from this list,
# so a rule added below gets its line here.
CROSS_FIELD_RULES: tuple[str, ...] = (
    "node ids and hostnames unique; with the split topology, no hostname like the generated `zkN`/`kafkaN`",
    "mirror names unique and not the cluster's own; a mirror's `overrides` hold no line break or other control"
    " character, no key kctl sets from another setting (`replication.policy.*`, `*.bootstrap.servers`, the login"
    " settings, the flows, topics and groups) and no secret (password, JAAS config, private key)",
    "at least one ZooKeeper participant and at least one broker; an even number of participants, or a single"
    " one among several nodes, is a warning (use 3 or 5)",
    "replication factors (default, offsets topic, transaction log) not above the broker count (the nodes"
    " without `broker: false`)",
    "`min_insync_replicas` below `default_replication_factor` (1 allowed with a factor of 1)",
    "`replica_fetch_max_bytes` below a raised `message_max_bytes` is a warning",
    "every listener (the inter-broker one, INTERNAL, EXTERNAL) has a security protocol",
    "engine compose: the EXTERNAL listener advertised on 127.0.0.1, where kctl publishes every port;"
    " `nodes[].advertised_host` or `swarm_node` is a warning (they are read by engine swarm only)",
    "ZooKeeper's client, peer and election ports differ; `data_log_dir` equal to `data_dir` is a warning;"
    " colocated, Kafka's internal port is none of them",
    "no two published host ports alike, none above 65535, and no node's Kafka port equal to a port used"
    " inside its container",
    "with `monitoring.enabled`: the exporters' ports inside a container clash with no other port there",
    "with `security.enabled`: `zookeeper.enforce_auth` and `zookeeper.set_acl` need `zookeeper.sasl`;"
    " `tls: false` is a warning (passwords cross the network in SCRAM exchanges only, data in the clear);"
    " `admin_user` is not `kafka` or `zkquorum` (kctl's ZooKeeper principals)",
    "`security.migration` needs `security.enabled` and the INTERNAL inter-broker listener; its EXTERNAL_SECURE"
    " ports are published host ports like the others, and INTERNAL_SECURE (internal_port + 1) clashes with"
    " no port of the container",
    "`topics`: names unique and not `__`-prefixed; a replication factor (given, or the default) not above the"
    " broker count; `configs.min.insync.replicas` not above it; a config key Kafka does not know is a warning",
    "`users`: only with `security.enabled`; a name and mechanism once; not `security.admin_user`; a mechanism other"
    " than `security.sasl_mechanism` is a warning (the user could not log in); never a `password` (a"
    " `password_file`)",
    "`acls`: only with `security.enabled`; each operation one Kafka takes on its resource type; a topic, group or"
    " transactional id ACL names its resource, a cluster ACL is on `kafka-cluster` and literal; no ACL twice",
    "`quotas`: each names one entity (user or user_default, and/or client or client_default) once and at least one"
    " quota; a quota on a user (or the user default) only with `security.enabled`",
)


def check_rules(spec: ClusterSpec) -> tuple[list[str], list[str]]:
    """Cross-field rules. Returns (errors, warnings), each prefixed by its field path."""
    errors: list[str] = []
    warnings: list[str] = []

    seen_ids: dict[int, int] = {}
    seen_hosts: dict[str, int] = {}
    for i, n in enumerate(spec.nodes):
        if n.id in seen_ids:
            errors.append(f"nodes.{i}.id: id {n.id} is already used by nodes.{seen_ids[n.id]}")
        seen_ids.setdefault(n.id, i)
        if n.hostname in seen_hosts:
            errors.append(f"nodes.{i}.hostname: {n.hostname!r} is already used by nodes.{seen_hosts[n.hostname]}")
        seen_hosts.setdefault(n.hostname, i)
        if spec.topology is Topology.split and re.match(r"^(zk|kafka)\d+$", n.hostname):
            errors.append(f"nodes.{i}.hostname: {n.hostname!r} clashes with the split topology's zkN/kafkaN names")

    seen_mirrors: dict[str, int] = {}
    for i, m in enumerate(spec.mirrors):
        if m.name in seen_mirrors:
            errors.append(f"mirrors.{i}.name: {m.name!r} is already used by mirrors.{seen_mirrors[m.name]}")
        seen_mirrors.setdefault(m.name, i)
        if m.name == spec.name:
            errors.append(f"mirrors.{i}.name: {m.name!r} is this cluster's own name; MirrorMaker needs two aliases")
        errors += mirror_override_problems(f"mirrors.{i}.overrides", m.overrides)
    ports_here = {p for n in spec.nodes for p, _, _ in spec.published_ports(n)}
    rest: dict[int, int] = {}
    for i, m in enumerate(spec.mirrors):
        if not m.exactly_once:
            continue
        port = m.rest_port or 18083 + i  # kctl.mirror.config.rest_port
        if port in rest:
            errors.append(f"mirrors.{i}.rest_port: {port} is also mirrors.{rest[port]}'s")
        elif port in ports_here:
            errors.append(f"mirrors.{i}.rest_port: {port} is a port this cluster publishes")
        rest.setdefault(port, i)

    participants = len(spec.participants)
    # on KRaft the participants are the controllers: a Raft quorum's majority, the same arithmetic
    kraft = spec.on_kraft or spec.metadata is MetadataMode.kraft
    voters, quorum = ("KRaft controllers", "quorum") if kraft else ("ZooKeeper participants", "ensemble")
    if participants == 0:
        errors.append(f"nodes: at least one node must be one of the {voters} (observers cannot form a quorum)")
    elif participants % 2 == 0:
        warnings.append(
            f"nodes: {participants} {voters}: an even {quorum} tolerates no more failures than"
            f" {participants - 1}; use 3 or 5, not 4"
        )
    if participants == 1 and len(spec.nodes) > 1:
        warnings.append(f"nodes: a single one of the {voters} has no fault tolerance; use 3 or 5")

    brokers = len(spec.brokers)
    if not brokers:
        errors.append("nodes: at least one node must run a broker (`broker: false` on every node)")
    k = spec.kafka
    for field in (
        "default_replication_factor",
        "offsets_topic_replication_factor",
        "transaction_state_log_replication_factor",
    ):
        value = getattr(k, field)
        if value > brokers:
            errors.append(f"kafka.{field}: {value} is above the {brokers} broker(s) of this cluster")
    if k.min_insync_replicas > k.default_replication_factor or (
        k.default_replication_factor > 1 and k.min_insync_replicas >= k.default_replication_factor
    ):
        errors.append(
            f"kafka.min_insync_replicas: {k.min_insync_replicas} must be below default_replication_factor"
            f" {k.default_replication_factor}, or no broker may ever be down for acks=all writes"
        )
    if k.replica_fetch_max_bytes < k.message_max_bytes - 12 and k.message_max_bytes > 1048588:
        warnings.append(
            "kafka.replica_fetch_max_bytes: below message_max_bytes; followers still fetch large batches,"
            " but consider raising it to match"
        )
    for name in (k.inter_broker_listener, "INTERNAL", "EXTERNAL"):
        if name not in k.listener_security_protocol_map:
            errors.append(
                f"kafka.listener_security_protocol_map: listener {name} has no security protocol"
            )
    if spec.engine is Engine.compose:
        for i, n in enumerate(spec.nodes):
            if n.advertised_host or n.swarm_node:
                warnings.append(f"nodes.{i}: advertised_host and swarm_node are read by engine swarm only")
    if spec.engine is Engine.hosts:
        errors.extend(_hosts_errors(spec))
        for i, n in enumerate(spec.nodes):
            if n.swarm_node:
                warnings.append(f"nodes.{i}: swarm_node is read by engine swarm only")
            for field in ("zookeeper_port", "kafka_metrics_port", "zookeeper_metrics_port"):
                if getattr(n, field) is not None:
                    warnings.append(f"nodes.{i}.{field}: engine hosts publishes nothing; the service listens on"
                                    " its own port on the host")
    if k.external_host not in ("127.0.0.1", "localhost") and spec.engine is Engine.compose:
        errors.append(
            f"kafka.external_host: {k.external_host!r}: kctl publishes ports on 127.0.0.1 only, so the"
            " EXTERNAL listener must be advertised there"
        )

    zk = spec.zookeeper
    if len({zk.client_port, zk.peer_port, zk.election_port}) < 3:
        errors.append("zookeeper: client_port, peer_port and election_port must differ")
    if zk.data_dir == zk.data_log_dir:
        warnings.append("zookeeper.data_log_dir: same as data_dir; keeping transaction logs apart is faster")
    if k.internal_port in (zk.client_port, zk.peer_port, zk.election_port) and spec.topology is Topology.colocated:
        errors.append(f"kafka.internal_port: {k.internal_port} clashes with a ZooKeeper port in the same container")

    mon = spec.monitoring
    if mon.enabled:
        zk_inside = {"zookeeper.client_port": zk.client_port, "zookeeper.peer_port": zk.peer_port,
                     "zookeeper.election_port": zk.election_port}
        kafka_inside = {"kafka.internal_port": k.internal_port,
                        **{f"nodes.{i}.kafka_port": spec.kafka_host_port(n)
                           for i, n in enumerate(spec.nodes) if n.broker}}
        colocated = spec.topology is Topology.colocated
        checks = (
            ("kafka_exporter_port", mon.kafka_exporter_port,
             {**kafka_inside, **(zk_inside if colocated else {}),
              **({"monitoring.zookeeper_exporter_port": mon.zookeeper_exporter_port} if colocated else {})}),
            ("zookeeper_exporter_port", mon.zookeeper_exporter_port,
             {**zk_inside, **(kafka_inside if colocated else {})}),
        )
        for field, port, ports_there in checks:
            clash = [w for w, p in ports_there.items() if p == port]
            if clash:
                errors.append(f"monitoring.{field}: {port} is also {clash[0]}, a port used inside the same"
                              " container")

    names: dict[str, int] = {}
    for i, nt in enumerate(mon.notifiers):
        where = f"monitoring.notifiers.{i}"
        errors.extend(f"{where}: {p}" for p in nt.problems())
        if nt.key in names:
            errors.append(f"{where}: notifier {nt.key!r} is also monitoring.notifiers.{names[nt.key]} (give each"
                          " its own `name`)")
        names.setdefault(nt.key, i)

    if mon.prometheus and not mon.enabled:
        errors.append("monitoring.prometheus: needs monitoring.enabled (the exporters it scrapes)")
    if mon.prometheus and spec.engine is not Engine.compose:
        errors.append("monitoring.prometheus: runs beside engine compose only (on this Docker engine, host network)")

    # Published host ports, all on 127.0.0.1: no two may be the same.
    published: dict[int, str] = {}
    if mon.enabled:
        published[mon.monitor_port] = "monitoring.monitor_port"
    if mon.prometheus:
        for field in ("prometheus_port", "alertmanager_port"):
            port = getattr(mon, field)
            if port in published:
                errors.append(f"monitoring.{field}: host port {port} is also used by {published[port]}")
            published[port] = f"monitoring.{field}"
    for i, n in enumerate(spec.nodes):
        if spec.engine is Engine.hosts:
            break  # each node is a host of its own: the same port on two nodes is no clash
        for port, _, what in spec.published_ports(n):
            where = f"nodes.{i}.{what}"
            if port > 65535:
                errors.append(f"{where}: derived host port {port} is above 65535; lower the port base")
            elif port in published:
                errors.append(f"{where}: host port {port} is also used by {published[port]}")
            else:
                published[port] = where
    for i, n in enumerate(spec.nodes):
        port = spec.kafka_host_port(n)
        if n.broker and port in (zk.client_port, zk.peer_port, zk.election_port, k.internal_port):
            errors.append(
                f"nodes.{i}.kafka_port: {port} clashes with a port used inside the container;"
                " the EXTERNAL listener listens on the same port it publishes"
            )
    sec = spec.security
    if sec.enabled:
        for field in ("enforce_auth", "set_acl"):
            if getattr(sec.zookeeper, field) and not sec.zookeeper.sasl:
                errors.append(f"security.zookeeper.{field}: needs security.zookeeper.sasl: true (without SASL"
                              " the brokers could not authenticate to ZooKeeper)")
        if not sec.tls:
            warnings.append("security.tls: false: SASL_PLAINTEXT listeners carry every record in the clear")
        if sec.admin_user in RESERVED_PRINCIPALS:
            errors.append(f"security.admin_user: {sec.admin_user!r} is one of kctl's ZooKeeper principals"
                          f" ({', '.join(RESERVED_PRINCIPALS)})")
    if spec.metadata is MetadataMode.kraft:
        if sec.enabled and spec.engine is Engine.hosts:
            errors.append("metadata: kraft with security.enabled on engine hosts is not built yet (its controllers'"
                          " first format with the admin's SCRAM credential is tested on compose and swarm only);"
                          " use engine compose or swarm, or metadata: kraft without security on hosts")
        if spec.topology is not Topology.colocated:
            errors.append("metadata: kraft runs each controller beside its broker: topology colocated")
        if sec.migration is not None:
            errors.append("security.migration on metadata: kraft is not built yet (its steps write the admin's SCRAM"
                          " credential through ZooKeeper); a cluster made on KRaft is secured from the start:"
                          " `kctl init --kraft --secure`")
    if sec.migration is not None:
        if not sec.enabled:
            errors.append("security.migration: a step towards the secured profile needs security.enabled: true")
        if k.inter_broker_listener != "INTERNAL":
            errors.append(f"security.migration: moves the INTERNAL listener; kafka.inter_broker_listener is"
                          f" {k.inter_broker_listener!r}")
        inside = (zk.client_port, zk.peer_port, zk.election_port) if spec.topology is Topology.colocated else ()
        if spec.secure_internal_port in (*inside, *(spec.kafka_host_port(n) for n in spec.brokers)):
            errors.append(f"security.migration: the INTERNAL_SECURE port {spec.secure_internal_port}"
                          " (kafka.internal_port + 1) clashes with another port of the container")
    if spec.spark is not None:
        sp = spec.spark
        if spec.engine is Engine.hosts:
            # kctl.stream.spark_hosts: the master on the first node's host, worker N on the N-th node's
            if sp.workers > len(spec.nodes):
                errors.append(f"spark.workers: {sp.workers} workers on engine hosts run one per node's host, and"
                              f" the cluster has {len(spec.nodes)} node(s); lower spark.workers")
            if sp.warm_driver:
                errors.append("spark.warm_driver: a warm driver on engine hosts is not built yet (engines compose"
                              " and swarm); leave it out")
            if spec.security.enabled:
                errors.append("spark: a Spark cluster on engine hosts beside the secured profile is not built yet"
                              " (the job's own login and TLS towards the hosts' listeners); leave the spark"
                              " section out and run the job with `kctl stream submit --master local[N]`")
        for i, port in enumerate(range(sp.ui_port, sp.ui_port + sp.workers + 1)):
            what = "spark.ui_port" if i == 0 else f"spark.ui_port + {i} (worker {i})"
            if port > 65535:
                errors.append(f"{what}: derived host port {port} is above 65535; lower spark.ui_port")
            elif port in published:
                errors.append(f"{what}: host port {port} is also used by {published[port]}")
            else:
                published[port] = what
    declared_errors, declared_warnings = _declared_problems(spec)
    return errors + declared_errors, warnings + declared_warnings


def default_topic_partitions(spec: ClusterSpec) -> int:
    """A new topic's partitions when kctl.yaml names none: num.partitions as the brokers run it."""
    return int(spec.kafka.overrides.get("num.partitions", spec.kafka.num_partitions))


def default_topic_replication_factor(spec: ClusterSpec) -> int:
    """A new topic's replication factor when kctl.yaml names none: default.replication.factor as the brokers run
    it."""
    return int(spec.kafka.overrides.get("default.replication.factor", spec.kafka.default_replication_factor))


def quota_entity_name(q: QuotaSpec) -> str:
    """How a quota's entity is written in messages: ``user 'a'``, ``client-id default``, joined by "and"."""
    parts = []
    if q.user is not None or q.user_default:
        parts.append("user default" if q.user_default else f"user {q.user!r}")
    if q.client is not None or q.client_default:
        parts.append("client-id default" if q.client_default else f"client-id {q.client!r}")
    return " and ".join(parts)


def _declared_problems(spec: ClusterSpec) -> tuple[list[str], list[str]]:
    """topics:, users:, acls: and quotas: against each other and the cluster (kctl.kafka.declared plans them)."""
    errors: list[str] = []
    warnings: list[str] = []
    brokers = len(spec.brokers)
    secured = spec.security.enabled  # as kctl.kafka.security.require_secured decides
    unsecured = ("needs the secured profile: cluster has no authentication; hint: set security.enabled: true"
                 " (docs/security.md moves a running cluster)")

    seen: dict[str, int] = {}
    for i, t in enumerate(spec.topics or []):
        where = f"topics.{i}"
        if t.name in seen:
            errors.append(f"{where}.name: topic {t.name!r} is already topics.{seen[t.name]}")
        seen.setdefault(t.name, i)
        if t.name.startswith("__"):
            errors.append(f"{where}.name: {t.name!r}: topics starting with `__` are Kafka's and kctl's own")
        rf = t.replication_factor or default_topic_replication_factor(spec)
        if rf > brokers:
            field = "replication_factor" if t.replication_factor else "replication_factor (the default)"
            errors.append(f"{where}.{field}: {rf} is above the {brokers} broker(s) of this cluster; hint: name"
                          f" {brokers} or fewer")
        unknown = sorted(k for k in t.configs if k not in TOPIC_CONFIGS)
        for k in unknown:
            warnings.append(f"{where}.configs.{k}: not a topic config of Kafka {spec.versions.kafka}; Kafka refuses"
                            " an unknown one when it is set")
        for k in sorted(k for k in t.configs if k in REMOVED_IN_KAFKA_4 and contract.kraft_only(spec.versions.kafka)):
            errors.append(f"{where}.configs.{k}: Kafka {spec.versions.kafka} has no {k} ({REMOVED_IN_KAFKA_4[k]})")
        isr = t.configs.get("min.insync.replicas")
        if isr is not None and isr.isdigit() and int(isr) > rf:
            errors.append(f"{where}.configs.min.insync.replicas: {isr} is above the topic's replication factor"
                          f" {rf}: no acks=all write could succeed")

    if spec.users is not None and not secured:
        errors.append(f"users: {unsecured}")
    users: dict[tuple[str, str], int] = {}
    for i, u in enumerate(spec.users or []):
        where = f"users.{i}"
        if (u.name, u.mechanism) in users:
            errors.append(f"{where}.name: user {u.name!r} with {u.mechanism} is already"
                          f" users.{users[(u.name, u.mechanism)]}")
        users.setdefault((u.name, u.mechanism), i)
        if u.name == spec.security.admin_user:
            errors.append(f"{where}.name: {u.name!r} is kctl's admin user (security.admin_user), whose password kctl"
                          " generates and keeps in the state dir; hint: pick another name")
        if secured and u.mechanism != spec.security.sasl_mechanism:
            warnings.append(f"{where}.mechanism: {u.mechanism}, but the cluster's listeners take"
                            f" {spec.security.sasl_mechanism} (security.sasl_mechanism): the user cannot log in"
                            " with it")

    if spec.acls is not None and not secured:
        errors.append(f"acls: {unsecured}")
    acls: dict[tuple[Any, ...], int] = {}
    for i, a in enumerate(spec.acls or []):
        where = f"acls.{i}"
        if a.operation not in ACL_SUPPORTED[a.resource_type]:
            errors.append(f"{where}.operation: {a.operation} is not an operation on a {a.resource_type}; hint: one"
                          f" of {', '.join(ACL_SUPPORTED[a.resource_type])}")
        if a.resource_type == "cluster":
            if a.resource not in (None, CLUSTER_RESOURCE):
                errors.append(f"{where}.resource: the cluster's one name is {CLUSTER_RESOURCE}, not {a.resource!r};"
                              " hint: leave it out")
            if a.pattern == "prefixed":
                errors.append(f"{where}.pattern: prefixed names a topic, group or transactional id prefix, not"
                              " the cluster")
        elif not a.resource:
            errors.append(f"{where}.resource: a {a.resource_type} ACL names its {a.resource_type} (or `*`)")
        binding = (a.principal, a.permission, a.operation, a.resource_type, a.resource_name, a.pattern, a.host)
        if binding in acls:
            errors.append(f"{where}: the same ACL as acls.{acls[binding]}")
        acls.setdefault(binding, i)

    entities: dict[tuple[Any, ...], int] = {}
    for i, q in enumerate(spec.quotas or []):
        where = f"quotas.{i}"
        if q.user is not None and q.user_default or q.client is not None and q.client_default:
            errors.append(f"{where}: user and user_default (or client and client_default) exclude each other")
            continue
        if q.user is None and not q.user_default and q.client is None and not q.client_default:
            errors.append(f"{where}: no quota entity; hint: name user, client, user_default or client_default")
            continue
        if not q.values:
            errors.append(f"{where}: no quota given; hint: e.g. producer_byte_rate: 1048576 (quotas are"
                          f" {', '.join(QUOTA_KEYS)})")
        if (q.user is not None or q.user_default) and not secured:
            errors.append(f"{where}.user: a user's quota needs the secured profile: without authentication every"
                          " client is anonymous (a client id's quota works without it); hint: set security.enabled:"
                          " true, or limit by client")
        if q.user is not None and not _PRINCIPAL.match(q.user):
            errors.append(f"{where}.user: {q.user!r} is not a user name")
        key = (q.user, q.user_default, q.client, q.client_default)
        if key in entities:
            errors.append(f"{where}: {quota_entity_name(q)} already has quotas.{entities[key]}; hint: one entry per"
                          " entity")
        entities.setdefault(key, i)
    return errors, warnings


def _hosts_errors(spec: ClusterSpec) -> list[str]:
    """engine hosts: what a spec needs before kctl can reach and lay out its hosts."""
    errors: list[str] = []
    if spec.topology is not Topology.colocated:
        errors.append("topology: engine hosts runs each node's ZooKeeper and Kafka on its own host (colocated);"
                      " a ZooKeeper-only host is a node with `broker: false`")
    addresses: dict[str, int] = {}
    for i, n in enumerate(spec.nodes):
        if not n.advertised_host:
            errors.append(f"nodes.{i}.advertised_host: engine hosts needs each host's address (kctl logs in there"
                          " over ssh, and clients reach its listeners there)")
        elif n.advertised_host in addresses:
            first = addresses[n.advertised_host]
            errors.append(f"nodes.{i}.advertised_host: {n.advertised_host} is also nodes.{first}'s;"
                          " engine hosts runs one node per host")
        else:
            addresses[n.advertised_host] = i
    return errors


# ----- loading --------------------------------------------------------------------


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _zookeeper_version(data: dict[str, Any]) -> Any:
    versions = data.get("versions")
    return versions.get("zookeeper") if isinstance(versions, dict) else None


def _without_zookeeper_version(data: dict[str, Any]) -> dict[str, Any]:
    # versions.zookeeper was accepted and never read; it is no longer a setting (see version_problems).
    versions = data.get("versions")
    if isinstance(versions, dict) and "zookeeper" in versions:
        return {**data, "versions": {k: v for k, v in versions.items() if k != "zookeeper"}}
    return data


# Broker settings Kafka 4 removed (KIP-724: the message formats v0/v1 are gone; KIP-500: ZooKeeper mode, and with
# it the inter-broker protocol version, which metadata.version replaces). A 4.x broker ignores them with a
# warning at best, so an override of one in a 4.x render is refused, not passed on silently.
REMOVED_IN_KAFKA_4 = {
    "log.message.format.version": "KIP-724: every record is in message format v2; a topic's message.format.version"
                                  " likewise",
    "message.format.version": "KIP-724: every record is in message format v2",
    "inter.broker.protocol.version": "KRaft: metadata.version takes its place; kctl raises it after an upgrade",
}


def version_problems(data: dict[str, Any], spec: ClusterSpec) -> list[str]:
    """Versions the image build cannot produce, and a versions.zookeeper that cannot be honoured."""
    out: list[str] = []
    kafka = spec.versions.kafka
    if spec.image.ref is None and kafka not in contract.ZOOKEEPER_VERSIONS:
        known = ", ".join(sorted(contract.ZOOKEEPER_VERSIONS))
        out.append(f"versions.kafka: kctl's image build cannot produce Kafka {kafka}; it builds {known}"
                   " (set `image:` to run a node image of your own)")
    if contract.kraft_only(kafka) and spec.versions.scala != "2.13":
        out.append(f"versions.scala: Kafka {kafka} is built for Scala 2.13 only")
    if contract.kraft_only(kafka):
        node_overrides = ((f"nodes.{i}.overrides.kafka", n.overrides.kafka) for i, n in enumerate(spec.nodes))
        for where, overrides in [("kafka.overrides", spec.kafka.overrides), *node_overrides]:
            for key in sorted(k for k in overrides if k in REMOVED_IN_KAFKA_4):
                out.append(f"{where}.{key}: Kafka {kafka} has no {key} ({REMOVED_IN_KAFKA_4[key]}); remove it")
    zk = _zookeeper_version(data)
    if zk is not None and str(zk) != spec.versions.zookeeper:
        ships = spec.versions.zookeeper
        out.append(f"versions.zookeeper: {zk} cannot be honoured: the node runs the ZooKeeper that Kafka {kafka}"
                   + (f" ships ({ships})" if ships else " ships") + "; remove the setting")
    return out


def version_warnings(data: dict[str, Any], spec: ClusterSpec) -> list[str]:
    zk = _zookeeper_version(data)
    if zk is not None and str(zk) == spec.versions.zookeeper:
        return [f"versions.zookeeper is deprecated and ignored: the ZooKeeper is the one Kafka {spec.versions.kafka}"
                f" ships ({zk}); remove the setting"]
    return []


def parse_spec(data: Any, source: str | None = None) -> tuple[ClusterSpec, list[str]]:
    """Validate raw data; returns the spec and its warnings, or raises SpecError with every problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(
            [f"(top level): expected a mapping of settings, got {type(data).__name__}"],
            hint="see `kctl init` for a complete example",
            path=source,
        )
    try:
        spec = ClusterSpec.model_validate(_without_zookeeper_version(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown setting"
            problems.append(f"{_loc(err['loc'])}: {msg}")
        raise SpecError(problems, hint="fix the settings above; `kctl init --force` writes a valid example",
                        path=source) from None
    errors, warnings = check_rules(spec)
    errors = version_problems(data, spec) + errors
    warnings = version_warnings(data, spec) + warnings
    if errors:
        raise SpecError(errors, hint="fix the settings above; nothing was written or started", path=source)
    return spec, warnings


def load_spec(path: Path | str) -> tuple[ClusterSpec, list[str]]:
    """Load and validate ``kctl.yaml``. Raises SpecError (exit 2) with every problem found."""
    p = Path(path)
    if not p.exists():
        raise SpecError([f"{p}: no such file"], hint="run `kctl init` to write a kctl.yaml, or pass -f FILE")
    try:
        # LibYAML's parser where PyYAML was built with it (a tenth of the pure-Python one's time, paid by
        # every command); the same safe constructors either way.
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([f"{p}: not valid YAML{where}: {getattr(exc, 'problem', exc)}"],
                        hint="check indentation and quoting") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"{p}: cannot read: {exc}"]) from None
    return parse_spec(data, source=str(p))


def recorded_engine(state_dir: Path) -> Engine | None:
    """The engine `kctl up --engine` recorded in a state dir, if any."""
    try:
        return Engine((state_dir / contract.ENGINE_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def record_engine(state_dir: Path, kind: Engine) -> None:
    """Record the engine `kctl up --engine` chose, for every later command whose kctl.yaml does not say."""
    # durably: an empty file left by a crash would read as no engine recorded, and the cluster as compose
    write_durable(state_dir / contract.ENGINE_FILE, kind.value + "\n", mode=0o644)


def resolve_cluster(spec: ClusterSpec, spec_path: Path) -> ClusterSpec:
    """``spec`` as every command needs it: its engine (kctl.yaml's, else the one `kctl up --engine` recorded
    in the state dir) and its state dir absolute (its secrets are found from any directory)."""
    state = state_dir_for(spec, spec_path).resolve()
    update: dict[str, Any] = {}
    if "engine" not in spec.model_fields_set:
        recorded = recorded_engine(state)
        if recorded is not None and recorded is not spec.engine:
            update["engine"] = recorded
    if spec.state_dir != str(state):
        update["state_dir"] = str(state)
    ssh: dict[str, Any] = {}
    for field in ("key_file", "known_hosts_file"):  # relative to kctl.yaml's directory, found from anywhere
        value = getattr(spec.ssh, field)
        if value is not None and not Path(value).expanduser().is_absolute():
            ssh[field] = str(spec_path.resolve().parent / value)
        elif value is not None and value.startswith("~"):
            ssh[field] = str(Path(value).expanduser())
    if ssh:
        update["ssh"] = spec.ssh.model_copy(update=ssh)
    out = spec.model_copy(update=update) if update else spec

    record = read(state)
    if record.phase is not Phase.zookeeper or record.target is not None:
        out = out.with_kraft((record.target or record.phase).value, record.cluster_id)
    elif spec.metadata is MetadataMode.kraft:  # made on KRaft: its id comes with its first `kctl up`
        out = out.with_kraft(Phase.kraft.value, None)
    if out is spec:
        out = spec.model_copy()
    out._dynamic_quorum = record.quorum == "dynamic"
    out._migration = record  # what check_migration holds kctl.yaml to, before anything is rendered
    return out


def load_cluster(path: Path | str) -> tuple[ClusterSpec, list[str]]:
    """The one loader of a cluster: kctl.yaml validated (SpecError, exit 2, on any problem), its engine and
    absolute state dir resolved (:func:`resolve_cluster`), and the spec's warnings for the caller to show."""
    spec, warnings = load_spec(path)
    return resolve_cluster(spec, Path(path)), warnings


def parse_cluster(data: Any, spec_path: Path) -> tuple[ClusterSpec, list[str]]:
    """:func:`load_cluster` for kctl.yaml's data about to be written to ``spec_path`` (node add/remove)."""
    spec, warnings = parse_spec(data, str(spec_path))
    return resolve_cluster(spec, spec_path), warnings


def state_dir_for(spec: ClusterSpec, spec_path: Path | None) -> Path:
    """The cluster's state dir: rendered files, data and logs."""
    if spec.state_dir:
        sd = Path(spec.state_dir)
        if not sd.is_absolute() and spec_path is not None:
            sd = spec_path.resolve().parent / sd
        return sd
    base = spec_path.resolve().parent if spec_path is not None else Path.cwd()
    return base / ".kctl" / spec.name


def default_spec_yaml(name: str = "logger", settings: dict[str, Any] | None = None) -> str:
    """The kctl.yaml that `kctl init` writes: the defaults (with ``settings`` on top), spelled out."""
    spec = ClusterSpec.model_validate({**(settings or {}), "name": name})
    data = spec.model_dump(mode="json", exclude_none=True)
    header = (
        "# kctl cluster spec. Every setting is optional; these are the defaults.\n"
        "# Reference: docs/spec.md (generated from the model's descriptions).\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
