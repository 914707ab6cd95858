"""The CLI through the real command (a subprocess): exit codes, key lines, parsed -o json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def kctl(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_version_and_help(tmp_path: Path) -> None:
    p = kctl("--version", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("kctl ")
    h = kctl("--help", cwd=tmp_path)
    assert h.returncode == 0
    for cmd in ("init", "render", "doctor", "up", "down", "status"):
        assert cmd in h.stdout


def test_init_then_render_writes_seed_files(tmp_path: Path) -> None:
    p = kctl("init", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    data = yaml.safe_load((tmp_path / "kctl.yaml").read_text())
    assert data["name"] == "logger" and [n["hostname"] for n in data["nodes"]] == ["logger1", "logger2", "logger3"]
    again = kctl("init", cwd=tmp_path)
    assert again.returncode == 1 and "--force" in again.stderr
    r = kctl("render", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    state = tmp_path / ".kctl" / "logger"
    assert r.stdout.strip() == str(state / "compose.yaml")
    assert (state / "logger2" / "conf" / "myid").read_text().strip() == "2"
    assert "server.3=logger3:2888:3888:participant;2181" in (state / "logger1" / "conf" / "zoo.cfg.dynamic").read_text()


def test_render_other_file_and_out(tmp_path: Path) -> None:
    (tmp_path / "other.yaml").write_text("name: other\ntopology: split\n")
    out = tmp_path / "out"
    r = kctl("render", "-f", "other.yaml", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (out / "zk2" / "conf" / "zoo.cfg").exists() and (out / "kafka3" / "conf" / "server.properties").exists()
    assert not (out / "kafka3" / "conf" / "zoo.cfg").exists()


def test_bad_spec_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "kctl.yaml").write_text(
        "nodes:\n  - {id: 1, hostname: logger1}\n  - {id: 1, hostname: Logger_2}\nkafka:\n  min_insync_replicas: 9\n"
        "  colour: blue\n"
    )
    r = kctl("render", cwd=tmp_path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "nodes.1.hostname" in r.stderr and "kafka.colour: unknown setting" in r.stderr
    assert "hint:" in r.stderr
    assert not (tmp_path / ".kctl").exists()
    u = kctl("up", cwd=tmp_path)
    assert u.returncode == 2 and not (tmp_path / ".kctl").exists()


def test_invalid_yaml_is_clean(tmp_path: Path) -> None:
    (tmp_path / "kctl.yaml").write_text("nodes: [\n")
    r = kctl("render", cwd=tmp_path)
    assert r.returncode == 2 and "not valid YAML" in r.stderr and "Traceback" not in r.stderr


def test_missing_spec_hints_init(tmp_path: Path) -> None:
    r = kctl("render", cwd=tmp_path)
    assert r.returncode == 2 and "kctl init" in r.stderr


def test_even_ensemble_warns_but_renders(tmp_path: Path) -> None:
    (tmp_path / "kctl.yaml").write_text(
        "nodes:\n" + "".join(f"  - {{id: {i}, hostname: logger{i}}}\n" for i in (1, 2, 3, 4)))
    r = kctl("render", cwd=tmp_path)
    assert r.returncode == 0 and "not 4" in r.stderr


def test_doctor_json(tmp_path: Path) -> None:
    kctl("init", cwd=tmp_path)
    r = kctl("doctor", "-o", "json", cwd=tmp_path)
    checks = json.loads(r.stdout)
    names = {c["name"] for c in checks}
    assert {"docker engine", "compose plugin", "java", "disk", "memory", "host ports", "spec"} <= names
    failed = [c for c in checks if not c["ok"] and c["required"]]
    assert r.returncode == (1 if failed else 0)
    assert all(c["hint"] for c in failed)


def test_doctor_reports_unreachable_engine_with_hint(tmp_path: Path) -> None:
    r = kctl("doctor", "-o", "json", cwd=tmp_path, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    engine = next(c for c in json.loads(r.stdout) if c["name"] == "docker engine")
    assert engine["ok"] is False and "dockerd" in engine["hint"]
    assert r.returncode == 1


def test_usage_errors_are_clean(tmp_path: Path) -> None:
    for args in (["produce"], ["zk", "foo"], ["up", "--timeout", "-5"], ["status", "-o", "xml"], ["nosuch"]):
        r = kctl(*args, cwd=tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and ("Usage:" in r.stderr or "Error" in r.stderr), (args, r.stderr)


def _state_with_logs(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text("name: t\n")
    logs = tmp_path / ".kctl" / "t" / "logger1" / "logs"
    (logs / "kafka").mkdir(parents=True)
    (logs / "zookeeper").mkdir()
    (logs / "kafka" / "server.log").write_text("k1\nk2\nk3\n")
    (logs / "zookeeper" / "zookeeper.log").write_text("z1\nz2\n")
    return logs


def test_logs_reads_the_state_dir_without_docker(tmp_path: Path) -> None:
    _state_with_logs(tmp_path)
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # a stopped node: nothing to exec into
    r = kctl("logs", "logger1", "-f", "spec.yaml", "--tail", "2", cwd=tmp_path, env=no_engine)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "k2\nk3\n"
    z = kctl("logs", "1", "-f", "spec.yaml", "--service", "zookeeper", "-n", "1", cwd=tmp_path, env=no_engine)
    assert z.returncode == 0 and z.stdout == "z2\n", z.stderr
    missing = kctl("logs", "logger2", "-f", "spec.yaml", cwd=tmp_path)
    assert missing.returncode == 1 and "does not exist" in missing.stderr and "kctl up" in missing.stderr
    bad = kctl("logs", "logger1", "-f", "spec.yaml", "--service", "nginx", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown service" in bad.stderr and "Traceback" not in bad.stderr


def test_restart_names_a_bad_service_or_node_before_it_asks_any_cluster(tmp_path: Path) -> None:
    (tmp_path / "kctl.yaml").write_text("name: t\n")
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # nothing runs: the input is what is wrong
    for args, said in ((["--rolling", "--service", "nodee"], "unknown service 'nodee'"),
                       (["logger9", "--service", "kafka"], "logger9"),
                       (["--rolling", "--service", "controller"], "no KRaft controllers")):
        r = kctl("restart", *args, "--yes", cwd=tmp_path, env=no_engine)
        assert r.returncode == 2 and said in r.stderr, (args, r.stderr)
        assert "not running" not in r.stderr and "docker" not in r.stderr.lower(), (args, r.stderr)
        assert "Traceback" not in r.stderr and "hint:" in r.stderr, (args, r.stderr)
    assert not (tmp_path / ".kctl").exists()  # nothing made for it


@pytest.mark.timeout(60)  # a readline that never returns fails instead of hanging the run
def test_logs_follow_is_F_and_f_stays_the_spec(tmp_path: Path) -> None:
    logs = _state_with_logs(tmp_path)
    # Ctrl-C as in a terminal: a runner started in the background (`make test &`) hands its children SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler.
    p = subprocess.Popen([sys.executable, "-m", "kctl", "logs", "logger1", "-f", "spec.yaml", "-F", "-n", "1"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout is not None
        assert p.stdout.readline() == "k3\n"
        with (logs / "kafka" / "server.log").open("a") as f:
            f.write("k4 written while following\n")
        assert p.stdout.readline() == "k4 written while following\n"
        p.send_signal(signal.SIGINT)  # how an operator stops --follow: a clean exit
        assert p.wait(timeout=20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.stderr is not None and "Traceback" not in p.stderr.read()
