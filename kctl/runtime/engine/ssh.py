"""engine hosts: commands on a node's host, through OpenSSH's own ``ssh`` client.

Why the ``ssh`` command rather than a Python SSH library: it is what an operator already has and trusts, it
reads their ``~/.ssh/config`` (jump hosts, agents, certificates) as every other ssh session does, and its
connection multiplexing (ControlMaster) makes the many short commands of a status or a roll cheap: one TCP
and key exchange per host for a few minutes, not one per command. No new dependency.

Host keys are checked as OpenSSH checks them by default: against the user's own known-hosts files
(~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts, or what ~/.ssh/config names), or ``ssh.known_hosts_file`` when
set, with StrictHostKeyChecking=yes: a host whose key is not known, or differs, is refused. Trust on first
use is an explicit opt-in (``ssh.trust_on_first_use``, ``kctl up --accept-new-host-keys``): :meth:`Ssh.trust_new`
then records an unknown host's key (StrictHostKeyChecking=accept-new, on a connection of its own) and names its
fingerprint, which ``kctl up`` prints per host. Nothing is ever asked for interactively (BatchMode): a password
prompt is a clear failure, not a hang. The connection-sharing sockets live in a directory of the user's own,
mode 0700, checked before each use.

Every failure of ssh itself (exit 255) becomes :class:`SshError` naming the host and the likely cause; the
exit code of the remote command is returned as it is.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec, NodeSpec

SSH_FAILED = 255  # ssh's own exit code for a connection, authentication or host key failure


class SshError(KctlError):
    """ssh could not run a command on a host (unreachable, refused, wrong key, changed host key)."""

    exit_code = 1


def fingerprint_of(keygen_out: str) -> str | None:
    """"ED25519 SHA256:..." from ``ssh-keygen -l -F HOST``'s first key line ("HOST TYPE SHA256:... [comment]",
    after a "# Host ... found" line), or None."""
    import re

    for line in keygen_out.splitlines():
        m = re.match(r"^\S+ (\S+) (SHA256:\S+)", line)
        if m and not line.startswith("#"):
            return f"{m.group(1)} {m.group(2)}"
    return None


def _cause(stderr: str) -> tuple[str, str]:
    """(what went wrong, hint) from ssh's stderr."""
    text = stderr.strip()
    low = text.lower()
    if "permission denied" in low:
        return ("the host refused the login (wrong user or key)",
                "check ssh.user and ssh.key_file in kctl.yaml; the key's public half must be in the user's"
                " ~/.ssh/authorized_keys on the host")
    if "remote host identification has changed" in low or "host key for" in low and "has changed" in low:
        return ("the host's key differs from the one recorded",
                "if the host was reinstalled, check its new key's fingerprint and remove its old line from the"
                " known-hosts file (ssh-keygen -R HOST -f FILE); otherwise do not connect")
    add = ("add it with its fingerprint checked (`ssh-keyscan -p PORT HOST >> ~/.ssh/known_hosts`, compare"
           " `ssh-keygen -lf ~/.ssh/known_hosts` with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on"
           " the host), or trust it on first use: `kctl up --accept-new-host-keys` or ssh.trust_on_first_use: true")
    if "host key is known for" in low:
        return "the host's key is in no known-hosts file (StrictHostKeyChecking)", add
    if "host key verification failed" in low:
        return ("the host's key is in no known-hosts file, or differs from the one recorded",
                f"run the same `ssh` by hand to see which; unknown: {add}")
    if "connection refused" in low:
        return "nothing listens on the ssh port (connection refused)", "is sshd running there, on ssh.port?"
    if "timed out" in low or "no route to host" in low or "network is unreachable" in low:
        return "the host did not answer (timed out)", "is the address right and the host up? see ssh.connect_timeout"
    if "could not resolve" in low or "name or service not known" in low:
        return "the host name does not resolve", "check nodes[].advertised_host"
    if "no such file" in low and "identity" in low or "load key" in low:
        return "the key file cannot be read", "check ssh.key_file (a private key, mode 0600)"
    return (text.splitlines()[-1] if text else "ssh failed"), "try the same `ssh` by hand to see why"


def _quoted(path: Path) -> str:
    """A path as one value of ssh's -o (ssh splits UserKnownHostsFile's value on blanks)."""
    text = str(path)
    return f'"{text}"' if any(c.isspace() for c in text) else text


def check_control_dir(d: Path) -> Path:
    """``d`` as the connection-sharing directory: made 0700 when missing; refused unless it is a directory (no
    symlink) of this user's, closed to group and others (another user's sockets there would carry kctl's
    commands, or kctl's theirs)."""
    import stat

    try:
        d.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SshError(f"cannot make the ssh connection-sharing directory {d}: {exc.strerror or exc}",
                       hint="set XDG_RUNTIME_DIR to a directory of your own") from None
    st = os.lstat(d)
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory" + (" (a symlink)" if stat.S_ISLNK(st.st_mode) else "")
    elif st.st_uid != os.getuid():
        problem = f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    elif st.st_mode & 0o077:
        problem = f"is open to other users (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise SshError(f"the ssh connection-sharing directory {d} {problem}: kctl shares no connection there",
                       hint="remove it (kctl makes it again, yours, mode 0700), or set XDG_RUNTIME_DIR to a"
                            " directory of your own")
    return d


@dataclass(frozen=True)
class Ssh:
    """How kctl reaches the hosts of one cluster."""

    spec: ClusterSpec

    @property
    def known_hosts(self) -> Path | None:
        """ssh.known_hosts_file, or None: OpenSSH's own files (the user's ~/.ssh/known_hosts, the system's)."""
        if self.spec.ssh.known_hosts_file:
            return Path(self.spec.ssh.known_hosts_file).expanduser()
        return None

    def check_known_hosts(self) -> None:
        """A known-hosts file named in kctl.yaml must be a regular file (or not exist yet): /dev/null, a device or
        a directory would check no key at all."""
        import stat

        path = self.known_hosts
        if path is None:
            return
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise SshError(f"ssh.known_hosts_file {path}: {exc.strerror or exc}",
                           hint="name a readable known-hosts file, or leave it out for ~/.ssh/known_hosts") from None
        if not stat.S_ISREG(st.st_mode):
            raise SshError(f"ssh.known_hosts_file {path} is not a regular file: it would check no host key",
                           hint="name a known-hosts file (ssh-keyscan's lines), or leave it out for OpenSSH's"
                                " own ~/.ssh/known_hosts")

    @staticmethod
    def control_dir() -> Path:
        return check_control_dir(Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"kctl-ssh-{os.getuid()}")

    def address(self, node: NodeSpec) -> str:
        return node.advertised_host or node.hostname

    def _login_id(self) -> str:
        """What a shared connection must match beyond host, port and user (ssh's own %C): the key and the
        known-hosts file. A master connection made with another key must never carry a command for this one
        (a wrong ssh.key_file would seem to work for as long as the master lived)."""
        import hashlib

        s = self.spec.ssh
        return hashlib.sha256(f"{s.key_file}\0{self.known_hosts or '-'}".encode()).hexdigest()[:10]

    def _options(self, *, accept_new: bool = False) -> list[str]:
        s = self.spec.ssh
        self.check_known_hosts()
        argv = ["ssh", "-p", str(s.port),
                "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={s.connect_timeout}",
                # yes: whatever ~/.ssh/config says (the command line wins), an unknown or changed key is refused
                "-o", f"StrictHostKeyChecking={'accept-new' if accept_new else 'yes'}"]
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={_quoted(self.known_hosts)}"]
        argv += ["-o", "LogLevel=ERROR"]
        if s.key_file:
            argv += ["-i", s.key_file, "-o", "IdentitiesOnly=yes"]
        if s.user:
            argv += ["-l", s.user]
        return argv

    def base_argv(self, node: NodeSpec) -> list[str]:
        argv = self._options()
        argv += ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                 "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir()}/{self._login_id()}-%C",
                 "-o", "ControlPersist=120"]
        return [*argv, self.address(node)]

    # ----- host keys ------------------------------------------------------------------------------

    def _host_key_name(self, node: NodeSpec) -> str:
        addr = self.address(node)
        return addr if self.spec.ssh.port == 22 else f"[{addr}]:{self.spec.ssh.port}"

    def known_hosts_files(self, node: NodeSpec) -> list[Path]:
        """The files ssh checks this host's key against: ssh.known_hosts_file, or what ``ssh -G`` says (the
        user's and the system's, after ~/.ssh/config) for the host."""
        if self.known_hosts is not None:
            return [self.known_hosts]
        argv = ["ssh", "-G", "-p", str(self.spec.ssh.port), *(["-l", self.spec.ssh.user] if self.spec.ssh.user
                                                                else []), self.address(node)]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        files: list[Path] = []
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            if key in ("userknownhostsfile", "globalknownhostsfile"):
                files += [Path(v).expanduser() for v in value.split() if v.lower() != "none"]
        return files or [Path("~/.ssh/known_hosts").expanduser(), Path("/etc/ssh/ssh_known_hosts")]

    def known_key(self, node: NodeSpec) -> tuple[Path, str] | None:
        """(file, "TYPE SHA256:...") of the host's first recorded key, or None when no file knows it."""
        name = self._host_key_name(node)
        for f in self.known_hosts_files(node):
            if not f.is_file():
                continue
            try:
                proc = subprocess.run(["ssh-keygen", "-l", "-F", name, "-f", str(f)], capture_output=True,
                                      text=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                continue
            fp = fingerprint_of(proc.stdout) if proc.returncode == 0 else None
            if fp:
                return f, fp
        return None

    def trust_new(self, node: NodeSpec) -> str | None:
        """With ssh.trust_on_first_use: a host whose key no known-hosts file holds gets it recorded (a
        connection of its own with StrictHostKeyChecking=accept-new, into ssh.known_hosts_file or the user's
        ~/.ssh/known_hosts); what to log: the host, the key's fingerprint, the file. None when nothing was
        trusted (already known, opted out, or the host did not answer: the checks that follow say why)."""
        if not self.spec.ssh.trust_on_first_use or self.known_key(node) is not None:
            return None
        if self.known_hosts is not None:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        argv = [*self._options(accept_new=True), "-o", "ControlMaster=no", "-o", "ControlPath=none",
                self.address(node), "true"]
        try:
            subprocess.run(argv, capture_output=True, timeout=self.spec.ssh.connect_timeout + 20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = self.known_key(node)
        if found is None:
            return None
        where, fp = found
        return (f"{node.hostname} ({self._host_key_name(node)}): host key {fp} trusted on first use"
                f" (ssh.trust_on_first_use), recorded in {where}")

    def _failed(self, node: NodeSpec, stderr: str) -> SshError:
        what, hint = _cause(stderr)
        legacy = Path(self.spec.state_dir or ".") / "known_hosts"
        if "no known-hosts file" in what and self.known_hosts is None and legacy.is_file():
            hint += (f"; an earlier kctl recorded host keys in {legacy}: to keep trusting those, set"
                     f" ssh.known_hosts_file: {legacy}")
        return SshError(f"{node.hostname} ({self.address(node)}:{self.spec.ssh.port}): {what}", hint=hint)

    def remote(self, argv: list[str], *, root: bool = True, user: str | None = None) -> str:
        """The remote shell's command line: ``argv`` quoted, through ``sudo -n`` for root or another user."""
        cmd = shlex.join(argv)
        if user is not None:
            return f"sudo -n -u {shlex.quote(user)} -- {cmd}"
        if root and self.spec.ssh.user != "root":
            return f"sudo -n -- {cmd}"
        return cmd

    def run(self, node: NodeSpec, argv: list[str], *, root: bool = True, user: str | None = None,
            timeout: float = 60, stdin: bytes | None = None, stderr: bool = True,
            shell: str | None = None) -> tuple[int, str]:
        """Run ``argv`` (or the shell line ``shell``, as root unless ``root=False``) on the node's host:
        (exit code, output). SshError when ssh itself failed."""
        if shell is not None:
            argv = ["sh", "-c", shell]
        line = self.remote(argv, root=root, user=user)
        try:
            proc = subprocess.run([*self.base_argv(node), line], input=stdin, capture_output=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SshError(f"{node.hostname} ({self.address(node)}): `{shlex.join(argv)[:200]}` did not finish"
                           f" in {timeout:.0f}s", hint="is the host overloaded? try the same command over ssh"
                           ) from None
        except FileNotFoundError:
            raise SshError("the `ssh` command is not installed here",
                           hint="install OpenSSH's client (Debian: apt-get install openssh-client)") from None
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode == SSH_FAILED and not proc.stdout:
            raise self._failed(node, err)
        out = proc.stdout.decode("utf-8", "replace")
        return proc.returncode, out + (err if stderr else "")

    def check(self, node: NodeSpec, argv: list[str] | None = None, *, shell: str | None = None,
              timeout: float = 60, what: str = "", root: bool = True, stdin: bytes | None = None) -> str:
        """:meth:`run`, and a KctlError naming the host when the command fails."""
        code, out = self.run(node, argv or [], shell=shell, timeout=timeout, root=root, stdin=stdin)
        if code != 0:
            said = what or f"`{shell or shlex.join(argv or [])}`"
            raise KctlError(f"{node.hostname}: {said} failed (exit {code}): {out.strip()[-800:]}",
                            hint=f"run it over ssh on {self.address(node)} to see more")
        return out

    def send_dir(self, node: NodeSpec, local: Path, remote_dir: str, timeout: float = 600) -> None:
        """Copy the directory ``local`` to ``remote_dir`` on the host (made afresh, root's, mode 0700), as a tar
        stream over the one ssh connection (hard links and modes kept)."""
        tar = subprocess.Popen(["tar", "-C", str(local), "-cf", "-", "."], stdout=subprocess.PIPE)
        q = shlex.quote(remote_dir)
        line = self.remote(["sh", "-c", f"rm -rf {q} && mkdir -m 0700 -p {q} && tar -C {q} -xpf -"])
        try:
            proc = subprocess.run([*self.base_argv(node), line], stdin=tar.stdout, capture_output=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            tar.kill()
            raise SshError(f"{node.hostname}: copying {local} did not finish in {timeout:.0f}s") from None
        finally:
            if tar.stdout is not None:
                tar.stdout.close()
            tar.wait(timeout=30)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace")
            if proc.returncode == SSH_FAILED:
                raise self._failed(node, err)
            raise KctlError(f"{node.hostname}: copying the bundle failed (exit {proc.returncode}): {err[-500:]}",
                            hint=f"is there room in {remote_dir} on {self.address(node)}?")

    def install_bundle(self, node: NodeSpec, local: Path, remote_dir: str, script: str) -> list[str]:
        """Ship the bundle directory ``local`` to ``remote_dir`` and run its ``script`` (as root), then remove the
        copy: what the script says to restart (its ``restart: NAME`` lines). KctlError when the script fails."""
        self.send_dir(node, local, remote_dir)
        try:
            out = self.check(node, [f"{remote_dir}/{script}"], timeout=600, what=script)
        finally:
            try:
                self.run(node, ["rm", "-rf", remote_dir], timeout=60)
            except KctlError:
                pass
        return [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("restart:")]
