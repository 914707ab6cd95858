"""Which cluster a kctl.yaml names, and whether the one that answers on its ports is that cluster.

A cluster's identity is Kafka's own cluster id (ZooKeeper ``/cluster/id``, which
every broker reports in its Metadata answer), recorded in the state dir at
``kctl up``, and the state dir itself, which every container carries as a label.
Two kctl.yaml on one machine share the default ports and may share the default
name: without this check a command run from the wrong directory would read or
change the other cluster.

The check costs one Kafka Metadata request over a plain socket (a few ms); Docker
is asked only when the recorded id does not settle it (no record yet, or a
mismatch to explain).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from kctl.contract import IDENTITY_FILE
from kctl.deferred import defer_import
from kctl.errors import DockerUnavailable, KctlError, UsageError
from kctl.files import write_durable
from kctl.kafka import describe as kmd
from kctl.model.spec import ClusterSpec, state_dir_for
from kctl.security import store

# Every connecting command runs the check; the engine (Docker, ssh) and the machine's ports are asked only when
# the recorded identity does not settle it.
defer_import("kctl.runtime.engine.engines")
defer_import("kctl.runtime.ports")

from kctl.runtime import ports as machine_ports  # noqa: E402
from kctl.runtime.engine import engines  # noqa: E402


class ForeignCluster(KctlError):
    """What answers, or the containers a command would touch, belong to another cluster; nothing was changed."""

    exit_code = 2


class NotRunning(KctlError):
    """The spec's cluster has no running containers."""

    exit_code = 2


@dataclass(frozen=True)
class Identity:
    cluster: str
    cluster_id: str | None
    state_dir: str
    project: str
    bootstrap_servers: str
    recorded_at: str = ""


@dataclass(frozen=True)
class Owner:
    """Who holds some host ports: a kctl cluster's containers (or something else)."""

    cluster: str | None  # None: no kctl container publishes them
    state_dir: str | None
    cluster_id: str | None = None
    ports: tuple[int, ...] = ()  # which of the asked ports it holds

    def describe(self) -> str:
        if self.cluster is None:
            return "a process that is not a kctl cluster" + (f" (cluster id {self.cluster_id})"
                                                             if self.cluster_id else "")
        bits = [f"cluster id {self.cluster_id}"] if self.cluster_id else []
        if self.state_dir:
            bits.append(f"state dir {self.state_dir}")
        return f"cluster {self.cluster!r}" + (f" ({', '.join(bits)})" if bits else "")


def identity_path(state_dir: Path) -> Path:
    return state_dir / IDENTITY_FILE


def read(state_dir: Path) -> Identity | None:
    """The recorded identity, or None (never started from here, or an unreadable record)."""
    try:
        data = json.loads(identity_path(state_dir).read_text(encoding="utf-8"))
        return Identity(**{k: data.get(k) for k in Identity.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return None


def record(spec: ClusterSpec, state_dir: Path, cluster_id: str | None) -> Identity:
    """Write ``<state>/identity.json`` durably (a crash leaves the old record or the new one): the record of
    which Kafka cluster this state dir made."""
    ident = Identity(cluster=spec.name, cluster_id=cluster_id, state_dir=str(state_dir.resolve()),
                     project=spec.project, bootstrap_servers=spec.bootstrap_servers,
                     recorded_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))

    write_durable(identity_path(state_dir), json.dumps(asdict(ident), indent=2) + "\n")  # fsynced, renamed whole
    return ident


def _ports_of(bootstrap: str) -> set[int]:
    out = set()
    for item in bootstrap.split(","):
        _, _, port = item.strip().rpartition(":")
        if port.isdigit():
            out.add(int(port))
    return out


def owner_of(ports: set[int], cluster_id: str | None = None) -> Owner:
    """The kctl cluster whose running containers publish any of ``ports`` (asks Docker)."""
    try:
        found = engines.every_kctl_container()
    except DockerUnavailable:
        return Owner(None, None, cluster_id)
    for c in found:
        if c.state == "running" and ports & set(c.host_ports):
            recorded = read(Path(c.state_dir)) if c.state_dir else None
            held = sorted({p for x in found if x.state == "running" and x.cluster == c.cluster
                           for p in x.host_ports if p in ports})
            return Owner(c.cluster or None, c.state_dir,
                         cluster_id or (recorded.cluster_id if recorded else None), tuple(held))
    return Owner(None, None, cluster_id)


def _here(spec: ClusterSpec, state_dir: Path, cluster_id: str | None = None) -> str:
    return f"cluster {spec.name!r} (state dir {state_dir.resolve()}" + (
        f", cluster id {cluster_id})" if cluster_id else ")")


def check_containers(spec: ClusterSpec, state_dir: Path) -> list[engines.Container]:
    """This cluster's containers; ForeignCluster when some of them belong to another state dir
    (the same ``name`` used in two directories maps to one Compose project), WrongEngine when the other
    engine made them (a Compose command never touches a Swarm stack, nor the reverse)."""
    found = engines.observe(spec)
    check_state_dirs(spec, state_dir, [(c.name, c.state_dir) for c in found])
    engines.check_engine(spec, [(c.name, c.engine) for c in found])
    return found


def check_state_dirs(spec: ClusterSpec, state_dir: Path, found: list[tuple[str, str | None]]) -> None:
    """ForeignCluster when any (container, its state dir) is not this state dir's."""
    mine = str(state_dir.resolve())
    other = sorted({sd for _, sd in found if sd and sd != mine})
    if other:
        names = ", ".join(n for n, sd in found if sd and sd != mine)
        raise ForeignCluster(
            f"the containers of cluster {spec.name!r} ({names}) belong to state dir {other[0]}, not to this"
            f" kctl.yaml's {mine}; nothing was changed",
            hint=f"run kctl from the directory of {other[0]} to work with that cluster; or give this one"
                 f" another `name` in kctl.yaml (`kctl init --name NAME` picks free ports); or set `state_dir:`"
                 f" to {other[0]} if this kctl.yaml should own that state dir")


def _hint(owner: Owner, then: str) -> str:
    there = f"run kctl from the directory of {owner.state_dir} to work with that cluster; " if owner.state_dir else ""
    return there + then


def _other_ports(spec: ClusterSpec) -> str:
    return f"to run both, give {spec.name!r} other ports (`kctl init --name NAME -f other.yaml` picks free ones)"


def check_ports(spec: ClusterSpec, state_dir: Path) -> None:
    """ForeignCluster when another kctl cluster's running containers publish any of this spec's ports
    (`up` would otherwise only learn that the ports are taken, not by whom)."""
    owner = owner_of(_spec_ports(spec))
    if owner.cluster is not None and owner.cluster != spec.name:
        raise ForeignCluster(
            f"cannot start {_here(spec, state_dir)}: host ports {', '.join(map(str, owner.ports))} are in use on"
            f" 127.0.0.1 by {owner.describe()}; nothing was changed",
            hint=_hint(owner, _other_ports(spec)))


def mismatch(spec: ClusterSpec, state_dir: Path, expected: str, md: kmd.Metadata) -> ForeignCluster:
    owner = owner_of(_ports_of(md.answered_by or spec.bootstrap_servers), md.cluster_id)
    return ForeignCluster(
        f"kctl.yaml names {_here(spec, state_dir, expected)}, but {md.answered_by or spec.bootstrap_servers}"
        f" is answered by {owner.describe()}; nothing was changed",
        hint=_hint(owner, f"`kctl up` starts {spec.name!r} once its ports are free"))


def _spec_ports(spec: ClusterSpec) -> set[int]:
    return {port for n in spec.nodes for port, _, _ in spec.published_ports(n)}


def not_running(spec: ClusterSpec, state_dir: Path, md: kmd.Metadata | None,
                answered: bool | None = None) -> KctlError:
    """This cluster has no running container; ``md`` is what Kafka answered on its ports anyway (or None),
    ``answered`` whether anything (Kafka or ZooKeeper) did (default: whether Kafka did)."""
    answered = md is not None if answered is None else answered
    owner = owner_of(_spec_ports(spec), md.cluster_id if md else None) if answered else None
    if owner is None or (owner.cluster is None and md is None):
        return NotRunning(f"{_here(spec, state_dir)} is not running: none of its containers runs",
                          hint="`kctl up` starts it")
    return ForeignCluster(
        f"{_here(spec, state_dir)} is not running; its ports ({spec.bootstrap_servers}) are held by"
        f" {owner.describe()}; nothing was read or changed",
        hint=_hint(owner, _other_ports(spec)))


def verify(spec: ClusterSpec, state_dir: Path, *, timeout: float = 2.0, seen: str | None = None) -> str | None:
    """Make sure the cluster answering on the spec's ports is the one this state dir made
    (or the one the spec's ``cluster_id`` names).

    ``seen``: the cluster id a command's own client has just read from the Metadata of the spec's
    bootstrap brokers (``kctl consume``); when it is the expected one, that answer is the check and
    no round trip of its own is made. Any other value (or None) goes the whole way below.

    Returns its cluster id (None when its containers run but Kafka does not answer: the
    command's own connection then reports it). Raises ForeignCluster naming both, or
    NotRunning when none of its containers runs.
    A cluster started before identities were recorded gets its record here, once its
    own containers (by state dir label) are the ones running.
    """
    recorded = read(state_dir)
    expected = spec.cluster_id or (recorded.cluster_id if recorded else None)
    if seen is not None and expected and seen == expected:
        return expected
    auth = store.client_settings(spec, state_dir=state_dir, own=True)  # a secured cluster: SASL_SSL as its admin user
    try:
        md: kmd.Metadata | None = kmd.fetch_any(spec.bootstrap_servers, timeout, auth, describe=False)
    except kmd.AuthError as exc:
        raise KctlError(f"cluster {spec.name!r} refused kctl's admin user: {exc}",
                        hint=f"the credentials are in {store.secrets_dir(state_dir)}; is another secured cluster"
                             " answering on these ports? `kctl status`") from None
    except kmd.MetadataError:
        md = None
    if md is not None and expected and md.cluster_id == expected:
        return expected  # the common case: one Metadata round trip, Docker not asked
    if md is not None and expected and md.cluster_id and md.cluster_id != expected:
        raise mismatch(spec, state_dir, expected, md)
    try:
        found: list[engines.Container] | None = check_containers(spec, state_dir)
    except DockerUnavailable:
        found = None
    if found is not None and not any(c.state == "running" for c in found):
        # None of its containers runs: whatever answers on its ports (Kafka or ZooKeeper) is not it.
        raise not_running(spec, state_dir, md)
    if md is None:
        return None
    if found and md.cluster_id and not expected:
        record(spec, state_dir, md.cluster_id)
    return md.cluster_id


def answering(bootstrap: str, timeout: float = 2.0, spec: ClusterSpec | None = None) -> str | None:
    """The cluster id of whatever answers on ``bootstrap`` (None: nothing answers, or no id).

    With a secured ``spec`` (its state dir known) the request goes over SASL_SSL as its admin user. A
    listener that speaks TLS when kctl has no credentials for it is a clear error, not "no answer".
    """
    auth = store.client_settings(spec, own=True) if spec is not None else {}
    try:
        return kmd.fetch_any(bootstrap, timeout, auth, describe=False).cluster_id
    except kmd.MetadataError:
        if not auth and kmd.speaks_tls(bootstrap, timeout):
            raise KctlError(
                f"the cluster at {bootstrap} speaks TLS (a secured cluster): kctl has no credentials or CA for it",
                hint="run the command with -f naming that cluster's kctl.yaml (its state dir holds the admin"
                     " user's password and the CA); other clients take what `kctl client-config` prints"
                     " there") from None
        return None


def check_write(bootstrap: str, cluster_id: str | None, spec: ClusterSpec | None, spec_path: Path) -> None:
    """The write guard: a command that changes something at ``--bootstrap-server`` must reach the cluster
    ``spec_path`` names (its ``cluster_id``, or the one recorded in its state dir); UsageError (exit 2),
    nothing changed, when no kctl.yaml names the cluster that answered (``cluster_id``) or it names another."""
    hint = ("changes go through the kctl.yaml of the cluster they change: run this from that cluster's directory,"
            " without --bootstrap-server")
    there = f"the cluster at {bootstrap} (cluster id {cluster_id or 'unknown'})"
    if spec is None:
        raise UsageError(f"refusing to change {there}: no {spec_path} names it; nothing was changed", hint=hint)
    state = state_dir_for(spec, spec_path).resolve()
    rec = read(state)
    own = spec.cluster_id or (rec.cluster_id if rec else None)
    if own is None or own != cluster_id:
        mine = f"cluster id {own}" if own else "no recorded cluster id"
        raise UsageError(f"refusing to change {there}: {spec_path} names cluster {spec.name!r} ({mine}, state dir"
                         f" {state}); nothing was changed", hint=hint)


# ----- kctl init: a new cluster next to running ones ---------------------------------------------

PORT_STEP = 100  # each further cluster's ports: ZooKeeper 12281.., Kafka 19192.., JMX 20099.., exporters 17100..


@dataclass(frozen=True)
class InitPlan:
    name: str
    settings: dict[str, dict[str, int]]  # kctl.yaml settings on top of the defaults (the chosen ports)
    warnings: list[str]


def _with_offset(name: str, k: int) -> ClusterSpec:
    d = ClusterSpec()
    return ClusterSpec.model_validate({
        "name": name,
        "zookeeper": {"host_port_base": d.zookeeper.host_port_base + k * PORT_STEP},
        "kafka": {"external_port_base": d.kafka.external_port_base + k * PORT_STEP,
                  "jmx_port_base": d.kafka.jmx_port_base + k * PORT_STEP},
        "monitoring": {"monitor_port": d.monitoring.monitor_port + k * PORT_STEP,
                       "prometheus_port": d.monitoring.prometheus_port + k * PORT_STEP,
                       "alertmanager_port": d.monitoring.alertmanager_port + k * PORT_STEP,
                       "kafka_exporter_host_port_base": d.monitoring.kafka_exporter_host_port_base + k * PORT_STEP,
                       "zookeeper_exporter_host_port_base":
                           d.monitoring.zookeeper_exporter_host_port_base + k * PORT_STEP}})


def plan_init(name: str, state_dir: Path, *, pick_ports: bool) -> InitPlan:
    """The kctl.yaml ``kctl init`` should write, and what it should warn about.

    Warns when a cluster of that name lives in another state dir (they would share one
    Compose project), or when another cluster already holds the default ports. With
    ``pick_ports``, the ports move in steps of 100 until all are free and no kctl
    container publishes them.
    """
    try:
        found = engines.every_kctl_container()
    except DockerUnavailable:
        found = []
    published = {p: c for c in found for p in c.host_ports}
    mine = str(state_dir.resolve())
    warnings: list[str] = []
    elsewhere = sorted({c.state_dir for c in found if c.cluster == name and c.state_dir and c.state_dir != mine})
    if elsewhere:
        warnings.append(f"a cluster named {name!r} already exists in {elsewhere[0]}; `kctl up` here would refuse"
                        f" to touch its containers: pick another name (`kctl init --name NAME --force`)")

    def busy(spec: ClusterSpec) -> list[int]:
        used = []
        for port, _what in machine_ports.host_ports(spec):
            if port in published or not machine_ports.port_free(port):
                used.append(port)
        return used

    default = ClusterSpec(name=name)
    taken = busy(default)
    if not taken:
        return InitPlan(name, {}, warnings)
    if pick_ports:
        for k in range(1, 200):
            try:
                cand = _with_offset(name, k)
            except ValueError:
                break  # beyond the port range
            if not busy(cand):
                mon = cand.monitoring
                return InitPlan(name, {"zookeeper": {"host_port_base": cand.zookeeper.host_port_base},
                                       "kafka": {"external_port_base": cand.kafka.external_port_base,
                                                 "jmx_port_base": cand.kafka.jmx_port_base},
                                       "monitoring": {
                                           "monitor_port": mon.monitor_port,
                                           "prometheus_port": mon.prometheus_port,
                                           "alertmanager_port": mon.alertmanager_port,
                                           "kafka_exporter_host_port_base": mon.kafka_exporter_host_port_base,
                                           "zookeeper_exporter_host_port_base":
                                               mon.zookeeper_exporter_host_port_base}}, warnings)
        warnings.append("no free block of ports found: set zookeeper.host_port_base, kafka.external_port_base and"
                        " the monitoring port bases")
        return InitPlan(name, {}, warnings)
    holders = sorted({f"cluster {published[p].cluster!r} ({published[p].state_dir})" for p in taken
                      if p in published})
    warnings.append(f"ports {', '.join(map(str, taken))} of the default layout are in use"
                    + (f" by {', '.join(holders)}" if holders else "")
                    + ": `kctl init --name NAME --force` writes a cluster with free ports that runs next to it")
    return InitPlan(name, {}, warnings)
