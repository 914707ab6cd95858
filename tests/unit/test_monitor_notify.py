"""The notifiers against real receivers on 127.0.0.1 (an HTTP server in a thread, aiosmtpd): a send never
raises; a redirect is a failure, not a delivery; 4xx refusals are told from "not now"; a group id with line
breaks is one valid e-mail, not an injected header; SMTP is STARTTLS or SMTPS with the certificate verified,
never downgraded; a webhook's URL (its token) is in no error, log line, store row or `kctl alerts` output."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from email.policy import default
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import SpecError
from kctl.model.spec import NotifierSpec, parse_spec
from kctl.monitor import notify
from kctl.monitor.store import db_path
from tests.unit.monitor_receivers import Hook, group_doc, hooks, monitor

BODY = {"alert": "disk", "state": "open", "cluster": "logger", "subject": "broker 1", "details": "91 %",
        "repeat": False}
TOKEN = "T0KEN-s3cr3t-4f9a"


@pytest.fixture
def hook() -> Iterator[Hook]:
    with hooks(1) as (h,):
        yield h


def webhook(url: str, **kw: Any) -> NotifierSpec:
    return NotifierSpec.model_validate({"type": "webhook", "url": url, "timeout_seconds": 2, **kw})


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


# ----- webhooks ----------------------------------------------------------------------------------------------


def test_a_webhook_delivery_and_its_failures_as_outcomes(hook: Hook) -> None:
    n = webhook(hook.url())
    assert notify.send(n, BODY) == notify.Outcome()
    assert hook.requests == [("POST", "/hook", BODY)]
    # refusals of this notification's body; "not now"; the receiver refusing kctl itself (its URL, its token)
    for status, permanent in ((400, True), (413, True), (415, True), (422, True), (408, False), (429, False),
                              (500, False), (503, False), (401, False), (403, False), (404, False), (405, False),
                              (407, False), (410, False)):
        hook.answer = lambda m, p, b, s=status: (s, {})  # type: ignore[misc]
        out = notify.send(n, BODY)
        assert not out.ok and out.permanent is permanent and f"HTTP {status}" in (out.error or ""), status
    refused = notify.send(webhook(f"http://127.0.0.1:{closed_port()}/hook"), BODY)
    assert not refused.ok and not refused.permanent and "refused" in (refused.error or "")


def test_a_redirect_is_a_failure_not_a_bodiless_get(hook: Hook) -> None:
    hook.answer = lambda m, p, b: (302, {"Location": hook.url("/elsewhere")}) if p == "/hook" else (200, {})
    out = notify.send(webhook(hook.url()), BODY)
    assert not out.ok and "HTTP 302" in (out.error or "") and "not followed" in (out.error or "")
    assert [(m, p) for m, p, _ in hook.requests] == [("POST", "/hook")]  # nothing went to /elsewhere


def test_a_slow_receiver_is_a_timeout() -> None:
    gate = threading.Event()
    with hooks(1) as (slow,):
        slow.answer = lambda m, p, b: (gate.wait(5), (200, {}))[1]
        out = notify.send(webhook(slow.url(), timeout_seconds=0.3), BODY)
        gate.set()
    assert not out.ok and not out.permanent and "0.3 s" in (out.error or "")


def test_a_send_never_raises(tmp_path: Path, hook: Hook) -> None:
    url_file = tmp_path / "url"
    url_file.write_text("file:///etc/passwd\n")
    out = notify.send(NotifierSpec.model_validate({"type": "webhook", "url_file": str(url_file)}), BODY)
    assert not out.ok and "not an http(s) URL" in (out.error or "")
    out = notify.send(NotifierSpec.model_validate({"type": "webhook", "url_file": str(tmp_path / "none")}), BODY)
    assert not out.ok and "cannot read url_file" in (out.error or "")
    out = notify.send(webhook(hook.url()), {**BODY, "details": {1, 2}})  # not JSON: a failure, not an exception
    assert not out.ok and out.permanent and "TypeError" in (out.error or "")
    out = notify.send(NotifierSpec.model_validate({"type": "webhook", "url_env": "KCTL_TEST_NO_SUCH_URL"}), BODY)
    assert not out.ok and "KCTL_TEST_NO_SUCH_URL" in (out.error or "")


def test_the_spec_takes_http_and_https_webhooks_only() -> None:
    def problems(n: dict[str, Any]) -> list[str]:
        try:
            parse_spec({"monitoring": {"notifiers": [n]}})
        except SpecError as exc:
            return exc.problems
        return []

    assert problems({"type": "webhook", "url": "https://hooks.example.org/x"}) == []
    for url in ("file:///etc/passwd", "ftp://example.org/x", "gopher://x/", "https:///nohost", "hooks.example.org"):
        got = problems({"type": "webhook", "url": url})
        assert any("must be http:// or https://" in p for p in got), (url, got)
    assert any("one of `url: https://...`" in p for p in problems({"type": "webhook"}))
    assert any("line break" in p for p in problems({"type": "webhook", "url": "https://h/x",
                                                    "headers": {"X-Team": "a\r\nX-Evil: 1"}}))
    same = {"type": "webhook", "url": "https://h/x"}
    assert any("give each its own `name`" in p for p in parse_problems([same, same]))
    assert parse_problems([{**same, "name": "a"}, {**same, "name": "b"}]) == []


def parse_problems(notifiers: list[dict[str, Any]]) -> list[str]:
    try:
        parse_spec({"monitoring": {"notifiers": notifiers}})
    except SpecError as exc:
        return exc.problems
    return []


def test_a_webhook_url_is_never_shown_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    """A token in the URL's path and query: not in the outcome, the log, the store's rows or `kctl alerts`."""
    hook.answer = lambda m, p, b: (302, {"Location": f"https://elsewhere.example.org/{TOKEN}"})
    url = hook.url(f"/services/{TOKEN}?token={TOKEN}x")
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(json.dumps({"name": "logger", "state_dir": str(tmp_path / "state"), "monitoring": {
        "notifiers": [{"type": "webhook", "url": url}], "alerts": {"exporter": False}}}))
    lines: list[str] = []
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": url}], lines)
    mon.group_docs = {"billing": group_doc("STOP")}
    mon.round(with_groups=False)
    mon.deliver_once(mon.store)
    (row,) = mon.store.outbox()
    assert row["last_error"].startswith(f"webhook {mon.spec.monitoring.notifiers[0].key} (http://127.0.0.1:")
    mon.store.close()
    dump = "\n".join(subprocess.run([sys.executable, "-m", "sqlite3", str(db_path(mon.state_dir)), ".dump"],
                                    capture_output=True, text=True).stdout.splitlines())
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    outs = [subprocess.run([sys.executable, "-m", "kctl", "alerts", "-f", str(spec_file), "-o", fmt],
                           capture_output=True, text=True, env=env) for fmt in ("json", "table")]
    assert all(p.returncode == 0 for p in outs), [p.stderr for p in outs]
    assert json.loads(outs[0].stdout)["undelivered"][0]["last_error"] == row["last_error"]
    assert "HTTP 302" in outs[1].stdout + outs[1].stderr
    for text in (*lines, row["last_error"], dump, *(p.stdout + p.stderr for p in outs)):
        assert TOKEN not in text and "/services/" not in text, text


def test_redact_keeps_scheme_and_host_only() -> None:
    assert notify.redact(f"webhook https://user:pw@hooks.example.org:8443/a/{TOKEN}?t=1: HTTP 500") == \
        "webhook https://hooks.example.org:8443/…: HTTP 500"
    assert notify.redact("see http://h.example/ and http://h.example.") == "see http://h.example/ and http://h.example."
    n = webhook(f"https://hooks.example.org/{TOKEN}")
    assert TOKEN not in notify.redact(f"nonnumeric port: '{TOKEN}'", n)
    assert TOKEN not in notify.describe(n)


# ----- e-mail ------------------------------------------------------------------------------------------------


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append((list(envelope.rcpt_tos), message_from_bytes(envelope.content, policy=default)))
        return "250 OK"


def _cert(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class Smtp:
    """aiosmtpd on 127.0.0.1: ``mode`` plain (no STARTTLS offered), starttls (required, with AUTH after it) or
    smtps (TLS from the start)."""

    def __init__(self, mode: str, cert: tuple[Path, Path] | None = None, password: str = "s3cret") -> None:
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult, LoginPassword

        self.mailbox = Mailbox()
        self.logins: list[tuple[str, str]] = []

        def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
            assert isinstance(data, LoginPassword)
            self.logins.append((data.login.decode(), data.password.decode()))
            return AuthResult(success=data.password.decode() == password)

        self.port = closed_port()
        kw: dict[str, Any] = {}
        if mode != "plain":
            assert cert is not None
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
            if mode == "starttls":
                kw = {"tls_context": ctx, "require_starttls": True, "authenticator": authenticate,
                      "auth_require_tls": True}
            else:
                kw = {"ssl_context": ctx, "server_hostname": "localhost", "authenticator": authenticate}
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port, **kw)
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()


def mail(port: int, tls: str, **kw: Any) -> NotifierSpec:
    return NotifierSpec.model_validate({"type": "email", "host": "127.0.0.1", "port": port, "tls": tls,
                                        "from": "kctl@example.org", "to": ["ops@example.org"], "timeout_seconds": 5,
                                        **kw})


def test_a_group_id_with_line_breaks_is_one_valid_e_mail_not_an_injected_header() -> None:
    smtp = Smtp("plain")
    try:
        evil = "group app\r\nBcc: victim@evil.example\r\nX-Injected: yes\r\n\r\nforged body"
        out = notify.send(mail(smtp.port, "none"), {**BODY, "alert": "group-status", "subject": evil})
        assert out.ok, out.error
        ((rcpts, msg),) = smtp.mailbox.messages
        assert rcpts == ["ops@example.org"]
        assert msg["Bcc"] is None and msg["X-Injected"] is None
        assert str(msg["Subject"]) == ("[kctl logger] OPEN group-status: group app\\r\\nBcc: victim@evil.example"
                                       "\\r\\nX-Injected: yes\\r\\n\\r\\nforged body")
        assert msg["Message-ID"] and msg["Date"] and msg["Auto-Submitted"] == "auto-generated"
        text = msg.get_payload(decode=True).decode()  # type: ignore[union-attr]
        assert json.loads(text[text.index("{"):])["subject"] == evil  # the body keeps the name exactly
    finally:
        smtp.stop()


def test_starttls_verifies_the_certificate_and_logs_in_only_after_it(tmp_path: Path) -> None:
    cert = _cert(tmp_path)
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    smtp = Smtp("starttls", cert)
    try:
        out = notify.send(mail(smtp.port, "starttls", ca_file=str(cert[0]), username="kctl",
                               password_file=str(secret)), BODY)
        assert out.ok, out.error
        assert smtp.logins == [("kctl", "s3cret")] and len(smtp.mailbox.messages) == 1
        # The system's CAs do not know this certificate: refused, nothing sent, no password given.
        out = notify.send(mail(smtp.port, "starttls", username="kctl", password_file=str(secret)), BODY)
        assert not out.ok and "CERTIFICATE_VERIFY_FAILED" in (out.error or "") and "s3cret" not in (out.error or "")
        assert smtp.logins == [("kctl", "s3cret")] and len(smtp.mailbox.messages) == 1
    finally:
        smtp.stop()


def test_starttls_is_never_downgraded_to_plain_text(tmp_path: Path) -> None:
    smtp = Smtp("plain")
    try:
        out = notify.send(mail(smtp.port, "starttls"), BODY)  # the default: a server that offers no STARTTLS
        assert not out.ok and not out.permanent and "STARTTLS" in (out.error or "").upper()
        assert smtp.mailbox.messages == []
    finally:
        smtp.stop()


def test_smtps_speaks_tls_from_the_start(tmp_path: Path) -> None:
    cert = _cert(tmp_path)
    smtp = Smtp("smtps", cert)
    try:
        out = notify.send(mail(smtp.port, "smtps", ca_file=str(cert[0])), BODY)
        assert out.ok, out.error
        assert len(smtp.mailbox.messages) == 1
    finally:
        smtp.stop()


def test_smtp_tls_settings_in_the_spec() -> None:
    def email(**kw: Any) -> dict[str, Any]:
        return {"type": "email", "host": "smtp.example.org", "from": "k@example.org", "to": ["o@example.org"], **kw}

    n = NotifierSpec.model_validate(email())
    assert (n.tls, n.smtp_port) == ("starttls", 587)
    assert NotifierSpec.model_validate(email(tls="smtps")).smtp_port == 465
    assert NotifierSpec.model_validate(email(tls="none")).smtp_port == 25
    assert NotifierSpec.model_validate(email(starttls=True)).tls == "starttls"  # the old spelling
    assert NotifierSpec.model_validate(email(starttls=False)).tls == "none"
    in_clear = parse_problems([email(tls="none", username="k", password_env="P")])
    assert any("password in clear to smtp.example.org" in p and "starttls" in p for p in in_clear)
    assert parse_problems([email(tls="none", host="localhost", username="k", password_env="P")]) == []
    assert any("not an e-mail address" in p for p in parse_problems([email(to=["o@example.org\r\nBcc: x@y"])]))
    assert any("tls mode" in p for p in parse_problems([email(tls="ssl")]))


def test_a_missing_password_is_a_failure_that_names_it_and_never_the_secret() -> None:
    out = notify.send(mail(closed_port(), "starttls", username="u", password_env="KCTL_TEST_NO_SUCH_VARIABLE"), BODY)
    assert not out.ok and "KCTL_TEST_NO_SUCH_VARIABLE" in (out.error or "")


def test_log_lines_stay_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group id (any client chooses one) cannot forge a line of monitor.log."""
    assert notify.clean("a\r\nmonitor: forged\x1b[31m") == "a\\r\\nmonitor: forged\\x1b[31m"
    assert len(notify.clean("x" * 1000, limit=50)) == 50
    lines: list[str] = []
    mon = monitor(tmp_path, monkeypatch, [], lines)
    mon.group_docs = {"app\nmonitor: alert resolved: all fine": group_doc("STOP")}
    mon.round(with_groups=False)
    mon.store.close()
    (line,) = [x for x in lines if "alert open" in x]
    assert "\n" not in line and "group app\\nmonitor: alert resolved" in line


def test_an_smtp_refusal_of_the_message_is_permanent_a_busy_server_is_not() -> None:
    smtp = Smtp("plain")
    answers = {"ops@example.org": "550 5.1.1 no such user"}

    async def handle_rcpt(server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        return answers.get(address) or (envelope.rcpt_tos.append(address) or "250 OK")

    smtp.mailbox.handle_RCPT = handle_rcpt  # type: ignore[attr-defined]
    try:
        out = notify.send(mail(smtp.port, "none"), BODY)
        assert not out.ok and out.permanent and "ops@example.org 550" in (out.error or "")
        answers["ops@example.org"] = "451 4.3.0 try again later"
        out = notify.send(mail(smtp.port, "none"), BODY)
        assert not out.ok and not out.permanent and "451" in (out.error or "")
        assert smtp.mailbox.messages == []
    finally:
        smtp.stop()


def test_secret_headers_come_from_a_file_never_from_kctl_yaml(tmp_path: Path, hook: Hook) -> None:
    secret = tmp_path / "headers"
    secret.write_text(f"# the on-call tool's key\nAuthorization: GenieKey {TOKEN}\n\nX-Team: data\n")
    assert notify.send(webhook(hook.url(), headers_file=str(secret)), BODY).ok
    assert hook.headers[0]["Authorization"] == f"GenieKey {TOKEN}" and hook.headers[0]["X-Team"] == "data"
    secret.write_text(f"Authorization GenieKey {TOKEN}\n")  # no colon
    out = notify.send(webhook(hook.url(), headers_file=str(secret)), BODY)
    assert not out.ok and "line 1: not `Name: value`" in (out.error or "") and TOKEN not in (out.error or "")
    assert len(hook.requests) == 1  # nothing sent without its headers
    for name in ("Authorization", "cookie", "X-Api-Key"):
        got = parse_problems([{"type": "webhook", "url": "https://h/x", "headers": {name: "Bearer x"}}])
        assert any("holds a secret" in p and "headers_file" in p for p in got), got


def test_an_smtp_password_is_in_no_log_line_store_row_or_kctl_alerts_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A server that refuses the login and echoes what it was sent (the password, and the base64 of AUTH PLAIN
    and AUTH LOGIN), as a broken or hostile one may: the password is in no outcome, monitor.log line, store row,
    nor `kctl alerts` output (-o json and the table)."""
    import base64

    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    from kctl.cli.main import main

    secret = "pw-" + TOKEN
    seen: list[tuple[str, str]] = []

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        assert isinstance(data, LoginPassword)
        login, password = data.login.decode(), data.password.decode()
        seen.append((login, password))
        plain = base64.b64encode(f"\0{login}\0{password}".encode()).decode()
        return AuthResult(success=False, handled=False,
                          message=f"535 5.7.8 {mechanism} {login}:{password} refused ({plain}"
                                  f" {base64.b64encode(password.encode()).decode()})")

    port = closed_port()
    controller = Controller(Mailbox(), hostname="127.0.0.1", port=port, authenticator=authenticate,
                            auth_require_tls=False)
    controller.start()
    try:
        (tmp_path / "smtp-password").write_text(secret + "\n")
        notifier = {"type": "email", "host": "127.0.0.1", "port": port, "tls": "none", "from": "kctl@example.org",
                    "to": ["ops@example.org"], "username": "kctl", "password_file": str(tmp_path / "smtp-password"),
                    "timeout_seconds": 5}
        spec_file = tmp_path / "kctl.yaml"
        spec_file.write_text(json.dumps({"name": "logger", "state_dir": str(tmp_path / "state"), "monitoring": {
            "notifiers": [notifier], "alerts": {"exporter": False}}}))
        lines: list[str] = []
        mon = monitor(tmp_path, monkeypatch, [notifier], lines)
        mon.group_docs = {"billing": group_doc("STOP")}
        mon.round(with_groups=False)
        assert mon.deliver_once(mon.store) == 0
        (row,) = mon.store.outbox()
        mon.store.close()
    finally:
        controller.stop()
    assert seen and set(seen) == {("kctl", secret)}  # the password was sent (PLAIN, then LOGIN), and refused
    assert "535" in row["last_error"] and "kctl:" in row["last_error"]  # the server's words, less the secret
    dump = subprocess.run([sys.executable, "-m", "sqlite3", str(db_path(tmp_path / "state")), ".dump"],
                          capture_output=True, text=True).stdout
    outs = []
    for args in (["-o", "json"], []):
        capsys.readouterr()
        try:
            main(["alerts", "-f", str(spec_file), *args])
        except SystemExit as exc:
            assert not exc.code
        out, err = capsys.readouterr()
        outs.append(out + err)
    assert json.loads(outs[0])["undelivered"][0]["last_error"] == row["last_error"]
    assert "535" in outs[1]
    forms = [secret, base64.b64encode(secret.encode()).decode(),
             base64.b64encode(f"\0kctl\0{secret}".encode()).decode(), TOKEN]
    for text in (*lines, row["last_error"], dump, *outs):
        assert not any(f in text for f in forms), text
