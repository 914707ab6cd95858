"""ZooKeeper storage read from a state dir laid out like a node's data mount (no Docker)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kctl.errors import UsageError
from kctl.model.spec import ClusterSpec
from kctl.zk import storage


def lay_out(state: Path, host: str, snaps: dict[str, int], logs: dict[str, int]) -> None:
    for sub, files in (("snapshots", snaps), ("txnlogs", logs)):
        d = state / host / "data" / "zookeeper" / sub / "version-2"
        d.mkdir(parents=True, exist_ok=True)
        for i, (name, size) in enumerate(files.items()):
            (d / name).write_bytes(b"x" * size)
            os.utime(d / name, (1_700_000_000 + i, 1_700_000_000 + i))
        (d / "acceptedEpoch").write_text("1")  # not a snapshot or a log: not counted


def test_host_path_only_under_the_data_mount(tmp_path: Path) -> None:
    assert storage.host_path(tmp_path, "logger1", "/var/opt/kctl/zookeeper/snapshots") == \
        tmp_path / "logger1" / "data" / "zookeeper" / "snapshots"
    assert storage.host_path(tmp_path, "logger1", "/var/opt/kctlx/zk") is None
    assert storage.host_path(tmp_path, "logger1", "/data/zk") is None


def test_counts_and_sizes_per_node_snapshots_apart_from_txn_logs(tmp_path: Path) -> None:
    lay_out(tmp_path, "logger1", {"snapshot.0": 100, "snapshot.1000002a": 300}, {"log.100000001": 5000})
    lay_out(tmp_path, "logger2", {"snapshot.0": 100}, {})
    got = {s.node: s for s in storage.storage(ClusterSpec(), tmp_path)}
    assert sorted(got) == ["logger1", "logger2", "logger3"]
    one = got["logger1"]
    assert (one.snapshots.key, one.snapshots.files, one.snapshots.bytes) == ("dataDir", 2, 400)
    assert (one.txn_logs.key, one.txn_logs.files, one.txn_logs.bytes) == ("dataLogDir", 1, 5000)
    assert one.snapshots.newest is not None and one.snapshots.newest.startswith("snapshot.1000002a")
    assert one.snapshots.oldest is not None and one.snapshots.oldest.startswith("snapshot.0")
    assert one.separate and one.problems == []
    assert got["logger2"].txn_logs.files == 0
    assert got["logger3"].snapshots.files == 0 and "never started" in got["logger3"].problems[0]


def test_shared_dir_and_outside_mount_are_reported(tmp_path: Path) -> None:
    spec = ClusterSpec.model_validate({"zookeeper": {"data_dir": "/var/opt/kctl/zk", "data_log_dir": "/var/opt/kctl/zk",
                                                     "overrides": {}},
                                       "nodes": [{"id": 1, "hostname": "logger1",
                                                  "overrides": {"zookeeper": {"dataLogDir": "/srv/txn"}}},
                                                 {"id": 2, "hostname": "logger2"}, {"id": 3, "hostname": "logger3"}]})
    got = {s.node: s for s in storage.storage(spec, tmp_path)}
    assert got["logger1"].txn_logs.container_path == "/srv/txn" and got["logger1"].txn_logs.host_path is None
    assert any("outside /var/opt/kctl" in p for p in got["logger1"].problems)
    assert not got["logger2"].separate and any("dataLogDir equals dataDir" in p for p in got["logger2"].problems)


def test_purge_refuses_fewer_than_three_before_touching_anything(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="at least 3"):
        storage.purge(ClusterSpec(), tmp_path, "logger1", keep=2)
    with pytest.raises(UsageError, match="no node 'logger9'"):
        storage.purge(ClusterSpec(), tmp_path, "logger9", keep=3)
