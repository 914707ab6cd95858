"""A fleet of throwaway Debian hosts that boot systemd as PID 1 and take ssh logins: test hosts for kctl's
"plain hosts with systemd" target (kctl installs per-host bundles over ssh onto such hosts).

    from tests.hosts.fleet import Fleet

    with Fleet(["logger1", "logger2"]) as fleet:
        fleet.ssh("logger1", "sudo -n systemctl is-system-running").stdout   # "running\\n"
        fleet["logger1"].ip, fleet.key_path                                  # what an ssh client needs
        fleet.restart("logger1")                                              # a reboot; waits for ssh again

Each run has its own id: a bridge network ``kctl-hosts-<runid>``, containers
``kctl-testhost-<runid>-<hostname>`` (hostname and network alias ``<hostname>``, so the hosts resolve each other
by name), an ed25519 key pair of its own in a temporary directory (its public key in
``/home/ops/.ssh/authorized_keys`` of every host), and the label ``io.kctl.testhost=<runid>`` on everything it
creates. ``close()`` (or leaving the ``with`` block) removes all of it, also after a start that failed half-way.
The hosts are reached on their bridge addresses from this machine: no port is published.

The image is ``kctl/testhost:bookworm``, built from tests/hosts/Dockerfile (see :func:`ensure_image`).

Docker settings of a systemd host (checked on Docker 20.10 with cgroup v1, this project's machines; the
Dockerfile's header says the same). All of them are needed, and nothing more:

- ``cgroupns="private"``: systemd must find its own cgroup at the root of the cgroup tree it sees. Docker's
  default on cgroup v1 is the host's namespace, where /proc/1/cgroup says ``/docker/<id>``, a path that does not
  exist under the container's cgroup mounts: PID 1 exits ("Failed to create /docker/<id>/init.scope control
  group").
- ``tmpfs={"/sys/fs/cgroup": ...}``: Docker mounts the cgroup hierarchies read-only (without it: "Failed to
  create /init.scope control group: Read-only file system"). With an empty tmpfs there, Docker does not mount
  them and systemd mounts them itself, writable, rooted at the container's cgroup (the private namespace): it
  manages its own subtree of the host's cgroups, nothing above it.
- ``cap_add=["SYS_ADMIN"]``: for systemd's own mounts (those cgroup hierarchies; the tmpfs on /run and /run/lock
  at every boot, so /run starts empty after ``docker restart`` as after a reboot) and for the mount namespaces
  of sandboxed units (PrivateTmp=, ProtectSystem=). Without it: "Failed to mount tmpfs at /run: Operation not
  permitted" and PID 1 exits. Not ``privileged=True``: the default seccomp profile, capability set and device
  rules stay.
- stop signal SIGRTMIN+3 (the image's STOPSIGNAL): systemd's halt, so ``docker stop``/``restart`` shut the host
  down cleanly in about a second instead of waiting for SIGKILL.

Not needed (tried): tmpfs on /run, /run/lock or /tmp (systemd mounts /run and /run/lock; Debian keeps /tmp on
disk), a bind mount of the host's /sys/fs/cgroup (that would hand the host's whole cgroup tree to the container),
seccomp or AppArmor changes, devices. cgroup v2 hosts are not covered: :class:`Fleet` refuses them with a message
rather than guess (systemd would see the tmpfs and try the v1 layout).

Observed here: a host is "running" (no failed unit) about 2 s after its container starts; the cpu and cpuacct
controllers are not mounted inside (this kernel has them as two hierarchies, systemd expects one ``cpu,cpuacct``),
so CPUQuota= and CPU accounting have no effect on these hosts; memory, pids, devices, blkio, cpuset work.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
from docker.types import EndpointConfig, IPAMConfig, IPAMPool

HERE = Path(__file__).resolve().parent
DOCKERFILE = HERE / "Dockerfile"
IMAGE = "kctl/testhost:bookworm"
LABEL = "io.kctl.testhost"  # value: the run id, on every container and network of a run
LABEL_PID = "io.kctl.testhost.pid"  # the process that made it: leftovers of dead processes are swept
LABEL_DOCKERFILE = "io.kctl.testhost.dockerfile-sha256"
LABEL_BASE = "io.kctl.testhost.base-image"
DEFAULT_HOSTS = ("logger1", "logger2", "logger3")
SSH_USER = "ops"
SSH_UID = 1000
SSH_PORT = 22
BOOT_TIMEOUT = 60.0

# The Docker settings of a systemd host (module docstring: why each one).
SYSTEMD_RUN_SETTINGS: dict[str, Any] = {
    "cgroupns": "private",
    "tmpfs": {"/sys/fs/cgroup": "rw,nosuid,nodev,noexec,mode=0755"},
    "cap_add": ["SYS_ADMIN"],
}


@dataclass
class Host:
    """One host of a fleet: what an ssh client needs to reach it, and its container."""

    hostname: str
    ip: str
    container: str  # the container's name
    key_path: Path  # the private key that logs in as ``user``
    user: str = SSH_USER
    port: int = SSH_PORT
    systemd: bool = True  # False: sshd is PID 1 (Fleet.start_without_systemd)
    failed_units: list[str] = field(default_factory=list)  # when systemd last came up "degraded"

    @property
    def target(self) -> str:
        return f"{self.user}@{self.ip}"


def dockerfile_sha256(path: Path = DOCKERFILE) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cgroup_version(client: docker.DockerClient) -> int:
    """The Docker engine's cgroup version (1 here: v1 controllers beside a hybrid name=systemd hierarchy)."""
    return int(client.info().get("CgroupVersion") or 1)


def ensure_image(client: docker.DockerClient, *, base_image: str | None = None, rebuild: bool = False) -> str:
    """The id of ``kctl/testhost:bookworm``, built (with ``BASE_IMAGE``) when it is missing, when it was built
    from another Dockerfile (its label ``io.kctl.testhost.dockerfile-sha256``), or when ``rebuild``.

    ``base_image`` defaults to kctl's own choice (a local debian:bookworm-slim or kctl/debian:bookworm, else a pull,
    else debootstrap: kctl.runtime.image.build.resolve_base_image). The Dockerfile copies nothing, so it is sent alone
    (no build context). Two processes that need the image at once build it once (a lock file).
    """
    digest = dockerfile_sha256()
    lock_path = Path(tempfile.gettempdir()) / "kctl-testhost-image.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            old: str | None = None
            with contextlib.suppress(docker.errors.ImageNotFound):
                image = client.images.get(IMAGE)
                if not rebuild and (image.labels or {}).get(LABEL_DOCKERFILE) == digest:
                    return str(image.id)
                old = str(image.id)
            if base_image is None:
                from kctl.runtime.image.build import resolve_base_image

                base_image = resolve_base_image(client)
            try:
                image, _ = client.images.build(
                    fileobj=io.BytesIO(DOCKERFILE.read_bytes()), tag=IMAGE, buildargs={"BASE_IMAGE": base_image},
                    labels={LABEL_DOCKERFILE: digest, LABEL_BASE: base_image}, rm=True, forcerm=True, pull=False)
            except docker.errors.BuildError as exc:
                tail = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in exc.build_log)
                raise RuntimeError(f"building {IMAGE} from {DOCKERFILE} failed: {exc.msg}\n{tail[-4000:]}") from exc
            if old is not None and old != image.id:
                # the stale build, untagged now; kept while a container (another run's host) still uses it
                with contextlib.suppress(docker.errors.APIError):
                    client.images.remove(old)
            return str(image.id)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_leftovers(client: docker.DockerClient) -> list[str]:
    """Remove the containers and networks of earlier runs whose process is gone (a run killed before its
    ``close()``); a live run of another process (another pytest worker) is left alone. Returns what went."""
    gone: list[str] = []

    def dead(labels: dict[str, str]) -> bool:
        pid = labels.get(LABEL_PID, "")
        return not pid.isdigit() or not _alive(int(pid))

    for c in client.containers.list(all=True, filters={"label": LABEL}):
        if dead(c.labels):
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
                gone.append(f"container {c.name}")
    for n in client.networks.list(filters={"label": LABEL}):
        if dead(n.attrs.get("Labels") or {}):
            with contextlib.suppress(docker.errors.NotFound):
                n.remove()
                gone.append(f"network {n.name}")
    return gone


class Fleet:
    """N systemd hosts on a network of their own, reachable over ssh as ``ops`` with a key of this run.

    ``Fleet(hostnames)`` creates nothing; ``start()`` (or ``with Fleet(...) as fleet``) builds the image if
    needed, makes the key pair, the network and the hosts, and returns when every host's systemd is up
    ("running", or "degraded": its failed units are printed and kept in ``Host.failed_units``) and its sshd takes
    a key login from this machine's ``ssh`` client. ``close()`` removes everything the run made; it is safe to
    call twice and after a failed start.
    """

    def __init__(self, hostnames: Sequence[str] = DEFAULT_HOSTS, *, client: docker.DockerClient | None = None,
                 base_image: str | None = None, boot_timeout: float = BOOT_TIMEOUT) -> None:
        if len(set(hostnames)) != len(hostnames):
            raise ValueError(f"hostnames must be distinct: {list(hostnames)}")
        self.hostnames = list(hostnames)
        self.run_id = uuid.uuid4().hex[:8]
        self.network_name = f"kctl-hosts-{self.run_id}"
        self.labels = {LABEL: self.run_id, LABEL_PID: str(os.getpid())}
        self.base_image = base_image
        self.boot_timeout = boot_timeout
        self._own_client = client is None
        self._client = client
        self.hosts: dict[str, Host] = {}
        self.subnet: Any = None  # the run network's ipaddress.IPv4Network, once made
        self.key_dir: Path | None = None
        self.image_id: str | None = None
        self._closed = False

    # ----- life ---------------------------------------------------------------------------------

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker.from_env(timeout=120)
        return self._client

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ensure_image(self, *, rebuild: bool = False) -> str:
        self.image_id = ensure_image(self.client, base_image=self.base_image, rebuild=rebuild)
        return self.image_id

    def start(self) -> Fleet:
        if cgroup_version(self.client) == 2:
            raise RuntimeError("tests/hosts/fleet.py: the systemd settings were checked on cgroup v1 hosts only "
                               "(this host has cgroup v2); see the module docstring")
        try:
            sweep_leftovers(self.client)
            self.ensure_image()
            self._make_keys()
            self._make_network()
            for hostname in self.hostnames:
                self._create(hostname, systemd=True)
            for hostname in self.hostnames:
                self.client.containers.get(self._container_name(hostname)).start()
            deadline = time.monotonic() + self.boot_timeout
            for hostname in self.hostnames:
                self._wait_ready(hostname, deadline)
        except BaseException:
            self.close()
            raise
        return self

    def start_without_systemd(self, hostname: str = "plain1") -> Host:
        """One more host on the fleet's network, same image, but with ``sshd -D`` as PID 1 and no systemd (nor
        its Docker settings): a host kctl must refuse. ssh, sudo and the key work as on the others."""
        if hostname in self.hosts:
            raise ValueError(f"{hostname} is already a host of this fleet")
        try:
            self._create(hostname, systemd=False)
            self.client.containers.get(self._container_name(hostname)).start()
            self._wait_ready(hostname, time.monotonic() + self.boot_timeout)
        except BaseException:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.containers.get(self._container_name(hostname)).remove(force=True)
            self.hosts.pop(hostname, None)
            raise
        return self.hosts[hostname]

    def restart(self, hostname: str, *, timeout: float | None = None) -> Host:
        """``docker restart`` of the host (systemd halts on SIGRTMIN+3 and boots again), then wait for systemd
        and sshd as at start. The host's address is read again (Docker may hand out another one)."""
        self.client.containers.get(self.host(hostname).container).restart(timeout=30)
        self._wait_ready(hostname, time.monotonic() + (timeout or self.boot_timeout))
        return self.hosts[hostname]

    def close(self) -> None:
        """Remove every container and the network of this run (found by label, so also those a failed start
        did not get to record) and the key directory. Safe to call twice."""
        if self._closed:
            return
        errors: list[str] = []
        try:
            client = self.client
            selector: dict[str, str | list[str] | bool] = {"label": f"{LABEL}={self.run_id}"}
            for c in client.containers.list(all=True, filters=selector):
                try:
                    c.remove(force=True)
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:
                    errors.append(f"container {c.name}: {exc}")
            for n in client.networks.list(filters=selector):
                try:
                    n.remove()
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:
                    errors.append(f"network {n.name}: {exc}")
        except docker.errors.DockerException as exc:
            errors.append(str(exc))
        if self.key_dir is not None:
            shutil.rmtree(self.key_dir, ignore_errors=True)
        if errors:
            raise RuntimeError("Fleet.close() left things behind: " + "; ".join(errors))
        self._closed = True
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    # ----- the hosts ----------------------------------------------------------------------------

    def host(self, hostname: str) -> Host:
        try:
            return self.hosts[hostname]
        except KeyError:
            raise KeyError(f"no host {hostname!r} in this fleet ({', '.join(self.hosts)})") from None

    __getitem__ = host

    def __iter__(self) -> Iterator[Host]:
        return iter(list(self.hosts.values()))

    @property
    def key_path(self) -> Path:
        if self.key_dir is None:
            raise RuntimeError("the fleet has not started")
        return self.key_dir / "id_ed25519"

    @property
    def public_key(self) -> str:
        return (self.key_dir / "id_ed25519.pub").read_text().strip() if self.key_dir else ""

    def ssh_argv(self, hostname: str) -> list[str]:
        """``ssh`` with this run's key and no host key checks (the hosts are new every run), up to the target:
        append a command. Ignores the user's ssh config and agent, never prompts."""
        h = self.host(hostname)
        return ["ssh", "-F", "/dev/null", "-i", str(h.key_path), "-o", "IdentitiesOnly=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", "-p", str(h.port), h.target]

    def ssh(self, hostname: str, command: str, *, timeout: float = 60, check: bool = False,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``command`` (a shell line, run by the login shell of ``ops``) on the host with the real ssh client."""
        return subprocess.run([*self.ssh_argv(hostname), command], capture_output=True, text=True,
                              timeout=timeout, check=check, input=input)

    def exec(self, hostname: str, argv: Sequence[str], *, user: str = "root",
             check: bool = False) -> subprocess.CompletedProcess[str]:
        """``docker exec`` of ``argv`` on the host (root by default): for a test's own checks, beside ssh."""
        c = self.client.containers.get(self.host(hostname).container)
        result = c.exec_run(list(argv), user=user, demux=True)
        out, err = cast("tuple[bytes | None, bytes | None]", result.output)
        code = -1 if result.exit_code is None else int(result.exit_code)
        done = subprocess.CompletedProcess(list(argv), code, (out or b"").decode(errors="replace"),
                                           (err or b"").decode(errors="replace"))
        if check:
            done.check_returncode()
        return done

    # ----- inside -------------------------------------------------------------------------------

    def container(self, hostname: str) -> Any:
        """The Docker container of a host (its networks, for a test that gives it a second address)."""
        return self.client.containers.get(self._container_name(self.host(hostname).hostname))

    def _container_name(self, hostname: str) -> str:
        return f"kctl-testhost-{self.run_id}-{hostname}"

    def _make_keys(self) -> None:
        """A fresh ed25519 key pair for this run (cryptography, a dependency of kctl), the private key 0600."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self.key_dir = Path(tempfile.mkdtemp(prefix=f"kctl-hosts-{self.run_id}-"))
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        fd = os.open(self.key_dir / "id_ed25519", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        (self.key_dir / "id_ed25519.pub").write_bytes(public + f" kctl-hosts-{self.run_id}\n".encode())

    def _authorized_keys_tar(self) -> bytes:
        """/home/ops/.ssh (0700) and its authorized_keys (0600), both owned by ops: Docker keeps a tar's owners
        and modes when it unpacks one into a container, also into one that has not started yet."""
        data = (self.public_key + "\n").encode()
        buf = io.BytesIO()
        now = time.time()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            d = tarfile.TarInfo(".ssh")
            d.type, d.mode, d.uid, d.gid, d.mtime = tarfile.DIRTYPE, 0o700, SSH_UID, SSH_UID, now
            tar.addfile(d)
            f = tarfile.TarInfo(".ssh/authorized_keys")
            f.size, f.mode, f.uid, f.gid, f.mtime = len(data), 0o600, SSH_UID, SSH_UID, now
            tar.addfile(f, io.BytesIO(data))
        return buf.getvalue()

    def _create(self, hostname: str, *, systemd: bool) -> None:
        """Create the host's container on the run's network and put the public key in, before it first boots."""
        name = self._container_name(hostname)
        settings: dict[str, Any] = dict(SYSTEMD_RUN_SETTINGS) if systemd else {
            # sshd as PID 1: no cgroup or capability settings; SIGTERM stops it (the image's SIGRTMIN+3 would
            # be ignored by a PID 1 without a handler for it, and `docker stop` would wait for SIGKILL)
            "command": ["/usr/sbin/sshd", "-D", "-e"],
            "stop_signal": "SIGTERM",
        }
        c = self.client.containers.create(
            IMAGE, name=name, hostname=hostname, labels=dict(self.labels), detach=True,
            network=self.network_name,
            networking_config={self.network_name: EndpointConfig(self.client.api.api_version, aliases=[hostname],
                                                                 ipv4_address=self._address_for(hostname))},
            **settings)
        if not c.put_archive(f"/home/{SSH_USER}", self._authorized_keys_tar()):
            raise RuntimeError(f"{name}: could not put the public key in")
        self.hosts[hostname] = Host(hostname=hostname, ip="", container=name, key_path=self.key_path,
                                    systemd=systemd)

    def _make_network(self) -> None:
        """The run's bridge network with a subnet given explicitly, so that each host keeps its address across
        restarts (a node's address is in kctl.yaml, as a real host's is). Docker assigns fixed addresses only on
        a subnet given at creation, so the network is made once to let Docker pick a free pool (it knows every
        network's, the clusters' included), then made again with that pool spelled out."""
        import ipaddress

        probe = self.client.networks.create(self.network_name, driver="bridge", labels=dict(self.labels))
        try:
            probe.reload()
            cfg = ((probe.attrs.get("IPAM") or {}).get("Config") or [{}])[0]
            net = ipaddress.ip_network(cfg["Subnet"], strict=False)
            gateway = cfg.get("Gateway") or str(net.network_address + 1)
        finally:
            probe.remove()
        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(net), gateway=gateway)])
        self.client.networks.create(self.network_name, driver="bridge", labels=dict(self.labels), ipam=ipam)
        self.subnet = net

    def _address_for(self, hostname: str) -> str:
        """A fixed address per host: .10 + its index (extra hosts after the fleet's own)."""
        names = [*self.hostnames, *(h for h in self.hosts if h not in self.hostnames)]
        index = names.index(hostname) if hostname in names else len(names)
        return str(self.subnet.network_address + 10 + index)

    def _refresh_ip(self, hostname: str) -> str:
        c = self.client.containers.get(self.host(hostname).container)
        ip = str(c.attrs["NetworkSettings"]["Networks"].get(self.network_name, {}).get("IPAddress") or "")
        self.hosts[hostname].ip = ip
        return ip

    def _wait_ready(self, hostname: str, deadline: float) -> None:
        """Until systemd says "running" or "degraded" (a systemd host) and a key login over ssh works."""
        h = self.host(hostname)
        c = self.client.containers.get(h.container)
        state = ""
        while h.systemd:
            c.reload()
            if c.status != "running":
                self._fail(hostname, f"its container is {c.status} (exit code {c.attrs['State'].get('ExitCode')})")
            state = self.exec(hostname, ["systemctl", "is-system-running"]).stdout.strip()
            if state in ("running", "degraded"):
                break
            if state in ("maintenance", "stopping") or time.monotonic() > deadline:
                self._fail(hostname, f"systemd is {state or 'not answering'}")
            time.sleep(0.3)
        if state == "degraded":
            failed = self.exec(hostname, ["systemctl", "list-units", "--failed", "--plain", "--no-legend"]).stdout
            h.failed_units = [line.split()[0] for line in failed.splitlines() if line.strip()]
            print(f"[fleet] {hostname}: systemd degraded, failed units: {', '.join(h.failed_units)}",
                  file=sys.stderr, flush=True)
        else:
            h.failed_units = []
        self._refresh_ip(hostname)
        while True:
            done = self.ssh(hostname, "true", timeout=15)
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                self._fail(hostname, f"ssh {h.target} true exited {done.returncode}: {done.stderr.strip()}")
            time.sleep(0.3)

    def _fail(self, hostname: str, why: str) -> None:
        h = self.host(hostname)
        detail = ""
        with contextlib.suppress(docker.errors.DockerException):
            c = self.client.containers.get(h.container)
            detail = c.logs(tail=40).decode(errors="replace")
            if c.status == "running" and h.systemd:
                detail += self.exec(hostname, ["journalctl", "-b", "--no-pager", "-n", "40", "-p", "warning"]).stdout
        raise RuntimeError(f"test host {hostname} ({h.container}) is not ready: {why}\n{detail[-4000:]}")

