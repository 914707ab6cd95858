"""`kctl lag`'s answers as data: Burrow's evaluation of consumer groups from a fresh sampling (snapshots of their
committed offsets, paced by kctl.wait.ticks), from the running monitor's store (its latest sampling, judged with
its own parameters: what its API answers for that moment), and a group's stored history. The CLI parses the
flags and prints; nothing here prints."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kctl.errors import UsageError
from kctl.kafka import groups as kgroups
from kctl.kafka.client import Target
from kctl.model.spec import ClusterSpec
from kctl.monitor import process, sampler, sources
from kctl.monitor.store import Store, db_path
from kctl.wait import ticks

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """``30m`` -> 1800.0 seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if not m:
        raise UsageError(f"--since {text!r} is not a duration", hint="e.g. 90s, 30m, 1h, 2d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def group_names(target: Target, spec: ClusterSpec | None) -> sources.Listing:
    """Every group of every type (share and streams groups on a cluster of this kctl.yaml that has them)."""
    return sources.list_all(target, spec)


def fresh(target: Target, names: list[str], *, samples: int, interval: float, window: int, allowed_lag: int,
          watch: bool, count: int, spec: ClusterSpec | None = None,
          listing: sources.Listing | None = None) -> Iterator[list[dict[str, Any]]]:
    """Each report of a fresh sampling: a snapshot of every group each ``interval`` (its committed offsets; a
    share group's start offsets and lag), judged once ``samples`` snapshots are in (then after every further
    one with ``watch``, up to ``count`` reports; 0: until the caller stops). ``spec``: the cluster of this
    kctl.yaml (share and streams groups are sampled through Kafka's tools in a node); ``listing``: the groups'
    types as listed already (share and streams groups are listed again at each snapshot, for their states)."""
    if samples > window:
        raise UsageError(f"--samples {samples} is more than the window of {window}",
                         hint="raise --window, or take fewer samples")
    windows = sampler.Windows(size=window, allowed_lag=allowed_lag)
    listing = listing or sources.list_all(target, spec)
    tools = spec is not None and any(t in (sources.SHARE, sources.STREAMS) for g, t in listing.types.items()
                                     if g in names)
    reports = 0
    for done in ticks(interval):
        if tools and done:
            listing = sources.list_all(target, spec)
        got = sources.snapshots(target, spec, listing, names, int(time.time() * 1000))
        for g, exc in got.errors.items():
            if g not in windows.groups:
                raise exc  # a group this sampling never saw: its clear error
        for snap in got.snapshots:
            windows.observe(snap)
        if done + 1 >= samples:
            yield [sampler.to_json(windows.evaluate(g), state=windows.states.get(g), window=window,
                                   source="fresh sampling", type=windows.types.get(g)) for g in names]
            reports += 1
            if not watch or (count and reports >= count):
                return


def from_monitor(target: Target, state_dir: Path, groups: list[str], allowed_lag: int,
                 spec: ClusterSpec | None = None) -> list[dict[str, Any]] | None:
    """When the monitor runs: ``groups`` (default: those of its latest round that have partitions to judge), each
    judged at the moment of its latest stored snapshot with the monitor's window; None when the monitor does not
    run or has no snapshot of a group yet (the caller samples afresh). An unknown group is its clear error."""
    rec = process.running(state_dir)
    if rec is None or not db_path(state_dir).exists():
        return None
    store = Store(db_path(state_dir), readonly=True)
    try:
        names = groups or store.round_groups()
        judged = {g: sampler.stored_status(store, g, window=rec.window, allowed_lag=allowed_lag) for g in names}
    finally:
        store.close()
    if not groups:
        judged = {g: j for g, j in judged.items() if j is not None}
    missing = [g for g, j in judged.items() if j is None]
    if not judged or missing:
        listing = sources.list_all(target, spec) if missing else sources.Listing()
        for g in missing:
            if g not in listing.types:
                kgroups.describe(target, g)  # an unknown group: its clear error; a known one not seen yet:
        return None  # a fresh sampling instead
    return [j.to_json() for j in judged.values() if j is not None]


def history(state_dir: Path, cluster: str, group: str, seconds: float) -> list[dict[str, Any]]:
    """The group's stored samples of the last ``seconds``, each with its UTC ``time``."""
    path = db_path(state_dir)
    if not path.exists():
        raise UsageError(f"no monitor history for cluster {cluster!r} ({path} does not exist)",
                         hint="`kctl monitor start --detach` records it")
    store = Store(path, readonly=True)
    try:
        rows = store.group_history(group, int((time.time() - seconds) * 1000))
        known = store.knows_group(group)
    finally:
        store.close()
    if not known:
        raise UsageError(f"the monitor has no history of group {group!r}",
                         hint="`kctl lag` lists the groups; the monitor records every group it sees")
    for r in rows:
        r["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["ts_ms"] / 1000))
    return rows
