"""The console's parts without a server: the users file, the registry of clusters, the audit log, the jobs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("argon2")

from kctl.console.audit import AuditLog, to_csv  # noqa: E402
from kctl.console.config import ConsoleConfig, Registry, load_config  # noqa: E402
from kctl.console.jobs import Jobs  # noqa: E402
from kctl.console.users import Role, UserStore, new_user  # noqa: E402
from kctl.errors import KctlError, UsageError  # noqa: E402


def _spec(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "kctl.yaml").write_text(yaml.safe_dump({"name": name}))
    return d / "kctl.yaml"


def test_the_users_file_keeps_hashes_only_and_is_read_again_when_changed(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    a, b = UserStore(path), UserStore(path)
    a.put(new_user("ada", "admin", "a long password"))
    assert "a long password" not in path.read_text() and path.stat().st_mode & 0o777 == 0o600
    assert b.verify("ada", "a long password") is not None and b.verify("ada", "wrong password") is None
    assert b.verify("nobody", "a long password") is None
    a.put(new_user("ada", "viewer", "another password", ["prod"], ["team-a."]))
    u = b.get("ada")
    assert u is not None and u.role is Role.viewer and u.clusters == ("prod",)
    assert u.may_see_topic("team-a.x") and not u.may_see_topic("team-b.x") and not u.may_see_cluster("dev")
    with pytest.raises(KctlError, match="at least 8"):
        new_user("x", "viewer", "short")
    with pytest.raises(KctlError, match="not a console role"):
        new_user("x", "root", "long enough")
    with pytest.raises(KctlError, match="not a user name"):
        new_user("../x", "viewer", "long enough")
    path.write_text("users:\n  - name: ada\n")
    with pytest.raises(KctlError, match="lacks"):
        UserStore(path).users()


def test_the_registry_serves_the_console_files_clusters_and_added_ones(tmp_path: Path) -> None:
    fixed = _spec(tmp_path, "prod")
    cfg_file = tmp_path / "console.yaml"
    cfg_file.write_text(yaml.safe_dump({"clusters": [{"path": "prod/kctl.yaml"}], "read_only": True}))
    cfg = load_config(cfg_file)
    assert cfg.cluster_files == [fixed.resolve()] and cfg.read_only
    assert cfg.users_file == tmp_path / "console-users.yaml"
    reg = Registry(cfg)
    assert [e.name for e in reg.entries()] == ["prod"]
    extra = _spec(tmp_path, "staging")
    assert reg.add(extra).name == "staging"
    assert [e.name for e in Registry(cfg).entries()] == ["prod", "staging"]  # kept beside the users file
    with pytest.raises(UsageError, match="already served"):
        reg.add(extra)
    with pytest.raises(UsageError, match="named by the console file"):
        reg.remove("prod")
    reg.remove("staging")
    assert [e.name for e in reg.entries()] == ["prod"]
    bad = tmp_path / "bad" / "kctl.yaml"
    bad.parent.mkdir()
    bad.write_text("name: [not, a, name]\n")
    with pytest.raises(UsageError, match="is not a cluster's kctl.yaml"):
        reg.add(bad)
    cfg_file.write_text("clusters: 3\n")
    with pytest.raises(UsageError, match="is not a console file"):
        load_config(cfg_file)


def test_an_unreadable_kctl_yaml_is_an_entry_with_its_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gone = tmp_path / "gone" / "kctl.yaml"
    bad = tmp_path / "bad" / "kctl.yaml"
    bad.parent.mkdir()
    bad.write_text("nope: 1\n")
    cfg = ConsoleConfig([gone, bad], tmp_path / "u.yaml", tmp_path / "a.jsonl", tmp_path / "c.yaml")
    reg = Registry(cfg)
    with caplog.at_level("WARNING", logger="kctl.console"):
        first, second = reg.entries()
        reg.entries()  # read at every request: logged once
    # words without a path for the answers; the reason, with its path, for the log and unlimited admins
    assert first.spec is None and first.error == "its kctl.yaml cannot be read (see the console's log)"
    assert first.detail is not None and first.detail.startswith(f"cannot read {gone}")
    assert second.error == "its kctl.yaml is not a valid cluster spec (see the console's log)"
    assert second.detail is not None and "nope: unknown setting" in second.detail
    assert [r.getMessage() for r in caplog.records] == [f"cluster gone: {first.detail}",
                                                        f"cluster bad: {second.detail}"]


def test_the_audit_log_appends_from_threads_filters_and_exports(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")

    def write(i: int) -> None:
        for j in range(50):
            log.append(user=f"u{i}", action="topic.create", result="done", cluster="c1" if j % 2 else "c2",
                       target=f"t{j}", params={"partitions": j})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.append(user="u0", action="login", result="refused", message="wrong name or password")
    assert len(list(log.records())) == 201
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o777 == 0o600
    mine = log.query(user="u1", cluster="c1")
    assert len(mine) == 25 and all(r["user"] == "u1" and r["cluster"] == "c1" for r in mine)
    assert log.query(limit=1)[0]["action"] == "login"  # newest first
    kept = log.query(keep=lambda r: r["cluster"] in ("c1", None), limit=1000)
    assert len(kept) == 101 and all(r["cluster"] in ("c1", None) for r in kept)
    with (tmp_path / "audit.jsonl").open("a") as fh:
        fh.write('{"cut in the mid')  # a crash mid-write: that line is skipped, the rest read
    assert len(list(log.records())) == 201
    csv_text = to_csv(log.query(action="login"))
    assert csv_text.splitlines()[0] == "time,user,client,cluster,action,target,params,result,message"


def test_one_reassignment_job_per_cluster_and_its_end_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.kafka import reassign
    from kctl.model.spec import ClusterSpec

    release = threading.Event()
    ended: list[Any] = []

    def execute(spec: Any, plan: Any, *, throttle: Any, wait: bool, timeout: float, progress: Any,
                state_dir: Any) -> None:
        assert state_dir is not None  # its record there gives the CLI and the console the move's time left
        progress("reassignment of 1 partition(s) started in logger1")
        release.wait(10)
        progress("verified: every partition has its new replicas; the throttle is removed")

    monkeypatch.setattr(reassign, "check_plan", lambda spec, plan: None)
    monkeypatch.setattr(reassign, "execute", execute)
    jobs = Jobs(ended.append)
    spec = ClusterSpec(name="c1")
    job = jobs.start_reassignment(spec, "otto", {("t", 0): [1, 2]}, None)
    assert job.state == "running" and "started" in job.log[0]
    with pytest.raises(KctlError, match="still runs"):
        jobs.start_reassignment(spec, "ada", {("t", 0): [1, 2]}, None)
    release.set()
    for _ in range(100):
        if ended:
            break
        threading.Event().wait(0.05)
    assert ended and ended[0].state == "done" and jobs.get("c1") is job


def test_a_plan_the_cluster_refuses_starts_no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.kafka import reassign
    from kctl.model.spec import ClusterSpec

    def refuse(spec: Any, plan: Any) -> None:
        raise UsageError("broker 9 is not registered")

    monkeypatch.setattr(reassign, "check_plan", refuse)
    jobs = Jobs(lambda job: None)
    with pytest.raises(UsageError, match="broker 9"):
        jobs.start_reassignment(ClusterSpec(name="c1"), "otto", {("t", 0): [9]}, None)
    assert jobs.get("c1") is None
