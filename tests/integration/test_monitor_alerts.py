"""The monitor on a cluster of its own: a broker killed under load opens an under-replicated alert that a real
HTTP receiver and a real SMTP server (aiosmtpd) each get once, a kill -9 of the monitor loses no history and
opens nothing again, the heal closes the alert; a refusing SMTP host and a webhook that times out are retried
while the monitor carries on; bad input gets a clear error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kctl.runtime.ports import free_ports
from kctl.testing.cluster import KafkaCluster
from tests.integration.cli import js, kctl

pytestmark = pytest.mark.integration


class Receiver:
    """A webhook receiver: every POST's JSON with its arrival time; ``delay`` makes it answer late."""

    def __init__(self, port: int, delay: float = 0.0) -> None:
        self.bodies: list[tuple[float, dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if delay:
                    time.sleep(delay)
                else:
                    receiver.bodies.append((time.time(), {**body, "_token": self.headers.get("X-Team")}))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, alert: str) -> list[dict[str, Any]]:
        return [b for _, b in self.bodies if b["alert"] == alert]


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"

    def subjects(self) -> list[str]:
        return [str(m["Subject"]) for m in self.messages]


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from aiosmtpd.controller import Controller

    hook_port, slow_port, smtp_port, refused_port = free_ports(4)
    hook, slow, mailbox = Receiver(hook_port), Receiver(slow_port, delay=5.0), Mailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    secret = tmp_path_factory.mktemp("smtp") / "password"
    secret.write_text("not-used-by-this-server\n")
    monitoring = {
        "interval_seconds": 2,
        "window": 5,
        # Short enough for a test (the defaults, 30 s and 1 h, are the unit tests' and the docs').
        "alerts": {"under-replicated": {"threshold_seconds": 4, "repeat_seconds": 600}},
        "notifiers": [
            # tls: none: aiosmtpd here offers no STARTTLS (kctl's default), and the host is local
            {"name": "hook", "type": "webhook", "url": f"http://127.0.0.1:{hook_port}/hook",
             "headers": {"X-Team": "abc"}},
            {"name": "mail", "type": "email", "host": "127.0.0.1", "port": smtp_port, "tls": "none",
             "from": "kctl@example.org", "to": ["ops@example.org"]},
            {"name": "refusing-mail", "type": "email", "host": "127.0.0.1", "port": refused_port, "tls": "none",
             "from": "kctl@example.org", "to": ["ops@example.org"], "password_file": str(secret),
             "username": "kctl"},
            {"name": "slow-hook", "type": "webhook", "url": f"http://127.0.0.1:{slow_port}/hook",
             "timeout_seconds": 1},
        ],
    }
    with KafkaCluster(nodes=3, monitoring=monitoring) as cluster:
        yield {"cluster": cluster, "hook": hook, "mailbox": mailbox}
        kctl(cluster, "monitor", "stop")
    smtp.stop()
    hook.server.shutdown()
    slow.server.shutdown()


def _wait(what: str, condition: Any, timeout: float) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.25)
    return time.monotonic() - start


def lag_doc(cluster: KafkaCluster, group: str) -> dict[str, Any]:
    """`kctl lag GROUP -o json` (exit 0 when OK, 1 when not: both answer)."""
    p = kctl(cluster, "lag", group, "-o", "json")
    assert p.returncode in (0, 1), p.stderr
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


def _monitor_pid(cluster: KafkaCluster) -> int:
    st = js(cluster, "monitor", "status")
    assert st["running"] is True
    return int(st["pid"])


def test_monitor_alerts_history_and_restart(watched: dict[str, Any]) -> None:
    from confluent_kafka import Producer

    cluster: KafkaCluster = watched["cluster"]
    hook: Receiver = watched["hook"]
    mailbox: Mailbox = watched["mailbox"]

    p = kctl(cluster, "monitor", "stop")
    assert p.returncode != 0 and "is not running" in p.stderr and "Traceback" not in p.stderr
    p = kctl(cluster, "monitor", "start", "--detach")
    assert p.returncode == 0, p.stderr
    p = kctl(cluster, "monitor", "start", "--detach")
    assert p.returncode != 0 and "already runs" in p.stderr

    topic = "orders"
    assert kctl(cluster, "topic", "create", topic, "-p", "6", "-r", "3").returncode == 0
    assert kctl(cluster, "produce", topic, stdin="".join(f"{i}\n" for i in range(100))).returncode == 0
    p = kctl(cluster, "consume", topic, "--group", "billing", "--from-beginning", "--max", "40", "--timeout", "20")
    assert p.returncode == 0, p.stderr
    _wait("the monitor judges group billing", lambda: lag_doc(cluster, "billing")["source"] == "the monitor", 30)

    stop_load = threading.Event()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})

    def load() -> None:
        end = time.monotonic() + 120  # bounded: at most 2 min of 100 records/s
        while not stop_load.is_set() and time.monotonic() < end:
            for _ in range(10):
                producer.produce(topic, value=b"x" * 100)
            producer.poll(0)
            time.sleep(0.1)
        producer.flush(30)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        time.sleep(4)
        assert not hook.of("under-replicated")
        killed = time.monotonic()
        cluster.kill(2)  # held down until started again
        # The leaders shrink their ISR after replica.lag.time.max.ms, then the rule's 4 s and a round or two: a
        # minute leaves room for a machine busy with other clusters.
        _wait("the webhook's open under-replicated", lambda: hook.of("under-replicated"), 60)
        _wait("the e-mail's OPEN under-replicated",
              lambda: any("OPEN under-replicated" in s for s in mailbox.subjects()), 60 - (time.monotonic() - killed))
        opened = hook.of("under-replicated")[0]
        assert opened["state"] == "open" and opened["cluster"] == cluster.spec.name
        assert opened["subject"] == "cluster" and "under-replicated partitions" in opened["details"]
        assert opened["_token"] == "abc" and opened["repeat"] is False

        # kill -9 of the monitor while the alert is open; started again, it keeps its history and its alert.
        rounds_before = js(cluster, "monitor", "status")["rounds"]
        history_before = js(cluster, "lag", "history", "billing", "--since", "10m")["points"]
        assert history_before
        os.kill(_monitor_pid(cluster), signal.SIGKILL)
        _wait("the killed monitor is gone", lambda: kctl(cluster, "monitor", "status").returncode == 1, 15)
        assert kctl(cluster, "monitor", "start", "--detach").returncode == 0
        history_after = js(cluster, "lag", "history", "billing", "--since", "10m")["points"]
        assert history_after[:len(history_before)] == history_before
        _wait("a round after the restart", lambda: js(cluster, "monitor", "status")["rounds"] > rounds_before + 1, 30)
        time.sleep(4)  # two more rounds with the broker down
        assert len(hook.of("under-replicated")) == 1, hook.of("under-replicated")  # exactly once: no re-open
        assert sum("under-replicated" in s for s in mailbox.subjects()) == 1, mailbox.subjects()
        open_alerts = js(cluster, "alerts")["open"]
        assert any(a["alert"] == "under-replicated" for a in open_alerts)
    finally:
        cluster.start(2)
        stop_load.set()
        loader.join(30)

    _wait("the resolved under-replicated", lambda: any(b["state"] == "resolved" for b in hook.of("under-replicated")),
          90)
    closed = [b for b in hook.of("under-replicated") if b["state"] == "resolved"][0]
    assert closed["duration_seconds"] > 0 and closed["closed_at"] >= closed["opened_at"]
    _wait("the e-mail's RESOLVED", lambda: any("RESOLVED under-replicated" in s for s in mailbox.subjects()), 30)

    # The refusing SMTP host and the webhook that times out: kept and retried, and the monitor carries on.
    doc = js(cluster, "alerts")
    undelivered = doc["undelivered"]
    assert {u["notifier"] for u in undelivered} >= {"refusing-mail", "slow-hook"}, undelivered
    # The working receivers never fail: a row of theirs is one queued since the last delivery round (the exporter
    # and group-status alerts open and resolve on their own as the broker goes and comes back), never one tried.
    assert all(u["attempts"] == 0 and u["last_error"] is None for u in undelivered
               if u["notifier"] in ("hook", "mail")), \
        undelivered
    for notifier in ("refusing-mail", "slow-hook"):
        mine = [u for u in undelivered if u["notifier"] == notifier]
        # the oldest, tried again and again with a growing delay (the later ones wait in order)
        assert mine[0]["attempts"] >= 2 and mine[0]["delivery"] == "pending", mine
        assert any(u["alert"] == "under-replicated" and u["state"] == "open" for u in mine), mine  # kept, not lost
    errors = " ".join(u["last_error"] or "" for u in undelivered)
    assert "refused" in errors.lower() and "no answer within 1 s" in errors
    assert "not-used-by-this-server" not in json.dumps(doc)  # the password is nowhere in what kctl shows
    assert kctl(cluster, "monitor", "status").returncode == 0


def test_monitor_bad_input(watched: dict[str, Any]) -> None:
    cluster: KafkaCluster = watched["cluster"]
    p = kctl(cluster, "lag", "history", "no-such-group")
    assert p.returncode != 0 and "no history of group" in p.stderr and "Traceback" not in p.stderr
    p = kctl(cluster, "lag", "history", "billing", "--since", "soon")
    assert p.returncode != 0 and "is not a duration" in p.stderr
    bad = cluster.workdir / "bad-notifier.yaml"
    data = subprocess.run(["cat", str(cluster.spec_file)], capture_output=True, text=True, check=True).stdout
    bad.write_text(data.replace("type: webhook", "type: pager", 1))
    p = subprocess.run([sys.executable, "-m", "kctl", "monitor", "status", "-f", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "not a notifier type" in p.stderr and "Traceback" not in p.stderr


def test_prometheus_and_alertmanager_beside_a_cluster() -> None:
    """monitoring.prometheus: Prometheus up with every exporter target up before `up` returns, kctl's rules
    loaded, Alertmanager with the spec's notifiers; both gone with the cluster."""
    import docker

    hook_port, = free_ports(1)
    monitoring = {"prometheus": True, "notifiers": [{"type": "webhook", "url": f"http://127.0.0.1:{hook_port}/"}],
                  "alerts": {"disk": False}}
    with KafkaCluster(nodes=1, monitoring=monitoring) as cluster:
        port = cluster.spec.monitoring.prometheus_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=10) as resp:
            active = json.loads(resp.read())["data"]["activeTargets"]
        exporters = {(t["labels"]["job"], t["labels"]["node"]): t["health"] for t in active
                     if t["labels"]["job"] in ("kafka", "zookeeper")}
        assert exporters == {("kafka", "logger1"): "up", ("zookeeper", "logger1"): "up"}
        assert any(t["labels"]["job"] == "kctl-monitor" for t in active)
        # A rule's health is "unknown" until Prometheus first evaluates its group (every evaluation interval):
        # wait, bounded, for every rule's first evaluation, then each must be "ok".
        deadline = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10) as resp:
                rules = {r["name"]: r for g in json.loads(resp.read())["data"]["groups"] for r in g["rules"]}
            if all(r["health"] != "unknown" for r in rules.values()) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert "KafkaUnderReplicatedPartitions" in rules and "KafkaBrokerDiskFull" not in rules  # turned off
        assert rules["KafkaUnderReplicatedPartitions"]["duration"] == 30  # kctl's threshold as `for`
        assert {n: (r["health"], r.get("lastError")) for n, r in rules.items() if r["health"] != "ok"} == {}
        am = cluster.spec.monitoring.alertmanager_port
        with urllib.request.urlopen(f"http://127.0.0.1:{am}/api/v2/status", timeout=10) as resp:
            original = json.loads(resp.read())["config"]["original"]
        assert f"http://127.0.0.1:{hook_port}/" in original and "send_resolved: true" in original
        name = cluster.spec.name
    left = docker.from_env().containers.list(all=True, filters={"label": f"io.kctl.prometheus={name}"})
    assert left == []
