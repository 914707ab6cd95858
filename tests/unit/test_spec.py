"""Every validation rule of the cluster spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kctl.errors import SpecError
from kctl.model.spec import ClusterSpec, check_rules, parse_spec


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as ei:
        parse_spec(data)
    assert ei.value.exit_code == 2
    return ei.value.problems


def nodes(*ids: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": i, "hostname": f"logger{i}", **extra} for i in ids]


def test_defaults_are_the_seed_cluster() -> None:
    spec, warnings = parse_spec({})
    assert warnings == []
    assert spec.name == "logger"
    assert [(n.id, n.hostname) for n in spec.nodes] == [(1, "logger1"), (2, "logger2"), (3, "logger3")]
    assert spec.versions.kafka == "3.9.1"
    assert spec.zookeeper_connect == "logger1:2181,logger2:2181,logger3:2181"
    assert spec.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert spec.zookeeper_connect_host == "127.0.0.1:12181,127.0.0.1:12182,127.0.0.1:12183"
    assert spec.internal_bootstrap_servers == "logger1:9092,logger2:9092,logger3:9092"


def test_every_field_has_a_description() -> None:
    from pydantic import BaseModel

    def walk(model: type[BaseModel]) -> None:
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name} has no description"
            ann = f.annotation
            for sub in getattr(ann, "__args__", ()) or (ann,):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    walk(sub)

    walk(ClusterSpec)


def test_unknown_keys_rejected_with_path() -> None:
    ps = problems({"kafka": {"num_partition": 3}, "bogus": 1})
    assert any(p.startswith("kafka.num_partition: unknown setting") for p in ps)
    assert any(p.startswith("bogus: unknown setting") for p in ps)


def test_id_range() -> None:
    ps = problems({"nodes": [{"id": 0, "hostname": "a"}, {"id": 256, "hostname": "b"}]})
    assert any(p.startswith("nodes.0.id:") for p in ps)
    assert any(p.startswith("nodes.1.id:") for p in ps)


def test_ids_and_hostnames_unique() -> None:
    ps = problems({"nodes": [{"id": 1, "hostname": "a"}, {"id": 1, "hostname": "a"}, {"id": 3, "hostname": "c"}],
                   "kafka": {"default_replication_factor": 1, "min_insync_replicas": 1}})
    assert "nodes.1.id: id 1 is already used by nodes.0" in ps
    assert "nodes.1.hostname: 'a' is already used by nodes.0" in ps


@pytest.mark.parametrize("bad", ["Logger1", "-x", "x-", "a_b", "a.b", "", "x" * 64])
def test_invalid_hostnames(bad: str) -> None:
    ps = problems({"nodes": [{"id": 1, "hostname": bad}]})
    assert any(p.startswith("nodes.0.hostname:") for p in ps)


def test_even_participants_warn() -> None:
    spec, warnings = parse_spec({"nodes": nodes(1, 2, 3, 4)})
    assert len(spec.participants) == 4
    assert "nodes: 4 ZooKeeper participants: an even ensemble tolerates no more failures than 3; use 3 or 5, not 4" \
        in warnings


def test_even_controllers_warn_in_kraft_words() -> None:
    spec, warnings = parse_spec({"metadata": "kraft", "nodes": nodes(1, 2, 3, 4)})
    assert len(spec.participants) == 4
    assert warnings == ["nodes: 4 KRaft controllers: an even quorum tolerates no more failures than 3; use 3 or 5,"
                        " not 4"]


def test_observer_does_not_count_towards_quorum() -> None:
    _, warnings = parse_spec({"nodes": [*nodes(1, 2, 3), {"id": 4, "hostname": "logger4", "role": "observer"}]})
    assert warnings == []


def test_no_participant_is_an_error() -> None:
    ps = problems({"nodes": nodes(1, role="observer"),
                   "kafka": {"default_replication_factor": 1, "offsets_topic_replication_factor": 1,
                             "transaction_state_log_replication_factor": 1, "min_insync_replicas": 1}})
    assert any("at least one node must be one of the ZooKeeper participants" in p for p in ps)


def test_replication_factors_not_above_brokers() -> None:
    ps = problems({"nodes": nodes(1, 2), "kafka": {"default_replication_factor": 3, "min_insync_replicas": 1}})
    assert any(p.startswith("kafka.default_replication_factor: 3 is above the 2 broker(s)") for p in ps)
    assert any(p.startswith("kafka.offsets_topic_replication_factor:") for p in ps)
    assert any(p.startswith("kafka.transaction_state_log_replication_factor:") for p in ps)


@pytest.mark.parametrize("rf,isr,ok", [(3, 2, True), (3, 3, False), (3, 4, False), (1, 1, True), (2, 1, True)])
def test_min_isr_below_replication_factor(rf: int, isr: int, ok: bool) -> None:
    data = {"kafka": {"default_replication_factor": rf, "min_insync_replicas": isr}}
    if ok:
        parse_spec(data)
    else:
        assert any(p.startswith("kafka.min_insync_replicas:") for p in problems(data))


def test_published_port_clash() -> None:
    ps = problems({"nodes": [{"id": 1, "hostname": "logger1", "kafka_port": 12182}, *nodes(2, 3)]})
    assert any("host port 12182 is also used by nodes.0.kafka_port" in p for p in ps)


def test_port_base_overflow() -> None:
    ps = problems({"kafka": {"external_port_base": 65535}})
    assert any("above 65535" in p for p in ps)


def test_all_problems_reported_at_once() -> None:
    ps = problems({"nodes": [{"id": 1, "hostname": "logger1"}, {"id": 1, "hostname": "logger1"}],
                   "kafka": {"min_insync_replicas": 5}})
    assert len(ps) >= 3


def test_snap_retain_at_least_three() -> None:
    ps = problems({"zookeeper": {"autopurge_snap_retain_count": 2}})
    assert any(p.startswith("zookeeper.autopurge_snap_retain_count:") for p in ps)


def test_kafka_4_only_the_releases_the_image_build_makes() -> None:
    # 4.x parses (a cluster on KRaft runs it: render refuses it on ZooKeeper, tests/unit/test_kraft_native.py);
    # a 4.x release the image build does not make is refused as any such version is.
    assert parse_spec({"versions": {"kafka": "4.1.1"}})[0].versions.kafka == "4.1.1"
    ps = problems({"versions": {"kafka": "4.0.0"}})
    assert any("cannot produce Kafka 4.0.0" in p and "4.1.1" in p for p in ps)


def test_heap_and_chroot_syntax() -> None:
    ps = problems({"kafka": {"heap": "lots", "zookeeper_chroot": "kafka"}})
    assert any(p.startswith("kafka.heap:") for p in ps)
    assert any(p.startswith("kafka.zookeeper_chroot:") for p in ps)


def test_chroot_in_connect_string() -> None:
    spec, _ = parse_spec({"kafka": {"zookeeper_chroot": "/kafka"}})
    assert spec.zookeeper_connect.endswith(":2181/kafka")


def test_external_host_must_be_loopback() -> None:
    assert any(p.startswith("kafka.external_host:") for p in problems({"kafka": {"external_host": "0.0.0.0"}}))


def test_top_level_must_be_mapping() -> None:
    assert problems([1, 2])  # type: ignore[arg-type]


def test_check_rules_returns_no_errors_for_default() -> None:
    assert check_rules(ClusterSpec()) == ([], [])


def test_spec_reference_is_up_to_date() -> None:
    from kctl.model.docgen import DOC, render

    assert DOC.read_text() == render(), "docs/spec.md is stale: run `python -m kctl.model.docgen`"


def test_kafka_version_the_image_build_cannot_produce() -> None:
    ps = problems({"versions": {"kafka": "3.9.0"}})
    assert any(p.startswith("versions.kafka:") and "cannot produce Kafka 3.9.0" in p and "3.9.1" in p for p in ps)
    # A node image of one's own may carry another 3.9 release.
    spec, _ = parse_spec({"versions": {"kafka": "3.9.0"}, "image": "example/kafka-node:3.9.0"})
    assert spec.versions.kafka == "3.9.0" and spec.versions.zookeeper is None


def test_scala_build_must_exist() -> None:
    ps = problems({"versions": {"scala": "2.11"}})
    assert any(p.startswith("versions.scala:") and "2.12 and 2.13" in p for p in ps)


def test_zookeeper_version_follows_kafka() -> None:
    spec, warnings = parse_spec({})
    assert spec.versions.zookeeper == "3.8.4"
    assert "zookeeper" not in spec.model_dump()["versions"]


def test_zookeeper_version_setting_is_deprecated_when_it_matches() -> None:
    spec, warnings = parse_spec({"versions": {"zookeeper": "3.8.4"}})
    assert spec.versions.zookeeper == "3.8.4"
    assert any(w.startswith("versions.zookeeper is deprecated and ignored") for w in warnings)


def test_zookeeper_version_setting_that_cannot_be_honoured() -> None:
    ps = problems({"versions": {"zookeeper": "3.7.2"}})
    assert any(p.startswith("versions.zookeeper: 3.7.2 cannot be honoured") and "3.8.4" in p for p in ps)


def test_unbuildable_versions_exit_2_and_write_nothing(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "kctl.yaml").write_text("versions:\n  kafka: 3.9.0\n  zookeeper: 3.7.2\n")
    r = subprocess.run([sys.executable, "-m", "kctl", "render"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "versions.kafka" in r.stderr and "versions.zookeeper" in r.stderr and "hint:" in r.stderr
    assert not (tmp_path / ".kctl").exists()


def test_load_cluster_resolves_the_recorded_engine_and_an_absolute_state_dir(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.model.spec import Engine, load_cluster, record_engine

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kctl.yaml").write_text("name: c1\nstate_dir: st\n")
    monkeypatch.chdir(tmp_path)
    spec, warnings = load_cluster(Path("a/kctl.yaml"))  # a relative path, from another directory
    assert spec.state_dir == str(tmp_path / "a" / "st") and spec.engine is Engine.compose and warnings == []
    record_engine(tmp_path / "a" / "st", Engine.swarm)
    assert load_cluster(Path("a/kctl.yaml"))[0].engine is Engine.swarm
    (tmp_path / "a" / "kctl.yaml").write_text("name: c1\nstate_dir: st\nengine: compose\n")
    assert load_cluster(Path("a/kctl.yaml"))[0].engine is Engine.compose  # kctl.yaml that says it wins


def test_monitoring_ports_are_published_and_checked_like_the_others() -> None:
    spec, _ = parse_spec({})
    n1, n3 = spec.nodes[0], spec.nodes[2]
    assert spec.zk_metrics_host_port(n1) == 17000 and spec.kafka_metrics_host_port(n3) == 17073
    assert [(p, w) for p, _, w in spec.published_ports(n1)] == [
        (12181, "zookeeper_port"), (17000, "zookeeper_metrics_port"), (19092, "kafka_port"),
        (17071, "kafka_metrics_port")]
    assert [u for _, _, u in spec.metrics_endpoints()][:2] == ["http://127.0.0.1:17000/metrics",
                                                              "http://127.0.0.1:17071/metrics"]
    off, _ = parse_spec({"monitoring": {"enabled": False}})
    assert off.metrics_endpoints() == [] and len(off.published_ports(off.nodes[0])) == 2
    # An exporter's host port on another node's Kafka port; an exporter inside the container on ZooKeeper's.
    assert any(p.startswith("nodes.1.kafka_metrics_port: host port 19092 is also used by nodes.0.kafka_port")
               for p in problems({"nodes": [{"id": 1, "hostname": "logger1"},
                                            {"id": 2, "hostname": "logger2", "kafka_metrics_port": 19092}]}))
    assert any(p.startswith("monitoring.zookeeper_exporter_port: 2181 is also zookeeper.client_port")
               for p in problems({"monitoring": {"zookeeper_exporter_port": 2181}}))
    assert any(p.startswith("monitoring.kafka_exporter_port: 7000 is also monitoring.zookeeper_exporter_port")
               for p in problems({"monitoring": {"kafka_exporter_port": 7000}}))
    # Split: a broker's container runs no ZooKeeper, so the two exporters may share a port number.
    split, _ = parse_spec({"topology": "split", "monitoring": {"kafka_exporter_port": 7000}})
    assert split.monitoring.kafka_exporter_port == split.monitoring.zookeeper_exporter_port
