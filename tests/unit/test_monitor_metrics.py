"""kctl.monitor.metrics: the exporters' text (in the shapes a broker's JMX exporter and ZooKeeper's provider
give, copied from real scrapes) turned into an operator's figures over a window."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kctl.monitor import metrics as m


def broker_text(messages: float, bytes_in: float, idle_ns: float, shrinks: float, controller: int,
                urp: int = 0) -> str:
    return f"""\
# TYPE kafka_controller_kafkacontroller_activecontrollercount gauge
kafka_controller_kafkacontroller_activecontrollercount {controller}.0
# TYPE kafka_controller_kafkacontroller_offlinepartitionscount gauge
kafka_controller_kafkacontroller_offlinepartitionscount 0.0
# TYPE kafka_network_requestmetrics_totaltimems gauge
kafka_network_requestmetrics_totaltimems{{quantile="0.50",request="Produce"}} 3.0
kafka_network_requestmetrics_totaltimems{{quantile="0.99",request="FetchConsumer"}} 503.0
kafka_network_requestmetrics_totaltimems{{quantile="0.99",request="Produce"}} 119.0
# TYPE kafka_network_socketserver_networkprocessoravgidlepercent gauge
kafka_network_socketserver_networkprocessoravgidlepercent 0.21010526585646724
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total {bytes_in}
kafka_server_brokertopicmetrics_bytesin_total{{topic="orders"}} {bytes_in}
# TYPE kafka_server_brokertopicmetrics_messagesin_total counter
kafka_server_brokertopicmetrics_messagesin_total {messages}
kafka_server_brokertopicmetrics_messagesin_total{{topic="orders"}} {messages}
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_count_total counter
kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_count_total {idle_ns}
# TYPE kafka_server_replicamanager_isrshrinks_total counter
kafka_server_replicamanager_isrshrinks_total {shrinks}
# TYPE kafka_server_replicamanager_underreplicatedpartitions gauge
kafka_server_replicamanager_underreplicatedpartitions {urp}.0
# TYPE kafka_log_log_size gauge
kafka_log_log_size{{partition="0",topic="orders"}} 1000.0
kafka_log_log_size{{partition="1",topic="orders"}} 234.0
"""


ZK = """\
# TYPE avg_latency gauge
avg_latency {avg}
# TYPE max_latency gauge
max_latency 80.0
# TYPE znode_count gauge
znode_count 138.0
# TYPE num_alive_connections gauge
num_alive_connections 3.0
# TYPE fsynctime summary
fsynctime{{quantile="0.5",}} 0.0
fsynctime_count {count}
fsynctime_sum {total}
"""


def test_broker_rates_over_the_window_and_gauges_from_the_second_scrape() -> None:
    before = m.parse(broker_text(1000, 100_000, 7.0e9, 2, 0))
    # 5 s later: 2,000 more records, 200 kB, 4 s idle per handler thread (80 %), 1 ISR shrink.
    after = m.parse(broker_text(3000, 300_000, 11.0e9, 3, 1, urp=2))
    f = m.broker_figures(before, after, 5.0)
    assert f["messages_in_per_sec"] == 400.0  # the broker's total, not the total plus the topic's row
    assert f["bytes_in_per_sec"] == 40_000.0
    assert f["request_handler_idle_pct"] == 80.0
    assert f["network_processor_idle_pct"] == 21.0
    assert f["produce_p99_ms"] == 119.0 and f["fetch_consumer_p99_ms"] == 503.0
    assert f["isr_shrinks_per_min"] == 12.0
    assert f["under_replicated_partitions"] == 2 and f["offline_partitions"] == 0
    assert f["active_controller"] is True and f["log_size_bytes"] == 1234
    assert f["bytes_out_per_sec"] is None and f["under_min_isr_partitions"] is None  # not exported: unknown


def test_a_counter_that_went_back_counts_from_zero() -> None:
    # The broker restarted between the scrapes: its counters began again.
    f = m.broker_figures(m.parse(broker_text(5000, 1, 1e9, 0, 0)), m.parse(broker_text(50, 1, 1e9, 0, 0)), 10.0)
    assert f["messages_in_per_sec"] == 5.0


def test_zookeeper_fsync_is_the_mean_over_the_window() -> None:
    before = m.parse(ZK.format(avg=0.5, count=80.0, total=537.0))
    after = m.parse(ZK.format(avg=2.52, count=90.0, total=587.0))
    f = m.zookeeper_figures(before, after, 5.0)
    assert f["fsync_ms"] == 5.0 and f["fsyncs_per_sec"] == 2.0
    assert f["avg_latency_ms"] == 2.52 and f["max_latency_ms"] == 80.0
    assert f["znode_count"] == 138 and f["alive_connections"] == 3 and f["watch_count"] is None
    quiet = m.zookeeper_figures(after, after, 5.0)
    assert quiet["fsync_ms"] is None and quiet["fsyncs_per_sec"] == 0.0


def test_measure_reports_each_window_and_names_an_exporter_that_does_not_answer() -> None:
    eps = [m.Endpoint(1, "logger1", "kafka", "http://127.0.0.1:1/metrics"),
           m.Endpoint(1, "logger1", "zookeeper", "http://127.0.0.1:2/metrics"),
           m.Endpoint(2, "logger2", "kafka", "http://127.0.0.1:3/metrics")]
    scrapes: dict[str, int] = {}

    def fetcher(url: str, timeout: float) -> str:
        n = scrapes[url] = scrapes.get(url, 0) + 1
        if url.endswith(":3/metrics"):
            raise ConnectionRefusedError(111, "Connection refused")
        if url.endswith(":2/metrics"):
            return ZK.format(avg=1.0, count=10.0 * n, total=20.0 * n)
        return broker_text(1000 * n, 0, 0, 0, 1)

    reports: list[dict[str, Any]] = list(m.measure(eps, 0.0, reports=2, fetcher=fetcher, sleep=lambda s: None))
    assert len(reports) == 2 and scrapes["http://127.0.0.1:1/metrics"] == 3  # the second window reuses a scrape
    rep = reports[1]
    assert [b["id"] for b in rep["brokers"]] == [1] and rep["zookeepers"][0]["fsync_ms"] == 2.0
    assert rep["errors"] == [{"node": "logger2", "id": 2, "service": "kafka", "url": "http://127.0.0.1:3/metrics",
                              "error": "http://127.0.0.1:3/metrics: [Errno 111] Connection refused"}]
    assert rep["window_start"] <= rep["window_end"]


def test_an_exporter_that_missed_a_round_is_measured_from_its_last_answer() -> None:
    eps = [m.Endpoint(1, "logger1", "kafka", "http://127.0.0.1:1/metrics"),
           m.Endpoint(2, "logger2", "kafka", "http://127.0.0.1:2/metrics")]
    calls: dict[str, int] = {}

    def fetcher(url: str, timeout: float) -> str:
        n = calls[url] = calls.get(url, 0) + 1
        time.sleep(0.05)  # each round takes a measurable time
        if url.endswith(":2/metrics") and n == 2:
            raise TimeoutError("timed out")
        return broker_text(1000 * n, 0, 0, 0, 1)

    reports = list(m.measure(eps, 0.0, reports=3, fetcher=fetcher, sleep=lambda s: None))
    # Broker 2's second scrape timed out: the first window (rounds 1-2) lacks it...
    assert [[b["id"] for b in r["brokers"]] for r in reports] == [[1], [1, 2], [1, 2]]
    assert [e["id"] for e in reports[0]["errors"]] == [2] and "timed out" in reports[0]["errors"][0]["error"]
    assert reports[1]["errors"] == [] and reports[2]["errors"] == []
    one, two = reports[1]["brokers"]
    # ...and the second (rounds 2-3) measures it from its first-round answer: two rounds' span and records.
    assert two["window_seconds"] > one["window_seconds"]
    assert two["messages_in_per_sec"] * two["window_seconds"] == pytest.approx(2000, rel=0.05)
    assert one["messages_in_per_sec"] * one["window_seconds"] == pytest.approx(1000, rel=0.05)
    # One that never answered stays an error, with nothing carried.
    assert m.carry([], [m.Scrape(eps[0], 0.0, error="x")])[0].error == "x"


def test_the_report_says_between_which_moments_each_round_read_its_counters() -> None:
    eps = [m.Endpoint(1, "logger1", "kafka", "http://127.0.0.1:1/metrics"),
           m.Endpoint(2, "logger2", "kafka", "http://127.0.0.1:2/metrics")]
    calls: dict[str, int] = {}

    def fetcher(url: str, timeout: float) -> str:
        n = calls[url] = calls.get(url, 0) + 1
        time.sleep(0.05)  # a slow answer: the read happened somewhere within it
        return broker_text(2000 * n, 0, 0, 0, 1)

    rep = next(m.measure(eps, 0.0, fetcher=fetcher, sleep=lambda s: None))
    (s1, r1), (s2, r2) = rep["window_start_between"], rep["window_end_between"]
    assert s1 <= rep["window_start"] <= r1 <= s2 <= rep["window_end"] <= r2
    assert r1 - s1 >= 0.049 and r2 - s2 >= 0.049  # (rounded to milliseconds)
    # each broker's own window, so a rate times it is the count between that broker's two reads
    for b in rep["brokers"]:
        assert b["window_seconds"] > 0
        assert b["messages_in_per_sec"] * b["window_seconds"] == pytest.approx(2000, rel=0.01)


def test_text_that_is_not_prometheus_is_an_error_not_an_exception() -> None:
    ep = m.Endpoint(1, "logger1", "kafka", "http://127.0.0.1:1/metrics")
    s = m.scrape(ep, fetcher=lambda url, t: "<html>not metrics</html>")
    assert s.error is not None and s.error.startswith("http://127.0.0.1:1/metrics: not Prometheus text")


def test_a_scrape_is_timed_halfway_through_its_request_not_after_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = m.Endpoint(1, "logger1", "kafka", "http://127.0.0.1:1/metrics")
    request: dict[str, float] = {}

    def slow(url: str, timeout: float) -> str:
        request["start"], request["start_wall"] = time.monotonic(), time.time()
        time.sleep(0.2)  # the exporter read its counters somewhere in here
        request["end"], request["end_wall"] = time.monotonic(), time.time()
        return "# TYPE x counter\nx_total 1.0\n"

    real_parse = m.parse

    def slow_parse(text: str) -> m.Samples:
        time.sleep(0.2)  # a stamp taken after parsing would sit 0.1 s later than the request's middle
        return real_parse(text)

    monkeypatch.setattr(m, "parse", slow_parse)
    t0, w0 = time.monotonic(), time.time()
    s = m.scrape(ep, fetcher=slow)
    assert s.error is None and s.samples
    # the middle of send and receive, which lie between the call and the request's start, and between its end
    # and a few instructions later: however long the sleeps overran on a busy machine
    assert (t0 + request["end"]) / 2 <= s.at <= (request["start"] + request["end"]) / 2 + 0.02
    assert (w0 + request["end_wall"]) / 2 <= s.wall <= (request["start_wall"] + request["end_wall"]) / 2 + 0.02
