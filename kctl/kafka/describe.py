"""What health, the identity check, the roll's gates and the drills read of Kafka, through librdkafka.

One answer per broker asked: the live brokers and every partition's leader, replicas and ISR from
its Metadata (``list_topics``), and the cluster id and controller from DescribeCluster
(``describe_cluster``), both through an AdminClient made by the client factory
(:func:`kctl.kafka.client.admin`) with the cluster's security settings
(:func:`kctl.security.store.client_settings`).

Which broker answers. ``ClusterMetadata.orig_broker_id`` names it (-1: the client's bootstrap
connection, before it knew the brokers by id), and :attr:`Metadata.broker` / :attr:`Metadata.answered_by`
carry it. A client bootstrapped with one broker's address does not always ask that broker: checked on
a running three-node cluster with the librdkafka that confluent-kafka 2.16 bundles, a fresh client's
first list_topics() was answered by the addressed broker about half the time and by another broker
otherwise (librdkafka drops its bootstrap connection once it knows the brokers by id, then asks any).
So :func:`fetch_each`, which needs each broker's own view, asks through a client bootstrapped with
that broker's address and keeps the answer only when that broker gave it, else asks again with a
fresh client until its budget runs out (tests/integration/test_health.py checks that every view is
its broker's own). :func:`fetch_any` asks the first address, and every other one too when that has
not answered within :data:`HEDGE` (or failed), and keeps the first answer, whoever gave it: a paused
broker costs 0.15 s, not the timeout, and a healthy cluster one client, not one per broker.

DescribeCluster goes to the controller (librdkafka routes it there, whichever broker the client was
bootstrapped with). It is asked alongside the Metadata request, and its answer is used when it
comes within the budget and at most :data:`DESCRIBE_WAIT` (or as long as the Metadata answer took)
after the Metadata answer; when the controller is paused or gone it does not, and the answering
broker's own Metadata (which carries a cluster id and the controller it knows) stands in, so a
paused controller costs half a second, not the timeout. :func:`fetch_each` keeps each broker's
own view of the controller: readiness waits until they agree.

Bounded in time. librdkafka's calls take a timeout, but destroying a client waits for its broker
threads, which can outlast any timeout while a broker is paused mid-request. Each ask therefore
runs in a daemon thread that owns its client (created, asked and destroyed there); the caller
waits for the answer at most ``timeout`` and never for the destruction.

Ended before the process ends. A client still alive while the interpreter finalizes crashes it
(seen as a SIGSEGV after a successful ``kctl up`` on a secured cluster: librdkafka's broker threads
were still using TLS while the process's exit handlers tore OpenSSL down, the hedged asks of the
last fetch_any being still under way). :func:`settle` waits for the asks to end. It runs as a Python
exit handler, so every process that asks (the CLI, a test session, a program using the testing API)
waits for them (at most :data:`SETTLE_AT_EXIT`) before the C library's exit handlers run; the CLI also
calls it before it exits, for at most ``kctl.cli.main.SETTLE``, and leaves with ``os._exit`` when an ask outlasts
it (an ask to a stopped or paused broker, which runs on to its timeout), so no exit handler runs under a live
client. Errors are delivered without their traceback, which
would keep the asking frame, and its client, alive in the caller.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kctl.kafka import client as kclient
from kctl.kafka.client import Target, error_code
from kctl.wait import Deadline, since

# librdkafka's codes for refused credentials and failed TLS (certificate, handshake).
AUTH_CODES = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL")
GRACE = 0.5  # what the caller waits beyond ``timeout`` for a thread that is about to answer
HEDGE = 0.15  # fetch_any asks the other brokers when the first has not answered in this long
DESCRIBE_WAIT = 0.5  # at least this long for DescribeCluster once the Metadata answer is in

SETTLE_AT_EXIT = 2.0  # what the exit handler waits, at most, for the asks still running

_asks: list[threading.Thread] = []  # the asks and watchers started, until settle() has seen them end
_asks_lock = threading.Lock()


class MetadataError(OSError):
    """No broker answered in time, or the answer could not be read."""


class AuthError(MetadataError):
    """The broker refused the credentials, or TLS failed."""


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas) or self.leader < 0


@dataclass(frozen=True)
class Metadata:
    brokers: tuple[int, ...]
    controller: int | None
    partitions: tuple[Partition, ...] = field(default=())
    answered_by: str = ""  # host:port of the broker that answered
    cluster_id: str | None = None
    broker: int | None = None  # the id of the broker that answered (librdkafka's orig_broker_id)


def from_results(md: Any, cluster: Any = None, address: str = "") -> Metadata:
    """Map librdkafka's answers (a ClusterMetadata, and a DescribeClusterResult or None) to a Metadata.

    Partitions whose topic or partition carries an error are kept (an offline partition has leader -1);
    a topic without partitions adds none.
    """
    parts = tuple(
        Partition(name, p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
        for name, t in sorted(md.topics.items())
        for p in sorted(t.partitions.values(), key=lambda p: p.id))
    if cluster is not None:
        controller = cluster.controller.id if cluster.controller is not None else -1
        cluster_id = cluster.cluster_id
    else:
        controller, cluster_id = md.controller_id, md.cluster_id
    broker, answered_by = _answerer(md, address)
    return Metadata(tuple(sorted(md.brokers)), controller if controller is not None and controller >= 0 else None,
                    parts, answered_by, cluster_id or None, broker)


def _answerer(md: Any, address: str) -> tuple[int | None, str]:
    """(broker id, host:port) of the broker that answered: librdkafka's orig_broker_id, or -1 when its
    bootstrap connection (to ``address``) answered, before it knew the brokers by id."""
    by_address = {f"{b.host}:{b.port}": i for i, b in md.brokers.items()}
    oid = md.orig_broker_id
    if oid is not None and oid >= 0:
        b = md.brokers.get(oid)
        return oid, f"{b.host}:{b.port}" if b is not None else address
    return by_address.get(address), address


def addresses(bootstrap: str) -> list[str]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append(f"{host or '127.0.0.1'}:{int(port)}")
    return out


def _failure(address: str, errors: list[Any]) -> MetadataError | None:
    """What librdkafka reported of the connection (its error_cb): refused credentials or TLS, or every broker
    down (a refused connection, or a timed-out one); None while neither happened."""
    refused = [e for e in errors if e.name() in AUTH_CODES]
    if refused:
        return AuthError(f"{address}: {refused[0].str()}")
    if any(e.name() == "_ALL_BROKERS_DOWN" for e in errors):
        why = next((e.str() for e in errors if e.name() == "_TRANSPORT"), "no connection")
        return MetadataError(f"{address}: no metadata answer ({why.split(': ', 1)[-1]})")
    return None


def _ask(address: str, timeout: float, settings: dict[str, str], describe: bool, own: bool, keep: list[Any],
         deliver: Callable[[Metadata | MetadataError], None]) -> Metadata:
    """One answer through a client bootstrapped with ``address``; with ``own``, only that broker's own.

    The clients go into ``keep``, whose owner destroys them after passing the answer on.
    list_topics() waits its whole timeout even when the connection is refused at once; librdkafka says so
    sooner through error_cb, served by poll(), so a watcher polls and ``deliver``s that failure early.
    """
    from confluent_kafka import KafkaException

    started = time.monotonic()
    deadline = Deadline(at=started + timeout)
    others: list[str] = []
    while True:
        errors: list[Any] = []  # this attempt's client's (an earlier one's "all brokers down" is not its own)
        # With ``own``, an attempt that librdkafka sends to another broker, a paused one maybe, must leave
        # time for the next: each gets a third of the budget.
        remaining = max(0.1, deadline.left())
        if own:
            remaining = min(remaining, max(0.3, timeout / 3))
        ms = int(remaining * 1000)
        # librdkafka's floors: socket.timeout.ms 10, socket.connection.setup.timeout.ms 1000 (the calls'
        # own timeouts bound an attempt anyway).
        bounded: dict[str, Any] = {"socket.timeout.ms": ms, "socket.connection.setup.timeout.ms": max(1000, ms),
                                   "reconnect.backoff.max.ms": 500, "error_cb": errors.append}
        client = kclient.admin(Target.foreign(address, settings), **bounded)
        keep.append(client)
        asked = threading.Event()

        def watch(client: Any = client, asked: threading.Event = asked, errors: list[Any] = errors) -> None:
            while not asked.is_set() and not deadline.passed():
                client.poll(0.05)
                failed = _failure(address, errors)
                if failed is not None:
                    deliver(failed)
                    return

        _spawn(watch, f"kctl-describe-watch-{address}")
        cluster_f = client.describe_cluster(request_timeout=remaining) if describe else None
        try:
            md = client.list_topics(timeout=remaining)
        except KafkaException as exc:
            asked.set()
            client.poll(0)  # serves what error_cb has not had yet
            failed = _failure(address, errors)
            if failed is not None:
                raise failed from None
            if own and not deadline.passed(margin=0.3):
                continue
            if error_code(exc)[0] in AUTH_CODES:
                raise AuthError(f"{address}: {error_code(exc)[1]}") from None
            raise MetadataError(f"{address}: no metadata answer in {timeout:.1f}s ({error_code(exc)[1]})") from None
        asked.set()
        _, answered_by = _answerer(md, address)
        if not own or answered_by == address:
            break
        # librdkafka drops its bootstrap connection once it knows the brokers by id, and may then ask
        # another broker: a fresh client asks again, until the addressed broker answers for itself.
        others.append(answered_by)
        if deadline.passed(margin=0.05):
            raise MetadataError(f"{address}: no answer of its own in {timeout:.1f}s (answered by"
                                f" {', '.join(sorted(set(others)))})")
    cluster = None
    if cluster_f is not None:
        # The controller's answer follows the Metadata one (it names the controller) within a connection's
        # setup; a paused controller is not waited for beyond that, however long the budget.
        try:
            cluster = cluster_f.result(min(deadline.left(), max(DESCRIBE_WAIT, since(started))))
        except Exception:  # noqa: BLE001 - the controller did not answer in time: the broker's own view stands
            cluster = None
    return from_results(md, cluster, address)


def _start(address: str, timeout: float, settings: dict[str, str], describe: bool, own: bool,
           answers: queue.Queue[Metadata | MetadataError]) -> None:
    lock = threading.Lock()
    delivered: list[bool] = []

    def deliver(item: Metadata | MetadataError) -> None:  # one item per address, the first that comes
        if isinstance(item, MetadataError):
            item = _bare(item)
        with lock:
            if not delivered:
                delivered.append(True)
                answers.put(item)

    def run() -> None:
        keep: list[Any] = []
        try:
            deliver(_ask(address, timeout, settings, describe, own, keep, deliver))
        except MetadataError as exc:
            deliver(exc)
        except Exception as exc:  # noqa: BLE001 - a bad setting or an unexpected answer: reported, not raised here
            deliver(MetadataError(f"{address}: {exc}"))
        finally:
            keep.clear()  # the client is destroyed here (or in its watcher), once the caller has its answer

    _spawn(run, f"kctl-describe-{address}")


def _bare(exc: MetadataError) -> MetadataError:
    """The error without its traceback and context: they hold the asking frame and its client."""
    exc.__context__ = exc.__cause__ = None
    return exc.with_traceback(None)


def _spawn(target: Callable[[], None], name: str) -> None:
    thread = threading.Thread(target=target, daemon=True, name=name)
    with _asks_lock:
        _asks[:] = [t for t in _asks if t.is_alive()]
        _asks.append(thread)
    thread.start()


def settle(limit: float) -> bool:
    """Wait at most ``limit`` seconds for every ask and watcher to end (their clients destroyed);
    whether they all did."""
    deadline = Deadline(limit)
    while True:
        with _asks_lock:
            _asks[:] = [t for t in _asks if t.is_alive()]
            pending = list(_asks)
        if not pending:
            return True
        if deadline.passed():
            return False
        pending[0].join(deadline.left())


def _collect(addrs: list[str], timeout: float, settings: dict[str, str] | None, *, describe: bool,
             first: bool, own: bool) -> tuple[list[Metadata], list[MetadataError]]:
    """The answers of ``addrs``; with ``first``, the first answer only, and the other addresses are asked
    only when the first one has not answered within :data:`HEDGE` (or has failed)."""
    import confluent_kafka.admin  # noqa: F401 - loaded here, before the hedge's clock starts

    answers: queue.Queue[Metadata | MetadataError] = queue.Queue()
    launched = 0

    def launch(n: int) -> None:
        nonlocal launched
        for a in addrs[launched:launched + n]:
            _start(a, timeout, settings or {}, describe, own, answers)
        launched = min(len(addrs), launched + n)

    launch(1 if first else len(addrs))
    views: list[Metadata] = []
    errors: list[MetadataError] = []
    deadline = Deadline(timeout + GRACE)
    received = 0
    while received < launched:
        wait = deadline.left()
        if launched < len(addrs):
            wait = min(wait, HEDGE)
        try:
            got = answers.get(timeout=max(0.0, wait))
        except queue.Empty:
            if launched < len(addrs) and not deadline.passed():
                launch(len(addrs))  # the first address is slow: ask the others too
                continue
            break
        received += 1
        if isinstance(got, Metadata):
            views.append(got)
            if first:
                break
        else:
            errors.append(got)
            launch(len(addrs))
    return views, errors


def fetch(address: str, timeout: float = 2.0, settings: dict[str, str] | None = None) -> Metadata:
    """One broker's answer (``host:port``); MetadataError (AuthError: refused) when none comes in ``timeout``."""
    views, errors = _collect(addresses(address)[:1], timeout, settings, describe=True, first=True, own=True)
    if views:
        return views[0]
    raise errors[0] if errors else MetadataError(f"{address}: no metadata answer in {timeout:.1f}s")


def fetch_any(bootstrap: str, timeout: float = 2.0, settings: dict[str, str] | None = None, *,
              describe: bool = True) -> Metadata:
    """The first answer of the bootstrap brokers (hedged: see :func:`_collect`): a paused broker costs
    :data:`HEDGE`, not the timeout.

    ``settings``: librdkafka's security settings (:func:`kctl.security.store.client_settings`), {} or None
    for a plain cluster. ``describe=False``: no DescribeCluster, the answering broker's Metadata gives
    the cluster id and controller (one connection instead of two: the identity check before every
    command needs only the cluster id, which every broker reports alike).
    """
    addrs = addresses(bootstrap)
    views, errors = _collect(addrs, timeout, settings, describe=describe, first=True, own=False)
    if views:
        return views[0]
    message = "; ".join(map(str, errors)) or f"no answer from {bootstrap} in {timeout:.1f}s"
    raise (AuthError if any(isinstance(e, AuthError) for e in errors) else MetadataError)(message)


def fetch_each(bootstrap: str, timeout: float = 2.0,
               settings: dict[str, str] | None = None) -> tuple[list[Metadata], list[str]]:
    """Every bootstrap broker's own answer (and the errors): each broker's metadata cache is updated by
    the controller on its own schedule, so a wait for "every broker registered" asks them all.

    Each view is the broker's own, its controller included (DescribeCluster is not asked: it would
    give every view the controller's answer). A broker that does not answer in time is an error.
    """
    addrs = addresses(bootstrap)
    views, errors = _collect(addrs, timeout, settings, describe=False, first=False, own=True)
    answered = {v.answered_by for v in views} | {str(e).split(": ")[0] for e in errors}
    late = [f"{a}: no metadata answer in {timeout:.1f}s" for a in addrs if a not in answered]
    return views, [str(e) for e in errors] + late


def speaks_tls(bootstrap: str, timeout: float = 2.0) -> bool:
    """Whether the first reachable bootstrap broker completes a TLS handshake (certificate not checked):
    a PLAINTEXT client of a SASL_SSL listener only sees the connection closed (librdkafka reports
    "all brokers down"), this says why. A TLS handshake, not a Kafka client."""
    import socket
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for item in addresses(bootstrap):
        host, _, port = item.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host or None):
                return True
        except (OSError, ValueError):
            continue
    return False


atexit.register(settle, SETTLE_AT_EXIT)  # Python's exit handlers run before the C library's (OpenSSL's)
