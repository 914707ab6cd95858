"""A cluster on KRaft without ZooKeeper: made so (`metadata: kraft`, `kctl init --kraft`) or finalized by
`kctl migrate kraft finalize`; what its spec allows, its record, and the files its nodes run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kctl.kraft import phases as ph
from kctl.kraft.phases import Phase
from kctl.model.spec import ClusterSpec, parse_spec, resolve_cluster


def test_a_cluster_id_is_kafkas_shape() -> None:
    ids = {ph.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) and not i.startswith("-") for i in ids)


def test_made_on_kraft_writes_its_record_once(tmp_path: Path) -> None:
    first = ph.made_on_kraft(tmp_path, "3.9.1")
    assert first.phase is Phase.kraft and first.cluster_id and first.history[0]["made"] == "on KRaft"
    assert ph.made_on_kraft(tmp_path, "3.9.1").cluster_id == first.cluster_id  # never a second id
    # a state dir with a migration under way holds a cluster made on ZooKeeper: refused, the record kept
    other = tmp_path / "other"
    ph.write(other, ph.Record(Phase.controllers, cluster_id="abc"))
    with pytest.raises(Exception, match="migration to KRaft under way"):
        ph.made_on_kraft(other, "3.9.1")
    assert ph.read(other).phase is Phase.controllers


def test_metadata_kraft_resolves_to_a_cluster_on_kraft(tmp_path: Path) -> None:
    spec, _ = parse_spec({"metadata": "kraft"})
    resolved = resolve_cluster(spec, tmp_path / "kctl.yaml")
    assert resolved.on_kraft and resolved.kraft_cluster_id is None  # its id comes with the first `kctl up`
    record = ph.made_on_kraft(Path(resolved.state_dir or ""), resolved.versions.kafka)
    again = resolve_cluster(spec, tmp_path / "kctl.yaml")
    assert again.on_kraft and again.kraft_cluster_id == record.cluster_id
    (tmp_path / "zk").mkdir()
    plain = resolve_cluster(ClusterSpec(), tmp_path / "zk" / "kctl.yaml")
    assert not plain.on_kraft


@pytest.mark.parametrize(("settings", "words"), [
    ({"engine": "hosts", "security": {"enabled": True}},
     "metadata: kraft with security.enabled on engine hosts is not built yet"),
    ({"security": {"enabled": True, "migration": "secure-listeners"}},
     "security.migration on metadata: kraft is not built yet"),
    ({"topology": "split"}, "topology colocated"),
])
def test_what_metadata_kraft_cannot_be_yet_is_refused(settings: dict[str, object], words: str) -> None:
    from kctl.errors import SpecError

    with pytest.raises(SpecError) as err:
        parse_spec({"metadata": "kraft", **settings})
    assert any(words in p for p in err.value.problems), err.value.problems


def test_metadata_kraft_runs_on_engine_hosts_but_a_secured_one_is_refused_with_where_to_go() -> None:
    from kctl.errors import SpecError

    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    spec, warnings = parse_spec({"metadata": "kraft", "engine": "hosts", "nodes": nodes})
    assert spec.metadata.value == "kraft" and warnings == []
    with pytest.raises(SpecError) as err:
        parse_spec({"metadata": "kraft", "engine": "hosts", "nodes": nodes, "security": {"enabled": True}})
    assert any("on engine hosts is not built yet" in p and "compose or swarm" in p for p in err.value.problems), \
        err.value.problems


def test_a_node_on_kraft_retires_zookeeper_and_formats_with_the_clusters_id() -> None:
    from kctl.model.properties import parse_properties, services_of
    from kctl.model.render import node_files

    spec = ClusterSpec().with_kraft("kraft", "Xy7kQ2fnT3a1bC9dE0fG1h")
    host, node, services = services_of(spec)[0]
    files = node_files(spec, host, node, services)
    assert "no ZooKeeper runs on this node" in files["conf/zookeeper-retired"]
    assert files["conf/cluster-id"] == "Xy7kQ2fnT3a1bC9dE0fG1h\n"
    server = parse_properties(files["conf/server.properties"])
    assert server["process.roles"] == "broker" and server["node.id"] == "1"
    assert not {k for k in server if k.startswith("zookeeper.") or k == "broker.id"}
    controller = parse_properties(files["conf/controller.properties"])
    assert controller["process.roles"] == "controller" and "zookeeper.connect" not in controller
    assert "zookeeper.metadata.migration.enable" not in controller
    # on ZooKeeper: none of it
    plain = node_files(ClusterSpec(), host, node, services)
    assert not {"conf/zookeeper-retired", "conf/cluster-id", "conf/controller.properties"} & set(plain)


def test_node_changes_are_refused_mid_migration_and_on_kraft_for_a_voter(tmp_path: Path) -> None:
    """Mid-migration every node change is refused; on KRaft a node joins as a broker alone (an observer of the
    controller quorum), or as a controller of a dynamic quorum only: the voters of a static quorum stay. Each
    refusal comes before anything is touched (no cluster here: a change that got further would fail on Docker,
    not with these words)."""
    from kctl.cluster import nodes
    from kctl.errors import UsageError

    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text("name: logger\n")
    state = tmp_path / ".kctl" / "logger"
    mid = ClusterSpec().with_kraft("dual-write", "Xy7kQ2fnT3a1bC9dE0fG1h")
    with pytest.raises(UsageError, match="phase dual-write"):
        nodes.add(mid, spec_file, state)
    with pytest.raises(UsageError, match="phase dual-write"):
        nodes.remove(mid, spec_file, state, "logger3")
    on_kraft = ClusterSpec().with_kraft("kraft", "Xy7kQ2fnT3a1bC9dE0fG1h")
    with pytest.raises(UsageError, match="--role participant: a node added there is a broker"):
        nodes.add(on_kraft, spec_file, state, role="participant")
    with pytest.raises(UsageError, match="would run nothing there"):
        nodes.add(on_kraft, spec_file, state, broker=False)
    # a voter is added or removed only with a dynamic quorum (docs/kraft.md): a static one says how to convert
    with pytest.raises(UsageError, match="is static") as e:
        nodes.add(on_kraft, spec_file, state, role="controller")
    assert "kctl quorum make-dynamic" in (e.value.hint or "")
    with pytest.raises(UsageError, match="a controller is removed only with a dynamic quorum"):
        nodes.remove(on_kraft, spec_file, state, "logger3")
    # the secured profile's quorum grows like a plain one's: a static quorum says how to convert it first
    with pytest.raises(UsageError, match="is static"):
        nodes.add(on_kraft.model_copy(update={"security": on_kraft.security.model_copy(update={"enabled": True})}),
                  spec_file, state, role="controller")
    assert spec_file.read_text() == "name: logger\n"  # kctl.yaml untouched
    assert nodes._kraft_role(on_kraft, None, True) == "observer"
    assert nodes._kraft_role(ClusterSpec(), None, True) == "participant"


def test_reassign_list_output_is_parsed_as_kafka_prints_it() -> None:
    from kctl.kafka.reassign import Moving, parse_list

    assert parse_list("No partition reassignments found.\n") == []
    text = ("Current partition reassignments:\nbar-0: replicas: 2,3. adding: 3.\nfoo-0: replicas: 1,2.\n"
            "my-topic-11: replicas: 1,2,3,4. adding: 4. removing: 1.\n")
    assert parse_list(text) == [Moving("bar-0", [2, 3], [3], []), Moving("foo-0", [1, 2], [], []),
                                Moving("my-topic-11", [1, 2, 3, 4], [4], [1])]


def test_kafka_4_is_rendered_for_a_cluster_on_kraft_and_refused_on_zookeeper(tmp_path: Path) -> None:
    from kctl.errors import UsageError
    from kctl.model.render import render

    on_kraft = resolve_cluster(parse_spec({"name": "k4", "metadata": "kraft", "versions": {"kafka": "4.1.1"}})[0],
                               tmp_path / "kctl.yaml").with_kraft(Phase.kraft.value, ph.new_cluster_id())
    files = render(on_kraft).files
    assert "process.roles=broker" in files["logger1/conf/server.properties"]
    assert "zookeeper" not in files["logger1/conf/server.properties"]
    assert files["logger1/conf/zookeeper-retired"] is not None
    # On ZooKeeper (the default, or a migration not finalized): refused with the way there, nothing rendered.
    for phase in (None, Phase.kraft_brokers):
        spec = resolve_cluster(parse_spec({"name": "k4", "versions": {"kafka": "4.1.1"}})[0], tmp_path / "kctl.yaml")
        if phase is not None:
            spec = spec.with_kraft(phase.value, ph.new_cluster_id())
        with pytest.raises(UsageError) as err:
            render(spec)
        assert "has no ZooKeeper mode" in err.value.message and "kctl migrate kraft" in (err.value.hint or "")
    # Kafka 4 exists for Scala 2.13 only; 5.x and 3.8 are not releases kctl runs.
    with pytest.raises(Exception, match="Scala 2.13 only"):
        parse_spec({"name": "k4", "versions": {"kafka": "4.1.1", "scala": "2.12"}})
    for bad in ("3.8.1", "5.0.0"):
        with pytest.raises(Exception, match="not supported"):
            parse_spec({"name": "k4", "versions": {"kafka": bad}})


def test_features_describe_and_version_mapping_as_kafka_prints_them() -> None:
    from kctl.cluster import features

    # kafka-features.sh describe of a Kafka 3.9.1 cluster on KRaft (tab-separated, as printed)
    text = ("Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\t"
            "Epoch: 153\nFeature: metadata.version\tSupportedMinVersion: 3.0-IV1\tSupportedMaxVersion: 3.9-IV0\t"
            "FinalizedVersionLevel: 3.9-IV0\tEpoch: 153\n")
    mv = features.parse_describe(text)["metadata.version"]
    assert (mv.supported_max, mv.finalized) == ("3.9-IV0", "3.9-IV0")
    assert features.parse_describe("Error: timed out\n") == {}
    assert features.parse_level("metadata.version=27 (4.1-IV1)\nkraft.version=1\ngroup.version=1\n") == 27
    assert features.parse_level("kraft.version=1\n") is None
    assert features.release("3.9-IV0") < features.release("4.0-IV3") < features.release("4.1-IV1")
    assert features.release("4.1-IV1") > features.release("4.1-IV0") and features.release(None) == ()


def test_the_cluster_wide_broker_defaults_as_kafka_configs_prints_them() -> None:
    # on KRaft the defaults live in Kafka's metadata: kctl diff reads them with kafka-configs.sh --entity-default
    from kctl.kafka.configs import parse_entity_default

    text = ("Default configs for brokers in the cluster are:\n"
            "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2}\n"
            "  listener.name.x.ssl.key.password=null sensitive=true synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
            "listener.name.x.ssl.key.password=null}\n")
    assert parse_entity_default(text) == {"log.cleaner.threads": "2"}
    assert parse_entity_default("Default configs for brokers in the cluster are:\n") == {}


def test_the_only_broker_of_a_cluster_on_kraft_is_gone_once_its_process_exited() -> None:
    """No other broker answers for it: its roll's "gone from the live brokers" gate holds (the process-exited gate
    before it is what waits); with more brokers the gate asks them (not reached here: no cluster)."""
    from kctl.roll.run import unregistered_gate

    rf = {k: 1 for k in ("default_replication_factor", "offsets_topic_replication_factor",
                         "transaction_state_log_replication_factor", "min_insync_replicas")}
    one = parse_spec({"nodes": [{"id": 1, "hostname": "logger1"}], "kafka": rf})[0].with_kraft(
        "kraft", "Xy7kQ2fnT3a1bC9dE0fG1h")
    ok, saw = unregistered_gate(one, 1)()
    assert ok and "only broker" in saw


def test_the_quorum_tool_is_asked_only_once_the_quorum_state_files_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.cluster import quorum as kq
    from kctl.kafka import controllers
    from kctl.kafka.controllers import ControllerView

    spec = ClusterSpec.model_validate({"name": "k", "metadata": "kraft", "cluster_id": "MkU3OEVBNTcwNTJENDM2Qg"})
    files = {"logger1": (3001, 4), "logger2": (3001, 4), "logger3": (None, 5)}  # logger3 mid-election
    asked: list[str] = []
    monkeypatch.setattr(controllers, "controller_view", lambda _s, host, cid, _t: ControllerView(
        host, cid, files[host][0], files[host][1], None if files[host][0] else "no leader"))

    def tool(_spec: ClusterSpec, host: str | None = None) -> kq.Quorum:
        asked.append(host or "")
        return kq.Quorum(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", leader=3001, epoch=5, max_follower_lag=0,
                         voters=[3001, 3002, 3003])

    monkeypatch.setattr(kq, "describe_quorum", tool)
    probe = kq.quorum_ready(spec, "MkU3OEVBNTcwNTJENDM2Qg")
    ok, saw = probe()
    assert not ok and asked == [] and "logger3: no leader" in saw
    files["logger3"] = (3001, 4)
    ok, saw = probe()
    assert ok and len(asked) == 1, saw


def test_a_secured_cluster_made_on_kraft_formats_its_controllers_with_the_admins_credential(tmp_path: Path) -> None:
    """`kctl init --kraft --secure`: allowed; every controller's node gets the format's --add-scram arguments (a
    0600 secret); its files are the secured KRaft ones (SASL_SSL everywhere, PLAIN on the controllers' listener,
    the StandardAuthorizer, the admin its super user) and name no password."""
    import stat

    from kctl import contract
    from kctl.model.properties import parse_properties, services_of
    from kctl.model.render import node_files
    from kctl.security import store

    spec, warnings = parse_spec({"metadata": "kraft", "security": {"enabled": True}})
    assert warnings == []
    spec = spec.with_kraft("kraft", "Xy7kQ2fnT3a1bC9dE0fG1h")
    store.ensure(spec, tmp_path)
    pw = store.passwords(spec, tmp_path)
    for host, node, services in services_of(spec):
        args = store.secrets_dir(tmp_path) / host / contract.KRAFT_FORMAT_ARGS_FILE
        assert args.read_text() == f"--add-scram\nSCRAM-SHA-512=[name=admin,password={pw['admin']}]\n"
        assert stat.S_IMODE(args.stat().st_mode) == 0o600
        files = node_files(spec, host, node, services)
        assert not [f for f, text in files.items() if any(p in text for p in pw.values())]
        controller = parse_properties(files["conf/controller.properties"])
        server = parse_properties(files["conf/server.properties"])
        for props in (controller, server):
            assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            assert props["super.users"] == "User:admin" and props["allow.everyone.if.no.acl.found"] == "false"
            assert "CONTROLLER:SASL_SSL" in props["listener.security.protocol.map"]
            assert props["sasl.mechanism.controller.protocol"] == "PLAIN"
        assert server["listener.security.protocol.map"] == "CONTROLLER:SASL_SSL,EXTERNAL:SASL_SSL,INTERNAL:SASL_SSL"
        assert not {k for k in server if k.startswith("zookeeper.")}
    # a migrated cluster's controllers take the credentials from ZooKeeper: no format arguments
    zk, _ = parse_spec({"security": {"enabled": True}})
    store.ensure(zk.with_kraft("kraft", "Xy7kQ2fnT3a1bC9dE0fG1h"), tmp_path / "zk")
    assert not list((tmp_path / "zk").rglob(contract.KRAFT_FORMAT_ARGS_FILE))


def test_a_password_the_format_could_not_carry_is_refused() -> None:
    from kctl.errors import KctlError
    from kctl.security import store

    spec, _ = parse_spec({"metadata": "kraft", "security": {"enabled": True, "sasl_mechanism": "SCRAM-SHA-256",
                                                              "admin_user": "ops"}})
    assert store.kraft_format_args(spec, "Ab_-9") == "--add-scram\nSCRAM-SHA-256=[name=ops,password=Ab_-9]\n"
    for bad in ("a,b", "x]", "", "a b", "p\nq"):
        with pytest.raises(KctlError) as err:
            store.kraft_format_args(spec, bad)
        assert bad not in err.value.message or not bad
