"""confluent-kafka clients bound to the cluster's EXTERNAL listeners on 127.0.0.1.

The one place that builds AdminClient, Producer and Consumer, each for a :class:`Target` (the cluster's
spec, bootstrap servers, user and security settings, made once: on a secured cluster SASL_SSL with the
admin user or ``user``, :mod:`kctl.security.store`; a mirror's foreign source with the settings of its
``source.client``, :func:`mirror_source`) with quiet librdkafka logging, timeouts and the Java client's
partitioner; and the one place that turns a KafkaException into a KctlError for the operator.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kctl.errors import ClusterError, KctlError, TimeoutReached
from kctl.model.spec import ClusterSpec, MirrorSpec
from kctl.security import store
from kctl.wait import wait_until

HEALTH_TOPIC = "__kctl_health"

REQUEST_TIMEOUT = 15.0  # admin requests: create, describe, alter, delete
CONNECT_TIMEOUT = 5.0  # "is anybody there?": metadata before a command does its work
MESSAGE_TIMEOUT = 30.0  # how long a produced record may wait for its acknowledgement

# The Java client's partitioner for keyed records (murmur2 of the key bytes; random
# spread for null keys), so that a key lands in the same partition whichever client
# wrote it: kafka-console-producer, a Java service, `kctl produce` or `kctl gen logs`.
PARTITIONER = "murmur2_random"


@dataclass(frozen=True)
class Target:
    """One Kafka cluster as kctl's clients reach it: what every client of this module is made for.

    ``spec``: the cluster's kctl.yaml (None for a cluster kctl does not run; an empty ``ClusterSpec()`` for
    ``--bootstrap-server`` without a kctl.yaml); ``bootstrap_servers``: where the clients start; ``user``: whose
    login (None: kctl's admin user); ``name``: a foreign target's name in messages; ``settings``: librdkafka's
    security settings when they are given (a foreign target), else None: :attr:`security` makes them from the
    spec. They hold a password: never in the repr.
    """

    spec: ClusterSpec | None
    bootstrap_servers: str
    user: str | None = None
    name: str = ""
    settings: dict[str, str] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, spec: ClusterSpec | None, bootstrap: str | None = None, user: str | None = None) -> Target:
        """A kctl cluster through ``bootstrap`` (default: the spec's EXTERNAL listeners) as ``user`` (default: the
        admin user)."""
        return cls(spec, _servers(bootstrap or (spec.bootstrap_servers if spec is not None else "")), user)

    @classmethod
    def foreign(cls, bootstrap: str, security: dict[str, str], *, name: str = "") -> Target:
        """Bootstrap servers with the settings given, not a kctl.yaml's: a mirror's source that kctl does not
        run (:func:`mirror_source`), or one broker of a cluster whose settings the caller holds."""
        return cls(None, _servers(bootstrap), None, name, dict(security))

    @cached_property
    def security(self) -> dict[str, str]:
        """librdkafka's security settings: those given, else on a secured kctl cluster those of kctl's own clients
        (:func:`kctl.security.store.client_settings` with ``own``: {} until the migration step from which kctl
        logs in) for the user; {} for a plain cluster. Made once, when the first client is made (a missing
        password is said then), and kept."""
        if self.settings is not None:
            return self.settings
        return store.client_settings(self.spec, self.user, own=True) if self.spec is not None else {}

    @property
    def kctl_spec(self) -> ClusterSpec:
        """The spec, for what a command does beside its clients (a tool run in a container, ZooKeeper, the
        state dir); a foreign target has none: a KctlError."""
        if self.spec is None:
            raise KctlError(f"{self.name or self.bootstrap_servers} is no cluster of a kctl.yaml",
                            hint="run the command where its kctl.yaml is (-f)")
        return self.spec

    def at(self, bootstrap: str) -> Target:
        """The same cluster and login through other bootstrap servers (one broker's own address)."""
        return dataclasses.replace(self, bootstrap_servers=_servers(bootstrap), settings=self.security)

    def as_user(self, user: str | None) -> Target:
        """This kctl cluster with ``user``'s login (None: this target as it is)."""
        if user is None or user == self.user:
            return self
        return Target.of(self.spec, self.bootstrap_servers, user)


def _servers(bootstrap: str) -> str:
    if not bootstrap:
        raise KctlError("no bootstrap servers", hint="pass --bootstrap-server(s), or run where kctl.yaml exists")
    return bootstrap


def mirror_source(mirror: MirrorSpec, spec_path: Path) -> Target:
    """kctl's target for a mirror's source that kctl does not run, from its ``source.bootstrap_servers`` and
    ``source.client`` (files relative to the kctl.yaml at ``spec_path``): the one builder of a foreign source's
    librdkafka settings. The password file must be readable by its owner alone and hold one line; the CA file
    a PEM certificate."""
    assert mirror.source.bootstrap_servers is not None
    c = mirror.source.client
    name = f"mirror {mirror.name}'s source"
    if c is None or c.security_protocol == "PLAINTEXT":
        return Target.foreign(mirror.source.bootstrap_servers, {}, name=name)
    base = spec_path.resolve().parent
    security: dict[str, str] = {"security.protocol": c.security_protocol}
    if c.password_file is not None:
        path = source_file(base, c.password_file)
        password = read_source_file(mirror, path, "password_file").decode("utf-8", "replace").strip()
        if path.stat().st_mode & 0o077:
            raise KctlError(f"mirror {mirror.name}: its password file {path} can be read by others",
                            hint=f"chmod 600 {path}")
        if not password or any(ch in password for ch in '"\\\r\n'):
            raise KctlError(f"mirror {mirror.name}: the password in {path} is empty or holds a quote, a"
                            " backslash or a line break", hint="one line, the password alone")
        security |= {"sasl.mechanisms": c.sasl_mechanism, "sasl.username": c.username or "",
                     "sasl.password": password}
    if c.ca_file is not None:
        path = source_file(base, c.ca_file)
        if b"-----BEGIN CERTIFICATE-----" not in read_source_file(mirror, path, "ca_file"):
            raise KctlError(f"mirror {mirror.name}: {path} holds no PEM certificate", hint="source.client.ca_file")
        security["ssl.ca.location"] = str(path)
    return Target.foreign(mirror.source.bootstrap_servers, security, name=name)


def source_file(base: Path, name: str) -> Path:
    """A file named in a mirror's ``source.client``: absolute, or relative to the kctl.yaml's directory ``base``."""
    p = Path(name).expanduser()
    return p if p.is_absolute() else base / p


def read_source_file(mirror: MirrorSpec, path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KctlError(f"mirror {mirror.name}: cannot read its {what} {path}: {exc.strerror}",
                        hint=f"mirrors[].source.client.{what} is relative to this kctl.yaml") from None


def base_config(target: Target) -> dict[str, Any]:
    """Bootstrap, quiet logging and the target's security settings."""
    return {"bootstrap.servers": target.bootstrap_servers, "log_level": 0, "logger": _quiet_logger(),
            **target.security}


def _quiet_logger() -> Any:
    # librdkafka logs connection errors on its own; the operator gets one KctlError instead.
    import logging

    log = logging.getLogger("kctl.librdkafka")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def admin(target: Target, **extra: Any) -> Any:
    """An AdminClient; ``extra`` (librdkafka settings, ``error_cb``) wins."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({**base_config(target), "socket.timeout.ms": int(REQUEST_TIMEOUT * 1000), **extra})


def producer(target: Target, *, acks: str = "all", timeout: float = MESSAGE_TIMEOUT, **extra: Any) -> Any:
    """An idempotent (with acks=all) producer with the Java client's partitioner; ``extra`` wins."""
    from confluent_kafka import Producer

    conf: dict[str, Any] = {
        **base_config(target),
        "acks": acks,
        # Retries never reorder or duplicate a key's records (needs acks=all).
        "enable.idempotence": acks in ("all", "-1"),
        "partitioner": PARTITIONER,
        "linger.ms": 5,
        "message.timeout.ms": int(timeout * 1000),
        **extra,
    }
    return Producer(conf)


def consumer(target: Target, *, group: str | None = None, **extra: Any) -> Any:
    """A consumer that never commits on its own: callers commit exactly what they processed."""
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {
        **base_config(target),
        # librdkafka wants a group id even for assign(); a random one joins nothing and commits nothing.
        "group.id": group or f"kctl-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        **extra,
    }
    return Consumer(conf)


# ----- errors ------------------------------------------------------------------------------------

_TIMEOUTS = ("_TIMED_OUT", "REQUEST_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN")


def error_code(exc: BaseException) -> tuple[str, str]:
    """(code name, message) of a KafkaException or KafkaError; ('', str(exc)) for anything else."""
    err = exc.args[0] if exc.args else None
    if err is not None and callable(getattr(err, "name", None)) and callable(getattr(err, "str", None)):
        return str(err.name()), str(err.str())
    return "", str(exc)


def topic_missing(topic: str) -> KctlError:
    return KctlError(f"topic {topic!r} does not exist", hint="`kctl topic list` shows the topics")


def group_missing(group: str) -> KctlError:
    return KctlError(f"consumer group {group!r} does not exist", hint="`kctl group list` shows the groups")


def kafka_error(exc: BaseException, what: str, *, topic: str | None = None, group: str | None = None) -> KctlError:
    """The one translation of a Kafka error for the operator.

    ``what`` says what was being done or to whom ("topic t1", "cannot delete 'g1'");
    ``topic``/``group`` name the resource so a missing one gets its own message.
    """
    code, msg = error_code(exc)
    if code in ("UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"):
        return topic_missing(topic) if topic else KctlError(f"{what} does not exist",
                                                            hint="`kctl topic list` shows the topics")
    if code == "GROUP_ID_NOT_FOUND" and group:
        return group_missing(group)
    if code == "TOPIC_ALREADY_EXISTS":
        return KctlError(f"topic {topic or what!r} already exists",
                         hint="pass --if-not-exists to accept an existing topic")
    if code == "INVALID_REPLICATION_FACTOR":
        return KctlError(f"{what}: {msg}", hint="the replication factor cannot exceed the live brokers")
    if code == "TOPIC_DELETION_DISABLED":
        return KctlError(f"{what}: {msg}", hint="set kafka.delete_topic_enable: true in kctl.yaml")
    if code == "NON_EMPTY_GROUP":
        return KctlError(f"group {group or what!r} still has active members", hint="stop its consumers first")
    if code in ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        return KctlError(f"{what}: not authorized ({code}: {msg})",
                         hint="`kctl acl list` shows the ACLs; `kctl acl add` grants one")
    if code in ("SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION", "_SSL"):
        return KctlError(f"{what}: authentication failed ({msg})",
                         hint="`kctl client-config` prints the settings that work")
    if code in _TIMEOUTS:
        return ClusterError(f"{what}: the cluster did not answer in time ({msg})",
                            hint="is the cluster up? `kctl status`; `kctl up` starts it")
    return KctlError(f"{what}: {code + ': ' if code else ''}{msg}")


# ----- metadata ---------------------------------------------------------------------------------


def require_reachable(target: Target, timeout: float = CONNECT_TIMEOUT, client: Any = None) -> Any:
    """Cluster metadata (all topics, never auto-creating one), or a ClusterError when no broker answers."""
    from confluent_kafka import KafkaException

    c = client if client is not None else admin(target)
    try:
        return c.list_topics(timeout=timeout)
    except KafkaException:
        raise ClusterError(f"Kafka cluster at {target.bootstrap_servers} is unreachable: no broker answered"
                           f" in {timeout:.0f}s", hint="is the cluster up? `kctl status`; `kctl up` starts it;"
                                                      " or pass --bootstrap-server(s)") from None


def require_topics(target: Target, topics: list[str], timeout: float = CONNECT_TIMEOUT, client: Any = None,
                   metadata: Any = None) -> dict[str, int]:
    """{topic: partition count}; a ClusterError naming the missing topics and the existing ones.

    A topic the controller has just created reaches each broker's metadata a moment
    later, so a missing topic gets a short grace period before it is called missing.
    ``metadata``: what :func:`require_reachable` gave the caller's ``client`` just before (not asked again).
    """
    c = client if client is not None else admin(target)
    md = metadata if metadata is not None else require_reachable(target, timeout, client=c)
    found = {t: len(md.topics[t].partitions) for t in topics if t in md.topics and md.topics[t].error is None}
    for t in topics:
        if t not in found:
            try:
                found[t] = len(wait_for_topic(c, t, timeout=3.0).partitions)
            except TimeoutReached:
                pass  # still unknown after the grace period: it is missing, said below
    missing = [t for t in topics if t not in found]
    if missing:
        have = sorted(t for t in md.topics if not t.startswith("__"))
        raise ClusterError(
            f"topic(s) not found on {target.bootstrap_servers}: {', '.join(missing)}" if len(missing) > 1
            else f"topic {missing[0]!r} does not exist",
            hint=f"create it: `kctl topic create {missing[0]} --partitions 3 --replication-factor 3`; "
                 f"existing topics: {', '.join(have) or 'none'}")
    return found


def wait_for_topic(client: Any, name: str, partitions: int | None = None, timeout: float = 10.0) -> Any:
    """Poll metadata until ``name`` is known with a leader for every partition; its metadata.

    A topic the controller has just created reaches each broker's metadata cache a
    moment later, so the next command may ask a broker that does not know it yet.
    Asks for all topics: a metadata request naming a missing topic may auto-create it.
    TimeoutReached (saying what the metadata last showed) when ``timeout`` passes first.
    """
    found: list[Any] = []

    def probe() -> tuple[bool, str]:
        t = client.list_topics(timeout=max(0.5, min(5.0, timeout))).topics.get(name)
        if t is None:
            return False, f"no topic {name} in the metadata"
        if t.error is not None:
            return False, f"topic {name}: {t.error}"
        leaders = {p: t.partitions[p].leader for p in sorted(t.partitions)}
        if partitions is not None and len(leaders) != partitions:
            return False, f"{len(leaders)} of {partitions} partitions known"
        if not leaders or any(v < 0 for v in leaders.values()):
            return False, f"partition leaders {leaders}"
        found[:] = [t]
        return True, f"{len(leaders)} partition(s), each with a leader"

    wait_until(f"topic {name} known with a leader for every partition", probe, timeout, poll=0.2,
               hint=f"`kctl topic describe {name}`; is the cluster healthy? `kctl status`")
    return found[0]


# ----- health ---------------------------------------------------------------------------------------


def round_trip(spec: ClusterSpec, timeout: float = 10.0) -> tuple[bool, str]:
    """Produce one record with acks=all to the health topic and read it back by offset."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    brokers = len(spec.brokers)
    target = Target.of(spec)
    a = admin(target)
    md = a.list_topics(timeout=timeout)
    if HEALTH_TOPIC not in md.topics:
        rf = min(3, brokers)
        futs = a.create_topics([NewTopic(HEALTH_TOPIC, num_partitions=1, replication_factor=rf,
                                         config={"min.insync.replicas": str(max(1, rf - 1)),
                                                 "retention.ms": "3600000"})])
        try:
            futs[HEALTH_TOPIC].result(timeout)
        except KafkaException as exc:
            if error_code(exc)[0] != "TOPIC_ALREADY_EXISTS":
                return False, f"cannot create {HEALTH_TOPIC}: {exc}"
    token = uuid.uuid4().hex.encode()
    delivered: list[Any] = []
    # Not idempotent: one record read back by its offset needs no producer id, and the id's InitProducerId
    # round trip cost 0.7 s of every check (1.06 s against 0.35 s to the first acknowledgement, measured).
    extra: dict[str, Any] = {"enable.idempotence": False}
    p = producer(target, timeout=timeout, **extra)
    p.produce(HEALTH_TOPIC, value=token, on_delivery=lambda err, msg: delivered.append((err, msg)))
    p.flush(timeout)
    if not delivered:
        return False, "produce: no delivery report yet"
    err, msg = delivered[0]
    if err is not None:
        return False, f"produce failed: {err}"
    c = consumer(target, group=f"kctl-health-{uuid.uuid4().hex[:8]}")
    try:
        c.assign([TopicPartition(HEALTH_TOPIC, msg.partition(), msg.offset())])
        got = c.consume(num_messages=1, timeout=timeout)
    finally:
        c.close()
    if got and got[0].error() is None and got[0].value() == token:
        return True, f"produced and consumed offset {msg.offset()} via {target.bootstrap_servers}"
    if got and got[0].error() is not None:
        return False, f"consume failed: {got[0].error()}"
    return False, "consume: the record did not come back yet"
