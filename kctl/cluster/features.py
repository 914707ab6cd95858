"""Kafka's finalized features on a cluster on KRaft: what `kafka-features.sh describe` answers, asked inside a node,
each node's own release levels (`kafka-features.sh version-mapping` run in that node, offline: what its binaries
map their release to), and the raise of each feature to the newest level every node's release maps to, one
feature at a time, ``metadata.version`` first (the others depend on it).

``kraft.version`` is held unless asked for: raising it turns a static controller quorum into a dynamic one
(KIP-853), which `kafka-features.sh upgrade --release-version` does silently (KAFKA-21426); kctl never uses
``--release-version`` for the raise, only ``--feature name=level``. A feature is never lowered here: Kafka refuses
to lower ``metadata.version`` and kctl offers no downgrade of the others (`kafka-features.sh downgrade` stays the
operator's, by hand)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kctl import contract
from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kraft import phases as kraft_record
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import engines

FEATURES_TOOL = "kafka-features.sh"
METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
HELD = (KRAFT_VERSION,)  # raised only when asked: a static quorum would turn dynamic


@dataclass(frozen=True)
class Feature:
    name: str
    supported_max: str | None  # e.g. 4.1-IV1: the newest level the node that answered supports
    finalized: str | None  # the level the cluster runs at
    supported_min: str | None = None


def parse_describe(text: str) -> dict[str, Feature]:
    """Pure: the features of `kafka-features.sh describe` (one tab-separated line per feature)."""
    out: dict[str, Feature] = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+):\s*(\S+)", line))
        if "Feature" in fields:
            out[fields["Feature"]] = Feature(fields["Feature"], fields.get("SupportedMaxVersion"),
                                             fields.get("FinalizedVersionLevel"), fields.get("SupportedMinVersion"))
    return out


def parse_mapping(text: str) -> tuple[str | None, dict[str, int]]:
    """Pure: `kafka-features.sh version-mapping`'s answer as (the release it maps, e.g. 4.3, {feature: level}) in
    the tool's order (``metadata.version=30 (4.3)``, ``group.version=1``, ...)."""
    release_name: str | None = None
    levels: dict[str, int] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"\s*([a-z][\w.]*)=(\d+)(?:\s*\(([^)]*)\))?\s*", line)
        if m:
            levels[m.group(1)] = int(m.group(2))
            if m.group(1) == METADATA_VERSION and m.group(3):
                release_name = m.group(3)
    return release_name, levels


@dataclass
class NodeLevels:
    host: str
    release: str | None  # the release its binaries map to (version-mapping's metadata.version name)
    levels: dict[str, int]  # {feature: the level its release maps to}


@dataclass
class Change:
    feature: str
    finalized: int  # the level the cluster runs at (0: not finalized)
    target: int  # the newest level every node's release maps to
    held: bool = False  # kraft.version, not asked for

    @property
    def command(self) -> str:
        return f"kafka-features.sh upgrade --feature {self.feature}={self.target}"


@dataclass
class FeaturesPlan:
    """Every finalized feature, each node's release levels, and what a raise would change."""
    features: dict[str, Feature]
    finalized: dict[str, int]  # {feature: its finalized level as a number}
    nodes: list[NodeLevels]
    changes: list[Change]  # in the order they are applied: metadata.version first, then the tool's order
    refused: str | None = None  # why nothing may be raised now (nodes on different releases)

    @property
    def to_apply(self) -> list[Change]:
        return [c for c in self.changes if not c.held]


def plan_raise(finalized: Mapping[str, int], nodes: Sequence[NodeLevels], *,
               include: Iterable[str] = ()) -> tuple[list[Change], str | None]:
    """Pure: the raises that bring each feature to the newest level every node's release maps to (the lowest of
    the nodes' levels), metadata.version first; a feature already there, or above, is left as it is (kctl never
    lowers one). ``include``: held features (kraft.version) to raise too. Refused (the reason) while the nodes
    map to different releases: a roll onto a new release is not finished."""
    if not nodes:
        return [], "no node answered version-mapping"
    unknown = sorted(n.host for n in nodes if not n.levels)
    if unknown:
        return [], (f"{', '.join(unknown)} cannot say which levels its release maps to (Kafka 3.9's"
                    " kafka-features.sh has no version-mapping): features are planned from Kafka 4 on;"
                    " metadata.version alone is raised by `kctl migrate kraft raise-metadata-version`")
    releases = {n.release for n in nodes}
    refused = None
    if len(releases) > 1:
        newest = max(releases, key=lambda r: release(r or ""))
        older = sorted(n.host for n in nodes if n.release != newest)
        refused = (f"the nodes run different releases ({', '.join(sorted(str(r) for r in releases))}): "
                   f"{', '.join(older)} still on an older one; a feature is raised once every node runs the new"
                   " release")
    order = list(nodes[0].levels)
    order.sort(key=lambda f: f != METADATA_VERSION)  # stable: metadata.version first, then the tool's order
    wanted = set(include)
    changes = []
    for f in order:
        target = min(n.levels.get(f, 0) for n in nodes)
        have = finalized.get(f, 0)
        if target > have:
            changes.append(Change(f, have, target, held=f in HELD and f not in wanted))
    return changes, refused


def parse_level(text: str, feature: str = METADATA_VERSION) -> int | None:
    """Pure: the numeric level of ``feature`` in `kafka-features.sh version-mapping` (``metadata.version=27``)."""
    m = re.search(rf"{re.escape(feature)}=(\d+)", text)
    return int(m.group(1)) if m else None


def release(level: str | None) -> tuple[int, ...]:
    """Pure: a metadata.version's name as a sortable tuple (3.9-IV0 -> (3, 9, 0); a release, 4.3 -> (4, 3, 0))."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:-IV(\d+))?", level or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else ()


def _tool(spec: ClusterSpec, host: str, *args: str) -> str:
    bootstrap = f"{host}:{spec.kafka.internal_port}"
    tool = f"{engines.for_spec(spec).kafka_bin}/{FEATURES_TOOL}"
    login = (["--command-config", contract.secret_path(contract.ADMIN_CLIENT_FILE)]
             if spec.kctl_logs_in else [])  # the admin's SCRAM login: a file in the node, no password in argv
    code, out = engines.exec_in(spec, host, ["env", "KAFKA_HEAP_OPTS=-Xmx128m", "KAFKA_JMX_PORT=", tool,
                                             "--bootstrap-server", bootstrap, *login, *args], timeout=60)
    if code != 0:
        raise ClusterError(f"{FEATURES_TOOL} {args[0]} failed in {host}: {out.strip()[-300:]}",
                           hint=f"`kctl logs {host} --service kafka`")
    return out


def describe(spec: ClusterSpec) -> dict[str, Feature]:
    return parse_describe(_tool(spec, spec.kafka_host(spec.brokers[0]), "describe"))


def _mapping(spec: ClusterSpec, host: str, release_version: str | None = None) -> tuple[str | None, dict[str, int]]:
    """version-mapping run in ``host`` (offline: no cluster asked): its binaries' levels for ``release_version``
    (their own release when None)."""
    tool = f"{engines.for_spec(spec).kafka_bin}/{FEATURES_TOOL}"
    # Kafka 4.1's tool wants a bootstrap server even here (it makes an admin client and sends nothing)
    argv = ["env", "KAFKA_HEAP_OPTS=-Xmx64m", "KAFKA_JMX_PORT=", tool, "--bootstrap-server",
            f"{host}:{spec.kafka.internal_port}", "version-mapping",
            *(["--release-version", release_version] if release_version else [])]
    code, out = engines.exec_in(spec, host, argv, timeout=60)
    if code != 0 and "invalid choice" in out and "version-mapping" in out:
        return None, {}  # Kafka 3.9's tool has no version-mapping: this node's levels are unknown
    if code != 0:
        raise ClusterError(f"{FEATURES_TOOL} version-mapping failed in {host}: {out.strip()[-300:]}",
                           hint=f"is {host} running? `kctl status`")
    return parse_mapping(out)


def node_levels(spec: ClusterSpec) -> list[NodeLevels]:
    """Each node's release and the levels it maps to, asked of every node at once."""
    import concurrent.futures as cf

    hosts = [spec.kafka_host(n) for n in spec.nodes]
    with cf.ThreadPoolExecutor(max_workers=min(4, len(hosts)) or 1) as pool:
        answers = list(pool.map(lambda h: _mapping(spec, h), hosts))
    return [NodeLevels(h, rel, levels) for h, (rel, levels) in zip(hosts, answers, strict=True)]


def finalized_levels(spec: ClusterSpec, feats: Mapping[str, Feature]) -> dict[str, int]:
    """{feature: its finalized level as a number}: describe names metadata.version's level (4.1-IV1), which
    version-mapping turns into its number."""
    out: dict[str, int] = {}
    for name, f in feats.items():
        if f.finalized is None:
            continue
        if f.finalized.isdigit():
            out[name] = int(f.finalized)
        elif name == METADATA_VERSION:
            level = _mapping(spec, spec.kafka_host(spec.brokers[0]), f.finalized)[1].get(METADATA_VERSION)
            if level is not None:
                out[name] = level
    return out


def plan(spec: ClusterSpec, *, include: Iterable[str] = ()) -> FeaturesPlan:
    """What `kctl features` shows and `kctl features apply` would raise (nothing changed)."""
    unknown = sorted(set(include) - set(HELD))
    if unknown:
        raise UsageError(f"--include {', '.join(unknown)}: only a held feature can be included",
                         hint=f"held: {', '.join(HELD)}; the others are raised without asking")
    if not spec.on_kraft:
        raise UsageError("finalized features are a KRaft cluster's: this cluster keeps its metadata in ZooKeeper",
                         hint="`kctl migrate kraft` moves it to KRaft")
    feats = describe(spec)
    finalized = finalized_levels(spec, feats)
    nodes = node_levels(spec)
    changes, refused = plan_raise(finalized, nodes, include=include)
    return FeaturesPlan(feats, finalized, nodes, changes, refused)


def apply(spec: ClusterSpec, *, include: Iterable[str] = (), say: Callable[[str], None] | None = None
          ) -> FeaturesPlan:
    """Raise every feature of :func:`plan` but the held ones, one at a time (each checked in describe after);
    refused, with nothing raised, while the nodes run different releases. Rerun after an interruption: the
    raises already made are finalized, the plan then holds only the rest."""
    say = say or (lambda _m: None)
    p = plan(spec, include=include)
    if any(c.feature == KRAFT_VERSION for c in p.to_apply):
        # Raised alone, kraft.version would leave every node naming controller.quorum.voters (KAFKA-21426's state):
        # the conversion records the dynamic quorum and rolls the nodes onto controller.quorum.bootstrap.servers.
        raise UsageError("kraft.version is raised by `kctl quorum make-dynamic` (it turns the static controller quorum"
                         " dynamic and rolls every node onto controller.quorum.bootstrap.servers); nothing was raised",
                         hint="`kctl features apply --yes` without --include kraft.version raises the others;"
                              " then `kctl quorum make-dynamic`")
    if p.refused:
        raise ClusterError(f"nothing was raised: {p.refused}", hint="`kctl apply` finishes the roll (`kctl status`"
                           " shows each node's release); then `kctl features apply`")
    host = spec.kafka_host(spec.brokers[0])
    for c in p.to_apply:
        _tool(spec, host, "upgrade", "--feature", f"{c.feature}={c.target}")
        say(f"{c.feature}: {c.finalized} -> {c.target}")
    after = describe(spec)
    p.finalized = finalized_levels(spec, after)
    p.features = after
    missed = [c.feature for c in p.to_apply if p.finalized.get(c.feature, 0) < c.target]
    if missed:
        raise ClusterError(f"the controller did not finalize {', '.join(missed)}",
                           hint="`kctl features` shows each level; `kctl features apply` again")
    return p


def raise_metadata_version(spec: ClusterSpec) -> tuple[str | None, str | None]:
    """Raise metadata.version to the newest level the cluster's release supports, if it runs an older one:
    (before, after); (level, level) when there was nothing to raise. Kafka refuses it unless every broker and
    controller supports the level, and a raised metadata.version is not lowered again."""
    host = spec.kafka_host(spec.brokers[0])
    mv = describe(spec).get(METADATA_VERSION)
    if mv is None or mv.supported_max is None:
        raise ClusterError(f"{FEATURES_TOOL} describe named no {METADATA_VERSION}", hint="is the cluster on KRaft?")
    if release(mv.finalized) >= release(mv.supported_max):
        return mv.finalized, mv.finalized
    level = parse_level(_tool(spec, host, "version-mapping", "--release-version", mv.supported_max))
    if level is None:
        raise ClusterError(f"{FEATURES_TOOL} version-mapping named no level for {mv.supported_max}")
    _tool(spec, host, "upgrade", "--feature", f"{METADATA_VERSION}={level}")
    after = describe(spec).get(METADATA_VERSION)
    return mv.finalized, after.finalized if after else None


def raise_and_record(spec: ClusterSpec, state_dir: Path, say: Callable[[str], None]
                     ) -> tuple[str | None, str | None]:
    """Every node runs the new release now: Kafka's metadata.version up to it (Kafka's last upgrade step), and the
    level recorded in kraft.json, so that a later kctl.yaml with an older release is refused before anything is
    rendered (kctl.kraft.phases.check_downgrade)."""
    try:
        before, after = raise_metadata_version(spec)
    except KctlError as exc:
        raise KctlError(f"every node runs Kafka {spec.versions.kafka}, but raising metadata.version failed:"
                        f" {exc.message}",
                        hint=f"the raise stays owed (kraft.json): `{kraft_record.RAISE_COMMAND}` (or the next"
                             f" `kctl apply` / `kctl up`) raises it; {exc.hint or '`kctl status` first'}") from None
    kraft_record.record_metadata_version(state_dir, after, spec.versions.kafka)
    say(f"metadata.version: {before} (already the newest {spec.versions.kafka} supports)" if before == after
        else f"metadata.version: {before} -> {after} (every node runs Kafka {spec.versions.kafka};"
             " a raised metadata.version is not lowered again)")
    raise_the_others(spec, say)
    return before, after


def raise_the_others(spec: ClusterSpec, say: Callable[[str], None]) -> None:
    """After metadata.version: every other feature to the levels the release maps to (group.version for KIP-848's
    consumer groups, transaction.version, eligible.leader.replicas.version, share.version, streams.version), one at a
    time, kraft.version held. One that fails is said with the command to finish it; the release's roll is done."""
    try:
        p = apply(spec, say=lambda line: say(f"feature {line}"))
    except KctlError as exc:
        say(f"warning: the other features were not raised: {exc.message}; `kctl features apply` raises them")
        return
    held = [c for c in p.changes if c.held]
    if held:
        say("held: " + ", ".join(f"{c.feature} {c.finalized} -> {c.target}" for c in held)
            + " (a static controller quorum stays static; `kctl quorum make-dynamic` converts it)")
