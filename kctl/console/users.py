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

import enum
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kctl.errors import KctlError
from kctl.security.store import check_user, write_secret

MIN_PASSWORD = 8


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
    """The users file; reads it again when it changed on disk (``kctl console user`` beside a running console)."""

    path: Path
    _users: dict[str, User] = field(default_factory=dict)
    _mtime: float = -1.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # A fixed hash to verify against when the name is unknown: the answer takes as long as for a known name.
    _dummy: str = ""

    def users(self) -> dict[str, User]:
        with self._lock:
            try:
                mtime = self.path.stat().st_mtime
            except FileNotFoundError:
                self._users, self._mtime = {}, -1.0
                return {}
            if mtime != self._mtime:
                self._users = _parse(self.path)
                self._mtime = mtime
            return dict(self._users)

    def get(self, name: str) -> User | None:
        return self.users().get(name)

    def verify(self, name: str, password: str) -> User | None:
        """The user when the password is theirs; None otherwise (same work either way)."""
        from argon2.exceptions import InvalidHashError, VerificationError

        user = self.get(name)
        hasher = _hasher()
        if not self._dummy:
            self._dummy = hasher.hash("not-a-password-of-anyone")
        try:
            hasher.verify(user.password_hash if user else self._dummy, password)
        except (VerificationError, InvalidHashError):
            return None
        return user

    def put(self, user: User) -> None:
        users = self.users()
        users[user.name] = user
        self._write(users)

    def remove(self, name: str) -> bool:
        users = self.users()
        if users.pop(name, None) is None:
            return False
        self._write(users)
        return True

    def _write(self, users: dict[str, User]) -> None:
        doc = {"users": [{"name": u.name, "role": u.role.name, "password_hash": u.password_hash,
                          "clusters": list(u.clusters), "topic_prefixes": list(u.topic_prefixes)}
                         for u in sorted(users.values(), key=lambda u: u.name)]}
        write_secret(self.path, "# kctl console users (kctl console user add|remove|list)\n"
                     + yaml.safe_dump(doc, sort_keys=False))


def _parse(path: Path) -> dict[str, User]:
    try:
        doc = yaml.safe_load(path.read_text()) or {}
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
