"""What the renderer, the runtime, the testing API and the node image must agree on.

One module, no imports from the rest of kctl, so that every layer can use it.
The node image's shell scripts cannot import Python: the paths they use are
the ones below, and ``tests/unit/test_contract.py`` checks that the scripts
and this module still say the same thing.
"""

from __future__ import annotations

# ----- paths inside a node container ---------------------------------------------------
CONF_DIR = "/etc/kctl"  # rendered files, bind-mounted read-only from <state>/<host>/conf
KAFKA_BIN = "/opt/kafka/bin"  # the distribution's scripts in the node image (KAFKA_HOME/bin)
DATA_ROOT = "/var/opt/kctl"  # <state>/<host>/data
LOG_ROOT = "/var/log/kctl"  # <state>/<host>/logs

# The sub-directory of a container's state dir that each mount comes from.
HOST_CONF = "conf"
HOST_DATA = "data"
HOST_LOGS = "logs"

# Each service's main log, relative to LOG_ROOT (and to <state>/<host>/logs on the host).
LOG_FILES: dict[str, str] = {
    "zookeeper": "zookeeper/zookeeper.log",
    "kafka": "kafka/server.log",
    "controller": "controller/server.log",  # a node's KRaft controller (a migration to KRaft)
    "supervisor": "supervisord.log",
}

SERVICES = ("zookeeper", "kafka")
# In CONF_DIR of a cluster that left ZooKeeper (`kctl migrate kraft finalize`): the node's ZooKeeper program runs
# the image's `retired` instead of a ZooKeeper (its data stays), and the healthcheck asks no ZooKeeper.
ZOOKEEPER_RETIRED = "zookeeper-retired"
# supervisord's config file in the node image (the Dockerfile puts it there; it names the socket that its command line
# talks to: kctl.runtime.supervisor).
SUPERVISORD_CONF = "/etc/supervisor/supervisord.conf"
# Kafka's admin tools that kctl runs in a node (kctl.runtime.cluster.run_kafka_tool) are client JVMs of a few
# seconds, not the broker whose environment the node carries: Kafka's own heap for its tools, not the broker's
# -Xms/-Xmx, and the JIT stopped at C1 (a run ends before C2's compiles would pay off). kctl.model.properties.tool_env.
TOOL_HEAP = "-Xmx256m"
TOOL_JIT = "-XX:TieredStopAtLevel=1"
# ... and their classes from the node image's class-data sharing archive (made at image build by one tool's run:
# node/cds-archive), on the engines whose nodes run that image. A JVM that cannot map it (an image made before
# it) starts as without it, silently (-Xshare:auto, Java's default).
TOOL_CDS = "-XX:SharedArchiveFile=/opt/kafka/cds/tools.jsa"
HEALTHCHECK = "/usr/local/bin/kctl-healthcheck"
# Linux capabilities of a node container: NET_ADMIN lets `kctl drill` slow its own network down (tc netem).
CAP_ADD = ("NET_ADMIN",)


# KRaft storage is formatted only where kctl made it (kraft_storage in the image's jvm-common.sh): kctl leaves
# this permit in the node's data root when it makes the storage (a new node's data dir, a migration's controllers,
# `kctl node format-storage`); the service's first start on formatted storage takes it away. Without one, an
# empty metadata or log dir is refused: the service's program runs the image's `unformatted` (UNFORMATTED).
FORMAT_PERMIT_PREFIX = ".kctl-format-"


def format_permit(service: str) -> str:
    """The permit to format ``service``'s (controller, kafka) KRaft storage, in the container."""
    return f"{DATA_ROOT}/{FORMAT_PERMIT_PREFIX}{service}"


def hold_file(service: str) -> str:
    """While this file exists in a node, its supervisor does not start ``service`` again (jvm-common.sh)."""
    return f"/tmp/kctl-hold-{service}"


def starts_file(service: str) -> str:
    """The wrapper's record of ``service``'s last start, for its crash-loop back-off (jvm-common.sh)."""
    return f"/tmp/kctl-starts-{service}"


def container_log(service: str) -> str:
    """The log of ``service`` as a path inside the container."""
    return f"{LOG_ROOT}/{LOG_FILES[service]}"


# Secrets (keystore, CA certificate, passwords, JAAS files) of one container: <state>/secrets/<host>
# (mode 0700, files 0600) is mounted read-only on SECRETS_MOUNT; the entrypoint copies them to
# SECRETS_DIR, owned by the user the JVMs run as, mode 0600. Passwords live in files only.
HOST_SECRETS = "secrets"
SECRETS_MOUNT = "/etc/kctl-secrets"
SECRETS_DIR = "/run/kctl/secrets"
JVM_UID = 555  # the user the JVMs run as (the image's `logger`), owner of SECRETS_DIR's copies
KEYSTORE_FILE = "keystore.p12"
CA_FILE = "ca.pem"
# The CAs a client trusts (secrets/trust.pem): the cluster's CA, and during `kctl cert rotate-ca` the other one too.
TRUST_FILE = "trust.pem"
PASSWORDS_FILE = "passwords.properties"
KAFKA_JAAS_FILE = "kafka.jaas"
ZOOKEEPER_JAAS_FILE = "zookeeper.jaas"
ADMIN_CLIENT_FILE = "admin-client.properties"
CONTROLLER_CLIENT_FILE = "controller-client.properties"  # the admin's login to the KRaft controllers
# A cluster made on KRaft and secured (`kctl init --kraft --secure`): the arguments a controller's storage format
# adds to kafka-storage.sh (``--add-scram`` with the admin's SCRAM credential, KIP-900: the credential is in the
# bootstrap metadata before any broker starts), one a line, passed as ``@file`` (the tool's argparse reads
# arguments from a file): the password never is a process argument. A secret (kraft_storage in jvm-common.sh).
KRAFT_FORMAT_ARGS_FILE = "kraft-format.args"
# A KRaft controller's extra JVM flags (the secured profile's login; no secret), a rendered file under /etc/kctl.
CONTROLLER_JVM_FILE = "controller-jvm.options"


def secret_path(name: str) -> str:
    """A secret file as a path inside the container."""
    return f"{SECRETS_DIR}/{name}"


# ----- environment variables of a node container -----------------------------------------
ENV_CLUSTER = "KCTL_CLUSTER"
ENV_NODE = "KCTL_NODE"
ENV_SERVICES = "KCTL_SERVICES"
ENV_ZK_SERVERS = "KCTL_ZK_SERVERS"
ENV_ZK_HEAP = "ZK_HEAP_OPTS"
ENV_KAFKA_HEAP = "KAFKA_HEAP_OPTS"
ENV_JMX_PORT = "KAFKA_JMX_PORT"
# Extra JVM flags (paths and switches only, never a secret) of the broker and of ZooKeeper.
ENV_KAFKA_OPTS = "KAFKA_OPTS"
ENV_ZK_OPTS = "ZK_OPTS"
# The user whose SCRAM credential the broker's start script writes to ZooKeeper (a name, not a secret).
ENV_SCRAM_USER = "KCTL_SCRAM_USER"
# monitoring.enabled: the port a broker's JMX exporter (a Java agent of the broker's JVM only, not of the tools
# run in the container) serves /metrics on, with its rules in JMX_EXPORTER_CONFIG (kafka-start).
ENV_JMX_EXPORTER_PORT = "KCTL_JMX_EXPORTER_PORT"
JMX_EXPORTER_CONFIG = "jmx-exporter.yaml"  # in CONF_DIR
# The exporters' jars in the node image: the JMX exporter agent, and ZooKeeper's Prometheus metrics provider
# with what it needs beyond Kafka's libs/ (appended to ZooKeeper's class path by zookeeper-start).
MONITORING_DIR = "/opt/kctl/monitoring"
JMX_EXPORTER_JAR = f"{MONITORING_DIR}/jmx_prometheus_javaagent.jar"
ZOOKEEPER_METRICS_LIBS = f"{MONITORING_DIR}/zookeeper"

# ----- kctl.yaml's Spark cluster (kctl.stream.spark on compose, spark_swarm, spark_hosts) ---------------
SPARK_MASTER = "spark-master"  # the master's service, unit and log name; workers are spark-worker-N
SPARK_MASTER_PORT = 7077
SPARK_MASTER_UI = 8080  # inside a container (published on spark.ui_port)
SPARK_WORKER_UI = 8081  # inside a container (published on spark.ui_port + N)
SPARK_CONF_DIR = "/etc/kctl-spark"  # spark-defaults.conf
SPARK_WORK_DIR = "/var/opt/kctl/spark"  # the master's recovery state, a worker's work dir

# ----- labels ------------------------------------------------------------------------------
LABEL_CLUSTER = "io.kctl.cluster"
LABEL_NODE = "io.kctl.node"
LABEL_NODE_ID = "io.kctl.node-id"
LABEL_SERVICE = "io.kctl.service"
LABEL_SERVICES = "io.kctl.services"
LABEL_HASH = "io.kctl.config-hash"
LABEL_VERSION = "io.kctl.version"
# The absolute state dir a container belongs to: two kctl.yaml with one cluster name must not share containers.
LABEL_STATE_DIR = "io.kctl.state-dir"
# What Compose itself records; the fallback for containers created before LABEL_STATE_DIR existed.
LABEL_COMPOSE_WORKING_DIR = "com.docker.compose.project.working_dir"

# engine swarm: the Swarm node label that pins a kctl node's service, "<prefix>.<cluster>.<container host>=true"
# (set by `kctl swarm label` and by `kctl up`), and the stack label Docker puts on what a stack deploy made.
LABEL_SWARM_PLACEMENT_PREFIX = "io.kctl.place"
LABEL_STACK_NAMESPACE = "com.docker.stack.namespace"
LABEL_SWARM_SERVICE_NAME = "com.docker.swarm.service.name"
LABEL_SPARK_ROLE = "io.kctl.spark-role"  # on a Spark container: master, worker or driver


def swarm_placement_label(cluster: str, host: str) -> str:
    return f"{LABEL_SWARM_PLACEMENT_PREFIX}.{cluster}.{host}"


LABEL_TESTING = "io.kctl.testing"
LABEL_TESTING_OWNER = "io.kctl.testing.owner"  # "<hostname>:<pid>" of the process that started it
LABEL_TESTING_REUSE = "io.kctl.testing.reuse"

LABEL_IMAGE = "io.kctl.image"
LABEL_KAFKA_VERSION = "io.kctl.kafka-version"
LABEL_ZOOKEEPER_VERSION = "io.kctl.zookeeper-version"
LABEL_DIST_SOURCE = "io.kctl.dist-source"
LABEL_DIST_IDENTITY = "io.kctl.dist-identity"
LABEL_RECIPE_HASH = "io.kctl.recipe-hash"
LABEL_BUILD_HASH = "io.kctl.build-hash"
LABEL_BASE_IMAGE = "io.kctl.base-image"

# ----- files in a cluster's state dir ---------------------------------------------------------
# Kafka's cluster id (ZooKeeper /cluster/id, reported by every broker in Metadata) recorded at `kctl up`.
IDENTITY_FILE = "identity.json"
# The config hash per container that `kctl apply` last brought its processes to (without making the
# container again, so its config-hash label still names the render it was created from).
COMPOSE_FILE = "compose.yaml"  # the state dir's Compose (or stack) file
APPLIED_FILE = "applied.json"
# Held while a rolling restart or an apply runs (flock: released when the holding process exits).
ROLL_LOCK_FILE = "restart.lock"
# Written while a rolling restart (`kctl restart`, `kctl apply`) has a service down: which ones, by which command,
# so that a roll killed between a stop and its start is put back by the next roll (kctl.roll.run.put_back_left).
ROLL_RECORD_FILE = "roll.json"
# The engine a cluster was deployed with when kctl.yaml does not say (`kctl up --engine swarm`), so that later
# commands on that state dir use it too; removed with the state dir (`kctl down --volumes`).
ENGINE_FILE = "engine"
# engine hosts: the id kctl gives a cluster the first time it installs it on hosts (before Kafka has a cluster id
# of its own), written on every host with the node's own id (HOST_IDENTITY_FILE): a host that holds another's
# is refused before anything is written or deleted there (kctl.runtime.engine.host_identity).
CLUSTER_UID_FILE = "cluster-uid"

# ----- image and versions ----------------------------------------------------------------------
IMAGE_REPO = "kctl/node"
DEFAULT_KAFKA_VERSION = "3.9.1"
DEFAULT_SCALA_VERSION = "2.13"

# The Kafka releases the image build produces, each with the ZooKeeper it ships in libs/ (and therefore runs
# here); "" for a release without ZooKeeper mode (4.0 on: a cluster on KRaft only, `kctl migrate kraft`).
# 4.3.1 is the newest whose MirrorMaker 2 (connect-mirror) Maven Central serves here (2026-11-27: 4.4.0's
# kafka_2.13 resolves, its connect-mirror does not).
ZOOKEEPER_VERSIONS: dict[str, str] = {
    "3.9.1": "3.8.4",
    "4.1.1": "",
    "4.3.1": "",
}


def release(kafka_version: str) -> tuple[int, int]:
    """A Kafka version's (major, minor): 3.9.1 -> (3, 9); a part that is not a number counts as 0."""
    parts = (kafka_version.split(".") + ["0"])[:2]
    return int(parts[0]) if parts[0].isdigit() else 0, int(parts[1]) if parts[1].isdigit() else 0


def kraft_only(kafka_version: str) -> bool:
    """Kafka 4.0 and later have no ZooKeeper mode."""
    return release(kafka_version) >= (4, 0)


def image_tag(kafka_version: str = DEFAULT_KAFKA_VERSION) -> str:
    return f"{IMAGE_REPO}:{kafka_version}"


# ----- ZooKeeper four-letter words ---------------------------------------------------------------
FOUR_LETTER_WORDS = (
    "conf", "cons", "crst", "dirs", "dump", "envi", "isro", "mntr",
    "ruok", "srst", "srvr", "stat", "wchc", "wchp", "wchs",
)

# ----- engine hosts: a node's layout on a host of its own (kctl bundle; docs/bare-metal.md) --------------
# The conf, data and log paths are the container's (CONF_DIR, DATA_ROOT, LOG_ROOT), so that one rendered
# server.properties or zoo.cfg holds for both; what only a host has lives under HOST_ROOT.
HOST_ROOT = "/opt/kctl"
HOST_BIN = f"{HOST_ROOT}/bin"  # the node wrappers (zookeeper-start, kafka-start, jvm-common.sh, kctl-prepare)
HOST_KAFKA_HOME = f"{HOST_ROOT}/kafka"  # a symlink to the installed distribution, kafka_<scala>-<version>
HOST_ENV_FILE = f"{CONF_DIR}/kctl.env"  # the units' EnvironmentFile: heap, JVM options (never a secret)
HOST_SECRETS_STORE = f"{CONF_DIR}/secrets"  # 0700, files 0400, owned by SERVICE_USER; copied to SECRETS_DIR
HOST_UNIT_DIR = "/etc/systemd/system"
SERVICE_USER = "logger"  # the seed's service user (uid and gid 555 where free), as in the node image
SUPERVISOR_ENV = "KCTL_SUPERVISOR"  # "systemd" on a host: the wrappers leave restarts to systemd
HOST_IDENTITY_FILE = f"{CONF_DIR}/identity"  # which cluster (its uid) and node this host is (install.sh)
# A file per service whose running process predates the files install.sh has just installed for it (install.sh
# writes it, kctl-prepare removes it at the service's next start; /run: a reboot restarts everything anyway):
# what `kctl up` restarts through the roll.
HOST_PENDING_DIR = "/run/kctl/restart-pending"
DATA_MARKER = ".kctl-identity"  # a copy of it in each data directory kctl-prepare makes (and the data root)


def unit_name(service: str) -> str:
    """A service's systemd unit on a host of engine hosts."""
    return f"kctl-{service}.service"
