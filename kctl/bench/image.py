"""Measure the node image build and rewrite the "## Node image" section of docs/benchmarks.md.

    python -m kctl.bench.image [--with-base] [--docs PATH] [--no-write]

Builds go to throw-away tags (``kctl/node:bench-*``, removed afterwards), so
the image that running clusters use is not touched:

* dist (Maven): resolving Kafka from Maven Central into an empty kctl cache
  (Maven's own ~/.m2 as it is);
* cold build: ``nocache`` build from the base image (apt + dist + scripts);
* warm build: the same context again, every layer cached;
* script edit: one node script changed, only the last layers rebuilt;
* ensure_image (no-op): the hash check when the image is current;
* base (debootstrap): only with ``--with-base`` and as root.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import docker
import docker.errors

from kctl import contract
from kctl.bench.doc import add_output_args, publish, table
from kctl.runtime.image import artifacts as distmod
from kctl.runtime.image import build as image
from kctl.runtime.image import exporters

SECTION = "## Node image"
T = TypeVar("T")


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.monotonic()
    result = fn()
    return result, time.monotonic() - start


def _quiet(_msg: str) -> None:
    pass


def measure(client: docker.DockerClient, *, with_base: bool, log: Callable[[str], None]) -> dict[str, str]:
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="kctl-bench-") as tmp:
        saved = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = tmp
        try:
            log("resolving the distribution into an empty cache")
            fresh, secs = _timed(lambda: distmod.prepare_dist(progress=_quiet))
            results["dist"] = f"{secs:.1f} s (source: {fresh.source})"
        finally:
            if saved is None:
                del os.environ["XDG_CACHE_HOME"]
            else:
                os.environ["XDG_CACHE_HOME"] = saved

    dist = distmod.prepare_dist(progress=_quiet)
    if with_base:
        log("building the debootstrap base (kctl/debian:bench)")
        _, secs = _timed(lambda: image.build_local_base(client, tag="kctl/debian:bench", progress=_quiet))
        results["base"] = f"{secs:.1f} s"
        client.images.remove("kctl/debian:bench")
    base = image.resolve_base_image(client, progress=_quiet)
    labels = image.image_labels(dist, image.recipe_hash(), base)
    tags = [contract.image_tag(f"bench-{kind}") for kind in ("cold", "warm", "edit")]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-", dir=distmod.cache_root().parent) as tmp:
            # held for reading while laid out (kctl.cache): another kctl's refill of either waits
            with distmod.using_dist(progress=_quiet) as held, exporters.prepared(_quiet) as monitoring:
                ctx = image.assemble_context(Path(tmp) / "ctx", held, monitoring)
            log("cold build (no layer cache)")
            cold, secs = _timed(lambda: image.build_from_context(
                client, ctx, tag=tags[0], base_image=base, labels=labels, nocache=True, progress=_quiet))
            results["cold"] = f"{secs:.1f} s"
            results["size"] = f"{int(cold.attrs['Size']) / 1e6:.0f} MB"
            log("warm build (all layers cached)")
            _, secs = _timed(lambda: image.build_from_context(
                client, ctx, tag=tags[1], base_image=base, labels=labels, progress=_quiet))
            results["warm"] = f"{secs:.1f} s"
            with (ctx / "node" / "healthcheck").open("a") as f:
                f.write(f"# bench {time.time()}\n")
            log("rebuild after a script edit")
            _, secs = _timed(lambda: image.build_from_context(
                client, ctx, tag=tags[2], base_image=base, labels=labels, progress=_quiet))
            results["edit"] = f"{secs:.1f} s"
    finally:
        for tag in tags:
            try:
                client.images.remove(tag)
            except docker.errors.APIError:
                pass
    log("ensure_image")
    info = image.ensure_image(client, progress=_quiet)
    if info.built:
        results["ensure_note"] = "(it had to build first)"
    _, secs = _timed(lambda: image.ensure_image(client, progress=_quiet))
    results["noop"] = f"{secs * 1000:.0f} ms"
    results["tag_size"] = f"{info.size_bytes / 1e6:.0f} MB"
    results["base_image"] = base
    results["source"] = dist.source
    results["zk"] = dist.zookeeper_version
    return results


def render_section(r: dict[str, str], client_version: str) -> str:
    host = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    rows = [
        ("Kafka distribution into an empty kctl cache", r["dist"]),
        ("Base image with debootstrap + docker import", r.get("base", "not measured (run with --with-base)")),
        ("Cold build (no layer cache; apt + dist + scripts)", r["cold"]),
        ("Warm build (nothing changed, all layers cached)", r["warm"]),
        ("Rebuild after editing one node script", r["edit"]),
        ("`ensure_image()` when the image is current", r["noop"]),
        (f"Image size ({image.image_tag()})", r["tag_size"]),
    ]
    lines = [
        SECTION,
        "",
        f"Measured by `python -m kctl.bench.image` on {dt.date.today().isoformat()} "
        f"({host}, Docker engine {client_version}); base `{r['base_image']}`, "
        f"dist source `{r['source']}`, ZooKeeper {r['zk']}.",
        "",
        *table(("What", "Time / size"), rows),
        "",
        "The apt layer (Java 17, supervisor, netcat, procps) comes first and the Kafka",
        "distribution second, so editing a script under `kctl/runtime/image/node/` rebuilds only",
        "the last layers. Builds are reused while the `io.kctl.build-hash` label matches.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.image", description=__doc__.splitlines()[0])
    ap.add_argument("--with-base", action="store_true", help="also time the debootstrap base image (root)")
    add_output_args(ap)
    args = ap.parse_args(argv)
    client = docker.from_env(timeout=900)

    def log(msg: str) -> None:
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    results = measure(client, with_base=args.with_base, log=log)
    publish(render_section(results, str(client.version().get("Version", "?"))), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
