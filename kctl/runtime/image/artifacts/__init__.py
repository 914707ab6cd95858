"""Where the Kafka distribution baked into the node image comes from.

In order: the operator's ``--kafka-dist`` (a ``.tgz`` or an extracted
directory), the cache, Apache's official tarball (checked against its
``.sha512``), and finally the same jars resolved from Maven Central with
generated ``bin/*.sh`` wrappers that match the tarball's script names.

Each source (:mod:`.apache`, :mod:`.central`, :mod:`.local`) is a
:class:`~kctl.runtime.image.artifacts.layout.Source`: it lays a distribution out in a work
directory or says it is out of reach. :func:`prepare_dist` takes the first that
answers, checks the result and installs it in the cache (:mod:`.layout`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from kctl import cache, contract
from kctl.errors import KctlError
from kctl.runtime.image.artifacts.apache import ApacheTarball
from kctl.runtime.image.artifacts.central import MavenCentral
from kctl.runtime.image.artifacts.layout import (
    MANIFEST,
    Dist,
    Progress,
    Source,
    cache_root,
    dist_name,
    finish_dist,
    intact,
    read_dist,
    say,
)
from kctl.runtime.image.artifacts.local import LocalDist

__all__ = ["MANIFEST", "Dist", "Source", "cache_root", "cached_dist", "dist_name", "prepare_dist", "using_dist"]

DEFAULT_SOURCES: tuple[Source, ...] = (ApacheTarball(), MavenCentral())


def cached_dist(kafka_version: str, scala_version: str) -> Dist | None:
    """The cached distribution for a version, without fetching anything."""
    return read_dist(cache_root() / dist_name(kafka_version, scala_version))


def prepare_dist(
    *,
    kafka_version: str = contract.DEFAULT_KAFKA_VERSION,
    scala_version: str = "2.13",
    kafka_dist: Path | None = None,
    refresh: bool = False,
    progress: Progress | None = None,
) -> Dist:
    """A ready distribution directory, from the cache or the first source that works."""
    if kafka_dist is not None:
        local = LocalDist(Path(kafka_dist))
        return _prepare(local.cache_name(), (local,), kafka_version, scala_version, refresh=False,
                        progress=progress)
    return _prepare(dist_name(kafka_version, scala_version), DEFAULT_SOURCES, kafka_version, scala_version,
                    refresh=refresh, progress=progress)


@contextmanager
def using_dist(
    *,
    kafka_version: str = contract.DEFAULT_KAFKA_VERSION,
    scala_version: str = "2.13",
    kafka_dist: Path | None = None,
    refresh: bool = False,
    progress: Progress | None = None,
) -> Iterator[Dist]:
    """:func:`prepare_dist`, and the distribution held for reading until the block ends (its cache entry's lock
    shared: :func:`kctl.cache.reading`): whatever copies, links or packs from it sees the whole of it, and a
    refill by another kctl (a refresh, an entry no longer current) waits. Read again under the lock, so the
    Dist yielded describes the files there."""

    for attempt in range(cache.ATTEMPTS):
        dist = prepare_dist(kafka_version=kafka_version, scala_version=scala_version, kafka_dist=kafka_dist,
                            refresh=refresh and attempt == 0, progress=progress)
        with cache.reading(dist.path, progress=progress):
            held = read_dist(dist.path)
            if held is not None and held.kafka_version == dist.kafka_version and held.current and intact(dist.path):
                yield held
                return
    raise KctlError(f"the cached Kafka distribution {dist.path} keeps changing under this kctl",
                    hint="another kctl keeps refreshing it (--refresh-dist?); run this again once it is done")


def _prepare(name: str, sources: Sequence[Source], kafka_version: str, scala_version: str, *, refresh: bool,
             progress: Progress | None) -> Dist:
    """The cache entry ``name``: used when it is whole and current, else made by the first source that answers
    (filled beside the entry under its lock and renamed into place whole: :func:`kctl.cache.fill_dir`)."""

    cached = cache_root() / name

    def usable(root: Path) -> bool:
        dist = read_dist(root)
        return dist is not None and dist.kafka_version == kafka_version and dist.current and intact(root)

    def make(work: Path) -> Path:
        for source in sources:
            found = source.fetch(work, kafka_version, scala_version, progress)
            if found is not None:
                break
        else:
            raise KctlError(f"no source could provide Kafka {kafka_version}",
                            f"pass --kafka-dist {dist_name(kafka_version, scala_version)}.tgz")
        root, origin = found
        finish_dist(root, kafka_version=kafka_version, scala_version=scala_version, source=source.name,
                    origin=origin)
        return root

    for attempt in range(3):
        if not (refresh and attempt == 0) and usable(cached):
            dist = read_dist(cached)
            if dist is not None:  # (None: another process swapped a new entry in this very moment)
                if attempt == 0:
                    say(progress, f"using the cached Kafka distribution {cached} (source: {dist.source})")
                return dist
        cache.fill_dir(cached, make, complete=usable, refresh=refresh and attempt == 0, progress=progress)
    raise KctlError(f"the cached Kafka distribution {cached} keeps changing under this kctl",
                    hint="another kctl keeps refreshing it (--refresh-dist?); run this again once it is done")
