"""Replication loops between clusters: the mirrors as a directed graph of clusters, and what can loop in it.

Every flow of MirrorMaker copies topics from a source cluster into a target (one mirror of a kctl.yaml: its
source -> this cluster). Two or more flows can close a cycle (A -> B and B -> A: a disaster-recovery pair and its
fail-back), and then a topic can come back to where it started:

- with ``policy: identity`` (IdentityReplicationPolicy) a replica keeps its name, so MirrorMaker cannot tell it
  from the original and copies it around the cycle for ever (its own documentation: identity is for one-way
  flows only). A cycle with an identity flow in it is refused.
- with ``policy: prefix`` (DefaultReplicationPolicy) a replica is ``<alias>.<topic>``, and MirrorMaker leaves out a
  topic whose prefixes name the cluster it writes into. That works only when the alias a cluster is given in the
  other cluster's mirror is the name it calls itself when it mirrors (kctl's target alias is the cluster's
  ``name``): B mirroring A under the alias ``primary`` while A is called ``logger`` brings A's ``orders`` back into
  A as ``dr.primary.orders``. A cycle with such a flow in it is refused, naming the doubled topic; the same
  mismatch outside a cycle is a warning (a mirror back the other way would loop).

:func:`problems` is pure (flows in, refusals and warnings out); :func:`flows` reads the kctl.yaml files that the
mirrors name, and theirs, to build the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kctl.errors import KctlError, UsageError
from kctl.model.spec import ClusterSpec, MirrorPolicy, load_spec

MAX_CLUSTERS = 64  # the walk over kctl.yaml files stops there (bounded however the files point at each other)


@dataclass(frozen=True)
class Flow:
    """One mirror: topics of ``source`` into ``target`` under ``alias``. ``known``: the source is a kctl.yaml, so
    ``source`` is that cluster's own name (else the mirror's alias, or the kctl cluster whose bootstrap servers
    the mirror names)."""

    source: str
    target: str
    alias: str
    policy: MirrorPolicy
    known: bool
    where: str  # e.g. "dr/kctl.yaml mirrors.0 (primary)"
    # which cluster each end is, for the graph (a kctl.yaml's path; default the name): two clusters may share a name
    source_key: str = ""
    target_key: str = ""

    @property
    def src(self) -> str:
        return self.source_key or self.source

    @property
    def dst(self) -> str:
        return self.target_key or self.target


def _cycles(flows: list[Flow]) -> list[list[Flow]]:
    """Every elementary cycle of the graph (clusters, one edge per flow), each once, starting at its first flow
    in ``flows``' order. The graphs are a few clusters: a depth-first walk from each flow is enough."""
    out: list[list[Flow]] = []
    seen: set[tuple[int, ...]] = set()
    index = {id(f): i for i, f in enumerate(flows)}

    def walk(start: Flow, path: list[Flow], visited: set[str]) -> None:
        for nxt in flows:
            if nxt.src != path[-1].dst or index[id(nxt)] < index[id(start)]:
                continue
            if nxt.dst == start.src:
                key = tuple(sorted(index[id(f)] for f in [*path, nxt]))
                if key not in seen:
                    seen.add(key)
                    out.append([*path, nxt])
            elif nxt.dst not in visited:
                walk(start, [*path, nxt], visited | {nxt.dst})

    for f in flows:
        if f.src != f.dst:  # a mirror of a cluster into itself: refused on its own (problems)
            walk(f, [f], {f.src, f.dst})
    return out


def _arrow(cycle: list[Flow]) -> str:
    return " -> ".join([cycle[0].source, *(f.target for f in cycle)])


def _doubled(cycle: list[Flow], k: int) -> str:
    """The name a topic ``T`` of the source of ``cycle[k]`` comes back under, once round the cycle."""
    hops = cycle[k:] + cycle[:k]
    name = "T"
    for f in hops:
        name = f"{f.alias}.{name}" if f.policy is MirrorPolicy.prefix else name
    return name


def problems(flows: list[Flow]) -> tuple[list[str], list[str]]:
    """(refusals, warnings) of a set of flows: each cycle that can loop, named; each prefix flow whose alias is
    not its kctl source's name (outside a cycle)."""
    errors = [f"replication loop {f.target} -> {f.target}: {f.where} reads the cluster it writes into (its"
              " bootstrap servers are this cluster's own)" for f in flows if f.src == f.dst]
    in_cycle: set[int] = {id(f) for f in flows if f.src == f.dst}
    for cycle in _cycles(flows):
        in_cycle |= {id(f) for f in cycle}
        identity = [f for f in cycle if f.policy is MirrorPolicy.identity]
        if identity:
            errors.append(f"replication loop {_arrow(cycle)}: {', '.join(f.where for f in identity)} with policy"
                          " identity keeps topic names, so MirrorMaker cannot tell a replica from the original and"
                          " copies every topic round this cycle for ever")
            continue
        for k, f in enumerate(cycle):
            if f.alias != f.source:
                errors.append(f"replication loop {_arrow(cycle)}: {f.where} calls {f.source} {f.alias!r}, but"
                              f" {f.source} is {f.source!r} when it mirrors, so MirrorMaker does not see its own"
                              f" topics come back: a topic T of {f.source} returns to it as {_doubled(cycle, k)}")
    warnings = [f"{f.where}: alias {f.alias!r} is not the source cluster's name {f.source!r}: a mirror back the"
                f" other way (a fail-back) would loop; name the mirror {f.source!r}"
                for f in flows if f.known and f.policy is MirrorPolicy.prefix and f.alias != f.source
                and id(f) not in in_cycle]
    return errors, warnings


# ----- the graph, from the kctl.yaml files -------------------------------------------------------------------


def _servers(text: str | None) -> frozenset[str]:
    out = set()
    for item in (text or "").split(","):
        item = item.strip().lower()
        if item:
            host, _, port = item.rpartition(":")
            out.add(f"{'127.0.0.1' if host in ('localhost', '::1', '[::1]') else host}:{port}")
    return frozenset(out)


def flows(spec: ClusterSpec, spec_path: Path) -> tuple[list[Flow], list[str]]:
    """The flows of ``spec``'s mirrors and of every kctl.yaml they lead to (a mirror's ``source.spec``, and that
    cluster's own mirrors' sources, and so on), with a warning for each kctl.yaml that cannot be read (loops
    through it are not seen). A ``bootstrap_servers`` source that is one of these clusters (its bootstrap
    servers) is that cluster."""
    found: dict[Path, ClusterSpec] = {spec_path.resolve(): spec}
    todo = [spec_path.resolve()]
    warnings: list[str] = []
    edges: list[tuple[Path, int, Path | None]] = []  # (target's file, mirror index, source's file or None)
    while todo and len(found) <= MAX_CLUSTERS:
        path = todo.pop()
        for i, m in enumerate(found[path].mirrors):
            if m.source.spec is None:
                edges.append((path, i, None))
                continue
            src = Path(m.source.spec).expanduser()
            src = (src if src.is_absolute() else path.parent / src).resolve()
            if src not in found:
                try:
                    found[src] = load_spec(src)[0]
                except KctlError as exc:
                    warnings.append(f"{src}: {exc.message.splitlines()[0]} (replication loops through it are not"
                                    " checked)")
                    continue
                todo.append(src)
            edges.append((path, i, src))
    by_servers = {_servers(s.bootstrap_servers): p for p, s in found.items()}
    out: list[Flow] = []
    for path, i, source_file in edges:
        target = found[path]
        m = target.mirrors[i]
        where = f"{_short(path, spec_path)} mirrors.{i} ({m.name})"
        if source_file is None:  # bootstrap servers: one of these clusters by its listeners, or one kctl cannot see
            servers = _servers(m.source.bootstrap_servers)
            source_file = next((p for s, p in by_servers.items() if s & servers), None)
        if source_file is not None:
            out.append(Flow(found[source_file].name, target.name, m.name, m.policy, True, where,
                            str(source_file), str(path)))
        else:
            out.append(Flow(m.name, target.name, m.name, m.policy, False, where,
                            f"{m.name}@{m.source.bootstrap_servers}", str(path)))
    return out, warnings


def _short(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base.resolve().parent.parent))
    except ValueError:
        return str(path)


def check(spec: ClusterSpec, spec_path: Path) -> list[str]:
    """KctlError (exit 2, before anything is written or started) when the mirrors can loop; the warnings."""
    graph, warnings = flows(spec, spec_path)
    errors, more = problems(graph)
    if errors:
        raise UsageError("refused, nothing was written or started: " + "; ".join(errors),
                         hint="give each mirror the source cluster's own name (`mirrors[].name`, with policy"
                              " prefix MirrorMaker then leaves out what came from the target), and keep policy"
                              " identity to one-way flows (docs/mirroring.md, \"Replication loops\")")
    return warnings + more

