"""kctl node add/remove edit only the nodes of the user's kctl.yaml (pure), keeping its comments and key order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kctl.cluster import nodes
from kctl.errors import UsageError
from kctl.model.spec import Engine, load_cluster, parse_spec, record_engine
from kctl.runtime.engine.engines import WrongEngine, check_engine

TEXT = """# my cluster
name: prod   # the name
nodes:
- id: 1
  hostname: logger1
- id: 2
  hostname: logger2
- id: 3
  hostname: logger3

# Kafka settings
kafka:
  num_partitions: 6
"""


def test_add_appends_the_next_node_and_keeps_the_rest_of_the_file() -> None:
    raw = yaml.safe_load(TEXT)
    spec, _ = parse_spec(raw)
    new_raw, entry = nodes.with_node_added(raw, spec, None, "observer", lambda n: [])
    assert entry == {"id": 4, "hostname": "logger4", "role": "observer"}
    text = nodes.replace_nodes_block(TEXT, new_raw["nodes"])
    assert text.startswith("# my cluster\nname: prod   # the name\nnodes:\n")
    assert "\n# Kafka settings\nkafka:\n  num_partitions: 6\n" in text
    again, _ = parse_spec(yaml.safe_load(text))
    assert [n.id for n in again.nodes] == [1, 2, 3, 4] and again.kafka.num_partitions == 6
    back = nodes.with_node_removed(yaml.safe_load(text), again, 4)
    assert nodes.replace_nodes_block(text, back["nodes"]) == TEXT


def test_pinned_ports_get_free_ones_and_ids_must_be_new() -> None:
    raw = {"nodes": [{"id": i, "hostname": f"n{i}", "zookeeper_port": 30000 + i, "kafka_port": 31000 + i}
                     for i in (1, 2, 3)]}
    spec, _ = parse_spec(raw)
    _, entry = nodes.with_node_added(raw, spec, 7, "participant", lambda n: [40001, 40002][:n])
    assert entry == {"id": 7, "hostname": "n7", "role": "participant", "zookeeper_port": 40001, "kafka_port": 40002}
    with pytest.raises(UsageError, match="already used"):
        nodes.with_node_added(raw, spec, 2, "participant", lambda n: [])


def test_removing_a_middle_node_keeps_the_ports_of_the_ones_after_it() -> None:
    raw = yaml.safe_load(TEXT)
    raw["nodes"].append({"id": 4, "hostname": "logger4"})
    spec, _ = parse_spec(raw)
    out = nodes.with_node_removed(raw, spec, 2)
    after, _ = parse_spec(out)
    n3 = spec.node(3)
    assert [n.id for n in after.nodes] == [1, 3, 4]
    assert after.zk_host_port(after.node(3)) == spec.zk_host_port(n3)
    assert after.kafka_host_port(after.node(3)) == spec.kafka_host_port(n3)


COMMENTED = """# prod cluster: owned by the logging team
name: prod   # the name
nodes:
  # the first three came with `kctl init`
  - id: 1
    hostname: logger1
  - hostname: logger2   # keys in the user's order
    id: 2
  - id: 3
    hostname: logger3  # third

# Kafka settings
kafka:
  num_partitions: 6   # six
zookeeper:
  tick_time: 2000
"""


def test_node_add_then_remove_keeps_comments_and_key_order(tmp_path: Path) -> None:
    text = COMMENTED
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(text)
    spec, _ = load_cluster(spec_file)
    add = nodes.edit_for_add(spec, spec_file, None, "participant", ports=lambda n: [])
    assert add.new_text == text.replace(
        "    hostname: logger3  # third\n",
        "    hostname: logger3  # third\n  - id: 4\n    hostname: logger4\n    role: participant\n")
    assert [k for k in yaml.safe_load(add.new_text)] == ["name", "nodes", "kafka", "zookeeper"]
    assert [n.id for n in add.spec.nodes] == [1, 2, 3, 4]
    spec_file.write_text(add.new_text)
    grown, _ = load_cluster(spec_file)
    back = nodes.edit_for_remove(grown, spec_file, 4)
    assert back.new_text == text
    mid = nodes.edit_for_remove(grown, spec_file, 2)  # the nodes after it pin their ports
    assert "# the first three came with `kctl init`\n  - id: 1\n" in mid.new_text
    assert "  - id: 3\n    hostname: logger3  # third\n    zookeeper_port: 12183\n" in mid.new_text
    assert "# Kafka settings\nkafka:\n  num_partitions: 6   # six\nzookeeper:\n" in mid.new_text
    assert "logger2" not in mid.new_text and [n.id for n in mid.spec.nodes] == [1, 3, 4]


def test_node_add_after_up_engine_swarm_keeps_the_recorded_engine(tmp_path: Path) -> None:
    """`kctl up --engine swarm` records the engine; the grown cluster node add checks containers against is
    still swarm (kctl.yaml re-parsed alone says compose, and the swarm containers would be WrongEngine)."""
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(TEXT)
    record_engine(tmp_path / ".kctl" / "prod", Engine.swarm)
    spec, _ = load_cluster(spec_file)
    assert spec.engine is Engine.swarm and spec.state_dir == str(tmp_path / ".kctl" / "prod")
    edit = nodes.edit_for_add(spec, spec_file, None, "participant", ports=lambda n: [])
    assert edit.spec.engine is Engine.swarm and edit.spec.state_dir == spec.state_dir
    made_by_swarm = [(f"logger{i}", "swarm") for i in (1, 2, 3)]
    check_engine(edit.spec, made_by_swarm)  # no WrongEngine
    with pytest.raises(WrongEngine):  # what re-parsing kctl.yaml without the loader gave
        check_engine(parse_spec(yaml.safe_load(edit.new_text))[0], made_by_swarm)
    spec_file.write_text(edit.new_text)
    shrink = nodes.edit_for_remove(load_cluster(spec_file)[0], spec_file, 4)
    assert shrink.spec.engine is Engine.swarm
