"""The benchmarks' bulk load: as many records as asked, as fast as one producer takes them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def produce_all(p: Any, topic: str, records: int, value: bytes | Callable[[int], bytes],
                key: Callable[[int], bytes] | None = None, flush_s: float = 120.0) -> float:
    """Produce ``records`` records (a full queue waits for room) and flush; returns the seconds it took.
    ``value`` and ``key`` may be functions of the record's number."""
    t0 = time.monotonic()
    for i in range(records):
        v = value(i) if callable(value) else value
        k = key(i) if key is not None else None
        while True:
            try:
                p.produce(topic, value=v, key=k)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(flush_s) != 0:
        raise RuntimeError(f"records still queued after {flush_s:.0f} s")
    return time.monotonic() - t0
