"""What a KRaft controller quorum says of itself: each controller's quorum-state file, read in its node, and the
leader a majority of them names. One reading for every asker: `kctl status` and its waits, the roll's and the
drills' gates, `kctl quorum`, and the monitor's `controller` rule on a cluster on KRaft."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kctl.errors import KctlError
from kctl.kraft import config as kc
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import engines
from kctl.wait import pause_until


@dataclass
class ControllerView:
    """A KRaft controller's view of its quorum (its quorum-state file): the leader it follows, in which epoch."""

    node: str
    id: int
    leader: int | None = None
    epoch: int | None = None
    error: str | None = None


class NodeProcesses(Protocol):
    """What Docker (or systemd) says of a node: its state and its processes' (health.ContainerObs)."""

    @property
    def state(self) -> str: ...

    @property
    def processes(self) -> dict[str, str]: ...


# A controller's file names no leader for a moment during each election (a candidate's vote is written before
# its win): a read that finds none is read again, these many seconds after the first, before the view says so.
NO_LEADER_REREADS = (0.3, 1.0)


def controller_view(spec: ClusterSpec, host: str, controller_id: int, timeout: float) -> ControllerView:
    """What the controller on ``host`` says of its quorum: its quorum-state file, read in its container. A file
    that names no leader is read again after NO_LEADER_REREADS (an election's moment is not a lost quorum); what
    the last read found goes into the error."""
    out, epoch = "", None
    first = time.monotonic()
    for after in (0.0, *NO_LEADER_REREADS):
        pause_until(first + after)
        try:
            code, out = engines.exec_in(spec, host, ["cat", kc.QUORUM_STATE], timeout=max(timeout, 3.0),
                                        stderr=False)
        except KctlError as exc:
            return ControllerView(host, controller_id, error=exc.message)
        if code != 0:
            return ControllerView(host, controller_id, error="no quorum-state file (never started?)")
        leader, epoch = kc.parse_quorum_state(out)
        if leader is not None:
            return ControllerView(host, controller_id, leader, epoch)
    said = " ".join(out.split())[:160] or "an empty file"
    return ControllerView(host, controller_id, None, epoch, f"no leader (its quorum-state: {said})")


def views(spec: ClusterSpec, timeout: float) -> dict[str, ControllerView]:
    """Every controller's view, asked in parallel (a dead node costs its own timeout)."""
    import concurrent.futures as cf

    nodes = [(spec.zk_host(n), kc.controller_id(n)) for n in kc.controller_nodes(spec)]
    if not nodes:
        return {}
    with cf.ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        futures = {h: pool.submit(controller_view, spec, h, cid, timeout) for h, cid in nodes}
        return {h: f.result() for h, f in futures.items()}


def controller_leader(spec: ClusterSpec, views: Mapping[str, ControllerView],
                      containers: Mapping[str, NodeProcesses] | None = None) -> int | None:
    """The KRaft quorum's leader: the newest epoch's leader, named by a majority of the voters, whose own
    controller runs (when Docker was asked); None without one. Pure."""
    voters = {kc.controller_id(n): spec.zk_host(n) for n in kc.controller_nodes(spec)}
    named = [(v.epoch, v.leader) for v in views.values() if v.leader is not None and v.epoch is not None]
    if not named:
        return None
    epoch, leader = max(named)
    agree = sum(1 for v in views.values() if (v.epoch, v.leader) == (epoch, leader))
    if leader not in voters or agree <= len(voters) // 2:
        return None
    if containers is not None:
        c = containers.get(voters[leader])
        if c is None or c.state != "running" or c.processes.get("controller") != "RUNNING":
            return None
    return leader


def problems(spec: ClusterSpec, views: Mapping[str, ControllerView], leader: int | None,
             excused: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Pure: what is wrong with the quorum in ``views``: each controller's error (a node in ``excused`` aside),
    and a quorum without a leader. `kctl status` and the monitor say the same words."""
    out = [f"{host}: controller: {v.error}" for host, v in views.items() if v.error and host not in excused]
    if leader is None:
        out.append("the KRaft controller quorum has no leader")
    return out
