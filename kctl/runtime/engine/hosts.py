"""engine hosts: every node a host of its own, its ZooKeeper and Kafka systemd units installed from kctl's
bundle (:mod:`kctl.runtime.engine.bundle`) over ssh (:mod:`kctl.runtime.engine.ssh`), and driven with ``systemctl``.

What a container is to the other engines, a host is here: "running" when kctl reaches it over ssh and
kctl's bundle is installed there; its processes are its process table (``ps``), read with the same rules as a
container's (:func:`kctl.runtime.docker_api.process_states`); its config hash is the one its installed bundle
was rendered with (/etc/kctl/config-hash). Commands that speak to ZooKeeper and Kafka reach the hosts'
listeners at each node's ``advertised_host``, as they reach published ports elsewhere.

``kctl up`` checks every host before it changes any (ssh login, ``sudo -n``, systemd as PID 1, Java 17, and that
each one is this cluster's node or bare: :mod:`kctl.runtime.engine.host_identity`), installs the bundles of the hosts
whose config changed, then starts what is not running, ZooKeeper everywhere before Kafka; a running service whose
files changed is left to the gated roll that follows (:mod:`kctl.roll.up`), never restarted here.
``kctl down`` stops the brokers (controlled shutdowns), then runs the installed uninstall.sh on every host
(``--volumes``: the data too).

A cluster on KRaft (``metadata: kraft``) has a KRaft controller unit on each ZooKeeper participant's host instead
of a ZooKeeper (:func:`kctl.runtime.engine.bundle.host_services`), started before the brokers; the status path
reports the node's ZooKeeper RETIRED, as a container's on KRaft. Its storage is formatted once, at the first
start, only on a host new to kctl (:func:`kctl.runtime.engine.bundle.format_permits`, install.sh).
"""

from __future__ import annotations

import concurrent.futures as cf
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.errors import KctlError, UsageError
from kctl.model.properties import services_of, spark_placement
from kctl.model.spec import SPARK_DAEMON_MEMORY, ClusterSpec, NodeSpec, spark_memory_mb
from kctl.model.spec import Engine as EngineKind
from kctl.runtime.docker_api import GAVE_UP, Container, ContainerInfo, process_states, stream_lines
from kctl.runtime.engine import bundle
from kctl.runtime.engine import host_identity as hid
from kctl.runtime.engine.base import Capability, Engine, Progress
from kctl.runtime.engine.bundle import stop_seconds
from kctl.runtime.engine.host_identity import HostFacts
from kctl.runtime.engine.ssh import Ssh, SshError

CONFIG_HASH_FILE = f"{contract.CONF_DIR}/config-hash"
UNINSTALL = f"{contract.HOST_ROOT}/uninstall.sh"
# Where a bundle lands on its host while install.sh runs (root's, 0700; removed after: it holds secrets).
REMOTE_BUNDLE = "/var/tmp/kctl-bundle-{cluster}"
# The programs a host may have a unit for, in the order `kctl up` starts them (a unit not installed there is no
# program of the host's).
PROGRAMS = bundle.UNIT_SERVICES
# One ssh round trip per host for the status path: the installed config hash, then a line per unit systemd gave
# up on (kctl.runtime.docker_api.GAVE_UP), then every process's command line.
_OBSERVE = "; ".join([f"cat {CONFIG_HASH_FILE} 2>/dev/null || echo -", "echo ---",
                      *(f"systemctl is-failed --quiet {contract.unit_name(s)} && echo '{GAVE_UP}{s}'"
                        for s in PROGRAMS), "ps -eo args"])
# Checked on every host before `kctl up` changes any: sudo without a password, systemd as PID 1, Java 17+.
_PREFLIGHT = ("echo sudo-ok; if [ -d /run/systemd/system ] && [ \"$(ps -o comm= -p 1)\" = systemd ]; then"
              " echo systemd-ok; fi; java -version 2>&1 | head -n 1")
_FACTS = "---kctl-host-facts---"  # what follows it: the host's identity and data (kctl.runtime.engine.host_identity)
# systemd's view of a unit in supervisord's words (Engine.process_states), by its ActiveState; an activating unit
# whose SubState is auto-restart waits out its RestartSec before systemd starts it again: supervisord's BACKOFF.
_AS_SUPERVISORD = {"active": "RUNNING", "reloading": "RUNNING", "activating": "STARTING", "deactivating": "STOPPING",
                   "inactive": "STOPPED", "failed": "FATAL"}


def _pool(n: int) -> cf.ThreadPoolExecutor:
    return cf.ThreadPoolExecutor(max_workers=max(1, min(n, 16)))


class HostsEngine(Engine):
    """Every node on a host of its own, through ssh and systemd."""

    kind = EngineKind.hosts.value
    # KRaft controller units on a cluster made on KRaft, but no migration to KRaft (a ZooKeeper cluster's hosts
    # gain no controller unit mid-flight: Capability.KRAFT_MIGRATION), and no fault on a whole host (it would take
    # kctl's own ssh session with it): kctl.runtime.faults.HostFaults.
    capabilities = frozenset({Capability.SSH_HOSTS, Capability.DYNAMIC_QUORUM, Capability.SPARK_ON_HOSTS})
    # A rendered file reaches a host's processes at their next restart once :meth:`deliver` (install.sh) has put
    # it in /etc/kctl: `kctl apply` delivers first, then rolls.
    files_reach_a_restart = True
    logs_in_state_dir = False
    uses_image = False
    environment_per_service = True
    kafka_bin = f"{contract.HOST_KAFKA_HOME}/bin"

    def __init__(self) -> None:
        super().__init__()
        self._ps: dict[str, list[str]] = {}
        self._on_kraft = False  # the observed cluster's: its hosts run no ZooKeeper (RETIRED, as in a container)

    # ----- hosts as containers ------------------------------------------------------------

    def client(self, timeout: int = 30) -> Any:
        return None  # no Docker: every call below reaches the hosts over ssh

    def _look(self, spec: ClusterSpec, node: NodeSpec, timeout: float) -> tuple[str, str | None, list[str]]:
        """(state, installed config hash, command lines) of one host; state "unreachable" when ssh failed."""
        try:
            code, out = Ssh(spec).run(node, ["sh", "-c", _OBSERVE], timeout=max(timeout, 10), stderr=False)
        except SshError:
            return "unreachable", None, []
        head, _, table = out.partition("---\n")
        digest = head.strip()
        if code != 0 or digest in ("", "-"):
            return "not-installed", None, table.splitlines()
        return "running", digest, table.splitlines()

    def _looks(self, spec: ClusterSpec, timeout: float) -> list[tuple[NodeSpec, str, str | None, list[str]]]:
        nodes = [n for _h, n, _s in services_of(spec)]
        with _pool(len(nodes)) as pool:
            found = list(pool.map(lambda n: self._look(spec, n, timeout), nodes))
        return [(n, *f) for n, f in zip(nodes, found, strict=True)]

    def containers(self, spec: ClusterSpec, dc: Any | None = None) -> list[ContainerInfo]:
        """The hosts where kctl's bundle is installed (and those kctl cannot reach, as "unreachable")."""
        services = {h: s for h, _n, s in services_of(spec)}
        return [ContainerInfo(id=spec.node_address(n), name=n.hostname, container_name=spec.node_address(n),
                              node=spec.node_address(n), services=services[n.hostname], state=state, health=None,
                              config_hash=digest, ports={}, engine=self.kind)
                for n, state, digest, _ps in self._looks(spec, 15.0) if state != "not-installed"]

    def observe(self, spec: ClusterSpec, timeout: float = 5.0) -> list[Container]:
        services = {h: s for h, _n, s in services_of(spec)}
        self._on_kraft = spec.on_kraft
        out: list[Container] = []
        for n, state, digest, ps in self._looks(spec, timeout):
            if state == "not-installed":
                continue
            self._ps[n.hostname] = ps
            out.append(Container(id=n.hostname, name=n.hostname, node=spec.node_address(n),
                                 services=services[n.hostname], state=state, health=None, config_hash=digest,
                                 cluster=spec.name, state_dir=spec.state_dir, engine=self.kind))
        return out

    def processes(self, c: Container, timeout: float = 5.0) -> dict[str, str]:
        if c.name not in self._ps:
            return {}
        procs = process_states(self._ps[c.name], c.services)
        if self._on_kraft and procs.get("zookeeper") == "STOPPED":
            # on KRaft a host has no ZooKeeper unit: its ZooKeeper is retired, as a container's is (the image's
            # `retired`), and `kctl up` starts none
            procs["zookeeper"] = "RETIRED"
        return procs

    def running_host_ports(self, spec: ClusterSpec) -> list[int]:
        return []  # nothing is published on this machine

    def exec_in(self, spec: ClusterSpec, name: str, argv: list[str], user: str | None = None,
                timeout: float = 60, dc: Any | None = None, stderr: bool = True) -> tuple[int, str]:
        node = spec.node(name)
        if user == f"{contract.JVM_UID}:{contract.JVM_UID}":
            # the JVMs' user, as a container names it (the image's uid and gid): on a host the service user
            # install.sh made, whose uid is 555 only where that was free
            user = contract.SERVICE_USER
        return Ssh(spec).run(node, argv, user=None if user in (None, "root") else user, timeout=timeout,
                             stderr=stderr)

    def log_lines(self, spec: ClusterSpec, host: str, path: str, tail: int) -> list[str] | None:
        node = spec.node(host)
        if path == contract.container_log("supervisor"):  # no supervisord here: systemd's journal of the units
            units = [f"--unit={contract.unit_name(s)}" for s in PROGRAMS]
            argv = ["journalctl", "--no-pager", "--output=short-iso", "-n", str(tail), *units]
        else:
            argv = ["tail", "-n", str(tail), path]
        code, out = Ssh(spec).run(node, argv, timeout=30, stderr=False)
        if code != 0:
            raise KctlError(f"{host}: no log at {path} (exit {code})", hint="has the node been started? `kctl up`")
        return out.splitlines()

    def follow_lines(self, spec: ClusterSpec, host: str, path: str, tail: int) -> Iterator[str]:
        """``kctl logs -F``: the last lines, then every new one (``tail -F`` on the host; the journal of the
        units for the supervisor log), until interrupted."""
        node = spec.node(host)
        if path == contract.container_log("supervisor"):
            units = [f"--unit={contract.unit_name(s)}" for s in PROGRAMS]
            argv = ["journalctl", "--no-pager", "--output=short-iso", "-f", "-n", str(tail), *units]
        else:
            argv = ["tail", "-n", str(tail), "-F", path]
        ssh = Ssh(spec)
        yield from stream_lines([*ssh.base_argv(node), ssh.remote(argv)], with_stderr=False)

    # ----- one service's process ---------------------------------------------------------------

    def _systemctl(self, spec: ClusterSpec, host: str, action: str, service: str, timeout: float,
                   check: bool = True) -> str:
        unit = contract.unit_name(service)
        argv = ["systemctl", action, unit]
        if action == "start":  # a start kctl asks for is no crash: systemd's start limit is reset first
            shell = f"systemctl reset-failed {unit} 2>/dev/null; exec systemctl start {unit}"
            code, out = Ssh(spec).run(spec.node(host), ["sh", "-c", shell], timeout=timeout)
        else:
            code, out = Ssh(spec).run(spec.node(host), argv, timeout=timeout)
        if code != 0 and check:
            raise KctlError(f"{host}: `systemctl {action} {unit}` failed (exit {code}): {out.strip()[-500:]}",
                            hint=f"`kctl logs {host} --service supervisor` shows the units' journal")
        return out.strip()

    def supervise(self, spec: ClusterSpec, host: str, action: str, service: str, *, timeout: float,
                  dc: Any = None, before: str = "", check: bool = True) -> str:
        """systemd is a host's supervisor: ``systemctl ACTION`` of the service's unit (a start resets the unit's
        start limit first). ``before`` is a container's preparation: a host's unit prepares itself (kctl-prepare,
        its ``ExecStartPre=+``)."""
        return self._systemctl(spec, host, action, service, timeout, check=check)

    def process_states(self, spec: ClusterSpec, host: str, timeout: float = 30.0) -> dict[str, str]:
        """Each unit kctl installed on the host, as systemd sees it, in supervisord's words
        (:func:`systemd_states`): one ssh round trip."""
        argv = ["systemctl", "show", "--property=Id,LoadState,ActiveState,SubState",
                *(contract.unit_name(p) for p in PROGRAMS)]
        code, out = Ssh(spec).run(spec.node(host), argv, timeout=timeout, stderr=False)
        if code != 0:
            raise KctlError(f"{host}: `systemctl show` failed (exit {code}): {out.strip()[-300:]}",
                            hint=f"`kctl logs {host} --service supervisor` shows the units' journal")
        return systemd_states(out)

    def stop_service(self, spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
        # `systemctl stop` returns when the unit stopped, at most its TimeoutStopSec= (a broker's is derived from
        # its controlled shutdown's bounds) and SIGKILL's moment later: ssh waits that long, and some more.
        limit = max(self.STOP_TIMEOUT, stop_seconds(spec, spec.node(host), service) + 30)
        return self.supervise(spec, host, "stop", service, timeout=limit)

    def start_service(self, spec: ClusterSpec, host: str, service: str, dc: Any = None) -> str:
        return self.supervise(spec, host, "start", service, timeout=self.START_TIMEOUT)

    # ----- lifecycle ----------------------------------------------------------------------------

    def host_checks(self, spec: ClusterSpec) -> list[tuple[NodeSpec, str | None, HostFacts | None]]:
        """Each host's problem for kctl, or None: it answers over ssh, runs `sudo -n`, boots systemd and has Java
        17 or newer; and what it holds of kctl (:mod:`kctl.runtime.engine.host_identity`), read in the same round trip
        (asked of every host at once)."""
        found = [(n, s) for _h, n, s in services_of(spec)]

        def check(item: tuple[NodeSpec, tuple[str, ...]]) -> tuple[str | None, HostFacts | None]:
            node, services = item
            shell = (f"{_PREFLIGHT}; echo {_FACTS}; {hid.observe_script(hid.data_dirs(spec, node, services))};"
                     f" {hid.MEM_SCRIPT}")
            try:
                code, out = Ssh(spec).run(node, ["sh", "-c", shell], timeout=spec.ssh.connect_timeout + 20)
            except SshError as exc:
                return (f"{exc.message}: {exc.hint}" if exc.hint else exc.message), None
            out, _, facts_out = out.partition(f"{_FACTS}\n")
            facts = hid.parse_facts(facts_out) if "sudo-ok" in out else None
            where = f"{node.hostname} ({spec.node_address(node)})"
            if "sudo-ok" not in out:
                return (f"{where}: `sudo -n` does not run commands for {spec.ssh.user or 'the login user'}"
                        f" without a password: {out.strip()[-200:]}"), None
            if "systemd-ok" not in out:
                return f"{where}: the host does not run systemd as PID 1 (kctl installs systemd units)", facts
            version = out.strip().splitlines()[-1] if out.strip() else ""
            major = _java_major(version)
            if major is None:
                return (f"{where}: no java on the PATH (install a Java 17 runtime: apt-get install"
                        " openjdk-17-jre-headless)"), facts
            if major < 17:
                return (f"{where}: java is version {major}; kctl runs Kafka {spec.versions.kafka} on Java 17 or"
                        " newer"), facts
            return None, facts

        with _pool(len(found)) as pool:
            return [(n, *r) for (n, _s), r in zip(found, pool.map(check, found), strict=True)]

    def host_problems(self, spec: ClusterSpec) -> list[tuple[NodeSpec, str | None]]:
        """:meth:`host_checks` without what the hosts hold."""
        return [(n, p) for n, p, _f in self.host_checks(spec)]

    def identity_problems(self, spec: ClusterSpec, facts: list[tuple[NodeSpec, HostFacts | None]], *,
                          data: bool = True) -> list[str]:
        """Every host that is not its node of this cluster (:func:`kctl.runtime.engine.host_identity.problems`), and
        every machine two nodes reach: one line each."""
        uid = hid.read_uid(Path(spec.state_dir)) if spec.state_dir else None
        names = {n.hostname: h for h, n, _s in services_of(spec)}
        out: list[str] = []
        seen: list[tuple[str, str | None]] = []
        for node, f in facts:
            if f is None:
                continue
            where = f"{node.hostname} ({spec.node_address(node)})"
            want = hid.Expected(spec.name, uid, names.get(node.hostname, node.hostname), node.id)
            out += [f"{where}: {why}" for why in hid.problems(want, f, data=data)]
            seen.append((where, f.machine_id))
        return out + hid.same_machines(seen)

    def _refuse_foreign(self, problems: list[str], doing: str) -> None:
        if problems:
            raise KctlError(f"refusing to {doing}: the hosts are not all this cluster's nodes; nothing was changed"
                            " on any host:\n  - " + "\n  - ".join(problems), hint=hid.HINT)

    def preflight(self, spec: ClusterSpec, existing: dict[str, ContainerInfo], dc: Any, say: Progress,
                  strict_spread: bool = False) -> None:
        """:meth:`host_problems` before any host is changed; one KctlError lists every host's problem. First, with
        ssh.trust_on_first_use, each host whose key no known-hosts file holds has it recorded, said per host
        with its fingerprint (one at a time: they may share one file)."""
        ssh = Ssh(spec)
        ssh.check_known_hosts()  # once, not once per host: /dev/null or a directory is refused before any login
        ssh.control_dir()
        if spec.ssh.trust_on_first_use:
            for _h, node, _s in services_of(spec):
                said = ssh.trust_new(node)
                if said:
                    say(said)
        found = self.host_checks(spec)
        problems = [p for _n, p, _f in found if p]
        if problems:
            raise KctlError("cannot deploy to the hosts; nothing was changed on any host:\n  - "
                            + "\n  - ".join(problems),
                            hint="fix each host (or nodes[].advertised_host and ssh: in kctl.yaml), then run"
                                 " `kctl up` again")
        self._refuse_foreign(self.identity_problems(spec, [(n, f) for n, _p, f in found]), "install")
        short = spark_short_of_memory(spec, [(n, f) for n, _p, f in found])
        if short:
            raise UsageError(short, hint="lower spark.worker_memory in kctl.yaml; nothing was changed on any host")
        say(f"hosts: {len(found)} reachable over ssh, with sudo, systemd and Java 17+; each one this cluster's node"
            " or bare")

    def _install(self, spec: ClusterSpec, node: NodeSpec, local: Path) -> list[str]:
        """Ship one node's bundle and run its install.sh; the services it says need a restart."""
        return Ssh(spec).install_bundle(node, local, REMOTE_BUNDLE.format(cluster=spec.name), "install.sh")

    def _install_all(self, spec: ClusterSpec, state_dir: Path, hosts: list[str],
                     say: Progress) -> tuple[dict[str, Any], dict[str, list[str]]]:
        made = {b.host: b for b in bundle.write_bundles(spec, state_dir, state_dir / "bundle", progress=say)}
        nodes = [spec.node(h) for h in hosts]

        def install(n: NodeSpec) -> list[str]:
            again = self._install(spec, n, made[n.hostname].path)
            bundle.consume_permits(state_dir, n.hostname)  # placed on the host, if it was new: never again
            return again

        with _pool(len(nodes)) as pool:
            restarts = dict(zip(hosts, pool.map(install, nodes), strict=True))
        return made, restarts

    def deliver(self, spec: ClusterSpec, state_dir: Path, say: Progress) -> None:
        """Every host's bundle installed; nothing restarted (the roll that follows restarts what must: `kctl
        apply` decides from what each process runs, so install.sh's record of pending restarts is cleared)."""
        hosts = [h for h, _n, _s in services_of(spec)]
        _made, restarts = self._install_all(spec, state_dir, hosts, say)
        with _pool(len(hosts)) as pool:
            list(pool.map(lambda h: Ssh(spec).check(spec.node(h), ["rm", "-rf", contract.HOST_PENDING_DIR],
                                                     timeout=60), hosts))
        changed = [h for h in hosts if restarts[h]]
        if changed:
            say(f"installed the new files on {', '.join(changed)}: they take effect as the roll restarts each"
                " service")

    def deploy(self, spec: ClusterSpec, state_dir: Path, say: Progress, services: list[str]) -> None:
        """Install the bundles of ``services`` (hosts) and start every service that is not running, ZooKeeper (on
        KRaft: the controllers) on every host before any broker. A running service whose files changed is not
        restarted here: install.sh
        records it as pending on its host (:meth:`pending_restarts`), and `kctl up` restarts those through the
        gated roll, one node at a time (:mod:`kctl.roll.up`)."""
        made, restarts = self._install_all(spec, state_dir, services, say)
        for host, again in restarts.items():
            say(f"{host}: bundle installed" + (f"; {', '.join(again)} to restart through the roll (its files"
                                                f" changed)" if again else ""))
        for svc in PROGRAMS:  # the metadata quorum (ZooKeeper, or KRaft controllers) on every host before any broker
            todo = [h for h in services if svc in made[h].services and svc not in restarts[h]]
            with _pool(len(todo)) as pool:
                list(pool.map(lambda host, svc=svc: self.start_service(spec, host, svc), todo))

    def pending_restarts(self, spec: ClusterSpec) -> dict[str, list[str]]:
        """host -> its running services that install.sh recorded as pending (their process predates the files
        installed for them; kctl-prepare clears the record when the service starts again)."""
        found = [(h, n) for h, n, _s in services_of(spec)]
        shell = "; ".join(f"[ -e {contract.HOST_PENDING_DIR}/{s} ] && systemctl is-active --quiet"
                          f" {contract.unit_name(s)} && echo {s}" for s in PROGRAMS) + "; true"

        def look(node: NodeSpec) -> list[str]:
            try:
                code, out = Ssh(spec).run(node, ["sh", "-c", shell], timeout=30, stderr=False)
            except SshError:
                return []
            return [s for s in out.split() if s in PROGRAMS] if code == 0 else []

        with _pool(len(found)) as pool:
            seen = list(pool.map(lambda item: look(item[1]), found))
        return {h: svcs for (h, _n), svcs in zip(found, seen, strict=True) if svcs}

    def ps(self, spec: ClusterSpec, state_dir: Path) -> str:
        units = " ".join(contract.unit_name(s) for s in PROGRAMS)
        lines: list[str] = []
        for n in spec.nodes:
            try:
                _code, out = Ssh(spec).run(n, ["sh", "-c", f"systemctl --no-pager status {units} | head -n 40"],
                                           timeout=20)
            except SshError as exc:
                out = exc.message
            lines.append(f"== {n.hostname} ({spec.node_address(n)})\n{out.rstrip()}")
        return "\n".join(lines) + "\n"

    def host_facts(self, spec: ClusterSpec, nodes: list[NodeSpec]) -> list[tuple[NodeSpec, HostFacts | None]]:
        """What each host holds of kctl (None: ssh failed there), asked of every host at once."""
        services = {n.hostname: s for _h, n, s in services_of(spec)}

        def look(node: NodeSpec) -> HostFacts | None:
            script = hid.observe_script(hid.data_dirs(spec, node, services.get(node.hostname, contract.SERVICES)))
            try:
                code, out = Ssh(spec).run(node, ["sh", "-c", script], timeout=spec.ssh.connect_timeout + 20,
                                          stderr=False)
            except SshError:
                return None
            return hid.parse_facts(out) if code == 0 else None

        with _pool(len(nodes)) as pool:
            return list(zip(nodes, pool.map(look, nodes), strict=True))

    def check_before_down(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool) -> None:
        """Every host that answers is this cluster's node, or holds nothing of kctl (``volumes``: nor data that
        kctl did not install): else nothing is stopped, uninstalled or deleted anywhere."""
        doing = "uninstall and delete the data" if volumes else "uninstall"
        self._refuse_foreign(self.identity_problems(spec, self.host_facts(spec, list(spec.nodes)), data=volumes),
                             doing)

    def _require_own(self, spec: ClusterSpec, node: NodeSpec, *, data: bool) -> None:
        self._refuse_foreign(self.identity_problems(spec, self.host_facts(spec, [node]), data=data),
                             f"change {node.hostname}'s host")

    def _uninstall(self, spec: ClusterSpec, node: NodeSpec, *, volumes: bool) -> bool:
        """Run the installed uninstall.sh (``volumes``: with --purge-data; on a host without an install, the data
        root alone). Its caller has checked the host is this node's (:meth:`identity_problems`)."""
        flag = " --purge-data" if volumes else ""
        shell = f"if [ -x {UNINSTALL} ]; then exec {UNINSTALL}{flag}; else echo not-installed; fi"
        out = Ssh(spec).check(node, shell=shell, timeout=300, what="uninstall.sh")
        if volumes and "not-installed" in out:
            Ssh(spec).check(node, shell=f"rm -rf {shlex.quote(contract.DATA_ROOT)}", timeout=120)
        return "not-installed" not in out

    def remove(self, spec: ClusterSpec, state_dir: Path, *, volumes: bool, dc: Any) -> int:
        looks = self._looks(spec, 15.0)
        reachable = [n for n, state, _d, _p in looks if state != "unreachable"]
        with _pool(len(reachable)) as pool:
            done = sum(pool.map(lambda n: self._uninstall(spec, n, volumes=volumes), reachable))
        lost = [f"{n.hostname} ({spec.node_address(n)})" for n, state, _d, _p in looks if state == "unreachable"]
        if lost:
            raise KctlError(f"uninstalled from {done} host(s); not from {', '.join(lost)}: kctl cannot reach"
                            " it over ssh", hint="run `kctl down` again once it answers, or run"
                            f" {UNINSTALL} there")
        return done

    def start_one(self, spec: ClusterSpec, state_dir: Path, host: str, say: Progress | None = None) -> None:
        self.preflight(spec, {}, None, say or (lambda _m: None))  # a key trusted on first use is said there
        self.deploy(spec, state_dir, lambda _m: None, [host])

    def recreate_one(self, spec: ClusterSpec, state_dir: Path, host: str) -> None:
        """A host is not made again: its bundle is installed again and its stopped services started (ZooKeeper,
        then Kafka; the roll's step has stopped them); one that runs and whose files changed is left recorded as
        pending for the roll (:meth:`pending_restarts`)."""
        self.deploy(spec, state_dir, lambda _m: None, [host])

    def remove_one(self, spec: ClusterSpec, host: str, *, stop_timeout: int = 180, keep_data: bool = False) -> bool:
        node = spec.node(host)
        self._require_own(spec, node, data=False)
        if stop_timeout > 0:
            for svc in ("kafka", "controller", "zookeeper"):
                if svc == "controller" and not spec.on_kraft:
                    continue
                try:
                    self.stop_service(spec, host, svc)
                except KctlError:
                    pass
        return self._uninstall(spec, node, volumes=False)  # the data go only with purge_node_data

    def purge_node_data(self, spec: ClusterSpec, host: str) -> None:
        node = spec.node(host)
        self._require_own(spec, node, data=True)
        Ssh(spec).check(node, shell=f"rm -rf {shlex.quote(contract.DATA_ROOT)}", timeout=120,
                        what=f"removing {contract.DATA_ROOT}")

    # ----- faults -------------------------------------------------------------------------------

    def _no_faults(self) -> KctlError:
        return KctlError("failure drills do not run on engine hosts yet: they act on containers",
                         hint="`kctl restart NODE --service kafka` stops and starts a service through systemd")

    def fault_targets(self, spec: ClusterSpec, dc: Any, state_dir: str | None = None) -> list[Any]:
        raise self._no_faults()

    def stop_node(self, spec: ClusterSpec, host: str, container: Any) -> None:
        raise self._no_faults()

    def start_node(self, spec: ClusterSpec, host: str, container: Any, dc: Any, *, killed_id: str | None,
                   timeout: float) -> None:
        raise self._no_faults()

    def cut_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> None:
        raise self._no_faults()

    def mend_network(self, spec: ClusterSpec, host: str, container: Any, dc: Any) -> bool:
        raise self._no_faults()


def spark_short_of_memory(spec: ClusterSpec, facts: list[tuple[NodeSpec, HostFacts | None]]) -> str | None:
    """kctl.yaml's Spark workers (one per host: kctl.model.properties.spark_placement) whose worker_memory and the
    worker's own JVM do not fit in their host's memory, said in one line; None when they fit (or none is declared)."""
    if spec.spark is None:
        return None
    need = spark_memory_mb(spec.spark.worker_memory) + spark_memory_mb(SPARK_DAEMON_MEMORY)
    workers = set(spark_placement(spec)[1])
    short = [f"{n.hostname} ({spec.node_address(n)}) has {f.mem_total_mb} MiB" for n, f in facts
             if f is not None and f.mem_total_mb is not None and n.hostname in workers and need > f.mem_total_mb]
    if not short:
        return None
    return (f"spark: worker_memory {spec.spark.worker_memory} (+{SPARK_DAEMON_MEMORY} for the worker itself) needs"
            f" {need} MiB on each worker's host; " + ", ".join(short))


def systemd_states(text: str) -> dict[str, str]:
    """Pure: program -> state in supervisord's words from ``systemctl show --property=Id,LoadState,ActiveState,
    SubState UNIT...`` (a block of properties per unit, blank lines between them); a unit not installed
    (LoadState=not-found) is left out, a state supervisord has no word for is UNKNOWN."""
    units = {contract.unit_name(p): p for p in PROGRAMS}
    out: dict[str, str] = {}
    for block in text.split("\n\n"):
        props = {key: value for key, sep, value in (line.partition("=") for line in block.splitlines()) if sep}
        program = units.get(props.get("Id", ""))
        if program is None or props.get("LoadState") == "not-found":
            continue
        active, sub = props.get("ActiveState", ""), props.get("SubState", "")
        out[program] = "BACKOFF" if active == "activating" and sub == "auto-restart" else \
            _AS_SUPERVISORD.get(active, "UNKNOWN")
    return out


def _java_major(version_line: str) -> int | None:
    """17 from 'openjdk version "17.0.13" 2024-10-15'; 8 from '"1.8.0_402"'; None without a version."""
    import re

    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_line)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major
