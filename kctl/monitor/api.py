"""The monitor's HTTP API on 127.0.0.1 (docs/monitoring.md): Burrow's consumer endpoints and Prometheus'
``/metrics``, served by the standard library's WSGI server (a thread per request) in the monitor's process.

- ``GET /v3/kafka``: the cluster this monitor watches;
- ``GET /v3/kafka/<cluster>/consumer``: its consumer groups;
- ``GET /v3/kafka/<cluster>/consumer/<group>/status``: the group's status with the partitions that are not OK;
- ``GET /v3/kafka/<cluster>/consumer/<group>/lag``: the same with every partition;
- ``GET /metrics``: what kctl derives (group status and total lag per group, alert states, the monitor's
  rounds) in Prometheus' text format, written by prometheus-client;
- ``GET /health``: the monitor's own state (``kctl monitor status`` reads it).

The JSON keeps Burrow's field names (``error``, ``message``, ``status.partitions``, ``maxlag``, ``totallag``),
so a tool written for Burrow reads it.

Listening on 127.0.0.1 keeps other machines out, not a web page in the operator's browser: a page on a name
the attacker re-binds to 127.0.0.1 (DNS rebinding) would be same-origin with the API and could read it. So
every request's ``Host`` must name the API as the loopback addresses do (``127.0.0.1:PORT``,
``localhost:PORT``, ``[::1]:PORT``) or be one of ``monitoring.api_hosts``; any other is answered 421
(Misdirected Request), a missing one 400, before anything is read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from kctl.model.spec import ClusterSpec
from kctl.monitor.lag import Status

StartResponse = Callable[..., Any]
STATUS_VALUE = {s.name: int(s) for s in Status}


class Monitor(Protocol):
    """What the API reads of the monitor (:class:`kctl.monitor.service.Monitor`)."""

    spec: ClusterSpec
    rounds: int
    round_seconds: float
    groups_seconds: float
    interval_s: float
    window: int

    def snapshot(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any], float | None]: ...

    def open_alerts(self) -> list[Mapping[str, Any]]: ...

    def disk_usage(self) -> dict[str, float]: ...

    def certificate_days(self) -> dict[str, float]: ...


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def _partition(p: dict[str, Any]) -> dict[str, Any]:
    return {"topic": p["topic"], "partition": p["partition"], "status": p["status"], "current_lag": p["lag"],
            "complete": p["complete"], "end": {"offset": p["offset"]}}


def burrow_status(cluster: str, doc: dict[str, Any], *, every_partition: bool) -> dict[str, Any]:
    parts = doc["partitions"] if every_partition else doc["problems"]
    return {
        "cluster": cluster,
        "group": doc["group"],
        "status": doc["burrow_status"],
        "worst_status": doc["status"],
        "complete": doc["complete_fraction"],
        "partitions": [_partition(p) for p in parts],
        "partition_count": len(doc["partitions"]),
        "maxlag": _partition(doc["max_lag"]) if doc["max_lag"] else None,
        "totallag": doc["total_lag"],
        "evaluated_at_ms": doc.get("at_ms"),  # the moment judged (not Burrow's): the group's latest snapshot
    }


def prometheus_text(monitor: Monitor) -> bytes:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    docs, _, last = monitor.snapshot()
    reg = CollectorRegistry()
    cluster = monitor.spec.name
    status = Gauge("kctl_consumer_group_status", "Burrow status of a consumer group: 1 OK, 2 WARN, 3 ERR, 4 STOP,"
                   " 5 STALL, 6 REWIND (the worst partition's)", ["cluster", "group"], registry=reg)
    lag = Gauge("kctl_consumer_group_total_lag", "Total lag of a consumer group in records",
                ["cluster", "group"], registry=reg)
    complete = Gauge("kctl_consumer_group_window_complete", "Filled fraction of the group's evaluation window",
                     ["cluster", "group"], registry=reg)
    for g, d in docs.items():
        status.labels(cluster, g).set(STATUS_VALUE[d["status"]])
        lag.labels(cluster, g).set(d["total_lag"])
        complete.labels(cluster, g).set(d["complete_fraction"])
    alerts = Gauge("kctl_alert_open", "1 for each open alert", ["cluster", "alert", "subject"], registry=reg)
    for a in monitor.open_alerts():
        alerts.labels(cluster, a["rule"], a["subject"]).set(1)
    disk = Gauge("kctl_broker_disk_used_percent", "Used share of a broker's data disk (engine compose)",
                 ["cluster", "broker"], registry=reg)
    for subject, pct in monitor.disk_usage().items():
        disk.labels(cluster, subject).set(round(pct, 2))
    days = Gauge("kctl_certificate_days_left", "Days until a certificate of the secured profile expires (the CA"
                 " or a container's)", ["cluster", "certificate"], registry=reg)
    for name, left in monitor.certificate_days().items():
        days.labels(cluster, name).set(left)
    Gauge("kctl_monitor_rounds", "Sampling rounds done by this monitor's store", ["cluster"],
          registry=reg).labels(cluster).set(monitor.rounds)
    Gauge("kctl_monitor_last_round_timestamp_seconds", "When the last round ended", ["cluster"],
          registry=reg).labels(cluster).set(last or 0)
    Gauge("kctl_monitor_round_seconds", "How long the last round took", ["cluster"],
          registry=reg).labels(cluster).set(monitor.round_seconds)
    return bytes(generate_latest(reg))


def _split_host(host: str) -> tuple[str, str | None]:
    """``name:port`` -> (name, port); ``[::1]:80`` -> ([::1], 80); a name alone -> (name, None)."""
    if host.startswith("["):
        close = host.find("]") + 1
        rest = host[close:]
        return host[:close], (rest[1:] if rest.startswith(":") else None)
    name, sep, port = host.rpartition(":")
    return (name, port) if sep else (host, None)


def allowed_host(host: str | None, port: int, extra: Iterable[str] = ()) -> bool:
    """Whether a request's Host header names this API: a loopback name on ``port``, or one of ``extra``
    (``name``: on any port; ``name:port``: that one)."""
    if not host:
        return False
    name, on = _split_host(host.strip().lower())
    if name in ("127.0.0.1", "localhost", "[::1]") and on == str(port):
        return True
    for e in extra:
        e_name, e_port = _split_host(e)
        if name == e_name and (e_port is None or e_port == on):
            return True
    return False


def app(monitor: Monitor, port: int | None = None) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The API's WSGI application; ``port``: the one it listens on (default ``monitoring.monitor_port``)."""
    cluster = monitor.spec.name
    port = port or monitor.spec.monitoring.monitor_port
    extra = tuple(monitor.spec.monitoring.api_hosts)

    def respond(start: StartResponse, code: str, body: Any, ctype: str = "application/json") -> list[bytes]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        start(code, [("Content-Type", ctype), ("Content-Length", str(len(data))),
                     ("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-store")])
        return [data]

    def not_found(start: StartResponse, message: str) -> list[bytes]:
        return respond(start, "404 Not Found", {"error": True, "message": message})

    def handle(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST")
        if not host:
            return respond(start, "400 Bad Request", {"error": True, "message": "no Host header"})
        if not allowed_host(host, port, extra):
            return respond(start, "421 Misdirected Request", {
                "error": True, "message": f"this API answers to 127.0.0.1:{port}, localhost:{port} and [::1]:{port}"
                                          f" (and monitoring.api_hosts), not to Host {host[:100]!r}"})
        if environ.get("REQUEST_METHOD") != "GET":
            return respond(start, "405 Method Not Allowed", {"error": True, "message": "GET only"})
        path = [p for p in environ.get("PATH_INFO", "").split("/") if p]
        if path == ["metrics"]:
            from prometheus_client import CONTENT_TYPE_LATEST

            return respond(start, "200 OK", prometheus_text(monitor), CONTENT_TYPE_LATEST)
        if path == ["health"]:
            docs, _, last = monitor.snapshot()
            return respond(start, "200 OK", {"error": False, "cluster": cluster, "rounds": monitor.rounds,
                                             "last_round": last, "interval_seconds": monitor.interval_s,
                                             "window": monitor.window, "groups": len(docs),
                                             "round_seconds": monitor.round_seconds,
                                             "groups_seconds": monitor.groups_seconds,
                                             "open_alerts": len(monitor.open_alerts()), "now": time.time()})
        if path[:2] != ["v3", "kafka"]:
            return not_found(start, "no such endpoint (see docs/monitoring.md)")
        if len(path) == 2:
            return respond(start, "200 OK", {"error": False, "message": "cluster list returned",
                                             "clusters": [cluster]})
        if path[2] != cluster:
            return not_found(start, f"cluster {path[2]} not found (this monitor watches {cluster})")
        docs, _, _ = monitor.snapshot()
        if path[3:] == ["consumer"]:
            return respond(start, "200 OK", {"error": False, "message": "consumer list returned",
                                             "consumers": sorted(docs)})
        if len(path) == 6 and path[3] == "consumer" and path[5] in ("status", "lag"):
            doc = docs.get(path[4])
            if doc is None:
                return not_found(start, f"consumer group {path[4]} not found")
            return respond(start, "200 OK", {"error": False, "message": f"consumer {path[5]} returned",
                                             "status": burrow_status(cluster, doc,
                                                                     every_partition=path[5] == "lag")})
        return not_found(start, "no such endpoint (see docs/monitoring.md)")

    return handle


def serve(monitor: Monitor, port: int) -> _Server:
    """Start the API on 127.0.0.1:``port`` in a daemon thread; ``shutdown()`` stops it."""
    server = make_server("127.0.0.1", port, app(monitor, port), server_class=_Server, handler_class=_QuietHandler)
    if not port:  # an ephemeral port (tests): the application checks the Host against the one bound
        server.set_app(app(monitor, server.server_port))
    threading.Thread(target=server.serve_forever, name="kctl-monitor-api", daemon=True).start()
    return server
