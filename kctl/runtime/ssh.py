"""engine hosts: commands on a node's host, through OpenSSH's own ``ssh`` client.

Why the ``ssh`` command rather than a Python SSH library: it is what an operator already has and trusts, it
reads their ``~/.ssh/config`` (jump hosts, agents, certificates) as every other ssh session does, and its
connection multiplexing (ControlMaster) makes the many short commands of a status or a roll cheap: one TCP
and key exchange per host for a few minutes, not one per command. No new dependency.

Host keys are checked against ``ssh.known_hosts_file`` (default: known_hosts in the state dir): a host seen for
the first time is added, a host whose key changed is refused (StrictHostKeyChecking=accept-new). Nothing is
ever asked for interactively (BatchMode): a password prompt is a clear failure, not a hang.

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
from kctl.spec import ClusterSpec, NodeSpec

SSH_FAILED = 255  # ssh's own exit code for a connection, authentication or host key failure


class SshError(KctlError):
    """ssh could not run a command on a host (unreachable, refused, wrong key, changed host key)."""

    exit_code = 1


def _cause(stderr: str) -> tuple[str, str]:
    """(what went wrong, hint) from ssh's stderr."""
    text = stderr.strip()
    low = text.lower()
    if "permission denied" in low:
        return ("the host refused the login (wrong user or key)",
                "check ssh.user and ssh.key_file in kctl.yaml; the key's public half must be in the user's"
                " ~/.ssh/authorized_keys on the host")
    if "host key verification failed" in low or "remote host identification has changed" in low:
        return ("the host's key differs from the one recorded",
                "if the host was reinstalled, remove its line from the known-hosts file (ssh-keygen -R HOST -f"
                " FILE); otherwise do not connect")
    if "connection refused" in low:
        return "nothing listens on the ssh port (connection refused)", "is sshd running there, on ssh.port?"
    if "timed out" in low or "no route to host" in low or "network is unreachable" in low:
        return "the host did not answer (timed out)", "is the address right and the host up? see ssh.connect_timeout"
    if "could not resolve" in low or "name or service not known" in low:
        return "the host name does not resolve", "check nodes[].advertised_host"
    if "no such file" in low and "identity" in low or "load key" in low:
        return "the key file cannot be read", "check ssh.key_file (a private key, mode 0600)"
    return (text.splitlines()[-1] if text else "ssh failed"), "try the same `ssh` by hand to see why"


@dataclass(frozen=True)
class Ssh:
    """How kctl reaches the hosts of one cluster."""

    spec: ClusterSpec

    @property
    def known_hosts(self) -> Path:
        if self.spec.ssh.known_hosts_file:
            return Path(self.spec.ssh.known_hosts_file)
        return Path(self.spec.state_dir or ".") / "known_hosts"

    @staticmethod
    def control_dir() -> Path:
        d = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"kctl-ssh-{os.getuid()}"
        d.mkdir(mode=0o700, exist_ok=True)
        return d

    def address(self, node: NodeSpec) -> str:
        return node.advertised_host or node.hostname

    def _login_id(self) -> str:
        """What a shared connection must match beyond host, port and user (ssh's own %C): the key and the
        known-hosts file. A master connection made with another key must never carry a command for this one
        (a wrong ssh.key_file would seem to work for as long as the master lived)."""
        import hashlib

        s = self.spec.ssh
        return hashlib.sha256(f"{s.key_file}\0{self.known_hosts}".encode()).hexdigest()[:10]

    def base_argv(self, node: NodeSpec) -> list[str]:
        s = self.spec.ssh
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        argv = ["ssh", "-p", str(s.port),
                "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={s.connect_timeout}",
                "-o", "StrictHostKeyChecking=accept-new",
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir()}/{self._login_id()}-%C",
                "-o", "ControlPersist=120", "-o", "LogLevel=ERROR"]
        if s.key_file:
            argv += ["-i", s.key_file, "-o", "IdentitiesOnly=yes"]
        if s.user:
            argv += ["-l", s.user]
        return [*argv, self.address(node)]

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
            what, hint = _cause(err)
            raise SshError(f"{node.hostname} ({self.address(node)}:{self.spec.ssh.port}): {what}", hint=hint)
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
                what, hint = _cause(err)
                raise SshError(f"{node.hostname} ({self.address(node)}): {what}", hint=hint)
            raise KctlError(f"{node.hostname}: copying the bundle failed (exit {proc.returncode}): {err[-500:]}",
                            hint=f"is there room in {remote_dir} on {self.address(node)}?")
