"""kctl apply: bring a running cluster to an edited kctl.yaml with as little disruption as Kafka allows.

1. Render the new spec in memory and compare it with what runs (:mod:`kctl.cluster.drift` observes every node):
   per node, the config hash the container was made from (its label, or the last apply's record) against
   the new render's, and per key the new value against the value the process reports.
2. A broker key that Kafka can change at run time (a dynamic broker config, per broker or cluster-wide)
   is set per broker with an incremental AlterConfigs: no restart.
3. A key that Kafka or ZooKeeper reads only at start changes the file and restarts only that service on
   only the nodes whose value differs, through the gates of ``kctl restart`` (:mod:`kctl.roll.run`).
4. A change of a container's environment, image or ports (a heap size, a version, a JMX port) needs the
   container made again: that node goes through the same gates, with its container made again from the
   new compose.yaml between the stop gates and the start gates (both services of a colocated node).

:func:`plan_apply` is pure; :func:`apply` runs a plan under the state dir's roll lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.cluster import drift, features
from kctl.cluster import lock as state_lock
from kctl.cluster.drift import NodeObs, norm, recreate_needed
from kctl.errors import KctlError, UsageError
from kctl.kafka import configs
from kctl.kafka.client import Target, require_reachable
from kctl.kafka.configs import update_mode
from kctl.kraft import phases as kraft_record
from kctl.model.properties import services_of
from kctl.model.render import COMPOSE_FILE, render, write
from kctl.model.spec import ClusterSpec, Topology
from kctl.roll import migration, run
from kctl.roll import plan as roll_plan
from kctl.runtime.cluster import applied_hashes, write_applied
from kctl.runtime.engine import engines
from kctl.runtime.faults import interruptible
from kctl.runtime.image import build as image_build
from kctl.security import store

# The files of a node whose change needs that service restarted (besides the main config file's keys).
RESTART_FILES = {
    "zookeeper": ("zoo.cfg", "myid", "log4j-zookeeper.properties"),
    "kafka": ("server.properties", "log4j-kafka.properties"),
}


@dataclass
class DynamicChange:
    broker: int
    key: str
    value: str | None  # None: delete the per-broker override (the key left kctl.yaml)
    running: str | None


@dataclass
class Restart:
    node: str
    service: str
    reasons: list[str]


@dataclass
class NodeHash:
    host: str
    running: str | None  # the container's label, or the last apply's record
    new: str


@dataclass
class ApplyPlan:
    cluster: str
    hashes: list[NodeHash]
    files: list[str]  # state dir files the new render changes
    dynamic: list[DynamicChange] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    recreate: dict[str, list[str]] = field(default_factory=dict)  # host -> what changed besides files
    notes: list[str] = field(default_factory=list)
    roll: list[Any] = field(default_factory=list)  # the restart plans (kctl.roll.plan.RollPlan), dry run

    @property
    def nothing_to_do(self) -> bool:
        return not (self.files or self.dynamic or self.restarts or self.recreate)


@dataclass
class ApplyResult:
    plan: ApplyPlan
    dynamic_applied: list[DynamicChange]
    files_written: list[str]
    rolls: list[Any]  # kctl.roll.run.RollResult
    seconds: float
    metadata_version: tuple[str | None, str | None] | None = None  # (before, after) when a new release was rolled


def _services(spec: ClusterSpec, host: str) -> tuple[str, ...]:
    return next(s for h, _, s in services_of(spec) if h == host)


def _fmt(v: str | None) -> str:
    return "(unset)" if v is None else v


def plan_apply(cluster: str, observed: list[NodeObs], *, changed_files: Mapping[str, list[str]],
               hashes: list[NodeHash], recreate: Mapping[str, list[str]], broker_ids: Mapping[str, int],
               update_mode: Any) -> ApplyPlan:
    """What apply does, from the observations (pure).

    ``changed_files``: host -> the files under its conf dir that the new render changes;
    ``broker_ids``: node -> broker id; ``update_mode(key)``: read-only, per-broker or cluster-wide.
    """
    plan = ApplyPlan(cluster, hashes, sorted(f"{h}/{f}" for h, fs in changed_files.items() for f in fs),
                     recreate=dict(recreate))
    for o in observed:
        reasons: list[str] = []
        if o.error or o.running is None:
            # Not observed: the file decides (a difference restarts the service).
            for key in sorted(set(o.spec) | set(o.rendered or {})):
                if o.rendered is not None and norm(o.spec.get(key)) != norm(o.rendered.get(key)):
                    reasons.append(f"{key}: {_fmt((o.rendered or {}).get(key))} -> {_fmt(o.spec.get(key))}"
                                   " (process not observed)")
        else:
            for key in sorted(set(o.spec) | set(o.rendered or {})):
                want, now = o.spec.get(key), o.running.get(key)
                if key in o.running and key not in o.sensitive:
                    if want is not None and norm(want) == norm(now):
                        continue  # the process runs it already (the file follows)
                    if o.service == "kafka" and want is not None and update_mode(key) != "read-only":
                        plan.dynamic.append(DynamicChange(broker_ids[o.node], key, want, now))
                        continue
                    if want is None and key in o.broker_dyn:
                        # Left kctl.yaml after an apply set it at run time: drop that override.
                        plan.dynamic.append(DynamicChange(broker_ids[o.node], key, None, now))
                        continue
                    if want is None and norm((o.rendered or {}).get(key)) != norm(now):
                        continue  # removed from kctl.yaml, and the process does not run the file's value
                    reasons.append(f"{key}: {_fmt(now)} -> {_fmt(want)}"
                                   + (" (read-only: read at start)" if o.service == "kafka" else ""))
                elif o.rendered is None or norm(want) != norm(o.rendered.get(key)):
                    reasons.append(f"{key}: {_fmt((o.rendered or {}).get(key))} -> {_fmt(want)}")
        host_files = list(changed_files.get(o.host or o.node, []))
        reasons += [f"{f} changed" for f in host_files
                    if Path(f).name in RESTART_FILES[o.service] and Path(f).name != o.file]
        if reasons:
            plan.restarts.append(Restart(o.node, o.service, reasons))
    if plan.dynamic:
        plan.notes.append(f"{len(plan.dynamic)} dynamic broker config change(s): set per broker at run time,"
                          " no restart")
    return plan


def by_new_tasks(spec: ClusterSpec, plan: ApplyPlan) -> ApplyPlan:
    """Engine swarm (pure): a node's files reach it only in a new task (they are Swarm configs, which a process
    restart does not replace), so every container host with a changed file or a restart is made again instead,
    one at a time through the roll's gates; dynamic changes stay dynamic (applied first, as on Compose)."""
    hosts = services_of(spec)
    again = {h: list(w) for h, w in plan.recreate.items()}
    for f in plan.files:
        host = f.partition("/")[0]
        if any(h == host for h, _n, _s in hosts):
            again.setdefault(host, []).append(f"{f} changed (engine swarm: delivered by a new task)")
    for r in plan.restarts:
        for h, node, services in hosts:
            if node.hostname == r.node and r.service in services:
                again.setdefault(h, []).append(f"{r.service}: " + "; ".join(r.reasons))
    return dataclasses.replace(plan, restarts=[], recreate={h: again[h] for h, _n, _s in hosts if h in again})


# The variables of the node's environment that one service alone reads (kctl.model.render.environment): a change of
# only these restarts only that service where each service reads the environment at its own start.
ENV_OWNERS = {
    contract.ENV_ZK_HEAP: "zookeeper", contract.ENV_ZK_OPTS: "zookeeper",
    contract.ENV_KAFKA_HEAP: "kafka", contract.ENV_KAFKA_OPTS: "kafka", contract.ENV_SCRAM_USER: "kafka",
    contract.ENV_JMX_EXPORTER_PORT: "kafka",
}
ENV_PREFIX = "environment."


def by_units(spec: ClusterSpec, plan: ApplyPlan) -> ApplyPlan:
    """Engine hosts (pure): each service is a systemd unit that reads the node's environment file at its own
    start, so a node whose only container-level change is in variables one service reads (a heap, JVM options)
    restarts that service through the roll, not the whole node: a broker's new heap leaves its ZooKeeper
    running. Any other change (the node's services, its ZooKeeper servers) still makes the node again."""
    restarts = {(r.node, r.service): Restart(r.node, r.service, list(r.reasons)) for r in plan.restarts}
    order = [(r.node, r.service) for r in plan.restarts]
    names = {h: n.hostname for h, n, _s in services_of(spec)}
    again: dict[str, list[str]] = {}
    for host, what in plan.recreate.items():
        owners = [ENV_OWNERS.get(w[len(ENV_PREFIX):].partition(":")[0]) if w.startswith(ENV_PREFIX) else None
                  for w in what]
        if host not in names or None in owners:
            again[host] = what
            continue
        for service, why in zip(owners, what, strict=True):
            key = (names[host], str(service))
            if key not in restarts:
                restarts[key] = Restart(names[host], str(service), [])
                order.append(key)
            restarts[key].reasons.append(f"{why} (read at start)")
    return dataclasses.replace(plan, restarts=[restarts[k] for k in order], recreate=again)


# ----- observing -------------------------------------------------------------------------------------


def _disk_files(state_dir: Path, rendered_files: Mapping[str, str]) -> dict[str, list[str]]:
    """host -> conf files whose new render differs from the state dir's (compose.yaml aside)."""
    out: dict[str, list[str]] = {}
    for rel, text in rendered_files.items():
        if "/" not in rel:
            continue
        host, _, sub = rel.partition("/")
        try:
            same = (state_dir / rel).read_text(encoding="utf-8") == text
        except FileNotFoundError:
            same = False
        if not same:
            out.setdefault(host, []).append(sub)
    return out


def _record(state_dir: Path, hashes: Mapping[str, str]) -> None:
    write_applied(state_dir, dict(hashes))


def plan(spec: ClusterSpec, state_dir: Path) -> tuple[ApplyPlan, Any]:
    """The plan for the cluster as it runs now, and the new render (to write)."""
    running_phase, _target = migration.check_step(spec, state_dir)  # a skipped step: refused, nothing done
    rendered = render(spec, state_dir)
    seen = engines.observe(spec)
    engines.check_engine(spec, [(c.name, c.engine) for c in seen])  # WrongEngine before anything is planned
    labels = {c.name: c.config_hash for c in seen}
    recorded = applied_hashes(state_dir)
    hashes = [NodeHash(c.name, recorded.get(c.name) if recorded.get(c.name) == c.config_hash
                       else labels.get(c.name), c.config_hash) for c in rendered.containers]
    missing = [c.name for c in rendered.containers if c.name not in labels]
    if missing:
        raise KctlError(f"no container for {', '.join(missing)} in cluster {spec.name}",
                        hint="`kctl up` creates the containers a new kctl.yaml names; apply changes running ones")
    try:
        old_compose: str | None = (state_dir / COMPOSE_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        old_compose = None
    observed = drift.gather(spec, state_dir)
    the_plan = plan_apply(spec.name, observed, changed_files=_disk_files(state_dir, rendered.files), hashes=hashes,
                          recreate=recreate_needed(old_compose, rendered.files[COMPOSE_FILE]),
                          broker_ids={n.hostname: n.id for n in spec.nodes}, update_mode=update_mode)
    if running_phase is not None and running_phase != spec.security_phase:
        the_plan = by_restart(spec, the_plan)
    if not engines.for_spec(spec).files_reach_a_restart:
        the_plan = by_new_tasks(spec, the_plan)
    elif engines.for_spec(spec).environment_per_service:
        the_plan = by_units(spec, the_plan)
    return the_plan, rendered


def by_restart(spec: ClusterSpec, plan: ApplyPlan) -> ApplyPlan:
    """A step towards (or back from) the secured profile (pure): its listener, SASL and TLS keys reach each
    broker by the roll's restart, never as dynamic configs (those would be kept in ZooKeeper and outlive
    the step, and name keystores a container mounts only once it is made again)."""
    restarts = {(r.node, r.service): Restart(r.node, r.service, list(r.reasons)) for r in plan.restarts}
    names = {n.id: n.hostname for n in spec.nodes}
    for d in plan.dynamic:
        r = restarts.setdefault((names[d.broker], "kafka"), Restart(names[d.broker], "kafka", []))
        r.reasons.append(f"{d.key}: {_fmt(d.running)} -> {_fmt(d.value)} (security step: read at start)")
    order = [(r.node, r.service) for r in plan.restarts] + [k for k in restarts if k not in
                                                             {(r.node, r.service) for r in plan.restarts}]
    return dataclasses.replace(plan, dynamic=[], restarts=[restarts[k] for k in order],
                               notes=[n for n in plan.notes if "dynamic" not in n])


def controller_files(plan: ApplyPlan) -> list[str]:
    """The KRaft controllers' files the new render changes (state dir paths: host/conf/name)."""
    return [f for f in plan.files if Path(f).name in ("controller.properties", "log4j-controller.properties")]


def phases(spec: ClusterSpec, plan: ApplyPlan) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """The rolls of an apply, in order: (service, nodes, container hosts to make again). ZooKeeper, then
    Kafka; on a colocated node whose container is made again both services go together, last."""
    colocated = spec.topology is Topology.colocated
    again = tuple(plan.recreate)
    by_host = {h: n for h, n, _ in services_of(spec)}
    remade = {by_host[h].hostname for h in again}
    out: list[tuple[str, list[str], tuple[str, ...]]] = []
    # On KRaft, the controllers whose files changed restart first (a node made again reads them anyway).
    changed = [by_host[h].hostname for h in dict.fromkeys(Path(f).parts[0] for f in controller_files(plan))
               if h in by_host and by_host[h].hostname not in remade]
    if spec.on_kraft and changed:
        out.append(("controller", changed, ()))
    for service in ("zookeeper", "kafka"):
        nodes = [r.node for r in plan.restarts if r.service == service and not (colocated and r.node in remade)]
        hosts = tuple(h for h in again if not colocated and service in _services(spec, h))
        nodes += [by_host[h].hostname for h in hosts if by_host[h].hostname not in nodes]
        if nodes:
            out.append((service, nodes, hosts))
    if colocated and again:
        out.append(("node", [by_host[h].hostname for h in again], again))
    return out


# ----- applying --------------------------------------------------------------------------------------


def apply(spec: ClusterSpec, state_dir: Path, *, gate_timeout: float = 300.0, progress: Any = None) -> ApplyResult:
    """Apply kctl.yaml: dynamic changes first, then the files, then a gated roll of what must restart."""
    say = progress or (lambda _m: None)
    started = time.monotonic()
    with interruptible(), state_lock.roll_lock(state_dir, "kctl apply"):
        # what an earlier roll, killed mid-step, left down: started first, or nothing below could pass its checks
        run.put_back_left(spec, state_dir, gate_timeout, say)
        the_plan, rendered = plan(spec, state_dir)
        controllers = controller_files(the_plan)
        if controllers and not spec.on_kraft:
            raise UsageError(f"apply refused, nothing was changed: the KRaft controllers' settings change"
                             f" ({', '.join(controllers)}) in the middle of a migration to KRaft",
                             hint="finish or roll back the migration first (`kctl migrate kraft status`)")

        cluster = Target.of(spec)
        if the_plan.dynamic:
            live = {int(b) for b in require_reachable(cluster).brokers}
            down = sorted({d.broker for d in the_plan.dynamic} - live)
            if down:
                raise KctlError(f"apply refused, nothing was changed: broker(s) {', '.join(map(str, down))} not"
                                " running, so their dynamic configs cannot be set",
                                hint="`kctl status` shows why; start the broker (docs/runbooks/"
                                     "broker-will-not-rejoin.md), then apply again")
        for service, nodes, _hosts in phases(spec, the_plan):
            roll_plan.check_request(spec, service, nodes)  # a roll kctl would refuse: before an image or a file
        if the_plan.restarts or the_plan.recreate or controllers:
            # Nothing is written or set before the cluster is known healthy enough to roll.
            run.check_before_roll(spec, min(gate_timeout, run.PRE_CHECK_TIMEOUT), say)
        done: list[DynamicChange] = []
        for broker in sorted({d.broker for d in the_plan.dynamic}):
            entity = configs.Entity("broker", str(broker))
            mine = {d.key: d.value for d in the_plan.dynamic if d.broker == broker and d.value is not None}
            gone = [d.key for d in the_plan.dynamic if d.broker == broker and d.value is None]
            if mine:
                configs.set_configs(cluster, entity, mine)
                say(f"broker {broker}: set dynamically, no restart: "
                    + ", ".join(f"{k}={v}" for k, v in mine.items()))
            if gone:
                configs.delete_configs(cluster, entity, gone)
                say(f"broker {broker}: dynamic override removed, no restart: {', '.join(gone)}")
            done += [d for d in the_plan.dynamic if d.broker == broker]
        new_image = any(w.startswith("image:") for what in the_plan.recreate.values() for w in what)
        if new_image and engines.for_spec(spec).uses_image and spec.image.ref is None:
            # A new release: its node image before anything is written or stopped (built when missing).
            image_build.ensure_image(engines.client(spec, timeout=600), kafka_version=spec.versions.kafka,
                         scala_version=spec.versions.scala, progress=say)
        owed = None
        if spec.on_kraft:
            if new_image:  # before anything is written or rolled: a kill from here on leaves the raise owed
                kraft_record.metadata_version_owed(state_dir, spec.versions.kafka)
            owed = kraft_record.read(state_dir).metadata_version_pending
        made = store.ensure(spec, state_dir)  # a step towards the secured profile: its secrets before its roll
        if made:
            say(f"secrets: {len(made)} file(s) written in {store.secrets_dir(state_dir)} (mode 0600)")
        written = [str(p.relative_to(state_dir)) for p in write(rendered, state_dir)]
        if written:
            say(f"wrote {len(written)} file(s) in {state_dir}: {', '.join(written)}")
            engines.for_spec(spec).deliver(spec, state_dir, say)  # engine hosts: onto the hosts, nothing restarted
        rolls = []
        for host, what in the_plan.recreate.items():
            say(f"{host}: container to make again: {'; '.join(what)}")
        for service, nodes, hosts in phases(spec, the_plan):
            if service == "controller":
                say(f"{', '.join(nodes)} controller: restart needed: "
                    + ", ".join(f for f in controllers if Path(f).parts[0] in nodes) + " changed")
            for r in the_plan.restarts:
                if r.service == service and r.node in nodes:
                    say(f"{r.node} {service}: restart needed: {'; '.join(r.reasons)}")
            rolls.append(run.roll(spec, state_dir, service=service, nodes=nodes, gate_timeout=gate_timeout,
                                  progress=say, lock=False, recreate=hosts, command="kctl apply"))
        _record(state_dir, {c.name: c.config_hash for c in rendered.containers})
        metadata_version = None
        if owed:  # this apply's new release, or a raise an earlier one did not finish
            metadata_version = raise_metadata_version(spec, state_dir, say)
        if spec.security_phase == 3 and spec.security.zookeeper.sasl and spec.security.zookeeper.set_acl:
            # Every broker now writes znodes with ACLs: those made before get them too (Kafka's sequence).
            migration.secure_znodes(spec, say)
    return ApplyResult(the_plan, done, written, rolls, time.monotonic() - started, metadata_version)


def raise_metadata_version(spec: ClusterSpec, state_dir: Path, say: Any) -> tuple[str | None, str | None]:
    """Every node runs the new release now: Kafka's metadata.version up to it, recorded
    (:func:`kctl.cluster.features.raise_and_record`)."""
    return features.raise_and_record(spec, state_dir, say)
