"""engine hosts: which cluster and which node a host is, checked before kctl writes or deletes anything there.

A node's address in kctl.yaml is all that ties it to a machine: a typo, a host reused from another cluster or two
names for one machine would otherwise have kctl install over another cluster's node, rewrite a ZooKeeper
``myid`` inside someone's data, or ``rm -rf`` data it never made. So every host carries an identity:

- the cluster's uid, made by kctl the first time it installs the cluster on hosts (before Kafka has a cluster id
  of its own) and kept in the state dir (``<state>/cluster-uid``), with the cluster's name and the node's
  hostname and id: ``/etc/kctl/identity`` (install.sh), and a copy, ``.kctl-identity``, in each data directory
  and the data root (kctl-prepare, before each start), which ``kctl down`` keeps with the data;
- its ``/etc/machine-id``, read to find two nodes whose addresses reach one machine.

:func:`observe_script` is what kctl runs over ssh (as root, reading only); :func:`parse_facts` reads its
output; :func:`problems` and :func:`same_machines` decide (pure). ``kctl up`` and ``kctl node add`` refuse every
problem before any host is changed; ``kctl down`` before any is stopped, ``--volumes`` also a data directory
that holds data without kctl's marker where kctl's own install is not. install.sh and kctl-prepare check
again on the host itself (a bundle installed by hand).
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kctl import contract
from kctl.files import write_durable
from kctl.kraft import config as kraft_config
from kctl.model import properties
from kctl.model.spec import ClusterSpec, NodeSpec

KEYS = ("cluster", "uid", "node", "id")


def uid_path(state_dir: Path) -> Path:
    return state_dir / contract.CLUSTER_UID_FILE


def read_uid(state_dir: Path) -> str | None:
    """The cluster's uid as this state dir recorded it; None before its first install on hosts."""
    try:
        text = uid_path(state_dir).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def ensure_uid(state_dir: Path) -> str:
    """The recorded uid, or a new one recorded (durably) now: the first install of this cluster on hosts."""
    found = read_uid(state_dir)
    if found:
        return found

    made = uuid.uuid4().hex
    write_durable(uid_path(state_dir), made + "\n", mode=0o644)
    return made


def identity_text(spec: ClusterSpec, uid: str, host: str, node: NodeSpec) -> str:
    """/etc/kctl/identity of a node's host (and each data directory's .kctl-identity)."""
    return (f"# kctl: this host is node {host} (id {node.id}) of cluster {spec.name}; kctl refuses to install,"
            " uninstall or delete data on a host whose identity is another's\n"
            f"cluster={spec.name}\nuid={uid}\nnode={host}\nid={node.id}\n")


def parse_identity(text: str) -> dict[str, str]:
    """{key: value} of an identity (``key=value`` lines, or on one line separated by blanks); comments skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for item in line.split():
            key, sep, value = item.partition("=")
            if sep and key in KEYS:
                out[key] = value
    return out


def data_dirs(spec: ClusterSpec, node: NodeSpec, services: tuple[str, ...]) -> list[str]:
    """The data root and every data directory the node's rendered files name (on KRaft, a controller's metadata
    log instead of ZooKeeper's: a host there has no ZooKeeper)."""
    dirs = [contract.DATA_ROOT]
    if "zookeeper" in services and spec.on_kraft:
        dirs += [kraft_config.METADATA_DIR] if node in kraft_config.controller_nodes(spec) else []
    elif "zookeeper" in services:
        zoo = properties.zoo_cfg(spec, node)
        dirs += [zoo.get(properties.DATA_DIR, ""), zoo.get(properties.DATA_LOG_DIR, "")]
    if "kafka" in services:
        server = properties.server_properties(spec, node)
        dirs += (server.get("log.dirs") or server.get("log.dir") or "").split(",")
    return list(dict.fromkeys(str(Path(d.strip())) for d in dirs if d.strip()))


def observe_script(dirs: list[str]) -> str:
    """A shell line (root, read-only) printing, tab-separated: the machine id, /etc/kctl/identity, the
    installed bundle.env's cluster and node (an install of an earlier kctl has no identity), and each of
    ``dirs`` as absent, empty, marked (with its marker) or data."""
    q = " ".join(shlex.quote(d) for d in dirs)
    ident = contract.HOST_IDENTITY_FILE
    env = f"{contract.HOST_ROOT}/bundle.env"
    m = contract.DATA_MARKER
    return (f"printf 'machine-id\\t%s\\n' \"$(cat /etc/machine-id 2>/dev/null)\";"
            f" if [ -r {ident} ]; then printf 'identity\\t%s\\n' \"$(grep -v '^#' {ident} | tr '\\n' ' ')\"; fi;"
            f" if [ -r {env} ]; then ( . {env} 2>/dev/null; printf 'bundle\\tcluster=%s node=%s\\n'"
            " \"${KCTL_CLUSTER:-}\" \"${KCTL_NODE:-}\" ); fi;"
            f" for d in {q}; do if [ ! -e \"$d\" ]; then printf 'dir\\tabsent\\t%s\\n' \"$d\";"
            f" elif [ -f \"$d/{m}\" ]; then printf 'dir\\tmarked\\t%s\\t%s\\n' \"$d\""
            f" \"$(grep -v '^#' \"$d/{m}\" | tr '\\n' ' ')\";"
            " elif [ -z \"$(ls -A \"$d\" 2>/dev/null)\" ]; then printf 'dir\\tempty\\t%s\\n' \"$d\";"
            " else printf 'dir\\tdata\\t%s\\n' \"$d\"; fi; done")


@dataclass(frozen=True)
class DirState:
    path: str
    state: str  # absent, empty, marked, data
    marker: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HostFacts:
    machine_id: str | None
    identity: dict[str, str] | None  # /etc/kctl/identity
    bundle: dict[str, str] | None  # an installed bundle.env's cluster and node
    dirs: tuple[DirState, ...] = ()
    mem_total_mb: int | None = None  # the host's memory (/proc/meminfo's MemTotal)


# What the preflight's round trip adds to observe_script's lines: the host's memory.
MEM_SCRIPT = "printf 'mem\\t%s\\n' \"$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)\""


def parse_facts(out: str) -> HostFacts:
    mem: int | None = None
    machine: str | None = None
    ident: dict[str, str] | None = None
    bundle: dict[str, str] | None = None
    dirs: list[DirState] = []
    for line in out.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "machine-id":
            machine = rest.strip() or None
        elif kind == "identity":
            ident = parse_identity(rest)
        elif kind == "bundle":
            bundle = parse_identity(rest)
        elif kind == "mem":
            mem = int(rest.strip()) // 1024 if rest.strip().isdigit() else None
        elif kind == "dir":
            state, _, tail = rest.partition("\t")
            path, _, marker = tail.partition("\t")
            dirs.append(DirState(path, state, parse_identity(marker) if state == "marked" else {}))
    return HostFacts(machine, ident, bundle, tuple(dirs), mem)


@dataclass(frozen=True)
class Expected:
    """Who a host must be: this cluster (its name, and its uid once it has one) and this node."""

    cluster: str
    uid: str | None  # None: this state dir never installed the cluster on hosts
    node: str
    node_id: int


def _whose(ident: dict[str, str]) -> str:
    return (f"node {ident.get('node', '?')} (id {ident.get('id', '?')}) of cluster {ident.get('cluster', '?')!r}"
            f" (uid {ident.get('uid', '?')})")


def identity_problem(want: Expected, ident: dict[str, str]) -> str | None:
    """Why an identity is not this node's, or None."""
    if ident.get("cluster") != want.cluster or ident.get("uid") != want.uid:
        mine = f"uid {want.uid}" if want.uid else "no uid yet: it never installed this cluster on hosts"
        return f"{_whose(ident)}, another cluster than this state dir's ({mine})"
    if ident.get("node") != want.node or ident.get("id") != str(want.node_id):
        return f"{_whose(ident)}: another node of this cluster, not {want.node} (id {want.node_id})"
    return None


def problems(want: Expected, facts: HostFacts, *, data: bool = True) -> list[str]:
    """Why this host is not ``want``'s node (each reason a phrase; empty: it is, or it holds nothing of kctl).
    ``data``: also a data directory with data but no marker, on a host where this node is not installed (it
    is someone else's, or of a kctl that predates the markers: never kctl's to overwrite or delete)."""
    out: list[str] = []
    ours = False
    if facts.identity is not None:
        why = identity_problem(want, facts.identity)
        if why:
            out.append(f"{contract.HOST_IDENTITY_FILE} says it is {why}")
        else:
            ours = True
    elif facts.bundle is not None:  # installed by a kctl that wrote no identity: its bundle.env names the node
        if facts.bundle.get("cluster") != want.cluster or facts.bundle.get("node") != want.node:
            out.append(f"it holds kctl's install of node {facts.bundle.get('node', '?')} of cluster"
                       f" {facts.bundle.get('cluster', '?')!r} ({contract.HOST_ROOT}/bundle.env)")
        else:
            ours = True
    for d in facts.dirs:
        if d.state == "marked":
            why = identity_problem(want, d.marker)
            if why:
                out.append(f"{d.path} holds the data of {why}")
        elif d.state == "data" and data and not ours:
            out.append(f"{d.path} holds data that kctl did not install there (no {contract.DATA_MARKER})")
    return out


def same_machines(seen: list[tuple[str, str | None]]) -> list[str]:
    """(node, machine id) of every host -> one line per machine that two or more nodes reach."""
    by_id: dict[str, list[str]] = {}
    for where, machine in seen:
        if machine:
            by_id.setdefault(machine, []).append(where)
    return [f"{' and '.join(nodes)} are one machine (/etc/machine-id {machine})"
            for machine, nodes in by_id.items() if len(nodes) > 1]


HINT = ("check nodes[].advertised_host in kctl.yaml: each must be the address of that node's own host; a host of"
        " another cluster is freed by `kctl down` from that cluster's kctl.yaml (or `sudo /opt/kctl/uninstall.sh`"
        " there); data kctl did not install is never overwritten or deleted: move it away first"
        " (docs/bare-metal.md, \"Whose host it is\")")
