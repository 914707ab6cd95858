"""`make bench`: every benchmark in one run, each printing its figures and rewriting its
section of docs/benchmarks.md. The image must be built already (`kctl image build`);
`--image` also times cold and warm image builds.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--image", action="store_true", help="also time image builds (minutes)")
    ap.add_argument("--records", type=int, default=200_000, help="records for the produce/consume benchmark")
    ap.add_argument("--events", type=int, default=50_000, help="events for the pipeline benchmark")
    ap.add_argument("--security", action="store_true", help="also PLAINTEXT vs SASL_SSL (two more clusters)")
    args = ap.parse_args(argv)
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

    from kctl.bench import clients as kafka_bench
    from kctl.bench import stream as stream_bench
    from kctl.bench import up as bench_up
    from kctl.testing import KafkaCluster

    if args.image:
        from kctl.bench import image as bench_image

        bench_image.main([])
    bench_up.main([])
    from kctl.bench import degraded as bench_degraded

    bench_degraded.main([])
    from kctl.bench import nodes as bench_nodes

    bench_nodes.main([])
    from kctl.bench import restart as bench_restart

    bench_restart.main([])
    from kctl.bench import kraft as bench_kraft

    bench_kraft.main([])
    from kctl.bench import mirror as bench_mirror

    bench_mirror.main([])
    from kctl.bench import monitor as bench_monitor

    bench_monitor.main([])
    from kctl.bench import store as bench_store

    bench_store.main([])
    from kctl.bench import console as bench_console

    try:
        import fastapi  # noqa: F401
    except ImportError:
        print("bench: no console extra (pip install 'kctl[console]'): the console's page times are skipped",
              file=sys.stderr)
    else:
        bench_console.main([])
    with KafkaCluster(nodes=3, quick_jit=False, follower_wait_ms=None) as cluster:
        kafka_bench.main(["-f", str(cluster.spec_file), "-n", str(args.records)])
        stream_bench.main(["--bootstrap-servers", cluster.bootstrap_servers, "--events", str(args.events)])
        from kctl.bench import cost as cost_bench

        cost_bench.main(["--bootstrap-servers", cluster.bootstrap_servers])
    from kctl.bench import batch as batch_bench

    batch_bench.main([])
    from kctl.bench import spark as spark_bench

    spark_bench.main([])
    if args.security:
        from kctl.bench import security as security_bench

        security_bench.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
