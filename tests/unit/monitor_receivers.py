"""Real receivers for the monitor's delivery tests: an HTTP server on 127.0.0.1 in a thread (a webhook receiver
whose answer each test chooses) and a monitor whose round sees what the test says, without a cluster."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kctl.model.spec import parse_spec
from kctl.monitor import service
from kctl.monitor.service import Monitor

Answer = Callable[[str, str, dict[str, Any] | None], tuple[int, dict[str, str]]]


class Hook:
    """A webhook receiver: every request is kept (method, path, JSON body); ``answer`` decides the status."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        self.headers: list[dict[str, str]] = []  # each request's headers, in the same order
        self.answer: Answer = answer or (lambda method, path, body: (200, {}))
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                hook.headers.append(dict(self.headers))
                hook.requests.append((self.command, self.path, body))
                status, headers = hook.answer(self.command, self.path, body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET = _serve  # noqa: N815 - http.server's names

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self) -> list[dict[str, Any]]:
        return [b for m, _, b in self.requests if m == "POST" and b is not None]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def hooks(n: int = 1) -> Iterator[list[Hook]]:
    made = [Hook() for _ in range(n)]
    try:
        yield made
    finally:
        for h in made:
            h.close()


def group_doc(status: str, lag: int = 40) -> dict[str, Any]:
    return {"status": status, "total_lag": lag,
            "problems": [] if status == "OK" else [{"topic": "t", "partition": 0, "status": status}]}


def monitor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, notifiers: list[dict[str, Any]],
            lines: list[str] | None = None, monitoring: dict[str, Any] | None = None, **kw: Any) -> Monitor:
    """A monitor of a spec with ``notifiers`` whose rounds scrape nothing and ask no ZooKeeper: the groups it
    judges are what the test puts in :attr:`Monitor.group_docs`."""
    spec = parse_spec({"monitoring": {"notifiers": notifiers, "alerts": {"exporter": False},
                                      **(monitoring or {})}})[0]
    monkeypatch.setattr(service.mx, "scrape_all", lambda endpoints: [])
    mon = Monitor(spec, tmp_path / "state", log=(lines.append if lines is not None else lambda line: None), **kw)
    monkeypatch.setattr(mon, "zookeeper_modes", lambda: {})
    monkeypatch.setattr(mon, "disks", lambda: {})
    return mon
