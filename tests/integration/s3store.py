"""A real S3-compatible server for the tests: moto's server mode on 127.0.0.1 (a free port), a bucket made with
boto3, a credentials file of mode 0600, and a TCP proxy in front of the server that a test can pause (moto's
state lives in its process: stopping the server would lose the bucket)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCESS_KEY = "kctltestaccess"
SECRET_KEY = "kctl-test-secret-9f1c2b7e"  # a test's own: asserted absent from argv, env and output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """127.0.0.1:port -> target; ``pause()`` drops every connection and refuses new ones until ``resume()``."""

    def __init__(self, target_port: int, bind: str = "127.0.0.1") -> None:
        self.target = target_port
        self.port = free_port()
        self._paused = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._srv = socket.create_server((bind, self.port))
        self._srv.settimeout(0.2)
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self._srv.accept()
            except OSError:
                continue
            if self._paused.is_set():
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def pause(self) -> None:
        self._paused.set()
        with self._lock:
            for s in self._conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self._conns.clear()

    def resume(self) -> None:
        self._paused.clear()

    def close(self) -> None:
        self._stop.set()
        self.pause()
        self._srv.close()


@dataclass
class Store:
    endpoint: str  # through the proxy
    direct: str  # moto itself
    proxy: Proxy
    credentials: Path

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.direct, region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def storage_options(self) -> dict[str, str]:
        """The test's own delta-rs options (not kctl's mapping)."""
        return {"AWS_ENDPOINT_URL": self.direct, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}

    def s3_args(self) -> list[str]:
        return ["--s3-endpoint", self.endpoint, "--s3-credentials", str(self.credentials)]


@contextlib.contextmanager
def moto_store(tmp: Path, bind: str = "127.0.0.1") -> Iterator[Store]:
    """``bind``: the address the proxy (the endpoint kctl is given) listens on: 127.0.0.1, or for the test hosts
    (containers of the run's own bridge network) this machine's address on that bridge, so their executors reach
    it; moto itself stays on 127.0.0.1."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "moto_server exited at start"
                assert time.monotonic() < deadline, "moto_server did not listen in 30 s"
                time.sleep(0.2)
        proxy = Proxy(port, bind)
        creds = tmp / "s3-credentials"
        creds.write_text(f"access_key={ACCESS_KEY}\nsecret_key={SECRET_KEY}\n")
        creds.chmod(0o600)
        yield Store(f"http://{bind}:{proxy.port}", f"http://127.0.0.1:{port}", proxy, creds)
    finally:
        if proxy:
            proxy.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
