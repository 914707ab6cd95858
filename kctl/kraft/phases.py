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

import dataclasses
import json
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

from kctl.errors import KctlError, UsageError
from kctl.files import write_durable

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
    # What the migration started from and must keep until it ends (kctl.yaml's versions, image, security, the
    # controllers' nodes: :func:`check_pins`); set by the first transition, cleared on arrival in zookeeper or
    # kraft.
    pins: dict[str, str] = field(default_factory=dict)
    # The finalized metadata.version kctl raised the cluster to (`kctl apply` of a new release on KRaft) and the
    # Kafka release that raised it: no older release can read the metadata afterwards.
    metadata_version: str | None = None
    metadata_version_release: str | None = None
    # A raise of metadata.version kctl owes the cluster: the Kafka release `kctl apply` rolled onto, recorded
    # before the roll and cleared only once the raise is done (a kill or a failed raise leaves it: the next
    # `kctl apply` or `kctl up` raises it, or `kctl migrate kraft raise-metadata-version`).
    metadata_version_pending: str | None = None
    # The metadata.version the cluster's storage was formatted with, and the Kafka release that formatted it: a
    # cluster made on KRaft (:func:`made_on_kraft`) starts at its release's level (:func:`format_level`), which no
    # older release can start on either. None in a record of a cluster made on ZooKeeper (its controllers were
    # formatted by the one release that migrates, 3.9, the oldest kctl runs), in a record kctl wrote before it
    # kept these, and (the level) for a release :data:`FORMAT_LEVELS` does not name.
    formatted_metadata_version: str | None = None
    formatted_release: str | None = None
    # "dynamic" once `kctl quorum make-dynamic` raised kraft.version to 1 (KIP-853): the nodes are rendered with
    # controller.quorum.bootstrap.servers instead of the static controller.quorum.voters, and a controller's empty
    # metadata log is formatted with --no-initial-controllers (it joins as an observer, then add-controller).
    quorum: str | None = None

    @property
    def migrating(self) -> bool:
        """A transition is under way, or the cluster stands between ZooKeeper and a finalized KRaft."""
        return self.target is not None or self.phase not in (Phase.zookeeper, Phase.kraft)

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
                       history=list(data.get("history") or []), cluster_id=data.get("cluster_id"),
                       pins={str(k): str(v) for k, v in (data.get("pins") or {}).items()},
                       metadata_version=data.get("metadata_version"),
                       metadata_version_release=data.get("metadata_version_release"),
                       metadata_version_pending=data.get("metadata_version_pending"),
                       formatted_metadata_version=data.get("formatted_metadata_version"),
                       formatted_release=data.get("formatted_release"), quorum=data.get("quorum"))
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise KctlError(f"{STATE_FILE}: not a record of a KRaft migration ({type(exc).__name__}: {exc})",
                            hint="it is kctl's own file in the state dir; do not edit it") from None

    def replace(self, **changes: object) -> Record:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


PREVIOUS_SUFFIX = ".prev"


def previous_path(state_dir: Path) -> Path:
    """The record as it was before its last write (kept by :func:`write`): a rerun from it redoes at most the
    step the last write recorded, and every step is safe to do twice."""
    return state_dir / (STATE_FILE + PREVIOUS_SUFFIX)


def read(state_dir: Path) -> Record:
    """The cluster's record; a cluster without one is on ZooKeeper with nothing under way. An empty, cut short or
    damaged record is one KctlError that says what the previous copy records and how to put it back."""
    path = state_dir / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Record(Phase.zookeeper)
    except (OSError, UnicodeDecodeError) as exc:
        raise _damaged(state_dir, f"cannot be read ({exc})") from None
    if not text.strip():
        raise _damaged(state_dir, "is empty (a crash while it was written, or a full disk)")
    try:
        return Record.from_json(text)
    except json.JSONDecodeError as exc:
        raise _damaged(state_dir, f"is cut short or not JSON ({exc.msg} at line {exc.lineno})") from None
    except KctlError as exc:
        raise _damaged(state_dir, exc.message.removeprefix(f"{STATE_FILE}: ")) from None


def _damaged(state_dir: Path, what: str) -> KctlError:
    path, prev = state_dir / STATE_FILE, previous_path(state_dir)
    message = (f"{path} {what}: kctl cannot tell where the migration to KRaft stands, so it changes nothing")
    try:
        before = Record.from_json(prev.read_text(encoding="utf-8"))
    except (OSError, ValueError, KctlError):
        return KctlError(message, hint=f"no usable previous copy ({prev.name}): docs/runbooks/migrate-to-kraft.md,"
                                       " \"kraft.json damaged\", says how to tell the phase from the cluster")
    under_way = (f", a {before.action} to {before.target.value} under way (steps done:"
                 f" {', '.join(before.done) or 'none'})" if before.target else "")
    return KctlError(message, hint=f"its previous copy records phase {before.phase.value}{under_way}: `cp {prev}"
                                   f" {path}`, then `kctl migrate kraft status`; the command under way resumes from"
                                   " there (each step is safe to do twice)")


def write(state_dir: Path, record: Record) -> None:
    """The record, durably (:func:`kctl.files.write_durable`: a crash leaves the old record or the new one, never
    an empty file); the record it replaces is kept as ``kraft.json.prev`` (see :func:`read`)."""
    path = state_dir / STATE_FILE
    try:
        old = path.read_text(encoding="utf-8")
        Record.from_json(old)
    except (OSError, ValueError, KctlError):
        old = None  # none yet, or damaged: the previous copy keeps the last good one
    if old is not None:
        write_durable(previous_path(state_dir), old)
    write_durable(path, record.to_json())


def current_pins(record: Record, pins: dict[str, str]) -> Record:
    """The record with the pins a migration keeps: those it recorded, else (its first transition) ``pins``."""
    return record if record.pins else record.replace(pins=dict(pins))


PIN_WORDS = {"versions.kafka": "versions.kafka", "versions.scala": "versions.scala", "image": "image.ref",
             "security.enabled": "security.enabled", "controllers": "the ZooKeeper participants (the controllers'"
                                                                     " nodes, node ids)"}
MIGRATING_RELEASE = "3.9."  # the one Kafka release that migrates (its last with ZooKeeper mode)


def check_pins(record: Record, pins: dict[str, str]) -> None:
    """UsageError (nothing rendered or written) when kctl.yaml changed what a migration under way must keep:
    ``pins`` are kctl.yaml's values now (:attr:`kctl.model.spec.ClusterSpec.migration_pins`). A record written before
    kctl kept pins is held to the one release that migrates."""
    if not record.migrating:
        return
    recorded = record.pins or ({} if pins.get("versions.kafka", "").startswith(MIGRATING_RELEASE)
                               else {"versions.kafka": "3.9.x"})
    changed = [k for k in recorded if pins.get(k) != recorded[k]]
    if not changed:
        return
    what = "; ".join(f"{PIN_WORDS.get(k, k)}: {pins.get(k) or '(none)'} in kctl.yaml, {recorded[k] or '(none)'}"
                     " when the migration started" for k in changed)
    if record.target is not None:
        where = (f"a {record.action} to {record.target.value} is under way (phase {record.phase.value}, steps done:"
                 f" {', '.join(record.done) or 'none'})")
        todo = f"`kctl migrate kraft {record.action}` to finish it"
        if record.action == "next":
            todo += ", then `kctl migrate kraft rollback` if you want to go back"
    else:
        where = f"the cluster is in the middle of its migration to KRaft (phase {record.phase.value})"
        todo = ("`kctl migrate kraft next` / `finalize` to finish it, or `kctl migrate kraft rollback` to go back"
                " to ZooKeeper")
    raise UsageError(f"refused, nothing was rendered or written: {where}, and kctl.yaml changed what it keeps"
                     f" ({what})",
                     hint=f"put {', '.join(PIN_WORDS.get(k, k) for k in changed)} back as it was, run {todo};"
                          " change it once the migration is finalized (or rolled back)")


def release_of(version: str) -> tuple[int, ...]:
    """Pure: a Kafka release (4.1.1) or a metadata.version (4.1-IV1) as its (major, minor)."""
    import re

    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else ()


# The metadata.version `kafka-storage.sh format` writes when it is given none (kctl gives none:
# kctl/runtime/image/node/jvm-common.sh), by release: the release's newest production level (Kafka's
# MetadataVersion.LATEST_PRODUCTION). The bound a downgrade is held to is the level's release (major, minor), so a
# release missing here is held to its own (major, minor) all the same (:func:`formatted_floor`).
FORMAT_LEVELS: dict[tuple[int, ...], str] = {(3, 9): "3.9-IV0", (4, 0): "4.0-IV3", (4, 1): "4.1-IV1"}


def format_level(kafka_version: str) -> str | None:
    """Pure: the metadata.version Kafka ``kafka_version`` formats new storage with, if :data:`FORMAT_LEVELS`
    names it."""
    return FORMAT_LEVELS.get(release_of(kafka_version))


def formatted_floor(record: Record) -> tuple[str, str] | None:
    """Pure: (what, release) for the level the cluster's storage was formatted at -- ``what`` names it in a
    message, ``release`` is what :func:`release_of` compares -- or None when the record cannot tell.

    A record written before kctl kept the formatted level (``formatted_*`` absent) is held to the release it
    names, if any: a migration under way pins the release its controllers were formatted by. Otherwise (a cluster
    made on KRaft by an older kctl) nothing is refused on this ground: kctl.yaml's version cannot stand in for
    the one that formatted the storage (it is exactly what a downgrade changed), and a guess would refuse a
    cluster that is fine. The level `kctl apply` raises the cluster to is still recorded and held
    (:attr:`Record.metadata_version`)."""
    if record.formatted_metadata_version:
        by = f" by Kafka {record.formatted_release}" if record.formatted_release else ""
        return f"{record.formatted_metadata_version} (its storage was formatted at it{by})", \
            record.formatted_metadata_version
    release = record.formatted_release or record.pins.get("versions.kafka")
    if release and release_of(release):
        return (f"{'.'.join(map(str, release_of(release)))} (its storage was formatted by Kafka {release}, at that"
                " release's metadata.version)"), release
    return None


def check_downgrade(record: Record, kafka_version: str) -> None:
    """UsageError when ``kafka_version`` cannot run the cluster's metadata.version: the highest level it supports
    (its own release's) is below the level the storage was formatted at (:func:`formatted_floor`) or the one kctl
    raised the cluster to (:attr:`Record.metadata_version`), whichever is newer. Kafka cannot start an older
    release on metadata newer than it knows, and a metadata.version is not lowered again."""
    floors: list[tuple[str, str]] = []
    if record.metadata_version and release_of(record.metadata_version):
        by = f" by Kafka {record.metadata_version_release}" if record.metadata_version_release else ""
        floors.append((f"{record.metadata_version} (raised{by})", record.metadata_version))
    formatted = formatted_floor(record)
    if formatted:
        floors.append(formatted)
    if not floors or not release_of(kafka_version):
        return
    what, level = max(floors, key=lambda f: release_of(f[1]))
    if release_of(kafka_version) >= release_of(level):
        return
    newest = ".".join(map(str, release_of(level)))
    raise UsageError(f"versions.kafka: {kafka_version} is older than the cluster's metadata.version {what}: an older"
                     " release cannot start on metadata newer than it knows, and a metadata.version is not lowered"
                     " again; nothing was rendered or written",
                     hint=f"keep versions.kafka at {newest}.x or later"
                          + (f" (it was {record.metadata_version_release})" if record.metadata_version_release
                             and release_of(record.metadata_version_release) == release_of(level)
                             else f" (it was {record.formatted_release})" if record.formatted_release
                             and release_of(record.formatted_release) == release_of(level) else "")
                          + "; an older release runs only on a new cluster (`kctl down --volumes` deletes this one's"
                            " data)")


def record_metadata_version(state_dir: Path, level: str | None, release: str) -> None:
    """Record the finalized metadata.version kctl raised the cluster to (``level``, e.g. 4.1-IV1); a raise that
    was pending is done."""
    if not level:
        return
    record = read(state_dir)
    if (record.metadata_version, record.metadata_version_release, record.metadata_version_pending) != (
            level, release, None):
        write(state_dir, record.replace(metadata_version=level, metadata_version_release=release,
                                        metadata_version_pending=None))


def metadata_version_owed(state_dir: Path, release: str) -> None:
    """Record, before anything is rolled, that the cluster's metadata.version is to be raised once every node
    runs Kafka ``release`` (:attr:`Record.metadata_version_pending`)."""
    record = read(state_dir)
    if record.metadata_version_pending != release:
        write(state_dir, record.replace(metadata_version_pending=release))


RAISE_COMMAND = "kctl migrate kraft raise-metadata-version"


def begin(record: Record, action: str, target: Phase) -> Record:
    """A transition starts (or, when the same one is under way, resumes with the steps it already did)."""
    if record.target is not None and (record.target, record.action) != (target, action):
        raise KctlError(f"a {record.action} to {record.target.value} is under way (steps done:"
                        f" {', '.join(record.done) or 'none'}); it must finish first",
                        hint=f"`kctl migrate kraft {record.action}` resumes it")
    if record.target is None:
        return record.replace(target=target, action=action, done=[], history=list(record.history))
    return record


ABORTABLE = (Phase.controllers, Phase.dual_write, Phase.kraft_brokers)  # targets of a `next` a rollback may stop


def can_abort(record: Record, action: str) -> bool:
    """Pure: ``action`` is a rollback of a `next` under way (one stuck at a step that keeps timing out, such as
    the controllers' quorum or the metadata's migration), which Kafka's "Reverting to ZooKeeper mode During the
    Migration" reverts from whatever that phase had reached."""
    return action == "rollback" and record.action == "next" and record.target in ABORTABLE


def abort_next(record: Record, now: float | None = None) -> Record:
    """The `next` under way stops where it is, and the rollback that follows undoes everything its target phase
    may have done (the controllers started, the brokers' migration settings, the claim on /controller and
    /migration): the record stands at the target, marked as never reached, with nothing under way."""
    if record.target is None or record.action != "next":
        return record
    at = time.time() if now is None else now
    return record.replace(phase=record.target, target=None, action=None, done=[],
                          history=[*record.history, {"phase": record.target.value, "at": at,
                                                     "aborted": f"next from {record.phase.value} stopped at"
                                                                f" {', '.join(record.done) or 'its first step'};"
                                                                " rolled back from here"}])


def step_done(record: Record, step: str) -> Record:
    return record.replace(done=[*record.done, step], history=list(record.history))


def arrive(record: Record, now: float | None = None) -> Record:
    """The transition under way is complete: its target is the phase."""
    if record.target is None:
        return record
    at = time.time() if now is None else now
    ended = record.target in (Phase.zookeeper, Phase.kraft)  # the migration is over: its pins go
    return record.replace(phase=record.target, target=None, action=None, done=[],
                          history=[*record.history, {"phase": record.target.value, "at": at}],
                          pins={} if ended else dict(record.pins))


def new_cluster_id() -> str:
    """A cluster id as Kafka makes one (``kafka-storage.sh random-uuid``): 16 random bytes in URL-safe base64
    without padding, never starting with '-' (a command-line tool would take it for an option)."""
    import base64
    import uuid

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def made_on_kraft(state_dir: Path, kafka_version: str, now: float | None = None) -> Record:
    """The record of a cluster made on KRaft (``metadata: kraft``): phase ``kraft`` from the start, with a new
    cluster id that its controllers and brokers format their storage with, and the release ``kafka_version`` that
    formats it with the metadata.version it records (:func:`format_level`; :func:`check_downgrade` holds kctl.yaml
    to it). Written once, before any node is made; afterwards read."""
    record = read(state_dir)
    if record.phase is Phase.kraft and record.cluster_id:
        return record
    if record.phase is not Phase.zookeeper or record.target is not None:
        raise KctlError(f"{state_dir / STATE_FILE} records a migration to KRaft under way ({record.phase.value}):"
                        " this state dir holds a cluster made on ZooKeeper",
                        hint="`kctl migrate kraft status`; a cluster made on ZooKeeper keeps `metadata: zookeeper`")
    at = time.time() if now is None else now
    made = Record(Phase.kraft, history=[{"phase": Phase.kraft.value, "at": at, "made": "on KRaft"}],
                  cluster_id=new_cluster_id(), formatted_metadata_version=format_level(kafka_version),
                  formatted_release=kafka_version)
    write(state_dir, made)
    return made
