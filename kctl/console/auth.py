"""Sessions, CSRF tokens and the back-off after failed logins, all held in the console's memory.

A session is a random token in an HttpOnly, SameSite=Strict cookie (Secure under TLS); the server keeps what
it stands for (the user's name, its CSRF token, when it was last used) and forgets it at logout, after
``idle_seconds`` without a request, or when the console stops. Every POST, PUT, PATCH and DELETE must carry the
session's CSRF token (the ``X-CSRF-Token`` header, or the ``csrf`` field of a form).

Failed logins: after ``free_failures`` failures for a name (or from an address), each further attempt waits
twice as long as the last (1 s, 2 s, 4 s ... up to ``max_lock_seconds``); a success clears the count. A locked
attempt is refused without checking the password at all.
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


@dataclass
class Sessions:
    idle_seconds: float = 8 * 3600
    _by_token: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, user: str) -> Session:
        now = time.monotonic()
        s = Session(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._by_token[s.token] = s
        return s

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        now = time.monotonic()
        with self._lock:
            s = self._by_token.get(token)
            if s is None:
                return None
            if now - s.last_seen > self.idle_seconds:
                del self._by_token[token]
                return None
            s.last_seen = now
            return s

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

    def wait_seconds(self, *keys: str) -> float:
        """How long these keys (``user:NAME``, ``addr:IP``) must still wait before the next attempt."""
        now = self._now()
        with self._lock:
            return max([0.0] + [self._seen[k].locked_until - now for k in keys if k in self._seen])

    def failed(self, *keys: str) -> float:
        """Count a failure; returns the wait it imposes from now."""
        now = self._now()
        wait = 0.0
        with self._lock:
            for k in keys:
                f = self._seen.setdefault(k, _Failures())
                f.count += 1
                over = f.count - self.free_failures
                if over > 0:
                    f.locked_until = now + min(self.max_lock_seconds, 2.0 ** (over - 1))
                    wait = max(wait, f.locked_until - now)
        return wait

    def succeeded(self, *keys: str) -> None:
        with self._lock:
            for k in keys:
                self._seen.pop(k, None)
