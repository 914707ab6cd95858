"""ZooKeeper four-letter words over a plain socket, and parsers for their answers."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from kctl import contract

WORDS = contract.FOUR_LETTER_WORDS
PARSED = ("srvr", "stat", "mntr", "conf", "envi")

NOT_WHITELISTED = "is not executed because it is not in the whitelist"
NOT_SERVING = "This ZooKeeper instance is not currently serving requests"


class FourLetterError(OSError):
    """The server could not be reached or closed the connection without an answer."""


@dataclass(frozen=True)
class Answer:
    """The raw answer of one server to one word."""

    word: str
    host: str
    port: int
    text: str
    elapsed_ms: float

    @property
    def whitelisted(self) -> bool:
        return NOT_WHITELISTED not in self.text

    @property
    def serving(self) -> bool:
        return NOT_SERVING not in self.text


def ask(host: str, port: int, word: str, timeout: float = 1.0) -> Answer:
    """Send one four-letter word and read the answer until the server closes the socket."""
    start = time.monotonic()
    deadline = start + timeout
    chunks: list[bytes] = []
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode("ascii"))
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FourLetterError(f"{host}:{port} did not finish answering {word!r} in {timeout:.1f}s")
                s.settimeout(remaining)
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
    except TimeoutError as exc:
        raise FourLetterError(f"{host}:{port}: no answer to {word!r} in {timeout:.1f}s") from exc
    except OSError as exc:
        if isinstance(exc, FourLetterError):
            raise
        raise FourLetterError(f"{host}:{port}: {exc.strerror or exc}") from exc
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return Answer(word, host, port, text, (time.monotonic() - start) * 1000)


@dataclass
class Srvr:
    """The fields of ``srvr`` (and the head of ``stat``)."""

    version: str | None = None
    latency_min: float | None = None
    latency_avg: float | None = None
    latency_max: float | None = None
    received: int | None = None
    sent: int | None = None
    connections: int | None = None
    outstanding: int | None = None
    zxid: str | None = None
    mode: str | None = None
    node_count: int | None = None
    clients: list[str] = field(default_factory=list)


def _num(v: str) -> int | None:
    try:
        return int(v)
    except ValueError:
        return None


def parse_srvr(text: str) -> Srvr:
    out = Srvr()
    clients_section = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            clients_section = False
            continue
        if line == "Clients:":
            clients_section = True
            continue
        if clients_section:
            out.clients.append(line)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Zookeeper version":
            out.version = value
        elif key == "Latency min/avg/max":
            parts = value.split("/")
            if len(parts) == 3:
                try:
                    out.latency_min, out.latency_avg, out.latency_max = (float(p) for p in parts)
                except ValueError:
                    pass
        elif key == "Received":
            out.received = _num(value)
        elif key == "Sent":
            out.sent = _num(value)
        elif key == "Connections":
            out.connections = _num(value)
        elif key == "Outstanding":
            out.outstanding = _num(value)
        elif key == "Zxid":
            out.zxid = value
        elif key == "Mode":
            out.mode = value
        elif key == "Node count":
            out.node_count = _num(value)
    return out


def _scalar(v: str) -> int | float | str:
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def parse_mntr(text: str) -> dict[str, int | float | str]:
    """``mntr``: tab-separated ``zk_key value`` lines."""
    out: dict[str, int | float | str] = {}
    for line in text.splitlines():
        if "\t" in line:
            k, v = line.split("\t", 1)
            out[k.strip()] = _scalar(v.strip())
    return out


def parse_kv(text: str) -> dict[str, int | float | str]:
    """``conf`` and ``envi``: ``key=value`` lines (envi starts with a header line)."""
    out: dict[str, int | float | str] = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = _scalar(v.strip())
    return out


def parse(word: str, text: str) -> dict[str, object]:
    """Fields of a parsed word; ``{"text": ...}`` for the others."""
    if word in ("srvr", "stat"):
        from dataclasses import asdict

        d = asdict(parse_srvr(text))
        if word == "srvr":
            d.pop("clients")
        return d
    if word == "mntr":
        return dict(parse_mntr(text))
    if word in ("conf", "envi"):
        return dict(parse_kv(text))
    return {"text": text}
