"""Pure generation of nginx access-log events wrapped as filebeat JSON, and their ground truth.

The line format is nginx's ``combined`` plus the trailing ``"$http_x_forwarded_for"``
field, exactly as in the filebeat record this project was seeded with::

    $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
        "$http_referer" "$http_user_agent" "$http_x_forwarded_for"

Everything here is deterministic for a given seed and start time; nothing talks
to Kafka (see :mod:`kctl.agent.produce`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

LOG_PATH = "/var/log/nginx/access.log"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

_STATUSES = (200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 304, 304, 301, 404, 404, 500, 502, 503)
_METHODS = ("GET",) * 8 + ("POST", "HEAD")
_PATHS = (
    "/", "/index.html", "/api/v1/orders", "/api/v1/users/{n}", "/static/app.{n}.js", "/static/style.css",
    "/images/logo.png", "/search?q=kafka+{n}", "/login", "/health", "/favicon.ico", "/products/{n}",
)
_AGENTS = (
    "curl/7.29.0",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "kube-probe/1.29",
    "python-requests/2.31.0",
)
_REFERERS = ("-", "-", "-", "https://example.com/", "https://www.google.com/", "https://example.com/search?q=logs")


@dataclass(frozen=True)
class Event:
    """One generated event: the Kafka key and value, plus the fields the line was built from."""

    key: str
    value: str
    host: str
    time: dt.datetime  # request time ($time_local), whole seconds, UTC
    status: int
    bytes: int
    line: str


def format_time_local(t: dt.datetime) -> str:
    """nginx's ``$time_local`` (``17/Apr/2019:09:45:19 +0000``), locale-independent."""
    t = t.astimezone(dt.timezone.utc)
    return f"{t.day:02d}/{_MONTHS[t.month - 1]}/{t.year}:{t:%H:%M:%S} +0000"


def format_timestamp(t: dt.datetime) -> str:
    """filebeat's ``@timestamp``: ISO-8601 UTC with milliseconds and a Z."""
    t = t.astimezone(dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def host_names(count: int, seed: int) -> list[str]:
    """Container-id-like host names (12 hex digits), as filebeat reports them in Docker."""
    return [hashlib.sha256(f"kctl-host-{seed}-{i}".encode()).hexdigest()[:12] for i in range(count)]


def nginx_line(
    *,
    remote_addr: str,
    time: dt.datetime,
    method: str,
    path: str,
    status: int,
    body_bytes: int,
    referer: str = "-",
    user_agent: str = "-",
    x_forwarded_for: str = "-",
    remote_user: str = "-",
    protocol: str = "HTTP/1.1",
) -> str:
    return (
        f'{remote_addr} - {remote_user} [{format_time_local(time)}] "{method} {path} {protocol}" '
        f'{status} {body_bytes} "{referer}" "{user_agent}" "{x_forwarded_for}"'
    )


def filebeat_event(
    line: str, *, host: str, timestamp: dt.datetime, offset: int, topic: str, path: str = LOG_PATH
) -> dict[str, object]:
    """The filebeat 7 JSON envelope of one log line (fields as in the seed's record)."""
    return {
        "@timestamp": format_timestamp(timestamp),
        "@metadata": {"beat": "filebeat", "type": "_doc", "version": "7.0.0", "topic": topic},
        "message": line,
        "log": {"offset": offset, "file": {"path": path}},
        "input": {"type": "log"},
        "ecs": {"version": "1.0.0"},
        "host": {"name": host, "hostname": host, "architecture": "x86_64", "containerized": True},
        "agent": {"type": "filebeat", "version": "7.0.0", "hostname": host},
    }


def _ip(rng: random.Random) -> str:
    return f"{rng.choice((10, 172, 192, 203))}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def generate(
    count: int,
    *,
    seed: int = 0,
    hosts: int = 3,
    start: dt.datetime | None = None,
    rate: float = 100.0,
    topic: str = "access-logs",
) -> Iterator[Event]:
    """``count`` events, ``rate`` per second of simulated request time from ``start``.

    Hosts take turns at random; each host's lines are in time order and its
    ``log.offset`` grows by the line length plus newline, as filebeat reports it.
    """
    if count < 0 or hosts < 1 or rate <= 0:
        raise ValueError("count >= 0, hosts >= 1 and rate > 0 are required")
    rng = random.Random(seed)
    start = (start or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    names = host_names(hosts, seed)
    offsets = dict.fromkeys(names, 0)
    last: dict[str, dt.datetime] = {}
    for i in range(count):
        host = rng.choice(names)
        t_exact = start + dt.timedelta(seconds=i / rate)
        t = t_exact.replace(microsecond=0)
        t = max(t, last.get(host, t))
        last[host] = t
        status = rng.choice(_STATUSES)
        method = rng.choice(_METHODS)
        body = 0 if status == 304 or method == "HEAD" else int(rng.lognormvariate(7.5, 1.2))
        path = rng.choice(_PATHS).format(n=rng.randrange(1000))
        xff = _ip(rng) if rng.random() < 0.3 else "-"
        line = nginx_line(
            remote_addr=_ip(rng), time=t, method=method, path=path, status=status, body_bytes=body,
            referer=rng.choice(_REFERERS), user_agent=rng.choice(_AGENTS), x_forwarded_for=xff,
        )
        shipped = t_exact + dt.timedelta(milliseconds=rng.randrange(50, 2000))
        value = filebeat_event(line, host=host, timestamp=shipped, offset=offsets[host], topic=topic)
        offsets[host] += len(line.encode()) + 1
        yield Event(key=host, value=json.dumps(value, separators=(",", ":")), host=host, time=t,
                    status=status, bytes=body, line=line)


def malformed(count: int, *, seed: int = 0) -> list[str]:
    """Values the job must send to the dead-letter output, one of each kind in turn."""
    rng = random.Random(seed ^ 0x5EED)
    kinds: list[Callable[[], str]] = [
        lambda: '{"@timestamp": "2019-04-17T09:45:22.361Z", "message": ',  # truncated JSON
        lambda: json.dumps({"@timestamp": "2019-04-17T09:45:22.361Z", "host": {"name": "x"}}),  # no message
        lambda: json.dumps({"message": "GET / HTTP/1.1 this is not an access log", "host": {"name": "x"}}),
        lambda: "garbage line " + str(rng.randrange(10**6)),  # bare text, not nginx
        lambda: '1.2.3.4 - - [99/Foo/2019:99:99:99 +0000] "GET / HTTP/1.1" 200 1 "-" "-" "-"',  # bad time
        lambda: "",  # empty value
    ]
    return [kinds[i % len(kinds)]() for i in range(count)]


Key = tuple[dt.datetime, str, int]


def ground_truth(events: Iterable[Event]) -> dict[Key, tuple[int, int]]:
    """Exact (requests, bytes) per (1-minute window start, host, status) of generated events."""
    out: dict[Key, tuple[int, int]] = {}
    for e in events:
        w = e.time.replace(second=0, microsecond=0)
        k = (w, e.host, e.status)
        r, b = out.get(k, (0, 0))
        out[k] = (r + 1, b + e.bytes)
    return out


def malformed_records(
    records: Iterable[tuple[str | None, str]], count: int, *, seed: int = 0
) -> Iterator[tuple[str | None, str]]:
    """``records`` with ``count`` malformed values spread evenly among them (keys None)."""
    bad = malformed(count, seed=seed)
    if not bad:
        yield from records
        return
    every = 7
    i = 0
    for i, rec in enumerate(records):
        yield rec
        if bad and i % every == every - 1:
            yield None, bad.pop(0)
    for b in bad:
        yield None, b
