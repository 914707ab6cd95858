"""Fault injectors for a cluster's containers, Docker only: the one implementation behind the testing
API's ``KafkaCluster.kill/pause/disconnect/netem`` and the failure drills of ``kctl drill run``.

    with Faults(spec) as faults:          # every fault still in place is removed on exit
        faults.kill("logger1", "kafka")   # SIGKILL the broker JVM
        ...
        faults.start("logger1", "kafka")  # healed: no longer pending

Containers are found by the cluster's label (``io.kctl.cluster``) and, with a state dir,
only those labelled with that state dir: a fault never reaches another cluster's containers.
Each injection records how to undo it; healing it forgets the record, and :meth:`Faults.heal`
(called on exit from the ``with`` block, whatever ended it) undoes whatever is left.
:func:`interruptible` turns SIGTERM into the same exception as Ctrl-C, so the undo runs for both.

Every act on a container that differs between Compose and Swarm (stopping and starting a node's container,
cutting its network) is the engine's (:class:`kctl.runtime.engine.engines.Engine`); the faults act on the containers
of the engine kctl talks to (on Swarm, a node whose task runs on another Swarm node is refused with a hint).
"""

from __future__ import annotations

import contextlib
import signal as _signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from kctl import contract
from kctl.errors import KctlError
from kctl.model.properties import services_of
from kctl.model.spec import ClusterSpec
from kctl.runtime import docker_api
from kctl.runtime.engine import engines
from kctl.runtime.engine.base import Capability
from kctl.wait import Stage, ticks, wait_for_stages

# Bracketed first letters: the pattern must not match the command line of the
# `timeout ... pkill` that carries it.
# The broker's and the KRaft controller's JVMs both run kafka.Kafka: their properties file tells them apart.
JVM_PATTERN = {"kafka": rf"[k]afka\.Kafka {contract.CONF_DIR}/server\.properties", "zookeeper": "[Q]uorumPeerMain",
               "controller": rf"[k]afka\.Kafka {contract.CONF_DIR}/controller\.properties"}
# supervisord states of a process that is down and stays down until started
DOWN = ("STOPPED", "EXITED", "FATAL", "BACKOFF")
# iptables chain of the loss fallback (kernels built without sch_netem)
LOSS_CHAIN = "KCTL_LOSS"
# how long a killed node's container may take to come back (engine swarm: its replacement task, after the
# restart_policy's delay of 5 s)
REPLACE_TIMEOUT = 120.0
# pausing a node: tries, 0.5 s apart, while the freezer gives up on busy processes (Faults.pause)
PAUSE_ATTEMPTS = 5


@dataclass
class Pending:
    """A fault in place, and how to take it away."""

    what: str
    undo: Callable[[], None]


@dataclass
class HealReport:
    undone: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class Faults:
    """Inject and remove faults on one cluster's containers (by host name: ``logger1``)."""

    def __init__(self, spec: ClusterSpec, dc: Any = None, state_dir: Path | None = None) -> None:
        self.spec = spec
        self._dc = dc
        self.state_dir = str(state_dir.resolve()) if state_dir is not None else None
        self.pending: dict[tuple[str, str], Pending] = {}
        self.engine = engines.for_spec(spec)
        self._killed: dict[str, str] = {}  # host -> the id of the container a fault killed

    # ----- containers ------------------------------------------------------------------

    def docker(self) -> Any:
        if self._dc is None:
            self._dc = self.engine.client()
        return self._dc

    def containers(self) -> list[Any]:
        """One container per host: on Swarm the current task's (Swarm keeps earlier tasks' exited ones)."""
        return self.engine.fault_targets(self.spec, self.docker(), self.state_dir)

    def container(self, host: str) -> Any:
        for c in self.containers():
            if docker_api.host_of(c) == host:
                return c
        self.engine.not_here(self.spec, host)  # e.g. on another Swarm node: says so
        raise KctlError(f"no container {host} in cluster {self.spec.name}", hint="is it up? see `kctl status`")

    def exec(self, host: str, argv: list[str], timeout: float = 60) -> tuple[int, str]:
        return self.engine.exec_in(self.spec, host, argv, timeout=timeout, dc=self.docker())

    def _remember(self, kind: str, host: str, what: str, undo: Callable[[], None]) -> None:
        self.pending.setdefault((kind, host), Pending(what, undo))

    def _forget(self, kind: str, host: str) -> None:
        self.pending.pop((kind, host), None)

    # ----- processes -------------------------------------------------------------------

    @staticmethod
    def check_service(service: str) -> None:
        if service not in JVM_PATTERN:
            raise KctlError(f"unknown service {service!r}", hint="use kafka, zookeeper or node")

    def kill(self, host: str, service: str = "kafka", signal: str = "SIGKILL", *, hold: bool = True) -> None:
        """Send ``signal`` to a node's Kafka or ZooKeeper JVM (or, service="node", to its container).

        The node's supervisor starts a process that died again (self-healing): with ``hold`` (the default)
        the process is held down until :meth:`start` releases it, and this waits until it is gone; without,
        it comes back by itself (:meth:`wait_back` waits for that).
        """
        if service == "node":
            c = self.container(host)
            self._remember("container", host, f"{host} killed ({signal})", lambda: self.start_container(host))
            self._killed[host] = c.id
            c.kill(signal=signal)
            return
        self.check_service(service)
        sig = signal.removeprefix("SIG")
        self._remember(service, host, f"{service} on {host} killed ({signal})", lambda: self.start(host, service))
        # Held: its supervisor's start waits for the release. Not held: the death is an injected fault, not a
        # crash loop, so the wrapper's record of earlier starts goes and the restart gets no back-off.
        self.exec(host, ["touch", contract.hold_file(service)] if hold else ["rm", "-f", contract.starts_file(service)],
                  timeout=10)
        code, out = self.exec(host, ["pkill", f"-{sig}", "-f", JVM_PATTERN[service]])
        if code != 0:
            self.exec(host, ["rm", "-f", contract.hold_file(service)], timeout=10)
            self._forget(service, host)
            raise KctlError(f"no {service} process to kill on {host}: {out.strip()}")
        if hold:
            # SIGTERM runs a controlled shutdown: give it supervisord's own stop time.
            self.wait_process(host, service, running=False, timeout=30 if sig == "KILL" else 150)

    def wait_back(self, host: str, service: str, timeout: float = 180) -> None:
        """Wait until a process that :meth:`kill` left to heal (``hold=False``) runs again by itself."""
        self.wait_process(host, service, running=True, timeout=timeout)
        self._forget(service, host)

    def freeze(self, host: str, service: str = "kafka") -> None:
        """SIGSTOP one JVM (a hung broker or ZooKeeper: its connections stay open, nothing answers)."""
        self.check_service(service)
        self._remember(f"frozen-{service}", host, f"{service} on {host} frozen (SIGSTOP)",
                       lambda: self.thaw(host, service))
        code, out = self.exec(host, ["pkill", "-STOP", "-f", JVM_PATTERN[service]])
        if code != 0:
            self._forget(f"frozen-{service}", host)
            raise KctlError(f"no {service} process to freeze on {host}: {out.strip()}")

    def thaw(self, host: str, service: str = "kafka") -> None:
        """SIGCONT what :meth:`freeze` stopped."""
        self.check_service(service)
        self.exec(host, ["pkill", "-CONT", "-f", JVM_PATTERN[service]])
        self._forget(f"frozen-{service}", host)

    def thaw_stopped(self, host: str, service: str) -> bool:
        """SIGCONT the service's JVM if it is stopped (state T), whoever stopped it; whether it was."""
        script = (f"for p in $(pgrep -f '{JVM_PATTERN[service]}'); do"
                  " grep -q '^State:.*(stopped)' /proc/$p/status && kill -CONT $p && echo thawed; done; exit 0")
        _, out = self.exec(host, ["sh", "-c", script], timeout=10)
        self._forget(f"frozen-{service}", host)
        return "thawed" in out

    def stop(self, host: str, service: str = "kafka") -> None:
        """Stop a process gracefully (SIGTERM via supervisord), or a node's container."""
        if service == "node":
            c = self.container(host)
            self._remember("container", host, f"{host} stopped", lambda: self.start_container(host))
            try:
                self.engine.stop_node(self.spec, host, c)
            except KctlError:
                self._forget("container", host)
                raise
            return
        self.check_service(service)
        self._remember(service, host, f"{service} on {host} stopped", lambda: self.start(host, service))
        self.engine.supervise(self.spec, host, "stop", service, timeout=130, dc=self.docker(), check=False)

    def start(self, host: str, service: str = "kafka") -> None:
        """Start a stopped or killed process (its container too, if that is not running)."""
        container = self.container(host)
        container.reload()
        if container.status == "paused":
            self.unpause(host)
        elif container.status != "running":
            self.start_container(host)  # starts every process of the node
            return
        if service == "node":
            return
        self.check_service(service)
        self.exec(host, ["rm", "-f", contract.hold_file(service)], timeout=10)  # a held process starts now
        self.engine.supervise(self.spec, host, "start", service, timeout=60, dc=self.docker(), check=False)
        # a broker's start waits for a ZooKeeper quorum that may be coming back in the same restore
        self.wait_process(host, service, running=True, timeout=150)
        self._forget(service, host)

    def start_container(self, host: str, c: Any | None = None) -> None:
        """Bring a node's stopped or killed container back (Swarm: wait for its replacement task)."""
        self.engine.start_node(self.spec, host, c or self.container(host), self.docker(),
                               killed_id=self._killed.pop(host, None), timeout=REPLACE_TIMEOUT)
        self._forget("container", host)
        for service in contract.SERVICES:
            self._forget(service, host)

    def wait_process(self, host: str, service: str, running: bool, timeout: float = 30) -> None:
        c = self.container(host)
        want = "RUNNING" if running else "STOPPED"

        def probe() -> tuple[bool, str]:
            st = self.engine.processes(docker_api.from_sdk(c), timeout=5).get(service, "?")
            return st == want or (not running and st in docker_api.NOT_RUNNING), f"{host} {service} {st}"

        wait_for_stages([Stage(f"{host} {service} {want.lower()}", probe)], timeout=timeout, poll=0.2)

    # ----- the whole node ----------------------------------------------------------------

    def pause(self, host: str) -> None:
        """Freeze every process of a node (SIGSTOP through the freezer: a hung host). cgroup v1's freezer gives
        up while the node's processes are busy being scheduled ("unable to freeze", seen on two loaded cores)
        and leaves them running: tried again, up to PAUSE_ATTEMPTS times; still refused, nothing is paused."""
        APIError = docker_api.sdk().errors.APIError  # noqa: N806 - the SDK's class

        c = self.container(host)
        self._remember("pause", host, f"{host} paused", lambda: self.unpause(host))
        for attempt in ticks(0.5, count=PAUSE_ATTEMPTS):
            try:
                c.pause()
                return
            except APIError as exc:
                said = str(getattr(exc, "explanation", None) or exc)
                if "unable to freeze" not in said or attempt == PAUSE_ATTEMPTS - 1:
                    self.unpause(host)  # (runc thaws what it froze; this makes sure, and forgets the fault)
                    raise KctlError(f"cannot pause {host}: {said}",
                                    hint="the node was left running; try again when the machine is less busy"
                                    ) from None

    def unpause(self, host: str) -> None:
        c = self.container(host)
        c.reload()
        if c.status == "paused":
            c.unpause()
        self._forget("pause", host)

    def disconnect(self, host: str) -> None:
        """Cut a node off the cluster network (a network partition of one node)."""
        c = self.container(host)
        self._remember("network", host, f"{host} disconnected", lambda: self.connect(host))
        try:
            self.engine.cut_network(self.spec, host, c, self.docker())
        except KctlError:
            self._forget("network", host)
            raise

    def connect(self, host: str) -> None:
        self.engine.mend_network(self.spec, host, self.container(host), self.docker())
        self._forget("network", host)

    # ----- the network's quality ----------------------------------------------------------

    def netem(self, host: str, delay_ms: int = 100, loss_percent: float = 0.0, jitter_ms: int = 0) -> str:
        """Add latency and packet loss to a node's traffic with ``tc netem`` (the image has iproute2, the
        container NET_ADMIN); returns what was applied.

        A kernel without the netem qdisc cannot delay packets: loss is then applied with iptables'
        ``statistic`` match instead, and a KctlError says so when only a delay was asked for.
        """
        if delay_ms < 0 or not 0 <= loss_percent <= 100:
            raise KctlError(f"netem: delay {delay_ms} ms, loss {loss_percent}%: out of range",
                            hint="delay >= 0 ms, loss between 0 and 100 %")
        self.clear_netem(host)
        argv = ["tc", "qdisc", "add", "dev", self.device(host), "root", "netem"]
        if delay_ms:
            argv += ["delay", f"{delay_ms}ms"] + ([f"{jitter_ms}ms"] if jitter_ms else [])
        if loss_percent:
            argv += ["loss", f"{loss_percent}%"]
        self._remember("netem", host, f"netem on {host}", lambda: None if self.clear_netem(host) else None)
        code, out = self.exec(host, argv, timeout=10)
        if code == 0:
            return f"tc netem on {host}: delay {delay_ms} ms, loss {loss_percent}%"
        text = out.strip()
        if "Operation not permitted" in text:
            self._forget("netem", host)
            raise KctlError(f"{host} may not change its network (tc: {text})",
                            hint="its container lacks the NET_ADMIN capability: `kctl up` recreates it")
        if "qdisc kind is unknown" in text or "No such file or directory" in text:
            if not loss_percent:
                self._forget("netem", host)
                raise KctlError(f"this kernel has no netem qdisc: {host} cannot be slowed down ({text})",
                                hint="load sch_netem (`modprobe sch_netem`) on the Docker host, or ask for"
                                     " packet loss, which iptables can apply instead")
            self._loss_rule(host, loss_percent)
            return f"iptables on {host}: loss {loss_percent}% (no netem qdisc in this kernel: no delay)"
        self._forget("netem", host)
        raise KctlError(f"netem on {host} failed (exit {code}): {text[-300:]}",
                        hint="is iproute2 in the node image? `kctl image build` rebuilds it")

    def device(self, host: str) -> str:
        """The node's network interface on the cluster network (its only one besides lo)."""
        _, out = self.exec(host, ["sh", "-c", 'for d in /sys/class/net/*; do [ "${d##*/}" = lo ] || echo "${d##*/}";'
                                              " done"], timeout=10)
        devices = out.split()
        if not devices:
            raise KctlError(f"{host} has no network interface besides lo", hint="is it disconnected? `kctl status`")
        return devices[0]

    def _loss_rule(self, host: str, loss_percent: float) -> None:
        prob = f"{loss_percent / 100:.4f}"
        script = (f"iptables -N {LOSS_CHAIN} && "
                  f"iptables -A {LOSS_CHAIN} ! -i lo -m statistic --mode random --probability {prob} -j DROP && "
                  f"iptables -A {LOSS_CHAIN} ! -o lo -m statistic --mode random --probability {prob} -j DROP && "
                  f"iptables -I INPUT -j {LOSS_CHAIN} && iptables -I OUTPUT -j {LOSS_CHAIN}")
        code, out = self.exec(host, ["sh", "-c", script], timeout=10)
        if code != 0:
            self.clear_netem(host)
            raise KctlError(f"packet loss on {host} failed (exit {code}): {out.strip()[-300:]}",
                            hint="is iptables in the node image? `kctl image build` rebuilds it")

    def clear_netem(self, host: str) -> bool:
        """Remove the netem qdisc and the loss rules; whether there was anything to remove."""
        c = self.container(host)
        c.reload()
        removed = False
        if c.status == "running":
            _, out = self.exec(host, ["sh", "-c", 'for d in /sys/class/net/*; do if [ "${d##*/}" != lo ] &&'
                                                   ' tc qdisc del dev "${d##*/}" root 2>/dev/null; then echo removed;'
                                                   " fi; done; exit 0"], timeout=10)
            removed = "removed" in out
            _, out = self.exec(host, ["sh", "-c",
                                      "command -v iptables >/dev/null || exit 0; "
                                      f"while iptables -D INPUT -j {LOSS_CHAIN} 2>/dev/null; do echo removed; done; "
                                      f"while iptables -D OUTPUT -j {LOSS_CHAIN} 2>/dev/null; do echo removed; done; "
                                      f"iptables -F {LOSS_CHAIN} 2>/dev/null; iptables -X {LOSS_CHAIN} 2>/dev/null;"
                                      " exit 0"], timeout=10)
            removed = removed or "removed" in out
        self._forget("netem", host)
        return removed

    # ----- healing -----------------------------------------------------------------------

    def heal(self) -> HealReport:
        """Undo every fault still pending, newest first; a failing undo does not stop the others."""
        report = HealReport()
        for key, p in reversed(list(self.pending.items())):
            try:
                p.undo()
                report.undone.append(p.what)
            except Exception as exc:  # noqa: BLE001 - keep healing the rest, report this one
                report.failed.append(f"{p.what}: {getattr(exc, 'message', exc)}")
            self.pending.pop(key, None)
        return report

    def restore(self) -> list[str]:
        """Put every container of the cluster back together, whoever broke it: unpause, start, reconnect,
        remove netem, start stopped processes. Returns what was undone."""
        undone: list[str] = []
        running: list[tuple[Any, str, tuple[str, ...]]] = []
        # First the containers and the network, on every node: a process started while its peers are
        # still paused or cut off waits for a quorum it cannot get (a broker's start gives up then).
        for c in self.containers():
            host = docker_api.host_of(c)
            c.reload()
            if c.status == "paused":
                c.unpause()
                undone.append(f"unpaused {host}")
                c.reload()
            if self.engine.mend_network(self.spec, host, c, self.docker()):
                undone.append(f"reconnected {host}")
            if c.status not in ("running", "paused"):
                self.start_container(host, c)  # its supervisord starts every process of the node
                undone.append(f"started {host}")
                continue
            if self.clear_netem(host):
                undone.append(f"removed netem on {host}")
            services = docker_api.services_of_labels(c.labels or {})
            for service in services:
                if self.thaw_stopped(host, service):
                    undone.append(f"thawed {service} on {host}")
            running.append((c, host, services))
        # Then the stopped processes: every ZooKeeper before any broker.
        states = {host: self.engine.processes(docker_api.from_sdk(c), timeout=5) for c, host, _s in running}
        for zookeeper_pass in (True, False):
            for _c, host, _services in running:
                for service, state in states[host].items():
                    if (service == "zookeeper") == zookeeper_pass and state in DOWN:
                        self.start(host, service)
                        undone.append(f"started {service} on {host}")
        self.pending.clear()  # the sweep covered every kind of fault
        return undone

    def __enter__(self) -> Faults:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        # Ctrl-C during the heal itself must not leave a node broken: finish first.
        with deferred_interrupts():
            self.heal()


class HostFaults(Faults):
    """The same faults on engine hosts, through ssh and systemd (:class:`kctl.runtime.engine.hosts.HostsEngine`).

    A process fault acts on the service's unit: SIGKILL or SIGTERM its JVM (systemd starts it again: the
    units' Restart=on-failure, and RestartForceExitStatus=143 for a SIGTERM that did not come from a stop), hold
    it down by stopping the unit, SIGSTOP/SIGCONT it. Faults on a whole host (stopping or pausing it, cutting
    or slowing its network) are refused: on a real host they would take kctl's own ssh session with them, or
    need firewall and qdisc changes no drill should make on an operator's machine.
    """

    # drill scenarios that need a whole-host fault
    UNSUPPORTED = {"broker-partition": "cuts a node's network", "slow-network": "changes a node's qdisc",
                   "mirror-failover": "runs a mirror, which engine hosts does not"}

    def _refused(self, what: str) -> KctlError:
        return KctlError(f"engine hosts: {what} is not a fault kctl injects on a host (it would cut kctl's own"
                         " ssh session or change the host's network)",
                         hint="kill, stop or freeze one service instead (`kctl drill list` says which drills)")

    def containers(self) -> list[Any]:
        found = [c.name for c in self.engine.observe(self.spec) if c.state == "running"]
        if not found:
            raise KctlError(f"no host of cluster {self.spec.name} answers with kctl's bundle installed",
                            hint="is it up? see `kctl status`")
        return found

    def container(self, host: str) -> Any:
        if host not in {h for h, _n, _s in services_of(self.spec)}:
            raise KctlError(f"no host {host} in cluster {self.spec.name}", hint="see `kctl status`")
        return host

    def _unit_kill(self, host: str, service: str, signal: str) -> None:
        code, out = self.exec(host, ["systemctl", "kill", "--kill-who=main", "-s", signal,
                                     contract.unit_name(service)], timeout=30)
        if code != 0:
            raise KctlError(f"no {service} process to signal on {host}: {out.strip()[-300:]}")

    def kill(self, host: str, service: str = "kafka", signal: str = "SIGKILL", *, hold: bool = True) -> None:
        if service == "node":
            raise self._refused(f"killing the whole of {host}")
        self.check_service(service)
        self._remember(service, host, f"{service} on {host} killed ({signal})", lambda: self.start(host, service))
        if not hold:
            self._unit_kill(host, service, signal)  # systemd starts it again: no command heals it
            return
        # Held: the unit is stopped as soon as the JVM is gone, before systemd's restart (RestartSec) is due.
        unit = contract.unit_name(service)
        script = (f"systemctl kill --kill-who=main -s {signal} {unit} || exit 3; n=0;"
                  f" while pgrep -f '{JVM_PATTERN[service]}' >/dev/null && [ $n -lt 1500 ]; do sleep 0.1;"
                  f" n=$((n+1)); done; systemctl stop {unit}")
        code, out = self.exec(host, ["sh", "-c", script], timeout=200)
        if code != 0:
            self._forget(service, host)
            raise KctlError(f"no {service} process to kill on {host}: {out.strip()[-300:]}")

    def freeze(self, host: str, service: str = "kafka") -> None:
        self.check_service(service)
        self._remember(f"frozen-{service}", host, f"{service} on {host} frozen (SIGSTOP)",
                       lambda: self.thaw(host, service))
        try:
            self._unit_kill(host, service, "SIGSTOP")
        except KctlError:
            self._forget(f"frozen-{service}", host)
            raise

    def thaw(self, host: str, service: str = "kafka") -> None:
        self.check_service(service)
        self._unit_kill(host, service, "SIGCONT")
        self._forget(f"frozen-{service}", host)

    def stop(self, host: str, service: str = "kafka") -> None:
        if service == "node":
            raise self._refused(f"stopping the whole of {host}")
        self.check_service(service)
        self._remember(service, host, f"{service} on {host} stopped", lambda: self.start(host, service))
        self.engine.stop_service(self.spec, host, service)

    def start(self, host: str, service: str = "kafka") -> None:
        if service == "node":
            return
        self.check_service(service)
        self.engine.start_service(self.spec, host, service)
        # a broker's start waits for a ZooKeeper quorum that may be coming back in the same restore
        self.wait_process(host, service, running=True, timeout=150)
        self._forget(service, host)

    def wait_process(self, host: str, service: str, running: bool, timeout: float = 30) -> None:
        want = "RUNNING" if running else "STOPPED"

        def probe() -> tuple[bool, str]:
            found = [c for c in self.engine.observe(self.spec, timeout=5) if c.name == host]
            st = self.engine.processes(found[0], timeout=5).get(service, "?") if found else "unreachable"
            return st == want or (not running and st in docker_api.NOT_RUNNING), f"{host} {service} {st}"

        wait_for_stages([Stage(f"{host} {service} {want.lower()}", probe)], timeout=timeout, poll=0.5)

    def pause(self, host: str) -> None:
        raise self._refused(f"pausing the whole of {host}")

    def unpause(self, host: str) -> None:
        self._forget("pause", host)

    def disconnect(self, host: str) -> None:
        raise self._refused(f"cutting {host} off the network")

    def connect(self, host: str) -> None:
        self._forget("network", host)

    def netem(self, host: str, delay_ms: int = 100, loss_percent: float = 0.0, jitter_ms: int = 0) -> str:
        raise self._refused(f"slowing {host}'s network")

    def clear_netem(self, host: str) -> bool:
        self._forget("netem", host)
        return False

    def restore(self) -> list[str]:
        """Every host put back together, whoever broke it: frozen JVMs thawed, then stopped services started,
        every ZooKeeper before any broker."""
        undone: list[str] = []
        hosts = self.containers()
        for host in hosts:
            for _h, _n, services in (t for t in services_of(self.spec) if t[0] == host):
                for service in services:
                    if self.thaw_stopped(host, service):
                        undone.append(f"thawed {service} on {host}")
        seen = {c.name: c for c in self.engine.observe(self.spec, timeout=5)}
        states = {h: self.engine.processes(seen[h], timeout=5) for h in hosts if h in seen}
        for zookeeper_pass in (True, False):
            for host in hosts:
                for service, state in states.get(host, {}).items():
                    if (service == "zookeeper") == zookeeper_pass and state in DOWN:
                        self.start(host, service)
                        undone.append(f"started {service} on {host}")
        self.pending.clear()
        return undone


def open_faults(spec: ClusterSpec, dc: Any = None, state_dir: Path | None = None) -> Faults:
    """The fault injectors of ``spec``'s engine: containers (:class:`Faults`) or hosts (:class:`HostFaults`)."""
    cls = Faults if engines.supports(spec, Capability.CONTAINERS) else HostFaults
    return cls(spec, dc=dc, state_dir=state_dir)


# ----- signals ----------------------------------------------------------------------------


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that ``finally`` and ``with`` blocks undo what they did."""


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` (SIGINT already raises KeyboardInterrupt) inside the block."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise Terminated(f"signal {signum}")

    old = _signal.signal(_signal.SIGTERM, on_term)
    try:
        yield
    finally:
        _signal.signal(_signal.SIGTERM, old)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM back while the block runs (a heal in progress); re-raise after it."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    got: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        got.append(signum)

    old = {s: _signal.signal(s, hold) for s in (_signal.SIGINT, _signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, h in old.items():
            _signal.signal(s, h)
    if got:
        raise Terminated(f"signal {got[0]}") if got[0] == _signal.SIGTERM else KeyboardInterrupt()
