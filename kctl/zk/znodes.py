"""Znode reads through kazoo: broker registrations, controller, and the tree walk."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kctl.errors import ClusterError
from kctl.spec import ClusterSpec

# kazoo logs every connection failure at WARNING; kctl reports them itself.
logging.getLogger("kazoo").setLevel(logging.CRITICAL)


@contextmanager
def connect(spec: ClusterSpec, timeout: float = 3.0, chroot: bool = True) -> Iterator[Any]:
    """A started KazooClient on the published client ports (with Kafka's chroot unless chroot=False)."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    hosts = spec.zookeeper_connect_host
    if chroot and spec.kafka.zookeeper_chroot:
        hosts += spec.kafka.zookeeper_chroot
    zk = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 1, "delay": 0.1},
                     command_retry={"max_tries": 0}, read_only=True)
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


def registered_brokers(zk: Any) -> list[int]:
    if not zk.exists("/brokers/ids"):
        return []
    return sorted(int(x) for x in zk.get_children("/brokers/ids"))


def controller(zk: Any) -> int | None:
    if not zk.exists("/controller"):
        return None
    data, _ = zk.get("/controller")
    try:
        return int(json.loads(data.decode())["brokerid"])
    except (ValueError, KeyError, UnicodeDecodeError):
        return None
