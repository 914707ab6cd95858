"""`kctl up` after a node change: the untouched nodes stay as they are (no Docker: compose is faked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from kctl.cluster import lifecycle
from kctl.model.render import render
from kctl.model.spec import ClusterSpec, NodeSpec, ZkRole
from kctl.runtime import cluster as rcl
from kctl.runtime import docker_api
from kctl.runtime.engine import compose

THREE = ClusterSpec(nodes=[NodeSpec(id=i, hostname=f"logger{i}") for i in (1, 2, 3)])
FOUR = ClusterSpec(nodes=[*THREE.nodes, NodeSpec(id=4, hostname="logger4", role=ZkRole.observer)])


def hashes(spec: ClusterSpec, state: Path) -> dict[str, str]:
    return {c.name: c.config_hash for c in render(spec, state).containers}


def info(name: str, config_hash: str | None, state: str = "running") -> docker_api.ContainerInfo:
    return docker_api.ContainerInfo(id=f"id-{name}", name=name, container_name=name, node=name,
                                 services=("zookeeper", "kafka"), state=state, health="healthy",
                                 config_hash=config_hash, ports={})


def test_a_node_change_rewrites_every_nodes_render(tmp_path: Path) -> None:
    # Why the record is needed: the ensemble and zookeeper.connect of the other nodes change with the node list.
    old, new = hashes(THREE, tmp_path), hashes(FOUR, tmp_path)
    assert all(old[h] != new[h] for h in old)


def test_untouched_nodes_are_carried_over_and_up_leaves_them_alone(tmp_path: Path) -> None:
    old, new = hashes(THREE, tmp_path), hashes(FOUR, tmp_path)
    labels: dict[str, str | None] = {**old, "logger4": new["logger4"]}  # logger4 made by `node add`
    carried = rcl.carried_hashes(old, new, labels, {}, {"logger4"})
    assert carried == {h: new[h] for h in ("logger1", "logger2", "logger3")}
    existing = {h: info(h, labels[h]) for h in labels}
    plan = rcl.convergence_plan(render(FOUR, tmp_path), existing, carried)
    assert [(i.name, i.action) for i in plan] == [(h, "noop") for h in ("logger1", "logger2", "logger3", "logger4")]


def test_a_pending_change_of_its_own_is_kept(tmp_path: Path) -> None:
    old, new = hashes(THREE, tmp_path), hashes(FOUR, tmp_path)
    # logger2's container was made from an older kctl.yaml (a heap change not applied yet): not carried.
    labels: dict[str, str | None] = {**old, "logger2": "0123456789abcdef"}
    carried = rcl.carried_hashes(old, new, labels, {}, {"logger4"})
    assert "logger2" not in carried and set(carried) == {"logger1", "logger3"}
    # ...unless `kctl apply` had brought it to the old render: then it is up to date with the new one too.
    carried = rcl.carried_hashes(old, new, labels, {"logger2": old["logger2"]}, {"logger4"})
    assert carried["logger2"] == new["logger2"]


def test_a_removed_node_leaves_the_record(tmp_path: Path) -> None:
    old, new = hashes(FOUR, tmp_path), hashes(THREE, tmp_path)
    labels: dict[str, str | None] = dict(old)
    carried = rcl.carried_hashes(old, new, labels, {"logger4": old["logger4"]}, {"logger4"})
    assert set(carried) == {"logger1", "logger2", "logger3"}


def test_carry_applied_writes_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = hashes(THREE, tmp_path), hashes(FOUR, tmp_path)
    monkeypatch.setattr(docker_api, "infos", lambda _name, _dc: [info(h, v) for h, v in old.items()])
    monkeypatch.setattr(docker_api, "client", lambda timeout=None, version="auto": object())
    rcl.carry_applied(THREE, FOUR, tmp_path, {"logger4"})
    data = json.loads((tmp_path / "applied.json").read_text())
    assert data["hashes"] == {h: new[h] for h in ("logger1", "logger2", "logger3")}
    assert rcl.applied_hashes(tmp_path) == data["hashes"]


def test_up_names_only_the_containers_it_creates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = hashes(THREE, tmp_path), hashes(FOUR, tmp_path)
    calls: list[tuple[str, ...]] = []
    # logger4's container is gone (say it was removed by hand); logger1-3 were carried over by a node change
    monkeypatch.setattr(docker_api, "infos", lambda _name, _dc: [info(h, v) for h, v in old.items()])
    monkeypatch.setattr(docker_api, "client", lambda timeout=None, version="auto": object())
    monkeypatch.setattr(compose, "compose_binary", lambda: ["docker", "compose"])
    monkeypatch.setattr(compose, "run_compose", lambda _s, _d, *args, **_k: calls.append(args))
    monkeypatch.setattr(compose, "start_left_created", lambda *_a: None)  # nothing left Created
    monkeypatch.setattr(docker_api, "listed", lambda _cluster, _sc: [])  # no process to start again
    preflight = mock.create_autospec(compose.ComposeEngine.preflight)  # the host ports and Docker are not asked
    monkeypatch.setattr(compose.ComposeEngine, "preflight", preflight)
    monkeypatch.setattr(rcl, "require_image", lambda *_a: None)
    rcl.write_applied(tmp_path, {h: new[h] for h in ("logger1", "logger2", "logger3")})
    res: Any = lifecycle.converge(FOUR, tmp_path, build=False)
    assert [(i.name, i.action) for i in res.plan] == [("logger1", "noop"), ("logger2", "noop"),
                                                      ("logger3", "noop"), ("logger4", "create")]
    assert len(calls) == 1 and calls[0][:2] == ("up", "-d") and "--no-deps" in calls[0]
    assert calls[0][-1] == "logger4" and not {"logger1", "logger2", "logger3"} & set(calls[0])
    preflight.assert_called_once()


class _Created:
    """An SDK container object that compose left Created; its start fails as the engine's does."""

    def __init__(self, host: str, status: str, error: str | None) -> None:
        self.labels = {"com.docker.compose.service": host, "io.kctl.service": host}
        self.name, self.status, self.error, self.started = host, status, error, False

    def start(self) -> None:
        import docker.errors

        if self.error:
            raise docker.errors.APIError("500 Server Error", explanation=self.error)
        self.started = True


def test_a_container_compose_left_created_is_started_or_its_engine_error_said(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.errors import KctlError

    ok, running = _Created("logger2", "created", None), _Created("logger3", "running", None)
    monkeypatch.setattr(docker_api, "sdk_containers", lambda _n, _dc: [ok, running])
    monkeypatch.setattr(docker_api, "host_of", lambda c: c.name)
    compose.start_left_created(THREE, object(), ["logger2", "logger3"])
    assert ok.started and not running.started
    taken = _Created("logger1", "created", "Bind for 127.0.0.1:41000 failed: port is already allocated")
    monkeypatch.setattr(docker_api, "sdk_containers", lambda _n, _dc: [taken])
    with pytest.raises(KctlError) as exc:
        compose.start_left_created(THREE, object(), ["logger1"])
    assert "logger1" in exc.value.message and "port is already allocated" in exc.value.message
    assert "kctl doctor" in (exc.value.hint or "")
    compose.start_left_created(THREE, object(), ["logger2"])  # not named: not touched
