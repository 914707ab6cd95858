"""The console's users: a YAML file of names, roles, scopes and argon2 hashes (0600, beside the cluster's state).

Roles, each including the one before it:

- ``viewer``: reads every page and the JSON API of the clusters and topics it may see;
- ``operator``: creates topics, edits configs, adds partitions, runs elections and reassignments, resets offsets;
- ``admin``: deletes topics, manages SCRAM users, ACLs and the console's own users.

A user may be limited to named clusters (``clusters``) and to topics whose names start with one of
``topic_prefixes``; an empty list means no limit. Passwords are never stored, only argon2id hashes
(argon2-cffi's defaults), and ``kctl console user add`` reads the password from standard input.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kctl.errors import KctlError
from kctl.security.store import check_user, write_secret

MIN_PASSWORD = 8
# argon2id takes 64 MiB and tens of milliseconds per check: at most this many at once, whatever the number of
# logins in flight (the others queue in their threads, never on the event loop).
VERIFY_AT_ONCE = 2
_verifying = threading.BoundedSemaphore(VERIFY_AT_ONCE)


class Role(enum.IntEnum):
    viewer = 1
    operator = 2
    admin = 3

    @classmethod
    def parse(cls, value: str) -> Role:
        try:
            return cls[value]
        except KeyError:
            raise KctlError(f"{value!r} is not a console role",
                            hint="roles are: " + ", ".join(r.name for r in cls)) from None


@dataclass(frozen=True)
class User:
    name: str
    role: Role
    password_hash: str
    clusters: tuple[str, ...] = ()
    topic_prefixes: tuple[str, ...] = ()

    def may_see_cluster(self, cluster: str) -> bool:
        return not self.clusters or cluster in self.clusters

    def may_see_topic(self, topic: str) -> bool:
        return not self.topic_prefixes or any(topic.startswith(p) for p in self.topic_prefixes)

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role.name, "clusters": list(self.clusters),
                "topic_prefixes": list(self.topic_prefixes)}

    def fingerprint(self) -> str:
        """What a session was opened for: a new password, role or scope ends the user's sessions."""
        raw = "\0".join([self.password_hash, self.role.name, *self.clusters, "\0", *self.topic_prefixes])
        return hashlib.sha256(raw.encode()).hexdigest()


def _hasher() -> Any:
    from argon2 import PasswordHasher

    return PasswordHasher()


def hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise KctlError(f"a console password needs at least {MIN_PASSWORD} characters",
                        hint="pipe a longer one on standard input")
    return str(_hasher().hash(password))


@dataclass
class UserStore:
    """The users file; read again when it changed on disk (``kctl console user`` beside a running console).

    Changes (:meth:`put`, :meth:`remove`, :meth:`change`) hold an exclusive ``fcntl`` lock on ``FILE.lock``,
    read the file afresh under it and replace it atomically: concurrent changes, from threads of one console,
    several consoles or the CLI, are applied one after another and none is lost."""

    path: Path
    _users: dict[str, User] = field(default_factory=dict)
    _seen: tuple[int, int, int] = (-1, -1, -1)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # A fixed hash to verify against when the name is unknown: the answer takes as long as for a known name.
    _dummy: str = ""

    def users(self) -> dict[str, User]:
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._users, self._seen = {}, (-1, -1, -1)
                return {}
            seen = (st.st_mtime_ns, st.st_ino, st.st_size)
            if seen != self._seen:
                self._users = _parse(self.path)
                self._seen = seen
            return dict(self._users)

    def get(self, name: str) -> User | None:
        return self.users().get(name)

    def verify(self, name: str, password: str) -> User | None:
        """The user when the password is theirs; None otherwise (same work either way)."""
        from argon2.exceptions import InvalidHashError, VerificationError

        user = self.get(name)
        hasher = _hasher()
        with _verifying:
            if not self._dummy:
                self._dummy = hasher.hash("not-a-password-of-anyone")
            try:
                hasher.verify(user.password_hash if user else self._dummy, password)
            except (VerificationError, InvalidHashError):
                return None
        return user

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def change(self, fn: Callable[[dict[str, User]], Any]) -> Any:
        """``fn(users)`` on the file's current users, under the lock; the users it leaves are written back."""
        with self._locked():
            users = _parse(self.path) if self.path.exists() else {}
            before = dict(users)
            result = fn(users)
            if users != before:
                self._write(users)
            return result

    def put(self, user: User) -> User | None:
        """Add or replace a user; returns the one it replaced."""
        def put(users: dict[str, User]) -> User | None:
            old = users.get(user.name)
            users[user.name] = user
            return old

        return self.change(put)  # type: ignore[no-any-return]

    def remove(self, name: str) -> bool:
        return bool(self.change(lambda users: users.pop(name, None) is not None))

    def _write(self, users: dict[str, User]) -> None:
        doc = {"users": [{"name": u.name, "role": u.role.name, "password_hash": u.password_hash,
                          "clusters": list(u.clusters), "topic_prefixes": list(u.topic_prefixes)}
                         for u in sorted(users.values(), key=lambda u: u.name)]}
        write_secret(self.path, "# kctl console users (kctl console user add|remove|list)\n"
                     + yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))


def _parse(path: Path) -> dict[str, User]:
    try:
        doc = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except yaml.YAMLError as exc:
        raise KctlError(f"{path} is not a console users file: {exc}", hint="fix it or remove it") from None
    out: dict[str, User] = {}
    for i, raw in enumerate(doc.get("users") or []):
        try:
            out[raw["name"]] = User(check_user(str(raw["name"])), Role.parse(str(raw["role"])),
                                    str(raw["password_hash"]), tuple(raw.get("clusters") or ()),
                                    tuple(raw.get("topic_prefixes") or ()))
        except (KeyError, TypeError) as exc:
            raise KctlError(f"{path}: user {i + 1} lacks {exc}", hint="each user has name, role and"
                            " password_hash; `kctl console user add` writes them") from None
    return out


def new_user(name: str, role: str, password: str, clusters: list[str] | None = None,
             topic_prefixes: list[str] | None = None) -> User:
    return User(check_user(name), Role.parse(role), hash_password(password), tuple(clusters or ()),
                tuple(topic_prefixes or ()))
