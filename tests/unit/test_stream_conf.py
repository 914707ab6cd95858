"""`kctl stream submit --conf spark.KEY=VALUE`: Spark settings as spark-submit takes them, refused with a message
and a hint when malformed, one of kctl's own, or a secret; the job's session gets them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kctl.stream.config import JobConfig, parse_conf


def test_settings_are_taken_as_spark_submit_takes_them() -> None:
    assert parse_conf(["spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -Dx=a=b",
                       "spark.sql.shuffle.partitions=4"]) == {
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -Dx=a=b", "spark.sql.shuffle.partitions": "4"}
    assert parse_conf([]) == {}


@pytest.mark.parametrize(("item", "says"), [
    ("spark.ui.enabled", "is not spark.KEY=VALUE"),
    ("ui.enabled=true", "is not spark.KEY=VALUE"),
    ("spark.ui.enabled=", "is not spark.KEY=VALUE"),
    ("spark.driver.memory=2g", "use --driver-memory"),
    ("spark.driver.host=0.0.0.0", "kctl's own setting of the job: the driver binds to 127.0.0.1 only"),
    ("spark.ssl.keyStorePassword=x", "secret"),
    ("spark.authenticate.secret=x", "secret"),
])
def test_malformed_own_and_secret_settings_are_refused(item: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_conf([item])


def test_the_cli_refuses_before_anything_starts(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "kctl", "stream", "submit", "--conf", "spark.driver.memory=4g",
                        "--checkpoint", str(tmp_path / "cp"), "--bootstrap-servers", "127.0.0.1:1"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "use --driver-memory" in p.stderr and "hint:" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "cp").exists()


def test_the_settings_travel_in_the_jobs_config() -> None:
    cfg = JobConfig("127.0.0.1:1", ["t"], "/o", "/c", extra_conf={"spark.sql.shuffle.partitions": "4"})
    assert JobConfig.from_json(cfg.to_json()).extra_conf == {"spark.sql.shuffle.partitions": "4"}
