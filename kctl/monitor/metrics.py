"""The figures an operator checks first, from the exporters on every node (``kctl metrics``).

Each exporter is scraped twice, ``window`` seconds apart; counters become rates over that window, gauges are
read from the second scrape. The exporters' text is parsed by prometheus-client's parser. The names are the
JMX exporter rules' (templates/jmx-exporter.yaml.j2) and ZooKeeper's PrometheusMetricsProvider's; the
derivations:

- broker messages, bytes in and out per second: ``kafka_server_brokertopicmetrics_*_total`` without a topic
  label (the broker's total), as a rate;
- produce and fetch p99: the 0.99 quantile of ``kafka_network_requestmetrics_totaltimems`` for the requests
  ``Produce``, ``FetchConsumer`` (clients) and ``FetchFollower`` (replication), in ms (Kafka's own
  histogram over its recent samples);
- request-handler idle %: Kafka marks its idle meter with nanoseconds idle per handler thread, so the
  counter's rate divided by 1e9 is the idle fraction over the window; network-processor idle % is a gauge;
- ISR shrinks and expands per minute: rates times 60; log size on disk: the sum of ``kafka_log_log_size``;
- ZooKeeper fsync time: the mean over the window (the change of ``fsynctime_sum`` over that of its count).
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kctl.wait import ticks

Labels = Mapping[str, str]
Samples = dict[str, list[tuple[dict[str, str], float]]]

DEFAULT_WINDOW_S = 5.0
# Prometheus' own default scrape timeout: a broker's exporter walks about 5,000 samples of JMX, which on two
# busy cores has taken more than 5 s.
SCRAPE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Endpoint:
    node_id: int
    node: str
    service: str  # "kafka" or "zookeeper"
    url: str


@dataclass
class Scrape:
    endpoint: Endpoint
    # time.monotonic() halfway through the request: the exporter reads its counters while it answers, and a
    # request on a busy machine can take a second (the answer's parsing comes after, and is not counted)
    at: float
    samples: Samples = field(default_factory=dict)
    error: str | None = None
    wall: float = field(default_factory=time.time)  # the same moment, seconds since the epoch
    # When the request went out and its answer came back (seconds since the epoch): the exporter read its counters
    # somewhere between the two, so a window's true span lies between the inner and the outer of these.
    sent_wall: float | None = None
    received_wall: float | None = None


def parse(text: str) -> Samples:
    """Exporter text -> sample name -> [(labels, value)], every sample of every family."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def fetch(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - kctl's own exporter URLs
        body: bytes = resp.read()
    return body.decode("utf-8", errors="replace")


def scrape(endpoint: Endpoint, timeout_s: float = SCRAPE_TIMEOUT_S,
           fetcher: Callable[[str, float], str] = fetch) -> Scrape:
    """One scrape; an exporter that does not answer gives a Scrape with ``error`` set, never an exception."""
    sent, sent_wall = time.monotonic(), time.time()
    try:
        text = fetcher(endpoint.url, timeout_s)
    except (OSError, urllib.error.URLError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        return Scrape(endpoint, time.monotonic(), error=f"{endpoint.url}: {reason}")
    received_wall = time.time()
    at, wall = (sent + time.monotonic()) / 2, (sent_wall + received_wall) / 2
    try:
        samples = parse(text)
    except ValueError as exc:
        return Scrape(endpoint, at, error=f"{endpoint.url}: not Prometheus text ({exc})", wall=wall)
    return Scrape(endpoint, at, samples, wall=wall, sent_wall=sent_wall, received_wall=received_wall)


def scrape_all(endpoints: Iterable[Endpoint], timeout_s: float = SCRAPE_TIMEOUT_S,
               fetcher: Callable[[str, float], str] = fetch) -> list[Scrape]:
    eps = list(endpoints)
    if not eps:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(eps))) as pool:
        return list(pool.map(lambda e: scrape(e, timeout_s, fetcher), eps))


# --- reading samples ------------------------------------------------------------------------------------


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` whose labels are exactly ``labels``; None when absent."""
    for lab, v in samples.get(name, ()):
        if lab == labels:
            return v
    return None


def matching(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the first sample of ``name`` that carries ``labels`` (and maybe more)."""
    for lab, v in samples.get(name, ()):
        if all(lab.get(k) == want for k, want in labels.items()):
            return v
    return None


def total(samples: Samples, name: str) -> float | None:
    rows = samples.get(name)
    return sum(v for _, v in rows) if rows else None


def rate(before: float | None, after: float | None, seconds: float) -> float | None:
    """A counter's rate; a counter that went back (the process restarted) counts from 0."""
    if after is None or seconds <= 0:
        return None
    start = before if before is not None and before <= after else 0.0
    return (after - start) / seconds


def _r(x: float | None, digits: int = 2) -> float | None:
    if x is None or x != x:  # NaN: a gauge with nothing measured yet
        return None
    return round(x, digits)


BROKER_TOPIC = "kafka_server_brokertopicmetrics_{}_total"
REQUEST_TIME = "kafka_network_requestmetrics_totaltimems"
HANDLER_IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_count_total"
NETWORK_IDLE = "kafka_network_socketserver_networkprocessoravgidlepercent"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
UNDER_MIN_ISR = "kafka_server_replicamanager_underminisrpartitioncount"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
ACTIVE_CONTROLLER = "kafka_controller_kafkacontroller_activecontrollercount"
ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
ISR_EXPANDS = "kafka_server_replicamanager_isrexpands_total"
LOG_SIZE = "kafka_log_log_size"


def broker_figures(before: Samples, after: Samples, seconds: float) -> dict[str, Any]:
    """One broker's figures over ``seconds`` between two scrapes."""
    def counter_rate(name: str, scale: float = 1.0) -> float | None:
        r = rate(value(before, name), value(after, name), seconds)
        return None if r is None else r * scale

    idle = counter_rate(HANDLER_IDLE)
    net_idle = value(after, NETWORK_IDLE)
    active = value(after, ACTIVE_CONTROLLER)
    return {
        "messages_in_per_sec": _r(counter_rate(BROKER_TOPIC.format("messagesin"))),
        "bytes_in_per_sec": _r(counter_rate(BROKER_TOPIC.format("bytesin"))),
        "bytes_out_per_sec": _r(counter_rate(BROKER_TOPIC.format("bytesout"))),
        "produce_p99_ms": _r(matching(after, REQUEST_TIME, request="Produce", quantile="0.99")),
        "fetch_consumer_p99_ms": _r(matching(after, REQUEST_TIME, request="FetchConsumer", quantile="0.99")),
        "fetch_follower_p99_ms": _r(matching(after, REQUEST_TIME, request="FetchFollower", quantile="0.99")),
        "request_handler_idle_pct": _r(None if idle is None else min(100.0, idle / 1e7), 1),
        "network_processor_idle_pct": _r(None if net_idle is None else min(100.0, net_idle * 100), 1),
        "under_replicated_partitions": _int(value(after, UNDER_REPLICATED)),
        "under_min_isr_partitions": _int(value(after, UNDER_MIN_ISR)),
        "offline_partitions": _int(value(after, OFFLINE)),
        "active_controller": None if active is None else active >= 1,
        "isr_shrinks_per_min": _r(counter_rate(ISR_SHRINKS, 60.0)),
        "isr_expands_per_min": _r(counter_rate(ISR_EXPANDS, 60.0)),
        "log_size_bytes": _int(total(after, LOG_SIZE)),
    }


def zookeeper_figures(before: Samples, after: Samples, seconds: float) -> dict[str, Any]:
    """One ZooKeeper's figures (its latencies are ZooKeeper's own, since its last reset)."""
    d_sum = rate(value(before, "fsynctime_sum"), value(after, "fsynctime_sum"), 1.0)
    d_count = rate(value(before, "fsynctime_count"), value(after, "fsynctime_count"), 1.0)
    return {
        "avg_latency_ms": _r(value(after, "avg_latency")),
        "max_latency_ms": _r(value(after, "max_latency")),
        "outstanding_requests": _int(value(after, "outstanding_requests")),
        "alive_connections": _int(value(after, "num_alive_connections")),
        "znode_count": _int(value(after, "znode_count")),
        "watch_count": _int(value(after, "watch_count")),
        "fsync_ms": _r(d_sum / d_count) if d_sum is not None and d_count else None,
        "fsyncs_per_sec": _r(None if d_count is None or seconds <= 0 else d_count / seconds),
    }


def _int(x: float | None) -> int | None:
    return None if x is None or x != x else int(x)


BROKER_COLUMNS = ("messages_in_per_sec", "bytes_in_per_sec", "bytes_out_per_sec", "produce_p99_ms",
                  "fetch_consumer_p99_ms", "request_handler_idle_pct", "network_processor_idle_pct",
                  "under_replicated_partitions", "under_min_isr_partitions", "offline_partitions",
                  "active_controller", "isr_shrinks_per_min", "log_size_bytes")
ZOOKEEPER_COLUMNS = ("avg_latency_ms", "max_latency_ms", "outstanding_requests", "alive_connections",
                     "znode_count", "watch_count", "fsync_ms")


def report(first: list[Scrape], second: list[Scrape]) -> dict[str, Any]:
    """``kctl metrics -o json``: the window, one row per broker and per ZooKeeper, and what did not answer."""
    by_url = {s.endpoint.url: s for s in first}
    brokers: list[dict[str, Any]] = []
    zookeepers: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    spans: list[float] = []
    for after in second:
        ep = after.endpoint
        before = by_url.get(ep.url)
        if before is None or before.error or after.error:
            errors.append({"node": ep.node, "id": ep.node_id, "service": ep.service, "url": ep.url,
                           "error": (after.error or (before.error if before else None) or "no first scrape")})
            continue
        seconds = after.at - before.at
        spans.append(seconds)
        row: dict[str, Any] = {"id": ep.node_id, "node": ep.node, "window_seconds": round(seconds, 3)}
        if ep.service == "kafka":
            row.update(broker_figures(before.samples, after.samples, seconds))
            brokers.append(row)
        else:
            row.update(zookeeper_figures(before.samples, after.samples, seconds))
            zookeepers.append(row)
    window = round(sum(spans) / len(spans), 2) if spans else 0.0
    firsts = [s.wall for s in first if not s.error]
    seconds_ = [s.wall for s in second if not s.error]
    return {"window_seconds": window,
            # When the window began and ended (seconds since the epoch, the mean of each round's answers).
            "window_start": round(sum(firsts) / len(firsts), 3) if firsts else None,
            "window_end": round(sum(seconds_) / len(seconds_), 3) if seconds_ else None,
            # Between which moments each round's counters were read: the first request out and the last answer
            # back (a scrape of a busy JVM can take a second, which is an eighth of a short window).
            "window_start_between": _round_span(first), "window_end_between": _round_span(second),
            "brokers": sorted(brokers, key=lambda r: r["id"]),
            "zookeepers": sorted(zookeepers, key=lambda r: r["id"]), "errors": errors}


def _round_span(scrapes: list[Scrape]) -> list[float] | None:
    sent = [s.sent_wall for s in scrapes if not s.error and s.sent_wall is not None]
    back = [s.received_wall for s in scrapes if not s.error and s.received_wall is not None]
    return [round(min(sent), 3), round(max(back), 3)] if sent and back else None


def measure(endpoints: list[Endpoint], window_s: float = DEFAULT_WINDOW_S, *, reports: int = 1,
            fetcher: Callable[[str, float], str] = fetch,
            sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
    """Scrapes of every endpoint ``window_s`` apart, and the figures between each two in a row: ``reports``
    reports (0: until the caller stops), each window starting where the one before ended.

    An exporter that missed a round (a busy JVM's scrape past its timeout) is named in that window's errors, and
    the next window it answers in is measured from its last answer, its ``window_seconds`` the longer span (as
    Prometheus' rate() takes a missed scrape): one slow answer costs one window's figures, not two."""
    rounds = ticks(window_s, count=reports + 1 if reports else None, sleep=sleep)
    next(rounds)
    first = scrape_all(endpoints, fetcher=fetcher)
    for _ in rounds:
        second = scrape_all(endpoints, fetcher=fetcher)
        yield report(first, second)
        first = carry(first, second)


def carry(first: list[Scrape], second: list[Scrape]) -> list[Scrape]:
    """The next window's first round: each endpoint's newest answer (``second``'s, or ``first``'s where
    ``second``'s scrape failed and ``first``'s did not)."""
    before = {s.endpoint.url: s for s in first}
    return [s if not s.error or s.endpoint.url not in before or before[s.endpoint.url].error
            else before[s.endpoint.url] for s in second]
