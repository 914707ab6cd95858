"""``monitoring.prometheus: true``: a real Prometheus and Alertmanager beside the cluster (docs/monitoring.md).

Both run from one image kctl builds from Debian's packages (``prometheus`` 2.42, ``prometheus-alertmanager``
0.25) on the same base image as the nodes (a registry's ``debian:bookworm-slim``, or the local debootstrap
one), as the Compose project ``kctl-<name>-prometheus`` (``<state>/prometheus/compose.yaml``), apart from the
cluster's own project. They use the host's network and listen on 127.0.0.1 only: Prometheus scrapes the
exporters' published ports and the kctl monitor (which listens on the host's 127.0.0.1), and publishes
nothing else.

Rendered from the spec, as data written with PyYAML: ``prometheus.yml`` (a scrape job per kind of target,
one static config per node with its ``node`` label), ``rules.yml`` (the alert rules equal to kctl's own, with
their thresholds as ``for``), ``alertmanager.yml`` (one receiver with every notifier: webhooks, and e-mails
whose password file is mounted read-only; a ``password_env`` e-mail is sent by the kctl monitor only).
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kctl.errors import KctlError
from kctl.model.render import write_text_files
from kctl.model.spec import ClusterSpec
from kctl.runtime import docker_api
from kctl.runtime.engine.compose import compose_project
from kctl.runtime.image import build as image
from kctl.wait import ticks

Progress = Callable[[str], None]

IMAGE = "kctl/prometheus:bookworm"
DOCKERFILE = """\
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \\
 && apt-get install -y --no-install-recommends prometheus prometheus-alertmanager ca-certificates \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
"""
CONF = "/etc/kctl-prometheus"
SECRETS = "/run/kctl-prometheus"
WAIT_S = 120.0


def project(spec: ClusterSpec) -> str:
    return f"{spec.project}-prometheus"


def directory(state_dir: Path) -> Path:
    return state_dir / "prometheus"


def _seconds(s: float) -> str:
    return f"{int(round(s))}s"


def prometheus_config(spec: ClusterSpec) -> dict[str, Any]:
    mon = spec.monitoring
    jobs: dict[str, list[dict[str, Any]]] = {"kafka": [], "zookeeper": []}
    for n in spec.nodes:
        for service, port in (("zookeeper", spec.zk_metrics_host_port(n)), ("kafka", spec.kafka_metrics_host_port(n))):
            if port is not None and not (service == "zookeeper" and spec.on_kraft):  # on KRaft none runs
                jobs[service].append({"targets": [f"127.0.0.1:{port}"], "labels": {"node": n.hostname}})
    scrape = [{"job_name": job, "static_configs": cfgs} for job, cfgs in jobs.items() if cfgs]
    scrape.append({"job_name": "kctl-monitor", "static_configs": [{"targets": [f"127.0.0.1:{mon.monitor_port}"]}]})
    return {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s", "external_labels": {"cluster": spec.name}},
        "rule_files": [f"{CONF}/rules.yml"],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{mon.alertmanager_port}"]}]}]},
        "scrape_configs": scrape,
    }


# The rules Prometheus can judge only on ZooKeeper: on KRaft no ZooKeeper runs, and the quorum's leader is in the
# controllers' quorum-state files, which no exporter serves (a KRaft broker exports no ActiveControllerCount); the
# kctl monitor's `controller` rule reads those files (kctl.kafka.controllers), as `kctl status` does.
ON_ZOOKEEPER_ONLY = frozenset({"zookeeper", "controller"})
# The rules only the kctl monitor judges: the Spark master's state is in its JSON, which no exporter serves.
KCTL_MONITOR_ONLY = frozenset({"spark"})


def alert_rules(spec: ClusterSpec) -> dict[str, Any]:
    """kctl's default rules as Prometheus alerting rules (a rule turned off in kctl.yaml is left out)."""
    mon = spec.monitoring
    quorum = len(spec.participants) // 2 + 1
    exprs = {
        "offline-partitions": ("KafkaOfflinePartitions",
                               "sum(kafka_controller_kafkacontroller_offlinepartitionscount) > 0",
                               "{{ $value }} partitions without a leader"),
        "controller": ("KafkaActiveControllerCount",
                       "sum(kafka_controller_kafkacontroller_activecontrollercount) != 1",
                       "{{ $value }} active controllers"),
        "under-replicated": ("KafkaUnderReplicatedPartitions",
                             "sum(kafka_server_replicamanager_underreplicatedpartitions) > 0",
                             "{{ $value }} under-replicated partitions"),
        "zookeeper": ("ZooKeeperQuorumAtRisk",
                      f'count(up{{job="zookeeper"}} == 1) < {quorum} or up{{job="zookeeper"}} == 0',
                      "a ZooKeeper does not answer, or fewer than a quorum do"),
        "group-status": ("KafkaConsumerGroupStatus", "kctl_consumer_group_status >= 2",
                         "group {{ $labels.group }}: status {{ $value }} (2 WARN, 3 ERR, 4 STOP, 5 STALL, 6 REWIND)"),
        "disk": ("KafkaBrokerDiskFull", f"kctl_broker_disk_used_percent > {mon.disk_percent:g}",
                 "{{ $labels.broker }}: data disk {{ $value }} % full"),
        "exporter": ("KafkaExporterDown", 'up{job=~"kafka|zookeeper"} == 0',
                     "{{ $labels.job }} exporter on {{ $labels.node }} does not answer"),
        "certificate": ("KafkaCertificateExpiring", f"kctl_certificate_days_left < {mon.certificate_warn_days:g}",
                        "certificate {{ $labels.certificate }}: {{ $value }} days left"),
    }
    rules = []
    for name, rule in mon.alerts.items():
        if not rule.enabled or name in KCTL_MONITOR_ONLY or (spec.on_kraft and name in ON_ZOOKEEPER_ONLY):
            continue
        alert, expr, summary = exprs[name]
        rules.append({"alert": alert, "expr": expr, "for": _seconds(rule.threshold_seconds),
                      "labels": {"kctl_rule": name, "cluster": spec.name},
                      "annotations": {"summary": summary}})
    return {"groups": [{"name": f"kctl-{spec.name}", "rules": rules}]}


def alertmanager_config(spec: ClusterSpec) -> tuple[dict[str, Any], dict[str, str]]:
    """The configuration, and the password files to mount (container path -> host path)."""
    mon = spec.monitoring
    webhooks, emails = [], []
    mounts: dict[str, str] = {}
    for i, n in enumerate(mon.notifiers):
        if n.type == "webhook":
            if n.url and not n.headers_file:  # a URL from a file or the environment (it carries a token), or secret
                # headers, are the kctl monitor's alone
                webhooks.append({"url": n.url, "send_resolved": True})
            continue
        if n.tls == "smtps" and n.smtp_port != 465:
            continue  # Alertmanager speaks TLS from the start on port 465 only: the kctl monitor sends this one
        cfg: dict[str, Any] = {"to": ", ".join(n.to), "from": n.sender, "smarthost": f"{n.host}:{n.smtp_port}",
                               "require_tls": n.tls == "starttls", "send_resolved": True}
        if n.ca_file:
            target = f"{SECRETS}/smtp-ca-{i}.pem"
            mounts[target] = str(Path(n.ca_file).expanduser().resolve())
            cfg["tls_config"] = {"ca_file": target}
        if n.username and n.password_file:
            target = f"{SECRETS}/smtp-password-{i}"
            mounts[target] = str(Path(n.password_file).expanduser().resolve())
            cfg.update({"auth_username": n.username, "auth_password_file": target})
        elif n.username:
            continue  # a password from the environment: the kctl monitor sends this one
        emails.append(cfg)
    receiver: dict[str, Any] = {"name": "kctl"}
    if webhooks:
        receiver["webhook_configs"] = webhooks
    if emails:
        receiver["email_configs"] = emails
    repeats = [r.repeat_seconds for r in mon.alerts.values() if r.enabled and r.repeat_seconds > 0]
    route = {"receiver": "kctl", "group_by": ["alertname", "cluster"], "group_wait": "10s", "group_interval": "1m",
             "repeat_interval": _seconds(min(repeats) if repeats else 3600)}
    return {"route": route, "receivers": [receiver]}, mounts


def compose_document(spec: ClusterSpec, state_dir: Path, mounts: dict[str, str]) -> dict[str, Any]:
    mon = spec.monitoring
    base = directory(state_dir)
    labels = {**spec.labels, "io.kctl.prometheus": spec.name}
    retention = _seconds(mon.retention_hours * 3600)
    common = {"image": IMAGE, "network_mode": "host", "restart": "unless-stopped", "labels": labels,
              "user": "0:0"}
    return {
        "name": project(spec),
        "services": {
            "prometheus": {**common, "entrypoint": ["/usr/bin/prometheus"], "command": [
                f"--config.file={CONF}/prometheus.yml", "--storage.tsdb.path=/data",
                f"--storage.tsdb.retention.time={retention}", f"--web.listen-address=127.0.0.1:{mon.prometheus_port}"],
                "volumes": [f"{base}/conf:{CONF}:ro", "prometheus-data:/data"]},
            "alertmanager": {**common, "entrypoint": ["/usr/bin/prometheus-alertmanager"], "command": [
                f"--config.file={CONF}/alertmanager.yml", "--storage.path=/data",
                f"--web.listen-address=127.0.0.1:{mon.alertmanager_port}",
                "--cluster.listen-address="],  # one Alertmanager: no gossip port
                "volumes": [f"{base}/conf:{CONF}:ro", "alertmanager-data:/data",
                            *(f"{host}:{target}:ro" for target, host in sorted(mounts.items()))]},
        },
        # Named volumes (not bind mounts): what the containers write as root goes with `kctl down --volumes`.
        "volumes": {"prometheus-data": {"labels": labels}, "alertmanager-data": {"labels": labels}},
    }


def render(spec: ClusterSpec, state_dir: Path) -> dict[str, str]:
    """The files under ``<state>/prometheus`` (relative path -> text)."""
    am, mounts = alertmanager_config(spec)

    def dump(doc: dict[str, Any]) -> str:
        return "# Rendered by kctl from kctl.yaml (monitoring.prometheus); `kctl up` rewrites it.\n" + yaml.safe_dump(
            doc, sort_keys=False, default_flow_style=False, width=1 << 16)

    return {"conf/prometheus.yml": dump(prometheus_config(spec)), "conf/rules.yml": dump(alert_rules(spec)),
            "conf/alertmanager.yml": dump(am), "compose.yaml": dump(compose_document(spec, state_dir, mounts))}


def ensure_image(progress: Progress | None = None) -> None:
    """Build the Prometheus image once (from Debian's packages on the nodes' base image)."""
    dc = docker_api.client()
    try:
        dc.images.get(IMAGE)
        return
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: build it
        pass
    base = image.resolve_base_image(dc, progress)
    if progress:
        progress(f"building {IMAGE} from {base} (Debian's prometheus and prometheus-alertmanager)")
    with tempfile.TemporaryDirectory(prefix="kctl-prometheus-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(DOCKERFILE)
        image.build_from_context(dc, Path(tmp), tag=IMAGE, base_image=base,
                                 labels={"io.kctl.image": "prometheus"}, progress=progress)


def _compose(spec: ClusterSpec, state_dir: Path, *args: str, timeout: float = 300) -> None:
    d = directory(state_dir)
    compose_project(project(spec), d / "compose.yaml", *args, timeout=timeout, what="Prometheus",
                    hint=f"its files: {d}")


def api(spec: ClusterSpec, path: str, port: int | None = None, timeout_s: float = 5.0) -> Any:
    port = port or spec.monitoring.prometheus_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as resp:  # noqa: S310
        return json.loads(resp.read())


def targets(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Prometheus' active targets: {job, node, url, health, error}."""
    doc = api(spec, "/api/v1/targets?state=active")
    return [{"job": t["labels"].get("job"), "node": t["labels"].get("node"), "url": t.get("scrapeUrl"),
             "health": t.get("health"), "error": t.get("lastError")} for t in doc["data"]["activeTargets"]]


def up(spec: ClusterSpec, state_dir: Path, progress: Progress | None = None,
       wait_s: float = WAIT_S) -> list[dict[str, Any]]:
    """Write the files, start both, and wait until Prometheus reports every exporter target up (the monitor's
    target is up while `kctl monitor` runs); returns the targets."""
    d = directory(state_dir)
    changed = write_text_files(render(spec, state_dir), d)
    ensure_image(progress)
    _compose(spec, state_dir, "up", "-d", "--remove-orphans")
    if any(p.parent.name == "conf" for p in changed):
        _compose(spec, state_dir, "restart")  # a changed configuration: both read it at start
    if wait_s <= 0:
        return []
    last: Any = None
    for _ in ticks(1.0, until=time.monotonic() + wait_s):
        try:
            ts = targets(spec)
            exporters = [t for t in ts if t["job"] in ("kafka", "zookeeper")]
            if exporters and all(t["health"] == "up" for t in exporters):
                if progress:
                    progress(f"prometheus: {len(exporters)} exporter targets up on http://127.0.0.1:"
                             f"{spec.monitoring.prometheus_port}")
                return ts
            last = [f"{t['job']} {t['node']}: {t['health']}" for t in exporters if t["health"] != "up"]
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = str(exc)
    raise KctlError(f"Prometheus did not report every exporter up within {wait_s:.0f} s (last: {last})",
                    hint=f"`docker compose -p {project(spec)} logs`; its files: {d}")


def down(spec: ClusterSpec, state_dir: Path, *, volumes: bool = False) -> bool:
    """Stop and remove both (their data too with ``volumes``); False when they were never started here."""
    if not (directory(state_dir) / "compose.yaml").exists():
        return False
    _compose(spec, state_dir, "down", "--remove-orphans", *(["--volumes"] if volumes else []))
    return True
