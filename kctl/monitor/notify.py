"""Delivering a notification: a webhook (an HTTP POST of its JSON, by urllib) or an e-mail (smtplib).

Each delivery either succeeds or returns why not; it never raises. The monitor keeps an undelivered
notification in its outbox and tries again next round, so a receiver that is down or slow loses nothing and
stops nothing. The SMTP password comes from a file or an environment variable named in kctl.yaml, never from
kctl.yaml itself, and is never logged.
"""

from __future__ import annotations

import json
import os
import smtplib
import ssl
import urllib.error
import urllib.request
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from kctl.spec import NotifierSpec


def describe(n: NotifierSpec) -> str:
    return f"webhook {n.url}" if n.type == "webhook" else f"email via {n.host}:{n.port} to {', '.join(n.to)}"


def send(n: NotifierSpec, body: dict[str, Any]) -> str | None:
    """Deliver ``body``; None when delivered, else the reason."""
    try:
        if n.type == "webhook":
            return _webhook(n, body)
        return _email(n, body)
    except (OSError, smtplib.SMTPException, ssl.SSLError, ValueError) as exc:
        return f"{describe(n)}: {type(exc).__name__}: {exc}"


def _webhook(n: NotifierSpec, body: dict[str, Any]) -> str | None:
    assert n.url is not None
    req = urllib.request.Request(n.url, data=json.dumps(body).encode(), method="POST",  # noqa: S310
                                 headers={"Content-Type": "application/json", "User-Agent": "kctl-monitor",
                                          **n.headers})
    try:
        with urllib.request.urlopen(req, timeout=n.timeout_seconds) as resp:  # noqa: S310
            status = resp.status
    except urllib.error.HTTPError as exc:
        return f"webhook {n.url}: HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        return f"webhook {n.url}: {exc.reason}"
    except TimeoutError:
        return f"webhook {n.url}: no answer within {n.timeout_seconds:g} s"
    return None if 200 <= status < 300 else f"webhook {n.url}: HTTP {status}"


def password(n: NotifierSpec) -> str | None:
    if n.password_file:
        return Path(n.password_file).expanduser().read_text(encoding="utf-8").strip()
    if n.password_env:
        value = os.environ.get(n.password_env)
        if value is None:
            raise ValueError(f"the environment variable {n.password_env} (password_env) is not set")
        return value
    return None


def subject(body: dict[str, Any]) -> str:
    state = "RESOLVED" if body.get("state") == "resolved" else ("REPEAT" if body.get("repeat") else "OPEN")
    return f"[kctl {body.get('cluster')}] {state} {body.get('alert')}: {body.get('subject')}"


def _email(n: NotifierSpec, body: dict[str, Any]) -> str | None:
    assert n.host is not None and n.sender is not None
    msg = EmailMessage()
    msg["Subject"] = subject(body)
    msg["From"] = n.sender
    msg["To"] = ", ".join(n.to)
    lines = [subject(body), "", str(body.get("details") or ""), "", json.dumps(body, indent=2)]
    msg.set_content("\n".join(lines))
    with smtplib.SMTP(n.host, n.port, timeout=n.timeout_seconds) as smtp:
        if n.starttls:
            smtp.starttls(context=ssl.create_default_context())
        if n.username:
            smtp.login(n.username, password(n) or "")
        smtp.send_message(msg)
    return None
