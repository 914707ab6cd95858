"""The node image's scripts and kctl's Python agree on the container contract (kctl/contract.py)."""

from __future__ import annotations

import re
from pathlib import Path

from kctl import contract

NODE = Path(__file__).resolve().parents[2] / "kctl" / "runtime" / "image" / "node"


def _scripts() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(NODE.iterdir()) if p.is_file())


def test_scripts_use_only_the_contract_roots() -> None:
    text = _scripts()
    roots = set(re.findall(r"(/(?:etc|var/opt|var/log)/kctl)\b", text))
    assert roots == {contract.CONF_DIR, contract.DATA_ROOT, contract.LOG_ROOT}


def test_the_retired_marker_is_the_one_the_scripts_read() -> None:
    for script in ("zookeeper-start", "healthcheck"):
        assert contract.ZOOKEEPER_RETIRED in (NODE / script).read_text(encoding="utf-8"), script


def test_log_files_are_where_the_log4j_and_supervisor_configs_put_them() -> None:
    from kctl.model import properties

    text = _scripts()
    assert f"{contract.LOG_ROOT}/{contract.LOG_FILES['supervisor']}" in text
    for service in ("zookeeper", "kafka"):
        log4j = properties.log4j(service)
        assert log4j["log4j.appender.ROLLINGFILE.File"] == contract.container_log(service)


def test_env_names_are_read_by_the_scripts() -> None:
    text = _scripts()
    for name in (contract.ENV_SERVICES, contract.ENV_ZK_SERVERS, contract.ENV_NODE, contract.ENV_JMX_EXPORTER_PORT):
        assert name in text, name


def test_the_exporters_paths_are_the_scripts_and_the_images() -> None:
    text = _scripts()
    assert contract.JMX_EXPORTER_JAR in text and f"{contract.ZOOKEEPER_METRICS_LIBS}/*" in text
    assert f"{contract.CONF_DIR}/{contract.JMX_EXPORTER_CONFIG}" in text
    dockerfile = (Path(__file__).parents[2] / "Dockerfile").read_text()
    assert f"COPY monitoring/ {contract.MONITORING_DIR}/" in dockerfile


def test_every_supported_kafka_version_has_a_zookeeper() -> None:
    assert contract.DEFAULT_KAFKA_VERSION in contract.ZOOKEEPER_VERSIONS
    assert contract.image_tag("3.9.1") == f"{contract.IMAGE_REPO}:3.9.1"


def test_python_never_re_spells_the_contract() -> None:
    # The container's paths, the image repository and the healthcheck are spelled in kctl/contract.py only.
    pkg = Path(__file__).resolve().parents[2] / "kctl"
    spelled = {
        contract.KAFKA_BIN: "contract.KAFKA_BIN",
        f'"{contract.IMAGE_REPO}:': "contract.image_tag()",
        f'"{contract.HEALTHCHECK}': "contract.HEALTHCHECK",
    }
    found = []
    for path in sorted(pkg.rglob("*.py")):
        if path.name == "contract.py":
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(pkg)}: {raw!r} (use {name})" for raw, name in spelled.items() if raw in text]
    assert not found, found
