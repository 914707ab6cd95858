"""engine hosts' pure parts: ssh's command lines and failure messages, the Java check (kctl/runtime/ssh.py,
kctl/runtime/hosts.py). Nothing here reaches a host."""

from __future__ import annotations

import shlex

import pytest

from kctl.runtime import hosts, ssh
from kctl.spec import ClusterSpec


def spec(**ssh_settings: object) -> ClusterSpec:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    return ClusterSpec.model_validate({"engine": "hosts", "nodes": nodes, "state_dir": "/tmp/kctl-state",
                                       "ssh": {"user": "ops", **ssh_settings}})


def test_the_remote_command_is_quoted_and_runs_through_sudo() -> None:
    s = ssh.Ssh(spec())
    line = s.remote(["sh", "-c", "echo 'a b'; rm -rf /x"])
    assert line.startswith("sudo -n -- ")
    assert shlex.split(line)[3:] == ["sh", "-c", "echo 'a b'; rm -rf /x"]
    assert s.remote(["id"], user="logger") == "sudo -n -u logger -- id"
    assert s.remote(["id"], root=False) == "id"
    assert ssh.Ssh(spec(user="root")).remote(["id"]) == "id"  # root needs no sudo


def test_ssh_never_prompts_checks_host_keys_and_uses_the_key_given() -> None:
    argv = ssh.Ssh(spec(key_file="/keys/id", port=2222, connect_timeout=4)).base_argv(spec().nodes[1])
    joined = " ".join(argv)
    for opt in ("BatchMode=yes", "StrictHostKeyChecking=accept-new", "UserKnownHostsFile=/tmp/kctl-state/known_hosts",
                "ConnectTimeout=4", "IdentitiesOnly=yes"):
        assert opt in joined, opt
    assert argv[:3] == ["ssh", "-p", "2222"] and argv[-1] == "10.9.0.2"
    assert argv[argv.index("-i"):argv.index("-i") + 2] == ["-i", "/keys/id"]
    assert argv[argv.index("-l"):argv.index("-l") + 2] == ["-l", "ops"]


def test_a_shared_connection_is_never_reused_with_another_key() -> None:
    def control(s: ClusterSpec) -> str:
        return next(a for a in ssh.Ssh(s).base_argv(s.nodes[0]) if a.startswith("ControlPath="))

    assert control(spec(key_file="/keys/a")) != control(spec(key_file="/keys/b"))
    assert control(spec(key_file="/keys/a")) == control(spec(key_file="/keys/a"))


@pytest.mark.parametrize(("stderr", "said"), [
    ("ops@10.9.0.1: Permission denied (publickey).", "the host refused the login (wrong user or key)"),
    ("Host key verification failed.", "the host's key differs from the one recorded"),
    ("ssh: connect to host 10.9.0.1 port 22: Connection refused", "nothing listens on the ssh port"),
    ("ssh: connect to host 10.9.0.9 port 22: Connection timed out", "the host did not answer (timed out)"),
    ("ssh: Could not resolve hostname nohost: Name or service not known", "the host name does not resolve"),
    ("Warning: Identity file /nope not accessible: No such file or directory.\nLoad key \"/nope\": x",
     "the key file cannot be read"),
])
def test_ssh_failures_are_named(stderr: str, said: str) -> None:
    what, hint = ssh._cause(stderr)
    assert what.startswith(said) and hint


@pytest.mark.parametrize(("line", "major"), [
    ('openjdk version "17.0.13" 2024-10-15', 17), ('openjdk version "21" 2023-09-19', 21),
    ('java version "1.8.0_402"', 8), ("bash: java: command not found", None), ("", None)])
def test_java_major(line: str, major: int | None) -> None:
    assert hosts._java_major(line) == major


def test_doctor_checks_the_hosts_not_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from pathlib import Path

    from kctl import doctor

    s = spec()
    monkeypatch.setattr(hosts.HostsEngine, "host_problems",
                        lambda self, sp: [(sp.nodes[0], None), (sp.nodes[1], "logger2 (10.9.0.2:22): no answer"),
                                          (sp.nodes[2], None)])
    checks = doctor.run_checks(s, Path(str(tmp_path)))
    names = [c.name for c in checks]
    assert names == ["ssh", "host logger1", "host logger2", "host logger3", "disk"]  # no Docker, Compose, ports
    assert [c.ok for c in checks[1:4]] == [True, False, True]
    assert checks[2].detail == "logger2 (10.9.0.2:22): no answer"
