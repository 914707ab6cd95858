"""The phases of a ZooKeeper-to-KRaft migration, and the record of where a cluster is.

    zookeeper -> controllers -> dual-write -> kraft-brokers -> kraft (finalized)

- ``zookeeper``: brokers in ZooKeeper mode, no KRaft controller.
- ``controllers``: a KRaft controller quorum runs in migration mode beside the ZooKeeper-mode brokers.
- ``dual-write``: the brokers were rolled with the migration enabled; the controllers copied ZooKeeper's
  metadata and write every change to both ("Completed migration of metadata from Zookeeper to KRaft").
- ``kraft-brokers``: the brokers were rolled into KRaft mode; the controllers still write to ZooKeeper.
- ``kraft``: the controllers were rolled without the migration; ZooKeeper is no longer written. Final.

A rollback goes back to ZooKeeper mode from any phase before ``kraft``, through the steps Kafka's documentation
gives for that phase; after finalizing it is refused.

Moving between two phases takes several steps (rolls, a wait for the migration). The record says which
transition is under way and which steps of it are done, written after each step: a kctl killed in the middle
finds it and resumes there.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

from kctl.errors import KctlError

STATE_FILE = "kraft.json"


class Phase(Enum):
    zookeeper = "zookeeper"
    controllers = "controllers"
    dual_write = "dual-write"
    kraft_brokers = "kraft-brokers"
    kraft = "kraft"


ORDER = (Phase.zookeeper, Phase.controllers, Phase.dual_write, Phase.kraft_brokers, Phase.kraft)


def rank(phase: Phase) -> int:
    return ORDER.index(phase)


def next_phase(phase: Phase) -> Phase | None:
    """The phase ``kctl migrate kraft next`` moves to: one step forward, never past ``kraft-brokers`` (finalizing
    is its own command, since it cannot be undone); None when there is nothing more for ``next`` to do."""
    if phase in (Phase.kraft_brokers, Phase.kraft):
        return None
    return ORDER[rank(phase) + 1]


class RollbackRefused(KctlError):
    """A rollback asked for after the migration was finalized (or with nothing to roll back)."""

    exit_code = 2


def rollback_steps(phase: Phase) -> list[str]:
    """What a rollback from ``phase`` does, in order (Kafka's "Reverting to ZooKeeper mode During the
    Migration"); RollbackRefused from ``kraft`` (finalized) or ``zookeeper`` (nothing to undo)."""
    if phase is Phase.kraft:
        raise RollbackRefused("the migration to KRaft is finalized: the controllers no longer write to ZooKeeper,"
                              " so ZooKeeper's metadata is stale and Kafka cannot go back to it",
                              hint="a finalized cluster stays on KRaft; restore from a backup to go back")
    if phase is Phase.zookeeper:
        raise RollbackRefused("the cluster is on ZooKeeper: there is no migration to roll back",
                              hint="`kctl migrate kraft status` shows the phase")
    steps: list[str] = []
    if phase is Phase.kraft_brokers:
        # First roll: back to ZooKeeper-mode brokers that keep the migration settings (Kafka: keep
        # zookeeper.metadata.migration.enable=true on this roll, and false only on the second).
        steps.append("roll-brokers-to-zookeeper-with-migration")
    steps.append("stop-controllers")
    if phase in (Phase.dual_write, Phase.kraft_brokers):
        # Quickly after the controllers stop: the cluster has no controller until a broker takes /controller.
        steps.append("delete-controller-and-migration-znodes")
        steps.append("roll-brokers-without-migration")
    steps.append("remove-controllers")
    return steps


@dataclass
class Record:
    """Where a cluster is: its phase, and the transition under way (``target``) with the steps done so far."""

    phase: Phase
    target: Phase | None = None  # the phase a `next`, `rollback` or `finalize` is moving to
    action: str | None = None  # next, rollback or finalize
    done: list[str] = field(default_factory=list)  # steps of the transition already completed
    history: list[dict[str, object]] = field(default_factory=list)  # {"phase", "at"} of each phase reached
    cluster_id: str | None = None  # the ZooKeeper-mode cluster's id, which the controllers format with

    def to_json(self) -> str:
        data = asdict(self)
        data["phase"] = self.phase.value
        data["target"] = self.target.value if self.target else None
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Record:
        data = json.loads(text)
        try:
            return cls(phase=Phase(data["phase"]), target=Phase(data["target"]) if data.get("target") else None,
                       action=data.get("action"), done=list(data.get("done") or []),
                       history=list(data.get("history") or []), cluster_id=data.get("cluster_id"))
        except (KeyError, ValueError) as exc:
            raise KctlError(f"{STATE_FILE}: not a record of a KRaft migration ({exc})",
                            hint="it is kctl's own file in the state dir; do not edit it") from None


def read(state_dir: Path) -> Record:
    """The cluster's record; a cluster without one is on ZooKeeper with nothing under way."""
    try:
        return Record.from_json((state_dir / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Record(Phase.zookeeper)
    except json.JSONDecodeError as exc:
        raise KctlError(f"{state_dir / STATE_FILE} is not JSON ({exc.msg})",
                        hint="it is kctl's own file in the state dir; do not edit it") from None


def write(state_dir: Path, record: Record) -> None:
    """The record, written to a temporary sibling and renamed into place (never half written)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=f".{STATE_FILE}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(record.to_json())
        os.replace(tmp, state_dir / STATE_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def begin(record: Record, action: str, target: Phase) -> Record:
    """A transition starts (or, when the same one is under way, resumes with the steps it already did)."""
    if record.target is not None and (record.target, record.action) != (target, action):
        raise KctlError(f"a {record.action} to {record.target.value} is under way (steps done:"
                        f" {', '.join(record.done) or 'none'}); it must finish first",
                        hint=f"`kctl migrate kraft {record.action}` resumes it")
    if record.target is None:
        return Record(record.phase, target, action, [], list(record.history), record.cluster_id)
    return record


def step_done(record: Record, step: str) -> Record:
    return Record(record.phase, record.target, record.action, [*record.done, step], list(record.history),
                  record.cluster_id)


def arrive(record: Record, now: float | None = None) -> Record:
    """The transition under way is complete: its target is the phase."""
    if record.target is None:
        return record
    at = time.time() if now is None else now
    return Record(record.target, None, None, [], [*record.history, {"phase": record.target.value, "at": at}],
                  record.cluster_id)


def new_cluster_id() -> str:
    """A cluster id as Kafka makes one (``kafka-storage.sh random-uuid``): 16 random bytes in URL-safe base64
    without padding, never starting with '-' (a command-line tool would take it for an option)."""
    import base64
    import uuid

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def made_on_kraft(state_dir: Path, now: float | None = None) -> Record:
    """The record of a cluster made on KRaft (``metadata: kraft``): phase ``kraft`` from the start, with a new
    cluster id that its controllers and brokers format their storage with. Written once; afterwards read."""
    record = read(state_dir)
    if record.phase is Phase.kraft and record.cluster_id:
        return record
    if record.phase is not Phase.zookeeper or record.target is not None:
        raise KctlError(f"{state_dir / STATE_FILE} records a migration to KRaft under way ({record.phase.value}):"
                        " this state dir holds a cluster made on ZooKeeper",
                        hint="`kctl migrate kraft status`; a cluster made on ZooKeeper keeps `metadata: zookeeper`")
    at = time.time() if now is None else now
    made = Record(Phase.kraft, history=[{"phase": Phase.kraft.value, "at": at, "made": "on KRaft"}],
                  cluster_id=new_cluster_id())
    write(state_dir, made)
    return made
