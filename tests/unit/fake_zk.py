"""A fake ZooKeeper four-letter-word server for unit tests (no Docker)."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SRVR = """Zookeeper version: 3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c, built on 2024-02-12 22:16 UTC
Latency min/avg/max: 0/0.5/12
Received: 120
Sent: 119
Connections: 3
Outstanding: 0
Zxid: 0x100000042
Mode: {mode}
Node count: 37
"""


class FakeZk:
    """Answers words from a dict; ``mode`` drives srvr. ``hang`` never answers."""

    def __init__(self, mode: str = "follower") -> None:
        self.mode = mode
        self.hang = False
        self.answers: dict[str, str] = {}
        self.port = 0

    def answer(self, word: str) -> str:
        if word in self.answers:
            return self.answers[word]
        if word == "srvr":
            if self.mode == "not-serving":
                return "This ZooKeeper instance is not currently serving requests\n"
            return SRVR.format(mode=self.mode)
        if word == "ruok":
            return "imok"
        return f"{word} is not executed because it is not in the whitelist.\n"


@contextmanager
def fake_zk(mode: str = "follower") -> Iterator[FakeZk]:
    fake = FakeZk(mode)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            word = self.request.recv(4).decode()
            if fake.hang:
                threading.Event().wait(5)
                return
            self.request.sendall(fake.answer(word).encode())

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake.port = server.server_address[1]
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
