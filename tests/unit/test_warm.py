"""kctl.stream.warm: which job a warm driver takes, and the claim (one submit gets a slot, never two)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import KctlError
from kctl.model.spec import parse_spec
from kctl.stream import spark, submit, warm
from kctl.stream.config import JobConfig


@pytest.fixture()
def spec() -> Any:
    return parse_spec({"name": "w",
                       "spark": {"workers": 1, "warm_driver": True}})[0]


def _cfg(tmp_path: Path, **kw: Any) -> JobConfig:
    base = dict(bootstrap_servers="logger1:29092", topics=["t"], out=str(tmp_path / "out"),
                checkpoint=str(tmp_path / "job" / "cp"), master="spark://spark-master:7077", jars=["/j/a.jar"],
                cores_max=1, container="kctl-w-stream-main", driver_host="stream-main")
    return JobConfig(**{**base, **kw})


def _slot(state: Path, wid: str, cfg: JobConfig, running: dict[str, str]) -> Path:
    """A warm driver's slot that is ready with ``cfg``'s session; its container listed in ``running``."""
    slot = warm.slots_dir(state) / wid
    slot.mkdir(parents=True)
    name = f"kctl-w-stream-warm-{wid}"
    (slot / "config.json").write_text(json.dumps({"container": name}))
    (slot / "ready.json").write_text(json.dumps({"key": warm.session_key(cfg), "host": f"stream-warm-{wid}",
                                                 "container": name}))
    running[name] = "running"
    return slot


@pytest.fixture()
def docker_states(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    states: dict[str, str] = {}
    monkeypatch.setattr(spark, "driver_state", lambda c: states.get(c))
    return states


def _writer(path: Path) -> Any:
    def write(c: JobConfig) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(c.to_json())
        return path
    return write


def test_a_job_with_the_warm_session_is_handed_over(spec: Any, tmp_path: Path,
                                                    docker_states: dict[str, str]) -> None:
    state = tmp_path / "state"
    cfg = _cfg(tmp_path)
    slot = _slot(state, "a1", cfg, docker_states)
    cfg_path = tmp_path / "job" / "config.json"
    assert warm.claim(spec, state, cfg, _writer(cfg_path)) == "kctl-w-stream-warm-a1"
    assert (cfg.container, cfg.driver_host) == ("kctl-w-stream-warm-a1", "stream-warm-a1")
    # the job's record names the warm driver before the claim exists (a rerun after a kill finds it)
    assert JobConfig.from_json(cfg_path.read_text()).container == "kctl-w-stream-warm-a1"
    claim = json.loads((slot / "claim.json").read_text())
    assert claim == {"config": str(cfg_path), "job": "main", "log": "stream-main.log"}
    assert warm.claimed_by("kctl-w-stream-warm-a1", state) == str(cfg_path)
    assert not list(slot.glob(".claim-*"))
    # the slot is taken: the next job is not handed to it, and keeps its own driver's names
    other = _cfg(tmp_path, name="other", container="kctl-w-stream-other", driver_host="stream-other")
    assert warm.claim(spec, state, other, _writer(tmp_path / "o" / "config.json")) is None
    assert (other.container, other.driver_host) == ("kctl-w-stream-other", "stream-other")
    assert not (tmp_path / "o" / "config.json").exists()


@pytest.mark.parametrize("change", [
    {"extra_conf": {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}},
    {"driver_memory": "2g"}, {"jars": ["/j/a.jar", "/j/hadoop-aws.jar"]}, {"packages": ["g:a:1"]},
    {"cores_max": 4}, {"shuffle_partitions": 4},
])
def test_a_job_whose_session_differs_starts_its_own_driver(spec: Any, tmp_path: Path, docker_states: dict[str, str],
                                                            change: dict[str, Any]) -> None:
    state = tmp_path / "state"
    _slot(state, "a1", _cfg(tmp_path), docker_states)
    cfg = _cfg(tmp_path, **change)
    assert warm.claim(spec, state, cfg, _writer(tmp_path / "c.json")) is None
    assert cfg.container == "kctl-w-stream-main" and not (tmp_path / "c.json").exists()


def test_s3_and_a_login_of_its_own_start_a_driver_of_their_own(spec: Any, tmp_path: Path,
                                                                  docker_states: dict[str, str]) -> None:
    state = tmp_path / "state"
    _slot(state, "a1", _cfg(tmp_path), docker_states)
    assert warm.why_cold(_cfg(tmp_path)) is None
    for cfg in (_cfg(tmp_path, s3={"endpoint": "http://x"}), _cfg(tmp_path, kafka_login="/s/main.json")):
        assert warm.why_cold(cfg)
        assert warm.claim(spec, state, cfg, _writer(tmp_path / "c.json")) is None


def test_no_warm_driver_asked_or_none_running(spec: Any, tmp_path: Path, docker_states: dict[str, str]) -> None:
    state = tmp_path / "state"
    cfg = _cfg(tmp_path)
    _slot(state, "a1", cfg, docker_states)
    docker_states["kctl-w-stream-warm-a1"] = "restarting"  # warming again after a crash: not ready
    assert warm.claim(spec, state, cfg, _writer(tmp_path / "c.json")) is None
    docker_states["kctl-w-stream-warm-a1"] = "running"
    off = parse_spec({"name": "w", "spark": {"workers": 1}})[0]
    assert off.spark.warm_driver is False
    assert warm.claim(off, state, cfg, _writer(tmp_path / "c.json")) is None
    (warm.slots_dir(state) / "a1" / "ready.json").unlink()  # still warming
    assert warm.claim(spec, state, cfg, _writer(tmp_path / "c.json")) is None


def test_of_many_submits_at_once_one_takes_the_slot(spec: Any, tmp_path: Path, docker_states: dict[str, str]) -> None:
    state = tmp_path / "state"
    _slot(state, "a1", _cfg(tmp_path), docker_states)
    got: list[str | None] = []
    barrier = threading.Barrier(8)

    def one(i: int) -> None:
        cfg = _cfg(tmp_path, name=f"j{i}", container=f"kctl-w-stream-j{i}", driver_host=f"stream-j{i}")
        barrier.wait()
        got.append(warm.claim(spec, state, cfg, _writer(tmp_path / f"j{i}" / "config.json")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [g for g in got if g is not None] == ["kctl-w-stream-warm-a1"] and got.count(None) == 7
    claim = json.loads((warm.slots_dir(state) / "a1" / "claim.json").read_text())
    assert JobConfig.from_json(Path(claim["config"]).read_text()).container == "kctl-w-stream-warm-a1"


def test_a_job_running_in_a_warm_driver_is_not_submitted_again(spec: Any, tmp_path: Path,
                                                                 docker_states: dict[str, str]) -> None:
    state = tmp_path / "state"
    cfg = _cfg(tmp_path)
    _slot(state, "a1", cfg, docker_states)
    cfg_path = tmp_path / "job" / "config.json"
    assert warm.claim(spec, state, cfg, _writer(cfg_path))
    with pytest.raises(KctlError, match="already runs in container kctl-w-stream-warm-a1"):
        submit._refuse_running(spec, state, _cfg(tmp_path), cfg_path)
    docker_states["kctl-w-stream-warm-a1"] = "exited"  # stopped: it may run again
    submit._refuse_running(spec, state, _cfg(tmp_path), cfg_path)
    # a record that names a warm driver never handed the job (kctl killed between the two writes): not running
    state2, path2 = tmp_path / "state2", tmp_path / "job2" / "config.json"
    _slot(state2, "b2", cfg, docker_states)
    path2.parent.mkdir(parents=True)
    path2.write_text(_cfg(tmp_path, container="kctl-w-stream-warm-b2").to_json())
    submit._refuse_running(spec, state2, _cfg(tmp_path), path2)
    # its own driver running: refused too
    docker_states[spark.driver_container(spec, "main")] = "running"
    with pytest.raises(KctlError, match="already runs"):
        submit._refuse_running(spec, state2, _cfg(tmp_path), path2)


def test_a_second_submit_of_the_job_at_the_same_time_is_refused(tmp_path: Path) -> None:
    with submit._submit_lock(tmp_path, "main"), \
            pytest.raises(KctlError, match="another `kctl stream submit` of the job main is under way"), \
            submit._submit_lock(tmp_path, "main"):
        pass
    with submit._submit_lock(tmp_path, "main"):  # released with its holder
        pass


class _Container:
    def __init__(self, wid: str, status: str, removed: list[str]) -> None:
        self.name, self.status, self.labels = f"kctl-w-stream-warm-{wid}", status, {warm.LABEL_WARM: wid}
        self._removed = removed

    def remove(self, force: bool = False) -> None:
        self._removed.append(self.name)


def test_retiring_takes_only_the_warm_drivers_no_job_was_handed(spec: Any, tmp_path: Path,
                                                                 docker_states: dict[str, str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    cfg = _cfg(tmp_path)
    for wid in ("a1", "b2", "c3"):
        _slot(state, wid, cfg, docker_states)
    assert warm.claim(spec, state, _cfg(tmp_path), _writer(tmp_path / "job" / "config.json")) == \
        "kctl-w-stream-warm-a1"
    removed: list[str] = []
    found = [_Container("a1", "running", removed), _Container("b2", "running", removed),
             _Container("c3", "exited", removed)]
    monkeypatch.setattr(warm, "_containers", lambda s: found)
    assert warm.retire_idle(spec, state) == ["kctl-w-stream-warm-b2"]
    # the handed one stays with its job; the waiting one is gone with its slot; the exited one is tidied away
    assert sorted(removed) == ["kctl-w-stream-warm-b2", "kctl-w-stream-warm-c3"]
    assert (warm.slots_dir(state) / "a1").is_dir() and not (warm.slots_dir(state) / "b2").exists()
    assert json.loads((warm.slots_dir(state) / "a1" / "claim.json").read_text())["job"] == "main"


def test_a_submit_and_a_retirement_at_once_never_both_take_a_slot(spec: Any, tmp_path: Path,
                                                                  docker_states: dict[str, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    cfg = _cfg(tmp_path)
    _slot(state, "a1", cfg, docker_states)
    removed: list[str] = []
    monkeypatch.setattr(warm, "_containers", lambda s: [_Container("a1", "running", removed)])
    assert warm.retire_idle(spec, state) == ["kctl-w-stream-warm-a1"]
    # retired first: the submit that comes after finds nothing to take and keeps its own driver
    _slot(state, "b2", cfg, docker_states)
    assert warm._take(warm.slots_dir(state) / "b2", {"retire": True})
    assert warm.claim(spec, state, cfg, _writer(tmp_path / "c.json")) is None
    assert cfg.container == "kctl-w-stream-main"


def test_why_a_job_was_not_handed_over(spec: Any, tmp_path: Path, docker_states: dict[str, str]) -> None:
    state = tmp_path / "state"
    assert warm.cold_reason(spec, state, _cfg(tmp_path)).startswith("no warm driver was ready")
    _slot(state, "a1", _cfg(tmp_path), docker_states)
    assert warm.cold_reason(spec, state, _cfg(tmp_path, driver_memory="2g", extra_conf={"spark.x": "1"})) == \
        "its Spark session differs from the warm driver's (driver_memory, extra_conf)"
    assert "S3" in warm.cold_reason(spec, state, _cfg(tmp_path, s3={"endpoint": "http://x"}))
