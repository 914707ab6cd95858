"""The console against the shared cluster: `kctl console` runs as its own process, driven over HTTP (its JSON
API) and in a real headless Chromium (Debian's, through Playwright). What the console did to the cluster is
read back with confluent-kafka's AdminClient, not with the console's code."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

httpx = pytest.importorskip("httpx")
PASSWORD = "console test password"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Console:
    def __init__(self, url: str, config: Path, proc: subprocess.Popen[str]) -> None:
        self.url, self.config, self.proc = url, config, proc

    def client(self, user: str | None = None) -> tuple[Any, str]:
        c = httpx.Client(base_url=self.url, timeout=30)
        if user is None:
            return c, ""
        r = c.post("/api/login", json={"username": user, "password": PASSWORD})
        assert r.status_code == 200, r.text
        return c, str(r.json()["csrf"])


def _user(config: Path, name: str, role: str) -> None:
    p = subprocess.run([sys.executable, "-m", "kctl", "console", "user", "add", name, "--role", role,
                        "--config", str(config)], input=PASSWORD + "\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def console(kafka_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    home = tmp_path_factory.mktemp("console")
    config = home / "console.yaml"
    config.write_text(yaml.safe_dump({"clusters": [{"path": str(kafka_cluster.spec_file)}]}))
    for name, role in (("ada", "admin"), ("otto", "operator"), ("vera", "viewer")):
        _user(config, name, role)
    port = _free_port()
    log = (home / "console.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "kctl", "console", "--port", str(port), "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/login", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, (home / "console.log").read_text()
        assert time.monotonic() < deadline, "the console did not answer within 60 s"
        time.sleep(0.2)
    try:
        yield Console(url, config, proc)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def _topics(cluster: Any) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    return AdminClient(cluster.client_config()).list_topics(timeout=10).topics  # type: ignore[no-any-return]


def _wait_gone(cluster: Any, topic: str) -> None:
    deadline = time.monotonic() + 30
    while topic in _topics(cluster):
        assert time.monotonic() < deadline, f"{topic} still listed 30 s after its deletion"
        time.sleep(0.5)


def test_api_roles_change_the_real_cluster_and_the_audit_log_tells_who(console: Console, kafka_cluster: Any) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    name = kafka_cluster.spec.name
    topic = f"console-{uuid.uuid4().hex[:6]}"
    otto, csrf = console.client("otto")
    cards = otto.get("/api/clusters").json()
    assert [(c["name"], c["health"], c["brokers_registered"]) for c in cards] == [(name, "healthy", 3)]

    r = otto.post(f"/api/clusters/{name}/topics", headers={"X-CSRF-Token": csrf},
                  json={"name": topic, "partitions": 2, "replication_factor": 3,
                        "configs": {"retention.ms": "3600000"}})
    assert r.status_code == 201, r.text
    meta = _topics(kafka_cluster)[topic]  # read back by librdkafka, not by the console
    assert len(meta.partitions) == 2 and all(len(p.replicas) == 3 for p in meta.partitions.values())
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient(kafka_cluster.client_config())  # held while its future is read
    cfg = admin.describe_configs([res])[res].result(timeout=10)
    assert cfg["retention.ms"].value == "3600000"
    assert topic in [t["name"] for t in otto.get(f"/api/clusters/{name}/topics").json()]

    vera, vcsrf = console.client("vera")
    r = vera.delete(f"/api/clusters/{name}/topics/{topic}", headers={"X-CSRF-Token": vcsrf})
    assert r.status_code == 403
    r = otto.delete(f"/api/clusters/{name}/topics/{topic}", headers={"X-CSRF-Token": csrf})
    assert r.status_code == 403  # deleting is an admin's
    assert topic in _topics(kafka_cluster)
    ada, acsrf = console.client("ada")
    assert ada.delete(f"/api/clusters/{name}/topics/{topic}", headers={"X-CSRF-Token": acsrf}).status_code == 200
    _wait_gone(kafka_cluster, topic)

    audit = [(a["user"], a["action"], a["result"]) for a in ada.get("/api/audit", params={"cluster": name}).json()
             if a["target"] == topic]
    assert audit == [("ada", "topic.delete", "done"), ("otto", "topic.delete", "refused"),
                     ("vera", "topic.delete", "refused"), ("otto", "topic.create", "done")]
    # a failed change is audited as failed, with the cluster's own reason
    r = otto.post(f"/api/clusters/{name}/topics", headers={"X-CSRF-Token": csrf},
                  json={"name": "too-many-replicas", "replication_factor": 9})
    assert r.status_code in (400, 409) and "replication" in r.json()["error"].lower()
    assert ada.get("/api/audit", params={"action": "topic.create", "result": "failed"}).json()[0]["target"] == \
        "too-many-replicas"
    assert "too-many-replicas" not in _topics(kafka_cluster)


def test_an_unreachable_cluster_is_its_own_card_and_the_others_still_work(console: Console, kafka_cluster: Any,
                                                                           tmp_path: Path) -> None:
    ghost = tmp_path / "ghost"
    ghost.mkdir()
    (ghost / "kctl.yaml").write_text(yaml.safe_dump({
        "name": f"ghost{uuid.uuid4().hex[:4]}", "zookeeper": {"host_port_base": _free_port()},
        "kafka": {"external_port_base": _free_port()}, "monitoring": {"enabled": False}}))
    ada, csrf = console.client("ada")
    r = ada.post("/api/clusters", json={"path": str(ghost / "kctl.yaml")}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 201, r.text
    gname = r.json()["name"]
    try:
        t0 = time.monotonic()
        cards = {c["name"]: c for c in ada.get("/api/clusters").json()}
        took = time.monotonic() - t0
        assert cards[gname]["health"] == "down" and cards[kafka_cluster.spec.name]["health"] == "healthy"
        assert took < 10, f"the cards took {took:.1f} s"  # one cluster's timeout, not a hang
        page = ada.get("/").text
        assert gname in page and "Traceback" not in page
        assert ada.get(f"/api/clusters/{kafka_cluster.spec.name}/topics").status_code == 200
        assert ada.get(f"/api/clusters/{gname}/topics").status_code in (409, 502)
    finally:
        assert ada.delete(f"/api/clusters/{gname}", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert gname not in [c["name"] for c in ada.get("/api/clusters").json()]


# ----- in a browser ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no {CHROMIUM}: `make setup` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _login(page: Any, url: str, user: str) -> None:
    page.goto(url + "/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#whoami")
    assert page.inner_text("#whoami").startswith(user)


def _shot(page: Any, name: str) -> None:
    # docs/console.md's pictures: KCTL_CONSOLE_SCREENSHOTS=docs/console
    where = os.environ.get("KCTL_CONSOLE_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=True)


def test_in_a_browser_operator_creates_viewer_cannot_delete_admin_reads_the_audit(
        console: Console, kafka_cluster: Any, browser: Any) -> None:
    name = kafka_cluster.spec.name
    topic = f"browser-{uuid.uuid4().hex[:6]}"
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    _login(page, console.url, "otto")
    assert page.locator(f".card[data-cluster='{name}'] .badge").inner_text() == "healthy"
    _shot(page, "clusters")
    page.click(f".card[data-cluster='{name}'] h2 a")
    page.wait_for_selector("#brokers")
    assert page.locator("#brokers tr").count() == 4  # the heading and three brokers
    _shot(page, "cluster")
    page.goto(f"{console.url}/clusters/{name}/topics")
    # a malformed value: the field's own error, the form kept
    page.fill("#create-topic input[name=name]", topic)
    page.fill("#create-topic input[name=partitions]", "lots")
    page.click("#create-topic button[type=submit]")
    assert "integer" in page.inner_text("#error-partitions").lower()
    assert topic not in _topics(kafka_cluster)
    page.fill("#create-topic input[name=partitions]", "4")
    page.fill("#create-topic textarea[name=configs]", "cleanup.policy=compact")
    page.click("#create-topic button[type=submit]")
    page.wait_for_selector("#partitions")
    assert page.locator("#partitions tr").count() == 5
    assert len(_topics(kafka_cluster)[topic].partitions) == 4
    _shot(page, "topic")
    page.goto(f"{console.url}/clusters/{name}/topics")
    page.fill("input[name=q]", topic[:10])  # htmx filters the table as one types
    page.wait_for_function("document.querySelectorAll('#topics tr[data-topic]').length === 1")
    assert page.locator("#topics tr[data-topic]").first.get_attribute("data-topic") == topic
    _shot(page, "topics")
    page.click("header button[type=submit]")  # log out
    page.wait_for_selector("input[name=username]")

    _login(page, console.url, "vera")
    page.goto(f"{console.url}/clusters/{name}/topics/{topic}")
    assert page.locator("#delete-topic").count() == 0 and page.locator("#partitions").count() == 1
    # a hidden button is not authorisation: the same POST made by hand is refused on the server
    status = page.evaluate("""async (path) => {
        const token = JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token'];
        const body = new URLSearchParams({csrf: token, confirm: path.split('/').pop()});
        return (await fetch(path + '/delete', {method: 'POST', body})).status; }""",
                           f"/clusters/{name}/topics/{topic}")
    assert status == 403
    assert topic in _topics(kafka_cluster)
    page.click("header button[type=submit]")
    page.wait_for_selector("input[name=username]")

    _login(page, console.url, "ada")
    page.goto(f"{console.url}/clusters/{name}/topics/{topic}")
    page.fill("#delete-topic input[name=confirm]", topic)
    page.click("#delete-topic button[type=submit]")
    page.wait_for_selector("#topics")
    _wait_gone(kafka_cluster, topic)
    page.goto(f"{console.url}/audit?cluster={name}")
    rows = [r for r in page.locator("#audit tr").all_inner_texts() if topic in r]
    assert any("otto" in r and "topic.create" in r and "done" in r for r in rows)
    assert any("vera" in r and "topic.delete" in r and "refused" in r for r in rows)
    assert any("ada" in r and "topic.delete" in r and "done" in r for r in rows)
    _shot(page, "audit")
    ctx.close()
