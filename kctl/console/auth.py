"""Sessions, CSRF tokens and the back-off after failed logins, all held in the console's memory.

A session is a random token in an HttpOnly, SameSite=Strict cookie (Secure under TLS); the server keeps what
it stands for (the user's name, its CSRF token, when it was opened and last used, a fingerprint of the user's
password hash, role and scope) and forgets it at logout, after ``idle_seconds`` without a request,
``max_seconds`` after it was opened whatever its use, when the user's password, role or scope changes (from
the console or the CLI), or when the console stops. Every POST, PUT, PATCH and DELETE must carry the
session's CSRF token (the ``X-CSRF-Token`` header, or the ``csrf`` field of a form).

Failed logins: after ``free_failures`` failures for a name (or from an address), each further attempt waits
twice as long as the last (1 s, 2 s, 4 s ... up to ``max_lock_seconds``); a success clears the name's count.
A locked attempt is refused without checking the password at all. The attempt is counted *before* its password
is checked, under one lock (:meth:`LoginGuard.attempt`): parallel attempts cannot all pass a check made before
any of them failed.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

COOKIE = "kctl_console"
LOGIN_COOKIE = "kctl_console_login"  # the login form's double-submit token (no session exists yet)


@dataclass
class Session:
    token: str
    user: str
    csrf: str
    created: float
    last_seen: float
    fingerprint: str = ""  # the user's password hash, role and scope when it was opened (User.fingerprint)


@dataclass
class Sessions:
    idle_seconds: float = 8 * 3600
    max_seconds: float = 12 * 3600
    clock: object = time.monotonic
    _by_token: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _now(self) -> float:
        return float(self.clock())  # type: ignore[operator]

    def open(self, user: str, fingerprint: str = "") -> Session:
        now = self._now()
        s = Session(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), now, now, fingerprint)
        with self._lock:
            self._by_token[s.token] = s
        return s

    def get(self, token: str | None, fingerprint: str | None = None) -> Session | None:
        """The live session of this token; ``fingerprint``: the user's now, the session ends if it differs."""
        if not token:
            return None
        now = self._now()
        with self._lock:
            s = self._by_token.get(token)
            if s is None:
                return None
            if (now - s.last_seen > self.idle_seconds or now - s.created > self.max_seconds
                    or fingerprint is not None and not hmac.compare_digest(fingerprint, s.fingerprint)):
                del self._by_token[token]
                return None
            s.last_seen = now
            return s

    def peek(self, token: str | None) -> Session | None:
        """The session of a token, not yet checked against its user (:meth:`get` does)."""
        with self._lock:
            return self._by_token.get(token or "")

    def close(self, token: str | None) -> None:
        with self._lock:
            self._by_token.pop(token or "", None)

    def close_user(self, user: str) -> None:
        """End every session of a user (removed, or their role changed)."""
        with self._lock:
            for t in [t for t, s in self._by_token.items() if s.user == user]:
                del self._by_token[t]


def same(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(str(a), str(b))


@dataclass
class _Failures:
    count: int = 0
    locked_until: float = 0.0


@dataclass
class LoginGuard:
    free_failures: int = 3
    max_lock_seconds: float = 300.0
    clock: object = time.monotonic
    _seen: dict[str, _Failures] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _now(self) -> float:
        return float(self.clock())  # type: ignore[operator]

    max_keys: int = 100_000  # names and addresses remembered; beyond, the ones not locked are forgotten first

    def wait_seconds(self, *keys: str) -> float:
        """How long these keys (``user:NAME``, ``addr:IP``) must still wait before the next attempt."""
        now = self._now()
        with self._lock:
            return max([0.0] + [self._seen[k].locked_until - now for k in keys if k in self._seen])

    def attempt(self, *keys: str) -> tuple[bool, float]:
        """One login attempt, decided and counted at once: ``(False, wait)`` while any key is locked (check no
        password), else ``(True, wait)`` with the attempt counted as a failure in advance and ``wait`` the lock
        that failure imposes (0 while within the free failures); :meth:`succeeded` takes it back."""
        now = self._now()
        with self._lock:
            locked = max([0.0] + [self._seen[k].locked_until - now for k in keys if k in self._seen])
            if locked > 0:
                return False, locked
            if len(self._seen) >= self.max_keys:
                self._forget(now)
            return True, self._count(keys, now)

    def _count(self, keys: tuple[str, ...], now: float) -> float:
        """One more failure for each key (the lock held); the longest wait it imposes from ``now``."""
        wait = 0.0
        for k in keys:
            f = self._seen.setdefault(k, _Failures())
            f.count += 1
            over = f.count - self.free_failures
            if over > 0:
                f.locked_until = now + min(self.max_lock_seconds, 2.0 ** (over - 1))
                wait = max(wait, f.locked_until - now)
        return wait

    def _forget(self, now: float) -> None:
        for k in [k for k, f in self._seen.items() if f.locked_until <= now]:
            del self._seen[k]
        while len(self._seen) >= self.max_keys:  # every one locked: the soonest to open goes
            del self._seen[min(self._seen, key=lambda k: self._seen[k].locked_until)]

    def failed(self, *keys: str) -> float:
        """Count a failure outside :meth:`attempt`; returns the wait it imposes from now."""
        now = self._now()
        with self._lock:
            return self._count(keys, now)

    def succeeded(self, *keys: str, refund: tuple[str, ...] = ()) -> None:
        """A right password: these keys' counts start again; the ``refund`` ones (an address) only lose the
        failure :meth:`attempt` counted in advance, so one account of one's own does not clear an address's
        failures on the names of others."""
        with self._lock:
            for k in keys:
                self._seen.pop(k, None)
            for k in refund:
                f = self._seen.get(k)
                if f is not None:  # the attempt passed, so no earlier lock held: none is left
                    f.count, f.locked_until = max(0, f.count - 1), 0.0
