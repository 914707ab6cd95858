"""ZooKeeper dynamic reconfiguration (3.5+): read the ensemble's config, add or remove a server.

The ensemble's membership is the ``/zookeeper/config`` znode (what ``config`` in zkCli prints):
``server.N=host:peer:election:role;clientPort`` lines and a ``version``. A reconfig goes through
kazoo's ``reconfig`` (incremental: joining / leaving). kctl renders ``reconfigEnabled=true`` and a
dynamic config file (see :mod:`kctl.model.properties`); ZooKeeper checks a reconfig against the ACL of
``/zookeeper/config``, so a plain cluster runs with ``skipACL=yes`` and a secured one names a SASL
super user (``superUser=zkadmin`` in zoo.cfg, its password in the JAAS Server section and the state
dir) that the reconfig logs in as. Before asking, kctl checks what ZooKeeper would accept anyway
(the new config must keep a quorum of live participants) and what it would not warn about: an even
participant count tolerates no more failures than one fewer, so it needs ``force``. The parsing and
the checks are pure (:func:`check`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kctl.errors import ClusterError, KctlError, UsageError
from kctl.model.properties import ZK_SUPER_PRINCIPAL, zk_super_user
from kctl.model.spec import ClusterSpec
from kctl.security import store
from kctl.zk import fourlw
from kctl.zk.znodes import connect

_LINE = re.compile(r"^server\.(\d+)=([^:;=\s]+):(\d+):(\d+)(?::(participant|observer))?(?:;(?:([^;:\s]+):)?(\d+))?$")


@dataclass(frozen=True)
class Server:
    id: int
    host: str
    peer_port: int
    election_port: int
    role: str = "participant"
    client_port: int | None = None
    client_address: str | None = None

    @property
    def line(self) -> str:
        out = f"server.{self.id}={self.host}:{self.peer_port}:{self.election_port}:{self.role}"
        if self.client_port is not None:
            out += f";{self.client_address + ':' if self.client_address else ''}{self.client_port}"
        return out


@dataclass
class EnsembleConfig:
    servers: dict[int, Server]
    version: str | None = None  # hex, as ZooKeeper writes it

    @property
    def participants(self) -> list[int]:
        return sorted(i for i, s in self.servers.items() if s.role == "participant")

    @property
    def observers(self) -> list[int]:
        return sorted(i for i, s in self.servers.items() if s.role == "observer")

    @property
    def text(self) -> str:
        lines = [s.line for _, s in sorted(self.servers.items())]
        return "\n".join(lines + ([f"version={self.version}"] if self.version is not None else []))


@dataclass
class ReconfigResult:
    added: list[str]
    removed: list[int]
    before: EnsembleConfig
    after: EnsembleConfig
    warnings: list[str] = field(default_factory=list)


def parse_server(text: str) -> Server:
    """``server.4=logger4:2888:3888:observer;2181`` -> Server (UsageError naming the expected form)."""
    m = _LINE.match(text.strip())
    if not m:
        raise UsageError(f"not a ZooKeeper server line: {text!r}",
                         hint="expected server.N=HOST:PEER_PORT:ELECTION_PORT[:participant|observer][;CLIENT_PORT],"
                              " e.g. 'server.4=logger4:2888:3888:observer;2181'")
    sid, host, peer, elect, role, caddr, cport = m.groups()
    if int(sid) <= 0:
        raise UsageError(f"server id must be above 0: {text!r}")
    return Server(int(sid), host, int(peer), int(elect), role or "participant",
                  int(cport) if cport else None, caddr)


def parse_config(text: str) -> EnsembleConfig:
    """The ``/zookeeper/config`` znode's text (or a dynamic config file) -> EnsembleConfig."""
    servers: dict[int, Server] = {}
    version = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("version="):
            version = line.split("=", 1)[1]
        elif line.startswith("server."):
            s = parse_server(line)
            servers[s.id] = s
    return EnsembleConfig(servers, version)


def majority(n: int) -> int:
    return n // 2 + 1


def check(current: EnsembleConfig, add: Iterable[Server] = (), remove: Iterable[int] = (),
          live: Iterable[int] | None = None, force: bool = False) -> tuple[EnsembleConfig, list[str]]:
    """The config after the change, and its warnings; UsageError for a change ZooKeeper or kctl refuses.

    ``live``: ids of servers answering now (None: not known, not checked). Refused: adding an id that is
    a member, removing one that is not, no participant left, fewer live participants than a majority of
    the new ensemble, and (without ``force``) an even participant count.
    """
    add, remove = list(add), list(remove)
    if not add and not remove:
        raise UsageError("nothing to change", hint="--add 'server.N=HOST:2888:3888:ROLE;2181' or --remove N")
    servers = dict(current.servers)
    for i in remove:
        if i not in servers:
            raise UsageError(f"server {i} is not in the ensemble",
                             hint=f"members: {', '.join(map(str, sorted(servers))) or 'none'} (`kctl zk config`)")
        del servers[i]
    for s in add:
        if s.id in servers:
            raise UsageError(f"server {s.id} is already in the ensemble ({servers[s.id].line})",
                             hint=f"remove it first (--remove {s.id}), or pick another id")
        if s.id in remove:
            raise UsageError(f"server {s.id} is both added and removed", hint="one change per server")
        servers[s.id] = s
    after = EnsembleConfig(servers, None)
    parts = after.participants
    if not parts:
        raise UsageError("the change leaves no participant: observers cannot form a quorum",
                         hint="keep at least one participant (3 or 5 for fault tolerance)")
    need = majority(len(parts))
    if live is not None:
        down = [s.id for s in add if s.id not in set(live)]
        if down:
            raise UsageError(f"joining server(s) {', '.join(map(str, down))} do not answer: a joiner must be running,"
                             " started with the current ensemble plus itself, before it is added",
                             hint="`kctl node add` starts the node first and then adds it")
        up = [i for i in parts if i in set(live)]
        if len(up) < need:
            raise UsageError(
                f"the new ensemble has {len(parts)} participants ({', '.join(map(str, parts))}) and needs {need}"
                f" of them up for a quorum; only {len(up)} answer ({', '.join(map(str, up)) or 'none'})",
                hint="start the joining server first (it joins with the current config plus itself), or bring"
                     " the stopped participants back (`kctl status`)")
    warnings: list[str] = []
    if len(parts) % 2 == 0:
        msg = (f"{len(parts)} participants: an even ensemble tolerates no more failures than {len(parts) - 1}"
               f" participants would (a majority of {len(parts)} is {need}); use 3 or 5")
        if not force:
            raise UsageError(f"refusing: {msg}", hint="add the server as an observer (…:observer;2181), change"
                                                       " another server too, or pass --force")
        warnings.append(msg)
    if len(parts) == 1 and len(servers) > 1:
        warnings.append("a single participant has no fault tolerance; use 3 or 5")
    return after, warnings


def server_of(spec: ClusterSpec, node_id: int) -> Server:
    """The line a kctl.yaml node gets in the ensemble (as rendered into zoo.cfg.dynamic)."""
    n = spec.node(node_id)
    zk = spec.zookeeper
    return Server(n.id, spec.zk_host(n), zk.peer_port, zk.election_port, n.role.value, zk.client_port)


# ----- against the ensemble ---------------------------------------------------------------------------


def read_config(spec: ClusterSpec) -> EnsembleConfig:
    """The ensemble's current dynamic config, from ``/zookeeper/config`` (outside Kafka's chroot)."""
    with connect(spec, chroot=False) as zk:
        zk.sync("/zookeeper/config")
        raw, _ = zk.get("/zookeeper/config")
    return parse_config((raw or b"").decode("utf-8", "replace"))


def live_servers(spec: ClusterSpec, extra: Mapping[int, tuple[str, int]] | None = None) -> list[int]:
    """Ids of the ZooKeeper servers answering ``srvr`` with a mode (the kctl.yaml nodes, plus ``extra``)."""
    targets = {n.id: (spec.node_address(n), spec.zk_host_port(n)) for n in spec.nodes}
    targets.update(extra or {})
    out = []
    for i, (host, port) in targets.items():
        try:
            a = fourlw.ask(host, port, "srvr", timeout=2.0)
        except fourlw.FourLetterError:
            continue
        if "Mode:" in a.text:
            out.append(i)
    return sorted(out)


def require_reconfigurable(spec: ClusterSpec) -> str | None:
    """The ZooKeeper principal a reconfig logs in as: None (skipACL, plain clusters) or, on a secured
    ensemble, ZooKeeper's super user (zoo.cfg superUser), whose password must be in the state dir."""
    principal = zk_super_user(spec)
    if principal is None:
        return None
    import json


    sd = store.state_dir_of(spec)
    store.passwords(spec, sd)  # the state dir's secrets at all (a clear error when there are none)
    try:
        known = json.loads((store.secrets_dir(sd) / store.PASSWORDS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if ZK_SUPER_PRINCIPAL not in known:
        raise KctlError(f"cluster {spec.name!r} has no ZooKeeper super user yet (its secrets were made by an older"
                        " kctl): the ensemble cannot be changed at run time",
                        hint="`kctl up` adds it: it writes its password and ZooKeeper's JAAS file and makes the"
                             " containers again (their zoo.cfg names it as superUser)")
    return principal


def reconfig(spec: ClusterSpec, add: list[Server], remove: list[int], *, force: bool = False,
             live: list[int] | None = None) -> ReconfigResult:
    """Check the change against the current config and the live servers, then reconfig through kazoo."""
    from kazoo.exceptions import (
        BadArgumentsError,
        ConnectionLoss,
        NewConfigNoQuorumError,
        NoAuthError,
        ReconfigInProcessError,
        ZookeeperError,
    )


    principal = require_reconfigurable(spec)
    before = read_config(spec)
    after, warnings = check(before, add, remove, live if live is not None else live_servers(spec), force)
    # Ask a server that stays: a leaving one drops its clients as the change commits.
    stay = [n for n in spec.nodes if n.id not in remove and n.id not in {s.id for s in add}]
    hosts = ",".join(f"{spec.node_address(n)}:{spec.zk_host_port(n)}" for n in stay)
    with connect(spec, timeout=5.0, chroot=False, hosts=hosts, principal=principal) as zk:
        try:
            data, _ = zk.reconfig(joining=",".join(s.line for s in add) or None,
                                  leaving=",".join(map(str, remove)) or None, new_members=None)
        except ConnectionLoss:
            # The answer was lost, not necessarily the change: look at what the ensemble says now.
            now = read_config(spec)
            if set(now.servers) == set(after.servers):
                return ReconfigResult([s.line for s in add], list(remove), before, now, warnings)
            raise ClusterError("lost the connection to ZooKeeper during the reconfig, and the ensemble did not"
                               " change", hint="`kctl zk config`; try again") from None
        except NewConfigNoQuorumError:
            raise ClusterError("ZooKeeper refused: the new ensemble has no quorum of synced servers; nothing changed",
                               hint="is the joining server running and synced? `kctl zk srvr --node all`") from None
        except ReconfigInProcessError:
            raise ClusterError("another reconfiguration is in progress; nothing changed",
                               hint="try again in a moment (`kctl zk config`)") from None
        except NoAuthError:
            raise ClusterError(f"ZooKeeper refused the reconfig to {principal or 'an unauthenticated session'}:"
                               " not authorized on /zookeeper/config; nothing changed",
                               hint="a secured ensemble takes it from its super user (zoo.cfg superUser, the JAAS"
                                    " Server section): containers made by an older kctl need `kctl up` first") from None
        except BadArgumentsError as exc:
            raise UsageError(f"ZooKeeper refused the change as bad arguments: {exc}; nothing changed") from None
        except ZookeeperError as exc:
            raise ClusterError(f"ZooKeeper refused the reconfig: {type(exc).__name__} {exc}".rstrip(),
                               hint="reconfig needs reconfigEnabled=true and skipACL=yes (secured: superUser),"
                                    " which `kctl render` writes; a cluster rendered by an older kctl needs"
                                    " `kctl restart --rolling` first") from None
    result_cfg = parse_config((data or b"").decode("utf-8", "replace"))
    return ReconfigResult([s.line for s in add], list(remove), before, result_cfg, warnings)
