"""kctl node add/remove edit only the nodes block of the user's kctl.yaml (pure)."""

from __future__ import annotations

import pytest
import yaml

from kctl import nodes
from kctl.errors import UsageError
from kctl.spec import parse_spec

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
