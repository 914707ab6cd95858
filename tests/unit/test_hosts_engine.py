"""engine hosts' pure parts: ssh's command lines and failure messages, the Java check (kctl/runtime/engine/ssh.py,
kctl/runtime/engine/hosts.py). Nothing here reaches a host."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from kctl.errors import SpecError
from kctl.model.spec import ClusterSpec, parse_spec
from kctl.runtime.engine import hosts, ssh


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
    for opt in ("BatchMode=yes", "StrictHostKeyChecking=yes", "ConnectTimeout=4", "IdentitiesOnly=yes"):
        assert opt in joined, opt
    assert argv[:3] == ["ssh", "-p", "2222"] and argv[-1] == "10.9.0.2"
    assert argv[argv.index("-i"):argv.index("-i") + 2] == ["-i", "/keys/id"]
    assert argv[argv.index("-l"):argv.index("-l") + 2] == ["-l", "ops"]


def options(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-o")


def test_host_keys_are_checked_against_openssh_own_files_strictly_by_default(tmp_path: Path) -> None:
    """No known-hosts file of kctl's own: OpenSSH's (~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts, or what
    ~/.ssh/config says) with StrictHostKeyChecking=yes, whatever ~/.ssh/config says; trust on first use turned
    on changes no ordinary command's options (only trust_new's own connection accepts a new key)."""
    for settings in ({}, {"trust_on_first_use": True}):
        opts = options(ssh.Ssh(spec(**settings)).base_argv(spec().nodes[0]))
        assert opts["StrictHostKeyChecking"] == "yes", settings
        assert "UserKnownHostsFile" not in opts and "GlobalKnownHostsFile" not in opts, settings
    mine = tmp_path / "known hosts"
    opts = options(ssh.Ssh(spec(known_hosts_file=str(mine))).base_argv(spec().nodes[0]))
    assert opts["UserKnownHostsFile"] == f'"{mine}"'  # quoted: ssh splits the value on blanks
    assert opts["StrictHostKeyChecking"] == "yes"


@pytest.mark.parametrize("path", ["/dev/null", "/dev/stdin", "none", ""])
def test_a_known_hosts_file_that_checks_nothing_is_refused_at_load(path: str) -> None:
    nodes = [{"id": 1, "hostname": "logger1", "advertised_host": "10.9.0.1"}]
    with pytest.raises(SpecError) as exc:
        parse_spec({"engine": "hosts", "nodes": nodes, "ssh": {"known_hosts_file": path}})
    assert "ssh.known_hosts_file" in exc.value.message and "known-hosts file" in exc.value.message


def test_a_known_hosts_file_that_is_no_regular_file_is_refused_before_any_login(tmp_path: Path) -> None:
    link = tmp_path / "kh-link"
    link.symlink_to("/dev/null")  # made after kctl.yaml was checked, or a relative path to a device
    fifo = tmp_path / "kh-fifo"
    os.mkfifo(fifo)
    for bad in (link, fifo, tmp_path):
        s = ssh.Ssh(spec(known_hosts_file=str(tmp_path / "ok")).model_copy(
            update={"ssh": spec().ssh.model_copy(update={"known_hosts_file": str(bad)})}))
        with pytest.raises(ssh.SshError) as exc:
            s.base_argv(spec().nodes[0])
        assert "is not a regular file" in exc.value.message and exc.value.hint, bad
    ssh.Ssh(spec(known_hosts_file=str(tmp_path / "missing"))).check_known_hosts()  # a file yet to be made: fine


def test_the_connection_sharing_directory_is_made_private_and_checked(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    d = ssh.Ssh.control_dir()
    assert d == tmp_path / f"kctl-ssh-{os.getuid()}"
    st = os.lstat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert options(ssh.Ssh(spec()).base_argv(spec().nodes[0]))["ControlPath"].startswith(f"{d}/")
    os.chmod(d, 0o755)  # group and others may enter: refused, not used
    with pytest.raises(ssh.SshError) as exc:
        ssh.Ssh(spec()).base_argv(spec().nodes[0])
    assert "is open to other users (mode 0755)" in exc.value.message
    os.chmod(d, 0o700)
    if os.getuid() == 0:  # another user's directory (only root can make one for the test)
        os.chown(d, 4321, 4321)
        with pytest.raises(ssh.SshError) as exc:
            ssh.Ssh.control_dir()
        assert "belongs to uid 4321" in exc.value.message
    os.rmdir(d)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    d.symlink_to(elsewhere)  # planted by someone else before kctl's first run
    with pytest.raises(ssh.SshError) as exc:
        ssh.Ssh.control_dir()
    assert "is not a directory (a symlink)" in exc.value.message


def keyscan_line(tmp_path: Path, name: str) -> tuple[str, str]:
    """A known-hosts line for ``name`` with a fresh host key, and that key's fingerprint ("ED25519 SHA256:...")."""
    import subprocess

    key = tmp_path / f"hostkey-{len(list(tmp_path.glob('hostkey-*')))}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    fp = subprocess.run(["ssh-keygen", "-l", "-f", f"{key}.pub"], capture_output=True, text=True,
                        check=True).stdout.split()
    return f"{name} {key.with_suffix('.pub').read_text().split(' ')[0]} " \
           f"{key.with_name(key.name + '.pub').read_text().split()[1]}\n", f"ED25519 {fp[1]}"


def test_first_use_is_trusted_only_when_opted_in_through_accept_new_and_said_with_its_fingerprint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    known = tmp_path / "kh" / "known_hosts"
    node = spec().nodes[0]
    line, fp = keyscan_line(tmp_path, "[10.9.0.1]:2222")
    connects: list[list[str]] = []
    real_run = subprocess.run

    def fake_run(argv: list[str], **kw: object) -> object:
        if argv[0] == "ssh":  # the host answers: ssh with accept-new records its key, as OpenSSH does
            connects.append(argv)
            if options(argv).get("StrictHostKeyChecking") == "accept-new":
                with open(known, "a") as f:
                    f.write(line)
            return subprocess.CompletedProcess(argv, 0, b"", b"")
        return real_run(argv, **kw)  # ssh-keygen itself, on the real file

    monkeypatch.setattr(subprocess, "run", fake_run)
    off = ssh.Ssh(spec(known_hosts_file=str(known), port=2222))
    assert off.trust_new(node) is None and connects == [] and not known.exists()  # not opted in: nothing

    on = ssh.Ssh(spec(known_hosts_file=str(known), port=2222, trust_on_first_use=True))
    said = on.trust_new(node)
    assert said == (f"logger1 ([10.9.0.1]:2222): host key {fp} trusted on first use (ssh.trust_on_first_use),"
                    f" recorded in {known}")
    (argv,) = connects
    opts = options(argv)
    assert opts["StrictHostKeyChecking"] == "accept-new" and opts["UserKnownHostsFile"] == str(known)
    assert opts["ControlPath"] == "none" and opts["ControlMaster"] == "no"  # a connection of its own
    assert argv[-2:] == ["10.9.0.1", "true"]
    assert on.known_key(node) == (known, fp)
    assert on.trust_new(node) is None and len(connects) == 1  # known now: no second first use


def test_a_host_already_in_the_users_known_hosts_is_not_trusted_again(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    user_file = tmp_path / "known_hosts"
    line, fp = keyscan_line(tmp_path, "10.9.0.2")
    user_file.write_text(line)
    s = ssh.Ssh(spec(trust_on_first_use=True))
    monkeypatch.setattr(ssh.Ssh, "known_hosts_files", lambda self, node: [tmp_path / "absent", user_file])
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: pytest.fail(f"connected: {argv}") if argv[0] == "ssh"
                        else real_run(argv, **kw))
    assert s.known_key(spec().nodes[1]) == (user_file, fp)
    assert s.trust_new(spec().nodes[1]) is None


def test_openssh_own_known_hosts_files_are_read_from_ssh_g(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    out = ("hostname 10.9.0.1\nuserknownhostsfile /home/ops/.ssh/known_hosts /home/ops/.ssh/known_hosts2\n"
           "globalknownhostsfile /etc/ssh/ssh_known_hosts none\n")
    seen: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: seen.append(argv) or
                        subprocess.CompletedProcess(argv, 0, out, ""))
    files = ssh.Ssh(spec(port=2200)).known_hosts_files(spec().nodes[0])
    assert files == [Path("/home/ops/.ssh/known_hosts"), Path("/home/ops/.ssh/known_hosts2"),
                     Path("/etc/ssh/ssh_known_hosts")]
    assert seen == [["ssh", "-G", "-p", "2200", "-l", "ops", "10.9.0.1"]]


def test_preflight_trusts_new_hosts_only_when_opted_in_and_says_so_per_host(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    asked: list[str] = []
    monkeypatch.setattr(ssh.Ssh, "trust_new", lambda self, node: asked.append(node.hostname) or
                        (f"{node.hostname}: trusted" if node.id != 2 else None))
    monkeypatch.setattr(hosts.HostsEngine, "host_checks", lambda self, sp: [(n, None, None) for n in sp.nodes])
    said: list[str] = []
    ready = "hosts: 3 reachable over ssh, with sudo, systemd and Java 17+; each one this cluster's node or bare"
    hosts.HostsEngine().preflight(spec(), {}, None, said.append)
    assert asked == [] and said == [ready]
    hosts.HostsEngine().preflight(spec(trust_on_first_use=True), {}, None, said.append)
    assert asked == ["logger1", "logger2", "logger3"]
    assert said[1:] == ["logger1: trusted", "logger3: trusted", ready]


def test_an_unknown_host_key_is_named_with_the_way_to_add_it_and_an_old_kctl_file_pointed_at(
        tmp_path: Path) -> None:
    strict = ("No ED25519 host key is known for 10.9.0.1 and you have requested strict checking.\r\n"
              "Host key verification failed.")
    what, hint = ssh._cause(strict)
    assert what == "the host's key is in no known-hosts file (StrictHostKeyChecking)"
    assert "ssh-keyscan" in hint and "--accept-new-host-keys" in hint
    changed = ("@@@@@@@@@@@\r\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n"
               "Host key for 10.9.0.1 has changed and you have requested strict checking.\r\n"
               "Host key verification failed.")
    assert ssh._cause(changed)[0] == "the host's key differs from the one recorded"
    state = tmp_path / "state"
    state.mkdir()
    (state / "known_hosts").write_text("")  # where an earlier kctl recorded the keys it trusted
    s = ssh.Ssh(spec().model_copy(update={"state_dir": str(state)}))
    err = s._failed(spec().nodes[0], strict)
    assert err.message.startswith("logger1 (10.9.0.1:22): the host's key is in no known-hosts file")
    assert f"ssh.known_hosts_file: {state / 'known_hosts'}" in (err.hint or "")


def test_down_volumes_never_deletes_a_known_hosts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.cluster import lifecycle
    from kctl.runtime.engine import engines

    class Gone:
        def client(self) -> None:
            return None

        def containers(self, spec: ClusterSpec, dc: object) -> list[object]:
            return []

        def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: object) -> int:
            return 0

        def check_before_down(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool) -> None:
            return None

    monkeypatch.setattr(engines, "for_spec", lambda _spec: Gone())
    state = tmp_path / "state"
    (state / "logger1" / "data").mkdir(parents=True)
    (state / "logger1" / "data" / "x").write_text("data")
    (state / "keys").mkdir()
    (state / "keys" / "known_hosts").write_text("10.9.0.1 ssh-ed25519 AAAA\n")  # ssh.known_hosts_file
    (state / "known_hosts").write_text("10.9.0.2 ssh-ed25519 AAAA\n")  # an earlier kctl's own
    s = spec(known_hosts_file=str(state / "keys" / "known_hosts"))
    said: list[str] = []
    lifecycle.down(s, state, volumes=True, graceful=False, progress=said.append)
    left = sorted(str(p.relative_to(state)) for p in state.rglob("*"))
    assert left == ["keys", "keys/known_hosts", "known_hosts"]
    assert (state / "keys" / "known_hosts").read_text() == "10.9.0.1 ssh-ed25519 AAAA\n"
    assert any("host keys are never deleted" in m for m in said)


def test_a_shared_connection_is_never_reused_with_another_key() -> None:
    def control(s: ClusterSpec) -> str:
        return next(a for a in ssh.Ssh(s).base_argv(s.nodes[0]) if a.startswith("ControlPath="))

    assert control(spec(key_file="/keys/a")) != control(spec(key_file="/keys/b"))
    assert control(spec(key_file="/keys/a")) == control(spec(key_file="/keys/a"))


@pytest.mark.parametrize(("stderr", "said"), [
    ("ops@10.9.0.1: Permission denied (publickey).", "the host refused the login (wrong user or key)"),
    ("Host key verification failed.", "the host's key is in no known-hosts file, or differs"),
    ("No ED25519 host key is known for 10.9.0.1 and you have requested strict checking.\nHost key verification"
     " failed.", "the host's key is in no known-hosts file (StrictHostKeyChecking)"),
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

    from kctl.runtime import doctor

    s = spec()
    monkeypatch.setattr(hosts.HostsEngine, "host_problems",
                        lambda self, sp: [(sp.nodes[0], None), (sp.nodes[1], "logger2 (10.9.0.2:22): no answer"),
                                          (sp.nodes[2], None)])
    checks = doctor.run_checks(s, Path(str(tmp_path)))
    names = [c.name for c in checks]
    assert names == ["ssh", "host logger1", "host logger2", "host logger3", "disk"]  # no Docker, Compose, ports
    assert [c.ok for c in checks[1:4]] == [True, False, True]
    assert checks[2].detail == "logger2 (10.9.0.2:22): no answer"


def test_node_add_says_a_host_key_trusted_on_first_use_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`kctl node add` reaches HostsEngine.start_one through lifecycle.start_node: the fingerprint line of its
    preflight reaches the command's progress, not a no-op."""
    from kctl.cluster import lifecycle
    from kctl.runtime.engine import engines

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    eng = hosts.HostsEngine()
    monkeypatch.setattr(engines, "for_spec", lambda _spec: eng)
    monkeypatch.setattr(ssh.Ssh, "trust_new", lambda self, node: f"{node.hostname}: trusted" if node.id == 3 else None)
    monkeypatch.setattr(hosts.HostsEngine, "host_checks", lambda self, sp: [(n, None, None) for n in sp.nodes])
    monkeypatch.setattr(hosts.HostsEngine, "deploy", lambda self, sp, state, say, services: None)
    said: list[str] = []
    lifecycle.start_node(spec(trust_on_first_use=True), tmp_path, "logger3", progress=said.append)
    assert "logger3: trusted" in said
