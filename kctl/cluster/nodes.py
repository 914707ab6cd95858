"""kctl node add / remove: grow or shrink a running cluster one node at a time, healthy throughout.

Talks to all three systems, each through its own package: Docker (``kctl.runtime.cluster``:
one container started or removed), ZooKeeper (``kctl.zk.reconfig``: the ensemble changed
by dynamic reconfiguration, one joiner at a time), Kafka (``kctl.kafka.reassign``: every
replica moved off a leaving broker first); every wait is a probe of ``kctl.cluster.health``.
The kctl.yaml edit is pure (:func:`edit_for_add`, :func:`edit_for_remove`): only the ``nodes:`` list of
the user's file changes, through ruamel.yaml's round trip (its comments and key order kept), and the new
spec is resolved as :func:`kctl.model.spec.load_cluster` resolves the old one (its recorded engine, its state dir).
A change holds the roll lock of the state dir, so a rolling restart cannot run meanwhile.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kctl import contract
from kctl.cluster import health, lifecycle, quorum
from kctl.cluster.lock import roll_lock
from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kafka import balance, reassign
from kctl.kraft import config as kraft_config
from kctl.model.render import render, write
from kctl.model.spec import ClusterSpec, Topology, parse_cluster
from kctl.runtime import cluster as rcl
from kctl.runtime.cluster import preflight_ports, run_kafka_tool
from kctl.runtime.engine import engines, services
from kctl.runtime.engine.engines import Capability, containers
from kctl.runtime.ports import free_ports
from kctl.security import store
from kctl.wait import wait_until
from kctl.zk import reconfig

Progress = Callable[[str], None]


@dataclass
class NodeChange:
    action: str  # add / remove
    node_id: int
    host: str
    role: str
    broker: bool = True  # False: a ZooKeeper-only node
    steps: list[dict[str, Any]] = field(default_factory=list)  # {"step", "seconds", "saw"}
    seconds: float = 0.0
    moved_partitions: int = 0
    warnings: list[str] = field(default_factory=list)
    next: str = ""


# ----- kctl.yaml, pure ---------------------------------------------------------------------------------


def _hostname_for(existing: list[str], node_id: int) -> str:
    """``prefixN`` when the existing hostnames share a prefix followed by their number, else ``nodeN``."""
    prefixes = {m.group(1) for h in existing if (m := re.fullmatch(r"(.*?)(\d+)", h))}
    prefix = prefixes.pop() if len(prefixes) == 1 else "node"
    return f"{prefix}{node_id}"


def with_node_added(raw: dict[str, Any], spec: ClusterSpec, node_id: int | None, role: str,
                    free_ports: Callable[[int], list[int]],
                    broker: bool = True, address: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The kctl.yaml data with one more node (and that node's entry); free host ports where the others pin theirs.
    ``broker=False``: a ZooKeeper-only node (``broker: false``, no Kafka port of its own)."""
    ids = [n.id for n in spec.nodes]
    nid = node_id if node_id is not None else max(ids) + 1
    if nid in ids:
        raise UsageError(f"node id {nid} is already used ({spec.node(nid).hostname})",
                         hint=f"ids in use: {', '.join(map(str, ids))}; omit --id to take {max(ids) + 1}")
    if role not in ("participant", "observer"):
        raise UsageError(f"unknown role {role!r}", hint="participant or observer")
    entry: dict[str, Any] = {"id": nid, "hostname": _hostname_for([n.hostname for n in spec.nodes], nid),
                             "role": role}
    if not broker:
        entry["broker"] = False
    if address is not None:
        entry["advertised_host"] = address
    elif engines.supports(spec, Capability.SSH_HOSTS):
        raise UsageError(f"engine {spec.engine.value}: the new node's host needs an address",
                         hint="pass --address ADDRESS (where kctl reaches it over ssh and clients reach its listeners)")
    # Nodes with pinned ports (a test cluster's free ports): pin the new one's too, on free ports.
    pinned = [k for k in ("zookeeper_port", "kafka_port", "zookeeper_metrics_port", "kafka_metrics_port")
              if any(getattr(n, k) for n in spec.nodes) and (broker or k not in ("kafka_port", "kafka_metrics_port"))]
    if pinned:
        for k, port in zip(pinned, free_ports(len(pinned)), strict=True):
            entry[k] = port
    nodes = [dict(n) for n in raw.get("nodes") or [{"id": n.id, "hostname": n.hostname} for n in spec.nodes]]
    return {**raw, "nodes": [*nodes, entry]}, entry


def with_node_removed(raw: dict[str, Any], spec: ClusterSpec, node_id: int) -> dict[str, Any]:
    """The kctl.yaml data without node ``node_id``; the nodes after it keep their host ports (pinned)."""
    nodes = [dict(n) for n in raw.get("nodes") or [{"id": n.id, "hostname": n.hostname} for n in spec.nodes]]
    idx = next((i for i, n in enumerate(nodes) if n.get("id") == node_id), None)
    if idx is None:
        raise UsageError(f"no node {node_id} in kctl.yaml")
    for i in range(idx + 1, len(nodes) if engines.supports(spec, Capability.PORTS_BY_INDEX) else 0):
        # Default ports are base + index: removing a node would shift the ports of the ones after it (engine
        # hosts: every host listens on the base ports, nothing shifts).
        n = spec.nodes[i]
        nodes[i].setdefault("zookeeper_port", spec.zk_host_port(n))
        nodes[i].setdefault("kafka_port", spec.kafka_host_port(n))
        for key, port in (("jmx_port", spec.jmx_host_port(n)), ("kafka_metrics_port", spec.kafka_metrics_host_port(n)),
                          ("zookeeper_metrics_port", spec.zk_metrics_host_port(n))):
            if port is not None:
                nodes[i].setdefault(key, port)
    del nodes[idx]
    return {**raw, "nodes": nodes}


def _round_trip(text: str) -> Any:
    """A ruamel.yaml round-trip loader/dumper that writes sequences indented as ``text``'s ``nodes:`` block is."""
    from ruamel.yaml import YAML

    rt = YAML()  # round-trip: comments, key order and quoting kept
    rt.preserve_quotes = True
    rt.width = 4096  # never fold a long line the user wrote on one
    m = re.search(r"^nodes\s*:\s*\n(?:\s*(?:#.*)?\n)*( *)- ", text, re.MULTILINE)
    offset = len(m.group(1)) if m else 0
    rt.indent(mapping=2, sequence=offset + 2, offset=offset)
    return rt


def _tail(obj: Any) -> tuple[Any, Any] | None:
    """(the mapping, its key) whose comment slot holds what follows ``obj`` in the file, if ``obj`` is a map."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    while True:
        if isinstance(obj, CommentedSeq) and obj:
            obj = obj[-1]
        elif isinstance(obj, CommentedMap) and obj:
            key = list(obj)[-1]
            if isinstance(obj[key], CommentedMap | CommentedSeq) and obj[key]:
                obj = obj[key]
                continue
            return obj, key
        else:
            return None


def replace_nodes_block(text: str, nodes: list[dict[str, Any]]) -> str:
    """The kctl.yaml text with its top-level ``nodes:`` list replaced by ``nodes`` and everything else kept:
    comments (the nodes' own included), key order and quoting, through ruamel.yaml's round trip. Nodes that
    stay keep their place and comments; new ones are appended; what followed the block stays after it."""
    import io

    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    rt = _round_trip(text)
    doc = rt.load(text)
    if doc is None:
        doc = CommentedMap()
    seq = doc.get("nodes")
    if not isinstance(seq, CommentedSeq):
        doc["nodes"] = CommentedSeq(CommentedMap(n) for n in nodes)
    else:
        # The comment lines after the block (ruamel keeps them on its last scalar): they stay after the block.
        before = _tail(seq)
        carried = before[0].ca.items.pop(before[1], None) if before else None
        keep = None
        if carried and carried[2] is not None and not carried[2].value.startswith("\n"):
            # A comment on the last node's own line stays with it; only the lines after it move.
            own, _, rest = carried[2].value.partition("\n")
            keep = [None, None, _comment(carried[2], own + "\n"), None]
            carried = [None, None, _comment(carried[2], "\n" + rest), None] if rest.strip() else None
        wanted = {n.get("id") for n in nodes}
        for i in reversed(range(len(seq))):
            if not isinstance(seq[i], dict) or seq[i].get("id") not in wanted:
                del seq[i]
        have = {m.get("id"): m for m in seq}
        for n in nodes:
            m = have.get(n.get("id"))
            if m is None:
                seq.append(CommentedMap(n))
                continue
            for k in [k for k in m if k not in n]:
                del m[k]
            for k, v in n.items():
                if k not in m or m[k] != v:
                    m[k] = v
        if keep and before and before[0] in seq:
            before[0].ca.items[before[1]] = keep
        after = _tail(seq)
        if carried and after:
            mine = after[0].ca.items.get(after[1])
            if mine and mine[2] is not None:  # its own line's comment, then the lines that follow the block
                carried = [*mine[:2], _comment(mine[2], mine[2].value.rstrip("\n") + carried[2].value), *mine[3:]]
            after[0].ca.items[after[1]] = carried
    out = io.StringIO()
    rt.dump(doc, out)
    return out.getvalue()


def _comment(token: Any, value: str) -> Any:
    from ruamel.yaml.tokens import CommentToken

    return CommentToken(value, token.start_mark, token.end_mark)


@dataclass(frozen=True)
class SpecEdit:
    """A node add or remove as kctl.yaml sees it, before anything is written."""

    text: str  # kctl.yaml as it is
    new_text: str  # kctl.yaml after the change (only its nodes changed)
    spec: ClusterSpec  # the cluster after the change: engine and state dir resolved as for the one before
    warnings: list[str]
    entry: dict[str, Any] = field(default_factory=dict)  # the added node's kctl.yaml entry


def edit_for_add(spec: ClusterSpec, spec_path: Path, node_id: int | None, role: str,
                 broker: bool = True, ports: Callable[[int], list[int]] = free_ports,
                 address: str | None = None) -> SpecEdit:
    """The kctl.yaml edit of `kctl node add` (pure but for reading kctl.yaml and the state dir's records)."""
    text = spec_path.read_text(encoding="utf-8")
    new_raw, entry = with_node_added(yaml.safe_load(text) or {}, spec, node_id, role, ports, broker=broker,
                                     address=address)
    new_spec, warnings = parse_cluster(new_raw, spec_path)
    return SpecEdit(text, replace_nodes_block(text, new_raw["nodes"]), new_spec, warnings, entry)


def edit_for_remove(spec: ClusterSpec, spec_path: Path, node_id: int) -> SpecEdit:
    """The kctl.yaml edit of `kctl node remove`: kctl.yaml's rules checked for the smaller cluster."""
    text = spec_path.read_text(encoding="utf-8")
    new_raw = with_node_removed(yaml.safe_load(text) or {}, spec, node_id)
    new_spec, warnings = parse_cluster(new_raw, spec_path)
    return SpecEdit(text, replace_nodes_block(text, new_raw["nodes"]), new_spec, warnings)


def _write_spec(path: Path, text: str) -> None:
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


# ----- waits -------------------------------------------------------------------------------------------


class _Steps:
    def __init__(self, change: NodeChange, say: Progress) -> None:
        self.change, self.say = change, say

    def wait(self, name: str, probe: Callable[[], tuple[bool, str]], timeout: float, poll: float = 1.0) -> str:
        res = wait_until(name, probe, timeout, poll=poll)
        self.done(name, res.seconds, res.saw)
        return res.saw

    def done(self, name: str, seconds: float, saw: str = "") -> None:
        self.change.steps.append({"step": name, "seconds": round(seconds, 1), "saw": saw})
        self.say(f"ok  {name} ({seconds:.1f}s){': ' + saw if saw else ''}")


def _healthy(spec: ClusterSpec) -> Callable[[], tuple[bool, str]]:
    """Healthy as kctl.cluster.health judges it, Docker aside (as the roll's pre-checks)."""
    return health.healthy(spec, docker=False)


def _ensemble_matches(spec: ClusterSpec, leaving: int | None = None) -> bool:
    """True when the ensemble is kctl.yaml's; False when it already lacks ``leaving`` (a remove resumed)."""
    cfg = reconfig.read_config(spec)
    want = {n.id: n.role.value for n in spec.nodes}
    have = {i: s.role for i, s in cfg.servers.items()}
    if leaving is not None and {i: r for i, r in want.items() if i != leaving} == have:
        return False
    if want != have:
        raise ClusterError(f"the ZooKeeper ensemble ({', '.join(f'{i}:{r}' for i, r in sorted(have.items()))})"
                           f" is not what kctl.yaml says ({', '.join(f'{i}:{r}' for i, r in sorted(want.items()))});"
                           " nothing was changed",
                           hint="`kctl zk config` shows the ensemble; bring them in step first (`kctl zk reconfig`)")
    return True


def _colocated(spec: ClusterSpec) -> None:
    if spec.topology is not Topology.colocated:
        raise UsageError("kctl node add/remove handle the colocated topology (ZooKeeper and broker in one"
                         " container); this cluster is split", hint="edit kctl.yaml's nodes and roll the change")


def _not_migrating(spec: ClusterSpec) -> None:
    if spec.kraft_phase not in ("zookeeper", "kraft"):
        raise UsageError(f"kctl node add/remove refused: cluster {spec.name} is being migrated to KRaft (phase"
                         f" {spec.kraft_phase}); nothing was changed",
                         hint="finish the migration (`kctl migrate kraft next`, then finalize) or roll it back first;"
                              " `kctl migrate kraft status` shows the phase")
    if spec.migrating:
        raise UsageError(f"kctl node add/remove refused: cluster {spec.name} is being moved to the secured profile"
                         f" (security.migration: {spec.security.migration.value if spec.security.migration else ''});"
                         " nothing was changed",
                         hint="finish the move first (docs/runbooks/secure-running-cluster.md)")


# ----- add ---------------------------------------------------------------------------------------------


def _kraft_role(spec: ClusterSpec, role: str | None, broker: bool) -> str:
    """The role of a node added to ``spec``: on ZooKeeper as asked (participant by default); on KRaft an observer,
    a broker that follows the controller quorum and runs no controller of its own, or (``--role controller``, a
    dynamic quorum) a participant: a controller beside its broker, as every node of kctl.yaml's quorum runs."""
    if not spec.on_kraft:
        if role == "controller":
            raise UsageError(f"cluster {spec.name} is on ZooKeeper: it has no KRaft controllers", hint="omit --role,"
                             " or --role participant / observer (the node's ZooKeeper role)")
        return role or "participant"
    if role == "controller":
        quorum.check_can_grow(spec)
        if not broker:
            raise UsageError("a controller-only node is not built yet in this kctl: a node added with --role"
                             " controller runs a controller beside its broker (as the other controllers' nodes);"
                             " nothing was changed", hint="omit --no-broker")
        return "participant"
    if role not in (None, "observer"):
        raise UsageError(f"cluster {spec.name} is on KRaft: --role {role}: a node added there is a broker (an observer"
                         " of the controller quorum) or, with --role controller, a controller beside its broker;"
                         " nothing was changed", hint="omit --role, or --role controller (a dynamic quorum)")
    if not broker:
        raise UsageError(f"cluster {spec.name} is on KRaft: a node without a broker would run nothing there (no"
                         " ZooKeeper, no controller); nothing was changed", hint="omit --no-broker")
    return "observer"


def add(spec: ClusterSpec, spec_path: Path, state_dir: Path, *, node_id: int | None = None,
        role: str | None = None, broker: bool = True, force: bool = False, timeout: float = 300,
        progress: Progress | None = None, address: str | None = None, rebalance: str | None = None,
        throttle: int | None = None, move_timeout: float = 900) -> NodeChange:
    """Write the node to kctl.yaml, render, start its container, reconfig its ZooKeeper in, wait for its broker
    (``broker=False``: a ZooKeeper-only node, participant or observer, with no broker to wait for). On KRaft the
    node is a broker alone (role observer: it follows the controller quorum, whose voters stay as they are).

    ``rebalance`` ("replicas" or "bytes"): once the cluster is healthy with the new broker, move replicas onto it
    as `kctl reassign plan --by` would over every broker (throttled to ``throttle``, waited for, verified, leaders
    elected). The node stays added if the move fails or is interrupted; the error says how to go on."""
    if rebalance is not None and rebalance not in ("replicas", "bytes"):
        raise UsageError(f"--by {rebalance!r}: expected replicas or bytes", hint="--by bytes evens out the bytes")
    if rebalance is not None and not broker:
        raise UsageError("--rebalance needs a broker on the node: a ZooKeeper-only node holds no replicas",
                         hint="drop --rebalance, or --no-broker")
    kraft = spec.on_kraft
    if not kraft:
        reconfig.require_reconfigurable(spec)
    say = progress or (lambda _m: None)
    t0 = time.monotonic()
    _colocated(spec)
    _not_migrating(spec)
    role = _kraft_role(spec, role, broker)
    edit = edit_for_add(spec, spec_path, node_id, role, broker, address=address)
    new_spec, text = edit.spec, edit.text
    nid, host = edit.entry["id"], edit.entry["hostname"]
    change = NodeChange("add", nid, new_spec.zk_host(new_spec.node(nid)), role, broker, warnings=[
        w for w in edit.warnings if "participants" not in w])
    steps = _Steps(change, say)
    joiner = None if kraft else reconfig.server_of(new_spec, nid)
    joining = False
    with roll_lock(state_dir, "kctl node add"):
        steps.wait("cluster healthy before the change", _healthy(spec), 30)
        if joiner is not None:
            _ensemble_matches(spec)
            live = reconfig.live_servers(spec)
            _, zk_warn = reconfig.check(reconfig.read_config(spec), [joiner], [], [*live, nid], force)
            change.warnings += zk_warn

        preflight_ports(new_spec, {c.name: c for c in containers(new_spec)})

        # From here on, undo on failure: the container, the rendered files and kctl.yaml.
        reconfigured = False
        try:
            _write_spec(spec_path, edit.new_text)
            write(render(new_spec, state_dir), state_dir)
            rcl.carry_applied(spec, new_spec, state_dir, {host})  # `kctl up` leaves the other nodes alone
            steps.done("kctl.yaml and the rendered files list the new node", 0.0, f"{host} (id {nid}, {role})")
            if new_spec.security.enabled:
                # Before its container starts: the node's certificate (the cluster's CA), keystore, JAAS files
                # and SCRAM bootstrap file, in the state dir it mounts.

                made = store.ensure(new_spec, state_dir)
                steps.done("secrets of the new node written", 0.0,
                           ", ".join(m for m in made if host in m) or "already there")
            joining = kraft and role == "participant"  # a new controller of the dynamic quorum
            if joining:
                # Its controller is formatted by kctl to join (--no-initial-controllers), not by its start script,
                # which formats a static quorum's: without the permit it waits as UNFORMATTED until then.
                steps.done("controller storage made without a format permit", 0.0,
                           engines.for_spec(new_spec).withhold_format_permit(new_spec, state_dir, host, "controller"))
            t = time.monotonic()
            lifecycle.start_node(new_spec, state_dir, host, progress=say)
            steps.done("container started", time.monotonic() - t, host)
            if joining:
                t = time.monotonic()
                said = quorum.format_joining(new_spec, host)
                steps.done("controller storage formatted to join the quorum", time.monotonic() - t, said)
            if joiner is not None:
                # The joiner starts with the current ensemble plus itself and syncs with the leader first.
                steps.wait(f"ZooKeeper {nid} serving (synced with the leader)", health.zk_serving(new_spec, nid),
                           timeout)
                t = time.monotonic()
                res = reconfig.reconfig(new_spec, [joiner], [], force=force,
                                        live=reconfig.live_servers(new_spec))
                reconfigured = True
                steps.done(f"ZooKeeper {nid} added to the ensemble by reconfig", time.monotonic() - t,
                           f"version {res.before.version} -> {res.after.version}: participants"
                           f" {res.after.participants}, observers {res.after.observers}")
            if broker:
                steps.wait(f"broker {nid} registered", health.broker_registered(new_spec, nid), timeout)
            if joining:
                t = time.monotonic()
                said = quorum.add_controller(new_spec, host, timeout=timeout, say=say)
                reconfigured = True  # a voter now: never undone by removing its container
                steps.done("controller promoted to a voter (add-controller)", time.monotonic() - t, said)
            steps.wait("cluster healthy", _healthy(new_spec), timeout)
        except BaseException:
            if joining and not reconfigured and _is_voter(new_spec, host):
                reconfigured = True  # add-controller went through before the failure: the node stays
            if not reconfigured:
                say(f"undoing: removing {host}, restoring kctl.yaml and the rendered files")
                _undo_add(spec, spec_path, state_dir, text, host)
            raise
        if rebalance is not None:
            _rebalance_onto(new_spec, state_dir, nid, rebalance, throttle, move_timeout, steps, change, say)
    # engine hosts: the other hosts' files list the new node from now on (read at each service's next restart)
    engines.for_spec(new_spec).deliver(new_spec, state_dir, say)
    others = ",".join(str(n.id) for n in new_spec.brokers)
    zk_only = ("a ZooKeeper-only node: no broker, no data to move; the brokers' zookeeper.connect lists it"
               " from their next restart (`kctl restart --rolling`)")
    if kraft and role == "participant":
        change.next = (f"controller {kraft_config.controller_id(new_spec.node(nid))} is a voter (`kctl quorum`);"
                       f" broker {nid} holds no data yet: `kctl reassign plan --brokers {others}` then `kctl reassign"
                       " execute plan.json --wait`; the other nodes' controller.quorum.bootstrap.servers list it from"
                       " their next restart")
    elif not broker:
        change.next = zk_only
    else:
        change.next = (
        f"broker {nid} holds its share: `kctl reassign status` shows nothing moving" if rebalance is not None else
        f"broker {nid} holds no data yet: `kctl reassign plan --brokers {others}` then"
        " `kctl reassign execute plan.json --wait`" + (
            "; the controller quorum is as it was (the new broker follows it)" if kraft else
            "; the other nodes' rendered files now list it (zookeeper.connect, the ensemble) and take effect at"
            " their next restart"))
    if not engines.for_spec(new_spec).files_reach_a_restart:
        change.next += (" (engine swarm: they reach the other services at the next `kctl up`, which makes"
                        " their tasks again; the running " + ("cluster" if kraft else "ensemble")
                        + " already has the node)")
    change.seconds = time.monotonic() - t0
    return change


def _rebalance_onto(spec: ClusterSpec, state_dir: Path, nid: int, by: str, throttle: int | None, timeout: float,
                   steps: _Steps, change: NodeChange, say: Progress) -> None:
    """``node add --rebalance``: the move over every broker, the new one included, after the node is in."""
    how = (f"`kctl reassign status` follows the move Kafka goes on with; or plan again: `kctl reassign plan --by {by}"
           " -o json > plan.json && kctl reassign execute plan.json --wait`")
    try:
        t = time.monotonic()
        p = reassign.plan(spec, None, by=by)
        target = {(e["topic"], int(e["partition"])): list(e["replicas"]) for e in p.kafka_json["partitions"]}
        if target:
            reassign.execute(spec, target, throttle=throttle, wait=True, timeout=timeout, progress=say,
                             state_dir=state_dir)
        change.moved_partitions = len(target)
        steps.done(f"{len(target)} partition(s) moved to spread the {by} over every broker", time.monotonic() - t,
                   f"broker {nid} now holds {p.replicas_per_broker['target'].get(nid, 0)} replica(s)"
                   + (f", {p.bytes_per_broker['target'].get(nid, 0)} bytes" if p.bytes_per_broker else ""))
    except KctlError as exc:
        raise ClusterError(f"node {nid} is added and healthy, but moving replicas onto it did not finish:"
                           f" {exc.message}", hint=how) from None
    except KeyboardInterrupt:
        say(f"interrupted: node {nid} is added and healthy; a reassignment already started goes on in Kafka: {how}")
        raise


def _is_voter(spec: ClusterSpec, host: str) -> bool:
    try:
        return quorum.is_voter(spec, spec.node(host))
    except KctlError:
        return False


def _unregister(spec: ClusterSpec, broker: int) -> str:
    """``kafka-cluster.sh unregister --id`` (Kafka's UnregisterBroker) in a node that stays; what the tool said."""
    run = run_kafka_tool(spec, "kafka-cluster.sh", ["--id", str(broker)], leading=["unregister"], timeout=60,
                         skip={broker})
    if run.exit_code != 0:
        raise ClusterError(f"kafka-cluster.sh unregister --id {broker} failed (exit {run.exit_code}) in {run.host}:"
                           f" {run.output.strip()[-400:]}; its broker is stopped, its container still there",
                           hint="`kctl node remove` again finishes the change")
    return run.output.strip().splitlines()[-1] if run.output.strip() else f"broker {broker} unregistered"


def _undo_add(spec: ClusterSpec, spec_path: Path, state_dir: Path, text: str, host: str) -> None:
    try:
        lifecycle.remove_node(spec, host, stop_timeout=30)
    except KctlError:
        pass
    _write_spec(spec_path, text)
    write(render(spec, state_dir), state_dir)
    shutil.rmtree(state_dir / host, ignore_errors=True)
    if spec.security.enabled:
        store.forget_host(state_dir, host)


# ----- remove ------------------------------------------------------------------------------------------


def remove(spec: ClusterSpec, spec_path: Path, state_dir: Path, ref: str, *, force: bool = False,
           throttle: int | None = None, timeout: float = 900, progress: Progress | None = None) -> NodeChange:
    """Move every replica off the node, reconfig its ZooKeeper out, remove its container, update kctl.yaml."""
    kraft = spec.on_kraft
    if not kraft:
        reconfig.require_reconfigurable(spec)
    say = progress or (lambda _m: None)
    t0 = time.monotonic()
    _colocated(spec)
    _not_migrating(spec)
    node = spec.node(ref)
    nid, host = node.id, spec.kafka_host(node)
    if len(spec.nodes) == 1:
        raise UsageError(f"{host} is the only node of {spec.name}", hint="`kctl down` removes the whole cluster")
    controller = kraft and node.role.value == "participant"
    if controller:
        quorum.check_can_shrink(spec, node, force)
    change = NodeChange("remove", nid, host, node.role.value, node.broker)
    steps = _Steps(change, say)
    with roll_lock(state_dir, "kctl node remove"):
        member = False if kraft else _ensemble_matches(spec, leaving=nid)
        # A remove that stopped half-way (broker stopped, or ZooKeeper already out) may run again.
        voter = controller and quorum.is_voter(spec, node)
        resumed = ((not member and not kraft) or (node.broker and not health.broker_registered(spec, nid)()[0])
                   or (controller and not voter))
        if not resumed:
            steps.wait("cluster healthy before the change", _healthy(spec), 30)
        # Every check before anything moves: the RF the rest can hold, the quorum the rest keeps.
        current, live_brokers = reassign.assignment(spec)
        rest = [b for b in live_brokers if b != nid]
        try:
            if node.broker:  # a ZooKeeper-only node holds no replicas
                balance.check(current, rest)
        except UsageError as exc:
            raise UsageError(f"cannot remove node {nid}: {exc.message}; nothing was changed",
                             hint="the remaining brokers must hold every partition's replication factor: add a"
                                  " node first, or lower the replication factor") from None
        edit = edit_for_remove(spec, spec_path, nid)  # kctl.yaml's rules for the smaller cluster
        new_spec = edit.spec
        live = reconfig.live_servers(spec)
        if member:
            _, zk_warn = reconfig.check(reconfig.read_config(spec), [], [nid], live, force)
            change.warnings += zk_warn

        if voter:
            # Kafka's order: the controller leaves the quorum (remove-controller, with its directory id) before it is
            # stopped; the rest of the quorum, caught up, keeps a majority of a smaller voter set.
            t = time.monotonic()
            said = quorum.remove_controller(spec, str(nid), force=force, say=say)
            steps.done("controller removed from the quorum (remove-controller)", time.monotonic() - t, said)
        target = balance.balance(current, rest) if node.broker else None
        moves = {(m.topic, m.partition): m.target for m in target.moves} if target else {}
        change.moved_partitions = len(moves)
        if moves and target:
            t = time.monotonic()
            reassign.execute(spec, moves, throttle=throttle, wait=True, timeout=timeout, progress=say,
                             state_dir=state_dir)
            steps.done(f"{len(moves)} partition(s) moved off broker {nid}", time.monotonic() - t,
                       f"replicas per broker now {target.replica_counts()}")
        left = [f"{t}-{p}" for (t, p), r in reassign.assignment(spec)[0].items() if nid in r]
        if left:
            raise ClusterError(f"broker {nid} still holds replicas of {', '.join(left[:5])}; nothing more was changed",
                               hint="`kctl reassign status`; run `kctl node remove` again when it is done")
        if node.broker:
            if services.process_state(spec, host, "kafka") == "RUNNING":
                services.stop(spec, host, "kafka")
            steps.wait(f"broker {nid} stopped (controlled shutdown) and unregistered",
                       health.broker_registered(spec, nid, want=False), 120)
            if kraft:
                # A KRaft controller keeps a stopped broker's registration (fenced) until told otherwise.
                t = time.monotonic()
                said = _unregister(spec, nid)
                steps.done(f"broker {nid}'s registration removed from the controllers", time.monotonic() - t, said)
        if member:
            t = time.monotonic()
            res = reconfig.reconfig(spec, [], [nid], force=force, live=live)
            steps.done(f"ZooKeeper {nid} removed from the ensemble by reconfig", time.monotonic() - t,
                       f"version {res.before.version} -> {res.after.version}: participants"
                       f" {res.after.participants}, observers {res.after.observers}")
        t = time.monotonic()
        lifecycle.remove_node(spec, host)
        engines.for_spec(spec).purge_node_data(spec, host)  # engine hosts: its data dirs on its host
        steps.done("container removed", time.monotonic() - t, host)
        _write_spec(spec_path, edit.new_text)
        write(render(new_spec, state_dir), state_dir)
        rcl.carry_applied(spec, new_spec, state_dir, {host})  # `kctl up` leaves the other nodes alone
        engines.for_spec(new_spec).deliver(new_spec, state_dir, say)  # engine hosts: the others' files
        shutil.rmtree(state_dir / host, ignore_errors=True)
        if spec.security.enabled:
            store.forget_host(state_dir, host)  # its certificate, keystore and JAAS files
        steps.done("kctl.yaml and the rendered files updated; the node's directories removed", 0.0,
                   f"nodes {[n.id for n in new_spec.nodes]}")
        steps.wait("cluster healthy", _healthy(new_spec), timeout)
    change.seconds = time.monotonic() - t0
    change.next = ("the other nodes' rendered files no longer list it (" + (
        "controller.quorum.bootstrap.servers" if kraft else "zookeeper.connect, the ensemble")
        + "); that takes effect at their next restart")
    return change


# ----- KRaft storage kctl refused to format (`kctl node format-storage`) -------------------------------------------
# A KRaft controller's metadata log and a KRaft broker's log dirs are formatted only where kctl made them (the
# permit of kctl.contract.format_permit, read by the image's `kraft_storage`): an empty one it did not make is a
# lost, wiped or unmounted disk, and its service waits as UNFORMATTED. format_storage gives the permit for one
# service that waits so, once the operator has decided that the node starts on new empty storage.

FORMAT_SERVICES = ("controller", "kafka")


def format_storage(spec: ClusterSpec, node: str, service: str, *, timeout: float = 120.0,
                   progress: Callable[[str], None] | None = None) -> str:
    """Permit ``service`` on ``node`` to format its empty storage and wait until it runs; UsageError unless it
    waits as UNFORMATTED (a permit left for a service that runs would format the next disk it loses)."""
    say = progress or (lambda _m: None)
    if service not in FORMAT_SERVICES:
        raise UsageError(f"--service {service}: only a KRaft controller's or broker's storage is formatted",
                         hint="--service controller or --service kafka (the one `kctl status` shows UNFORMATTED)")
    n = spec.node(node)
    host = spec.zk_host(n) if service == "controller" else spec.kafka_host(n)
    state = services.process_state(spec, host, service)
    if state != "UNFORMATTED":
        raise UsageError(f"{host}'s {service} is {state}, not UNFORMATTED: nothing to format, no permit written",
                         hint="`kctl status` names a service whose empty storage kctl refused")
    if service == "controller" and spec.dynamic_quorum:
        # A controller of a dynamic quorum is formatted to join it (--no-initial-controllers): it starts as an
        # observer, and becomes a voter again by `kctl quorum add-controller` (docs/kraft.md, "Replace a failed
        # controller").
        say(quorum.format_joining(spec, host))
    else:
        services.permit_format(spec, host, service)
        say(f"{host}: permit written ({contract.format_permit(service)}); its {service} formats its storage and"
            " starts")

    def running() -> tuple[bool, str]:
        st = services.process_state(spec, host, service)
        return st == "RUNNING", f"{host} {service} {st}"

    wait_until(f"{host}'s {service} running on its new storage", running, timeout, poll=1.0)
    if service == "controller" and spec.dynamic_quorum:
        return (f"{host}: controller formatted to join the quorum and runs, an observer copying the metadata back;"
                f" next: `kctl quorum add-controller {n.hostname}` makes it a voter again (after `kctl quorum"
                " remove-controller` of its lost incarnation, if not done yet)")
    return f"{host}: {service} formatted its new storage and runs; it copies its metadata back from the others"
