"""Per-host bundles of engine hosts (``kctl bundle``): each node of the spec as a directory that installs it on a
host of its own, with systemd units instead of a container.

A bundle is made from the same layers as a container (:func:`kctl.model.render.node_files`: zoo.cfg, myid,
server.properties, log4j, the exporter's rules; the secured profile's JAAS files, keystores and passwords from
:mod:`kctl.security.store`; the node image's start wrappers) and adds what a host needs instead of the image:

    <node>/install.sh, uninstall.sh   kctl/runtime/engine/host/ (idempotent; as root)
    <node>/bundle.env                 what install.sh reads: cluster, node, services, the distribution's name
    <node>/conf/                      -> /etc/kctl: the rendered files, kctl.env (the units' environment), README
    <node>/units/                     -> /etc/systemd/system: kctl-zookeeper.service, kctl-kafka.service (on
                                         KRaft: kctl-controller.service and kctl-kafka.service, no ZooKeeper)
    <node>/bin/                       -> /opt/kctl/bin: the node wrappers and kctl-prepare
    <node>/secrets/                   -> /etc/kctl/secrets (secured profile; 0700, files 0400, the service user)
    <node>/kafka.tar                  -> /opt/kctl/<dist>, /opt/kctl/monitoring: the distribution kctl builds
                                         the image from, and the exporters' jars (one file, hard-linked into
                                         every node's directory)

:func:`bundle_files` is pure (spec and secrets in, files out); :func:`write_bundles` writes each node's
directory to a temporary sibling and renames it into place, so a failure leaves the previous bundle whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kctl import cache, contract
from kctl.errors import KctlError
from kctl.kraft import config as kraft_config
from kctl.kraft import phases
from kctl.model import properties
from kctl.model.render import environment, node_files, render, template
from kctl.model.spec import ClusterSpec, Engine, NodeSpec
from kctl.runtime.engine import host_identity
from kctl.runtime.image import artifacts as distmod
from kctl.runtime.image import exporters
from kctl.runtime.image.build import NODE_DIR
from kctl.security import store

Progress = Callable[[str], None]

# The node image's wrappers a host runs as they are (kctl/runtime/image/node), and the host's own scripts.
NODE_WRAPPERS = ("jvm-common.sh", "zookeeper-start", "kafka-start")
# What a host of a cluster on KRaft runs besides: the controller's wrapper, and what a KRaft service whose
# storage kctl did not make runs instead of its JVM (UNFORMATTED). They find each other through KCTL_LIB_DIR.
KRAFT_WRAPPERS = ("controller-start", "unformatted")
# Every unit a host may have, in the order `kctl up` starts them: a KRaft controller or ZooKeeper (the metadata
# quorum) before the broker. A cluster on ZooKeeper has no controller unit; one on KRaft no ZooKeeper unit.
UNIT_SERVICES = ("controller", *contract.SERVICES)
# The rendered files only a ZooKeeper reads: not in the bundle of a cluster on KRaft, which runs none.
ZOOKEEPER_CONF = ("conf/zoo.cfg", f"conf/{properties.ZOO_CFG_DYNAMIC}", "conf/myid", "conf/log4j-zookeeper.properties",
                  f"conf/{contract.ZOOKEEPER_RETIRED}")
HOST_SCRIPTS = ("install.sh", "uninstall.sh")
DIST_TAR = "kafka.tar"
BUNDLE_ENV = "bundle.env"
# systemd: a crash loop's limit (as the container's supervise: 5 starts in 120 s), the pause between restarts,
# and how long a stop may take (Kafka's controlled shutdown; supervisord's stopwaitsecs in the image).
START_LIMIT_BURST = 5
START_LIMIT_SECONDS = 120
RESTART_SECONDS = 2
ZOOKEEPER_STOP_SECONDS = 30
CONTROLLER_STOP_SECONDS = 60  # a KRaft controller's stop (the image's supervisord: stopwaitsecs=60)
NOFILE = 100000
# After its controlled shutdown a broker closes every log (flushed, indexes and checkpoints written) and its
# ZooKeeper session: the room TimeoutStopSec= gives that on top of the controlled shutdown's own bound.
SHUTDOWN_MARGIN_SECONDS = 60
# Kafka's defaults for what bounds a controlled shutdown (KafkaServer.controlledShutdown), where the rendered
# server.properties does not say.
_SHUTDOWN_DEFAULTS = {"controlled.shutdown.enable": "true", "controlled.shutdown.max.retries": "3",
                      "controlled.shutdown.retry.backoff.ms": "5000", "controller.socket.timeout.ms": "30000",
                      "request.timeout.ms": "30000"}


@dataclass(frozen=True)
class ControlledShutdown:
    """What bounds a broker's controlled shutdown, from its server.properties: each of ``retries`` attempts waits
    up to ``socket_ms`` to reach the controller and ``request_ms`` for its answer, then ``backoff_ms``."""

    retries: int
    socket_ms: int
    request_ms: int
    backoff_ms: int
    margin_s: int = SHUTDOWN_MARGIN_SECONDS

    @property
    def controlled_s(self) -> int:
        return -(-self.retries * (self.socket_ms + self.request_ms + self.backoff_ms) // 1000)

    @property
    def stop_seconds(self) -> int:
        """The unit's TimeoutStopSec=: the controlled shutdown's worst case, and the close after it."""
        return self.controlled_s + self.margin_s


def controlled_shutdown(server: dict[str, str]) -> ControlledShutdown:
    def get(key: str) -> str:
        return str(server.get(key, _SHUTDOWN_DEFAULTS[key])).strip()

    def ms(key: str) -> int:
        try:
            return max(0, int(get(key)))
        except ValueError:
            return int(_SHUTDOWN_DEFAULTS[key])

    enabled = get("controlled.shutdown.enable").lower() != "false"
    return ControlledShutdown(retries=ms("controlled.shutdown.max.retries") if enabled else 0,
                              socket_ms=ms("controller.socket.timeout.ms"), request_ms=ms("request.timeout.ms"),
                              backoff_ms=ms("controlled.shutdown.retry.backoff.ms"))


def stop_seconds(spec: ClusterSpec, node: NodeSpec, service: str) -> int:
    """How long the unit of ``service`` may take to stop (its TimeoutStopSec=)."""
    if service == "kafka":
        return controlled_shutdown(properties.server_properties(spec, node)).stop_seconds
    if service == "controller":
        return CONTROLLER_STOP_SECONDS
    return ZOOKEEPER_STOP_SECONDS


def host_services(spec: ClusterSpec, node: NodeSpec, services: tuple[str, ...]) -> tuple[str, ...]:
    """The units of a node's host (``services``: what the node's container runs, kctl.model.properties.services_of):
    the same on ZooKeeper; on KRaft, the node's controller (a ZooKeeper participant's node) and its broker, and no
    ZooKeeper (a container keeps a retired one; a host has no unit for it)."""
    if not spec.on_kraft:
        return services
    controller = ("controller",) if "zookeeper" in services and node in kraft_config.controller_nodes(spec) else ()
    return (*controller, *(s for s in services if s == "kafka"))


def writable_paths(spec: ClusterSpec, node: NodeSpec, service: str) -> list[str]:
    """What the JVM of ``service`` writes (ReadWritePaths= of its unit under ProtectSystem=strict): kctl's data
    and log roots, and the data directories of the rendered files where they lie elsewhere."""
    if service == "kafka":
        server = properties.server_properties(spec, node)
        dirs = (server.get("log.dirs") or server.get("log.dir") or "").split(",")
    elif service == "controller":
        dirs = [kraft_config.METADATA_DIR]
    else:
        zoo = properties.zoo_cfg(spec, node)
        dirs = [zoo.get(properties.DATA_DIR, ""), zoo.get(properties.DATA_LOG_DIR, "")]
    paths = sorted({str(Path(d.strip())) for d in (contract.DATA_ROOT, contract.LOG_ROOT, *dirs) if d.strip()})
    return [p for p in paths if not any(Path(p).is_relative_to(q) and p != q for q in paths)]


@dataclass(frozen=True)
class BundleFile:
    data: bytes = field(repr=False)
    mode: int


@dataclass(frozen=True)
class DistArchive:
    """The distribution and exporters as one tar: ``path``, the directory it unpacks to, and its identity."""

    path: Path
    name: str  # kafka_<scala>-<version>
    identity: str


@dataclass(frozen=True)
class NodeBundle:
    host: str
    services: tuple[str, ...]
    path: Path
    files: int


def require_hosts(spec: ClusterSpec) -> None:
    if spec.engine is not Engine.hosts:
        raise KctlError(f"cluster {spec.name!r} is engine {spec.engine.value}: bundles are for engine hosts, where"
                        " each node is a host of its own",
                        hint="set `engine: hosts` and each node's `advertised_host` (its address) in kctl.yaml")


def _env_file(values: dict[str, str]) -> str:
    """A systemd EnvironmentFile: one KEY="value" per line (backslash and double quote escaped)."""
    lines = ["# The environment of this node's kctl units (heap, JVM options; never a secret).",
             "# Rendered by kctl from kctl.yaml (`kctl bundle`)."]
    for k, v in values.items():
        escaped = v.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{k}="{escaped}"')
    return "\n".join(lines) + "\n"


def unit_env(spec: ClusterSpec, host: str, node: NodeSpec, services: tuple[str, ...]) -> dict[str, str]:
    """The container's environment (:func:`kctl.model.render.environment`), plus what a host adds."""
    env = environment(spec, host, services)
    jmx = spec.jmx_host_port(node) if "kafka" in services else None
    if jmx is not None:
        env[contract.ENV_JMX_PORT] = str(jmx)
        env["KAFKA_JMX_HOSTNAME"] = spec.node_address(node)
    env["KCTL_SERVICE_USER"] = contract.SERVICE_USER
    return dict(sorted(env.items()))


def dist_home(dist: DistArchive) -> str:
    """Where install.sh unpacks a distribution on a host: a directory per identity, beside the others, so that
    a new one is installed while the JVMs run from the old one (/opt/kctl/kafka links to the newest)."""
    return f"{contract.HOST_ROOT}/dists/{dist.identity}/{dist.name}"


_RW_SOURCE = {"kafka": "server.properties", "controller": "controller.properties", "zookeeper": "zoo.cfg"}


def _unit(spec: ClusterSpec, host: str, node: NodeSpec, service: str, dist: DistArchive,
          units: tuple[str, ...]) -> str:
    shutdown = controlled_shutdown(properties.server_properties(spec, node)) if service == "kafka" else None
    # On KRaft the broker starts after its host's controller (if it has one), and no ZooKeeper unit exists; the
    # wrappers of a KRaft service find each other through KCTL_LIB_DIR (the image's /usr/local/lib/kctl).
    quorum = ("controller" if "controller" in units else None) if spec.on_kraft else "zookeeper"
    return template(f"host/kctl-{service}.service.j2", cluster=spec.name, host=host, node_id=node.id,
                service=service, rw_paths=writable_paths(spec, node, service),
                rw_source=_RW_SOURCE[service], shutdown=shutdown, kraft=spec.on_kraft,
                quorum_unit=contract.unit_name(quorum) if quorum else None,
                controller_id=kraft_config.controller_id(node), controller_stop_seconds=CONTROLLER_STOP_SECONDS,
                conf_dir=contract.CONF_DIR, user=contract.SERVICE_USER, env_file=contract.HOST_ENV_FILE,
                supervisor_env=contract.SUPERVISOR_ENV, kafka_home=dist_home(dist),
                bin_dir=contract.HOST_BIN, data_root=contract.DATA_ROOT, nofile=NOFILE,
                restart_seconds=RESTART_SECONDS, start_limit_burst=START_LIMIT_BURST,
                start_limit_seconds=START_LIMIT_SECONDS, kafka_stop_seconds=stop_seconds(spec, node, "kafka"),
                zookeeper_stop_seconds=ZOOKEEPER_STOP_SECONDS)


def _readme(spec: ClusterSpec, host: str, node: NodeSpec, services: tuple[str, ...]) -> str:
    units = ", ".join(contract.unit_name(s) for s in services)
    roles = [f"ZooKeeper {node.id}"] if "zookeeper" in services else []
    roles += [f"KRaft controller {kraft_config.controller_id(node)}"] if "controller" in services else []
    roles += [f"Kafka broker {node.id}"] if "kafka" in services else []
    return (f"kctl cluster {spec.name}, node {host} ({', '.join(roles)}).\n"
            f"Installed by kctl's bundle (install.sh); units: {units}.\n"
            "Configuration: /etc/kctl (rendered from kctl.yaml: change kctl.yaml and run `kctl up`, not these"
            " files).\nData: /var/opt/kctl. Logs: /var/log/kctl and `journalctl -u kctl-<service>`.\n"
            "docs/bare-metal.md of kctl maps each file to the steps of installing ZooKeeper and Kafka by hand.\n")


def _bundle_env(spec: ClusterSpec, host: str, services: tuple[str, ...], dist: DistArchive,
                permits: tuple[str, ...] = ()) -> str:
    values = {
        "KCTL_CLUSTER": spec.name,
        "KCTL_NODE": host,
        "KCTL_BUNDLE_SERVICES": " ".join(services),
        "KCTL_KAFKA_VERSION": spec.versions.kafka,
        "KCTL_DIST": dist.name,
        "KCTL_DIST_IDENTITY": dist.identity,
        "KCTL_SERVICE_USER": contract.SERVICE_USER,
        "KCTL_SERVICE_ID": str(contract.JVM_UID),
    }
    if permits:
        # KRaft storage that install.sh permits formatting (contract.format_permit) on a host new to kctl
        values["KCTL_FORMAT_PERMITS"] = " ".join(permits)
    return "# Read by install.sh and uninstall.sh (sourced by bash).\n" + "".join(
        f"{k}={json.dumps(v)}\n" for k, v in values.items())


def bundle_files(spec: ClusterSpec, dist: DistArchive, secrets: dict[str, dict[str, bytes]],
                 hashes: dict[str, str] | None = None, uid: str | None = None,
                 permits: dict[str, tuple[str, ...]] | None = None) -> dict[str, dict[str, BundleFile]]:
    """Every node's bundle, ``{host: {relative path: file}}`` (the distribution's tar aside). Pure.

    ``hashes``: each node's config hash (:func:`kctl.model.render.render`), installed as /etc/kctl/config-hash: what
    kctl compares to decide whether a host's bundle is up to date, as a container's label elsewhere.
    ``uid``: the cluster's uid (:mod:`kctl.runtime.engine.host_identity`), installed with the node's name and id as
    /etc/kctl/identity; install.sh refuses a host whose identity, or data, is another's.
    ``permits``: host -> the services (controller, kafka) whose KRaft storage kctl makes now (a node new to kctl:
    :func:`format_permits`); install.sh leaves the permit to format it on a host that held nothing of kctl."""
    require_hosts(spec)
    node_dir = NODE_DIR
    host_dir = Path(__file__).resolve().parent / "host"
    wrappers = {f"bin/{n}": BundleFile((node_dir / n).read_bytes(), 0o755) for n in NODE_WRAPPERS}
    wrappers["bin/kctl-prepare"] = BundleFile((host_dir / "kctl-prepare").read_bytes(), 0o755)
    if spec.on_kraft:
        wrappers.update({f"bin/{n}": BundleFile((node_dir / n).read_bytes(), 0o755) for n in KRAFT_WRAPPERS})
    scripts = {n: BundleFile((host_dir / n).read_bytes(), 0o755) for n in HOST_SCRIPTS}
    out: dict[str, dict[str, BundleFile]] = {}
    for host, node, services in properties.services_of(spec):
        units = host_services(spec, node, services)
        files: dict[str, BundleFile] = {**scripts, **{rel: f for rel, f in wrappers.items()
                                                      if rel != "bin/zookeeper-start" or "zookeeper" in units}}
        for rel, text in node_files(spec, host, node, services).items():
            if "zookeeper" in units or rel not in ZOOKEEPER_CONF:
                files[rel] = BundleFile(text.encode(), 0o644)
        files["conf/kctl.env"] = BundleFile(_env_file(unit_env(spec, host, node, services)).encode(), 0o644)
        files["conf/README"] = BundleFile(_readme(spec, host, node, units).encode(), 0o644)
        for svc in units:
            files[f"units/{contract.unit_name(svc)}"] = BundleFile(
                _unit(spec, host, node, svc, dist, units).encode(), 0o644)
        for name, data in sorted(secrets.get(host, {}).items()):
            files[f"secrets/{name}"] = BundleFile(data, 0o400)
        if hashes and host in hashes:
            files["conf/config-hash"] = BundleFile(f"{hashes[host]}\n".encode(), 0o644)
        if uid is not None:
            files["conf/identity"] = BundleFile(host_identity.identity_text(spec, uid, host, node).encode(), 0o644)
        allowed = tuple(s for s in (permits or {}).get(host, ()) if s in units) if spec.on_kraft else ()
        files[BUNDLE_ENV] = BundleFile(_bundle_env(spec, host, units, dist, allowed).encode(), 0o644)
        out[host] = dict(sorted(files.items()))
    return out


def format_permits(spec: ClusterSpec, state_dir: Path) -> dict[str, tuple[str, ...]]:
    """host -> the services whose KRaft storage kctl makes now, as on the other engines (kctl.model.render.write):
    a node whose data dir in the state dir holds the permits render.write left there when it made it (a node new
    to this state dir), or that has no data dir yet (`kctl bundle` before any `kctl up`). Empty on ZooKeeper.
    :func:`consume_permits` takes a host's away once its install.sh has run."""
    if not spec.on_kraft:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for host, node, services in properties.services_of(spec):
        data = state_dir / host / contract.HOST_DATA
        units = host_services(spec, node, services)
        made = tuple(s for s in units if s in ("controller", "kafka")
                     and (not data.is_dir() or (data / f"{contract.FORMAT_PERMIT_PREFIX}{s}").exists()))
        if made:
            out[host] = made
    return out


def consume_permits(state_dir: Path, host: str) -> None:
    """The state dir's permits of ``host`` removed (its install.sh has placed them on the host, where the
    service's first start on formatted storage takes them away): a later install of this node permits nothing,
    so an empty disk there is refused (UNFORMATTED), as a lost data dir is on the other engines."""
    data = state_dir / host / contract.HOST_DATA
    for p in data.glob(f"{contract.FORMAT_PERMIT_PREFIX}*") if data.is_dir() else ():
        p.unlink(missing_ok=True)


# ----- the distribution as one tar -------------------------------------------------------------------


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + str(p.stat().st_size).encode() + b"\0")
    return h.hexdigest()


@contextmanager
def dist_archive(spec: ClusterSpec, progress: Progress | None = None) -> Iterator[DistArchive]:
    """The Kafka distribution of ``versions`` and the exporters' jars as one uncompressed tar, made once per
    identity in kctl's cache (a second bundle of the same versions reuses it), held for reading until the block
    ends (kctl.cache). The distribution and the exporters are held for reading while the tar's identity is taken
    and it is packed from them: another kctl's refill of either waits."""
    with ExitStack() as tar_held:
        with ExitStack() as sources:
            dist = sources.enter_context(distmod.using_dist(kafka_version=spec.versions.kafka,
                                                            scala_version=spec.versions.scala, kafka_dist=None,
                                                            progress=progress))
            monitoring = sources.enter_context(exporters.prepared(progress)) if spec.monitoring.enabled else None
            name = distmod.dist_name(spec.versions.kafka, spec.versions.scala)
            identity = hashlib.sha256(
                f"{dist.identity}\0{_tree_digest(monitoring) if monitoring else '-'}".encode()).hexdigest()[:24]
            target = cache.root() / "host" / f"{name}-{identity}.tar"

            def pack(tmp: Path) -> None:
                if progress:
                    progress(f"packing {name} for the hosts ({target})")
                with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
                    tar.add(str(dist.path), arcname=name)
                    if monitoring is not None:
                        tar.add(str(monitoring), arcname="monitoring")

            # Under the entry's lock, written beside it and renamed into place (kctl.cache): two bundles at
            # once pack it once, and a bundle never links a half-written tar. 0644: hard-linked into every
            # bundle, readable as any other file of it.
            tar_held.enter_context(cache.use_file(target, pack, mode=0o644, progress=progress))
        if target.stat().st_mode & 0o777 != 0o644:
            os.chmod(target, 0o644)
        yield DistArchive(path=target, name=name, identity=identity)


# ----- writing -------------------------------------------------------------------------------------


def _secrets_of(spec: ClusterSpec, state_dir: Path) -> dict[str, dict[str, bytes]]:
    if not spec.security.enabled:
        return {}

    store.ensure(spec, state_dir)  # the cluster's own CA, keystores and passwords (made once, kept 0600)
    root = store.secrets_dir(state_dir)
    out: dict[str, dict[str, bytes]] = {}
    for host, _node, _services in properties.services_of(spec):
        d = root / host
        out[host] = {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()} if d.is_dir() else {}
    return out


def write_node(path: Path, files: dict[str, BundleFile], dist: DistArchive) -> None:
    """One node's bundle at ``path``: written beside it, then renamed into place (the old one removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        for rel, f in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(f.data)
            os.chmod(target, f.mode)
        if (tmp / "secrets").is_dir():
            os.chmod(tmp / "secrets", 0o700)
        try:
            os.link(dist.path, tmp / DIST_TAR)
        except OSError:
            shutil.copyfile(dist.path, tmp / DIST_TAR)
        os.chmod(tmp, 0o755)
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_bundles(spec: ClusterSpec, state_dir: Path, out: Path,
                  progress: Progress | None = None) -> list[NodeBundle]:
    """Every node's bundle under ``out/<node>``."""
    require_hosts(spec)

    if spec.on_kraft and spec.kraft_cluster_id is None:  # made on KRaft, bundled before its first `kctl up`
        record = phases.made_on_kraft(state_dir, spec.versions.kafka)
        spec = spec.with_kraft(record.phase.value, record.cluster_id)
        if progress:
            progress(f"metadata: kraft: cluster id {record.cluster_id} (the controllers and brokers format with it)")
    made: list[NodeBundle] = []
    with dist_archive(spec, progress) as dist:  # held for reading while it is linked into every bundle
        hashes = {c.name: c.config_hash for c in render(spec, state_dir).containers}
        try:
            uid = host_identity.ensure_uid(state_dir)  # the first install of this cluster on hosts makes it
            every = bundle_files(spec, dist, _secrets_of(spec, state_dir), hashes, uid,
                                 format_permits(spec, state_dir))
            for host, files in every.items():
                write_node(out / host, files, dist)
                made.append(NodeBundle(host, tuple(s for s in UNIT_SERVICES
                                                   if f"units/{contract.unit_name(s)}" in files),
                                       out / host, len(files) + 1))
        except OSError as exc:
            raise KctlError(f"cannot write the bundles under {out}: {exc.strerror or exc}",
                            hint="check the directory's permissions and free space, or pass --out DIR") from None
    return made
