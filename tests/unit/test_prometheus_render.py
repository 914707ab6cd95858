"""monitoring.prometheus: what is rendered from the spec for Prometheus and Alertmanager (pure)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kctl.model.spec import parse_spec
from kctl.monitor import prometheus as prom


def test_scrape_jobs_rules_and_receivers_follow_the_spec(tmp_path: Path) -> None:
    secret = tmp_path / "smtp-password"
    secret.write_text("x")
    spec, _ = parse_spec({"monitoring": {
        "prometheus": True, "alerts": {"disk": False, "under-replicated": {"threshold_seconds": 45}},
        "notifiers": [{"type": "webhook", "url": "http://127.0.0.1:9000/h"},
                      {"type": "email", "host": "smtp.example.org", "port": 587, "starttls": True, "from": "k@x",
                       "to": ["a@x", "b@x"], "username": "k", "password_file": str(secret)},
                      {"type": "email", "host": "h", "from": "k@x", "to": ["a@x"], "username": "k",
                       "password_env": "SMTP_PASSWORD"},
                      {"type": "webhook", "url_env": "HOOK_URL"},  # a URL with its token: the monitor's alone
                      {"type": "email", "host": "m", "tls": "smtps", "from": "k@x", "to": ["a@x"]},
                      {"type": "email", "host": "m", "tls": "smtps", "port": 1465, "from": "k@x", "to": ["b@x"]}]}})
    files = prom.render(spec, tmp_path)
    cfg = yaml.safe_load(files["conf/prometheus.yml"])
    jobs = {j["job_name"]: j["static_configs"] for j in cfg["scrape_configs"]}
    assert jobs["kafka"][0] == {"targets": ["127.0.0.1:17071"], "labels": {"node": "logger1"}}
    assert [c["targets"][0] for c in jobs["zookeeper"]] == ["127.0.0.1:17000", "127.0.0.1:17001", "127.0.0.1:17002"]
    assert jobs["kctl-monitor"] == [{"targets": ["127.0.0.1:17600"]}]
    assert cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:17693"]
    rules = {r["alert"]: r for r in yaml.safe_load(files["conf/rules.yml"])["groups"][0]["rules"]}
    assert "KafkaBrokerDiskFull" not in rules
    assert rules["KafkaUnderReplicatedPartitions"]["for"] == "45s"
    assert rules["ZooKeeperQuorumAtRisk"]["expr"].startswith('count(up{job="zookeeper"} == 1) < 2')
    am = yaml.safe_load(files["conf/alertmanager.yml"])
    receiver = am["receivers"][0]
    assert receiver["webhook_configs"] == [{"url": "http://127.0.0.1:9000/h", "send_resolved": True}]
    # the password_env one is the kctl monitor's alone, and SMTPS off port 465 too (Alertmanager cannot)
    assert [m["smarthost"] for m in receiver["email_configs"]] == ["smtp.example.org:587", "m:465"]
    assert receiver["email_configs"][1]["require_tls"] is False  # 465: TLS from the start, no STARTTLS
    mail = receiver["email_configs"][0]
    assert mail["smarthost"] == "smtp.example.org:587" and mail["to"] == "a@x, b@x" and mail["require_tls"] is True
    assert mail["auth_password_file"] == f"{prom.SECRETS}/smtp-password-1" and "x" not in mail.values()
    compose = yaml.safe_load(files["compose.yaml"])
    p, a = compose["services"]["prometheus"], compose["services"]["alertmanager"]
    assert p["network_mode"] == "host" and "--web.listen-address=127.0.0.1:17690" in p["command"]
    assert "--web.listen-address=127.0.0.1:17693" in a["command"]
    assert f"{secret.resolve()}:{prom.SECRETS}/smtp-password-1:ro" in a["volumes"]
    assert compose["name"] == "kctl-logger-prometheus" and "prometheus-data" in compose["volumes"]


def test_prometheus_needs_compose_and_the_exporters() -> None:
    from kctl.errors import SpecError

    for data, msg in (({"monitoring": {"prometheus": True, "enabled": False}}, "needs monitoring.enabled"),
                      ({"engine": "swarm", "monitoring": {"prometheus": True}}, "engine compose only"),
                      ({"monitoring": {"prometheus": True, "prometheus_port": 17600}}, "also used by")):
        try:
            parse_spec(data)
        except SpecError as exc:
            assert any(msg in p for p in exc.problems), exc.problems
        else:
            raise AssertionError(f"{data} was accepted")
