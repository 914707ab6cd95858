"""The abstract :class:`Engine`: what kctl needs from Docker for one cluster's containers, whichever engine
runs them, and the check that a command never reaches the other engine's containers; what an engine may or may
not do (:class:`Capability`, each implementation declaring its set); every act on a node's processes (a service's
stop and start, its supervisor's view of each program), supervisord's command line left to
:mod:`kctl.runtime.supervisor`.

The direction: :mod:`kctl.runtime.supervisor`, :mod:`kctl.runtime.docker_api` (the SDK) <- this module <-
:mod:`kctl.runtime.engine.compose`, :mod:`kctl.runtime.engine.swarm`, :mod:`kctl.runtime.engine.hosts` (the
implementations) <- :mod:`kctl.runtime.engine.engines` (``for_spec``, ``supports``: the seam the rest of kctl calls).
This module imports none of those above it.

No docker SDK import at module level: the status path imports this module.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from kctl import contract
from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec
from kctl.model.spec import Engine as EngineKind
from kctl.runtime import docker_api as api
from kctl.runtime import supervisor
from kctl.runtime.docker_api import Container, ContainerInfo, engine_of, state_dir_of

Progress = Callable[[str], None]

# The exit code of a start's preparation that failed (kctl's own, beside supervisorctl's 0-7 and a shell's 126-127).
BEFORE_FAILED = 90
# The entrypoint's copy of the secrets mount, made again before a service starts.
REFRESH_SECRETS = (
    f'[ -d {contract.SECRETS_MOUNT} ] || exit 0; for f in {contract.SECRETS_MOUNT}/*; do [ -f "$f" ] &&'
    f' install -m 0600 -o {contract.JVM_UID} -g {contract.JVM_UID} "$f" {contract.SECRETS_DIR}/; done; exit 0'
)


class Capability(Enum):
    """What a caller above the engine seam may need of the engine that runs a cluster, named by that need and
    never by an engine: the caller asks :func:`kctl.runtime.engine.engines.supports` (each engine class declares
    the set it supports, :attr:`Engine.capabilities`), and no module outside kctl/runtime and kctl/model compares
    ``spec.engine`` to an engine's kind (tests/unit/test_engine_seam.py)."""

    # Every node is a container of a Docker engine: Docker's own checks (`kctl doctor`), the faults that act on
    # containers (kctl.runtime.faults.Faults), a node's state reported as its container's.
    CONTAINERS = "containers"
    # Every node is a machine of its own that kctl logs in to over ssh at the node's address: a new node needs
    # that address, and the hosts' keys are kctl's to trust (`kctl up --accept-new-host-keys`).
    SSH_HOSTS = "ssh-hosts"
    # The nodes' ports are published on one machine, each at the base port plus the node's index: removing a
    # node would shift the ports of the nodes after it (so kctl pins theirs).
    PORTS_BY_INDEX = "ports-by-index"
    # Each node's service is pinned to a Swarm node by a node label (`kctl swarm label`).
    SWARM_LABELS = "swarm-labels"
    # The nodes' data directories are directories of the state dir on this machine (bind mounts): the monitor
    # reads their disks' usage there.
    DATA_IN_STATE_DIR = "data-in-state-dir"
    # A running ZooKeeper cluster's nodes can gain a KRaft controller beside their brokers mid-flight (`kctl migrate
    # kraft`). A cluster made on KRaft runs its controllers on every engine.
    KRAFT_MIGRATION = "kraft-migration"
    # `kctl up --engine` may move a stopped cluster to or from this engine: its nodes need nothing that only
    # kctl.yaml can say (an engine whose nodes need their addresses there is chosen in kctl.yaml alone).
    CHOSEN_BY_FLAG = "chosen-by-flag"
    # Faults on a whole node or its network (kill or pause a node, cut or slow its network): the failure drills
    # that need them.
    NODE_FAULTS = "node-faults"
    # The KRaft controller quorum may turn dynamic and change its voters (KIP-853: `kctl quorum make-dynamic`,
    # `kctl node add --role controller`): kctl formats a joining controller in its node (an exec in its container,
    # or over ssh on a host), its storage made without the permit by which its start script would format a static
    # quorum's storage (Engine.withhold_format_permit), and rolls every node onto
    # controller.quorum.bootstrap.servers (kctl apply's gated roll: Compose and hosts restart the processes, Swarm
    # makes each task again with its new configs).
    # Built and tested on every engine (compose, swarm, hosts).
    DYNAMIC_QUORUM = "dynamic-quorum"
    # kctl.yaml's Spark cluster runs on the nodes' own hosts as systemd units (kctl.stream.spark_hosts), its
    # daemons on the hosts' addresses, its job's driver on this machine's network: the tables on S3.
    SPARK_ON_HOSTS = "spark-on-hosts"
    # kctl.yaml's Spark cluster runs as a Swarm stack of its own (kctl.stream.spark_swarm), each daemon pinned to a
    # Swarm node by the nodes' labels, from an image every node can run: a worker on another node shares no
    # directory with this machine, so then the tables are on S3.
    SPARK_ON_SWARM = "spark-on-swarm"


class WrongEngine(KctlError):
    """The cluster's containers were made by the other engine than the spec names; nothing was changed."""

    exit_code = 2


def check_engine(spec: ClusterSpec, found: list[tuple[str, str]]) -> None:
    """WrongEngine when any (container host, engine that made it) of the cluster is not ``spec.engine``'s:
    a Compose command never touches a Swarm stack's containers, nor the reverse."""
    other = sorted({host for host, kind in found if kind != spec.engine.value})
    if not other:
        return
    theirs = next(kind for _host, kind in found if kind != spec.engine.value)
    how = f"as the Swarm stack {spec.project}" if theirs == EngineKind.swarm.value else \
        f"as the Compose project {spec.project}"
    raise WrongEngine(
        f"cluster {spec.name!r} runs on engine {theirs} ({how}: {', '.join(other)}), but this kctl.yaml says engine"
        f" {spec.engine.value}; nothing was changed",
        hint=f"set `engine: {theirs}` in kctl.yaml (or leave `engine:` out: the state dir records what `kctl up"
             f" --engine` chose); to move the cluster, `kctl down` it with engine {theirs} first")


class Engine(abc.ABC):
    """What kctl needs from Docker for one cluster's containers.

    The concrete methods are plain Docker (the SDK, by the cluster's label) and hold for both engines; the
    abstract ones are where Compose and Swarm differ.
    """

    kind = "?"
    # What this engine supports of :class:`Capability` (each implementation declares its own set).
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    # Whether a file written into the state dir reaches the node's processes when they restart (Compose: the
    # conf dir is a bind mount). Swarm delivers them as Swarm configs, which only a deploy replaces.
    files_reach_a_restart = True
    # Whether the nodes' log files are in the state dir on this host (Compose: a bind mount), or only in the
    # node's container (Swarm: a volume on the Swarm node that runs it; see :meth:`log_lines`).
    logs_in_state_dir = True
    # Whether the nodes run kctl's node image (built or checked by `kctl up`); engine hosts runs none.
    uses_image = True
    # Whether each service reads the node's environment at its own start (engine hosts: each systemd unit, from
    # the node's environment file), so that a change of one service's variables restarts that service alone. A
    # container's environment is the container's: a change makes it again, both services with it.
    environment_per_service = False
    # Where Kafka's scripts are on a node (the image's distribution).
    kafka_bin = contract.KAFKA_BIN

    def __init__(self) -> None:
        self._status: api.StatusClient | None = None

    @classmethod
    def supports(cls, capability: Capability) -> bool:
        """Whether this engine supports ``capability`` (no client made: a class's declaration)."""
        return capability in cls.capabilities

    # ----- clients and containers --------------------------------------------------------

    def client(self, timeout: int = 30) -> Any:
        """A docker SDK client of the engine kctl talks to (a Swarm manager on Swarm)."""
        return api.client(timeout)

    def containers(self, spec: ClusterSpec, dc: Any | None = None) -> list[ContainerInfo]:
        """Every container of the cluster this engine can see, running or not, in service-name order (one per
        container host); :class:`WrongEngine` when the cluster's containers were made by the other engine."""
        found = api.infos(spec.name, dc or self.client())
        check_engine(spec, [(c.name, c.engine) for c in found])
        return found

    def observe(self, spec: ClusterSpec, timeout: float = 5.0) -> list[Container]:
        """The status path's cheap view of the cluster's containers: one list call, no inspect."""
        self._status = api.StatusClient(timeout)
        return api.listed(spec.name, self._status)

    def processes(self, c: Container, timeout: float = 5.0) -> dict[str, str]:
        """Process state per service of one observed container ({} when Docker does not answer)."""
        if self._status is None:
            self._status = api.StatusClient(timeout)
        return api.processes(self._status, c.id, c.services)

    def running_host_ports(self, spec: ClusterSpec) -> list[int]:
        """Host ports published by this cluster's own running containers (they are not 'taken')."""
        try:
            return sorted({p for c in self.observe(spec) if c.state == "running" for p in c.host_ports})
        except KctlError:
            return []

    def exec_in(self, spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
                timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
        """Run a command in a cluster container (by host name, e.g. logger1); (exit code, output).

        ``stderr=False`` keeps only stdout: a JVM tool's log lines on stderr would otherwise interleave
        with the table that a caller parses.
        """
        dc = dc or self.client()
        # self.containers checks the engine: never a command in the other engine's containers
        found = sorted((c for c in self.containers(spec, dc) if c.name == name), key=lambda c: c.state != "running")
        if not found or found[0].state != "running":
            self.not_here(spec, name)  # e.g. its current task runs on another Swarm node: says so
        if not found:
            raise KctlError(f"no container {name!r} in cluster {spec.name}", hint="is it up? see `kctl status`")
        if found[0].state != "running":
            raise KctlError(f"container {name} is {found[0].state}", hint=f"start it with `kctl up` ({name})")
        return api.exec_run(dc, found[0].id, argv, user=user, timeout=timeout, stderr=stderr)

    def not_here(self, spec: ClusterSpec, host: str) -> None:
        """Called when this engine has no container for ``host``: a KctlError that says where it is, when the
        engine knows (Swarm: a task on another node); else nothing."""
        return None

    def follow_lines(self, spec: ClusterSpec, host: str, path: str, tail: int) -> Iterator[str] | None:
        """The last lines of a log file, then every new one (``kctl logs -F``), where the engine can follow a
        node's log from here; None where it cannot."""
        return None

    def log_lines(self, spec: ClusterSpec, host: str, path: str, tail: int) -> list[str] | None:
        """The last lines of a log file in a container, or None where the state dir has it on this host."""
        return None

    # ----- one service's process (kctl.runtime.engine.services) ------------------------------------

    # supervisord's own wait for a stop (stopwaitsecs=120 for Kafka) plus a margin; a start returns after
    # startsecs (1 s).
    STOP_TIMEOUT = 150.0
    START_TIMEOUT = 60.0

    def supervise(self, spec: ClusterSpec, host: str, action: str, service: str, *, timeout: float,
                  dc: Any = None, before: str = "", check: bool = True) -> str:
        """``ACTION SERVICE`` (stop, start) through the node's supervisor: supervisord in a container, its command
        line built and read by :mod:`kctl.runtime.supervisor`; the supervisor's answer. The shell commands
        ``before`` run first, in the same exec (each exec costs a container lookup and a process in the node);
        one that fails prints its own message and exits with :data:`BEFORE_FAILED`.

        With ``check``, a failure is a KctlError (a program already as asked is none); without, the answer is
        returned whatever it was (a fault's stop or start: its caller waits for the state it wants)."""
        argv = supervisor.argv(action, service)
        if before:
            argv = ["sh", "-c", f'{before}\nexec "$@"', "sh", *argv]
        code, out = self.exec_in(spec, host, argv, user="root", timeout=timeout, dc=dc)
        text = out.strip()
        if not check:
            return text
        if code == BEFORE_FAILED:
            raise KctlError(f"{host}: {text[-300:]}", hint=f"`kctl logs {host} --service supervisor`")
        return supervisor.checked(host, action, service, code, text)

    def stop_service(self, spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
        """SIGTERM ``service`` on ``host`` (a broker's controlled shutdown) and wait until it exited."""
        return self.supervise(spec, host, "stop", service, timeout=self.STOP_TIMEOUT, dc=dc)

    def start_service(self, spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
        """Start ``service`` deliberately: the wrapper's crash-loop record goes first (a start kctl asks for is
        no crash, so it gets no back-off), and a secured node's secrets are copied again (a JAAS file that
        `kctl apply` rewrote reaches a restarted process, not only a new container); all in one exec."""
        starts = contract.starts_file(service)
        before = (f'rm -f {starts} || {{ echo "cannot clear {starts} before starting {service}";'
                  f' exit {BEFORE_FAILED}; }}')
        if spec.security.enabled:
            before += (f'\n( {REFRESH_SECRETS} ) || {{ echo "cannot refresh the secrets copy before starting'
                       f' {service}"; exit {BEFORE_FAILED}; }}')
        return self.supervise(spec, host, "start", service, timeout=self.START_TIMEOUT, dc=dc, before=before)

    def process_states(self, spec: ClusterSpec, host: str, timeout: float = 30.0) -> dict[str, str]:
        """Each program of the node as its supervisor sees it, in supervisord's words (RUNNING, STOPPED, STARTING,
        STOPPING, BACKOFF, EXITED, FATAL): one exec of its status. KctlError when the node cannot be asked (no
        running container). Not the status path's view (:meth:`processes`, from the process table): the
        supervisor's own, with the states between two (a stop or start under way)."""
        _code, out = self.exec_in(spec, host, supervisor.argv("status"), user="root", timeout=timeout)
        return supervisor.parse_status(out)  # its exit code says only whether every program runs

    def deliver(self, spec: ClusterSpec, state_dir: Path, say: Progress) -> None:
        """Put the state dir's rendered files where the nodes' processes read them at their next start, without
        restarting anything (``kctl apply``, before its roll). Compose: already there (a bind mount)."""
        return None

    def withhold_format_permit(self, spec: ClusterSpec, state_dir: Path, host: str, service: str) -> str:
        """A new node's ``service`` (a dynamic quorum's joining controller) starts without the permit to format its
        storage (:func:`kctl.contract.format_permit`): it waits as UNFORMATTED until kctl formats it (its start
        script formats a static quorum's storage, and cannot tell a joiner from the first controller). Called
        before the node's first start. Compose and hosts: the permit render.write left in the state dir's data
        dir goes (Compose mounts that dir; engine hosts installs the permits it finds there); what was done."""
        permit = state_dir / host / contract.HOST_DATA / f"{contract.FORMAT_PERMIT_PREFIX}{service}"
        permit.unlink(missing_ok=True)
        return f"{host}: no permit for its {service}'s start script to format its storage"

    def pending_restarts(self, spec: ClusterSpec) -> dict[str, list[str]]:
        """host -> the running services whose process predates the files installed for it since (engine hosts:
        what ``kctl up`` restarts through the roll, :mod:`kctl.roll.up`). Compose and Swarm: none, a changed
        node's container is made again."""
        return {}

    def check_before_down(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool) -> None:
        """What ``kctl down`` refuses before it stops or removes anything (KctlError). Compose and Swarm: the
        containers' labels say whose they are (kctl.cluster.identity.check_containers, before this)."""
        return None

    def purge_node_data(self, spec: ClusterSpec, host: str) -> None:
        """Remove a removed node's data (``kctl node remove``). Compose and Swarm: it is in the state dir or a
        volume, which the caller and :meth:`remove_one` remove."""
        return None

    # ----- lifecycle --------------------------------------------------------------------

    @abc.abstractmethod
    def preflight(self, spec: ClusterSpec, existing: dict[str, ContainerInfo], dc: Any, say: Progress,
                  strict_spread: bool = False) -> None:
        """Everything checked before anything is deployed (KctlError: nothing was touched)."""

    @abc.abstractmethod
    def deploy(self, spec: ClusterSpec, state_dir: Path, say: Progress, services: list[str]) -> None:
        """Converge the rendered files in ``state_dir`` (already written): create or make again
        ``services``, the nodes the plan names; the others stay as they run."""

    @abc.abstractmethod
    def ps(self, spec: ClusterSpec, state_dir: Path) -> str:
        """The engine's own view of the cluster, for a readiness timeout's report."""

    @abc.abstractmethod
    def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: Any) -> int:
        """Remove the cluster's containers (and its volumes with ``volumes``); processes already stopped."""

    @abc.abstractmethod
    def start_one(self, spec: ClusterSpec, state_dir: Path, host: str, say: Progress | None = None) -> None:
        """Create and start one node's container (``kctl node add``), the others untouched."""

    @abc.abstractmethod
    def recreate_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        """Make one container again from the rendered files (the others untouched)."""

    @abc.abstractmethod
    def remove_one(self, spec: ClusterSpec, host: str, *, stop_timeout: int = 180, keep_data: bool = False) -> bool:
        """Remove one node's container (``kctl node remove``: with the storage only it used, where the engine keeps
        that beside the container); False when it has none. ``keep_data``: the node's data stays wherever it is
        (``kctl down``, which removes data only with --volumes)."""

    # ----- faults (kctl.runtime.faults) ---------------------------------------------------

    def fault_targets(self, spec: ClusterSpec, dc: Any, state_dir: str | None = None) -> list[Any]:
        """The SDK container objects faults act on, one per host (the current one), of the cluster and, with
        ``state_dir``, only those of that state dir; WrongEngine when the other engine made them."""
        found = api.sdk_containers(spec.name, dc)
        if state_dir is not None:
            found = [c for c in found if state_dir_of(c.labels or {}) in (None, state_dir)]
        check_engine(spec, [(api.host_of(c), engine_of(c.labels or {})) for c in found])
        return api.current_containers(found)

    @abc.abstractmethod
    def stop_node(self, spec: ClusterSpec, host: str, container: Any) -> None:
        """Stop a node's container so that it stays stopped until :meth:`start_node`."""

    @abc.abstractmethod
    def start_node(self, spec: ClusterSpec, host: str, container: Any, dc: Any, *, killed_id: str | None,
                   timeout: float) -> None:
        """Bring a stopped or killed node's container back (its processes start with it). ``killed_id``: the
        id of the container a fault killed, if one did."""

    @abc.abstractmethod
    def cut_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> None:
        """Cut a node off the cluster network (a partition of one node)."""

    @abc.abstractmethod
    def mend_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> bool:
        """Undo :meth:`cut_network` (whoever cut it); whether there was a cut to undo."""

