"""Pure rendering: ClusterSpec -> {relative path: text}, and writing it out.

The Jinja environment is explicit (``StrictUndefined``, ``trim_blocks``,
``lstrip_blocks``) and every template gets an explicit context. The Compose (or
stack) file is data written with PyYAML, not a template. Output is
deterministic, so the default cluster is golden-tested.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from kctl import __version__, contract
from kctl.contract import (
    LABEL_CLUSTER,
    LABEL_HASH,
    LABEL_NODE,
    LABEL_NODE_ID,
    LABEL_SERVICE,
    LABEL_SERVICES,
    LABEL_STATE_DIR,
    LABEL_VERSION,
)
from kctl.deferred import defer_import
from kctl.errors import KctlError, UsageError
from kctl.kraft import config as kraft_config
from kctl.kraft.phases import Phase, rank
from kctl.model import properties
from kctl.model.spec import ClusterSpec, Engine, NodeSpec
from kctl.resources import resource

# jinja2 (~30 ms with markupsafe) renders the state dir: a command that reads the spec and the cluster (`kctl
# status`) imports this module through the secured profile's store and renders nothing.
defer_import("jinja2")

import jinja2  # noqa: E402

COMPOSE_FILE = contract.COMPOSE_FILE



@dataclass(frozen=True)
class ContainerPlan:
    """One container of the cluster as rendered: what it runs and its config hash."""

    name: str  # Compose service name == hostname
    node: NodeSpec
    services: tuple[str, ...]
    config_hash: str
    files: dict[str, str] = field(repr=False)


@dataclass(frozen=True)
class Rendered:
    files: dict[str, str]  # relative path -> text, compose.yaml included
    containers: list[ContainerPlan]

    def container(self, name: str) -> ContainerPlan:
        for c in self.containers:
            if c.name == name:
                return c
        raise KeyError(name)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _tpl(name: str, **context: Any) -> str:
    return _env().get_template(name).render(**context)


def template(name: str, **context: Any) -> str:
    """A template of templates/ rendered with ``context``, through the one Jinja environment."""
    return _tpl(name, **context)


def _hash(parts: dict[str, str]) -> str:
    h = hashlib.sha256()
    for k in sorted(parts):
        h.update(k.encode())
        h.update(b"\0")
        h.update(parts[k].encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _heap_opts(size: str) -> str:
    return f"-Xms{size} -Xmx{size}"


def node_files(spec: ClusterSpec, host: str, node: NodeSpec, services: tuple[str, ...]) -> dict[str, str]:
    """The conf files of one container, keyed by their path under the container's dir."""
    ctx = {"cluster": spec.name, "host": host, "node_id": node.id}
    files: dict[str, str] = {}
    if "zookeeper" in services:
        files["conf/zoo.cfg"] = _tpl("zoo.cfg.j2", properties=properties.zoo_cfg(spec, node), **ctx)
        files["conf/myid"] = _tpl("myid.j2", **ctx)
        dynamic = properties.zoo_cfg_dynamic(spec)
        if dynamic:
            # No header: ZooKeeper's own format, the same lines as `kctl zk config` shows.
            files[f"conf/{properties.ZOO_CFG_DYNAMIC}"] = "".join(f"{k}={v}\n" for k, v in dynamic.items())
        files["conf/log4j-zookeeper.properties"] = _tpl(
            "log4j.properties.j2", component="zookeeper", properties=properties.log4j("zookeeper"), **ctx
        )
    phase = Phase(spec.kraft_phase)
    if "zookeeper" in services and phase is Phase.kraft:
        files[f"conf/{contract.ZOOKEEPER_RETIRED}"] = (
            "# The cluster's metadata is in its KRaft controllers (`metadata: kraft`, or `kctl migrate kraft\n"
            "# finalize`): no ZooKeeper runs on this node. A migrated cluster's ZooKeeper data is kept in\n"
            f"# {spec.zookeeper.data_dir} until the operator removes it.\n")
    if phase is Phase.kraft and spec.kraft_cluster_id:
        # what a KRaft node formats its storage with, when it has none (a cluster made on KRaft)
        files["conf/cluster-id"] = f"{spec.kraft_cluster_id}\n"
    controller = rank(phase) >= rank(Phase.controllers) and node in kraft_config.controller_nodes(spec)
    if "zookeeper" in services and controller:
        files["conf/controller.properties"] = _tpl(
            "controller.properties.j2", properties=kraft_config.controller_properties(spec, node, phase),
            controller_id=kraft_config.controller_id(node), **ctx)
        if spec.kraft_cluster_id:
            files["conf/cluster-id"] = f"{spec.kraft_cluster_id}\n"
        files["conf/log4j-controller.properties"] = _tpl(
            "log4j.properties.j2", component="controller", properties=properties.log4j("controller"), **ctx
        )
        jvm = properties.controller_jvm_options(spec)
        if jvm:  # controller-start reads it: a running container's environment cannot gain it
            files[f"conf/{contract.CONTROLLER_JVM_FILE}"] = f"{jvm}\n"
    if "kafka" in services:
        server = properties.server_properties(spec, node)
        if rank(phase) >= rank(Phase.dual_write):
            server = kraft_config.broker_change(spec, node, phase, server).apply(server)
        files["conf/server.properties"] = _tpl("server.properties.j2", properties=server, **ctx)
        files["conf/log4j-kafka.properties"] = _tpl(
            "log4j.properties.j2", component="kafka", properties=properties.log4j("kafka"), **ctx
        )
        if spec.monitoring.enabled:
            files[f"conf/{contract.JMX_EXPORTER_CONFIG}"] = _tpl("jmx-exporter.yaml.j2", **ctx)
    return files


def environment(spec: ClusterSpec, host: str, services: tuple[str, ...]) -> dict[str, str]:
    zk_servers = ",".join(f"{spec.zk_host(n)}:{spec.zookeeper.client_port}" for n in spec.participants)
    env = {
        contract.ENV_CLUSTER: spec.name,
        contract.ENV_NODE: host,
        contract.ENV_SERVICES: ",".join(services),
        contract.ENV_ZK_SERVERS: zk_servers,
        contract.ENV_ZK_HEAP: _heap_opts(spec.zookeeper.heap),
        contract.ENV_KAFKA_HEAP: _heap_opts(spec.kafka.heap),
    }
    for svc, name in (("kafka", contract.ENV_KAFKA_OPTS), ("zookeeper", contract.ENV_ZK_OPTS)):
        opts = properties.jvm_options(spec, svc) if svc in services else ""
        if opts:
            env[name] = opts
    if spec.security.enabled and "kafka" in services:
        env[contract.ENV_SCRAM_USER] = spec.security.admin_user
    if spec.monitoring.enabled and "kafka" in services:
        env[contract.ENV_JMX_EXPORTER_PORT] = str(spec.monitoring.kafka_exporter_port)
    return dict(sorted(env.items()))


def _port(spec: ClusterSpec, published: int, target: int) -> str | dict[str, Any]:
    if spec.engine is Engine.swarm:
        # Swarm cannot bind one address, and its routing mesh needs ip_vs: host mode, on the node that runs the task.
        return {"target": target, "published": published, "protocol": "tcp", "mode": "host"}
    return f"127.0.0.1:{published}:{target}"


def config_name(spec: ClusterSpec, host: str, rel: str, text: str) -> str:
    """A Swarm config's name: configs are immutable, so a changed file is a new config (its hash in the name)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    stem = Path(rel).name.replace(".", "-")
    return f"{spec.project}-{host}-{stem}-{digest}"[-64:].lstrip("-_.")


def _config_key(host: str, rel: str) -> str:
    return f"{host}-{Path(rel).name.replace('.', '-')}"


def _service(spec: ClusterSpec, plan: ContainerPlan, state_dir: Path | None) -> dict[str, Any]:
    node, host, services = plan.node, plan.name, plan.services
    env = environment(spec, host, services)
    ports: list[str | dict[str, Any]] = []
    if "zookeeper" in services:
        ports.append(_port(spec, spec.zk_host_port(node), spec.zookeeper.client_port))
        zkm = spec.zk_metrics_host_port(node)
        if zkm is not None:
            ports.append(_port(spec, zkm, spec.monitoring.zookeeper_exporter_port))
    if "kafka" in services:
        ext = spec.kafka_host_port(node)
        ports.append(_port(spec, ext, ext))
        if spec.migrating:  # EXTERNAL_SECURE, beside EXTERNAL while security.migration is set
            sext = spec.secure_host_port(node)
            ports.append(_port(spec, sext, sext))
        jmx = spec.jmx_host_port(node)
        if jmx is not None:
            env[contract.ENV_JMX_PORT] = str(jmx)
            ports.append(_port(spec, jmx, jmx))
        km = spec.kafka_metrics_host_port(node)
        if km is not None:
            ports.append(_port(spec, km, spec.monitoring.kafka_exporter_port))
    labels = {
        **spec.labels,
        LABEL_CLUSTER: spec.name,
        LABEL_HASH: plan.config_hash,
        LABEL_NODE: node.hostname,
        LABEL_NODE_ID: str(node.id),
        LABEL_SERVICE: host,
        LABEL_SERVICES: ",".join(services),
        LABEL_VERSION: __version__,
    }
    if state_dir is not None:
        labels[LABEL_STATE_DIR] = str(state_dir.resolve())
    if spec.engine is Engine.swarm:
        return _swarm_service(spec, plan, env, labels, ports)
    return {
        "name": host,
        "hostname": host,
        "image": spec.image_ref,
        # supervisord stops Kafka (controlled shutdown, up to 120 s) and then ZooKeeper (30 s).
        "stop_grace_period": "180s",
        # A Docker daemon restart or a host reboot starts the node again, as it does the mirrors; `kctl down`
        # and `kctl stop` (docker stop) keep it stopped until kctl starts it: Docker never restarts a container
        # it was told to stop until the daemon itself restarts.
        "restart": "unless-stopped",
        "environment": dict(sorted(env.items())),
        "labels": dict(sorted(labels.items())),
        "ports": ports,
        "volumes": [f"./{host}/{contract.HOST_CONF}:{contract.CONF_DIR}:ro",
                    f"./{host}/{contract.HOST_DATA}:{contract.DATA_ROOT}",
                    f"./{host}/{contract.HOST_LOGS}:{contract.LOG_ROOT}"]
        + ([f"./{contract.HOST_SECRETS}/{host}:{contract.SECRETS_MOUNT}:ro"] if spec.security.enabled else []),
        # Docker's view for `docker ps` and `kctl status`; kctl's own gates probe the processes themselves. Every
        # 30 s (Docker's default), not 5 s: each check is an exec (runc through the container's shim, then the
        # script's ten processes), about 0.09 CPU-s, so at 5 s the checks alone took 5-6 % of a core per
        # three-node cluster, nearly half of what an idle one then cost (docs/architecture.md).
        "healthcheck": {"test": ["CMD", contract.HEALTHCHECK], "interval": "30s", "timeout": "5s",
                        "retries": 3, "start_period": "120s"},
        # `kctl drill run slow-network` changes the node's own traffic (tc netem) and nothing else's.
        "cap_add": list(contract.CAP_ADD),
        "configs": [],
        "deploy": {},
    }


def _swarm_service(spec: ClusterSpec, plan: ContainerPlan, env: dict[str, str], labels: dict[str, str],
                   ports: list[str | dict[str, Any]]) -> dict[str, Any]:
    """The same service on Swarm: files as Swarm configs (the conf dir exists on no other host), data and logs
    on the node's own named volumes (the task is pinned to that node, so an update finds them again)."""
    host = plan.name
    return {
        "name": host,
        "hostname": host,
        "image": spec.image_ref,
        "stop_grace_period": "180s",
        "environment": dict(sorted(env.items())),
        "labels": dict(sorted(labels.items())),
        "ports": ports,
        "volumes": [f"{host}-{contract.HOST_DATA}:{contract.DATA_ROOT}",
                    f"{host}-{contract.HOST_LOGS}:{contract.LOG_ROOT}"],
        "configs": [{"source": _config_key(host, rel), "target": f"{contract.CONF_DIR}/{Path(rel).name}",
                     "mode": 0o444} for rel in plan.files],
        # The image's healthcheck waits for a ZooKeeper quorum, and Swarm gives a task its DNS name only once
        # it is healthy: with it, the ensemble never forms. kctl's own status observes the processes.
        "healthcheck": {"disable": True},
        "cap_add": list(contract.CAP_ADD),
        "deploy": properties.swarm_deploy(spec, host),
    }


def _swarm_top_level(spec: ClusterSpec, plans: list[ContainerPlan]) -> dict[str, Any]:
    if spec.engine is not Engine.swarm:
        return {"network_options": {}, "volumes": {}, "configs": {}}
    volumes = {f"{p.name}-{sub}": {"name": f"{spec.project}_{p.name}-{sub}",
                                   "labels": {**spec.labels, LABEL_CLUSTER: spec.name}}
               for p in plans for sub in (contract.HOST_DATA, contract.HOST_LOGS)}
    configs = {_config_key(p.name, rel): {"name": config_name(spec, p.name, rel, text), "file": f"./{p.name}/{rel}"}
               for p in plans for rel, text in p.files.items()}
    return {"network_options": {"driver": "overlay", "attachable": True}, "volumes": volumes, "configs": configs}


_SERVICE_KEYS = ("image", "hostname", "init", "stop_grace_period", "restart", "environment", "labels", "ports",
                 "volumes", "configs", "cap_add", "networks", "healthcheck", "deploy")


def compose_document(spec: ClusterSpec, plans: list[ContainerPlan], state_dir: Path | None) -> dict[str, Any]:
    """The Compose file (engine compose) or the stack file (engine swarm) as data: what Docker reads."""
    services: dict[str, Any] = {}
    for plan in plans:
        svc = {**_service(spec, plan, state_dir), "init": False, "networks": ["cluster"]}
        # Empty lists and maps are left out, as Compose's own `config` leaves them out.
        services[plan.name] = {k: svc[k] for k in _SERVICE_KEYS if k in svc and svc[k] not in ([], {})}
    top = _swarm_top_level(spec, plans)
    doc: dict[str, Any] = {}
    if spec.engine is Engine.compose:
        doc["name"] = spec.project  # a stack is named on deploy
    doc["services"] = services
    doc["networks"] = {"cluster": {"name": spec.project, **top["network_options"],
                                   "labels": {**spec.labels, LABEL_CLUSTER: spec.name}}}
    if top["volumes"]:
        doc["volumes"] = top["volumes"]
    if top["configs"]:
        doc["configs"] = top["configs"]
    return doc


# A plain scalar only where every YAML reader takes it as the same string (Compose reads YAML 1.2, PyYAML
# writes 1.1: "0o17" or "12:30" would differ); anything else is written double-quoted.
_PLAIN = re.compile(r"[A-Za-z/][A-Za-z0-9_./-]*")
_STR = "tag:yaml.org,2002:str"


class _ComposeDumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)  # list items indented under their key


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    plain = _PLAIN.fullmatch(value) and dumper.resolve(yaml.ScalarNode, value, (True, False)) == _STR  # type: ignore[no-untyped-call]
    return dumper.represent_scalar(_STR, value, style=None if plain else '"')


_ComposeDumper.add_representer(str, _str)


def compose_file(spec: ClusterSpec, plans: list[ContainerPlan], state_dir: Path | None) -> str:
    """compose.yaml: :func:`compose_document` written by PyYAML in its own key order, under a header."""
    header = (f"# Compose file of kctl cluster {json.dumps(spec.name)}, rendered by kctl from kctl.yaml.\n"
              "# Use `kctl up` / `kctl down`; `docker compose -f compose.yaml config` validates it.\n")
    body = yaml.dump(compose_document(spec, plans, state_dir), Dumper=_ComposeDumper, sort_keys=False,
                     default_flow_style=False, allow_unicode=True, width=1 << 16)
    return header + body


def jaas_file(sections: list[properties.JaasSection], host: str) -> str:
    """A JAAS login configuration (a secret: it holds passwords)."""
    return _tpl("jaas.j2", host=host, sections=[{"name": n, "module": m, "options": o} for n, m, o in sections])


def client_properties(props: dict[str, str], title: str) -> str:
    return _tpl("client.properties.j2", title=title, properties=props)


def render(spec: ClusterSpec, state_dir: Path | None = None) -> Rendered:
    """Render every file of the cluster. Pure: no I/O beyond reading templates.

    ``state_dir`` (where the files will be written) becomes a label of every container,
    so that commands run from another directory can tell the containers are not theirs.
    """
    spec.check_migration()  # a migration under way, a raised metadata.version: refused before anything is made
    if contract.kraft_only(spec.versions.kafka) and not spec.on_kraft:
        raise UsageError(
            f"versions.kafka: Kafka {spec.versions.kafka} has no ZooKeeper mode, and cluster {spec.name} keeps its"
            " metadata in ZooKeeper",
            hint="migrate it to KRaft first on its Kafka release (`kctl migrate kraft next`, up to `kctl migrate"
                 " kraft finalize`; docs/runbooks/migrate-to-kraft.md), then set versions.kafka; a new cluster:"
                 " `metadata: kraft`")
    files: dict[str, str] = {}
    plans: list[ContainerPlan] = []
    for host, node, services in properties.services_of(spec):
        nf = node_files(spec, host, node, services)
        identity = {**nf, "image": spec.image_ref, "cap_add": ",".join(contract.CAP_ADD),
                    "env": repr(environment(spec, host, services)),
                    "ports": repr(spec.published_ports(node))}
        plan = ContainerPlan(name=host, node=node, services=services, config_hash=_hash(identity), files=nf)
        plans.append(plan)
        for rel, text in nf.items():
            files[f"{host}/{rel}"] = text
    files[COMPOSE_FILE] = compose_file(spec, plans, state_dir)
    return Rendered(files=dict(sorted(files.items())), containers=plans)


def write(rendered: Rendered, out: Path) -> list[Path]:
    """Write the rendered files under ``out`` atomically, file by file; create data and log dirs.

    Every file is written to a temporary sibling and renamed into place, so a
    reader never sees a half-written config. Returns the paths that changed.
    """
    try:
        applied = _applied_hosts(out)
        changed = write_text_files(rendered.files, out)
        for c in rendered.containers:
            data = out / c.name / contract.HOST_DATA
            if not data.exists() and c.name not in applied:
                # kctl makes this node's storage now: its KRaft storage may be formatted at its first start (an
                # existing node's data dir that is gone is a lost disk: refused, docs/runbooks/replace-failed-node.md)
                data.mkdir(parents=True)
                for service in format_permits(c):
                    (data / f"{contract.FORMAT_PERMIT_PREFIX}{service}").write_text("", encoding="utf-8")
            for sub in (contract.HOST_DATA, contract.HOST_LOGS):
                (out / c.name / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KctlError(f"cannot write the cluster's files under {out}: {exc.strerror or exc}",
                        hint="check the permissions of the directory, or pass --out DIR") from None
    return changed


def format_permits(plan: ContainerPlan) -> list[str]:
    """Pure: the services of a new node whose KRaft storage kctl may format (contract.FORMAT_PERMIT_PREFIX): its
    broker, and its controller when it has one (a migration's controllers get theirs when they start)."""
    return [s for s, has in (("controller", "conf/controller.properties" in plan.files),
                             ("kafka", "kafka" in plan.services)) if has]


def _applied_hosts(out: Path) -> set[str]:
    """The hosts applied.json names (nodes kctl made before), none when it is missing or unreadable."""
    try:
        return set(json.loads((out / contract.APPLIED_FILE).read_text(encoding="utf-8")).get("hashes") or {})
    except (OSError, ValueError, AttributeError):
        return set()


def write_text_files(files: dict[str, str], out: Path) -> list[Path]:
    """Write ``files`` (relative path -> text) under ``out``, each atomically (a temporary sibling renamed into
    place) and only when its text changed; returns the paths that changed. OSError propagates."""
    changed: list[Path] = []
    out.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        changed.append(target)
    return changed


def remove_state(out: Path, keep: Iterable[Path] = ()) -> list[Path]:
    """Delete a state dir (data included), but for the files in ``keep`` that lie inside it (known-hosts files:
    ``down --volumes`` never deletes one, so the next ``up`` cannot trust any key). Used by ``down --volumes``;
    returns the files kept."""
    if not out.exists():
        return []
    root = out.resolve()
    kept = sorted({k.resolve() for k in keep if k.is_file() and root in k.resolve().parents})
    if not kept:
        shutil.rmtree(out)
        return []

    def prune(d: Path) -> None:
        for child in sorted(d.iterdir()):
            real = child.resolve() if not child.is_symlink() else child
            if real in kept:
                continue
            if child.is_dir() and not child.is_symlink():
                if any(real in k.parents for k in kept):
                    prune(child)
                else:
                    shutil.rmtree(child)
            else:
                child.unlink()

    prune(root)
    return kept
