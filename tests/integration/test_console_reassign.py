"""In a browser, on a cluster of its own: a fourth broker is added (`kctl node add`, as the runbook does), then
an operator plans a reassignment onto it in the console, reviews the moves, executes it with a throttle and
watches it finish live. The replicas are read back with confluent-kafka's AdminClient, and every record written
before the move is read back after it."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kctl.testing.cluster import KafkaCluster
from tests.integration.test_console import CHROMIUM, CHROMIUM_ARGS, PASSWORD, _free_port, _login, _shot, _user

pytestmark = pytest.mark.integration
TOPIC = "console-moves"


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3) as c:
        c.create_topic(TOPIC, partitions=6, replication_factor=2)
        yield c


def test_plan_and_execute_a_reassignment_onto_a_new_broker_and_watch_it_finish(
        cluster: KafkaCluster, tmp_path: Any) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from playwright.sync_api import expect, sync_playwright

    p = Producer({**cluster.client_config(), "acks": "all", "enable.idempotence": True})
    sent = {f"r{i}".encode() for i in range(3000)}
    for v in sent:
        p.produce(TOPIC, v * 50)
    assert p.flush(60) == 0
    add = subprocess.run([sys.executable, "-m", "kctl", "node", "add", "--role", "observer", "-f",
                          str(cluster.spec_file)], capture_output=True, text=True, timeout=400, cwd=cluster.workdir)
    assert add.returncode == 0, add.stderr[-2000:]

    config = tmp_path / "console.yaml"
    config.write_text(yaml.safe_dump({"clusters": [{"path": str(cluster.spec_file)}]}))
    _user(config, "otto", "operator")
    port = _free_port()
    log = (tmp_path / "console.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "kctl", "console", "--port", str(port), "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    name = cluster.spec.name
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            deadline = time.monotonic() + 60
            while True:
                try:
                    page.goto(url + "/login")
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "console.log").read_text()
                    time.sleep(0.3)
            _login(page, url, "otto")
            page.goto(f"{url}/clusters/{name}/reassignment")
            assert "1, 2, 3, 4" in page.inner_text("#plan-form")  # the new broker is registered
            page.fill("#plan-form input[name=brokers]", "1,2,3,4")
            page.fill("#plan-form input[name=topics]", TOPIC)
            page.click("#plan-form button[type=submit]")
            page.wait_for_selector("#plan-moves")
            moves = page.locator("#plan-moves tr").count() - 1
            assert moves >= 2
            after = {r.split("\t")[0]: r.split("\t") for r in page.locator("#plan-brokers tr").all_inner_texts()[1:]}
            assert after["4"][1] == "0" and int(after["4"][2]) >= 2  # broker 4: no replica now, its share after
            _shot(page, "reassignment-plan")
            page.fill("#execute-plan input[name=throttle]", "50")
            # the request returns once Kafka's tool (a JVM started in a node) has started the move
            page.click("#execute-plan button[type=submit]", timeout=180_000)
            # live: the status part is replaced by server-sent events until the job says done
            expect(page.locator("#job-state")).to_have_text("done", timeout=300_000)
            assert "verified" in page.inner_text("#job-log")
            _shot(page, "reassignment-done")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()

    md = AdminClient(cluster.client_config()).list_topics(timeout=10)
    replicas = {p: list(pm.replicas) for p, pm in md.topics[TOPIC].partitions.items()}
    on4 = [p for p, r in replicas.items() if 4 in r]
    assert len(on4) >= 2 and all(len(r) == 2 for r in replicas.values()), replicas
    assert all(list(pm.isrs) and set(pm.isrs) == set(pm.replicas) for pm in md.topics[TOPIC].partitions.values())
    c = Consumer({**cluster.client_config(), "group.id": f"check-{uuid.uuid4().hex[:6]}"})
    got: set[bytes] = set()
    try:
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in replicas])
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is None:
                    got.add(m.value()[: len(m.value()) // 50])
    finally:
        c.close()
    assert got == sent
    audit = [line for line in (tmp_path / "console-audit.jsonl").read_text().splitlines()]
    assert any('"reassignment.execute"' in a and '"done"' in a for a in audit)
    assert any('"reassignment.finish"' in a and '"done"' in a for a in audit)
    assert PASSWORD not in "".join(audit)
