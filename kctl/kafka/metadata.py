"""One Kafka Metadata request (v2) over a plain socket: cluster id, live brokers, controller, partitions.

Health needs facts a single Metadata answer carries; confluent-kafka would
cost ~90 ms of import and a client bootstrap for them. Metadata v2 is the
oldest version with both ``controller_id`` and ``cluster_id`` (the identity
check of every command compares the latter); every 3.x broker answers it.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

API_METADATA = 3
VERSION = 2
CLIENT_ID = b"kctl-health"


class MetadataError(OSError):
    """No broker answered, or the answer could not be read."""


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
    answered_by: str = ""
    cluster_id: str | None = None


def request(correlation_id: int = 1) -> bytes:
    """The framed Metadata v2 request for every topic."""
    header = struct.pack(">hhih", API_METADATA, VERSION, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    body = struct.pack(">i", -1)  # null topic array: all topics
    msg = header + body
    return struct.pack(">i", len(msg)) + msg


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(v)

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def ints(self) -> tuple[int, ...]:
        return tuple(self.take(">i") for _ in range(max(0, self.take(">i"))))


def parse(payload: bytes, correlation_id: int = 1) -> Metadata:
    """Decode a Metadata v2 response (without its size prefix)."""
    r = _Reader(payload)
    try:
        if r.take(">i") != correlation_id:
            raise MetadataError("answer to another request")
        brokers = []
        for _ in range(r.take(">i")):
            brokers.append(r.take(">i"))
            r.string()  # host
            r.take(">i")  # port
            r.string()  # rack
        cluster_id = r.string()
        controller = r.take(">i")
        parts: list[Partition] = []
        for _ in range(r.take(">i")):
            r.take(">h")  # topic error
            topic = r.string() or ""
            r.take(">b")  # is_internal
            for _ in range(r.take(">i")):
                r.take(">h")  # partition error
                index, leader = r.take(">i"), r.take(">i")
                parts.append(Partition(topic, index, leader, r.ints(), r.ints()))
    except struct.error as exc:
        raise MetadataError(f"truncated metadata answer: {exc}") from None
    return Metadata(tuple(sorted(brokers)), controller if controller >= 0 else None, tuple(parts),
                    cluster_id=cluster_id)


def _recv_exact(s: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        s.settimeout(remaining)
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise MetadataError("connection closed mid-answer")
        buf += chunk
    return bytes(buf)


def fetch(host: str, port: int, timeout: float = 2.0) -> Metadata:
    """Ask one broker; MetadataError when it cannot answer within ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(request())
            size = struct.unpack(">i", _recv_exact(s, 4, deadline))[0]
            md = parse(_recv_exact(s, size, deadline))
    except TimeoutError:
        raise MetadataError(f"{host}:{port}: no metadata answer in {timeout:.1f}s") from None
    except MetadataError as exc:
        raise MetadataError(f"{host}:{port}: {exc}") from None
    except OSError as exc:
        raise MetadataError(f"{host}:{port}: {exc.strerror or exc}") from None
    return Metadata(md.brokers, md.controller, md.partitions, answered_by=f"{host}:{port}",
                    cluster_id=md.cluster_id)


def fetch_any(bootstrap: str, timeout: float = 2.0) -> Metadata:
    """Ask the bootstrap brokers at once and keep the first answer: a paused broker must not cost the timeout.

    Daemon threads, not an executor: the process may exit while a hung broker's
    thread still waits (an executor's threads are joined at exit).
    """
    import queue
    import threading

    addrs = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        addrs.append((host or "127.0.0.1", int(port)))
    answers: queue.Queue[Metadata | MetadataError] = queue.Queue()

    def ask(host: str, port: int) -> None:
        try:
            answers.put(fetch(host, port, timeout))
        except MetadataError as exc:
            answers.put(exc)

    for h, p in addrs:
        threading.Thread(target=ask, args=(h, p), daemon=True, name=f"kctl-metadata-{h}:{p}").start()
    errors: list[str] = []
    deadline = time.monotonic() + timeout + 0.5
    for _ in addrs:
        try:
            got = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if isinstance(got, Metadata):
            return got
        errors.append(str(got))
    raise MetadataError("; ".join(errors) or f"no answer from {bootstrap} in {timeout:.1f}s")


def fetch_each(bootstrap: str, timeout: float = 2.0) -> tuple[list[Metadata], list[str]]:
    """Every bootstrap broker's own answer (and the errors): each broker's metadata cache is updated
    by the controller on its own schedule, so a wait for "every broker registered" asks them all."""
    import concurrent.futures as cf

    addrs = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        addrs.append((host or "127.0.0.1", int(port)))
    views: list[Metadata] = []
    errors: list[str] = []
    with cf.ThreadPoolExecutor(max_workers=len(addrs)) as pool:
        for f in [pool.submit(fetch, h, p, timeout) for h, p in addrs]:
            try:
                views.append(f.result())
            except MetadataError as exc:
                errors.append(str(exc))
    return views, errors
