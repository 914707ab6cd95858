"""Final property dicts of every rendered file, computed in Python.

Order of precedence, last wins: kctl defaults -> groups the spec's shape enables
(the ensemble's ``server.N`` lines and an observer's ``peerType``; single-broker and
small-cluster settings) -> component overrides (``zookeeper.overrides``,
``kafka.overrides``) -> node overrides. Templates only loop over the sorted
result (cp-ansible's ``combine_properties``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kctl import contract
from kctl.model.spec import ClusterSpec, Engine, NodeSpec, Scalar, Topology, ZkRole

# Property names as constants: a typo here is a NameError, not a silently ignored key.
TICK_TIME = "tickTime"
INIT_LIMIT = "initLimit"
SYNC_LIMIT = "syncLimit"
DATA_DIR = "dataDir"
DATA_LOG_DIR = "dataLogDir"
CLIENT_PORT = "clientPort"
SNAP_RETAIN = "autopurge.snapRetainCount"
PURGE_INTERVAL = "autopurge.purgeInterval"
FOUR_LW = "4lw.commands.whitelist"
ADMIN_SERVER = "admin.enableServer"
MAX_CNXNS = "maxClientCnxns"
PEER_TYPE = "peerType"
RECONFIG = "reconfigEnabled"
DYNAMIC_CONFIG_FILE = "dynamicConfigFile"
# zoo.cfg keys ZooKeeper does not know become system properties "zookeeper.<key>": this is zookeeper.skipACL.
SKIP_ACL = "skipACL"
# Likewise zookeeper.superUser (ZooKeeper 3.8's isSaslSuperUser reads it): the SASL principal with all rights.
SUPER_USER = "superUser"
ZOO_CFG_DYNAMIC = "zoo.cfg.dynamic"  # the ensemble's membership, next to zoo.cfg in the conf dir
STANDALONE = "standaloneEnabled"
QUORUM_LISTEN_ALL = "quorumListenOnAllIPs"
METRICS_PROVIDER = "metricsProvider.className"
METRICS_PORT = "metricsProvider.httpPort"
METRICS_JVM = "metricsProvider.exportJvmInfo"
PROMETHEUS_PROVIDER = "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider"

BROKER_ID = "broker.id"
LISTENERS = "listeners"
# The transitional listeners of security.migration (kctl.model.spec.Migration).
SECURE_INTERNAL = "INTERNAL_SECURE"
SECURE_EXTERNAL = "EXTERNAL_SECURE"
ADVERTISED_LISTENERS = "advertised.listeners"
INTER_BROKER_LISTENER = "inter.broker.listener.name"
PROTOCOL_MAP = "listener.security.protocol.map"
LOG_DIRS = "log.dirs"
NUM_PARTITIONS = "num.partitions"
DEFAULT_RF = "default.replication.factor"
OFFSETS_RF = "offsets.topic.replication.factor"
TXN_RF = "transaction.state.log.replication.factor"
TXN_MIN_ISR = "transaction.state.log.min.isr"
# Kafka 4's share coordinator keeps the share groups' state (KIP-932) in __share_group_state, made at the first
# share group's first fetch with these (Kafka's defaults: 3 and 2, which a cluster of fewer brokers cannot make:
# every share consumer then gets no partitions at all). Set as the offsets topic's, from Kafka 4.0 on.
SHARE_STATE_RF = "share.coordinator.state.topic.replication.factor"
SHARE_STATE_MIN_ISR = "share.coordinator.state.topic.min.isr"
MIN_ISR = "min.insync.replicas"
DELETE_TOPIC = "delete.topic.enable"
AUTO_CREATE = "auto.create.topics.enable"
RETENTION_HOURS = "log.retention.hours"
RETENTION_BYTES = "log.retention.bytes"
SEGMENT_BYTES = "log.segment.bytes"
RETENTION_CHECK = "log.retention.check.interval.ms"
MESSAGE_MAX = "message.max.bytes"
REPLICA_FETCH_MAX = "replica.fetch.max.bytes"
REPLICA_FETCH_BACKOFF = "replica.fetch.backoff.ms"
ZK_CONNECT = "zookeeper.connect"
ZK_SESSION_TIMEOUT = "zookeeper.session.timeout.ms"
ZK_CONNECT_TIMEOUT = "zookeeper.connection.timeout.ms"
CONTROLLED_SHUTDOWN = "controlled.shutdown.enable"
GROUP_INITIAL_DELAY = "group.initial.rebalance.delay.ms"

# The secured profile (security.enabled).
AUTH_PROVIDER = "authProvider.sasl"
ENFORCE_AUTH = "enforce.auth.enabled"
ENFORCE_AUTH_SCHEMES = "enforce.auth.schemes"
QUORUM_SASL = "quorum.auth.enableSasl"
QUORUM_LEARNER_REQUIRE = "quorum.auth.learnerRequireSasl"
QUORUM_SERVER_REQUIRE = "quorum.auth.serverRequireSasl"
QUORUM_LEARNER_CONTEXT = "quorum.auth.learner.saslLoginContext"
QUORUM_SERVER_CONTEXT = "quorum.auth.server.saslLoginContext"
SASL_MECHANISMS = "sasl.enabled.mechanisms"
SASL_INTER_BROKER = "sasl.mechanism.inter.broker.protocol"
SUPER_USERS = "super.users"
AUTHORIZER = "authorizer.class.name"
ALLOW_IF_NO_ACL = "allow.everyone.if.no.acl.found"
ZK_SET_ACL = "zookeeper.set.acl"
CONFIG_PROVIDERS = "config.providers"
FILE_PROVIDER_CLASS = "config.providers.file.class"
FILE_PROVIDER_PATHS = "config.providers.file.param.allowed.paths"
SSL_KEYSTORE_TYPE = "ssl.keystore.type"
SSL_KEYSTORE_LOCATION = "ssl.keystore.location"
SSL_KEYSTORE_PASSWORD = "ssl.keystore.password"
SSL_KEY_PASSWORD = "ssl.key.password"
SSL_TRUSTSTORE_TYPE = "ssl.truststore.type"
SSL_TRUSTSTORE_LOCATION = "ssl.truststore.location"
SSL_CLIENT_AUTH = "ssl.client.auth"
SSL_ENDPOINT_ID = "ssl.endpoint.identification.algorithm"

# Four-letter words never whitelisted on a secured cluster: they list sessions and the paths they watch.
UNSAFE_FOUR_LETTER_WORDS = ("dump", "wchc", "wchp")
# JVM system properties of every broker on a secured cluster: no JNDI/LDAP login module from a
# client-supplied JAAS config (CVE-2023-25194), and no URL for SASL OAUTHBEARER (CVE-2025-27817).
DISALLOWED_LOGIN_MODULES = "org.apache.kafka.disallowed.login.modules"
DISALLOWED_LOGIN_MODULES_VALUE = ("com.sun.security.auth.module.JndiLoginModule,"
                                  "com.sun.security.auth.module.LdapLoginModule")
OAUTHBEARER_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
# The password of the keystore as the broker reads it (FileConfigProvider), so server.properties holds none.
KEYSTORE_PASSWORD_KEY = "keystore.password"
# ZooKeeper DIGEST-MD5 principals: the brokers (owners of Kafka's znodes), kctl's reads, the quorum.
ZK_BROKER_PRINCIPAL = "kafka"
ZK_KCTL_PRINCIPAL = "kctl"
ZK_QUORUM_PRINCIPAL = "zkquorum"
# ZooKeeper's super user on a secured cluster: the principal `kctl zk reconfig` (and `kctl node add|remove`)
# log in as, since ZooKeeper checks a reconfig against the ACL of /zookeeper/config unless skipACL. Named
# in zoo.cfg as superUser; its password only in the JAAS Server section and the state dir.
ZK_SUPER_PRINCIPAL = "zkadmin"

# Where things live inside the node image (the container contract).
CONF_DIR, DATA_ROOT, LOG_ROOT = contract.CONF_DIR, contract.DATA_ROOT, contract.LOG_ROOT

Props = dict[str, str]

# The spec's setting each server.properties key comes from, so that an error
# can name the line of kctl.yaml that changes it.
KAFKA_SPEC_FIELDS: Mapping[str, str] = {
    NUM_PARTITIONS: "kafka.num_partitions",
    DEFAULT_RF: "kafka.default_replication_factor",
    OFFSETS_RF: "kafka.offsets_topic_replication_factor",
    TXN_RF: "kafka.transaction_state_log_replication_factor",
    SHARE_STATE_RF: "kafka.offsets_topic_replication_factor",
    MIN_ISR: "kafka.min_insync_replicas",
    DELETE_TOPIC: "kafka.delete_topic_enable",
    AUTO_CREATE: "kafka.auto_create_topics_enable",
    RETENTION_HOURS: "kafka.log_retention_hours",
    RETENTION_BYTES: "kafka.log_retention_bytes",
    SEGMENT_BYTES: "kafka.log_segment_bytes",
    RETENTION_CHECK: "kafka.log_retention_check_interval_ms",
    MESSAGE_MAX: "kafka.message_max_bytes",
    REPLICA_FETCH_MAX: "kafka.replica_fetch_max_bytes",
    REPLICA_FETCH_BACKOFF: "kafka.replica_fetch_backoff_ms",
    ZK_CONNECT: "kafka.zookeeper_chroot",
    ZK_SESSION_TIMEOUT: "kafka.zookeeper_session_timeout_ms",
    LOG_DIRS: "kafka.log_dirs",
    LISTENERS: "kafka.internal_port / nodes[].kafka_port",
    ADVERTISED_LISTENERS: "kafka.external_host (swarm: nodes[].advertised_host) / nodes[].kafka_port",
    INTER_BROKER_LISTENER: "kafka.inter_broker_listener",
    PROTOCOL_MAP: "kafka.listener_security_protocol_map",
    BROKER_ID: "nodes[].id",
}


def _s(v: Scalar) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def combine(*layers: Mapping[str, Scalar]) -> Props:
    """Merge layers, last wins, and return them sorted by key as strings."""
    merged: dict[str, str] = {}
    for layer in layers:
        for k, v in layer.items():
            merged[k] = _s(v)
    return dict(sorted(merged.items()))


def zoo_cfg(spec: ClusterSpec, node: NodeSpec) -> Props:
    zk = spec.zookeeper
    base: dict[str, Scalar] = {
        TICK_TIME: zk.tick_time,
        INIT_LIMIT: zk.init_limit,
        SYNC_LIMIT: zk.sync_limit,
        DATA_DIR: zk.data_dir,
        DATA_LOG_DIR: zk.data_log_dir,
        CLIENT_PORT: zk.client_port,
        SNAP_RETAIN: zk.autopurge_snap_retain_count,
        PURGE_INTERVAL: zk.autopurge_purge_interval,
        FOUR_LW: ",".join(sorted(set(zk.four_letter_words))),
        ADMIN_SERVER: zk.admin_server,
        MAX_CNXNS: zk.max_client_connections,
        # Each container binds its own hostname's address; listening on all
        # addresses keeps the quorum ports reachable after an IP change.
        QUORUM_LISTEN_ALL: True,
    }
    groups: dict[str, Scalar] = {}
    if len(spec.nodes) > 1:
        # The ensemble's membership lives in the dynamic config file (rendered by zoo_cfg_dynamic), so that
        # `kctl zk reconfig` / `kctl node add` can change it at run time. ZooKeeper rewrites neither file:
        # the conf dir is mounted read-only (it logs that it cannot save the next config, and carries on);
        # kctl.yaml stays the source of truth, and a restarted server learns a newer config from the leader.
        # reconfig needs an authorized user unless skipACL (ZooKeeper's dynamic reconfiguration docs,
        # "Security"): kctl's znodes carry open ACLs (Kafka runs without zookeeper.set.acl) and ZooKeeper's
        # client port is published on 127.0.0.1 only, so skipACL lifts no protection the cluster relies on.
        # The secured profile relies on znode ACLs: there skipACL stays off, and reconfig is done as
        # ZooKeeper's SASL super user (zookeeper_security: superUser).
        groups[RECONFIG] = True
        if not zk_super_user(spec):
            groups[SKIP_ACL] = "yes"
        groups[DYNAMIC_CONFIG_FILE] = f"{CONF_DIR}/{ZOO_CFG_DYNAMIC}"
    if node.role is ZkRole.observer:
        groups[PEER_TYPE] = "observer"
    if spec.monitoring.enabled:
        # ZooKeeper's own Prometheus endpoint (its jars: the image's ZOOKEEPER_METRICS_LIBS).
        groups[METRICS_PROVIDER] = PROMETHEUS_PROVIDER
        groups[METRICS_PORT] = spec.monitoring.zookeeper_exporter_port
        groups[METRICS_JVM] = True
    groups.update(zookeeper_security(spec))
    return combine(base, groups, zk.overrides, node.overrides.zookeeper)


def zookeeper_security(spec: ClusterSpec) -> dict[str, Scalar]:
    """zoo.cfg of the secured profile: SASL clients (enforced), quorum SASL, the safe 4lw whitelist.

    Keys zoo.cfg does not know itself become ``zookeeper.<key>`` system properties (enforce.auth.*).
    """
    sec = spec.security
    if not sec.enabled:
        return {}
    words = set(spec.zookeeper.four_letter_words)
    if "*" in words:
        words = set(contract.FOUR_LETTER_WORDS)
    out: dict[str, Scalar] = {
        FOUR_LW: ",".join(sorted(words - set(UNSAFE_FOUR_LETTER_WORDS))),
        ADMIN_SERVER: False,
    }
    phase = spec.security_phase
    if sec.zookeeper.sasl:
        out[AUTH_PROVIDER] = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
        if len(spec.nodes) > 1:
            # ZooKeeper's rolling upgrade to quorum SASL: enableSasl, then learnerRequireSasl, then
            # serverRequireSasl, one restart each (steps 1, 2 and 3 of security.migration).
            out[SUPER_USER] = ZK_SUPER_PRINCIPAL
            out.update({QUORUM_SASL: True, QUORUM_LEARNER_REQUIRE: phase >= 2, QUORUM_SERVER_REQUIRE: phase >= 3,
                        QUORUM_LEARNER_CONTEXT: "QuorumLearner", QUORUM_SERVER_CONTEXT: "QuorumServer"})
    if sec.zookeeper.enforce_auth and phase >= 3:  # once every client (brokers since step 2) logs in
        out.update({ENFORCE_AUTH: True, ENFORCE_AUTH_SCHEMES: "sasl"})
    return out


def zk_super_user(spec: ClusterSpec) -> str | None:
    """The ZooKeeper super user's principal (reconfig on a secured ensemble), or None: reconfig with skipACL."""
    sec = spec.security
    return ZK_SUPER_PRINCIPAL if sec.enabled and sec.zookeeper.sasl and len(spec.nodes) > 1 else None


def dynamic_server_line(spec: ClusterSpec, node: NodeSpec) -> str:
    """``host:peer:election:role;clientPort``, as ZooKeeper 3.5+ writes it in the dynamic config."""
    zk = spec.zookeeper
    return f"{spec.zk_host(node)}:{zk.peer_port}:{zk.election_port}:{node.role.value};{zk.client_port}"


def zoo_cfg_dynamic(spec: ClusterSpec) -> Props:
    """The dynamic config file: one ``server.N`` line per node (empty for a single node, which runs standalone)."""
    if len(spec.nodes) <= 1:
        return {}
    return {f"server.{n.id}": dynamic_server_line(spec, n) for n in sorted(spec.nodes, key=lambda n: n.id)}


def listeners(spec: ClusterSpec, node: NodeSpec) -> tuple[str, str]:
    k = spec.kafka
    ext = spec.kafka_host_port(node)
    bind = f"INTERNAL://0.0.0.0:{k.internal_port},EXTERNAL://0.0.0.0:{ext}"
    adv = f"INTERNAL://{spec.kafka_host(node)}:{k.internal_port},EXTERNAL://{spec.node_address(node)}:{ext}"
    if spec.migrating:
        # Kafka's way to secure a running cluster: the secured listeners open beside the PLAINTEXT ones, on
        # ports of their own, so that no listener changes its protocol while another broker still uses it.
        sint, sext = spec.secure_internal_port, spec.secure_host_port(node)
        bind += f",{SECURE_INTERNAL}://0.0.0.0:{sint},{SECURE_EXTERNAL}://0.0.0.0:{sext}"
        adv += (f",{SECURE_INTERNAL}://{spec.kafka_host(node)}:{sint}"
                f",{SECURE_EXTERNAL}://{spec.node_address(node)}:{sext}")
    return bind, adv


def server_properties(spec: ClusterSpec, node: NodeSpec) -> Props:
    k = spec.kafka
    bind, adv = listeners(spec, node)
    brokers = len(spec.brokers)
    base: dict[str, Scalar] = {
        BROKER_ID: node.id,
        LISTENERS: bind,
        ADVERTISED_LISTENERS: adv,
        INTER_BROKER_LISTENER: k.inter_broker_listener,
        PROTOCOL_MAP: ",".join(f"{n}:{p}" for n, p in sorted(k.listener_security_protocol_map.items())),
        LOG_DIRS: ",".join(k.log_dirs),
        NUM_PARTITIONS: k.num_partitions,
        DEFAULT_RF: k.default_replication_factor,
        OFFSETS_RF: k.offsets_topic_replication_factor,
        TXN_RF: k.transaction_state_log_replication_factor,
        TXN_MIN_ISR: max(1, min(k.min_insync_replicas, k.transaction_state_log_replication_factor - 1)),
        MIN_ISR: k.min_insync_replicas,
        DELETE_TOPIC: k.delete_topic_enable,
        AUTO_CREATE: k.auto_create_topics_enable,
        RETENTION_HOURS: k.log_retention_hours,
        RETENTION_BYTES: k.log_retention_bytes,
        SEGMENT_BYTES: k.log_segment_bytes,
        RETENTION_CHECK: k.log_retention_check_interval_ms,
        MESSAGE_MAX: k.message_max_bytes,
        REPLICA_FETCH_MAX: k.replica_fetch_max_bytes,
        REPLICA_FETCH_BACKOFF: k.replica_fetch_backoff_ms,
        ZK_CONNECT: spec.zookeeper_connect,
        ZK_SESSION_TIMEOUT: k.zookeeper_session_timeout_ms,
        ZK_CONNECT_TIMEOUT: k.zookeeper_session_timeout_ms,
        CONTROLLED_SHUTDOWN: True,
    }
    if contract.kraft_only(spec.versions.kafka):
        base[SHARE_STATE_RF] = k.offsets_topic_replication_factor
        base[SHARE_STATE_MIN_ISR] = max(1, min(k.min_insync_replicas, k.offsets_topic_replication_factor - 1))
    groups: dict[str, Scalar] = {}
    if brokers == 1:
        groups[TXN_MIN_ISR] = 1
        if contract.kraft_only(spec.versions.kafka):
            groups[SHARE_STATE_MIN_ISR] = 1
    if brokers <= 3:
        # Small clusters: start the first consumer group generation at once.
        groups[GROUP_INITIAL_DELAY] = 0
    groups.update(kafka_security(spec))
    return combine(base, groups, k.overrides, node.overrides.kafka)


def security_protocol(spec: ClusterSpec) -> str:
    """The protocol of both listeners on a secured cluster."""
    return "SASL_SSL" if spec.security.tls else "SASL_PLAINTEXT"


def kafka_security(spec: ClusterSpec) -> dict[str, Scalar]:
    """server.properties of the secured profile: SASL(_SSL) listeners, SCRAM, ACLs, znode ACLs, TLS stores.

    While ``security.migration`` is set, the step's subset (docs/runbooks/secure-running-cluster.md):
    1 secured listeners beside the PLAINTEXT ones; 2 brokers talk over them and log in to ZooKeeper, the
    authorizer on but open where no ACL exists; 3 the first listeners switch to SASL, znode ACLs on, no
    ACL means no access; 4 brokers back on INTERNAL; then the transitional listeners go.

    No secret is written here: the keystore password is read by the broker through
    FileConfigProvider from the container's private secrets dir.
    """
    sec = spec.security
    if not sec.enabled:
        return {}
    phase = spec.security_phase
    proto = security_protocol(spec)
    first = proto if phase >= 3 else "PLAINTEXT"  # INTERNAL and EXTERNAL (and a renamed inter-broker one)
    protocols = {name: first for name in {"INTERNAL", "EXTERNAL", spec.kafka.inter_broker_listener}}
    if spec.migrating:
        protocols |= {SECURE_INTERNAL: proto, SECURE_EXTERNAL: proto}
    out: dict[str, Scalar] = {
        PROTOCOL_MAP: ",".join(f"{name}:{p}" for name, p in sorted(protocols.items())),
        SASL_MECHANISMS: sec.sasl_mechanism,
        SASL_INTER_BROKER: sec.sasl_mechanism,
        SUPER_USERS: f"User:{sec.admin_user}",
    }
    if phase in (2, 3):
        out[INTER_BROKER_LISTENER] = SECURE_INTERNAL
    if sec.authorizer and phase >= 2:
        # Step 2 lets User:ANONYMOUS (the PLAINTEXT clients) keep their access until ACLs name the resource,
        # so that ACLs can be made before step 3 refuses everything no ACL allows.
        out.update({AUTHORIZER: "kafka.security.authorizer.AclAuthorizer", ALLOW_IF_NO_ACL: phase == 2})
    if sec.zookeeper.set_acl and phase >= 3:
        out[ZK_SET_ACL] = True
    if sec.tls:
        password = f"${{file:{contract.secret_path(contract.PASSWORDS_FILE)}:{KEYSTORE_PASSWORD_KEY}}}"
        out.update({
            CONFIG_PROVIDERS: "file",
            FILE_PROVIDER_CLASS: "org.apache.kafka.common.config.provider.FileConfigProvider",
            FILE_PROVIDER_PATHS: contract.SECRETS_DIR,
            SSL_KEYSTORE_TYPE: "PKCS12",
            SSL_KEYSTORE_LOCATION: contract.secret_path(contract.KEYSTORE_FILE),
            SSL_KEYSTORE_PASSWORD: password,
            SSL_KEY_PASSWORD: password,
            SSL_TRUSTSTORE_TYPE: "PEM",
            SSL_TRUSTSTORE_LOCATION: contract.secret_path(contract.CA_FILE),
            SSL_CLIENT_AUTH: "none",
            SSL_ENDPOINT_ID: "https",
        })
    return out


# Engine swarm: a node's task made again gets a new address under the same name, and while it is replaced its
# name resolves to nothing. The JVM caches a failed lookup for 10 s and a good one for 30 s by default, so a
# broker's or controller's first connection to a restarted node went to no address or to the old one (measured:
# the ZooKeeper-mode controller's UpdateMetadata reached a recreated broker 10 s after it registered, and
# producers meanwhile saw its empty metadata and failed their records). Kafka and its controllers therefore
# look names up again at each connection there.
SWARM_DNS_OPTIONS = ("-Dsun.net.inetaddr.ttl=1", "-Dsun.net.inetaddr.negative.ttl=0")


def jvm_options(spec: ClusterSpec, component: str) -> str:
    """Extra JVM flags of a broker or a ZooKeeper (paths and switches, never a secret): the secured profile's,
    the engine's, then the spec's own ``jvm_options``."""
    own = spec.kafka.jvm_options if component == "kafka" else spec.zookeeper.jvm_options
    return " ".join([*_security_jvm_options(spec, component), *_engine_jvm_options(spec, component), *own])


def controller_jvm_options(spec: ClusterSpec) -> str:
    """Extra JVM flags of a KRaft controller: the secured profile's login (the brokers' JAAS file, whose
    ``controller.KafkaServer`` section is the CONTROLLER listener's), the engine's, then the spec's
    ``kafka.controller_jvm_options`` (``kafka.jvm_options`` are the brokers' alone), and ``kafka.controller_heap``
    when set (after the image's default heap on controller-start's command line: the last -Xmx wins). Empty on a
    plain Compose cluster that names none."""
    heap = spec.kafka.controller_heap
    return " ".join([*_security_jvm_options(spec, "kafka"), *_engine_jvm_options(spec, "kafka"),
                     *spec.kafka.controller_jvm_options, *([f"-Xms{heap}", f"-Xmx{heap}"] if heap else [])])


def tool_env(spec: ClusterSpec) -> dict[str, str]:
    """The environment of a Kafka admin tool kctl runs in a node: the tools' heap and JIT (contract.TOOL_HEAP,
    TOOL_JIT), the node image's class-data sharing archive of the tools (TOOL_CDS; not on engine hosts, whose
    hosts run Kafka's own distribution) and the engine's flags, in place of the broker's KAFKA_HEAP_OPTS and
    KAFKA_OPTS that the node carries (its ZooKeeper login, kafka.jvm_options' GC tuning: a tool speaks to the
    INTERNAL listener, with --command-config on a secured cluster)."""
    cds = [contract.TOOL_CDS] if spec.engine in (Engine.compose, Engine.swarm) else []  # the node image's
    return {contract.ENV_KAFKA_HEAP: contract.TOOL_HEAP,
            contract.ENV_KAFKA_OPTS: " ".join([contract.TOOL_JIT, *cds, *_engine_jvm_options(spec, "kafka")])}


def _engine_jvm_options(spec: ClusterSpec, component: str) -> list[str]:
    return list(SWARM_DNS_OPTIONS) if spec.engine is Engine.swarm and component == "kafka" else []


def _security_jvm_options(spec: ClusterSpec, component: str) -> list[str]:
    if not spec.security.enabled:
        return []
    if component == "kafka":
        opts = [f"-Djava.security.auth.login.config={contract.secret_path(contract.KAFKA_JAAS_FILE)}",
                f"-D{DISALLOWED_LOGIN_MODULES}={DISALLOWED_LOGIN_MODULES_VALUE}",
                f"-D{OAUTHBEARER_ALLOWED_URLS}="]
        if not spec.security.zookeeper.sasl:
            opts.append("-Dzookeeper.sasl.client=false")
        return opts
    if not spec.security.zookeeper.sasl:
        return []
    return [f"-Djava.security.auth.login.config={contract.secret_path(contract.ZOOKEEPER_JAAS_FILE)}"]


JaasSection = tuple[str, str, list[str]]  # (section name, login module, its options as key="value")
DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _opt(key: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{key}="{escaped}"'


def kafka_jaas(spec: ClusterSpec, passwords: Mapping[str, str]) -> list[JaasSection]:
    """The broker's JAAS file: KafkaServer (its inter-broker SCRAM login) and Client (its ZooKeeper login).

    ``passwords`` maps principals to passwords (the admin user, ``kafka``); the result is a secret.
    """
    sec = spec.security
    out: list[JaasSection] = [("KafkaServer", SCRAM_MODULE, [_opt("username", sec.admin_user),
                                                            _opt("password", passwords[sec.admin_user])])]
    # Migration step 1 leaves the brokers' ZooKeeper sessions as they were: a ZooKeeper still being
    # restarted into SASL could not take the login yet (Kafka's docs: ZooKeeper first, then the brokers).
    if sec.zookeeper.sasl and spec.security_phase >= 2:
        out.append(("Client", DIGEST_MODULE, [_opt("username", ZK_BROKER_PRINCIPAL),
                                              _opt("password", passwords[ZK_BROKER_PRINCIPAL])]))
    if spec.kraft_phase != "zookeeper":
        # KRaft controllers (a migration, or finalized): the CONTROLLER listener's SASL/PLAIN, both sides of it,
        # the admin its one user (kctl.kraft.config); Kafka reads a listener's section as <listener>.KafkaServer.
        out.append(("controller.KafkaServer", PLAIN_MODULE, [
            _opt("username", sec.admin_user), _opt("password", passwords[sec.admin_user]),
            _opt(f"user_{sec.admin_user}", passwords[sec.admin_user])]))
    return out


def zookeeper_jaas(spec: ClusterSpec, passwords: Mapping[str, str]) -> list[JaasSection]:
    """ZooKeeper's JAAS file: Server (the brokers', kctl's and the super user's logins), QuorumServer and
    QuorumLearner."""
    users = [_opt(f"user_{p}", passwords[p]) for p in (ZK_BROKER_PRINCIPAL, ZK_KCTL_PRINCIPAL)]
    if zk_super_user(spec):
        users.append(_opt(f"user_{ZK_SUPER_PRINCIPAL}", passwords[ZK_SUPER_PRINCIPAL]))
    out: list[JaasSection] = [("Server", DIGEST_MODULE, users)]
    if len(spec.nodes) > 1:
        out.append(("QuorumServer", DIGEST_MODULE, [_opt(f"user_{ZK_QUORUM_PRINCIPAL}",
                                                         passwords[ZK_QUORUM_PRINCIPAL])]))
        out.append(("QuorumLearner", DIGEST_MODULE, [_opt("username", ZK_QUORUM_PRINCIPAL),
                                                     _opt("password", passwords[ZK_QUORUM_PRINCIPAL])]))
    return out


def admin_client(spec: ClusterSpec, password: str) -> Props:
    """Client properties of the admin user for Kafka's own tools run in a node (a secret file)."""
    sec = spec.security
    props: dict[str, Scalar] = {
        "security.protocol": security_protocol(spec),
        "sasl.mechanism": sec.sasl_mechanism,
        "sasl.jaas.config": f"{SCRAM_MODULE} required {_opt('username', sec.admin_user)}"
                            f" {_opt('password', password)};",
    }
    if sec.tls:
        props.update({SSL_TRUSTSTORE_TYPE: "PEM", SSL_TRUSTSTORE_LOCATION: contract.secret_path(contract.CA_FILE)})
    return combine(props)


def controller_client(spec: ClusterSpec, password: str) -> Props:
    """Client properties of the admin user for Kafka's tools that ask the KRaft controllers themselves
    (``--bootstrap-controller``): the CONTROLLER listener's SASL/PLAIN (a secret file)."""
    sec = spec.security
    props: dict[str, Scalar] = {
        "security.protocol": security_protocol(spec),
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f"{PLAIN_MODULE} required {_opt('username', sec.admin_user)}"
                            f" {_opt('password', password)};",
    }
    if sec.tls:
        props.update({SSL_TRUSTSTORE_TYPE: "PEM", SSL_TRUSTSTORE_LOCATION: contract.secret_path(contract.CA_FILE)})
    return combine(props)


def log4j(component: str) -> Props:
    """log4j 1.x (reload4j) configuration: a rolling file, as the seed's ROLLINGFILE."""
    appender = "ROLLINGFILE"
    a = f"log4j.appender.{appender}"
    props: dict[str, Scalar] = {
        "log4j.rootLogger": f"INFO, {appender}",
        a: "org.apache.log4j.RollingFileAppender",
        f"{a}.File": contract.container_log(component),
        f"{a}.MaxFileSize": "10MB",
        f"{a}.MaxBackupIndex": 10,
        f"{a}.layout": "org.apache.log4j.PatternLayout",
        f"{a}.layout.ConversionPattern": "[%d] %p %m (%c)%n",
    }
    if component in ("kafka", "controller"):
        props.update(
            {
                "log4j.logger.kafka": "INFO",
                "log4j.logger.org.apache.kafka": "INFO",
                "log4j.logger.org.apache.zookeeper": "INFO",
                "log4j.logger.kafka.request.logger": "WARN",
                "log4j.logger.state.change.logger": "INFO",
                "log4j.logger.kafka.controller": "INFO",
            }
        )
    return combine(props)


def swarm_deploy(spec: ClusterSpec, host: str) -> dict[str, object]:
    """The stack file's ``deploy:`` section of one container's service (engine swarm; {} for compose).

    One task per node, pinned by a node label kctl sets; ``dnsrr`` so ZooKeeper and Kafka resolve each
    peer's own task address (no virtual IP, which also needs ip_vs); one task at a time on an update,
    stopped before its successor starts (the same data volume); a task whose container exits is started
    again (a crashed process inside a running container is left to ``kctl status`` and ``kctl restart``,
    as with Compose: the stack has no healthcheck, see docs/multi-host.md).
    """
    if spec.engine is not Engine.swarm:
        return {}
    return {
        "mode": "replicated",
        "replicas": 1,
        "endpoint_mode": "dnsrr",
        "placement": {"constraints": [f"node.labels.{contract.swarm_placement_label(spec.name, host)} == true"]},
        "restart_policy": {"condition": "any", "delay": "5s"},
        "update_config": {"parallelism": 1, "order": "stop-first", "failure_action": "pause"},
        "rollback_config": {"parallelism": 1, "order": "stop-first"},
    }


def services_of(spec: ClusterSpec) -> list[tuple[str, NodeSpec, tuple[str, ...]]]:
    """(container host, node, services it runs), in node order."""
    out: list[tuple[str, NodeSpec, tuple[str, ...]]] = []
    if spec.topology is Topology.colocated:
        for n in spec.nodes:
            out.append((n.hostname, n, ("zookeeper", "kafka") if n.broker else ("zookeeper",)))
    else:
        out.extend((spec.zk_host(n), n, ("zookeeper",)) for n in spec.nodes)
        out.extend((spec.kafka_host(n), n, ("kafka",)) for n in spec.brokers)
    return out


def spark_placement(spec: ClusterSpec) -> tuple[str, list[str]]:
    """engine hosts with a ``spark:`` section: the host of the Spark master (the first node's) and of each worker
    (worker N on the N-th node's host; kctl.stream.spark_hosts)."""
    assert spec.spark is not None
    hosts = [h for h, _n, _s in services_of(spec)]
    return hosts[0], hosts[:spec.spark.workers]


def parse_properties(text: str) -> dict[str, str]:
    """The reverse of a rendered properties file: its ``key=value`` lines (kctl writes no continuations or escapes)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out
