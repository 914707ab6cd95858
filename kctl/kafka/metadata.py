"""One Kafka Metadata request (v2) over a plain socket: cluster id, live brokers, controller, partitions.

Health needs facts a single Metadata answer carries; confluent-kafka would
cost ~90 ms of import and a client bootstrap for them. Metadata v2 is the
oldest version with both ``controller_id`` and ``cluster_id`` (the identity
check of every command compares the latter); every 3.x broker answers it.

A secured cluster's listeners speak SASL_SSL: with an :class:`Auth`, the socket is
wrapped in TLS (verified against the cluster's CA) and authenticated with SCRAM
(SaslHandshake v1, SaslAuthenticate v0; RFC 5802) before the Metadata request.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

API_METADATA = 3
API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
VERSION = 2
CLIENT_ID = b"kctl-health"


class MetadataError(OSError):
    """No broker answered, or the answer could not be read."""


@dataclass(frozen=True)
class Auth:
    """SASL/SCRAM credentials, and the CA file of TLS (None: SASL_PLAINTEXT)."""

    mechanism: str  # SCRAM-SHA-512 or SCRAM-SHA-256
    username: str
    password: str = field(repr=False)
    cafile: str | None = None


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


def _frame(api: int, version: int, correlation_id: int, body: bytes) -> bytes:
    msg = struct.pack(">hhih", api, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID + body
    return struct.pack(">i", len(msg)) + msg


def request(correlation_id: int = 1) -> bytes:
    """The framed Metadata v2 request for every topic."""
    return _frame(API_METADATA, VERSION, correlation_id, struct.pack(">i", -1))  # null topic array: all topics


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


class Scram:
    """The client side of SCRAM (RFC 5802) as Kafka speaks it (no channel binding)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        import base64
        import os

        self.hash = {"SCRAM-SHA-512": "sha512", "SCRAM-SHA-256": "sha256"}[mechanism]
        self.password = password
        self.nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        name = username.replace("=", "=3D").replace(",", "=2C")
        self.first_bare = f"n={name},r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        import base64
        import hashlib
        import hmac

        text = server_first.decode()
        attrs = dict(item.split("=", 1) for item in text.split(","))
        if "e" in attrs:
            raise MetadataError(f"SCRAM: {attrs['e']}")
        nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        if not nonce.startswith(self.nonce):
            raise MetadataError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        signature = hmac.new(stored, auth_message, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.server_signature = hmac.new(server_key, auth_message, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        import base64
        import hmac

        attrs = dict(item.split("=", 1) for item in server_final.decode().split(","))
        if "e" in attrs:
            raise MetadataError(f"SCRAM: {attrs['e']}")
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self.server_signature):
            raise MetadataError("SCRAM: the server's signature does not verify")


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


def _call(s: socket.socket, frame: bytes, deadline: float) -> bytes:
    s.settimeout(max(0.01, deadline - time.monotonic()))
    s.sendall(frame)
    size = struct.unpack(">i", _recv_exact(s, 4, deadline))[0]
    return _recv_exact(s, size, deadline)


class AuthError(MetadataError):
    """The broker refused the credentials, or TLS failed."""


def authenticate(s: socket.socket, auth: Auth, deadline: float) -> None:
    """SaslHandshake v1 and the SCRAM exchange in SaslAuthenticate v0 frames."""
    r = _Reader(_call(s, _frame(API_SASL_HANDSHAKE, 1, 101, _str(auth.mechanism)), deadline))
    r.take(">i")
    if (code := r.take(">h")) != 0:
        offered = [r.string() for _ in range(r.take(">i"))]
        raise AuthError(f"the broker does not offer {auth.mechanism} (error {code}; it offers {offered})")
    scram = Scram(auth.mechanism, auth.username, auth.password)

    def step(cid: int, data: bytes) -> bytes:
        rr = _Reader(_call(s, _frame(API_SASL_AUTHENTICATE, 0, cid, _bytes(data)), deadline))
        rr.take(">i")
        code, message = rr.take(">h"), rr.string()
        if code != 0:
            raise AuthError(f"authentication of {auth.username!r} failed: {message or f'error {code}'}")
        n = rr.take(">i")
        return rr.data[rr.pos:rr.pos + max(0, n)]

    server_first = step(102, scram.first())
    scram.verify(step(103, scram.final(server_first)))


def fetch(host: str, port: int, timeout: float = 2.0, auth: Auth | None = None) -> Metadata:
    """Ask one broker (over SASL_SSL with ``auth``); MetadataError when it cannot answer within ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            s = raw
            if auth is not None and auth.cafile:
                import ssl

                try:
                    ctx = ssl.create_default_context(cafile=auth.cafile)
                    s = ctx.wrap_socket(raw, server_hostname=host)
                except ssl.SSLError as exc:
                    raise AuthError(f"TLS: {exc.reason or exc}") from None
            if auth is not None:
                authenticate(s, auth, deadline)
            md = parse(_call(s, request(), deadline))
    except TimeoutError:
        raise MetadataError(f"{host}:{port}: no metadata answer in {timeout:.1f}s") from None
    except MetadataError as exc:
        raise type(exc)(f"{host}:{port}: {exc}") from None
    except OSError as exc:
        raise MetadataError(f"{host}:{port}: {exc.strerror or exc}") from None
    return Metadata(md.brokers, md.controller, md.partitions, answered_by=f"{host}:{port}",
                    cluster_id=md.cluster_id)


def speaks_tls(bootstrap: str, timeout: float = 2.0) -> bool:
    """Whether the first reachable bootstrap broker completes a TLS handshake (certificate not checked):
    a PLAINTEXT Metadata request to a SASL_SSL listener only sees the connection closed, this says why."""
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host or None):
                return True
        except (OSError, ValueError):
            continue
    return False


def fetch_any(bootstrap: str, timeout: float = 2.0, auth: Auth | None = None) -> Metadata:
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
            answers.put(fetch(host, port, timeout, auth))
        except MetadataError as exc:
            answers.put(exc)

    for h, p in addrs:
        threading.Thread(target=ask, args=(h, p), daemon=True, name=f"kctl-metadata-{h}:{p}").start()
    errors: list[str] = []
    refused = False
    deadline = time.monotonic() + timeout + 0.5
    for _ in addrs:
        try:
            got = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if isinstance(got, Metadata):
            return got
        errors.append(str(got))
        refused = refused or isinstance(got, AuthError)
    message = "; ".join(errors) or f"no answer from {bootstrap} in {timeout:.1f}s"
    raise (AuthError if refused else MetadataError)(message)


def fetch_each(bootstrap: str, timeout: float = 2.0, auth: Auth | None = None) -> tuple[list[Metadata], list[str]]:
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
        for f in [pool.submit(fetch, h, p, timeout, auth) for h, p in addrs]:
            try:
                views.append(f.result())
            except MetadataError as exc:
                errors.append(str(exc))
    return views, errors
