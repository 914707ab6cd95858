"""kctl.yaml's ``spark:`` section: a Spark standalone cluster beside the brokers, and the stream job's driver in it.

Spark's own distribution runs it: the master (``org.apache.spark.deploy.master.Master``) and N workers
(``...deploy.worker.Worker``) are started with ``bin/spark-class`` of the installed pyspark, whose package
directory (jars, bin) is mounted read-only into each container. Their image, ``kctl/spark:<pyspark>``, is the
node image (Java 17) with Debian's python3 added, so it is built offline from what the node image already has.

They form the Compose project ``kctl-<name>-spark`` (``<state>/spark/compose.yaml``), apart from the
cluster's own project but on its network (``kctl-<name>``, external here), so executors reach the brokers by
their INTERNAL listeners. UIs are published on 127.0.0.1 only: the master's on ``spark.ui_port``, worker N's
on ``spark.ui_port + N``. The master keeps its recovery state (registered workers and applications) in
``<state>/spark/master`` (``spark.deploy.recoveryMode FILESYSTEM``): a restarted master finds the running job
and its workers again.

The job's driver (``kctl stream submit`` with a declared Spark cluster) runs in a container of its own,
``kctl-<name>-stream-<job>`` on the same network, restarted by Docker after a crash (``on-failure``); it
resumes from its checkpoint. Its tables and checkpoint live in ``<state>/spark/data``, mounted at the same
absolute path into the driver and every worker, so the executors' files, the driver's commits and kctl's own
readers on this host see one directory. Every process writes its log under ``<state>/spark/logs``
(``kctl logs spark-master``, ``kctl logs spark-worker-1``, ``kctl logs stream-<job>``).

The driver runs the installed Python packages (pyspark, delta-rs, confluent-kafka and kctl itself), mounted
read-only: the host's Python must be the image's (3.11 on Linux, as Debian bookworm's), which is checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

import kctl
from kctl import contract
from kctl.errors import KctlError, UsageError
from kctl.model.render import template, write_text_files
from kctl.model.spec import SPARK_DAEMON_MEMORY, ClusterSpec, spark_memory_mb
from kctl.runtime import docker_api
from kctl.runtime.engine import engines
from kctl.runtime.engine.base import Capability
from kctl.runtime.engine.compose import compose_project
from kctl.runtime.image import build as image
from kctl.stream import spark_hosts, spark_swarm
from kctl.wait import ticks

Progress = Callable[[str], None]

LABEL_SPARK = docker_api.LABEL_SPARK  # the Kafka cluster's name, on every container of its Spark cluster
LABEL_SPARK_ROLE = contract.LABEL_SPARK_ROLE  # master, worker, driver
MASTER = contract.SPARK_MASTER
MASTER_PORT = contract.SPARK_MASTER_PORT
MASTER_UI = contract.SPARK_MASTER_UI
WORKER_UI = contract.SPARK_WORKER_UI
PY = "/opt/kctl/python"  # the installed site-packages (pyspark in it: SPARK_HOME)
SRC = "/opt/kctl/src"  # kctl's own package
SPARK_HOME = f"{PY}/pyspark"
CONF = contract.SPARK_CONF_DIR
LOGS = "/var/log/kctl-spark"
WORK = contract.SPARK_WORK_DIR
DAEMON_MEMORY = SPARK_DAEMON_MEMORY  # the master's and each worker's own JVM (executors get worker_memory)
IMAGE_PYTHON = (3, 11)  # Debian bookworm's python3

DOCKERFILE = """\
# The Spark image kctl builds (kctl/stream/spark.py): the node image (Java 17), with Debian's python3 for the
# driver and Spark's Python workers. Spark itself and the Python packages are mounted from the installed pyspark.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \\
 && apt-get install -y --no-install-recommends python3 \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
HEALTHCHECK NONE
ENTRYPOINT []
WORKDIR /
"""


def project(spec: ClusterSpec) -> str:
    return f"{spec.project}-spark"


def directory(state_dir: Path) -> Path:
    return state_dir.resolve() / "spark"


def data_dir(state_dir: Path) -> Path:
    """The directory every executor, the driver and this host see at the same path (tables, checkpoints)."""
    return directory(state_dir) / "data"


def logs_dir(state_dir: Path) -> Path:
    return directory(state_dir) / "logs"


def worker_name(i: int) -> str:
    return f"spark-worker-{i}"


def master_url() -> str:
    return f"spark://{MASTER}:{MASTER_PORT}"


def ui_url(spec: ClusterSpec) -> str:
    assert spec.spark is not None
    return f"http://127.0.0.1:{spec.spark.ui_port}"


def driver_container(spec: ClusterSpec, job: str) -> str:
    return f"{spec.project}-stream-{job}"


def driver_host(job: str) -> str:
    return f"stream-{job}"


# ----- the installed distribution ---------------------------------------------------------------------------------

def site_packages() -> Path:
    """The site-packages directory pyspark is installed in (its bin/spark-class and jars/ are Spark's own)."""
    found = importlib.util.find_spec("pyspark")
    if found is None or not found.origin:
        raise KctlError("a Spark cluster needs pyspark installed (its jars and bin/spark-class run the master and"
                        " workers)", hint="pip install 'kctl[stream]'")
    return Path(found.origin).resolve().parent.parent


def pyspark_version() -> str:
    return importlib.metadata.version("pyspark")


def check_python() -> None:
    """The driver container runs this Python's packages with the image's python3: same version, Linux x86_64."""
    if sys.version_info[:2] != IMAGE_PYTHON or sys.platform != "linux" or platform.machine() != "x86_64":
        raise KctlError(
            f"the Spark cluster's driver runs the installed Python packages in a Debian bookworm container (Python"
            f" {'.'.join(map(str, IMAGE_PYTHON))}, Linux x86_64); this kctl runs on Python"
            f" {sys.version_info.major}.{sys.version_info.minor}, {sys.platform} {platform.machine()}",
            hint="install kctl in a Python 3.11 environment on Linux, or leave the spark section out and run the"
                 " job with `kctl stream submit --master local[N]`")


def image_tag() -> str:
    digest = hashlib.sha256(DOCKERFILE.encode()).hexdigest()[:8]
    return f"kctl/spark:{pyspark_version()}-{digest}"


def ensure_image(spec: ClusterSpec, progress: Progress | None = None) -> str:
    """Build the Spark image once, from the node image (which `kctl up` has built before)."""
    tag = image_tag()
    dc = docker_api.client()
    try:
        dc.images.get(tag)
        return tag
    except docker_api.sdk().errors.ImageNotFound:
        pass
    base = spec.local_image_ref
    try:
        dc.images.get(base)
    except docker_api.sdk().errors.ImageNotFound:
        # engine hosts: `kctl up` ships the distribution to the hosts and builds no node image; the driver's
        # image starts from it (Java 17), so it is built here first
        image.ensure_image(dc, kafka_version=spec.versions.kafka, scala_version=spec.versions.scala,
                           progress=progress)
    if progress:
        progress(f"building {tag} from {base} (Debian's python3 beside the node image's Java 17)")
    with tempfile.TemporaryDirectory(prefix="kctl-spark-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(DOCKERFILE)
        image.build_from_context(dc, Path(tmp), tag=tag, base_image=base, labels={"io.kctl.image": "spark"},
                                 progress=progress)
    return tag


# ----- rendering --------------------------------------------------------------------------------------------------

def spark_defaults(spec: ClusterSpec) -> dict[str, str]:
    """spark-defaults.conf of the master and workers."""
    return {
        # The master's state survives its restart: workers and the running application register again.
        "spark.deploy.recoveryMode": "FILESYSTEM",
        "spark.deploy.recoveryDirectory": f"{WORK}/recovery",
        # A finished application's work dirs (its jars, executor logs) go after a day.
        "spark.worker.cleanup.enabled": "true",
        "spark.worker.cleanup.appDataTtl": "86400",
        "spark.ui.reverseProxy": "false",
    }


def _labels(spec: ClusterSpec, role: str) -> dict[str, str]:
    return dict(sorted({**spec.labels, LABEL_SPARK: spec.name, LABEL_SPARK_ROLE: role}.items()))


def _mounts(state_dir: Path) -> list[str]:
    return [f"{site_packages()}:{PY}:ro", f"{Path(kctl.__file__).resolve().parent}:{SRC}/kctl:ro",
            f"{directory(state_dir)}/conf:{CONF}:ro", f"{logs_dir(state_dir)}:{LOGS}",
            f"{data_dir(state_dir)}:{data_dir(state_dir)}"]


def _env() -> dict[str, str]:
    return {"SPARK_HOME": SPARK_HOME, "SPARK_CONF_DIR": CONF, "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "PYTHONPATH": f"{SRC}:{PY}", "PYSPARK_PYTHON": "python3", "LANG": "C.UTF-8"}


def _logged(argv: list[str], log: str) -> list[str]:
    """Run ``argv`` with its output appended to ``log`` under LOGS (kept on the host, read by `kctl logs`)."""
    return ["sh", "-c", 'exec "$@" >>' + f"{LOGS}/{log} 2>&1", "sh", *argv]


def compose_document(spec: ClusterSpec, state_dir: Path, tag: str) -> dict[str, Any]:
    sp = spec.spark
    assert sp is not None
    common = {"image": tag, "restart": "unless-stopped", "environment": _env(), "networks": ["cluster"],
              "stop_grace_period": "30s"}
    spark_class = f"{SPARK_HOME}/bin/spark-class"
    services: dict[str, Any] = {
        MASTER: {**common, "hostname": MASTER, "labels": _labels(spec, "master"),
                 "command": _logged([spark_class, "org.apache.spark.deploy.master.Master", "--host", MASTER,
                                     "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI)], f"{MASTER}.log"),
                 "ports": [f"127.0.0.1:{sp.ui_port}:{MASTER_UI}"],
                 "volumes": [*_mounts(state_dir), f"{directory(state_dir)}/master:{WORK}"]},
    }
    for i in range(1, sp.workers + 1):
        name = worker_name(i)
        services[name] = {
            **common, "hostname": name, "labels": _labels(spec, "worker"), "depends_on": [MASTER],
            "command": _logged([spark_class, "org.apache.spark.deploy.worker.Worker", master_url(), "--host", name,
                                "--cores", str(sp.worker_cores), "--memory", sp.worker_memory,
                                "--webui-port", str(WORKER_UI), "--work-dir", f"{WORK}/work"], f"{name}.log"),
            "ports": [f"127.0.0.1:{sp.ui_port + i}:{WORKER_UI}"],
            "volumes": [*_mounts(state_dir), f"{directory(state_dir)}/{name}:{WORK}"]}
    return {"name": project(spec), "services": services,
            "networks": {"cluster": {"name": spec.project, "external": True}}}


def render(spec: ClusterSpec, state_dir: Path, tag: str) -> dict[str, str]:
    """The files under ``<state>/spark`` (relative path -> text)."""
    head = "# Rendered by kctl from kctl.yaml (spark); `kctl up` rewrites it.\n"
    return {"conf/spark-defaults.conf": template("spark-defaults.conf.j2", cluster=spec.name,
                                                 properties=spark_defaults(spec)),
            "compose.yaml": head + yaml.dump(compose_document(spec, state_dir, tag), Dumper=_NoAliases,
                                             sort_keys=False, default_flow_style=False, width=1 << 16)}


class _NoAliases(yaml.SafeDumper):
    """Every service spelled out (no &id001 anchors for the settings they share)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# ----- lifecycle --------------------------------------------------------------------------------------------------

def machine_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError):
        return 0


def check_fits(spec: ClusterSpec) -> None:
    """The workers' memory (and their daemons') must fit in the machine: refused before anything starts. On engine
    hosts each worker's host is asked in the engine's preflight (kctl.runtime.engine.hosts.spark_short_of_memory),
    which runs before any host is changed."""
    sp = spec.spark
    assert sp is not None
    if spark_hosts.on_hosts(spec):  # each worker on a host of its own: the hosts' preflight checks each one's
        return
    want = sp.workers * (spark_memory_mb(sp.worker_memory) + spark_memory_mb(DAEMON_MEMORY))
    have = machine_memory_mb()
    if have and want > have:
        raise UsageError(
            f"spark: {sp.workers} worker(s) x worker_memory {sp.worker_memory} (+{DAEMON_MEMORY} each for the"
            f" worker itself) need {want} MiB; this machine has {have} MiB",
            hint="lower spark.worker_memory or spark.workers in kctl.yaml (1g per worker runs the stream job)")


def _compose(spec: ClusterSpec, state_dir: Path, *args: str, timeout: float = 300) -> None:
    d = directory(state_dir)
    compose_project(project(spec), d / "compose.yaml", *args, timeout=timeout, what="the Spark cluster",
                    hint=f"`kctl logs spark-master`; its files: {d}")


def up(spec: ClusterSpec, state_dir: Path, progress: Progress | None = None, wait_s: float = 120.0) -> dict[str, Any]:
    """Write the files, start the master and workers, and wait until every worker is ALIVE at the master. On
    engine hosts: their units (:mod:`kctl.stream.spark_hosts`), and the image the job's driver runs in here."""
    sp = spec.spark
    assert sp is not None
    if spark_hosts.on_hosts(spec):
        check_python()
        ensure_image(spec, progress)
        spark_hosts.install(spec, directory(state_dir) / "hosts", site_packages() / "pyspark", spark_defaults(spec),
                            progress)
        return _wait_workers(spec, progress, wait_s, hint="`kctl logs spark-master`, `kctl logs spark-worker-1`;"
                                                          " on a host: `journalctl -u kctl-spark-master`")
    check_fits(spec)
    check_python()
    tag = ensure_image(spec, progress)
    d = directory(state_dir)
    if spark_swarm.on_swarm(spec):
        return _up_swarm(spec, state_dir, tag, progress, wait_s)
    existed = (d / "conf" / "spark-defaults.conf").exists()
    changed = write_text_files(render(spec, state_dir, tag), d)
    for sub in ("logs", "data", "master", *(worker_name(i) for i in range(1, sp.workers + 1))):
        (d / sub).mkdir(parents=True, exist_ok=True)
    _compose(spec, state_dir, "up", "-d", "--remove-orphans")
    if existed and any(p.parent.name == "conf" for p in changed):
        _compose(spec, state_dir, "restart")  # a changed spark-defaults.conf: the daemons read it at start
    return _wait_workers(spec, progress, wait_s,
                         hint=f"`kctl logs spark-master`, `kctl logs spark-worker-1`; its files: {d}")


def check_engine_sees(spec: ClusterSpec, state_dir: Path, tag: str) -> None:
    """The job's driver (and on compose the master and workers) run in containers of the engine kctl talks to,
    with this machine's files bind-mounted: that engine must see them (kctl runs on it, not against a remote
    DOCKER_HOST). A file written here is looked for in a container of that engine; refused when it is missing
    (a remote engine would mount empty directories in their place). `kctl up` asks it before it deploys
    anything (kctl.cluster.lifecycle.converge)."""
    import uuid

    d = data_dir(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    probe = d / f".engine-probe-{uuid.uuid4().hex[:8]}"
    probe.write_text("kctl\n")
    dc = docker_api.client()
    name = f"{spec.project}-spark-probe"  # one name: a probe an interrupted kctl left is removed by the next
    try:
        with contextlib.suppress(docker_api.sdk().errors.NotFound):
            dc.containers.get(name).remove(force=True)
        dc.containers.run(tag, ["test", "-e", str(probe)], volumes={str(d): {"bind": str(d), "mode": "ro"}},
                          name=name, remove=True, network_mode="none", labels=_labels(spec, "probe"))
    except docker_api.sdk().errors.ContainerError:
        host = os.environ.get("DOCKER_HOST", "")
        raise KctlError(f"the Docker engine kctl talks to{f' ({host})' if host else ''} does not see this machine's"
                        f" files ({d}): the Spark cluster's driver runs in a container of that engine with them"
                        " mounted", hint="run kctl on the engine's own machine (on Swarm, the manager) without a"
                                         " remote DOCKER_HOST, or leave the spark section out") from None
    finally:
        probe.unlink(missing_ok=True)


def _up_swarm(spec: ClusterSpec, state_dir: Path, tag: str, progress: Progress | None,
              wait_s: float) -> dict[str, Any]:
    """engine swarm: the Spark stack (kctl.stream.spark_swarm) deployed beside the cluster's, each daemon beside
    its broker."""
    d = directory(state_dir)
    dc = docker_api.client()
    ref = spark_swarm.dist_image(spec, tag, site_packages() / "pyspark", progress)
    local, missing = spark_swarm.local_services(spec, dc)
    if missing:
        raise KctlError("the Spark cluster cannot be placed: " + "; ".join(missing),
                        hint="`kctl up` labels the Swarm nodes for the cluster's own services first")
    elsewhere = [n for n in spark_swarm.placement(spec) if n != MASTER and n not in local]
    if spec.spark and spec.spark.warm_driver and elsewhere:
        raise KctlError(f"spark.warm_driver: the warm driver warms up on this machine's shared directory, and"
                        f" {', '.join(elsewhere)} run(s) on another Swarm node",
                        hint="leave spark.warm_driver out on a Swarm of several nodes (the job's tables are on S3"
                             " there); nothing of the Spark cluster was changed")
    if (d / "compose.yaml").exists():  # an earlier kctl ran it as a Compose project on this engine
        _compose(spec, state_dir, "down", "--remove-orphans", "--timeout", "30")
        (d / "compose.yaml").unlink()
    data_dir(state_dir).mkdir(parents=True, exist_ok=True)
    logs_dir(state_dir).mkdir(parents=True, exist_ok=True)
    write_text_files(spark_swarm.render(spec, ref, data_dir(state_dir), spark_defaults(spec), local), d)
    if progress:
        for name, node in spark_swarm.swarm_nodes(spec, dc).items():
            progress(f"{name}: on swarm node {node.hostname if node else '?'}")
    spark_swarm.deploy(spec, d)
    return _wait_workers(spec, progress, wait_s, hint=f"`kctl logs spark-master`, `kctl logs spark-worker-1`;"
                                                      f" `docker stack ps --no-trunc {spark_swarm.project(spec)}`")


def _wait_workers(spec: ClusterSpec, progress: Progress | None, wait_s: float, hint: str) -> dict[str, Any]:
    """Until the master is ALIVE with every declared worker ALIVE at it; its status then ({} for no wait)."""
    sp = spec.spark
    assert sp is not None
    if wait_s <= 0:
        return {}
    last: Any = None
    for _ in ticks(1.0, until=time.monotonic() + wait_s):
        try:
            st = status(spec)
        except KctlError as exc:
            last = exc.message
            continue
        alive = [w for w in st["workers"] if w["state"] == "ALIVE"]
        if st.get("status") == "ALIVE" and len(alive) >= sp.workers:
            if progress:
                progress(f"spark: master and {len(alive)} worker(s) alive; UI {st['ui']}")
            return st
        last = f"master {st.get('status')}, {len(alive)}/{sp.workers} workers alive"
    raise KctlError(f"the Spark cluster did not come up within {wait_s:.0f} s (last: {last})", hint=hint)


def down(spec: ClusterSpec, state_dir: Path) -> bool:
    """Stop and remove the drivers, master and workers (on engine hosts, their units); False when none was ever
    started here."""
    removed = False
    dc = None
    try:
        dc = docker_api.client()
        for c in dc.containers.list(all=True, filters={"label": f"{LABEL_SPARK}={spec.name}"}, ignore_removed=True):
            if (c.labels or {}).get(LABEL_SPARK_ROLE) == "driver":
                c.remove(force=True)
                removed = True
    except KctlError:
        pass
    if (directory(state_dir) / "compose.yaml").exists():
        _compose(spec, state_dir, "down", "--remove-orphans", "--timeout", "30")
        removed = True
    if (directory(state_dir) / spark_swarm.STACK_FILE).exists():
        removed = spark_swarm.remove(spec) or removed
    if (directory(state_dir) / "hosts").exists() and engines.supports(spec, Capability.SPARK_ON_HOSTS):
        # the units on the hosts (when the nodes stay: `kctl down` then removes the rest with each node)
        removed = spark_hosts.remove(spec, directory(state_dir) / "hosts") or removed
    return removed


def remove_by_label(cluster: str, dc: Any) -> int:
    """Every container of a cluster's Spark cluster, whatever left it (a test's cleanup)."""
    n = 0
    for c in dc.containers.list(all=True, filters={"label": f"{LABEL_SPARK}={cluster}"}, ignore_removed=True):
        c.remove(force=True)
        n += 1
    return n


# ----- status ---------------------------------------------------------------------------------------------------

def master_json(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> dict[str, Any]:
    """The master's JSON endpoint (``/json/`` of its UI), read on its published port (on engine hosts, on the
    master's host)."""
    url = f"http://{host}:{port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - our own master
            doc: dict[str, Any] = json.loads(resp.read())
            return doc
    except (OSError, urllib.error.URLError, ValueError) as exc:
        raise KctlError(f"the Spark master does not answer on {url}: {exc}",
                        hint="`kctl up` starts it; `kctl logs spark-master` shows its log") from None


def master_ui_host(spec: ClusterSpec) -> str:
    """Where the master's UI is reached: 127.0.0.1 (published there), or on engine hosts the master's host."""
    if spark_hosts.on_hosts(spec):
        return spark_hosts.master_address(spec)
    return spark_swarm.master_address(spec) if spark_swarm.on_swarm(spec) else "127.0.0.1"


def _names(spec: ClusterSpec) -> dict[str, tuple[str, str]] | None:
    if spark_hosts.on_hosts(spec):
        return spark_hosts.worker_names(spec)
    return spark_swarm.worker_names(spec) if spark_swarm.on_swarm(spec) else None


def status(spec: ClusterSpec) -> dict[str, Any]:
    """{master, ui, status, workers: [{name, state, cores, memory_mb, ui}], applications: [...]} from the master."""
    assert spec.spark is not None
    host = master_ui_host(spec)
    return _status(master_json(spec.spark.ui_port, host=host), spec.spark.ui_port, host, _names(spec))


def status_of(spec: ClusterSpec, timeout_s: float = 5.0) -> dict[str, Any]:
    """:func:`status_at` of kctl.yaml's Spark cluster, wherever its master runs."""
    assert spec.spark is not None
    return status_at(spec.spark.ui_port, timeout_s, master_ui_host(spec), _names(spec))


def _status(doc: dict[str, Any], port: int, ui_host: str = "127.0.0.1",
            names: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    # The master remembers a worker's earlier registrations (DEAD) beside its current one: one per worker, the
    # alive one first, else its latest.
    latest: dict[str, dict[str, Any]] = {}
    for w in sorted(doc.get("workers") or [], key=lambda w: (w.get("state") == "ALIVE", str(w.get("id")))):
        latest[str(w.get("host") or "")] = w
    workers = []
    for w in sorted(latest.values(), key=lambda w: str(w.get("host"))):
        host = str(w.get("host") or "")
        idx = host.rsplit("-", 1)[-1]
        ui = f"http://127.0.0.1:{port + int(idx)}" if host.startswith("spark-worker-") and idx.isdigit() \
            else w.get("webuiaddress")
        if names is not None:  # engine hosts: a worker registers with its host's address
            host, ui = names.get(host, (host, ui))
        workers.append({"name": host, "id": w.get("id"), "state": w.get("state"), "cores": w.get("cores"),
                        "cores_used": w.get("coresused"), "memory_mb": w.get("memory"),
                        "memory_used_mb": w.get("memoryused"), "ui": ui})
    apps = [{"id": a.get("id"), "name": a.get("name"), "state": a.get("state"), "cores": a.get("cores")}
            for a in doc.get("activeapps") or []]
    return {"master": doc.get("url") or master_url(), "ui": f"http://{ui_host}:{port}",
            "status": doc.get("status"), "workers": workers, "applications": apps}


def status_at(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1",
              names: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """:func:`status` of the master whose UI is on ``host:port``; {master, ui, status: "down", error} when it does
    not answer. ``names``: a worker's address -> (its name, its UI), on engine hosts."""
    try:
        return _status(master_json(port, timeout_s, host), port, host, names)
    except KctlError as exc:
        master = master_url() if host == "127.0.0.1" else f"spark://{host}:{MASTER_PORT}"
        return {"master": master, "ui": f"http://{host}:{port}", "status": "down", "workers": [],
                "applications": [], "error": exc.message}


def findings(spec: ClusterSpec, st: dict[str, Any]) -> list[tuple[str, str]]:
    """Pure: what is wrong with kctl.yaml's Spark cluster in its status ``st`` (:func:`status_at`), as (subject,
    problem): a master that does not answer or is not ALIVE ("spark-master"), a declared worker (spark-worker-N)
    not ALIVE at it. `kctl status` counts them as problems of the cluster (degraded: the job's executors run on
    the workers; kctl.cluster.health asks the master beside the nodes, so its waits and the console say the
    same), and the monitor's `spark` rule fires one alert per subject with the same words."""
    assert spec.spark is not None
    if st.get("status") != "ALIVE":
        why = st.get("error") or f"its state is {st.get('status')}"
        return [("spark-master", f"spark: the master does not answer ({why}); `kctl logs spark-master`, `kctl up`"
                                 " starts it again")]
    state = {w["name"]: w["state"] for w in st.get("workers") or []}
    return [(name, f"spark: worker {name} is {state.get(name, 'not registered')} at the master (its"
                   f" executors are gone); `kctl logs {name}`, `kctl up` starts it again")
            for name in (f"spark-worker-{i}" for i in range(1, spec.spark.workers + 1))
            if state.get(name) != "ALIVE"]


def problems(spec: ClusterSpec, st: dict[str, Any]) -> list[str]:
    """Pure: :func:`findings`' problems alone, as `kctl status` lists them."""
    return [text for _subject, text in findings(spec, st)]


# ----- the driver -------------------------------------------------------------------------------------------------

def check_shared(state_dir: Path, *paths: str) -> None:
    """The job's --out and --checkpoint must lie in the directory the driver and every executor see."""
    shared = data_dir(state_dir)
    bad = [p for p in paths if shared != Path(p) and shared not in Path(p).parents]
    if bad:
        raise UsageError(f"{', '.join(bad)}: not in the Spark cluster's shared directory {shared}",
                         hint="leave --out and --checkpoint out (they default to a directory there), or pass paths"
                              f" under {shared}; `--master local[N]` runs the job on this host with any paths")


def start_driver(spec: ClusterSpec, state_dir: Path, job: str, config: Path, files: list[str] | None = None) -> str:
    """Start the job's driver container (replacing a stopped one of the same job); its name. ``files``: host files
    the driver reads (an S3 credentials file), mounted read-only at the same path."""
    name = driver_container(spec, job)
    dc = docker_api.client()
    try:
        old = dc.containers.get(name)
        old.reload()
        if old.status == "running":
            raise KctlError(f"the stream job {job} already runs in container {name}",
                            hint="see `kctl stream status`; stop it with `kctl stream stop`")
        old.remove(force=True)
    except docker_api.sdk().errors.NotFound:
        pass
    run_driver(spec, state_dir, name, driver_host(job),
               _logged(["python3", "-m", "kctl.stream.job", "--config", str(config)], f"{driver_host(job)}.log"),
               {"io.kctl.stream-job": job}, files)
    return name


def run_driver(spec: ClusterSpec, state_dir: Path, name: str, host: str, argv: list[str], labels: dict[str, str],
               files: list[str] | None = None) -> None:
    """docker run of a driver container ``name`` (host name ``host`` on the cluster network, where its executors
    connect to it; on engine hosts, on this machine's network) running ``argv``, with the mounts every Spark
    container has and ``files`` read-only."""
    dc = docker_api.client()
    logs_dir(state_dir).mkdir(parents=True, exist_ok=True)
    volumes = {}
    for m in _mounts(state_dir):
        src, target, *mode = m.split(":")
        volumes[src] = {"bind": target, "mode": mode[0] if mode else "rw"}
    for f in files or []:
        volumes[f] = {"bind": f, "mode": "ro"}
    env = {**_env(), "KCTL_SPARK_LOG_LEVEL": os.environ.get("KCTL_SPARK_LOG_LEVEL", "WARN")}
    env.pop("SPARK_DAEMON_MEMORY")
    # On engine hosts the executors run on the hosts and connect back to the driver: it runs on this machine's
    # network (and binds the one address the hosts see it at, the job's spark.driver.bindAddress).
    # On the cluster network the executors reach it at its name there (an alias, as well as its host name, so
    # that a Swarm node other than this engine's resolves it on the overlay network too).
    where: dict[str, Any] = {"network_mode": "host"} if spark_hosts.on_hosts(spec) else \
        {"hostname": host, "network": spec.project,
         "networking_config": {spec.project: dc.api.create_endpoint_config(aliases=[host])}}
    try:
        dc.containers.run(
            image_tag(), argv, name=name, **where, environment=env, volumes=volumes,
            labels={**_labels(spec, "driver"), **labels}, detach=True,
            # A crash (a non-zero exit, a kill) starts it again; a graceful stop (exit 0) leaves it stopped.
            restart_policy={"Name": "on-failure", "MaximumRetryCount": 0}, stop_signal="SIGTERM")
    except docker_api.sdk().errors.APIError as exc:
        raise KctlError(f"Docker did not start the driver container {name}: {exc.explanation}",
                        hint="is the Spark cluster up? `kctl up` starts it (`kctl status` lists it)") from None


def shared_jars(jars: list[str], state_dir: Path) -> list[str]:
    """The job's jars copied (hard-linked where the file system allows) into the shared directory: the driver's
    container sees that one, not kctl's cache; the executors fetch them from the driver."""
    import shutil

    d = data_dir(state_dir) / "jars"
    d.mkdir(parents=True, exist_ok=True)
    out: list[str] = []
    for j in jars:
        src = Path(j)
        dst = d / src.name
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            tmp = d / f".{src.name}.tmp"
            tmp.unlink(missing_ok=True)
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copy2(src, tmp)
            os.replace(tmp, dst)
        out.append(str(dst))
    return out


def driver_state(container: str) -> str | None:
    """The driver container's state (running, restarting, exited), None when it is gone."""
    try:
        c = docker_api.client().containers.get(container)
    except docker_api.sdk().errors.NotFound:
        return None
    except KctlError:
        return None
    return str(c.status)


def driver_exit_code(container: str) -> int | None:
    try:
        c = docker_api.client().containers.get(container)
    except docker_api.sdk().errors.NotFound:
        return None
    return int(((c.attrs or {}).get("State") or {}).get("ExitCode", 0))


def stop_driver(container: str, timeout_s: int = 60) -> None:
    """docker stop of the driver (SIGTERM: the job stops after its batch), for a driver deaf to its stop marker."""
    try:
        docker_api.client().containers.get(container).stop(timeout=timeout_s)
    except docker_api.sdk().errors.NotFound:
        pass


def remove_driver(container: str) -> None:
    try:
        docker_api.client().containers.get(container).remove(force=True)
    except docker_api.sdk().errors.NotFound:
        pass
