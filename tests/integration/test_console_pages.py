"""Every page of the console in a real headless Chromium (Debian's, through Playwright), served by uvicorn with
Kafka faked as in tests/unit/test_console_matrix.py (no cluster needed, a few seconds): each page has its own
title, the browser logs no error (a Content-Security-Policy violation is one) and asks for nothing that answers
4xx/5xx (the favicon included)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("playwright")
uvicorn = pytest.importorskip("uvicorn")

from kctl.console import server, views  # noqa: E402
from tests.unit.test_console_matrix import PASSWORD, hash_users, make_config, make_world  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = ["/", "/clusters/alpha", "/clusters/alpha/topics", "/clusters/alpha/topics/team-a.events",
         "/clusters/alpha/topics/team-a.events/messages", "/clusters/alpha/groups", "/clusters/alpha/groups/g-team-a",
         "/clusters/alpha/reassignment", "/clusters/alpha/brokers", "/clusters/alpha/alerts",
         "/clusters/alpha/security", "/audit", "/users"]


@pytest.fixture()
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    make_world(monkeypatch)
    monkeypatch.setattr(views, "LIVE_SECONDS", 1.0)
    cfg = make_config(tmp_path, hash_users(tmp_path))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    srv = uvicorn.Server(uvicorn.Config(server.build(cfg), host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline and t.is_alive(), "the console did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        t.join(10)


def test_every_page_in_a_browser_has_its_title_and_no_error_or_failed_request(url: str) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no {CHROMIUM}: `make setup` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    failed: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
            page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.goto(url + "/login")
            assert page.title() == "Log in — kctl console"
            page.fill("input[name=username]", "root-adm")
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_selector("#whoami")
            titles = {}
            for path in PAGES:
                page.goto(url + path)
                page.wait_for_load_state("load")
                titles[path] = page.title()
            page.goto(url + "/clusters/alpha/topics")  # htmx at work: the filter swaps the table
            page.fill("input[name=q]", "team")
            page.wait_for_timeout(600)
            assert page.locator("#topics tr[data-topic]").count() == 1
        finally:
            browser.close()
    assert errors == [] and failed == []
    assert len(set(titles.values())) == len(titles), titles
    assert titles["/clusters/alpha/groups/g-team-a"] == "g-team-a · group · alpha — kctl console"
    assert all(t.endswith(" — kctl console") for t in titles.values())
