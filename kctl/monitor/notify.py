"""Delivering a notification: a webhook (an HTTP POST of its JSON, by urllib) or an e-mail (smtplib).

Each delivery either succeeds or returns an :class:`Outcome` saying why not and whether trying again can help;
it never raises. The monitor keeps an undelivered notification in its outbox and tries it again with a growing
delay (:mod:`kctl.monitor.service`), so a receiver that is down or slow loses nothing and stops nothing.

What a security reviewer asks of it:

- a webhook is POSTed to an http(s) URL only; a redirect is not followed (it is a failure with its status,
  never a bodiless GET counted as delivered); certificates are verified (``ca_file`` for a private CA);
- a webhook URL often carries a token: it is never logged, stored or shown whole (:func:`redact`: scheme and
  host only), and it may come from a file or an environment variable instead of kctl.yaml;
- e-mail goes over STARTTLS (refused when the server does not offer it, never downgraded) or SMTPS, with the
  server's certificate verified; ``tls: none`` is the operator's explicit choice;
- every header of an e-mail is built by :mod:`email`'s policy from values with their line breaks escaped, so a
  consumer group named ``"x\\r\\nBcc: ..."`` (any client may choose its group id) is one valid e-mail with that
  name visible in its subject, not an injected header;
- the SMTP password comes from a file or an environment variable named in kctl.yaml, never from kctl.yaml
  itself, and is never logged: a server's refusal quoting it (or the base64 of AUTH LOGIN or PLAIN) is
  redacted like a webhook's token before it reaches a log line, the store or ``kctl alerts``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import smtplib
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kctl.model.spec import NotifierSpec

# HTTP statuses that say "not now" rather than "never": the notification is tried again (with back-off).
RETRYABLE_HTTP = frozenset({408, 425, 429})
# 4xx statuses about the receiver, or kctl's access to it, not about this notification: the URL, the headers and
# the credentials are the same for every notification (a token rotated: 401, 403, 407; a wrong or removed URL:
# 404, 405, 410, 414, 421; 426, 431). The receiver is as good as down: its queue waits, in order, with back-off.
RECEIVER_HTTP = frozenset({401, 403, 404, 405, 407, 410, 414, 421, 426, 431})
# Every other 4xx (400, 413, 415, 422 above all) refuses this notification's body: the ones behind it go on.


@dataclass(frozen=True)
class Outcome:
    """What one delivery attempt came to: ``error`` None when delivered; ``permanent`` when the receiver refused
    this notification itself (an HTTP 4xx, an SMTP 5xx for the message), so trying again is unlikely to help."""

    error: str | None = None
    permanent: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class _Setup(Exception):  # noqa: N818 - a configuration problem on this machine (a missing file or variable)
    pass


# ----- redaction -------------------------------------------------------------------------------------------

_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,15}://)(?:[^\s/?#@]*@)?([^\s/?#]*)([^\s'\"<>)]*)")


def redact(text: str, n: NotifierSpec | None = None) -> str:
    """``text`` with every URL cut to its scheme and host (``https://hooks.example.org/…``): a webhook's path and
    query often carry its token, and its user info a password. With ``n``, also any stray piece of its URL, and
    its SMTP password as sent (plain, and base64 as AUTH LOGIN and AUTH PLAIN send it): a server's refusal of
    the login may quote what it was given."""
    if n is not None and n.type == "email" and n.username:
        for form in sorted(_password_forms(n), key=len, reverse=True):
            text = text.replace(form, "…")
    if n is not None:
        try:
            url = webhook_url(n) if n.type == "webhook" else None
        except _Setup:
            url = None
        if url:
            parts = urlsplit(url)
            whole = [url, parts.path + (f"?{parts.query}" if parts.query else ""), parts.query,
                     parts.netloc.rpartition("@")[0]]
            # A token quoted alone (an error about one piece of the URL): the pieces that look like one.
            tokenish = [p for p in (*parts.path.split("/"), *(v for kv in parts.query.split("&")
                                                            for v in kv.split("=")[1:]))
                        if len(p) >= 8 and any(c.isdigit() for c in p)]
            for piece in sorted([p for p in whole if len(p) > 1] + tokenish, key=len, reverse=True):
                text = text.replace(piece, "…")
    return _URL.sub(_cut, text)


def _password_forms(n: NotifierSpec) -> list[str]:
    try:
        secret = password(n)
    except _Setup:
        return []
    if not secret:
        return []
    b64 = base64.b64encode
    forms = {secret, b64(secret.encode()).decode(), b64(f"\0{n.username}\0{secret}".encode()).decode()}
    return [f.rstrip("=") for f in forms if len(f) > 1]  # without padding: a quote may leave it out


def _cut(m: re.Match[str]) -> str:
    rest = m.group(3)
    kept = rest.rstrip(".,:;!")  # the sentence's punctuation after a URL stays
    return m.group(1) + m.group(2) + ("/…" if kept not in ("", "/") else kept) + rest[len(kept):]


def describe(n: NotifierSpec) -> str:
    """The notifier as logs and errors name it: its identity and where it sends, without a secret."""
    if n.type == "webhook":
        where = (redact(n.url) if n.url else f"URL from {n.url_file}" if n.url_file else f"URL from ${n.url_env}")
        return f"webhook {n.key} ({where})"
    return f"email {n.key} via {n.host}:{n.smtp_port} ({n.tls}) to {', '.join(n.to)}"


def clean(text: str, limit: int = 300) -> str:
    """One line: control characters (line breaks above all) shown escaped, so nothing a receiver, a group id or a
    server says can forge a log line or a header; cut to ``limit`` characters."""
    out = []
    for c in text:
        if c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append(" ")
        elif ord(c) < 32 or ord(c) == 127 or c in "\u2028\u2029\x85":
            out.append(f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    line = "".join(out)
    return line if len(line) <= limit else line[: limit - 1] + "…"


# ----- sending ---------------------------------------------------------------------------------------------


def send(n: NotifierSpec, body: dict[str, Any]) -> Outcome:
    """Deliver ``body``; never raises (every exception is a failure with its reason)."""
    try:
        out = _webhook(n, body) if n.type == "webhook" else _email(n, body)
    except _Setup as exc:
        out = Outcome(str(exc))
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        out = Outcome(f"every recipient refused: {_smtp_codes(exc.recipients)}",
                      permanent=bool(codes) and all(500 <= c < 600 for c in codes))
    except smtplib.SMTPResponseException as exc:
        msg = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        permanent = 500 <= exc.smtp_code < 600 and isinstance(exc, (smtplib.SMTPSenderRefused, smtplib.SMTPDataError))
        out = Outcome(f"{type(exc).__name__}: {exc.smtp_code} {msg}", permanent=permanent)
    except TimeoutError:
        out = Outcome(f"no answer within {n.timeout_seconds:g} s")
    except (OSError, smtplib.SMTPException) as exc:  # ssl.SSLError is an OSError
        out = Outcome(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a send must never raise; an unforeseen failure is this message's
        out = Outcome(f"{type(exc).__name__}: {exc}", permanent=True)
    if out.ok:
        return out
    return Outcome(clean(redact(f"{describe(n)}: {out.error}", n)), out.permanent)


def _smtp_codes(recipients: dict[str, tuple[int, bytes]]) -> str:
    return ", ".join(f"{addr} {code}" for addr, (code, _) in sorted(recipients.items()))


def webhook_url(n: NotifierSpec) -> str:
    if n.url:
        return n.url
    if n.url_file:
        try:
            return Path(n.url_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise _Setup(f"cannot read url_file {n.url_file}: {exc.strerror or exc}") from None
    value = os.environ.get(n.url_env or "")
    if not value:
        raise _Setup(f"the environment variable {n.url_env} (url_env) is not set")
    return value.strip()


def secret_headers(n: NotifierSpec) -> dict[str, str]:
    """The headers of ``headers_file``: ``Name: value`` a line (blank lines and ``#`` comments skipped)."""
    if not n.headers_file:
        return {}
    try:
        text = Path(n.headers_file).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise _Setup(f"cannot read headers_file {n.headers_file}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if (not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name.strip())
                or any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value)):
            raise _Setup(f"headers_file {n.headers_file}, line {i}: not `Name: value`")  # the value is not shown
        out[name.strip()] = value.strip()
    return out


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is an answer, not a delivery: following it would turn the POST into a bodiless GET elsewhere."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


def _tls_context(n: NotifierSpec) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=n.ca_file)  # verifies the certificate and the host name


def _webhook(n: NotifierSpec, body: dict[str, Any]) -> Outcome:
    url = webhook_url(n)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The spec refuses these; a url_file or url_env is read here, so the check is made again.
        return Outcome(f"not an http(s) URL (scheme {parts.scheme or 'none'!r})", permanent=False)
    opener = urllib.request.build_opener(_NoRedirect(), urllib.request.HTTPSHandler(context=_tls_context(n)))
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",  # noqa: S310 - http(s) only
                                 headers={"Content-Type": "application/json", "User-Agent": "kctl-monitor",
                                          **n.headers, **secret_headers(n)})
    try:
        with opener.open(req, timeout=n.timeout_seconds) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
        if 300 <= status < 400:
            return Outcome(f"HTTP {status} {exc.reason} (a redirect, not followed: set the url it points to)")
        if status in RECEIVER_HTTP:
            return Outcome(f"HTTP {status} {exc.reason} (the receiver refuses kctl, not this notification: check"
                           " the URL and its credentials; kept and tried again)")
        return Outcome(f"HTTP {status} {exc.reason}",
                       permanent=400 <= status < 500 and status not in RETRYABLE_HTTP)
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return Outcome(f"no answer within {n.timeout_seconds:g} s")
        return Outcome(f"{exc.reason}")
    if 200 <= status < 300:
        return Outcome()
    return Outcome(f"HTTP {status}")


def password(n: NotifierSpec) -> str | None:
    if n.password_file:
        try:
            return Path(n.password_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise _Setup(f"cannot read password_file {n.password_file}: {exc.strerror or exc}") from None
    if n.password_env:
        value = os.environ.get(n.password_env)
        if value is None:
            raise _Setup(f"the environment variable {n.password_env} (password_env) is not set")
        return value
    return None


def subject(body: dict[str, Any]) -> str:
    state = "RESOLVED" if body.get("state") == "resolved" else ("REPEAT" if body.get("repeat") else "OPEN")
    return f"[kctl {body.get('cluster')}] {state} {body.get('alert')}: {body.get('subject')}"


def message(n: NotifierSpec, body: dict[str, Any]) -> EmailMessage:
    """The e-mail: every header from a value with its control characters escaped (:func:`clean`), folded and
    encoded by the SMTP policy, which itself refuses a bare line break in a header."""
    assert n.sender is not None
    msg = EmailMessage(policy=SMTP_POLICY)
    msg["Subject"] = clean(subject(body), limit=400)
    msg["From"] = n.sender
    msg["To"] = ", ".join(n.to)
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=n.sender.rpartition("@")[2] or None)
    msg["Auto-Submitted"] = "auto-generated"
    lines = [subject(body), "", str(body.get("details") or ""), "", json.dumps(body, indent=2)]
    msg.set_content("\n".join(lines))
    return msg


def _email(n: NotifierSpec, body: dict[str, Any]) -> Outcome:
    assert n.host is not None
    msg = message(n, body)
    secret = password(n) if n.username else None
    smtp: smtplib.SMTP
    if n.tls == "smtps":
        smtp = smtplib.SMTP_SSL(n.host, n.smtp_port, timeout=n.timeout_seconds, context=_tls_context(n))
    else:
        smtp = smtplib.SMTP(n.host, n.smtp_port, timeout=n.timeout_seconds)
    with smtp:
        if n.tls == "starttls":
            smtp.starttls(context=_tls_context(n))  # SMTPNotSupportedError if not offered: never sent in clear
        if n.username:
            smtp.login(n.username, secret or "")
        smtp.send_message(msg)
    return Outcome()
