"""engine swarm without Docker: the spec fields, the stack file, the placement plan and the engine choice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl import contract
from kctl.errors import KctlError, SpecError
from kctl.model.properties import server_properties
from kctl.model.render import COMPOSE_FILE, render
from kctl.model.spec import Engine, parse_spec
from kctl.runtime.engine import engines
from kctl.runtime.engine.compose import ComposeEngine
from kctl.runtime.engine.swarm import SwarmEngine, SwarmNode, plan_placement

ONE: dict[str, Any] = {"kafka": {"default_replication_factor": 1, "offsets_topic_replication_factor": 1,
                                 "transaction_state_log_replication_factor": 1, "min_insync_replicas": 1}}


def _swarm(**extra: Any) -> Any:
    spec, _ = parse_spec({"engine": "swarm", **extra})
    return spec


def _stack(spec: Any) -> dict[str, Any]:
    data = yaml.safe_load(render(spec).files[COMPOSE_FILE])
    assert isinstance(data, dict)
    return data


def test_engine_field_validated_and_defaults_to_compose() -> None:
    spec, _ = parse_spec({})
    assert spec.engine is Engine.compose
    assert isinstance(engines.for_spec(spec), ComposeEngine)
    assert isinstance(engines.for_spec(_swarm()), SwarmEngine)
    with pytest.raises(SpecError, match="engine"):
        parse_spec({"engine": "kubernetes"})


def test_image_string_is_its_ref_and_registry_prefixes_only_on_swarm() -> None:
    spec, _ = parse_spec({"image": "example/node:1"})
    assert spec.image.ref == "example/node:1" and spec.image_ref == "example/node:1"
    compose_spec, _ = parse_spec({"image": {"registry": "reg.example:5000"}})
    assert compose_spec.image_ref == "kctl/node:3.9.1"
    swarm = _swarm(image={"registry": "reg.example:5000/"})
    assert swarm.image_ref == "reg.example:5000/kctl/node:3.9.1"
    assert swarm.local_image_ref == "kctl/node:3.9.1"


def test_external_host_rule_is_compose_only_and_swarm_fields_warn_there() -> None:
    with pytest.raises(SpecError, match="external_host"):
        parse_spec({"kafka": {"external_host": "10.1.1.1"}})
    _swarm(kafka={"external_host": "10.1.1.1"})
    _, warnings = parse_spec({"nodes": [{"id": 1, "hostname": "a", "advertised_host": "10.0.0.1"}], **ONE})
    assert any("engine swarm only" in w for w in warnings)


def test_advertised_host_reaches_listeners_and_bootstrap() -> None:
    spec = _swarm(nodes=[{"id": i, "hostname": f"logger{i}", "advertised_host": f"h{i}.example"} for i in (1, 2, 3)])
    assert spec.bootstrap_servers == "h1.example:19092,h2.example:19093,h3.example:19094"
    assert spec.zookeeper_connect_host.startswith("h1.example:12181,")
    props = server_properties(spec, spec.nodes[1])
    assert props["advertised.listeners"] == "INTERNAL://logger2:9092,EXTERNAL://h2.example:19093"
    # Compose ignores it: kctl publishes on 127.0.0.1 there.
    compose, _ = parse_spec({"nodes": [{"id": 1, "hostname": "a", "advertised_host": "h1"}], **ONE})
    assert compose.bootstrap_servers == "127.0.0.1:19092"


def test_stack_file_has_deploy_sections_and_no_compose_only_keys() -> None:
    stack = _stack(_swarm())
    assert "name" not in stack  # docker stack deploy refuses it: the stack is named on the command line
    assert stack["networks"]["cluster"]["driver"] == "overlay"
    assert stack["networks"]["cluster"]["attachable"] is True
    svc = stack["services"]["logger2"]
    dep = svc["deploy"]
    assert dep["replicas"] == 1 and dep["endpoint_mode"] == "dnsrr"
    assert dep["placement"]["constraints"] == [f"node.labels.{contract.swarm_placement_label('logger', 'logger2')}"
                                               " == true"]
    assert dep["update_config"]["parallelism"] == 1
    assert svc["healthcheck"] == {"disable": True}
    assert {"target": 2181, "published": 12182, "protocol": "tcp", "mode": "host"} in svc["ports"]
    assert {"target": 19093, "published": 19093, "protocol": "tcp", "mode": "host"} in svc["ports"]
    assert svc["volumes"] == ["logger2-data:/var/opt/kctl", "logger2-logs:/var/log/kctl"]
    assert stack["volumes"]["logger2-data"]["name"] == "kctl-logger_logger2-data"
    targets = {c["target"]: c["source"] for c in svc["configs"]}
    assert set(targets) == {f"{contract.CONF_DIR}/{f}" for f in ("zoo.cfg", "myid", "zoo.cfg.dynamic",
                                                                 "log4j-zookeeper.properties", "server.properties",
                                                                 "log4j-kafka.properties",
                                                                 contract.JMX_EXPORTER_CONFIG)}
    for key in targets.values():
        assert stack["configs"][key]["file"].startswith("./logger2/conf/")


def test_config_names_change_with_content_only() -> None:
    a = _stack(_swarm())["configs"]
    b = _stack(_swarm(kafka={"num_partitions": 6}))["configs"]
    changed = {k for k in a if a[k]["name"] != b[k]["name"]}
    assert changed == {"logger1-server-properties", "logger2-server-properties", "logger3-server-properties"}
    assert all(len(v["name"]) <= 64 for v in a.values())


def test_compose_file_unchanged_by_the_swarm_layer() -> None:
    stack = _stack(parse_spec({})[0])
    assert stack["name"] == "kctl-logger"
    svc = stack["services"]["logger1"]
    assert "deploy" not in svc and "configs" not in svc and "volumes" not in stack
    assert svc["ports"][0] == "127.0.0.1:12181:2181"


def _nodes(n: int) -> list[SwarmNode]:
    return [SwarmNode(id=f"id{i}", hostname=f"host{i}", addr=f"10.0.0.{i}", labels={}, manager=i == 1)
            for i in range(1, n + 1)]


def test_placement_round_robin_one_per_node() -> None:
    p = plan_placement(_swarm(), _nodes(3))
    assert {h: n.hostname for h, n in p.hosts.items()} == {"logger1": "host1", "logger2": "host2", "logger3": "host3"}
    assert p.warnings == []


def test_fewer_swarm_nodes_warn_or_refuse_with_strict_spread() -> None:
    p = plan_placement(_swarm(), _nodes(1))
    assert set(n.hostname for n in p.hosts.values()) == {"host1"}
    assert p.warnings and "quorum then depends on one host" in p.warnings[0]
    with pytest.raises(KctlError, match="quorum then depends on one host") as exc:
        plan_placement(_swarm(), _nodes(2), strict_spread=True)
    assert exc.value.hint


def test_named_swarm_node_and_an_earlier_label_win() -> None:
    spec = _swarm(nodes=[{"id": 1, "hostname": "logger1", "swarm_node": "host3"},
                         {"id": 2, "hostname": "logger2"}, {"id": 3, "hostname": "logger3"}])
    nodes = _nodes(3)
    nodes[0] = SwarmNode("id1", "host1", "", {contract.swarm_placement_label("logger", "logger3"): "true"}, True)
    p = plan_placement(spec, nodes)
    assert p.hosts["logger1"].hostname == "host3"
    assert p.hosts["logger3"].hostname == "host1"
    with pytest.raises(KctlError, match="not a ready node"):
        plan_placement(_swarm(nodes=[{"id": 1, "hostname": "a", "swarm_node": "nowhere"}], **ONE), nodes)


def _kctl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", "kctl.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_offline_refusals(tmp_path: Path) -> None:
    (tmp_path / "kctl.yaml").write_text("name: offline\n")
    p = _kctl(tmp_path, "swarm", "label")
    assert p.returncode != 0 and "engine compose" in p.stderr and "hint" in p.stderr and "Traceback" not in p.stderr
    p = _kctl(tmp_path, "restart", "logger1", "--recreate", "--yes")
    assert p.returncode != 0 and "--service node" in p.stderr and "Traceback" not in p.stderr
    p = _kctl(tmp_path, "up", "--engine", "nomad")
    assert p.returncode != 0 and "unknown engine" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / ".kctl").exists()


def test_engine_recorded_in_the_state_dir_is_read_back(tmp_path: Path) -> None:
    from kctl.cli.common import load
    from kctl.model.spec import record_engine

    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text("name: rec\n")
    assert load(spec_file).engine is Engine.compose
    record_engine(tmp_path / ".kctl" / "rec", Engine.swarm)
    assert load(spec_file).engine is Engine.swarm
    spec_file.write_text("name: rec\nengine: compose\n")  # kctl.yaml that says it wins
    assert load(spec_file).engine is Engine.compose


def test_apply_on_swarm_makes_a_new_task_for_each_node_whose_files_change() -> None:
    """Swarm configs are replaced only by a new task: a changed file or a process restart becomes a recreate of
    that node (one at a time through the roll's gates), never a restart into the old files."""
    from kctl.roll import apply as ap

    spec = _swarm()
    the_plan = ap.ApplyPlan(cluster=spec.name, hashes=[], files=["logger3/conf/server.properties"],
                            restarts=[ap.Restart("logger3", "kafka", ["num.io.threads: 8 -> 4"]),
                                      ap.Restart("logger1", "zookeeper", ["tickTime: 2000 -> 3000"])],
                            recreate={"logger2": ["environment.X: 1 -> 2"]})
    out = ap.by_new_tasks(spec, the_plan)
    assert out.restarts == [] and list(out.recreate) == ["logger1", "logger2", "logger3"]
    assert out.recreate["logger1"] == ["zookeeper: tickTime: 2000 -> 3000"]
    assert out.recreate["logger2"] == ["environment.X: 1 -> 2"]
    assert "logger3/conf/server.properties changed" in out.recreate["logger3"][0]
    assert ap.phases(spec, out) == [("node", ["logger1", "logger2", "logger3"], ("logger1", "logger2", "logger3"))]
    assert the_plan.restarts and the_plan.recreate == {"logger2": ["environment.X: 1 -> 2"]}  # pure
    assert ComposeEngine.files_reach_a_restart  # compose delivers files by bind mount


def test_secured_profile_reaches_each_task_as_swarm_secrets_of_its_own(tmp_path: Path) -> None:
    from kctl.runtime.engine.swarm import one_service_stack, secret_name, with_secrets
    from kctl.security import store

    spec = _swarm(name="sec", security={"enabled": True})
    rendered = render(spec, tmp_path)
    store.ensure(spec, tmp_path)
    data = yaml.safe_load(rendered.files[COMPOSE_FILE])
    out = with_secrets(spec, tmp_path, data)
    assert "secrets" not in data  # the rendered stack file itself stays as it was (golden files)
    passwords = store.passwords(spec, tmp_path)
    text = yaml.safe_dump(out)
    assert not [p for p in passwords.values() if p in text]  # file names only, never contents
    for host in ("logger1", "logger2", "logger3"):
        mounts = {s["target"]: s for s in out["services"][host]["secrets"]}
        own = sorted(f.name for f in (store.secrets_dir(tmp_path) / host).iterdir())
        assert sorted(mounts) == [f"{contract.SECRETS_MOUNT}/{n}" for n in own]
        assert all(m["mode"] == 0o400 and m["source"].startswith(f"{host}-") for m in mounts.values())
        assert all(out["secrets"][m["source"]]["file"].startswith(f"secrets/{host}/") for m in mounts.values())
    # Immutable secrets: a changed file is a new name; the same file the same name.
    assert secret_name(spec, "logger1", "kafka.jaas", b"a") == secret_name(spec, "logger1", "kafka.jaas", b"a")
    assert secret_name(spec, "logger1", "kafka.jaas", b"a") != secret_name(spec, "logger1", "kafka.jaas", b"b")
    # One service's stack carries its own secrets only.
    one = with_secrets(spec, tmp_path, one_service_stack(data, "logger2"))
    assert set(one["services"]) == {"logger2"} and all(k.startswith("logger2-") for k in one["secrets"])
    plain = _swarm(name="sec")
    assert with_secrets(plain, tmp_path, data) is data


def test_secured_swarm_stack_without_secrets_is_a_clear_error(tmp_path: Path) -> None:
    from kctl.runtime.engine.swarm import with_secrets

    spec = _swarm(name="sec", security={"enabled": True})
    data = yaml.safe_load(render(spec, tmp_path).files[COMPOSE_FILE])
    with pytest.raises(KctlError, match="has no secrets"):
        with_secrets(spec, tmp_path, data)


class _Node:
    """A Swarm node as the SDK shows it: its update is taken only at the version it was read at."""

    def __init__(self, node_id: str, labels: dict[str, str], store: dict[str, Any]) -> None:
        self.id = node_id
        self.store = store
        self.attrs: dict[str, Any] = {}
        self.reload()

    def reload(self) -> None:
        self.attrs = {"Version": {"Index": self.store["version"]}, "Spec": {"Labels": dict(self.store["labels"])},
                      "Description": {"Hostname": f"host-{self.id}"}}

    def update(self, spec: dict[str, Any]) -> None:
        import docker.errors
        if self.attrs["Version"]["Index"] != self.store["version"]:
            raise docker.errors.APIError("500 Server Error", explanation="rpc error: update out of sequence")
        self.store["labels"] = dict(spec["Labels"])
        self.store["version"] += 1
        self.store["writes"] += 1


def test_node_labels_written_again_on_a_fresh_read_when_the_node_moved_under_them() -> None:
    from kctl.runtime.engine.swarm import relabel

    store: dict[str, Any] = {"version": 5, "labels": {"other.team": "x", "old": "true"}, "writes": 0}
    node = _Node("n1", {}, store)
    store["version"] = 6  # the node's status report got in between kctl's read and its write
    store["labels"] = {"other.team": "x", "old": "true", "theirs": "1"}

    class Dc:
        class nodes:  # noqa: N801 - the SDK's shape
            @staticmethod
            def list() -> list[_Node]:
                return [node]

    out = relabel(Dc, lambda _id, labels: {k: v for k, v in labels.items() if k != "old"} | {"new": "true"})
    # the label another writer set in between is kept: the change is made on the fresh read
    assert store["labels"] == {"other.team": "x", "theirs": "1", "new": "true"}
    assert store["writes"] == 1 and out == [("host-n1", ["new"])]
    # nothing to change: no write at all
    assert relabel(Dc, lambda _id, labels: labels) == [] and store["writes"] == 1


def test_a_node_update_refused_for_another_reason_is_not_retried() -> None:
    import docker.errors

    from kctl.runtime.engine.swarm import relabel

    class Refusing:
        id = "n1"
        attrs: dict[str, Any] = {"Spec": {"Labels": {}}}
        calls = 0

        def update(self, spec: dict[str, Any]) -> None:
            Refusing.calls += 1
            raise docker.errors.APIError("403 Forbidden", explanation="this node is not a swarm manager")

    class Dc:
        class nodes:  # noqa: N801
            @staticmethod
            def list() -> list[Any]:
                return [Refusing()]

    with pytest.raises(docker.errors.APIError, match="Forbidden"):
        relabel(Dc, lambda _id, labels: {"a": "true"})
    assert Refusing.calls == 1
