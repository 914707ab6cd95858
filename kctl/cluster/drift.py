"""kctl diff: per node and key, what kctl.yaml renders, what the state dir holds, the dynamic overrides and
what each process reports; every difference is drift.

Four layers per key, compared by :func:`compare` (pure, unit-tested):

- ``spec``: today's kctl.yaml, rendered in memory (kctl/model/properties.py through kctl/model/render.py);
- ``rendered``: the file in the state dir, which the container mounts and the process read at its start;
- ``dynamic``: Kafka's dynamic broker configs in ZooKeeper, per broker (/config/brokers/<id>) and the
  cluster-wide default (/config/brokers/<default>), which win over the file;
- ``running``: what the process reports now: a broker's DescribeConfigs, ZooKeeper's ``conf`` word.

:func:`gather` observes (read-only: files, one ZooKeeper session, one DescribeConfigs per broker, one
``conf`` per ZooKeeper server); :func:`diff` does both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kctl import contract
from kctl.errors import KctlError
from kctl.kafka import configs
from kctl.kafka.client import Target
from kctl.model.properties import parse_properties, services_of
from kctl.model.render import COMPOSE_FILE, render
from kctl.model.spec import ClusterSpec
from kctl.zk import fourlw, znodes

SERVER_PROPERTIES = "server.properties"
ZOO_CFG = "zoo.cfg"

# Drift kinds, as rows and JSON name them.
NOT_APPLIED = "not applied"  # kctl.yaml renders another value than the state dir holds
OVERRIDDEN = "dynamic override"  # a dynamic config differs from the file
RUNNING = "running differs"  # the process runs another value than file + overrides say
UNOBSERVED = "not observed"  # the process could not be asked

# zoo.cfg keys ZooKeeper's `conf` reports (the rest of zoo.cfg it does not echo).
ZK_REPORTED = ("clientPort", "dataDir", "dataLogDir", "tickTime", "maxClientCnxns", "initLimit", "syncLimit",
               "peerType")
_PEER_TYPES = {"0": "participant", "1": "observer"}


@dataclass
class KeyDiff:
    node: str
    service: str  # kafka or zookeeper
    file: str  # server.properties or zoo.cfg
    key: str
    spec: str | None
    rendered: str | None
    broker_override: str | None = None
    default_override: str | None = None
    running: str | None = None
    reported: bool = False  # whether the process reported this key at all
    drift: list[str] = field(default_factory=list)


@dataclass
class NodeObs:
    """What one node's service looked like (inputs of :func:`compare`)."""

    node: str
    service: str
    file: str
    spec: dict[str, str]
    rendered: dict[str, str] | None  # None: no file in the state dir
    broker_dyn: dict[str, str] = field(default_factory=dict)
    default_dyn: dict[str, str] = field(default_factory=dict)
    running: dict[str, str] | None = None  # None: the process did not answer
    sensitive: frozenset[str] = frozenset()
    error: str | None = None
    host: str = ""  # the container running it (the node's hostname when colocated)


@dataclass
class DiffResult:
    cluster: str
    state_dir: str
    rows: list[KeyDiff]  # the rows that drift (every compared row with all_keys)
    drifted: int  # how many rows drift
    problems: list[str]  # nodes that could not be observed
    compared: int  # how many (node, key) pairs were compared
    clean: bool = False  # nothing drifts and every node answered: `kctl diff` exits 0
    # container host -> the container settings kctl.yaml changes (environment, image, ports: a new release is a new
    # image), which `kctl apply` makes the container again for
    containers: dict[str, list[str]] = field(default_factory=dict)


def norm(value: str | None) -> str | None:
    """A value as compared: surrounding space and space after list commas dropped."""
    if value is None:
        return None
    return ",".join(p.strip() for p in value.strip().split(","))


def _same(a: str | None, b: str | None) -> bool:
    return norm(a) == norm(b)


def compare(obs: NodeObs, all_keys: bool = False) -> list[KeyDiff]:
    """Rows of one node's service, each with its drift reasons (pure)."""
    rendered = obs.rendered or {}
    keys = sorted(set(obs.spec) | set(rendered) | set(obs.broker_dyn) | set(obs.default_dyn))
    out = []
    for key in keys:
        row = KeyDiff(obs.node, obs.service, obs.file, key, obs.spec.get(key), rendered.get(key),
                      obs.broker_dyn.get(key), obs.default_dyn.get(key))
        if obs.rendered is not None and not _same(row.spec, row.rendered):
            row.drift.append(NOT_APPLIED)
        dyn = row.broker_override if row.broker_override is not None else row.default_override
        if key not in obs.sensitive and ((row.broker_override is not None and not _same(row.broker_override,
                                                                                         row.rendered))
                                         or (row.default_override is not None
                                             and not _same(row.default_override, row.rendered))):
            row.drift.append(OVERRIDDEN)
        if obs.running is not None and key in obs.running:
            row.reported = True
            row.running = obs.running[key]
            expected = dyn if dyn is not None else row.rendered
            if key not in obs.sensitive and expected is not None and not _same(row.running, expected):
                row.drift.append(RUNNING)
        if row.drift or all_keys:
            out.append(row)
    return out


# ----- parsing what the processes report ------------------------------------------------------------


def parse_zk_conf(text: str) -> dict[str, str]:
    """ZooKeeper's ``conf`` answer as zoo.cfg keys: dataDir without the version-2 ZooKeeper appends,
    peerType by name, each ``server.N`` as written in zoo.cfg (no ``:participant``, no client address)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if not sep:
            continue
        k, v = k.strip(), v.strip()
        if k in ("dataDir", "dataLogDir"):
            v = v.removesuffix("/version-2")
        elif k == "peerType":
            v = _PEER_TYPES.get(v, v)
        elif k.startswith("server."):
            v = v.split(";", 1)[0].removesuffix(":participant")
        elif k not in ZK_REPORTED:
            continue
        out[k] = v
    return out


def zk_expected(props: Mapping[str, str]) -> dict[str, str]:
    """zoo.cfg as ZooKeeper will report it: ``peerType`` participant unless the file says otherwise."""
    return {"peerType": "participant", **props}


# ----- observing --------------------------------------------------------------------------------------


def _read(path: Path) -> dict[str, str] | None:
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def dynamic_configs(spec: ClusterSpec, broker_ids: list[int]) -> tuple[dict[int, dict[str, str]], dict[str, str]]:
    """Per-broker and cluster-wide dynamic broker configs, as Kafka keeps them in ZooKeeper (on KRaft, in its
    metadata, asked of the brokers)."""
    if spec.on_kraft:
        cluster = Target.of(spec)
        return ({b: configs.dynamic_of(cluster, str(b), "DYNAMIC_BROKER_CONFIG") for b in broker_ids},
                configs.cluster_defaults(spec))

    def conf(zk: Any, path: str) -> dict[str, str]:
        if not zk.exists(path):
            return {}
        data = (znodes.get(zk, path).json or {}).get("config", {})
        return {str(k): str(v) for k, v in data.items()}

    with znodes.connect(spec, principal=znodes.guarded_reader(spec)) as zk:
        per = {b: conf(zk, f"/config/brokers/{b}") for b in broker_ids}
        default = conf(zk, "/config/brokers/<default>")
    return per, default


def broker_running(spec: ClusterSpec, broker: int) -> tuple[dict[str, str], frozenset[str]]:
    """Every config a broker reports (DescribeConfigs), and which are sensitive."""
    entries = configs._describe_resource(Target.of(spec), "broker", str(broker))
    values = {k: str(e.value) for k, e in entries.items() if e.value is not None and not e.is_sensitive}
    return values, frozenset(k for k, e in entries.items() if e.is_sensitive)


def zk_running(spec: ClusterSpec, port: int, timeout: float = 3.0, address: str = "127.0.0.1") -> dict[str, str]:
    ans = fourlw.ask(address, port, "conf", timeout=timeout)
    if not ans.whitelisted:
        raise fourlw.FourLetterError("`conf` is not in zookeeper.four_letter_words")
    return parse_zk_conf(ans.text)


def gather(spec: ClusterSpec, state_dir: Path) -> list[NodeObs]:
    """Observe every node's ZooKeeper and broker (read-only); a node that does not answer gets ``error``."""
    import concurrent.futures as cf

    files = render(spec, state_dir).files
    out: list[NodeObs] = []
    for host, node, services in services_of(spec):
        for service in services:
            if service == "zookeeper" and spec.on_kraft:  # retired: nothing runs to compare with
                continue
            name = ZOO_CFG if service == "zookeeper" else SERVER_PROPERTIES
            rel = f"{host}/{contract.HOST_CONF}/{name}"
            out.append(NodeObs(node.hostname, service, name, parse_properties(files.get(rel, "")),
                               _read(state_dir / rel), host=host))
    brokers = [n.id for n in spec.brokers]
    dyn_error = None
    try:
        per, default = dynamic_configs(spec, brokers)
    except KctlError as exc:
        per, default, dyn_error = {}, {}, exc.message

    def observe(o: NodeObs) -> None:
        node = spec.node(o.node)
        try:
            if o.service == "kafka":
                o.broker_dyn, o.default_dyn = per.get(node.id, {}), default
                o.running, o.sensitive = broker_running(spec, node.id)
                if dyn_error:
                    o.error = f"dynamic configs not read: {dyn_error}"
            else:
                o.spec, o.rendered = zk_expected(o.spec), None if o.rendered is None else zk_expected(o.rendered)
                o.running = zk_running(spec, spec.zk_host_port(node), address=spec.node_address(node))
        except (KctlError, OSError) as exc:
            o.running = None
            o.error = exc.message if isinstance(exc, KctlError) else str(exc)

    with cf.ThreadPoolExecutor(max_workers=max(1, len(out))) as pool:
        list(pool.map(observe, out))
    return out


def _container_settings(compose_text: str) -> dict[str, dict[str, Any]]:

    services = (yaml.safe_load(compose_text) or {}).get("services") or {}
    return {name: {k: v for k, v in svc.items() if k != "labels"} for name, svc in services.items()}


def recreate_needed(old_compose: str | None, new_compose: str) -> dict[str, list[str]]:
    """host -> the container settings (environment, image, ports...) that differ between two compose files."""
    if old_compose is None:
        return {}
    old, new = _container_settings(old_compose), _container_settings(new_compose)
    out: dict[str, list[str]] = {}
    for host, svc in new.items():
        if host not in old:
            out[host] = ["a new container"]
            continue
        diffs = []
        for k in sorted(set(svc) | set(old[host])):
            if svc.get(k) != old[host].get(k):
                if isinstance(svc.get(k), dict) and isinstance(old[host].get(k), dict):
                    a, b = old[host][k], svc[k]
                    diffs += [f"{k}.{kk}: {a.get(kk)} -> {b.get(kk)}" for kk in sorted(set(a) | set(b))
                              if a.get(kk) != b.get(kk)]
                else:
                    diffs.append(f"{k}: {old[host].get(k)} -> {svc.get(k)}")
        if diffs:
            out[host] = diffs
    return out


def diff(spec: ClusterSpec, state_dir: Path, all_keys: bool = False) -> DiffResult:
    obs = gather(spec, state_dir)
    rows: list[KeyDiff] = []
    compared = drifted = 0
    problems = []
    for o in obs:
        every = compare(o, all_keys=True)
        compared += len(every)
        drifted += sum(1 for r in every if r.drift)
        rows.extend(r for r in every if r.drift or all_keys)
        if o.rendered is None:
            problems.append(f"{o.node} {o.service}: no {o.file} in {state_dir} (run `kctl up`)")
        if o.error:
            problems.append(f"{o.node} {o.service}: {UNOBSERVED}: {o.error}")
    containers = _containers(spec, state_dir)
    return DiffResult(spec.name, str(state_dir), rows, drifted, problems, compared,
                      drifted == 0 and not problems and not containers, containers)


def _containers(spec: ClusterSpec, state_dir: Path) -> dict[str, list[str]]:
    try:
        old: str | None = (state_dir / COMPOSE_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        old = None
    return recreate_needed(old, render(spec, state_dir).files[COMPOSE_FILE])
