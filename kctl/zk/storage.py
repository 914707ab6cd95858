"""ZooKeeper's storage: snapshots (dataDir) and transaction logs (dataLogDir) per node, and their purge.

Read on the host, under the state dir's data mount (``<state>/<host>/data`` is
``contract.DATA_ROOT`` in the container), so a stopped node is measured too.
ZooKeeper writes both under a ``version-2`` sub-directory; its log names the
txn-log dir "datadir" and the snapshot dir "snapdir" (the seed tutorial's
warning), which is why both keys are shown with their zoo.cfg names.
The purge is ZooKeeper's own ``PurgeTxnLog``, run in the node.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kctl import contract
from kctl.errors import KctlError, UsageError
from kctl.model.properties import DATA_DIR, DATA_LOG_DIR, services_of, zoo_cfg
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import engines

VERSION_DIR = "version-2"
MIN_KEEP = 3  # ZooKeeper's PurgeTxnLog refuses fewer, and so does autopurge.snapRetainCount


@dataclass
class DirUsage:
    key: str  # dataDir or dataLogDir
    container_path: str
    host_path: str | None  # None: not under the data mount, so not readable from the host
    files: int = 0
    bytes: int = 0  # apparent size (txn logs are preallocated: 64 MB each until full)
    disk_bytes: int = 0  # blocks actually allocated
    newest: str | None = None
    oldest: str | None = None


@dataclass
class NodeStorage:
    node: str
    snapshots: DirUsage
    txn_logs: DirUsage
    separate: bool  # dataLogDir apart from dataDir, as the seed recommends
    problems: list[str] = field(default_factory=list)


def host_path(state_dir: Path, host: str, container_path: str) -> Path | None:
    """Where a container path under the data mount is on the host; None for any other path."""
    p, root = PurePosixPath(container_path), PurePosixPath(contract.DATA_ROOT)
    if p != root and root not in p.parents:
        return None
    return state_dir / host / contract.HOST_DATA / p.relative_to(root)


def _mtime(path: Path) -> str:
    return _dt.datetime.fromtimestamp(path.stat().st_mtime, tz=_dt.timezone.utc).isoformat(timespec="seconds")


def scan(key: str, container_path: str, host: Path | None, prefix: str) -> DirUsage:
    """Count ``prefix*`` files (snapshot. or log.) in ``<dir>/version-2``."""
    u = DirUsage(key, container_path, str(host) if host else None)
    if host is None:
        return u
    d = host / VERSION_DIR
    files = sorted((f for f in d.glob(prefix + "*") if f.is_file()), key=lambda f: f.stat().st_mtime) \
        if d.is_dir() else []
    for f in files:
        st = f.stat()
        u.files += 1
        u.bytes += st.st_size
        u.disk_bytes += st.st_blocks * 512
    if files:
        u.oldest, u.newest = f"{files[0].name} ({_mtime(files[0])})", f"{files[-1].name} ({_mtime(files[-1])})"
    return u


def storage(spec: ClusterSpec, state_dir: Path) -> list[NodeStorage]:
    """Snapshot and txn-log counts and sizes of every ZooKeeper, read from the state dir."""
    out = []
    for host, node, services in services_of(spec):
        if "zookeeper" not in services:
            continue
        cfg = zoo_cfg(spec, node)
        snap_dir, log_dir = str(cfg[DATA_DIR]), str(cfg.get(DATA_LOG_DIR, cfg[DATA_DIR]))
        snap_host, log_host = host_path(state_dir, host, snap_dir), host_path(state_dir, host, log_dir)
        ns = NodeStorage(host, scan(DATA_DIR, snap_dir, snap_host, "snapshot."),
                         scan(DATA_LOG_DIR, log_dir, log_host, "log."), separate=snap_dir != log_dir)
        for u in (ns.snapshots, ns.txn_logs):
            if u.host_path is None:
                ns.problems.append(f"{u.key} {u.container_path} is outside {contract.DATA_ROOT}: not readable here")
            elif not (Path(u.host_path) / VERSION_DIR).is_dir():
                ns.problems.append(f"no {u.host_path}/{VERSION_DIR} (never started, or data removed)")
        if not ns.separate:
            ns.problems.append("dataLogDir equals dataDir: snapshots and txn logs share one disk")
        out.append(ns)
    return out


@dataclass
class PurgeResult:
    node: str
    keep: int
    argv: list[str]
    output: str
    before: NodeStorage
    after: NodeStorage


# PurgeTxnLog with the node's own JVM and jars, as the `logger` user that owns the files.
_PURGE = ('. /usr/local/lib/kctl/jvm-common.sh && exec "$JAVA" -Xmx64m -cp "$KAFKA_HOME/libs/*"'
          ' -Dlog4j.configuration=file:/etc/kctl/log4j-zookeeper.properties'
          ' org.apache.zookeeper.server.PurgeTxnLog "$1" "$2" -n "$3"')


def purge(spec: ClusterSpec, state_dir: Path, node: str, keep: int = MIN_KEEP) -> PurgeResult:
    """Keep the newest ``keep`` snapshots (and the txn logs they need) on ``node``; delete older ones."""
    if keep < MIN_KEEP:
        raise UsageError(f"--keep {keep}: ZooKeeper keeps at least {MIN_KEEP} snapshots",
                         hint="a snapshot with its txn logs is what a restarting server recovers from")
    n = spec.node(node)
    host = spec.zk_host(n)
    before = next(s for s in storage(spec, state_dir) if s.node == host)
    cfg = zoo_cfg(spec, n)
    snap_dir, log_dir = str(cfg[DATA_DIR]), str(cfg.get(DATA_LOG_DIR, cfg[DATA_DIR]))
    # PurgeTxnLog's arguments: <dataLogDir> <dataDir>, the txn-log dir first.
    argv = ["bash", "-c", _PURGE, "purge", log_dir, snap_dir, str(keep)]
    code, out = engines.exec_in(spec, host, argv, user="logger", timeout=120)
    if code != 0:
        raise KctlError(f"{host}: PurgeTxnLog failed (exit {code}): {out.strip()[-800:]}",
                        hint=f"`kctl zk storage` shows the dirs; `kctl logs {host} --service zookeeper`")
    after = next(s for s in storage(spec, state_dir) if s.node == host)
    return PurgeResult(host, keep, ["PurgeTxnLog", log_dir, snap_dir, "-n", str(keep)], out.strip(), before, after)
