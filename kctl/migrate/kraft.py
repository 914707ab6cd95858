"""`kctl migrate kraft`: a running cluster through Kafka's ZooKeeper-to-KRaft migration, one phase per command.

The phases, the record of where a cluster is and the rollback table are :mod:`kctl.kraft.phases`; what each node
runs in each phase is :mod:`kctl.kraft.config`, rendered into the state dir like any other file. This module does
the steps between two phases, in order, writing the record after each one (a kctl killed in the middle resumes at
the step it was in; every step is safe to do twice):

- ``zookeeper -> controllers``: read the cluster's id from ZooKeeper, render the controllers' files, start each
  node's controller, wait for the controller quorum (a leader, every voter caught up).
- ``controllers -> dual-write``: render the brokers' migration settings, roll the brokers through the same gates
  as `kctl restart --rolling --service kafka`, wait for the active controller to log that it migrated
  ZooKeeper's metadata (the ``/migration`` znode records the metadata log's offset after the migration's
  records: :func:`kctl.zk.migration.migrated_by`).
- ``dual-write -> kraft-brokers``: render the brokers as KRaft brokers, roll them, wait until each started as one.
- a rollback to ``zookeeper`` (Kafka's "Reverting to ZooKeeper mode During the Migration"): from kraft-brokers,
  first roll the brokers back to ZooKeeper mode with the migration settings kept; then stop the controllers,
  delete ``/controller`` and ``/migration`` in ZooKeeper, roll the brokers without the migration settings (not
  from controllers: they never had them), remove the controllers' files and metadata.

- a rollback of a ``next`` under way (stuck at a step that keeps timing out: the controllers' quorum, the
  metadata's migration): the ``next`` stops, the record stands at its target phase (marked as never reached in
  the history), and the rollback from that phase undoes whatever it may have done.

- ``kraft-brokers -> kraft`` (``finalize``, which cannot be undone): render the controllers without the migration
  and without ZooKeeper, restart them one at a time (the quorum's leader last, the quorum whole again after each),
  retire each node's ZooKeeper (its program runs the image's ``retired``; its data stays), wait until the
  cluster is healthy on KRaft.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.cluster import health, lifecycle
from kctl.cluster import lock as state_lock
from kctl.cluster.quorum import controller_hosts, describe_quorum, quorum_ready
from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kraft import config as kc
from kctl.kraft import phases as ph
from kctl.kraft.phases import Phase
from kctl.model.properties import services_of
from kctl.model.render import render, write
from kctl.model.spec import ClusterSpec, Topology
from kctl.roll import apply as roll_apply
from kctl.roll import run as roll_run
from kctl.runtime import cluster as rc
from kctl.runtime.engine import engines, services
from kctl.runtime.engine.engines import Capability
from kctl.security import store
from kctl.wait import wait_until
from kctl.zk import migration as zkm

Progress = Callable[[str], None]

CONTROLLER_FILES = ("controller.properties", "cluster-id", "log4j-controller.properties", contract.CONTROLLER_JVM_FILE)
CONTROLLER_DATA = str(Path(kc.METADATA_DIR).parent)  # the metadata log and anything else a controller keeps
QUORUM_TIMEOUT = 180.0
MIGRATION_TIMEOUT = 300.0

# The steps of each transition, in order (the record names the ones done).
FORWARD: dict[tuple[Phase, Phase], tuple[str, ...]] = {
    (Phase.zookeeper, Phase.controllers): ("read-cluster-id", "write-files", "start-controllers", "controller-quorum"),
    (Phase.controllers, Phase.dual_write): ("write-files", "roll-brokers", "metadata-migrated"),
    (Phase.dual_write, Phase.kraft_brokers): ("write-files", "roll-brokers", "brokers-in-kraft"),
}
FINALIZE: tuple[str, ...] = ("write-files", "roll-controllers", "retire-zookeeper", "healthy-on-kraft")
BUILT_ROLLBACKS = (Phase.controllers, Phase.dual_write, Phase.kraft_brokers)
STEP_WORDS = {
    "read-cluster-id": "read the cluster's id in ZooKeeper (/cluster/id): the controllers format with it",
    "write-files": "render the nodes' files for the target phase into the state dir",
    "start-controllers": "start the KRaft controller beside each ZooKeeper (kctl permits it to format its new"
                         " metadata log first)",
    "controller-quorum": "wait until the controller quorum has a leader and every voter has caught up",
    "roll-brokers": "roll the brokers one at a time through kctl restart's gates",
    "metadata-migrated": "wait until the active controller has migrated ZooKeeper's metadata (/migration in"
                         " ZooKeeper records the metadata log's offset after it)",
    "brokers-in-kraft": "wait until every broker's log says it started as a KRaft broker",
    "roll-brokers-to-zookeeper-with-migration": "render the brokers in ZooKeeper mode, the migration settings kept,"
                                                " and roll them",
    "stop-controllers": "stop every KRaft controller",
    "delete-controller-and-migration-znodes": "delete /controller and /migration in ZooKeeper and wait until a"
                                              " broker is the controller again",
    "roll-brokers-without-migration": "render the brokers without the migration settings and roll them",
    "remove-controllers": "remove the controllers' files and metadata",
    "roll-controllers": "restart each controller without the migration and without ZooKeeper, the leader last",
    "retire-zookeeper": "stop each node's ZooKeeper for good (its program waits as retired; its data stays)",
    "healthy-on-kraft": "wait until the cluster is healthy with its metadata in the controllers alone",
}


def plan(record: ph.Record, action: str) -> tuple[Phase, list[str]]:
    """Pure: (target, steps) of ``action`` (next, rollback or finalize) from the record's phase; a transition under way
    is that one's. UsageError/KctlError when there is nothing to do or it is not built."""
    if record.target is not None:
        if ph.can_abort(record, action):
            # a `next` stuck under way: stopped, and everything its target phase may have done undone
            return Phase.zookeeper, _steps("rollback", record.target, Phase.zookeeper)
        if record.action != action:
            raise KctlError(f"a {record.action} to {record.target.value} is under way (steps done:"
                            f" {', '.join(record.done) or 'none'}); it must finish first",
                            hint=f"`kctl migrate kraft {record.action}` resumes it"
                                 + ("; `kctl migrate kraft rollback` stops it and goes back to ZooKeeper"
                                    if record.action == "next" else ""))
        return record.target, _steps(action, record.phase, record.target)
    if action == "finalize":
        if record.phase is not Phase.kraft_brokers:
            raise UsageError(f"the cluster is in phase {record.phase.value}: finalizing comes after kraft-brokers"
                             + (" (it is finalized already)" if record.phase is Phase.kraft else ""),
                             hint="`kctl migrate kraft status` shows the phase; `kctl migrate kraft next` moves on")
        return Phase.kraft, list(FINALIZE)
    if action == "next":
        target = ph.next_phase(record.phase)
        if target is None:
            raise UsageError(f"the cluster is in phase {record.phase.value}: `next` has nothing more to do",
                             hint="`kctl migrate kraft status` shows the phase")
        return target, _steps(action, record.phase, target)
    ph.rollback_steps(record.phase)  # RollbackRefused from zookeeper and kraft, with the reason
    return Phase.zookeeper, _steps(action, record.phase, Phase.zookeeper)


def _steps(action: str, source: Phase, target: Phase) -> list[str]:
    if action == "finalize":
        return list(FINALIZE)
    if action == "next":
        if (source, target) not in FORWARD:
            raise KctlError(f"moving the brokers from {source.value} to {target.value} is not built yet in this kctl",
                            hint="the cluster stays in dual-write (ZooKeeper-mode brokers, the controllers writing"
                                 " to both); `kctl migrate kraft rollback` goes back to ZooKeeper")
        return list(FORWARD[(source, target)])
    if source not in BUILT_ROLLBACKS:
        raise KctlError(f"a rollback from {source.value} is not built yet in this kctl",
                        hint="docs/runbooks/migrate-to-kraft.md")
    return ph.rollback_steps(source)


# ----- what each step does ---------------------------------------------------------------------------------------


def migrated(spec: ClusterSpec) -> str | None:
    """Who migrated ZooKeeper's metadata, read in the ``/migration`` znode (:func:`kctl.zk.migration.migrated_by`),
    or None while no controller has (or ZooKeeper does not answer)."""
    try:
        return zkm.migrated_by(zkm.migration_state(spec))
    except KctlError:
        return None


def _settled(spec: ClusterSpec) -> Callable[[], tuple[bool, str]]:
    """No supervised process of any node is STOPPING or STARTING (its supervisor's own view:
    :meth:`kctl.runtime.engine.base.Engine.process_states`)."""

    def probe() -> tuple[bool, str]:
        busy = []
        for host, _node, _services in services_of(spec):
            try:
                states = engines.process_states(spec, host, timeout=30)
            except KctlError as exc:
                return False, exc.message
            busy += [f"{host} {program} {state}" for program, state in states.items()
                     if state in ("STOPPING", "STARTING")]
        return not busy, ", ".join(busy) or "every process RUNNING, STOPPED or EXITED"
    return probe


def _brokers_in_kraft(spec: ClusterSpec) -> Callable[[], tuple[bool, str]]:
    """Every broker's last start, in its log, was a KRaft broker's ("[BrokerServer id=N] Transition from STARTING
    to STARTED"; a ZooKeeper-mode broker logs "[KafkaServer id=N] started"). The quorum's observers do not tell
    them apart: ZooKeeper-mode brokers in the migration follow the metadata log too."""
    log = contract.container_log("kafka")
    script = (f"grep -hE '\\[(BrokerServer|KafkaServer) id=[0-9]+\\] (Transition from STARTING to STARTED|started)'"
              f" {log} 2>/dev/null | tail -n 1")

    def probe() -> tuple[bool, str]:
        modes = {}
        for host in sorted({spec.kafka_host(n) for n in spec.brokers}):
            try:
                _code, out = engines.exec_in(spec, host, ["sh", "-c", script], timeout=30)
            except KctlError as exc:
                return False, exc.message
            modes[host] = "kraft" if "BrokerServer" in out else "zookeeper" if "KafkaServer" in out else "unknown"
        return all(m == "kraft" for m in modes.values()), ", ".join(f"{h}: {m}" for h, m in modes.items())
    return probe


def _migrated_probe(spec: ClusterSpec) -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        host = migrated(spec)
        return (True, f"by {host}") if host else (False, "no controller has finished it yet (/migration)")
    return probe


def _broker_controller(spec: ClusterSpec) -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        try:
            broker = zkm.controller_broker(spec)
        except KctlError as exc:
            return False, exc.message
        return (True, f"broker {broker} is the controller") if broker is not None else (False, "no broker yet")
    return probe


def _controller_state(spec: ClusterSpec, host: str) -> str:
    """RUNNING (the controller's JVM), WAITING (its program waits for controller.properties) or STOPPED."""
    script = ("if pgrep -f '[k]afka.Kafka /etc/kctl/controller.properties' >/dev/null; then echo RUNNING;"
              " elif pgrep -f '[i]dle controller' >/dev/null; then echo WAITING; else echo STOPPED; fi")
    try:
        _code, out = engines.exec_in(spec, host, ["sh", "-c", script], timeout=30)
    except KctlError as exc:
        return f"unknown ({exc.message})"
    return out.strip() or "unknown"


def _permit_controllers(spec: ClusterSpec) -> None:
    """kctl makes each node's controller storage now: its first start may format it (kctl.contract.format_permit;
    an empty metadata log kctl did not make is refused)."""
    for host in controller_hosts(spec):
        services.permit_format(spec, host, "controller")


def _remove_controller_files(spec: ClusterSpec, state_dir: Path) -> None:
    for host in controller_hosts(spec):
        for name in CONTROLLER_FILES:
            (state_dir / host / "conf" / name).unlink(missing_ok=True)
        code, out = engines.exec_in(spec, host, ["rm", "-rf", CONTROLLER_DATA], user="root", timeout=60)
        if code != 0:
            raise ClusterError(f"{host}: cannot remove {CONTROLLER_DATA}: {out.strip()[-300:]}",
                               hint=f"`kctl logs {host} --service controller`")
        # its program waits for a controller.properties again (a later migration starts it by writing one)
        engines.for_spec(spec).start_service(spec, host, "controller")


def _roll_controllers(spec: ClusterSpec, cluster_id: str | None, say: Progress) -> list[dict[str, Any]]:
    """Restart every controller, one at a time, the quorum's leader last; after each, the quorum whole again
    (a leader, every voter caught up). Each restart reads the controller.properties rendered for the phase."""
    eng = engines.for_spec(spec)
    leader = describe_quorum(spec).leader
    ids = {spec.zk_host(n): kc.controller_id(n) for n in kc.controller_nodes(spec)}
    out = []
    for host in sorted(ids, key=lambda h: (ids[h] == leader, ids[h])):
        t = time.monotonic()
        eng.stop_service(spec, host, "controller")
        eng.start_service(spec, host, "controller")
        wait_until(f"{host}'s controller back in a whole quorum", quorum_ready(spec, cluster_id), QUORUM_TIMEOUT,
                   poll=1.0)
        out.append({"host": host, "controller": ids[host], "was_leader": ids[host] == leader,
                    "seconds": round(time.monotonic() - t, 1)})
        say(f"{host}: controller {ids[host]} restarted{' (was the leader)' if ids[host] == leader else ''} in"
            f" {out[-1]['seconds']}s; quorum whole")
    return out


def _retire_zookeeper(spec: ClusterSpec, say: Progress) -> None:
    """Restart each node's ZooKeeper program: with the rendered marker it runs the image's `retired`."""
    eng = engines.for_spec(spec)
    for host, _node, on_node in services_of(spec):
        if "zookeeper" in on_node:
            eng.stop_service(spec, host, "zookeeper")
            eng.start_service(spec, host, "zookeeper")
            say(f"{host}: ZooKeeper retired (data kept in {spec.zookeeper.data_dir})")


def _write_files(before: ClusterSpec, after: ClusterSpec, state_dir: Path, *, roll_follows: bool) -> None:
    """Render ``after``'s files into the state dir. The containers stay: their processes read the new files
    at their next start, so applied.json records them as up to date (a later `kctl up` makes none again)."""
    store.ensure(after, state_dir)  # secured: the controllers' login (JAAS section, client file) before their start
    write(render(after, state_dir), state_dir)
    if not roll_follows:
        rc.carry_applied(before, after, state_dir, set())


def check_can_migrate(spec: ClusterSpec, action: str = "next") -> None:
    """UsageError (exit 2, nothing touched) for a cluster this kctl cannot migrate yet, with the reason. A split
    cluster may still roll back (a migration begun by an older kctl): only a step towards KRaft is refused."""
    if spec.topology is Topology.split and action != "rollback":
        raise UsageError("a migration to KRaft of the split topology (ZooKeeper and the brokers in separate"
                         " containers) is refused: kctl runs each KRaft controller beside its broker, and has no"
                         " roll for split KRaft nodes (a Kafka 4 upgrade would stop at its first one)",
                         hint="migrate a colocated cluster (`topology: colocated`); docs/runbooks/migrate-to-kraft.md"
                              + (", or `kctl migrate kraft rollback` to go back to ZooKeeper"
                                 if spec.kraft_phase != "zookeeper" else ""))
    if not engines.supports(spec, Capability.KRAFT_MIGRATION):
        raise UsageError(f"a migration to KRaft on engine {spec.engine.value} is not built yet: kctl does not add"
                         " controller units to a running ZooKeeper cluster's hosts (a cluster made on KRaft, `metadata:"
                         " kraft`, runs there); nothing was changed",
                         hint="engines compose and swarm migrate; on engine hosts a new cluster is made on KRaft"
                              " (`metadata: kraft`): docs/bare-metal.md, \"KRaft on the hosts\"")
    if spec.security.migration is not None:
        raise UsageError(f"the cluster is moving to the secured profile (security.migration:"
                         f" {spec.security.migration}): that move finishes before its metadata moves to KRaft",
                         hint="docs/runbooks/secure-running-cluster.md: its last step, then `kctl migrate kraft`")
    if not spec.versions.kafka.startswith("3.9."):
        raise UsageError(f"Kafka {spec.versions.kafka} cannot migrate to KRaft: Kafka migrates from 3.9 (the last"
                         " release with ZooKeeper mode)", hint="set versions.kafka: 3.9.1 and `kctl apply` first")


# ----- the command ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    action: str
    source: str
    phase: str
    steps: list[dict[str, Any]]
    seconds: float
    rolls: list[dict[str, Any]] = field(default_factory=list)


def run(spec: ClusterSpec, state_dir: Path, action: str, *, progress: Progress | None = None,
        gate_timeout: float = 300.0) -> Outcome:
    """Do ``action`` (next, rollback or finalize): every step of the transition not yet done, the record written after
    each. The roll lock is held throughout: no restart, apply or second migration meanwhile."""
    say = progress or (lambda _m: None)
    spec.check_migration()  # kctl.yaml changed under a migration under way: named as such, before anything else
    check_can_migrate(spec, action)
    started = time.monotonic()
    with state_lock.roll_lock(state_dir, "kctl migrate kraft"):
        record = ph.read(state_dir)
        ph.check_pins(record, spec.migration_pins)  # the record as it is now, under the lock
        target, steps = plan(record, action)
        resuming = record.target is not None
        if ph.can_abort(record, action):
            stuck = record.target.value if record.target else "?"
            say(f"stopping the next to {stuck} (steps done: {', '.join(record.done) or 'none'}); rolling back"
                f" from {stuck}")
            record = ph.abort_next(record)
            ph.write(state_dir, record)
        source = record.phase
        if not resuming:
            # what an interrupted roll (a restart, an apply) recorded as stopped is started again first, as
            # `kctl restart` and `kctl apply` do; then healthy first, or nothing is touched
            roll_run.put_back_left(spec, state_dir, gate_timeout, say)
            roll_run.check_before_roll(spec, progress=say)
        else:
            # Resuming: a kctl killed in a roll may have left a broker stopping, or stopped between its stop and
            # its start (the roll's record names it): let a stop under way end, put back what the record names
            # through its start gates, then start anything else that is down (as `kctl up` does).

            wait_until("no process of the cluster is stopping or starting", _settled(spec), 180.0, poll=1.0)
            roll_run.put_back_left(spec, state_dir, gate_timeout, say)
            lifecycle.start_stopped_processes(spec, engines.for_spec(spec), skip=set(), say=say)
        record = ph.current_pins(ph.begin(record, action, target), spec.migration_pins)
        ph.write(state_dir, record)
        if record.done:
            say(f"resuming the {action} to {target.value}: done already: {', '.join(record.done)}")
        before = spec.with_kraft(source.value, record.cluster_id)
        timings: list[dict[str, Any]] = []
        rolls: list[dict[str, Any]] = []
        for step in steps:
            if step in record.done:
                continue
            say(f"{action} to {target.value}: {step}: {STEP_WORDS.get(step, step)}")
            t = time.monotonic()
            after = spec.with_kraft(target.value, record.cluster_id)
            if step == "read-cluster-id":
                record = record.replace(cluster_id=zkm.cluster_id(spec))
                say(f"cluster id {record.cluster_id}")
            elif step == "write-files":
                _write_files(before, after, state_dir, roll_follows=target in (Phase.dual_write, Phase.kraft_brokers))
            elif step == "start-controllers" and _new_tasks(spec):
                # the controllers' files come with each node's new task; the gates judge the cluster as it is
                _permit_controllers(spec)
                rolls.append(_recreate_nodes(before, state_dir, step, gate_timeout, say, rendered=after))
            elif step == "start-controllers":
                _permit_controllers(spec)
                for host in controller_hosts(spec):
                    engines.for_spec(spec).start_service(spec, host, "controller")
            elif step == "controller-quorum":
                wait_until("the KRaft controller quorum has a leader and every voter caught up",
                           quorum_ready(spec, record.cluster_id), min(QUORUM_TIMEOUT, gate_timeout), poll=1.0)
            elif step in ("roll-brokers", "roll-brokers-without-migration", "roll-brokers-to-zookeeper-with-migration"):
                if step == "roll-brokers-to-zookeeper-with-migration":
                    after = spec.with_kraft(Phase.dual_write.value, record.cluster_id)
                if step != "roll-brokers":
                    _write_files(before, after, state_dir, roll_follows=True)
                if _new_tasks(spec):
                    rolls.append(_recreate_nodes(after, state_dir, step, gate_timeout, say))
                    if step != "roll-brokers-without-migration":  # the controllers restarted with their nodes
                        wait_until("the KRaft controller quorum whole again", quorum_ready(spec, record.cluster_id),
                                   QUORUM_TIMEOUT, poll=1.0)
                else:
                    res = roll_run.roll(after, state_dir, service="kafka", gate_timeout=gate_timeout, progress=say,
                                        lock=False)
                    _mark_applied(after, state_dir)
                    rolls.append({"step": step, "seconds": round(res.seconds, 1),
                                  "services": [f"{s.host} {s.service}" for s in res.steps]})
            elif step == "metadata-migrated":
                found = wait_until("the active controller migrated ZooKeeper's metadata", _migrated_probe(spec),
                                   min(MIGRATION_TIMEOUT, gate_timeout), poll=1.0)
                say(f"metadata migrated ({found.saw})")
            elif step == "brokers-in-kraft":
                found = wait_until("every broker started as a KRaft broker", _brokers_in_kraft(spec),
                                   QUORUM_TIMEOUT, poll=1.0)
                say(found.saw)
            elif step == "stop-controllers":
                for host in controller_hosts(spec):
                    engines.for_spec(spec).stop_service(spec, host, "controller")
            elif step == "delete-controller-and-migration-znodes":
                say(f"deleted {', '.join(zkm.delete_controller_and_migration(spec)) or 'nothing (gone already)'}")
                # Kafka: "one of the ZooKeeper-mode brokers becomes the controller"; the roll after it orders the
                # brokers by who that is (the controller's broker last), so it waits for the election first
                found = wait_until("a ZooKeeper-mode broker is the controller (/controller)",
                                   _broker_controller(spec), QUORUM_TIMEOUT, poll=0.5)
                say(found.saw)
            elif step == "remove-controllers":
                _remove_controller_files(spec, state_dir)
                _mark_applied(after, state_dir)
            elif step == "roll-controllers" and _new_tasks(spec):
                # each node's new task: its controller without the migration, its ZooKeeper retired; the leader last
                rolls.append(_recreate_nodes(after, state_dir, step, gate_timeout, say))
                wait_until("the KRaft controller quorum whole again", quorum_ready(spec, record.cluster_id),
                           QUORUM_TIMEOUT, poll=1.0)
            elif step == "roll-controllers":
                res_c = _roll_controllers(after, record.cluster_id, say)
                rolls.append({"step": step, "seconds": round(sum(r["seconds"] for r in res_c), 1),
                              "services": [f"{r['host']} controller" for r in res_c]})
            elif step == "retire-zookeeper":
                _retire_zookeeper(after, say)
            elif step == "healthy-on-kraft":
                health.wait_until_healthy(after, timeout=QUORUM_TIMEOUT)
                say("healthy on KRaft")
            else:  # pragma: no cover - plan() names only the steps above
                raise KctlError(f"unknown step {step!r}")
            record = ph.step_done(record, step)
            ph.write(state_dir, record)
            timings.append({"step": step, "seconds": round(time.monotonic() - t, 1)})
        record = ph.arrive(record)
        ph.write(state_dir, record)
    return Outcome(action, source.value, record.phase.value, timings, time.monotonic() - started, rolls)


def _new_tasks(spec: ClusterSpec) -> bool:
    """Engine swarm: a task's files are Swarm configs, fixed when the task is made, so a node's new files (a
    controller.properties, a broker's migration settings) reach it only with a new task, which restarts its
    ZooKeeper, broker and controller together. Each such step is a roll of whole nodes, one at a time, through
    the gates of `kctl restart --service node`."""
    return not engines.for_spec(spec).files_reach_a_restart


def _recreate_nodes(spec: ClusterSpec, state_dir: Path, step: str, gate_timeout: float, say: Progress,
                    rendered: ClusterSpec | None = None) -> dict[str, Any]:
    """Every node's task made again from the state dir's render (``rendered``'s files; default ``spec``'s), one
    at a time through the roll's gates judged by ``spec``; the order is the roll's: the ZooKeeper leader's (on
    KRaft: the quorum leader's) node last."""
    hosts = tuple(host for host, _node, _services in services_of(spec))
    res = roll_run.roll(spec, state_dir, service="node", gate_timeout=gate_timeout, progress=say, lock=False,
                        recreate=hosts)
    _mark_applied(rendered or spec, state_dir)
    return {"step": step, "seconds": round(res.seconds, 1), "services": [f"{s.host} {s.service}" for s in res.steps]}


def _mark_applied(spec: ClusterSpec, state_dir: Path) -> None:
    """Every container's processes now run ``spec``'s files: applied.json says so."""
    rc.write_applied(state_dir, {c.name: c.config_hash for c in render(spec, state_dir).containers})


def status(spec: ClusterSpec, state_dir: Path) -> dict[str, Any]:
    """The record, and what the cluster says: each controller's process, the quorum, the migration."""
    record = ph.read(state_dir)
    following = ph.next_phase(record.phase)
    out: dict[str, Any] = {
        "cluster": spec.name, "phase": record.phase.value,
        "under_way": ({"action": record.action, "target": record.target.value, "done": record.done}
                      if record.target else None),
        "cluster_id": record.cluster_id, "history": record.history,
        "next": following.value if following else None,
        # what kctl.yaml must keep until the migration ends, and the metadata.version kctl raised
        "kept": dict(record.pins), "metadata_version": record.metadata_version,
        # the level a cluster made on KRaft was formatted at, and by which release (no older release starts on it)
        "formatted": ({"metadata_version": record.formatted_metadata_version, "release": record.formatted_release}
                      if record.formatted_release else None),
        # a raise `kctl apply` of a new release owes the cluster (killed, or the raise failed): the command
        "metadata_version_pending": ({"release": record.metadata_version_pending, "run": ph.RAISE_COMMAND}
                                     if record.metadata_version_pending else None),
    }
    if ph.rank(record.phase) >= ph.rank(Phase.controllers) or record.target is not None:
        out["controllers"] = {h: _controller_state(spec, h) for h in controller_hosts(spec)}
        try:
            q = describe_quorum(spec)
            out["quorum"] = {"leader": q.leader, "epoch": q.epoch, "voters": q.voters,
                             "high_watermark": q.high_watermark, "max_follower_lag": q.max_follower_lag}
        except KctlError as exc:
            out["quorum"] = {"error": exc.message}

        if record.phase is Phase.kraft:
            out["metadata_migrated_by"] = "the migration, finalized since (ZooKeeper is retired)"
            out["zookeeper_migration_znode"] = {"error": "ZooKeeper is retired: the migration is finalized"}
        else:
            try:
                out["zookeeper_migration_znode"] = zkm.migration_state(spec)
            except KctlError as exc:
                out["zookeeper_migration_znode"] = {"error": exc.message}
            znode = out["zookeeper_migration_znode"]
            out["metadata_migrated_by"] = zkm.migrated_by(znode if znode and "error" not in znode else None)
    return out


def raise_metadata_version(spec: ClusterSpec, state_dir: Path, *, progress: Progress | None = None
                           ) -> tuple[str | None, str | None]:
    """`kctl migrate kraft raise-metadata-version`: metadata.version up to the newest level every node's release
    supports (what `kctl apply` of a new release does last, and owes the cluster while it is not done), under the
    roll lock; the level recorded, the owed raise cleared. Kafka refuses it while a node runs an older release."""
    if not spec.on_kraft:
        raise UsageError(f"cluster {spec.name} keeps its metadata in ZooKeeper: metadata.version is a KRaft"
                         " cluster's", hint="`kctl migrate kraft status` shows the phase")
    with state_lock.roll_lock(state_dir, ph.RAISE_COMMAND):
        return roll_apply.raise_metadata_version(spec, state_dir, progress or (lambda _m: None))


def describe_plan(record: ph.Record) -> list[dict[str, str]]:
    """Every transition from the record's phase to finalized, and each step (`kctl migrate kraft plan`)."""
    rows = []
    phase = record.phase
    while (target := ph.next_phase(phase)) is not None:
        steps = FORWARD.get((phase, target))
        for s in steps or ("not built yet in this kctl",):
            rows.append({"command": "next", "from": phase.value, "to": target.value, "step": s,
                         "what": STEP_WORDS.get(s, f"roll the brokers into KRaft mode ({target.value})")})
        phase = target
    if record.phase is not Phase.kraft:
        for s in FINALIZE:
            rows.append({"command": "finalize", "from": "kraft-brokers", "to": "kraft", "step": s,
                         "what": STEP_WORDS[s] + (" (cannot be undone)" if s == "roll-controllers" else "")})
    return rows
