"""kctl features (kctl/cluster/features.py, pure parts): version-mapping parsed, the raise planned one feature at a
time, metadata.version first, kraft.version held unless included, never a lowering, refused across releases."""

from __future__ import annotations

import pytest

from kctl.cluster import features as f
from kctl.cluster.features import NodeLevels

MAPPING_43 = """metadata.version=30 (4.3)
kraft.version=1
transaction.version=2
group.version=1
eligible.leader.replicas.version=1
share.version=1
streams.version=1
"""
MAPPING_41 = """metadata.version=27 (4.1)
kraft.version=1
transaction.version=2
group.version=1
eligible.leader.replicas.version=0
share.version=0
streams.version=0
"""


def nodes(*mappings: str) -> list[NodeLevels]:
    return [NodeLevels(f"logger{i}", *f.parse_mapping(m)) for i, m in enumerate(mappings, 1)]


def test_version_mapping_is_read_in_the_tools_order_with_its_release() -> None:
    rel, levels = f.parse_mapping("[2026-12-05 09:00:00,000] WARN something\n" + MAPPING_43)
    assert rel == "4.3" and list(levels) == ["metadata.version", "kraft.version", "transaction.version",
                                              "group.version", "eligible.leader.replicas.version", "share.version",
                                              "streams.version"]
    assert levels["metadata.version"] == 30 and levels["transaction.version"] == 2
    assert f.parse_mapping("Failed to create new KafkaAdminClient\n") == (None, {})


def test_describe_gives_the_supported_range() -> None:
    text = ("Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\t"
            "Epoch: 12\nFeature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.3-IV0\t"
            "FinalizedVersionLevel: 3.9-IV0\tEpoch: 12\n")
    d = f.parse_describe(text)
    assert d["group.version"] == f.Feature("group.version", "1", "0", "0")
    assert d["metadata.version"].supported_min == "3.3-IV3" and d["metadata.version"].finalized == "3.9-IV0"


def test_releases_compare_with_and_without_their_iv() -> None:
    assert f.release("4.3") == (4, 3, 0) == f.release("4.3-IV0") and f.release("4.1-IV1") < f.release("4.3")


def test_the_plan_raises_metadata_version_first_and_holds_kraft_version() -> None:
    finalized = {"metadata.version": 21, "kraft.version": 0, "group.version": 0}
    changes, refused = f.plan_raise(finalized, nodes(MAPPING_43, MAPPING_43, MAPPING_43))
    assert refused is None
    assert [(c.feature, c.finalized, c.target, c.held) for c in changes] == [
        ("metadata.version", 21, 30, False), ("kraft.version", 0, 1, True), ("transaction.version", 0, 2, False),
        ("group.version", 0, 1, False), ("eligible.leader.replicas.version", 0, 1, False),
        ("share.version", 0, 1, False), ("streams.version", 0, 1, False)]
    assert changes[0].command == "kafka-features.sh upgrade --feature metadata.version=30"
    included, _ = f.plan_raise(finalized, nodes(MAPPING_43), include=["kraft.version"])
    assert [c.feature for c in included if c.held] == []  # asked for: raised with the rest


def test_every_node_must_support_the_level_and_none_is_lowered() -> None:
    # a node whose release maps lower: the plan goes to the lowest, and a feature already above stays as it is
    finalized = {"metadata.version": 30, "kraft.version": 1, "transaction.version": 2, "group.version": 1,
                 "share.version": 0}
    changes, refused = f.plan_raise(finalized, [NodeLevels("logger1", "4.3", {"share.version": 1,
                                                                              "metadata.version": 27}),
                                                NodeLevels("logger2", "4.3", {"share.version": 1,
                                                                              "metadata.version": 27})])
    assert [(c.feature, c.target) for c in changes] == [("share.version", 1)] and refused is None


def test_nodes_on_different_releases_are_refused_and_name_the_older() -> None:
    changes, refused = f.plan_raise({"metadata.version": 21}, nodes(MAPPING_43, MAPPING_41, MAPPING_43))
    assert refused is not None and "logger2 still on an older one" in refused and "4.1, 4.3" in refused
    assert [c.target for c in changes if c.feature == "metadata.version"] == [27]  # the lowest, shown, not applied


def test_a_node_that_cannot_say_its_levels_stops_the_plan() -> None:
    changes, refused = f.plan_raise({}, [NodeLevels("logger1", None, {})])
    assert changes == [] and refused is not None and "Kafka 3.9" in refused
    assert f.plan_raise({}, []) == ([], "no node answered version-mapping")


def test_the_plan_of_a_cluster_at_its_releases_levels_is_empty() -> None:
    _, levels = f.parse_mapping(MAPPING_43)
    assert f.plan_raise(levels, nodes(MAPPING_43, MAPPING_43)) == ([], None)


@pytest.mark.parametrize("include", [["group.version"], ["nope"]])
def test_only_a_held_feature_can_be_included(include: list[str]) -> None:
    from kctl.errors import UsageError
    from kctl.model.spec import ClusterSpec

    spec = ClusterSpec(name="c1")
    with pytest.raises(UsageError, match="only a held feature"):
        f.plan(spec, include=include)
