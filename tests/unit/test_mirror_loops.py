"""Replication loops (issue 43: 10): the mirrors of kctl.yaml files as a graph of clusters, and the cycles that can
loop refused before `kctl mirror up` writes or starts anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.errors import UsageError
from kctl.mirror import loops
from kctl.mirror.loops import Flow
from kctl.model.spec import MirrorPolicy, load_spec

P, ID = MirrorPolicy.prefix, MirrorPolicy.identity


def flow(source: str, target: str, policy: MirrorPolicy = P, alias: str | None = None) -> Flow:
    return Flow(source, target, alias or source, policy, True, f"{target}/kctl.yaml mirrors.0 ({alias or source})")


def test_an_identity_pair_both_ways_is_a_loop_named_as_such() -> None:
    errors, _ = loops.problems([flow("a", "b", ID), flow("b", "a", ID)])
    assert len(errors) == 1 and errors[0].startswith("replication loop a -> b -> a:")
    assert "policy identity" in errors[0]
    # one identity flow in a longer cycle loops too, whatever the others' policy
    errors, _ = loops.problems([flow("a", "b"), flow("b", "c", ID), flow("c", "a")])
    assert [e.split(":")[0] for e in errors] == ["replication loop a -> b -> c -> a"]
    assert "c/kctl.yaml mirrors.0 (b) with policy identity" in errors[0]


def test_one_way_flows_and_prefix_pairs_with_the_clusters_own_names_do_not_loop() -> None:
    assert loops.problems([flow("a", "b", ID), flow("b", "c", ID), flow("a", "c", ID)]) == ([], [])  # no cycle
    # DefaultReplicationPolicy leaves out a topic whose prefix names the target: a.T never goes back into a
    assert loops.problems([flow("a", "b"), flow("b", "a")]) == ([], [])
    assert loops.problems([flow("a", "b"), flow("b", "c"), flow("c", "a")]) == ([], [])


def test_a_prefix_pair_whose_alias_is_not_the_clusters_name_reimports_with_a_doubled_prefix() -> None:
    # docs/mirroring.md before: dr mirrors the cluster "logger" under the alias "primary", and the fail-back mirror
    # in logger's kctl.yaml (alias "dr") closes the cycle
    errors, _ = loops.problems([flow("logger", "dr", alias="primary"), flow("dr", "logger")])
    assert len(errors) == 1
    assert "calls logger 'primary'" in errors[0] and "returns to it as dr.primary.T" in errors[0]
    # both misnamed: both named
    errors, _ = loops.problems([flow("a", "b", alias="x"), flow("b", "a", alias="y")])
    assert sorted(e.split("as ")[-1] for e in errors) == ["x.y.T", "y.x.T"]


def test_a_misnamed_alias_outside_a_cycle_is_a_warning() -> None:
    errors, warnings = loops.problems([flow("logger", "dr", alias="primary")])
    assert errors == [] and len(warnings) == 1 and "name the mirror 'logger'" in warnings[0]
    # a source kctl does not run: its name is not known, nothing to say
    unknown = Flow("partner", "dr", "partner", P, False, "dr mirrors.0")
    assert loops.problems([unknown]) == ([], [])


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def pair(tmp_path: Path, *, back: dict[str, Any] | None, alias: str = "primary", policy: str = "prefix",
         primary_name: str = "primary") -> tuple[Path, Path]:
    """primary/kctl.yaml and dr/kctl.yaml (dr mirrors primary; ``back``: primary's mirror of dr)."""
    primary = write(tmp_path / "primary" / "kctl.yaml",
                    {"name": primary_name, "mirrors": [back] if back else []})
    dr = write(tmp_path / "dr" / "kctl.yaml", {
        "name": "dr", "kafka": {"external_port_base": 29092},
        "zookeeper": {"host_port_base": 22181},
        "mirrors": [{"name": alias, "source": {"spec": "../primary/kctl.yaml"}, "policy": policy}]})
    return primary, dr


def test_the_graph_is_read_from_the_kctl_yaml_files_the_mirrors_name(tmp_path: Path) -> None:
    primary, dr = pair(tmp_path, back={"name": "dr", "source": {"spec": "../dr/kctl.yaml"}})
    graph, warnings = loops.flows(load_spec(dr)[0], dr)
    assert warnings == []
    assert sorted((f.source, f.target, f.alias) for f in graph) == [("dr", "primary", "dr"),
                                                                    ("primary", "dr", "primary")]
    assert loops.check(load_spec(dr)[0], dr) == []  # the clusters' own names: MirrorMaker sees its topics come back


@pytest.mark.parametrize("side", ["dr", "primary"])
def test_the_docs_old_fail_back_is_refused_from_either_side(tmp_path: Path, side: str) -> None:
    # the source cluster kept kctl init's name, "logger"; dr calls it "primary"
    primary, dr = pair(tmp_path, back={"name": "dr", "source": {"spec": "../dr/kctl.yaml"}}, primary_name="logger")
    path = dr if side == "dr" else primary
    with pytest.raises(UsageError) as refused:
        loops.check(load_spec(path)[0], path)
    assert "returns to it as dr.primary.T" in refused.value.message
    assert refused.value.exit_code == 2 and "own name" in (refused.value.hint or "")


def test_an_identity_fail_back_is_refused_and_a_bootstrap_source_is_known_by_its_servers(tmp_path: Path) -> None:
    primary, dr = pair(tmp_path, back={"name": "dr", "source": {"spec": "../dr/kctl.yaml"}, "policy": "identity"})
    with pytest.raises(UsageError, match="replication loop"):
        loops.check(load_spec(primary)[0], primary)
    # the way back by bootstrap servers instead of a kctl.yaml: the same cluster, found by its listeners
    dr_servers = load_spec(dr)[0].bootstrap_servers.replace("127.0.0.1", "localhost")
    primary, dr = pair(tmp_path, back={"name": "dr", "source": {"bootstrap_servers": dr_servers}},
                       policy="identity")
    with pytest.raises(UsageError, match="replication loop primary -> dr -> primary|replication loop dr -> primary"):
        loops.check(load_spec(dr)[0], dr)


def test_a_source_file_that_cannot_be_read_further_is_a_warning(tmp_path: Path) -> None:
    write(tmp_path / "primary" / "kctl.yaml", {"name": "primary", "mirrors": [
        {"name": "gone", "source": {"spec": "../gone/kctl.yaml"}}]})
    dr = write(tmp_path / "dr" / "kctl.yaml", {"name": "dr", "mirrors": [
        {"name": "primary", "source": {"spec": "../primary/kctl.yaml"}}]})
    warnings = loops.check(load_spec(dr)[0], dr)
    assert len(warnings) == 1 and "gone/kctl.yaml" in warnings[0] and "not checked" in warnings[0]


def test_kctl_mirror_up_refuses_a_loop_with_exit_2_before_anything(tmp_path: Path) -> None:
    primary, dr = pair(tmp_path, back={"name": "dr", "source": {"spec": "../dr/kctl.yaml"}}, policy="identity")
    p = subprocess.run([sys.executable, "-m", "kctl", "mirror", "up", "-f", str(dr)], cwd=dr.parent,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "replication loop" in p.stderr and "Traceback" not in p.stderr
    assert not (dr.parent / ".kctl").exists() and not (primary.parent / ".kctl").exists()


def test_two_clusters_of_one_name_are_two_clusters_of_the_graph() -> None:
    # a -> dr and dr -> another cluster also called a (its own kctl.yaml): a chain, not a cycle
    chain = [Flow("a", "dr", "a", ID, True, "dr mirrors.0", "/x/a/kctl.yaml", "/x/dr/kctl.yaml"),
             Flow("dr", "a", "dr", ID, True, "a2 mirrors.0", "/x/dr/kctl.yaml", "/y/a/kctl.yaml")]
    assert loops.problems(chain) == ([], [])
    closed = [chain[0], Flow("dr", "a", "dr", ID, True, "a mirrors.0", "/x/dr/kctl.yaml", "/x/a/kctl.yaml")]
    assert loops.problems(closed)[0]


def test_a_mirror_whose_bootstrap_servers_are_this_clusters_own_is_a_loop(tmp_path: Path) -> None:
    own = load_spec(write(tmp_path / "dr" / "kctl.yaml", {"name": "dr"}))[0].bootstrap_servers
    dr = write(tmp_path / "dr" / "kctl.yaml", {"name": "dr", "mirrors": [
        {"name": "primary", "source": {"bootstrap_servers": own}}]})
    with pytest.raises(UsageError, match="replication loop dr -> dr: .*reads the cluster it writes into"):
        loops.check(load_spec(dr)[0], dr)
