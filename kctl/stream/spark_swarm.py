"""kctl.yaml's ``spark:`` section on engine swarm: the Spark cluster as a Docker stack of its own, each worker on the
Swarm node of a broker.

The stack ``kctl-<name>-spark`` (``<state>/spark/stack.yaml``) runs on the cluster stack's overlay network
(``kctl-<name>``, external here). Its services are pinned as the brokers' are, by the node labels `kctl up` sets
for the cluster (``contract.swarm_placement_label``): the master beside the first node's container, worker N
beside the N-th node's (round the nodes again when there are more workers than nodes). Each is one task,
``endpoint_mode: dnsrr`` (the master, the workers and the executors resolve each other's own task address, as
the brokers do), restarted by Swarm when its container exits.

A worker on another Swarm node sees nothing of this machine, so the services run Spark's distribution from an
image of their own, ``kctl/spark-dist:<pyspark>-<identity>``: the Spark image (Java 17) with the installed
pyspark's ``jars/`` and ``bin/`` added (the tar kctl.stream.spark_hosts ships to hosts, the same jars the driver
runs). With ``image.registry`` set it is pushed there, as the node image is; without, every Swarm node that runs
a Spark service must have it (``docker save | docker load``, docs/multi-host.md).

Their files: spark-defaults.conf as a Swarm config (a changed file is a new config); the master's recovery state
and each worker's work directory on named volumes of the node that runs it; the daemons' logs on Docker's log
of their tasks (`kctl logs spark-master` reads ``docker service logs``, from whichever node runs it). A service on
this engine's own node also gets the shared directory (``<state>/spark/data``, tables and checkpoints) at its
path; a worker on another node does not, so then the job's tables and checkpoint must be on S3
(:func:`remote_workers`, checked by `kctl stream submit`).

UIs are published in host mode on the node that runs each task (Swarm cannot bind one address): the master's on
``spark.ui_port`` of its node's address, worker N's on ``ui_port + N`` of its own.

The job's driver runs on this machine, as on Compose: a container of this engine attached to the overlay network
(kctl.stream.spark.run_driver), reached by the executors on every node at its name there.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kctl import cache, contract
from kctl.errors import KctlError
from kctl.model.properties import services_of
from kctl.model.render import template
from kctl.model.spec import SPARK_DAEMON_MEMORY, ClusterSpec, NodeSpec
from kctl.runtime import docker_api
from kctl.runtime.docker_api import run_docker
from kctl.runtime.engine import engines, swarm
from kctl.runtime.engine.base import Capability
from kctl.runtime.image import build as image
from kctl.stream import spark_hosts
from kctl.wait import Stage, wait_for_stages

Progress = Callable[[str], None]

STACK_FILE = "stack.yaml"
SPARK_HOME = "/opt/kctl/spark"  # the tar's spark/ (jars, bin)
CONF = contract.SPARK_CONF_DIR
WORK = contract.SPARK_WORK_DIR
MASTER = contract.SPARK_MASTER
MASTER_PORT = contract.SPARK_MASTER_PORT
MASTER_UI = contract.SPARK_MASTER_UI
WORKER_UI = contract.SPARK_WORKER_UI
LABEL_SPARK = docker_api.LABEL_SPARK
LABEL_SPARK_ROLE = contract.LABEL_SPARK_ROLE
REMOVE_WAIT = 120.0

DOCKERFILE = """\
# The image of the Spark master and workers on engine swarm (kctl/stream/spark_swarm.py): the Spark image (Java 17)
# with the installed pyspark's jars/ and bin/ (spark.tar: spark/jars, spark/bin), so a Swarm node needs nothing else.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ADD spark.tar /opt/kctl/
"""


def on_swarm(spec: ClusterSpec) -> bool:
    return spec.spark is not None and engines.supports(spec, Capability.SPARK_ON_SWARM)


def project(spec: ClusterSpec) -> str:
    return f"{spec.project}-spark"


def worker_name(i: int) -> str:
    return f"spark-worker-{i}"


def service_name(spec: ClusterSpec, name: str) -> str:
    return f"{project(spec)}_{name}"


def placement(spec: ClusterSpec) -> dict[str, tuple[str, NodeSpec]]:
    """Pure: each Spark service (spark-master, spark-worker-N) -> the container host it runs beside, and its node:
    the master beside the first node's, worker N beside the N-th node's (round the nodes again)."""
    assert spec.spark is not None
    hosts = [(h, n) for h, n, _s in services_of(spec)]
    out = {MASTER: hosts[0]}
    for i in range(1, spec.spark.workers + 1):
        out[worker_name(i)] = hosts[(i - 1) % len(hosts)]
    return out


def master_address(spec: ClusterSpec) -> str:
    """Where kctl reaches the master's UI: its node's address (127.0.0.1 on a one-node Swarm here)."""
    return spec.node_address(placement(spec)[MASTER][1])


def worker_names(spec: ClusterSpec) -> dict[str, tuple[str, str]]:
    """spark-worker-N (as it registers at the master) -> (its name, its UI at its node's address)."""
    assert spec.spark is not None
    return {name: (name, f"http://{spec.node_address(node)}:{spec.spark.ui_port + int(name.rsplit('-', 1)[1])}")
            for name, (_h, node) in placement(spec).items() if name != MASTER}


def _constraint(spec: ClusterSpec, host: str) -> str:
    return f"node.labels.{contract.swarm_placement_label(spec.name, host)} == true"


def swarm_nodes(spec: ClusterSpec, dc: Any) -> dict[str, swarm.SwarmNode | None]:
    """Each Spark service -> the Swarm node its label constraint names (None when no ready node carries it yet:
    the cluster's own `kctl up` labels them)."""
    ready = swarm.nodes(dc)
    out: dict[str, swarm.SwarmNode | None] = {}
    for name, (host, _n) in placement(spec).items():
        label = contract.swarm_placement_label(spec.name, host)
        out[name] = next((n for n in ready if n.labels.get(label) == "true"), None)
    return out


def remote_workers(spec: ClusterSpec, dc: Any | None = None) -> list[str]:
    """The workers whose Swarm node is not this engine's (they share no directory with this machine), as
    'spark-worker-N on <node>'."""
    dc = dc or docker_api.client()
    local = swarm.require_manager(dc)
    return [f"{name} on {node.hostname if node else 'no labelled node'}"
            for name, node in swarm_nodes(spec, dc).items()
            if name != MASTER and (node is None or node.id != local)]


# ----- the image --------------------------------------------------------------------------------------------------

def dist_image(spec: ClusterSpec, base: str, pyspark: Path, progress: Progress | None = None) -> str:
    """The Spark services' image, built once per pyspark (from ``base``, the Spark image); the reference the stack
    names: pushed to ``image.registry`` when kctl.yaml has one."""
    dc = docker_api.client()
    with spark_hosts.archive(pyspark, progress) as tar:
        digest = hashlib.sha256((DOCKERFILE + base).encode()).hexdigest()[:8]
        tag = f"kctl/spark-dist:{importlib.metadata.version('pyspark')}-{tar.identity[:12]}-{digest}"
        try:
            dc.images.get(tag)
        except docker_api.sdk().errors.ImageNotFound:
            if progress:
                progress(f"building {tag}: {base} with Spark's jars and bin (every Swarm node runs it)")
            root = cache.root() / "host"
            with tempfile.TemporaryDirectory(prefix="kctl-spark-dist-", dir=root) as tmp:
                (Path(tmp) / "Dockerfile").write_text(DOCKERFILE)
                try:
                    os.link(tar.path, Path(tmp) / "spark.tar")
                except OSError:
                    shutil.copy2(tar.path, Path(tmp) / "spark.tar")
                image.build_from_context(dc, Path(tmp), tag=tag, base_image=base,
                                         labels={contract.LABEL_IMAGE: "spark-dist"}, progress=progress)
    if not spec.image.registry:
        return tag
    remote = f"{spec.image.registry.rstrip('/')}/{tag}"
    swarm.push_as(dc, tag, remote, progress or (lambda _m: None))
    return remote


# ----- the stack file (pure) --------------------------------------------------------------------------------------

def stack_document(spec: ClusterSpec, image_ref: str, data_dir: Path, defaults_text: str,
                   local: set[str]) -> dict[str, Any]:
    """The Spark stack: ``local``, the services whose Swarm node is this engine's (they get the shared directory
    ``data_dir`` at its path)."""
    sp = spec.spark
    assert sp is not None
    conf_key = "spark-defaults"
    conf_name = f"{project(spec)}-defaults-{hashlib.sha256(defaults_text.encode()).hexdigest()[:10]}"
    spark_class = f"{SPARK_HOME}/bin/spark-class"
    env = {"SPARK_HOME": SPARK_HOME, "SPARK_CONF_DIR": CONF, "SPARK_DAEMON_MEMORY": SPARK_DAEMON_MEMORY,
           "LANG": "C.UTF-8"}
    volumes: dict[str, Any] = {}
    services: dict[str, Any] = {}
    for name, (host, _node) in placement(spec).items():
        role = "master" if name == MASTER else "worker"
        if name == MASTER:
            argv = [spark_class, "org.apache.spark.deploy.master.Master", "--host", MASTER, "--port",
                    str(MASTER_PORT), "--webui-port", str(MASTER_UI)]
            published, target = sp.ui_port, MASTER_UI
        else:
            i = int(name.rsplit("-", 1)[1])
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://{MASTER}:{MASTER_PORT}",
                    "--host", name, "--cores", str(sp.worker_cores), "--memory", sp.worker_memory,
                    "--webui-port", str(WORKER_UI), "--work-dir", f"{WORK}/work"]
            published, target = sp.ui_port + i, WORKER_UI
        vol = f"{name}-work"
        volumes[vol] = {"name": f"{project(spec)}_{vol}", "labels": {**spec.labels, LABEL_SPARK: spec.name}}
        mounts: list[Any] = [f"{vol}:{WORK}"]
        if name in local:
            mounts.append({"type": "bind", "source": str(data_dir), "target": str(data_dir)})
        services[name] = {
            "image": image_ref, "hostname": name, "command": argv, "environment": env,
            "labels": dict(sorted({**spec.labels, LABEL_SPARK: spec.name, LABEL_SPARK_ROLE: role}.items())),
            "networks": ["cluster"], "stop_grace_period": "30s",
            "ports": [{"target": target, "published": published, "protocol": "tcp", "mode": "host"}],
            "volumes": mounts,
            "configs": [{"source": conf_key, "target": f"{CONF}/spark-defaults.conf", "mode": 0o444}],
            "logging": {"driver": "json-file", "options": {"max-size": "20m", "max-file": "3"}},
            "deploy": {"mode": "replicated", "replicas": 1, "endpoint_mode": "dnsrr",
                       "placement": {"constraints": [_constraint(spec, host)]},
                       "restart_policy": {"condition": "any", "delay": "2s"},
                       "update_config": {"parallelism": 1, "order": "stop-first"},
                       "labels": {LABEL_SPARK: spec.name}},
        }
    return {"services": services, "networks": {"cluster": {"name": spec.project, "external": True}},
            "volumes": volumes, "configs": {conf_key: {"name": conf_name, "file": "./conf/spark-defaults.conf"}}}


def render(spec: ClusterSpec, image_ref: str, data_dir: Path, properties: dict[str, str],
           local: set[str]) -> dict[str, str]:
    """The files under ``<state>/spark`` on engine swarm (relative path -> text)."""
    defaults = template("spark-defaults.conf.j2", cluster=spec.name, properties=properties)
    head = "# Rendered by kctl from kctl.yaml (spark, engine swarm); `kctl up` rewrites it.\n"
    doc = stack_document(spec, image_ref, data_dir, defaults, local)
    return {"conf/spark-defaults.conf": defaults,
            STACK_FILE: head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1 << 16)}


# ----- lifecycle --------------------------------------------------------------------------------------------------

def deploy(spec: ClusterSpec, directory: Path) -> None:
    """`docker stack deploy` of ``<directory>/stack.yaml`` (Swarm updates the services whose definition changed)."""
    proc = run_docker(["stack", "deploy", "--detach=true", "--prune", "--resolve-image", "never", "-c", STACK_FILE,
                       project(spec)], timeout=300, cwd=directory)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()[-1500:]
        raise KctlError(f"`docker stack deploy` of the Spark cluster failed: {said}",
                        hint=f"`docker stack ps --no-trunc {project(spec)}`; `kctl down` removes it")


def local_services(spec: ClusterSpec, dc: Any) -> tuple[set[str], list[str]]:
    """(the Spark services on this engine's node, a warning per service no ready node is labelled for yet)."""
    local = swarm.require_manager(dc)
    found = swarm_nodes(spec, dc)
    missing = [f"{name}: no ready Swarm node is labelled for {placement(spec)[name][0]} (`kctl up` labels them)"
               for name, node in found.items() if node is None]
    return {name for name, node in found.items() if node is not None and node.id == local}, missing


def remove(spec: ClusterSpec) -> bool:
    """`docker stack rm` of the Spark stack, waited for until its containers are gone, then its volumes on this
    engine; False when there was none."""
    dc = docker_api.client()
    stack = f"{contract.LABEL_STACK_NAMESPACE}={project(spec)}"
    try:
        names = [s.name for s in dc.services.list(filters={"label": stack})]
    except docker_api.sdk().errors.APIError:  # no longer a Swarm manager: nothing of a stack is left to remove
        names = []
    if names:
        proc = run_docker(["stack", "rm", project(spec)], timeout=120)
        if proc.returncode != 0:
            raise KctlError(f"`docker stack rm {project(spec)}` failed: {(proc.stderr or proc.stdout).strip()[-800:]}",
                            hint="`docker stack ls`")

    def gone() -> tuple[bool, str]:
        left = [c.name for c in dc.containers.list(all=True, filters={"label": stack}, ignore_removed=True)
                if c.status in ("running", "created", "restarting")]
        return not left, f"containers {', '.join(left)} still up" if left else "none left"

    wait_for_stages([Stage(f"stack {project(spec)} removed by Swarm", gone)], timeout=REMOVE_WAIT, poll=1.0)
    for c in dc.containers.list(all=True, filters={"label": stack}, ignore_removed=True):
        c.remove(force=True)  # earlier tasks' exited containers
    for v in dc.volumes.list(filters={"label": f"{LABEL_SPARK}={spec.name}"}):
        try:
            v.remove(force=True)
        except docker_api.sdk().errors.APIError:  # a task's container still being removed; removed by the next down
            pass
    return bool(names)
