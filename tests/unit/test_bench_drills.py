"""`make drills`' document: one table per metadata mode, and a run of one mode keeps the other's table."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from kctl.bench import drills


def _verdict(**kw: object) -> SimpleNamespace:
    base = dict(scenario="leader-kill", rate=1000.0, duration_seconds=60.0, bounces=2, acked=60000, lost=0,
                duplicates=0, reordered=0, unacked_present=0, errors={}, recovery_seconds=1.5,
                self_heal_seconds=[9.0, 9.5], failover_seconds=[4.1, 4.3], longest_stall_seconds=4.2,
                leader_changes=3, zk_leader_changes=0, holds=True, failures=[])
    base.update(kw)
    return SimpleNamespace(**base)


ARGS = argparse.Namespace(duration=60.0, rate=1000.0)


def test_a_row_has_a_cell_per_column_and_the_failovers() -> None:
    r = drills.row(_verdict())
    assert r.count("|") == drills.HEADER.count("|")
    assert "| 4.1 s, 4.3 s |" in r and "| 9.0 s, 9.5 s |" in r
    assert "| - |" in drills.row(_verdict(failover_seconds=[], scenario="baseline"))


def test_each_mode_has_its_table_and_a_one_mode_run_keeps_the_other() -> None:
    zk = drills.section("zookeeper", [drills.row(_verdict())], ["slow-network: no netem"], ARGS)
    kraft = drills.section("kraft", [drills.row(_verdict(failover_seconds=[0.8]))], [], ARGS)
    doc = drills.render({"zookeeper": zk, "kraft": kraft}, plotted=False)
    assert doc.index("## ZooKeeper") < doc.index("## KRaft")
    assert "zookeeper.session.timeout.ms 4 s" in doc and "broker.session.timeout.ms 4 s" in doc
    assert drills.kept_section(doc, "zookeeper") == zk and drills.kept_section(doc, "kraft") == kraft
    # a later KRaft-only run: the ZooKeeper table read back from the document, the KRaft one replaced
    again = drills.render({"zookeeper": drills.kept_section(doc, "zookeeper") or "",
                           "kraft": drills.section("kraft", [drills.row(_verdict(failover_seconds=[0.6]))], [],
                                                   ARGS)}, plotted=False)
    assert "| 4.1 s, 4.3 s |" in again and "| 0.6 s |" in again and "| 0.8 s |" not in again
    assert drills.kept_section("# no tables yet\n", "kraft") is None


def test_zookeeper_drills_are_left_out_on_kraft() -> None:
    from kctl.drill.scenarios import SCENARIOS

    assert set(drills.ZOOKEEPER_ONLY) <= set(SCENARIOS)
    assert all(n.startswith("zk-") for n in drills.ZOOKEEPER_ONLY)
