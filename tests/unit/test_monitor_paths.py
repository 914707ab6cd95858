"""One answer for one moment (issue 44 point 21): the monitor's own evaluation, its HTTP API (over a real
socket), the console's group evaluation and `kctl lag GROUP` (the CLI, reading the store while the monitor
runs) give the same status for a consumer that kept up and then stopped while its producer went on, round by
round; and the API answers only to a Host header that names it (point 19), over a real socket.

The monitor runs for real (its rounds, its store, its API server); Kafka is a scripted group description, the
exporters and ZooKeeper answer nothing, and the clock is the test's."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from kctl.model.spec import ClusterSpec, parse_spec
from kctl.monitor import api, process
from kctl.monitor import metrics as mx
from kctl.monitor.service import Monitor

T0 = 1_700_000_000.0


class FakeCluster:
    """One group on one partition: the committed offset, the end offset and whether a live member owns it."""

    def __init__(self) -> None:
        self.committed, self.end, self.owned, self.state = 0, 0, True, "STABLE"

    def describe(self, target: Any, group: str, *, client: Any = None) -> Any:
        part = SimpleNamespace(topic="orders", partition=0, committed=self.committed, log_end=self.end,
                               consumer_id="c-1" if self.owned else None)
        return SimpleNamespace(group=group, state=self.state, partitions=[part])


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from kctl.kafka import groups as kgroups
    from kctl.kafka.client import Target

    spec, _ = parse_spec({"name": "paths", "state_dir": str(tmp_path / "state"),
                          "monitoring": {"api_hosts": ["monitor.example.org:8443", "kafka-mon.internal"]}})
    cluster = FakeCluster()
    clock = [T0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    monkeypatch.setattr(kgroups, "list_groups",
                        lambda *a, **kw: [SimpleNamespace(group="app", type="classic", state="STABLE")])
    monkeypatch.setattr(kgroups, "describe", cluster.describe)
    monkeypatch.setattr(mx, "scrape_all", lambda endpoints: [])
    mon = Monitor(spec, tmp_path / "state", interval_s=2, window=5, log=lambda line: None)
    mon._admin = object()
    monkeypatch.setattr(mon, "zookeeper_modes", dict)
    monkeypatch.setattr(mon, "disks", dict)
    # `kctl lag` and the console read the store while the monitor runs: its record says it does.
    monkeypatch.setattr(process, "running", lambda state_dir: process.Running(1, 0, T0, 2.0, 5))
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text("name: paths\n")
    import kctl.cli.monitor as cli_monitor

    monkeypatch.setattr(cli_monitor, "connect", lambda file, bootstrap=None: Target.of(spec))
    server = api.serve(mon, 0)
    yield SimpleNamespace(spec=spec, mon=mon, cluster=cluster, clock=clock, spec_file=spec_file,
                          port=server.server_port)
    server.shutdown()
    mon.store.close()


def ask(port: int, path: str, host: str | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if resp.getheader("Content-Type") == "application/json" else body
    finally:
        conn.close()


def four_answers(w: Any) -> dict[str, tuple[str, int, int | None, list[str]]]:
    """(status, total lag, moment, partitions' statuses) of group app by each path."""
    from kctl.cli.main import app
    from kctl.console import ops

    mine = w.mon.docs["app"]
    code, doc = ask(w.port, "/v3/kafka/paths/consumer/app/lag", f"127.0.0.1:{w.port}")
    assert code == 200, doc
    st = doc["status"]
    console = ops.group_evaluation(w.spec, "app")
    assert console is not None
    run = CliRunner().invoke(app, ["lag", "app", "-o", "json", "-f", str(w.spec_file)])
    cli = json.loads(run.stdout)
    assert run.exit_code == (0 if cli["status"] == "OK" else 1), run.output
    assert cli["source"] == "the monitor"
    return {
        "monitor": (mine["status"], mine["total_lag"], mine["at_ms"], [p["status"] for p in mine["partitions"]]),
        "api": (st["worst_status"], st["totallag"], st["evaluated_at_ms"], [p["status"] for p in st["partitions"]]),
        "console": (console["status"], console["total_lag"], console["at_ms"],
                    [p["status"] for p in console["partitions"]]),
        "kctl lag": (cli["status"], cli["total_lag"], cli["at_ms"], [p["status"] for p in cli["partitions"]]),
    }


def test_a_stopped_consumer_reads_stop_through_every_path_and_all_agree(world: Any) -> None:
    w = world
    seen = []
    for i in range(14):
        w.clock[0] = T0 + 2 * i
        if i < 5:  # keeps up: commits what is there, a live member
            w.cluster.end = w.cluster.committed = 100 * i
        else:  # stops (leaves its group) while its producer goes on
            w.cluster.owned, w.cluster.state = False, "EMPTY"
            w.cluster.end += 10
        w.mon.round()
        answers = four_answers(w)
        assert len({json.dumps(a) for a in answers.values()}) == 1, f"round {i}: {answers}"
        status, total, at_ms, _ = answers["monitor"]
        assert at_ms == int(w.clock[0] * 1000)
        seen.append((status, total))
    # lag 0 while it kept up, then growing; STOP once the time since its last commit (t 8 s) exceeds what the
    # window spans (8 s) and no recent end offset shows it caught up: 10 s after it stopped.
    assert seen[:5] == [("OK", 0)] * 5
    assert seen[5:9] == [("OK", 10), ("OK", 20), ("OK", 30), ("OK", 40)]
    assert seen[9:] == [("STOP", 50), ("STOP", 60), ("STOP", 70), ("STOP", 80), ("STOP", 90)]
    # As a new user reads it: the table says STOP, where it read this from and for which moment.
    from kctl.cli.main import app

    w.clock[0] += 1
    run = CliRunner().invoke(app, ["lag", "app", "-f", str(w.spec_file)])
    assert run.exit_code == 1 and "STOP" in run.output, run.output
    moment = time.strftime("%H:%M:%SZ", time.gmtime(T0 + 26))
    assert f"from the monitor, as of {moment} (1 s ago)" in " ".join(run.output.split()), run.output
    # Without a group: every group of the monitor's latest round, from its store.
    every = CliRunner().invoke(app, ["lag", "-o", "json", "-f", str(w.spec_file)])
    docs = json.loads(every.stdout)
    assert every.exit_code == 1 and [(d["group"], d["status"], d["source"]) for d in docs] == [
        ("app", "STOP", "the monitor")]


def test_a_restarted_monitor_answers_as_before(world: Any) -> None:
    w = world
    for i in range(12):
        w.clock[0] = T0 + 2 * i
        w.cluster.committed = 100 * min(i, 4)
        w.cluster.end = 100 * min(i, 4) + 10 * max(0, i - 4)
        w.cluster.owned = i < 5
        w.mon.round()
    before = w.mon.windows.evaluate("app")
    again = Monitor(w.spec, w.mon.state_dir, interval_s=2, window=5, log=lambda line: None)
    try:
        assert again.windows.evaluate("app") == before and before.partitions[0].status.name == "STOP"
    finally:
        again.store.close()


HOSTS = [
    ("127.0.0.1:{port}", 200), ("localhost:{port}", 200), ("[::1]:{port}", 200), ("LOCALHOST:{port}", 200),
    ("kafka-mon.internal", 200), ("kafka-mon.internal:80", 200),  # a configured name alone: any port
    ("monitor.example.org:8443", 200),  # a configured name:port: that port only
    ("monitor.example.org", 421), ("monitor.example.org:80", 421),
    ("evil.example:{port}", 421), ("127.0.0.1", 421), ("127.0.0.1:1", 421), ("localhost.:{port}", 421),
    ("127.0.0.1.nip.io:{port}", 421), ("", 400), (None, 400),
]


def test_the_api_answers_only_to_a_host_that_names_it(world: Any) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: its Host is refused before anything is read."""
    w = world
    w.mon.round()
    for host, code in HOSTS:
        for path in ("/v3/kafka/paths/consumer/app/status", "/metrics", "/health", "/v3/kafka"):
            got, body = ask(w.port, path, None if host is None else host.format(port=w.port))
            assert got == code, (host, path, body)
            if code == 200:
                continue
            assert body["error"] is True and "app" not in json.dumps(body) and "paths" not in json.dumps(body)
            assert ("no Host header" if code == 400 else "not to Host") in body["message"]


def test_api_hosts_are_checked_in_kctl_yaml() -> None:
    from kctl.errors import SpecError

    with pytest.raises(SpecError, match="not a host name"):
        parse_spec({"monitoring": {"api_hosts": ["http://evil.example/"]}})
    spec: ClusterSpec = parse_spec({"monitoring": {"api_hosts": ["Mon.Example.org:8443", "[fd00::1]"]}})[0]
    assert spec.monitoring.api_hosts == ["mon.example.org:8443", "[fd00::1]"]
