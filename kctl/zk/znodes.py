"""Znode reads through kazoo: broker registrations, controller, and the tree walk."""

from __future__ import annotations

import datetime as _dt
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import ClusterError, KctlError
from kctl.model.properties import ZK_BROKER_PRINCIPAL, ZK_KCTL_PRINCIPAL
from kctl.model.spec import ClusterSpec
from kctl.security import store
from kctl.zk import require_zookeeper

# kazoo logs every connection failure at WARNING; kctl reports them itself.
logging.getLogger("kazoo").setLevel(logging.CRITICAL)


def sasl_options(spec: ClusterSpec, principal: str | None = None) -> dict[str, Any]:
    """kazoo's DIGEST-MD5 login for a secured cluster (kctl's own read principal unless ``principal``)."""
    if not (spec.kctl_logs_in and spec.security.zookeeper.sasl):
        return {}

    name = principal or ZK_KCTL_PRINCIPAL
    password = store.passwords(spec, store.state_dir_of(spec))[name]
    return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": name, "password": password}}


@contextmanager
def connect(spec: ClusterSpec, timeout: float = 3.0, chroot: bool = True, hosts: str | None = None,
            principal: str | None = None) -> Iterator[Any]:
    """A started KazooClient on the published client ports (with Kafka's chroot unless chroot=False).

    ``hosts``: only these ``host:port`` servers instead of every node's. ``principal``: on a secured
    cluster, the ZooKeeper principal to log in as (kctl's own read principal by default).
    """
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError


    require_zookeeper(spec, "a ZooKeeper client")
    hosts = hosts or spec.zookeeper_connect_host
    if chroot and spec.kafka.zookeeper_chroot:
        hosts += spec.kafka.zookeeper_chroot
    zk = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 1, "delay": 0.1},
                     command_retry={"max_tries": 0}, read_only=True, **sasl_options(spec, principal))
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError:
        zk.stop()
        zk.close()
        raise ClusterError(f"no ZooKeeper server at {hosts} answered in {timeout:.0f}s (quorum lost or down)",
                           hint="see `kctl status`; `kctl zk srvr --node all` shows each server") from None
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def guarded_reader(spec: ClusterSpec) -> str | None:
    """The ZooKeeper principal that may read Kafka's guarded znodes (/config/brokers: dynamic broker configs
    may hold passwords, so zookeeper.set.acl leaves them to the brokers' principal), or None: kctl's own."""
    sec = spec.security
    if sec.zookeeper.sasl and sec.zookeeper.set_acl and spec.security_phase >= 3:
        return ZK_BROKER_PRINCIPAL
    return None


def secure_root(spec: ClusterSpec) -> tuple[bool, str]:
    """Give the root znode Kafka's secure ACL (the brokers' principal all rights, everyone else read), as
    the brokers' principal; idempotent. With ``zookeeper.set_acl`` Kafka guards its own znodes, but "/"
    keeps ZooKeeper's open ACL: any session could create znodes beside Kafka's. A readiness stage of
    ``kctl up`` (kctl.cluster.health)."""
    from kazoo.security import ACL, Id, Permissions


    want = [ACL(Permissions.ALL, Id("sasl", ZK_BROKER_PRINCIPAL)), ACL(Permissions.READ, Id("world", "anyone"))]

    def shown(acls: Any) -> set[tuple[str, str, int]]:
        return {(a.id.scheme, a.id.id, a.perms) for a in acls}

    with connect(spec, timeout=5.0, chroot=False, principal=ZK_BROKER_PRINCIPAL) as zk:
        acls, _ = zk.get_acls("/")
        if shown(acls) == shown(want):
            return True, "already sasl:kafka cdrwa, world r"
        zk.set_acls("/", want)
        return shown(zk.get_acls("/")[0]) == shown(want), "set to sasl:kafka cdrwa, world r"


# ----- ls / get / tree (kctl zk ls|get|tree) ---------------------------------------


@dataclass
class ZNode:
    """One znode: its data (decoded, and parsed when it is JSON) and its stat."""

    path: str
    data: str | None
    json: Any
    stat: dict[str, Any]
    children: list[str] = field(default_factory=list)


@dataclass
class TreeEntry:
    path: str
    depth: int
    children: int
    data_length: int
    ephemeral: bool
    data: str | None = None


def _norm(path: str) -> str:
    if not path.startswith("/"):
        path = "/" + path
    return path.rstrip("/") or "/"


def _stat(st: Any) -> dict[str, Any]:
    return {
        "czxid": hex(st.czxid), "mzxid": hex(st.mzxid), "pzxid": hex(st.pzxid),
        "ctime": _ms(st.ctime), "mtime": _ms(st.mtime),
        "version": st.version, "cversion": st.cversion, "aversion": st.aversion,
        "ephemeral_owner": hex(st.ephemeralOwner), "data_length": st.dataLength,
        "num_children": st.numChildren,
    }


def _ms(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc).isoformat(timespec="milliseconds")


def _decode(raw: bytes | None) -> tuple[str | None, Any]:
    if raw is None:
        return None, None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.hex(), None
    try:
        return text, json.loads(text)
    except ValueError:
        return text, None


def _missing(path: str) -> KctlError:
    return KctlError(f"no znode {path}", hint="`kctl zk ls /` lists the root; `kctl zk tree / --depth 2` walks it")


def _no_auth(path: str) -> KctlError:
    return KctlError(f"znode {path} is not readable by kctl's ZooKeeper principal",
                     hint="on a secured cluster (zookeeper.set.acl) Kafka keeps its sensitive znodes, such as the"
                          " SCRAM credentials under /config/users, for the brokers' principal alone")


def ls(zk: Any, path: str) -> list[str]:
    from kazoo.exceptions import NoAuthError, NoNodeError

    path = _norm(path)
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        raise _missing(path) from None
    except NoAuthError:
        raise _no_auth(path) from None


def get(zk: Any, path: str) -> ZNode:
    from kazoo.exceptions import NoAuthError, NoNodeError

    path = _norm(path)
    try:
        raw, st = zk.get(path)
        children = sorted(zk.get_children(path))
    except NoNodeError:
        raise _missing(path) from None
    except NoAuthError:
        raise _no_auth(path) from None
    text, parsed = _decode(raw)
    return ZNode(path, text, parsed, _stat(st), children)


def tree(zk: Any, path: str = "/", depth: int = 3, with_data: bool = False, limit: int = 5000) -> list[TreeEntry]:
    """Depth-first walk from ``path``, ``depth`` levels below it, at most ``limit`` znodes."""
    from kazoo.exceptions import NoAuthError, NoNodeError

    root = _norm(path)
    out: list[TreeEntry] = []

    def walk(p: str, d: int) -> None:
        if len(out) >= limit:
            return
        try:
            raw, st = zk.get(p)
            kids = sorted(zk.get_children(p))
        except NoNodeError:
            if p == root:
                raise _missing(p) from None
            return  # deleted while walking
        except NoAuthError:
            if p == root:
                raise _no_auth(p) from None
            return  # a znode only the brokers' principal may read
        text = _decode(raw)[0] if with_data else None
        out.append(TreeEntry(p, d, len(kids), st.dataLength, st.ephemeralOwner != 0, text))
        if d < depth:
            for k in kids:
                walk(("" if p == "/" else p) + "/" + k, d + 1)

    walk(root, 0)
    return out
