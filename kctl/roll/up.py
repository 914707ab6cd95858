"""``kctl up`` of a running cluster after an edit of kctl.yaml: the gated roll, never every node at once.

On engine hosts ``kctl up`` (:func:`kctl.cluster.lifecycle.up`) installs the new bundle on each host whose config
changed
and starts what is not running, but restarts no running service: install.sh records on the host each service
whose running process predates its new files (/run/kctl/restart-pending, cleared by kctl-prepare at the
service's next start). Once the cluster is healthy, :func:`up` restarts those through the roll of ``kctl
restart`` (:func:`kctl.roll.run.roll`): ZooKeeper first (on KRaft: the controllers, the quorum whole again after
each), followers before the leader, then the brokers, the controller last, one at a time through the same gates
(under-replicated partitions, min.insync.replicas, ZooKeeper's quorum, each broker registered again), and a
preferred leader election.

The record lives on the hosts, so an interrupted ``kctl up`` (a gate that timed out, Ctrl-C, a lost terminal)
leaves what it did not restart pending there: the next ``kctl up`` restarts it; ``kctl restart --rolling``
and ``kctl apply`` restart it too. On Compose and Swarm a changed node's container is made again by the
convergence plan, and nothing is pending here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kctl.cluster import lifecycle
from kctl.cluster import lock as state_lock
from kctl.kraft import config as kc
from kctl.model.properties import services_of
from kctl.model.spec import ClusterSpec
from kctl.roll import run
from kctl.runtime.engine import engines


def restart_phases(spec: ClusterSpec, pending: Mapping[str, Sequence[str]]) -> list[tuple[str, list[str]]]:
    """The rolls that restart ``pending`` (host -> its services to restart), in order: (service, nodes),
    ZooKeeper (on KRaft: the controllers) before Kafka, each node once per service in the spec's order (the roll
    orders them by role). Pure."""
    out: list[tuple[str, list[str]]] = []
    controllers = {spec.zk_host(n) for n in kc.controller_nodes(spec)} if spec.on_kraft else set()
    for service in ("controller", "zookeeper", "kafka"):
        nodes = [n.hostname for h, n, services in services_of(spec)
                 if (h in controllers if service == "controller" else service in services and not
                     (service == "zookeeper" and spec.on_kraft))
                 and service in pending.get(h, ())]
        if nodes:
            out.append((service, nodes))
    return out


def up(spec: ClusterSpec, state_dir: Path, *, wait: bool = True, timeout: float = 300,
       gate_timeout: float = 300.0, progress: Callable[[str], None] | None = None,
       **kwargs: Any) -> lifecycle.UpResult:
    """:func:`kctl.cluster.lifecycle.up`, then a gated roll of the services whose files changed under them."""
    say = progress or (lambda _m: None)
    started = time.monotonic()
    result = lifecycle.up(spec, state_dir, wait=wait, timeout=timeout, progress=progress, **kwargs)
    pending = engines.for_spec(spec).pending_restarts(spec)
    phases = restart_phases(spec, pending)
    if not phases:
        return result
    named = ", ".join(f"{node} {service}" for service, nodes in phases for node in nodes)
    if not wait:
        say(f"not restarted (--no-wait): {named}, whose files changed; `kctl up` without --no-wait, or `kctl"
            " restart --rolling`, restarts them through the roll's gates")
        return result
    say(f"files changed under running services: {named}; restarting them one at a time through the roll's gates")
    with state_lock.roll_lock(state_dir, "kctl up"):
        for service, nodes in phases:
            rolled = run.roll(spec, state_dir, service=service, nodes=nodes, gate_timeout=gate_timeout,
                              progress=say, lock=False, command="kctl up")
            result.restarted += [f"{s.host}/{s.service}" for s in rolled.steps]
    result.seconds = time.monotonic() - started
    return result
