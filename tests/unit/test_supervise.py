"""The node wrapper's self-healing back-off (kctl/runtime/image/node/jvm-common.sh `supervise`), run in bash."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kctl import contract

COMMON = Path(__file__).resolve().parents[2] / "kctl" / "runtime" / "image" / "node" / "jvm-common.sh"


@pytest.fixture()
def svc() -> Iterator[str]:
    name = f"unit-{uuid.uuid4().hex[:8]}"
    yield name
    for path in (contract.starts_file(name), contract.hold_file(name)):
        Path(path).unlink(missing_ok=True)


def start(svc: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = f'. "{COMMON}"; supervise "$1"; echo STARTED'
    return subprocess.run(["bash", "-c", script, "_", svc], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "KCTL_RESTART_LIMIT": "3", **env})


def test_a_crash_loop_backs_off_then_gives_up(svc: str) -> None:
    first = start(svc)
    assert first.returncode == 0 and first.stdout.strip() == "STARTED"  # a first start waits for nothing
    again = start(svc)
    assert again.returncode == 0 and "restart 1 in a row); waiting 1s first" in again.stdout
    again = start(svc)
    assert again.returncode == 0 and "restart 2 in a row); waiting 2s first" in again.stdout
    gave_up = start(svc)
    assert gave_up.returncode == 75 and "STARTED" not in gave_up.stdout
    assert "giving up" in gave_up.stderr and "kctl restart" in gave_up.stderr


def test_a_start_long_after_the_last_is_no_crash_loop(svc: str) -> None:
    Path(contract.starts_file(svc)).write_text("1000 1002\n")  # two quick starts, long ago
    run = start(svc)
    assert run.returncode == 0 and run.stdout.strip() == "STARTED"
    assert len(Path(contract.starts_file(svc)).read_text().split()) == 1  # only this start is remembered


def test_a_process_that_dies_minutes_after_each_start_still_reaches_the_limit(svc: str) -> None:
    # each run lasted 130 s (longer than supervisord's startsecs and than the old 120 s window): still a loop
    now = int(time.time())
    Path(contract.starts_file(svc)).write_text(" ".join(str(now - 130 * k) for k in (3, 2, 1)) + "\n")
    gave_up = start(svc)  # KCTL_RESTART_LIMIT=3: the fourth start within the interval
    assert gave_up.returncode == 75 and "STARTED" not in gave_up.stdout
    assert "started 3 times within 1800s without a deliberate start; giving up" in gave_up.stderr
    Path(contract.starts_file(svc)).write_text(" ".join(str(now - 130 * k) for k in (3, 2, 1)) + "\n")
    spread = start(svc, KCTL_RESTART_INTERVAL="300")  # with a shorter interval only the last two count
    assert spread.returncode == 0 and "restart 2 in a row" in spread.stdout


def test_a_garbled_record_is_read_as_no_record(svc: str) -> None:
    Path(contract.starts_file(svc)).write_text("x y\n")
    assert start(svc).stdout.strip() == "STARTED"


def test_a_deliberate_start_clears_the_record(svc: str) -> None:
    # kctl's services.start removes the record before `supervisorctl start`: the next start waits for nothing
    for _ in range(2):
        start(svc)
    Path(contract.starts_file(svc)).unlink()
    assert start(svc).stdout.strip() == "STARTED"


def test_scripts_use_the_contract_files() -> None:
    node = COMMON.parent
    text = COMMON.read_text() + (node / "held").read_text()
    assert contract.hold_file("$svc") in text and contract.starts_file("$svc") in text
    for wrapper in ("zookeeper", "kafka"):
        assert f"\nsupervise {wrapper}\n" in (node / f"{wrapper}-start").read_text()


def cds(home: Path, service: str, **env: str) -> str:
    script = f'. "{COMMON}"; KAFKA_HOME="$1"; cds_opts "$2"'
    return subprocess.run(["bash", "-c", script, "_", str(home), service], capture_output=True, text=True,
                          timeout=30, env={"PATH": "/usr/bin:/bin", **env}, check=True).stdout.strip()


def test_the_wrappers_map_the_images_class_data_sharing_archive_when_it_has_one(tmp_path: Path) -> None:
    assert cds(tmp_path, "kafka") == ""  # an image without archives: no flag, the JVM starts as before
    (tmp_path / "cds").mkdir()
    (tmp_path / "cds" / "kafka.jsa").write_bytes(b"x")
    assert cds(tmp_path, "kafka") == f"-XX:SharedArchiveFile={tmp_path}/cds/kafka.jsa"
    assert cds(tmp_path, "zookeeper") == ""
    node = COMMON.parent
    for wrapper, service in (("kafka-start", "kafka"), ("zookeeper-start", "zookeeper")):
        assert f"$(cds_opts {service})" in (node / wrapper).read_text()
    dockerfile = (node.parents[3] / "Dockerfile").read_text()
    assert "/usr/local/lib/kctl/cds-archive /opt/kafka/cds" in dockerfile
