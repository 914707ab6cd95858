"""security.migration: what each step renders, which step a render belongs to, the refusal of a skipped step,
and apply's handling of a step's keys (no Docker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kctl.errors import KctlError, SpecError
from kctl.model import properties as p
from kctl.model.render import render, write
from kctl.model.spec import ClusterSpec, load_spec
from kctl.roll import migration
from kctl.roll.apply import ApplyPlan, DynamicChange, Restart, by_restart

STEPS: list[str | None] = ["plain", "secure-listeners", "secure-inter-broker", "close-plaintext",
                           "inter-broker-home", None]


def spec_at(step: str | None, **extra: Any) -> ClusterSpec:
    sec: dict[str, Any] = {"enabled": step != "plain"}
    if step not in ("plain", None):
        sec["migration"] = step
    return ClusterSpec.model_validate({"name": "mig", "security": sec, **extra})


def server(step: str | None) -> dict[str, str]:
    spec = spec_at(step)
    return {k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in p.server_properties(spec, spec.nodes[0]).items()}


def zoo(step: str | None) -> dict[str, Any]:
    spec = spec_at(step)
    return p.zoo_cfg(spec, spec.nodes[0])


@pytest.mark.parametrize("index", range(6))
def test_each_step_renders_a_phase_that_reads_back_as_itself(index: int) -> None:
    assert spec_at(STEPS[index]).security_phase == index
    assert migration.phase_of(server(STEPS[index])) == index


def test_listeners_per_step() -> None:
    first = "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092"
    both = first + ",INTERNAL_SECURE://0.0.0.0:9093,EXTERNAL_SECURE://0.0.0.0:19192"
    assert [server(s)["listeners"] for s in STEPS] == [first, both, both, both, both, first]
    protocols = [server(s)["listener.security.protocol.map"] for s in STEPS]
    assert protocols[1] == protocols[2] == ("EXTERNAL:PLAINTEXT,EXTERNAL_SECURE:SASL_SSL,INTERNAL:PLAINTEXT,"
                                            "INTERNAL_SECURE:SASL_SSL")
    assert protocols[3] == protocols[4] == ("EXTERNAL:SASL_SSL,EXTERNAL_SECURE:SASL_SSL,INTERNAL:SASL_SSL,"
                                            "INTERNAL_SECURE:SASL_SSL")
    assert protocols[5] == "EXTERNAL:SASL_SSL,INTERNAL:SASL_SSL"
    # The inter-broker listener changes only between listeners whose protocol every broker agrees on.
    assert [server(s)["inter.broker.listener.name"] for s in STEPS] == [
        "INTERNAL", "INTERNAL", "INTERNAL_SECURE", "INTERNAL_SECURE", "INTERNAL", "INTERNAL"]


def test_authorizer_and_znode_acls_per_step() -> None:
    assert [server(s).get("allow.everyone.if.no.acl.found") for s in STEPS] == [
        None, None, "true", "false", "false", "false"]
    assert [server(s).get("zookeeper.set.acl") for s in STEPS] == [None, None, None, "true", "true", "true"]


def test_zookeeper_enables_quorum_sasl_in_three_restarts_and_enforces_last() -> None:
    got = [(str(z.get("quorum.auth.enableSasl")), str(z.get("quorum.auth.learnerRequireSasl")),
            str(z.get("quorum.auth.serverRequireSasl")), "enforce.auth.enabled" in z) for z in map(zoo, STEPS)]
    assert got == [("None", "None", "None", False), ("true", "false", "false", False),
                   ("true", "true", "false", False), ("true", "true", "true", True),
                   ("true", "true", "true", True), ("true", "true", "true", True)]


def test_brokers_log_in_to_zookeeper_from_step_two() -> None:
    pw = {"admin": "a", p.ZK_BROKER_PRINCIPAL: "k"}
    sections = [[s[0] for s in p.kafka_jaas(spec_at(step), pw)] for step in STEPS[1:]]
    assert sections == [["KafkaServer"], ["KafkaServer", "Client"], ["KafkaServer", "Client"],
                        ["KafkaServer", "Client"], ["KafkaServer", "Client"]]


def test_final_step_renders_exactly_the_secured_profile(tmp_path: Path) -> None:
    migrated = render(spec_at(None), tmp_path).files
    fresh = render(ClusterSpec.model_validate({"name": "mig", "security": {"enabled": True}}), tmp_path).files
    assert migrated == fresh


def test_kctl_and_user_clients_per_step() -> None:
    ext, sec = "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094", "127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194"
    specs = [spec_at(s) for s in STEPS]
    assert [s.bootstrap_servers for s in specs] == [ext, ext, sec, sec, ext, ext]
    assert [s.kctl_logs_in for s in specs] == [False, False, True, True, True, True]
    assert [s.secured_bootstrap_servers for s in specs][1:] == [sec, sec, ext, ext, ext]
    assert [s.client_internal_port for s in specs] == [9092, 9092, 9093, 9093, 9092, 9092]


def test_transitional_ports_are_published_on_loopback_and_checked() -> None:
    spec = spec_at("secure-listeners")
    compose = render(spec, Path("/tmp/x")).files["compose.yaml"]
    assert "127.0.0.1:19192:19192" in compose and "0.0.0.0:19192" not in compose
    with pytest.raises(SpecError, match="also used by"):
        load_spec_text({"security": {"enabled": True, "migration": "secure-listeners"},
                        "zookeeper": {"host_port_base": 19192}})


def load_spec_text(data: dict[str, Any]) -> ClusterSpec:
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "kctl.yaml"
        f.write_text(yaml.safe_dump({"name": "mig", **data}))
        return load_spec(f)[0]


@pytest.mark.parametrize("data,needle", [
    ({"security": {"enabled": False, "migration": "secure-listeners"}}, "needs security.enabled: true"),
    ({"security": {"enabled": True, "migration": "secure-listeners"}, "kafka": {"inter_broker_listener": "REPL",
      "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT", "REPL": "PLAINTEXT"}}},
     "kafka.inter_broker_listener"),
    ({"security": {"enabled": True, "migration": "half-way"}}, "security.migration"),
])
def test_invalid_migration_settings(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_spec_text(data)
    assert needle in exc.value.message


def rendered_dir(tmp_path: Path, step: str | None) -> Path:
    write(render(spec_at(step), tmp_path), tmp_path)
    return tmp_path


@pytest.mark.parametrize("now,target,ok", [
    ("plain", "secure-listeners", True), ("secure-listeners", "plain", True),
    ("plain", None, False), ("plain", "secure-inter-broker", False), ("secure-listeners", "close-plaintext", False),
    ("inter-broker-home", None, True), ("close-plaintext", None, False), (None, None, True),
])
def test_check_step_refuses_a_skipped_step(tmp_path: Path, now: str | None, target: str | None, ok: bool) -> None:
    state = rendered_dir(tmp_path, now)
    spec = spec_at(target)
    if ok:
        assert migration.check_step(spec, state) == (STEPS.index(now), STEPS.index(target))
    else:
        with pytest.raises(KctlError) as exc:
            migration.check_step(spec, state)
        assert "apply refused, nothing was changed" in exc.value.message
        assert "secure-running-cluster.md" in (exc.value.hint or "")


def test_check_step_names_the_next_step(tmp_path: Path) -> None:
    with pytest.raises(KctlError) as exc:
        migration.check_step(spec_at(None), rendered_dir(tmp_path, "plain"))
    assert "set security.migration: secure-listeners" in (exc.value.hint or "")
    assert "cannot take the whole secured profile in one roll" in exc.value.message


def test_no_render_yet_is_not_a_refusal(tmp_path: Path) -> None:
    assert migration.check_step(spec_at(None), tmp_path) == (None, 5)


def test_a_steps_dynamic_keys_go_by_restart() -> None:
    spec = spec_at("secure-listeners")
    plan = ApplyPlan("mig", [], [], dynamic=[DynamicChange(1, "listeners", "A", "B"),
                                             DynamicChange(2, "sasl.enabled.mechanisms", "SCRAM-SHA-512", None)],
                     restarts=[Restart("logger1", "kafka", ["zookeeper.set.acl: false -> true"])],
                     notes=["2 dynamic broker config change(s): set per broker at run time, no restart"])
    out = by_restart(spec, plan)
    assert out.dynamic == [] and out.notes == []
    assert [(r.node, r.service) for r in out.restarts] == [("logger1", "kafka"), ("logger2", "kafka")]
    assert out.restarts[0].reasons[-1] == "listeners: B -> A (security step: read at start)"
    assert out.restarts[1].reasons == ["sasl.enabled.mechanisms: (unset) -> SCRAM-SHA-512 (security step: read at"
                                       " start)"]


def test_node_changes_refused_while_migrating(tmp_path: Path) -> None:
    from kctl.cluster import nodes
    from kctl.errors import UsageError

    with pytest.raises(UsageError, match="being moved to the secured profile"):
        nodes._not_migrating(spec_at("close-plaintext"))
