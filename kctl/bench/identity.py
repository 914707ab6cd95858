"""Benchmark of the identity check every connecting command pays (issue 14).

Against a one-node test cluster (kctl.testing), in one process, medians of N runs:
- the check alone (``kctl.cluster.identity.verify``: one Metadata request, Docker not asked);
- ``topic list``'s domain call without the check, and with it (what `kctl topic list` now does).
Printed only: ``python -m kctl.bench.identity [-n N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from kctl.cluster import identity
from kctl.kafka import topics
from kctl.kafka.client import Target
from kctl.testing.cluster import KafkaCluster


def _median_ms(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=30, help="runs per measurement")
    args = ap.parse_args(argv)
    with KafkaCluster(nodes=1, quick_jit=False, follower_wait_ms=None) as c:
        spec, state = c.spec, c.state_dir
        identity.verify(spec, state)  # records the identity (the testing API does not run `kctl up`)
        check = _median_ms(lambda: identity.verify(spec, state), args.n)
        plain = _median_ms(lambda: topics.list_topics(Target.of(spec)), args.n)
        both = _median_ms(lambda: (identity.verify(spec, state), topics.list_topics(Target.of(spec))), args.n)
    print(f"identity check alone (median of {args.n}): {check:.2f} ms")
    print(f"topic list without the check: {plain:.2f} ms; with it: {both:.2f} ms "
          f"(+{both - plain:.2f} ms, {100 * (both - plain) / plain:.0f}%)")


if __name__ == "__main__":
    main()
