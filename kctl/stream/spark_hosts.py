"""kctl.yaml's ``spark:`` section on engine hosts: a Spark standalone cluster in systemd units beside the brokers'.

The master runs on the first node's host, worker N on the N-th node's host (one worker per host: ``spark.workers``
is at most the number of nodes). Each is a unit like the brokers' (``kctl-spark-master.service``,
``kctl-spark-worker.service``: the service user, restarted after a crash, the same sandbox), started by Spark's
own launcher, ``bin/spark-class`` of the distribution kctl ships to the host: the installed pyspark's ``jars/`` and
``bin/`` as one tar in kctl's cache (the same jars the driver runs, so driver and executors never differ).

A host's Spark part is a bundle of its own, ``<state>/spark/hosts/<node>`` (``spark.tar``, ``spark.env``,
``spark-defaults.conf``, the units, ``install-spark.sh``), installed after the node's own bundle by
``install-spark.sh`` (which refuses a host that does not hold this node of this cluster). Each daemon listens on
its host's address (``SPARK_LOCAL_IP``): the master on port 7077 and its UI on ``spark.ui_port``, worker N's UI
on ``spark.ui_port + N``, as on the other engines (where they are published on 127.0.0.1).

The job's driver runs on the machine kctl runs on, in the Spark image's container with the host's network
(:func:`kctl.stream.spark.start_driver`): the executors connect back to it at the address the hosts see this
machine at (:func:`driver_address`, from the master's host's own view of the ssh connection). The hosts share no
directory, so the job's tables and checkpoint must be on S3 (``--out s3a://...``).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import importlib.metadata
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kctl import cache, contract
from kctl.errors import KctlError
from kctl.model.properties import services_of, spark_placement
from kctl.model.render import template
from kctl.model.spec import SPARK_DAEMON_MEMORY, ClusterSpec, NodeSpec
from kctl.runtime.engine import engines
from kctl.runtime.engine.base import Capability
from kctl.runtime.engine.ssh import Ssh, SshError

Progress = Callable[[str], None]

MASTER_PORT = contract.SPARK_MASTER_PORT
UNITS = ("spark-master", "spark-worker")  # in the order they start
SPARK_DISTS = f"{contract.HOST_ROOT}/spark-dists"
SPARK_CONF = f"{contract.CONF_DIR}/spark"
SPARK_WORK = f"{contract.DATA_ROOT}/spark"
TAR = "spark.tar"
ENV = "spark.env"
SCRIPTS = ("install-spark.sh", "uninstall-spark.sh")
REMOTE = "/tmp/kctl-spark-bundle-{cluster}"
RESTART_SECONDS = 2
START_LIMIT_BURST = 5
START_LIMIT_SECONDS = 120


def on_hosts(spec: ClusterSpec) -> bool:
    return spec.spark is not None and engines.supports(spec, Capability.SPARK_ON_HOSTS)


def _nodes(spec: ClusterSpec) -> list[tuple[str, NodeSpec]]:
    return [(h, n) for h, n, _s in services_of(spec)]


def master_node(spec: ClusterSpec) -> tuple[str, NodeSpec]:
    host = spark_placement(spec)[0]
    return host, spec.node(host)


def worker_nodes(spec: ClusterSpec) -> list[tuple[int, str, NodeSpec]]:
    """(N, host, node) of each worker: worker N on the N-th node's host."""
    return [(i, h, spec.node(h)) for i, h in enumerate(spark_placement(spec)[1], 1)]


def master_address(spec: ClusterSpec) -> str:
    return spec.node_address(master_node(spec)[1])


def master_url(spec: ClusterSpec) -> str:
    return f"spark://{master_address(spec)}:{MASTER_PORT}"


def worker_names(spec: ClusterSpec) -> dict[str, tuple[str, str]]:
    """A worker's address (as the master lists it) -> (spark-worker-N, its UI)."""
    assert spec.spark is not None
    return {spec.node_address(n): (f"spark-worker-{i}", f"http://{spec.node_address(n)}:{spec.spark.ui_port + i}")
            for i, _h, n in worker_nodes(spec)}


def units_of(spec: ClusterSpec, host: str) -> tuple[str, ...]:
    """The Spark units of a node's host."""
    return tuple(u for u, here in (("spark-master", host == master_node(spec)[0]),
                                   ("spark-worker", host in {h for _i, h, _n in worker_nodes(spec)})) if here)


# ----- the distribution -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SparkArchive:
    path: Path
    identity: str


@contextmanager
def archive(src: Path, progress: Progress | None = None) -> Iterator[SparkArchive]:
    """The installed pyspark's (``src``) ``jars/`` and ``bin/`` as one tar (``spark/`` inside), made once per
    identity in kctl's cache and held for reading until the block ends."""
    h = hashlib.sha256(importlib.metadata.version("pyspark").encode())
    for sub in ("jars", "bin"):
        for p in sorted((src / sub).iterdir()):
            if p.is_file():
                h.update(f"{sub}/{p.name}\0{p.stat().st_size}\0".encode())
    identity = h.hexdigest()[:24]
    target = cache.root() / "host" / f"spark-{importlib.metadata.version('pyspark')}-{identity}.tar"

    def pack(tmp: Path) -> None:
        if progress:
            progress(f"packing Spark {importlib.metadata.version('pyspark')} (the installed pyspark's jars) for the"
                     f" hosts ({target})")
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for sub in ("jars", "bin"):
                tar.add(str(src / sub), arcname=f"spark/{sub}")

    with cache.use_file(target, pack, mode=0o644, progress=progress):
        yield SparkArchive(path=target, identity=identity)


# ----- rendering (pure) -----------------------------------------------------------------------------------------

def _unit(spec: ClusterSpec, host: str, node: NodeSpec, role: str, identity: str) -> str:
    assert spec.spark is not None
    sp = spec.spark
    address = spec.node_address(node)
    home = f"{SPARK_DISTS}/{identity}/spark"
    cls = "org.apache.spark.deploy.master.Master" if role == "spark-master" else "org.apache.spark.deploy.worker.Worker"
    argv = [f"{home}/bin/spark-class", cls]
    if role == "spark-master":
        argv += ["--host", address, "--port", str(MASTER_PORT), "--webui-port", str(sp.ui_port)]
    else:
        n = next(i for i, h, _n in worker_nodes(spec) if h == host)
        argv += [master_url(spec), "--host", address, "--cores", str(sp.worker_cores), "--memory", sp.worker_memory,
                 "--webui-port", str(sp.ui_port + n), "--work-dir", f"{SPARK_WORK}/work"]
    return template("host/kctl-spark.service.j2", role=role.removeprefix("spark-"), cluster=spec.name, host=host,
                    address=address, conf_dir=contract.CONF_DIR, user=contract.SERVICE_USER, spark_home=home,
                    spark_conf=SPARK_CONF, daemon_memory=SPARK_DAEMON_MEMORY, argv=argv, work=SPARK_WORK,
                    log=f"{contract.LOG_ROOT}/{role}.log",
                    after=contract.unit_name("spark-master") if role == "spark-worker" else "",
                    restart_seconds=RESTART_SECONDS, start_limit_burst=START_LIMIT_BURST,
                    start_limit_seconds=START_LIMIT_SECONDS, service=role, rw_source="spark section of kctl.yaml",
                    rw_paths=[SPARK_WORK, contract.LOG_ROOT])


def host_files(spec: ClusterSpec, identity: str,
               properties: dict[str, str]) -> dict[str, dict[str, tuple[bytes, int]]]:
    """Every Spark host's bundle but the tar, ``{host: {relative path: (data, mode)}}``; ``properties``: the
    daemons' spark-defaults.conf. Pure."""
    assert spec.spark is not None
    here = Path(__file__).resolve().parent.parent / "runtime" / "engine" / "host"
    scripts = {n: ((here / n).read_bytes(), 0o755) for n in SCRIPTS}
    defaults = template("spark-defaults.conf.j2", cluster=spec.name, properties=properties).encode()
    out: dict[str, dict[str, tuple[bytes, int]]] = {}
    for host, node in _nodes(spec):
        units = units_of(spec, host)
        if not units:
            continue
        env = {"KCTL_CLUSTER": spec.name, "KCTL_NODE": host, "KCTL_SPARK_IDENTITY": identity,
               "KCTL_SPARK_UNITS": " ".join(units)}
        files = {**scripts, "spark-defaults.conf": (defaults, 0o644),
                 ENV: (("# Read by install-spark.sh (sourced by bash).\n"
                        + "".join(f"{k}={json.dumps(v)}\n" for k, v in env.items())).encode(), 0o644)}
        for u in units:
            files[f"units/{contract.unit_name(u)}"] = (_unit(spec, host, node, u, identity).encode(), 0o644)
        out[host] = files
    return out


def _write(path: Path, files: dict[str, tuple[bytes, int]], tar: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        for rel, (data, mode) in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
            os.chmod(tmp / rel, mode)
        try:
            os.link(tar, tmp / TAR)
        except OSError:
            shutil.copyfile(tar, tmp / TAR)
        os.chmod(tmp, 0o755)
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ----- lifecycle ------------------------------------------------------------------------------------------------

def _install(spec: ClusterSpec, node: NodeSpec, local: Path) -> list[str]:
    """Ship a host's Spark bundle and run install-spark.sh; the running units it says to restart."""
    return Ssh(spec).install_bundle(node, local, REMOTE.format(cluster=spec.name), "install-spark.sh")


def _systemctl(spec: ClusterSpec, node: NodeSpec, units: list[str], action: str) -> None:
    if units:
        Ssh(spec).check(node, ["systemctl", action, *(contract.unit_name(u) for u in units)], timeout=120,
                        what=f"systemctl {action} {' '.join(units)}")


def install(spec: ClusterSpec, bundles: Path, pyspark: Path, properties: dict[str, str],
            progress: Progress | None = None) -> None:
    """Write each Spark host's bundle under ``bundles`` and install it (after the nodes' own), then start the
    master and the workers, restarting a running one whose files changed. Hosts that run no Spark unit now
    (spark.workers lowered) have theirs removed. The caller waits for the workers at the master."""
    say = progress or (lambda _m: None)
    nodes = dict(_nodes(spec))
    with archive(pyspark, progress) as dist:
        every = host_files(spec, dist.identity, properties)
        for host, files in every.items():
            _write(bundles / host, files, dist.path)
        for gone in (p for p in (bundles.iterdir() if bundles.is_dir() else []) if p.name not in every):
            shutil.rmtree(gone, ignore_errors=True)
        with cf.ThreadPoolExecutor(max_workers=max(1, len(every))) as pool:
            restarts = dict(zip(every, pool.map(lambda h: _install(spec, nodes[h], bundles / h), every),
                                strict=True))
    for host, node in nodes.items():
        if host not in every:
            _uninstall_on(spec, node)
    for role in UNITS:  # the master before the workers
        for h in (h for h in every if role in units_of(spec, h)):
            _systemctl(spec, nodes[h], [role], "restart" if role in restarts[h] else "start")
    for h, again in restarts.items():
        if again:
            say(f"{h}: restarted {', '.join(again)} (its files changed)")


def _uninstall_on(spec: ClusterSpec, node: NodeSpec) -> bool:
    """install-spark.sh's work undone on one host (when it has any); True if something was removed."""
    try:
        code, out = Ssh(spec).run(node, ["sh", "-c", "[ -x /opt/kctl/uninstall-spark.sh ] || exit 3;"
                                         " /opt/kctl/uninstall-spark.sh"], timeout=120)
    except SshError:
        return False
    return code == 0 and "removed:" in out


def remove(spec: ClusterSpec, bundles: Path) -> bool:
    """The Spark units removed from every host (kctl.yaml no longer declares a Spark cluster), and their bundles
    under ``bundles``; True if a host had any."""
    nodes = [n for _h, n in _nodes(spec)]
    with cf.ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        removed = any(list(pool.map(lambda n: _uninstall_on(spec, n), nodes)))
    shutil.rmtree(bundles, ignore_errors=True)
    return removed


def driver_address(spec: ClusterSpec) -> str:
    """This machine's address as the master's host sees it (the source address of kctl's ssh connection there):
    where the executors on the hosts connect back to the job's driver."""
    node = master_node(spec)[1]
    code, out = Ssh(spec).run(node, ["sh", "-c", 'echo "$SSH_CONNECTION"'], root=False, timeout=30, stderr=False)
    parts = out.split()
    if code != 0 or len(parts) < 4:
        raise KctlError(f"cannot tell this machine's address as {node.hostname} sees it (SSH_CONNECTION: {out!r})",
                        hint="the executors on the hosts connect back to the job's driver here; check ssh to"
                             f" {spec.node_address(node)}")
    return parts[0]
