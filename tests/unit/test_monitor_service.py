"""The monitor's parts without a cluster: the alert rules over what a round saw, the store (a round is one
transaction, windows come back after a restart, history is pruned by age), the HTTP API's Burrow JSON and
/metrics (the notifiers: test_monitor_notify.py, their delivery: test_monitor_delivery.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from kctl.model.spec import parse_spec
from kctl.monitor import api
from kctl.monitor.lag import Sample
from kctl.monitor.service import Observation, firing
from kctl.monitor.store import Store


def broker(i: int, *, urp: int = 0, offline: int = 0, controller: bool = False) -> dict[str, Any]:
    return {"id": i, "under_replicated_partitions": urp, "offline_partitions": offline,
            "active_controller": controller}


def test_the_default_rules_over_a_round() -> None:
    healthy = Observation({"brokers": [broker(1, controller=True), broker(2), broker(3)], "errors": []},
                          {"logger1": "follower", "logger2": "leader", "logger3": "follower"}, 3, {},
                          {"broker 1": 40.0})
    assert firing(healthy, 85.0) == {}

    bad = Observation(
        {"brokers": [broker(1, urp=4, offline=2), broker(3, urp=1)],
         "errors": [{"node": "logger2", "service": "kafka", "error": "refused"}]},
        {"logger1": "follower", "logger2": None, "logger3": "looking"}, 3,
        {"billing": {"status": "STOP", "total_lag": 40, "problems": [{"topic": "t", "partition": 0,
                                                                       "status": "STOP"}]},
         "fine": {"status": "OK", "total_lag": 0, "problems": []}},
        {"broker 1": 91.5})
    got = firing(bad, 85.0)
    assert got[("offline-partitions", "cluster")] == "2 partitions without a leader"
    assert got[("controller", "cluster")] == "no active controller"
    assert got[("under-replicated", "cluster")] == "5 under-replicated partitions (broker 1: 4, broker 3: 1)"
    assert got[("zookeeper", "zookeeper logger2")] == "ZooKeeper on logger2 does not answer srvr"
    assert got[("zookeeper", "quorum")].startswith("ZooKeeper quorum lost: 1 of 3 serving, 0 leader(s)")
    assert got[("group-status", "group billing")] == "STOP, total lag 40 (t-0 STOP)"
    assert got[("disk", "broker 1")].startswith("data disk 91.5 % full")
    assert got[("exporter", "logger2 kafka")] == "refused"
    assert ("group-status", "group fine") not in got
    two = Observation({"brokers": [broker(1, controller=True), broker(2, controller=True)], "errors": []}, {}, 3, {})
    assert firing(two, 85.0) == {("controller", "cluster"): "2 active controllers: brokers [1, 2]"}


def test_store_rounds_restart_and_prune(tmp_path: Path) -> None:
    db = tmp_path / "monitor" / "monitor.db"
    s = Store(db)
    with s.round():
        s.add_samples("g", [(("t", 0), Sample(o, 1000 * o, 5), 20) for o in range(1, 8)])
        s.add_group("g", 7000, "OK", 5, "STABLE", 1.0)
        s.save_alerts([{"rule": "disk", "subject": "broker 1", "opened": 5.0}])
        s.enqueue("pager", {"alert": "disk", "state": "open"})
    with pytest.raises(RuntimeError), s.round():
        s.add_group("g", 8000, "WARN", 9, "STABLE", 1.0)
        raise RuntimeError("the round fails half-way")
    s.close()
    r = Store(db, readonly=True)  # what a reading command (or a restarted monitor) finds
    assert [x[2].offset for x in r.last_samples(3)] == [5, 6, 7]
    assert [h["status"] for h in r.group_history("g", 0)] == ["OK"]  # the failed round left nothing
    assert r.alert_rows() == [{"rule": "disk", "subject": "broker 1", "opened": 5.0}]
    assert [(o["notifier"], o["body"], o["state"]) for o in r.outbox()] == [
        ("pager", {"alert": "disk", "state": "open"}, "pending")]
    with pytest.raises(sqlite3.OperationalError):
        r.db.execute("DELETE FROM samples")  # read-only
    r.close()
    s = Store(db)
    with s.round():
        assert s.prune(older_than_ms=4000) == 3 + 0 + 0
    assert [x[2].offset for x in s.last_samples(10)] == [4, 5, 6, 7]
    s.close()


class FakeMonitor:
    def __init__(self) -> None:
        self.spec = parse_spec({})[0]
        self.rounds, self.round_seconds, self.interval_s, self.window = 3, 0.5, 10.0, 10
        self.groups_seconds = 0.2
        part = {"topic": "t", "partition": 0, "status": "STOP", "lag": 40, "complete": 0.3, "offset": 20}
        ok = {**part, "partition": 1, "status": "OK", "lag": 0}
        self.docs = {"billing": {"group": "billing", "status": "STOP", "burrow_status": "ERR", "total_lag": 40,
                                 "complete_fraction": 0.5, "max_lag": part, "partitions": [part, ok],
                                 "problems": [part]}}

    def snapshot(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any], float | None]:
        return self.docs, {}, 1700000000.0

    def open_alerts(self) -> list[dict[str, Any]]:
        return [{"rule": "group-status", "subject": "group billing"}]

    def disk_usage(self) -> dict[str, float]:
        return {"broker 1": 42.123}

    def certificate_days(self) -> dict[str, float]:
        return {}


def get(path: str) -> tuple[str, Any]:
    seen: dict[str, Any] = {}
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "HTTP_HOST": "127.0.0.1:17600"}
    body = b"".join(api.app(FakeMonitor())(environ,
                                           lambda status, headers: seen.update(status=status, headers=headers)))
    ctype = dict(seen["headers"])["Content-Type"]
    return seen["status"], json.loads(body) if ctype == "application/json" else body.decode()


def test_api_speaks_burrows_json_and_prometheus_text() -> None:
    status, doc = get("/v3/kafka/logger/consumer/billing/status")
    assert status == "200 OK" and doc["error"] is False
    st = doc["status"]
    assert st["status"] == "ERR" and st["worst_status"] == "STOP" and st["totallag"] == 40
    assert [p["partition"] for p in st["partitions"]] == [0] and st["partition_count"] == 2
    assert st["maxlag"]["current_lag"] == 40
    assert [p["partition"] for p in get("/v3/kafka/logger/consumer/billing/lag")[1]["status"]["partitions"]] == [0, 1]
    assert get("/v3/kafka/logger/consumer")[1]["consumers"] == ["billing"]
    assert get("/v3/kafka")[1]["clusters"] == ["logger"]
    assert get("/v3/kafka/logger/consumer/nope/status") == ("404 Not Found", {
        "error": True, "message": "consumer group nope not found"})
    assert get("/v3/kafka/other/consumer")[0] == "404 Not Found"
    status, text = get("/metrics")
    assert 'kctl_consumer_group_status{cluster="logger",group="billing"} 4.0' in text
    assert 'kctl_consumer_group_total_lag{cluster="logger",group="billing"} 40.0' in text
    assert 'kctl_alert_open{alert="group-status",cluster="logger",subject="group billing"} 1.0' in text
    assert 'kctl_broker_disk_used_percent{broker="broker 1",cluster="logger"} 42.12' in text
    assert get("/health")[1]["rounds"] == 3


def test_on_kraft_the_controllers_files_are_the_quorum_and_no_zookeeper_is_asked(monkeypatch) -> None:
    """A cluster on KRaft runs no ZooKeeper: the monitor asks none (no srvr, no exporter, no Prometheus job or
    rule for it) and judges the quorum as `kctl status` does, from the controllers' quorum-state files: a
    controller's error and a quorum without a leader fire `controller`, in status's words (a KRaft broker exports
    no ActiveControllerCount, so the brokers' metrics cannot say it)."""
    from kctl.kafka import controllers
    from kctl.kafka.controllers import ControllerView
    from kctl.monitor import prometheus as prom
    from kctl.monitor.service import Monitor
    from kctl.zk import fourlw

    zk_spec, _ = parse_spec({"name": "k4", "monitoring": {"enabled": True}})
    spec = zk_spec.with_kraft("kraft", "AAAAAAAAAAAAAAAAAAAAAA")
    assert spec.on_kraft and not zk_spec.on_kraft
    assert {svc for _n, svc, _u in zk_spec.metrics_endpoints()} == {"zookeeper", "kafka"}
    assert {svc for _n, svc, _u in spec.metrics_endpoints()} == {"kafka"}
    jobs = {j["job_name"] for j in prom.prometheus_config(spec)["scrape_configs"]}
    assert "zookeeper" not in jobs and "zookeeper" in {j["job_name"] for j in
                                                       prom.prometheus_config(zk_spec)["scrape_configs"]}
    rules = {r["labels"]["kctl_rule"] for r in prom.alert_rules(spec)["groups"][0]["rules"]}
    assert rules.isdisjoint({"zookeeper", "controller"}) and "offline-partitions" in rules
    assert {"zookeeper", "controller"} <= {r["labels"]["kctl_rule"]
                                           for r in prom.alert_rules(zk_spec)["groups"][0]["rules"]}

    asked: list[str] = []
    monkeypatch.setattr(fourlw, "ask", lambda *a, **k: asked.append("srvr") or (_ for _ in ()).throw(
        fourlw.FourLetterError("refused")))
    files = {"logger1": ControllerView("logger1", 3001, 3002, 7), "logger2": ControllerView("logger2", 3002, 3002, 7),
             "logger3": ControllerView("logger3", 3003, error="no quorum-state file (never started?)")}
    monkeypatch.setattr(controllers, "controller_view", lambda _s, host, _cid, _t: files[host])
    mon = Monitor.__new__(Monitor)  # its two readers alone, without a store
    mon.spec = spec
    assert mon.zookeeper_modes() == {} and asked == []
    views, leader = mon.kraft_quorum()
    assert leader == 3002 and views == files
    # files it cannot read at all: each controller's error and no leader, alerts rather than a lost round
    monkeypatch.setattr(controllers, "views", lambda *_a: (_ for _ in ()).throw(RuntimeError("engine gone")))
    broken, none = mon.kraft_quorum()
    assert none is None and {v.error for v in broken.values()} == {
        "its quorum-state file cannot be read (engine gone)"} and len(broken) == 3
    mon.spec = zk_spec
    assert mon.kraft_quorum() is None and set(mon.zookeeper_modes()) == {"logger1", "logger2", "logger3"}

    kraft_brokers = {"brokers": [{**broker(i), "active_controller": None} for i in (1, 2, 3)], "errors": []}
    got = firing(Observation(kraft_brokers, {}, 3, {}, kraft=(views, leader)), 85.0)
    assert got == {("controller", "controller logger3"): "logger3: controller: no quorum-state file (never"
                                                          " started?)"}
    lost = {h: ControllerView(h, v.id, 3002, 7) for h, v in files.items() if h == "logger1"}
    got = firing(Observation(kraft_brokers, {}, 3, {}, kraft=(lost, None)), 85.0)
    assert got == {("controller", "cluster"): "the KRaft controller quorum has no leader"}
    # the same words as `kctl status` for the same files
    assert controllers.problems(spec, views, leader) == [
        "logger3: controller: no quorum-state file (never started?)"]
    assert controllers.problems(spec, lost, None) == ["the KRaft controller quorum has no leader"]


def test_a_dead_spark_worker_fires_the_spark_rule_in_the_words_of_kctl_status(monkeypatch) -> None:
    """kctl.yaml's Spark cluster: the monitor asks its master each round; a declared worker not ALIVE, or a master
    that does not answer, opens a `spark` alert per subject with the problem `kctl status` lists (one reading,
    kctl.stream.spark.findings); no Spark cluster, nothing asked. Prometheus has no rule for it (no exporter)."""
    from kctl.monitor import prometheus as prom
    from kctl.monitor.service import Monitor
    from kctl.stream import spark

    spec, _ = parse_spec({"name": "s", "spark": {"workers": 2}})
    asked: list[int] = []
    answers = [{"status": "ALIVE", "workers": [{"name": "spark-worker-1", "state": "ALIVE"},
                                               {"name": "spark-worker-2", "state": "DEAD"}]},
               {"status": "down", "error": "the Spark master does not answer on http://127.0.0.1:1/json/: refused",
                "workers": []}]
    monkeypatch.setattr(spark, "status_at", lambda port, _t=5.0, _host="127.0.0.1", _names=None:
                        asked.append(port) or answers[len(asked) - 1])
    mon = Monitor.__new__(Monitor)
    mon.spec = spec
    found = mon.spark()
    assert [s for s, _ in found] == ["spark-worker-2"] and asked == [spec.spark.ui_port]
    got = firing(Observation({"brokers": [], "errors": []}, {}, 3, {}, spark=found), 85.0)
    assert got == {("spark", "spark-worker-2"): spark.problems(spec, answers[0])[0]}
    assert "worker spark-worker-2 is DEAD at the master" in got[("spark", "spark-worker-2")]
    got = firing(Observation({"brokers": [], "errors": []}, {}, 3, {}, spark=mon.spark()), 85.0)
    assert list(got) == [("spark", "spark-master")] and "refused" in got[("spark", "spark-master")]
    mon.spec = parse_spec({"name": "s"})[0]
    assert mon.spark() == [] and len(asked) == 2
    # an answer it cannot read is an alert, not a lost round
    mon.spec = spec
    monkeypatch.setattr(spark, "status_at", lambda port, _t=5.0: {"status": "ALIVE", "workers": [{"state": "x"}]})
    [(subject, text)] = mon.spark()
    assert subject == "spark-master" and text.startswith("spark: the master's answer cannot be read"), text
    assert "spark" in spec.monitoring.alerts
    assert "spark" not in {r["labels"]["kctl_rule"] for r in prom.alert_rules(spec)["groups"][0]["rules"]}


def test_the_monitor_follows_kctl_yaml_as_node_add_and_remove_write_it(tmp_path: Path) -> None:
    import yaml

    from kctl.model.spec import default_spec_yaml, load_cluster
    from kctl.monitor.service import Monitor

    path = tmp_path / "kctl.yaml"
    path.write_text(default_spec_yaml("follow"))
    lines: list[str] = []
    mon = Monitor(load_cluster(path)[0], tmp_path / "state", spec_file=path, log=lines.append)
    hosts = {e.node for e in mon.endpoints}
    assert mon.follow_spec() is False and lines == []  # unchanged: not even read as a spec

    data = yaml.safe_load(path.read_text())
    data["nodes"].append({"id": 4, "hostname": "logger4", "role": "observer", "broker": True})
    data["monitoring"]["alerts"] = {"disk": False}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert mon.follow_spec() is True
    assert {e.node for e in mon.endpoints} == hosts | {"logger4"}
    assert "logger4" in {n.hostname for n in mon.spec.nodes} and "disk" not in mon.tracker.rules
    assert "watching 4 node(s) (added logger4)" in lines[-1] and "restart" not in lines[-1], lines

    path.write_text("nodes: [\n")  # mid-edit: logged once, the last good spec kept
    assert mon.follow_spec() is False and mon.follow_spec() is False
    assert len(mon.spec.nodes) == 4 and sum("does not load" in line for line in lines) == 1, lines

    data["nodes"] = data["nodes"][:3]
    data["monitoring"]["interval_seconds"] = 7
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert mon.follow_spec() is True and {e.node for e in mon.endpoints} == hosts
    assert "(removed logger4)" in lines[-1] and "monitoring.interval_seconds take(s) effect at a restart" \
        in lines[-1], lines
    assert mon.interval_s != 7

    other = dict(data, name="another")
    path.write_text(yaml.safe_dump(other, sort_keys=False))
    assert mon.follow_spec() is False and mon.spec.name == "follow" and "kept watching 'follow'" in lines[-1]


def test_each_round_looks_at_kctl_yaml_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.monitor_receivers import monitor

    mon = monitor(tmp_path, monkeypatch, [])
    looked: list[int] = []
    monkeypatch.setattr(mon, "follow_spec", lambda: looked.append(mon.rounds) or False)
    mon.round(with_groups=False)
    mon.round(with_groups=False)
    assert looked == [0, 1]
