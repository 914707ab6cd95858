"""kctl zk: four-letter words on each ZooKeeper server, and znodes through kazoo."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect, load
from kctl.output import Format


def require_zookeeper(spec: Any, what: str) -> Any:
    """kctl.zk's refusal for a cluster on KRaft, imported when a command runs (building the tree imports none)."""
    from kctl.zk import require_zookeeper as require

    return require(spec, what)


def register(app: typer.Typer) -> None:
    zk_app = typer.Typer(cls=_ZkGroup, help="ZooKeeper: four-letter words on each server, and znodes through kazoo.",
                         no_args_is_help=True)
    zk_app.command("ls")(zk_ls)
    zk_app.command("get")(zk_get)
    zk_app.command("tree")(zk_tree)
    zk_app.command("storage")(zk_storage)
    zk_app.command("purge")(zk_purge)
    zk_app.command("config")(zk_config)
    zk_app.command("reconfig")(zk_reconfig)
    app.add_typer(zk_app, name="zk")


class _ZkGroup(TyperGroup):
    """`kctl zk` with one command per four-letter word, built when `kctl zk` runs.

    The words and what they do are kctl.zk's (kctl.zk.words.DESCRIPTIONS); importing
    it to build the whole command tree would make every other command pay for it.
    """

    _words: list[str] | None = None

    def _add_words(self) -> list[str]:
        if self._words is None:
            from kctl.zk.words import DESCRIPTIONS

            for word, doc in DESCRIPTIONS.items():
                one = typer.Typer(add_completion=False)
                one.command(word)(_word_command(word, doc))
                self.commands.setdefault(word, typer.main.get_command(one))
            self._words = list(DESCRIPTIONS)
        return self._words

    def list_commands(self, ctx: Any) -> list[str]:
        words = self._add_words()
        return words + [c for c in super().list_commands(ctx) if c not in words]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands:
            self._add_words()
        return super().get_command(ctx, cmd_name)


# ----- four-letter words -----------------------------------------------------------------------


def _word_command(word: str, doc: str) -> Callable[..., None]:
    def cmd(
        node: str = typer.Option("all", "--node", "-n", help="loggerN, a node id, or all."),
        timeout: float = typer.Option(3.0, "--timeout", help="Seconds to wait for each server."),
        file: Path = SpecOpt,
        fmt: Format = typer.Option(Format.table, "--output", "-o", help="table, wide, json, yaml or raw."),
    ) -> None:
        from kctl.zk import words

        spec = require_zookeeper(connect(file).kctl_spec, "`kctl zk`")
        results = words.run(spec, word, node, timeout)
        _emit_words(word, results, fmt)
        for r in results:
            if r.explanation:
                output.warn(f"{r.node}: {r.explanation}")
        if any(not r.ok for r in results):
            raise typer.Exit(1)

    cmd.__doc__ = doc
    return cmd


def _emit_words(word: str, results: list[Any], fmt: Format) -> None:
    from kctl.zk import fourlw

    def raw_text() -> str:
        if len(results) == 1:
            return str(results[0].text or results[0].error or "")
        return "\n".join(f"== {r.node} ({r.address}) ==\n{(r.text or r.error or '').rstrip()}" for r in results)

    if fmt in (Format.json, Format.yaml):
        output.emit(results, fmt)
        return
    if fmt is Format.raw or word not in fourlw.PARSED:
        output.emit(results, Format.raw, raw=raw_text())
        return
    if word in ("srvr", "stat"):
        rows = [{"node": r.node, "address": r.address, **r.fields, "error": r.error or r.explanation}
                for r in results]
        output.emit(results, fmt, rows=rows,
                    columns=["node", "mode", "zxid", "node_count", "connections", "outstanding", "latency_avg"],
                    wide_columns=["address", "version", "received", "sent", "latency_min", "latency_max", "error"])
        if word == "stat" and fmt is Format.wide:
            for r in results:
                output.stdout.print(f"{r.node} clients: " + ("; ".join(r.fields.get("clients", [])) or "-"))
        return
    # mntr, conf, envi: one row per key, one column per server
    keys: list[str] = []
    for r in results:
        keys += [k for k in r.fields if k not in keys]
    rows = [{"key": k, **{r.node: r.fields.get(k) for r in results}} for k in keys]
    output.emit(results, fmt, rows=rows, columns=["key", *[r.node for r in results]])


# ----- znodes ----------------------------------------------------------------------------------


def zk_ls(path: str = typer.Argument("/", help="Znode path."), file: Path = SpecOpt,
          fmt: Format = OutputOpt) -> None:
    """List the children of a znode (zkCli.sh ls)."""
    from kctl.zk import znodes

    spec = require_zookeeper(connect(file).kctl_spec, "`kctl zk`")
    with znodes.connect(spec) as zk:
        children = znodes.ls(zk, path)
    output.emit({"path": path, "children": children}, fmt, rows=[{"child": c} for c in children],
                columns=["child"], raw="\n".join(children))


def zk_get(path: str = typer.Argument(..., help="Znode path."), file: Path = SpecOpt,
           fmt: Format = OutputOpt) -> None:
    """Data and stat of a znode (zkCli.sh get -s); JSON data is parsed."""
    from kctl.zk import znodes

    spec = require_zookeeper(connect(file).kctl_spec, "`kctl zk`")
    with znodes.connect(spec) as zk:
        node = znodes.get(zk, path)
    rows = [{"field": "data", "value": node.data}, *({"field": k, "value": v} for k, v in node.stat.items())]
    output.emit(node, fmt, rows=rows, columns=["field", "value"], raw=node.data or "")


def zk_tree(path: str = typer.Argument("/", help="Where to start."),
            depth: int = typer.Option(3, "--depth", "-d", min=0, max=20, help="Levels below PATH."),
            data: bool = typer.Option(False, "--data", help="Include each znode's data."),
            file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """Walk the znode tree (e.g. /brokers/topics/T/partitions/P/state, /controller, /config)."""
    from kctl.zk import znodes

    spec = require_zookeeper(connect(file).kctl_spec, "`kctl zk`")
    with znodes.connect(spec) as zk:
        entries = znodes.tree(zk, path, depth, with_data=data)
    base = entries[0].depth if entries else 0
    rows = [{"znode": "  " * (e.depth - base) + (e.path.rsplit("/", 1)[-1] or "/") if e.depth else e.path,
             "children": e.children, "bytes": e.data_length, "ephemeral": e.ephemeral,
             "data": e.data} for e in entries]
    cols = ["znode", "children", "bytes", "ephemeral"] + (["data"] if data else [])
    output.emit(entries, fmt, rows=rows, columns=cols, raw="\n".join(e.path for e in entries))


# ----- storage ----------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def _storage_rows(nodes: list[Any]) -> list[dict[str, Any]]:
    return [{"node": s.node, "snapshots": s.snapshots.files, "snap_mb": _mb(s.snapshots.bytes),
             "txn_logs": s.txn_logs.files, "txn_mb": _mb(s.txn_logs.bytes),
             "txn_disk_mb": _mb(s.txn_logs.disk_bytes), "dataDir": s.snapshots.container_path,
             "dataLogDir": s.txn_logs.container_path, "newest_snapshot": s.snapshots.newest,
             "problems": "; ".join(s.problems) or None} for s in nodes]


def zk_storage(file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """Snapshot (dataDir) and transaction-log (dataLogDir) counts and sizes per node, from the state dir."""
    from kctl.model.spec import state_dir_for
    from kctl.zk import storage

    spec = require_zookeeper(load(file), "`kctl zk`")
    nodes = storage.storage(spec, state_dir_for(spec, file))
    output.emit(nodes, fmt, rows=_storage_rows(nodes),
                columns=["node", "snapshots", "snap_mb", "txn_logs", "txn_mb", "txn_disk_mb", "problems"],
                wide_columns=["dataDir", "dataLogDir", "newest_snapshot"],
                footer="txn logs are preallocated (64 MB each): txn_disk_mb is what they hold on disk")


def zk_purge(node: str = typer.Argument(None, help="Node whose ZooKeeper storage to purge (loggerN or id);"
                                                    " default every node."),
             keep: int = typer.Option(3, "--keep", "-n", help="Snapshots to keep, with the txn logs they need"
                                                              " (at least 3)."),
             file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """Delete old snapshots and txn logs with ZooKeeper's own PurgeTxnLog, run in the node."""
    from kctl.model.spec import state_dir_for
    from kctl.zk import storage

    # PurgeTxnLog runs in this cluster's own containers only
    spec = require_zookeeper(connect(file, write=True).kctl_spec, "`kctl zk`")
    if keep < storage.MIN_KEEP:  # before touching any node
        storage.purge(spec, state_dir_for(spec, file), node or spec.nodes[0].hostname, keep)
    targets = [node] if node else [spec.zk_host(n) for n in spec.nodes]
    results = [storage.purge(spec, state_dir_for(spec, file), t, keep) for t in targets]
    lines = [f"{r.node}: kept {keep}; snapshots {r.before.snapshots.files} -> {r.after.snapshots.files},"
             f" txn logs {r.before.txn_logs.files} -> {r.after.txn_logs.files}"
             f" ({_mb(r.before.txn_logs.disk_bytes)} -> {_mb(r.after.txn_logs.disk_bytes)} MB on disk)"
             for r in results]
    output.emit_change(results, fmt, "\n".join(lines))


def zk_config(file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """The ensemble's current dynamic config (the /zookeeper/config znode): members, roles, version."""
    from kctl.zk import reconfig

    spec = require_zookeeper(connect(file).kctl_spec, "`kctl zk`")
    cfg = reconfig.read_config(spec)
    rows = [{"id": s.id, "host": s.host, "role": s.role, "peer_port": s.peer_port,
             "election_port": s.election_port, "client_port": s.client_port} for _, s in sorted(cfg.servers.items())]
    output.emit(cfg, fmt, rows=rows, raw=cfg.text, title=f"ZooKeeper ensemble of {spec.name}",
                footer=f"version {cfg.version}: {len(cfg.participants)} participant(s), {len(cfg.observers)}"
                       " observer(s)")


def zk_reconfig(
    add: list[str] = typer.Option(None, "--add", help="A joining server: 'server.4=logger4:2888:3888:observer;2181'."
                                                      " Start it first, with the current config plus itself."),
    remove: list[int] = typer.Option(None, "--remove", help="Id of a server to remove from the ensemble."),
    force: bool = typer.Option(False, "--force", help="Allow an even number of participants."),
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Change the ensemble's membership with ZooKeeper's dynamic reconfiguration (one change at a time)."""
    from kctl.errors import UsageError
    from kctl.zk import reconfig

    servers = [reconfig.parse_server(a) for a in add or []]  # a malformed line stops before any connection
    if not servers and not remove:
        raise UsageError("nothing to change", hint="--add 'server.N=HOST:2888:3888:ROLE;2181' or --remove N")
    from kctl.cluster.lock import roll_lock
    from kctl.model.spec import state_dir_for

    spec = require_zookeeper(connect(file, write=True).kctl_spec, "`kctl zk`")
    with roll_lock(state_dir_for(spec, file), "kctl zk reconfig"):  # not while a roll or a node change runs
        res = reconfig.reconfig(spec, servers, list(remove or []), force=force)
    for w in res.warnings:
        output.warn(w)
    output.emit_change(res, fmt, f"ensemble reconfigured (version {res.before.version} -> {res.after.version}):"
                                 f" participants {','.join(map(str, res.after.participants))}, observers"
                                 f" {','.join(map(str, res.after.observers)) or 'none'}"
                                 "; kctl.yaml is unchanged (`kctl node add/remove` keep it in step)")
