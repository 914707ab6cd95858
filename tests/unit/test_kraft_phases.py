"""The ZooKeeper-to-KRaft migration's phases, its record, and each node's properties per phase (kctl/kraft):
pure, checked against Kafka's "ZooKeeper to KRaft Migration" documentation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kctl.errors import KctlError
from kctl.kraft import config as kc
from kctl.kraft import phases as ph
from kctl.kraft.phases import Phase
from kctl.model import properties
from kctl.model.spec import ClusterSpec


def test_next_walks_forward_and_stops_before_finalizing() -> None:
    assert [ph.next_phase(p) for p in ph.ORDER] == [Phase.controllers, Phase.dual_write, Phase.kraft_brokers,
                                                    None, None]


def test_rollback_follows_kafkas_table_and_is_refused_once_final() -> None:
    assert ph.rollback_steps(Phase.controllers) == ["stop-controllers", "remove-controllers"]
    assert ph.rollback_steps(Phase.dual_write) == ["stop-controllers", "delete-controller-and-migration-znodes",
                                                   "roll-brokers-without-migration", "remove-controllers"]
    # from KRaft brokers: back to ZooKeeper mode first, keeping the migration flag on that first roll
    assert ph.rollback_steps(Phase.kraft_brokers) == [
        "roll-brokers-to-zookeeper-with-migration", "stop-controllers", "delete-controller-and-migration-znodes",
        "roll-brokers-without-migration", "remove-controllers"]
    with pytest.raises(ph.RollbackRefused) as final:
        ph.rollback_steps(Phase.kraft)
    assert "finalized" in final.value.message and final.value.exit_code == 2
    with pytest.raises(ph.RollbackRefused):
        ph.rollback_steps(Phase.zookeeper)


def test_the_record_resumes_a_transition_and_refuses_another(tmp_path: Path) -> None:
    assert ph.read(tmp_path) == ph.Record(Phase.zookeeper)  # no record: on ZooKeeper, nothing under way
    rec = ph.begin(ph.read(tmp_path), "next", Phase.controllers)
    rec = ph.step_done(rec, "format-controllers")
    ph.write(tmp_path, rec)
    again = ph.read(tmp_path)  # a kctl killed here finds the transition and the step it did
    assert (again.phase, again.target, again.action, again.done) == (Phase.zookeeper, Phase.controllers, "next",
                                                                     ["format-controllers"])
    assert ph.begin(again, "next", Phase.controllers).done == ["format-controllers"]
    with pytest.raises(KctlError) as busy:
        ph.begin(again, "rollback", Phase.zookeeper)
    assert "a next to controllers is under way" in busy.value.message
    done = ph.arrive(again, now=1.0)
    assert (done.phase, done.target, done.done, done.history) == (Phase.controllers, None, [],
                                                                  [{"phase": "controllers", "at": 1.0}])
    ph.write(tmp_path, done)
    assert ph.read(tmp_path) == done
    # no temporary file left; the record before the last write kept beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kraft.json", "kraft.json.prev"]
    assert ph.Record.from_json((tmp_path / "kraft.json.prev").read_text()).done == ["format-controllers"]


def test_a_damaged_record_is_an_error_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / ph.STATE_FILE).write_text("{not json")
    with pytest.raises(KctlError) as exc:
        ph.read(tmp_path)
    assert "is cut short or not JSON" in exc.value.message and exc.value.hint
    (tmp_path / ph.STATE_FILE).write_text(json.dumps({"phase": "sideways"}))
    with pytest.raises(KctlError):
        ph.read(tmp_path)


def test_controllers_run_beside_the_brokers_with_ids_of_their_own() -> None:
    spec = ClusterSpec()
    assert kc.voters(spec) == "3001@logger1:9095,3002@logger2:9095,3003@logger3:9095"
    migrating = kc.controller_properties(spec, spec.nodes[1], Phase.controllers)
    assert migrating["process.roles"] == "controller" and migrating["node.id"] == "3002"
    assert migrating["zookeeper.metadata.migration.enable"] == "true"
    assert migrating["zookeeper.connect"] == spec.zookeeper_connect
    assert migrating["inter.broker.listener.name"] == "INTERNAL"  # its RPCs to the ZooKeeper-mode brokers
    assert migrating["listeners"] == "CONTROLLER://0.0.0.0:9095"
    assert "CONTROLLER:PLAINTEXT" in migrating["listener.security.protocol.map"]
    final = kc.controller_properties(spec, spec.nodes[1], Phase.kraft)
    assert "zookeeper.metadata.migration.enable" not in final and "zookeeper.connect" not in final
    with pytest.raises(ValueError):
        kc.controller_properties(spec, spec.nodes[0], Phase.zookeeper)
    # no broker id is a controller id, and no internal port is the controller's
    assert not {n.id for n in spec.nodes} & {kc.controller_id(n) for n in spec.nodes}
    assert kc.CONTROLLER_PORT not in (spec.kafka.internal_port, spec.secure_internal_port,
                                      *(spec.kafka_host_port(n) for n in spec.nodes))


def test_observers_run_no_controller() -> None:
    nodes = [{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)] + [
        {"id": 4, "hostname": "logger4", "role": "observer"}]
    spec = ClusterSpec.model_validate({"nodes": nodes})
    assert [n.id for n in kc.controller_nodes(spec)] == [1, 2, 3]


def test_each_phase_changes_the_broker_as_kafka_documents() -> None:
    spec = ClusterSpec()
    node = spec.nodes[0]
    zk = properties.server_properties(spec, node)
    zk_text = {k: str(v) for k, v in zk.items()}
    for phase in (Phase.zookeeper, Phase.controllers):
        assert kc.broker_change(spec, node, phase, zk_text).apply(zk_text) == dict(sorted(zk_text.items()))
    dual = kc.broker_change(spec, node, Phase.dual_write, zk_text).apply(zk_text)
    assert dual["broker.id"] == "1" and dual["zookeeper.connect"] == zk_text["zookeeper.connect"]
    assert dual["zookeeper.metadata.migration.enable"] == "true" and dual["inter.broker.protocol.version"] == "3.9"
    assert dual["controller.quorum.voters"] == kc.voters(spec) and dual["controller.listener.names"] == "CONTROLLER"
    assert dual["listener.security.protocol.map"].split(",") == sorted(
        [*zk_text["listener.security.protocol.map"].split(","), "CONTROLLER:PLAINTEXT"])
    for phase in (Phase.kraft_brokers, Phase.kraft):
        kraft = kc.broker_change(spec, node, phase, zk_text).apply(zk_text)
        assert kraft["process.roles"] == "broker" and kraft["node.id"] == "1" and "broker.id" not in kraft
        assert not [k for k in kraft if k.startswith("zookeeper.")]
        assert "inter.broker.protocol.version" not in kraft
        assert kraft["controller.quorum.voters"] == kc.voters(spec)
        assert kraft["advertised.listeners"] == zk_text["advertised.listeners"]  # clients see nothing change
        assert kraft["broker.heartbeat.interval.ms"] == "1000"  # a quarter of the controllers' 4000 ms session
        ctl = kc.controller_properties(spec, node, phase)
        assert ctl["broker.session.timeout.ms"] == "4000" and "broker.heartbeat.interval.ms" not in ctl
    assert "broker.heartbeat.interval.ms" not in dual  # a broker on ZooKeeper has no session with the controllers
    slow = ClusterSpec.model_validate({"kafka": {"broker_session_timeout_ms": 9000}})
    assert kc.controller_properties(slow, slow.nodes[0], Phase.kraft)["broker.session.timeout.ms"] == "9000"
    assert kc.heartbeat_interval_ms(slow) == 2250


def test_a_secured_broker_moves_to_the_standard_authorizer_with_kraft() -> None:
    spec = ClusterSpec.model_validate({"security": {"enabled": True}})
    node = spec.nodes[0]
    zk_text = {k: str(v) for k, v in properties.server_properties(spec, node).items()}
    assert zk_text["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert kc.broker_change(spec, node, Phase.dual_write, zk_text).apply(zk_text)["authorizer.class.name"] == \
        "kafka.security.authorizer.AclAuthorizer"  # still a ZooKeeper-mode broker
    kraft = kc.broker_change(spec, node, Phase.kraft_brokers, zk_text).apply(zk_text)
    assert kraft["authorizer.class.name"] == kc.STANDARD_AUTHORIZER
    assert kc.controller_properties(spec, node, Phase.controllers)["authorizer.class.name"] == \
        kc.STANDARD_AUTHORIZER


def test_the_render_follows_the_recorded_phase(tmp_path: Path) -> None:
    from kctl.model.render import render
    from kctl.model.spec import load_cluster

    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text("name: logger\n")
    on_zk = load_cluster(spec_file)[0]
    assert on_zk.kraft_phase == "zookeeper" and on_zk.kraft_cluster_id is None
    base = render(on_zk).files
    assert not any(p.endswith(("controller.properties", "cluster-id")) for p in base)

    # `migrate kraft next` records its transition first: from then on the files are rendered for its target
    state = Path(on_zk.state_dir or "")
    rec = ph.begin(ph.Record(Phase.zookeeper, cluster_id="Xy7kQ2fnT3a1bC9dE0fG1h"), "next", Phase.controllers)
    ph.write(state, rec)
    spec = load_cluster(spec_file)[0]
    assert (spec.kraft_phase, spec.kraft_cluster_id) == ("controllers", "Xy7kQ2fnT3a1bC9dE0fG1h")
    files = render(spec).files
    ctl = properties.parse_properties(files["logger2/conf/controller.properties"])
    assert ctl["node.id"] == "3002" and ctl["process.roles"] == "controller"
    assert ctl["zookeeper.metadata.migration.enable"] == "true" and ctl["zookeeper.connect"] == spec.zookeeper_connect
    assert files["logger2/conf/cluster-id"] == "Xy7kQ2fnT3a1bC9dE0fG1h\n"
    assert "log4j.appender.ROLLINGFILE.File=/var/log/kctl/controller/server.log" in \
        files["logger2/conf/log4j-controller.properties"]
    # the brokers are not touched until dual-write
    assert files["logger2/conf/server.properties"] == base["logger2/conf/server.properties"]
    dual = properties.parse_properties(render(spec.with_kraft("dual-write", "X")).files[
        "logger2/conf/server.properties"])
    assert dual["zookeeper.metadata.migration.enable"] == "true" and dual["inter.broker.protocol.version"] == "3.9"
    assert dual["broker.id"] == "2" and dual["controller.quorum.voters"].startswith("3001@logger1:9095,")
    # a changed phase is a changed container: the convergence plan and apply see it
    assert {c.config_hash for c in render(on_zk).containers}.isdisjoint(c.config_hash for c in render(spec).containers)


def test_controllers_apply_the_brokers_topic_defaults() -> None:
    # from dual-write on, the active KRaft controller decides a new topic's partitions and replication factor
    spec = ClusterSpec.model_validate({"kafka": {"num_partitions": 6, "overrides": {"default.replication.factor": 2}}})
    props = kc.controller_properties(spec, spec.nodes[0], Phase.controllers)
    assert (props["num.partitions"], props["default.replication.factor"], props["min.insync.replicas"]) == (
        "6", "2", "2")


def test_secured_controllers_listen_with_sasl_plain_and_log_in_as_the_brokers_do() -> None:
    spec = ClusterSpec.model_validate({"security": {"enabled": True}})
    node = spec.nodes[0]
    broker = {k: str(v) for k, v in properties.server_properties(spec, node).items()}
    ctl = kc.controller_properties(spec, node, Phase.controllers)
    protocols = dict(pair.split(":") for pair in ctl["listener.security.protocol.map"].split(","))
    assert protocols["CONTROLLER"] == "SASL_SSL" and protocols["INTERNAL"] == "SASL_SSL"
    assert ctl["listener.name.controller.sasl.enabled.mechanisms"] == "PLAIN"
    assert ctl["sasl.mechanism.controller.protocol"] == "PLAIN"
    # its RPCs to the ZooKeeper-mode brokers: their inter-broker SCRAM; their TLS stores; their super user
    assert ctl["sasl.mechanism.inter.broker.protocol"] == broker["sasl.mechanism.inter.broker.protocol"]
    for key in ("ssl.keystore.location", "ssl.keystore.password", "ssl.truststore.location", "config.providers",
                "config.providers.file.param.allowed.paths", "super.users", "ssl.endpoint.identification.algorithm"):
        assert ctl[key] == broker[key], key
    assert ctl["zookeeper.set.acl"] == broker["zookeeper.set.acl"] == "true"
    assert "zookeeper.set.acl" not in kc.controller_properties(spec, node, Phase.kraft)
    assert not [v for v in ctl.values() if "password=" in v.lower()]  # no secret in the file: providers only
    for phase in (Phase.dual_write, Phase.kraft_brokers):
        b = kc.broker_change(spec, node, phase, broker).apply(broker)
        assert "CONTROLLER:SASL_SSL" in b["listener.security.protocol.map"].split(",")
        assert b["sasl.mechanism.controller.protocol"] == "PLAIN"
    plain = ClusterSpec.model_validate({"security": {"enabled": True, "tls": False}})
    assert "CONTROLLER:SASL_PLAINTEXT" in kc.controller_properties(
        plain, plain.nodes[0], Phase.controllers)["listener.security.protocol.map"]


def test_secured_controllers_get_their_login_in_secret_files_only(tmp_path: Path) -> None:
    from kctl import contract
    from kctl.model.render import render
    from kctl.security import store

    spec = ClusterSpec.model_validate({"security": {"enabled": True}}).with_kraft("controllers", "X")
    state = tmp_path / "state"
    store.ensure(spec, state)
    pw = store.passwords(spec, state)[spec.security.admin_user]
    secrets = store.secrets_dir(state) / "logger1"
    jaas = (secrets / contract.KAFKA_JAAS_FILE).read_text()
    assert "controller.KafkaServer {" in jaas and properties.PLAIN_MODULE in jaas
    assert f'user_{spec.security.admin_user}="{pw}"' in jaas
    client = (secrets / contract.CONTROLLER_CLIENT_FILE).read_text()
    assert "sasl.mechanism=PLAIN" in client and pw in client
    assert (secrets / contract.CONTROLLER_CLIENT_FILE).stat().st_mode & 0o777 == 0o600
    files = render(spec, state).files
    jvm = files[f"logger1/conf/{contract.CONTROLLER_JVM_FILE}"]
    assert f"-Djava.security.auth.login.config={contract.secret_path(contract.KAFKA_JAAS_FILE)}" in jvm
    assert not [f for f, text in files.items() if pw in text]  # rendered files carry no password
    # on ZooKeeper the JAAS file has no controller section and no client file is made
    zk = ClusterSpec.model_validate({"security": {"enabled": True}})
    store.ensure(zk, tmp_path / "zk")
    assert "controller.KafkaServer" not in (store.secrets_dir(tmp_path / "zk") / "logger1" /
                                            contract.KAFKA_JAAS_FILE).read_text()
    plain = ClusterSpec().with_kraft("controllers", "X")  # nothing extra for a plain cluster's controllers
    assert f"logger1/conf/{contract.CONTROLLER_JVM_FILE}" not in render(plain).files
