"""kctl.runtime.image.maven, the one place kctl runs mvn: POM, offline first, clear errors (a fake mvn, no JVM)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kctl.errors import KctlError
from kctl.runtime.image import maven

NS = {"m": "http://maven.apache.org/POM/4.0.0"}

# A stand-in for mvn: logs its arguments; "-o" (offline) fails unless FAKE_MVN_OFFLINE_OK is set;
# online it copies one jar into -DoutputDirectory unless FAKE_MVN_FAIL is set.
FAKE_MVN = """#!/bin/bash
echo "$*" >> "$FAKE_MVN_LOG"
offline=0; out=""
for a in "$@"; do
  case $a in -o) offline=1 ;; -DoutputDirectory=*) out=${a#-DoutputDirectory=} ;; esac
done
if [ $offline = 1 ] && [ -z "$FAKE_MVN_OFFLINE_OK" ]; then echo "[ERROR] offline: artifact not in ~/.m2"; exit 1; fi
if [ -n "$FAKE_MVN_FAIL" ]; then echo "[ERROR] Could not transfer artifact from central"; exit 1; fi
if [ -n "$FAKE_MVN_SLEEP" ]; then sleep "$FAKE_MVN_SLEEP"; fi
mkdir -p "$out" && : > "$out/kafka-clients-3.9.1.jar"
"""

ARTS = [maven.Artifact.parse("org.apache.kafka:kafka-clients:3.9.1"),
        maven.Artifact.parse("org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
                             exclusions=["org.apache.spark:spark-token-provider-kafka-0-10_2.13"])]


@pytest.fixture()
def fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(FAKE_MVN)
    (bin_dir / "mvn").chmod(0o755)
    log = tmp_path / "mvn.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MVN_LOG", str(log))
    for var in ("FAKE_MVN_OFFLINE_OK", "FAKE_MVN_FAIL", "FAKE_MVN_SLEEP"):
        monkeypatch.delenv(var, raising=False)
    return log


def test_pom_is_valid_xml_with_dependencies_and_exclusions() -> None:
    root = ET.fromstring(maven.pom(ARTS))
    deps = root.findall("m:dependencies/m:dependency", NS)
    assert [(d.findtext("m:artifactId", namespaces=NS), d.findtext("m:version", namespaces=NS)) for d in deps] == [
        ("kafka-clients", "3.9.1"), ("spark-sql-kafka-0-10_2.13", "4.0.0")]
    excl = deps[1].findall("m:exclusions/m:exclusion/m:artifactId", NS)
    assert [e.text for e in excl] == ["spark-token-provider-kafka-0-10_2.13"]
    assert root.findtext("m:packaging", namespaces=NS) == "pom"


@pytest.mark.parametrize("bad", ["kafka-clients", "a:b", "a::c", "a:b:c:d"])
def test_artifact_parse_rejects_bad_coordinates(bad: str) -> None:
    with pytest.raises(ValueError):
        maven.Artifact.parse(bad)


def test_offline_first_then_central(tmp_path: Path, fake_mvn: Path) -> None:
    seen: list[str] = []
    jars = maven.copy_dependencies(ARTS, tmp_path / "out", what="Kafka 3.9.1", hint="pass --x", progress=seen.append)
    assert [j.name for j in jars] == ["kafka-clients-3.9.1.jar"]
    calls = fake_mvn.read_text().splitlines()
    assert len(calls) == 2 and " -o " in f" {calls[0]} " and " -o " not in f" {calls[1]} "
    assert f"{maven.DEPENDENCY_PLUGIN}:copy-dependencies" in calls[1]
    assert any("Maven Central" in m for m in seen)


def test_offline_success_touches_no_network(tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MVN_OFFLINE_OK", "1")
    maven.copy_dependencies(ARTS, tmp_path / "out", what="Kafka 3.9.1", hint="pass --x")
    assert len(fake_mvn.read_text().splitlines()) == 1


def test_failure_is_an_operator_error_with_maven_output(tmp_path: Path, fake_mvn: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    with pytest.raises(KctlError) as err:
        maven.copy_dependencies(ARTS, tmp_path / "out", what="Kafka 3.9.1", hint="pass --kafka-dist x.tgz")
    assert "Could not transfer artifact" in err.value.message and "Kafka 3.9.1" in err.value.message
    assert err.value.hint and "--kafka-dist x.tgz" in err.value.hint and "settings.xml" in err.value.hint


def test_timeout_is_an_operator_error(tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MVN_OFFLINE_OK", "1")
    monkeypatch.setenv("FAKE_MVN_SLEEP", "5")
    with pytest.raises(KctlError, match="more than 1 s"):
        maven.copy_dependencies(ARTS, tmp_path / "out", what="Kafka 3.9.1", hint="h", timeout_s=1)


def test_missing_mvn_names_what_needed_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KctlError) as err:
        maven.copy_dependencies(ARTS, tmp_path / "out", what="Kafka 3.9.1", hint="pass --kafka-dist x.tgz")
    assert "Kafka 3.9.1" in err.value.message and "Maven" in err.value.message
    assert err.value.hint and "apt-get install maven" in err.value.hint and "--kafka-dist x.tgz" in err.value.hint
