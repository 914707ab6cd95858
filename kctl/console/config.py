"""What a console serves: its clusters (each a kctl.yaml), its users file, its audit log and its switches.

Without ``--config`` the console serves the cluster of one kctl.yaml (``-f``, default ./kctl.yaml), and keeps its
users and audit log in that cluster's state dir (``.kctl/NAME/console/``). A console file names several::

    clusters:                     # the kctl.yaml of each cluster (relative to this file)
      - path: prod/kctl.yaml
      - path: staging/kctl.yaml
    users_file: console-users.yaml    # default: beside this file
    audit_file: console-audit.jsonl   # default: beside this file
    read_only: false              # true: every change is refused, for everyone
    idle_minutes: 480             # a session ends after this long without a request
    session_hours: 12             # and this long after the login, however busy
    masking:                      # what viewers see of message values on these topics
      - topic_prefix: payments.
        roles: [viewer]

Clusters added in the console (``POST /api/clusters``) are kept in ``console-clusters.yaml`` beside the users
file; the ones the console file names can be removed only there.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kctl.errors import KctlError, UsageError
from kctl.model.spec import ClusterSpec, load_cluster, state_dir_for

log = logging.getLogger("kctl.console")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterRef(_Model):
    path: Path = Field(..., description="The cluster's kctl.yaml.")


class MaskRule(_Model):
    topic_prefix: str = Field(..., min_length=1)
    roles: list[str] = Field(default_factory=lambda: ["viewer"])


class ConsoleFile(_Model):
    clusters: list[ClusterRef] = Field(default_factory=list)
    users_file: Path | None = None
    audit_file: Path | None = None
    read_only: bool = False
    idle_minutes: int = Field(480, ge=1, le=7 * 24 * 60)
    session_hours: float = Field(12, gt=0, le=7 * 24)
    masking: list[MaskRule] = Field(default_factory=list)


@dataclass
class ConsoleConfig:
    cluster_files: list[Path]
    users_file: Path
    audit_file: Path
    registry_file: Path
    read_only: bool = False
    idle_minutes: int = 480
    masking: list[MaskRule] = field(default_factory=list)
    session_hours: float = 12.0


def load_config(config: Path | None, spec_file: Path = Path("kctl.yaml")) -> ConsoleConfig:
    """The console file's settings, or the defaults around one cluster's kctl.yaml (``-f``, default ./kctl.yaml)."""
    if config is None:
        if not spec_file.exists():
            raise UsageError(f"no cluster spec {spec_file}",
                             hint="run `kctl console` beside a cluster's kctl.yaml, give it with -f, or pass"
                                  " --config console.yaml")
        spec, _ = load_cluster(spec_file)
        home = state_dir_for(spec, spec_file) / "console"
        return ConsoleConfig([spec_file.resolve()], home / "users.yaml", home / "audit.jsonl",
                             home / "clusters.yaml")
    if not config.exists():
        raise UsageError(f"no console file {config}", hint="write one (docs/console.md) or leave --config out")
    try:
        doc = ConsoleFile.model_validate(yaml.safe_load(config.read_text()) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise UsageError(f"{config} is not a console file: {exc}", hint="docs/console.md shows one") from None
    base = config.resolve().parent
    users = base / (doc.users_file or "console-users.yaml")
    return ConsoleConfig([(base / c.path).resolve() for c in doc.clusters], users,
                         base / (doc.audit_file or "console-audit.jsonl"), users.parent / "console-clusters.yaml",
                         doc.read_only, doc.idle_minutes, doc.masking, doc.session_hours)


UNREADABLE = "its kctl.yaml cannot be read (see the console's log)"
INVALID = "its kctl.yaml is not a valid cluster spec (see the console's log)"


@dataclass
class Entry:
    """One cluster as the console knows it: its spec, or why it could not be read: ``error`` in words without a
    file's path (what every user may be shown), ``detail`` the reason itself (the console's log, and admins
    without limits, who see the paths anyway)."""

    path: Path
    spec: ClusterSpec | None
    error: str | None
    fixed: bool  # named by the console file (removable only there)
    detail: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name if self.spec is not None else self.path.parent.name or str(self.path)


@dataclass
class Registry:
    """The console's clusters, by name; each kctl.yaml read again when it changed."""

    config: ConsoleConfig
    _cache: dict[Path, tuple[float, Entry]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _told: dict[Path, str | None] = field(default_factory=dict)  # the reason last logged of an unreadable one

    def _added(self) -> list[Path]:
        try:
            doc = yaml.safe_load(self.config.registry_file.read_text()) or {}
        except FileNotFoundError:
            return []
        return [Path(p) for p in doc.get("clusters") or []]

    def _entry(self, path: Path, fixed: bool) -> Entry:
        try:
            mtime = path.stat().st_mtime
        except OSError as exc:
            return self._unreadable(Entry(path, None, UNREADABLE, fixed, f"cannot read {path}: {exc.strerror}"))
        with self._lock:
            hit = self._cache.get(path)
            if hit and hit[0] == mtime:
                return Entry(path, hit[1].spec, hit[1].error, fixed, hit[1].detail)
        try:
            spec, _ = load_cluster(path)
            spec = spec.model_copy(update={"state_dir": str(state_dir_for(spec, path))})
            entry = Entry(path, spec, None, fixed)
        except KctlError as exc:
            reason = " ".join(line.strip() for line in exc.message.splitlines())  # with its problems
            entry = self._unreadable(Entry(path, None, INVALID, fixed, reason[:1000]))
        with self._lock:
            self._cache[path] = (mtime, entry)
        return entry

    def _unreadable(self, entry: Entry) -> Entry:
        """The reason to the console's log, once for each change of it (the entries are read at every request)."""
        with self._lock:
            told = self._told.get(entry.path) == entry.detail
            self._told[entry.path] = entry.detail
        if not told:
            log.warning("cluster %s: %s", entry.name, entry.detail)
        return entry

    def entries(self) -> list[Entry]:
        out: dict[str, Entry] = {}
        for path, fixed in [(p, True) for p in self.config.cluster_files] + [(p, False) for p in self._added()]:
            e = self._entry(path, fixed)
            out.setdefault(e.name, e)  # a second kctl.yaml naming the same cluster is not served twice
        return list(out.values())

    def get(self, name: str) -> Entry | None:
        return next((e for e in self.entries() if e.name == name), None)

    def add(self, path: Path) -> Entry:
        path = path.expanduser().resolve()
        entry = self._entry(path, False)
        if entry.spec is None:
            raise UsageError(f"{path} is not a cluster's kctl.yaml: {entry.detail}", hint="give the path of a"
                             " kctl.yaml that `kctl status -f PATH` reads")
        if self.get(entry.name) is not None:
            raise UsageError(f"a cluster named {entry.name!r} is already served", hint="remove it first")
        self._write(self._added() + [path])
        return entry

    def remove(self, name: str) -> None:
        e = self.get(name)
        if e is None:
            raise UsageError(f"no cluster {name!r}")
        if e.fixed:
            raise UsageError(f"cluster {name!r} is named by the console file", hint="remove it there")
        self._write([p for p in self._added() if p != e.path])

    def _write(self, paths: list[Path]) -> None:
        f = self.config.registry_file
        f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump({"clusters": [str(p) for p in paths]}))
        tmp.replace(f)


def masked(rules: list[MaskRule], topic: str, role: str) -> bool:
    """Whether a user of ``role`` sees ``topic``'s values masked."""
    return any(topic.startswith(r.topic_prefix) and role in r.roles for r in rules)
