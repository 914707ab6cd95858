"""`make swarm-check`: engine swarm across three Swarm nodes, as Docker-in-Docker containers on this machine.

Outside `make test` (several minutes, three inner Docker engines). In one run:
- an inner image (the local Debian base plus Debian's ``docker.io`` and ``iproute2``);
- three containers of it on their own bridge network, nothing published, each running its own dockerd
  (started with the capabilities that work without ``--privileged`` here, docs/multi-host.md);
- the node image copied into each (``docker save | docker load``), ``swarm init`` on the first, ``swarm join``
  on the others;
- the default 3-node spec with ``engine: swarm`` deployed across them by ``kctl up`` talking to the first
  node's engine, one kctl node per Swarm node, each ``advertised_host`` its Swarm node's address;
- ``kctl status`` healthy; records produced with ``acks=all``; one Swarm node's container killed; every
  acknowledged record read back by an independent consumer (kcat, a fresh process, from the beginning).
Everything it made (containers, network, volumes) is removed at the end, also on failure and Ctrl-C.
Time to deploy and memory are printed and written to docs/benchmarks.md ("## Multi-host on Docker Swarm").
Run it under the shared lock: ``flock /tmp/kctl-docker.lock python -m kctl.bench.swarm``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import yaml

from kctl.bench.doc import add_output_args, publish, table
from kctl.wait import ticks

SECTION = "## Multi-host on Docker Swarm"
INNER_IMAGE = "kctl/dind:bookworm"
LABEL = "io.kctl.bench"
NODES = 3
DOCKERD_PORT = 2375
# Published ports bind on the Docker-in-Docker nodes only, but kctl also checks the machine it runs on:
# port bases whose three ports are free here too.

DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io iproute2 ca-certificates \\
 && rm -rf /var/lib/apt/lists/*
VOLUME /var/lib/docker
"""

# cgroup v1 here: every hierarchy is bind-mounted read-only into a container (a per-mount flag, hence
# `remount,bind,rw`); the inner dockerd needs them writable.
# Its API on the node's own address (no TLS): reachable only from this machine and the check's own network.
ENTRYPOINT = (
    "for m in /sys/fs/cgroup /sys/fs/cgroup/*; do mountpoint -q $m && mount -o remount,bind,rw $m; done; "
    f"exec dockerd -H unix:///var/run/docker.sock -H tcp://0.0.0.0:{DOCKERD_PORT} >/var/log/dockerd.log 2>&1"
)


def log(msg: str) -> None:
    print(f"[swarm-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(argv: list[str], *, timeout: float = 120, env: dict[str, str] | None = None, check: bool = True,
       stdin: Any = None) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=stdin)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} ... exited {p.returncode}:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return p


class Check:
    """The three Docker-in-Docker Swarm nodes and everything made for them; ``close()`` removes it all."""

    def __init__(self, dc: docker.DockerClient) -> None:
        self.dc = dc
        self.run_id = uuid.uuid4().hex[:6]
        self.net_name = f"kctl-swarmcheck-{self.run_id}"
        self.names = [f"kctl-swarmcheck-{self.run_id}-n{i}" for i in range(1, NODES + 1)]
        self.containers: list[Any] = []
        self.volumes: list[Any] = []
        self.network: Any = None
        self.addrs: list[str] = []

    def inner_image(self) -> float:
        from kctl.runtime.image.build import resolve_base_image

        t = time.monotonic()
        try:
            self.dc.images.get(INNER_IMAGE)
            log(f"{INNER_IMAGE} is there")
        except docker.errors.ImageNotFound:
            base = resolve_base_image(self.dc, progress=log)
            log(f"building {INNER_IMAGE} from {base} (apt-get install docker.io iproute2)")
            self.dc.images.build(fileobj=io.BytesIO(DOCKERFILE.encode()), tag=INNER_IMAGE, rm=True, forcerm=True,
                                 buildargs={"BASE_IMAGE": base}, labels={LABEL: "swarm-check"}, pull=False)
        return time.monotonic() - t

    def start_nodes(self, shared: list[tuple[str, bool]] | None = None) -> float:
        """``shared``: directories of this machine bind-mounted into every node at the same path (read-only
        when True): what a process run on the first node's engine (a Spark driver's container) mounts."""
        t = time.monotonic()
        binds = [a for path, ro in shared or [] for a in ("-v", f"{path}:{path}{':ro' if ro else ''}")]
        labels = {LABEL: "swarm-check", f"{LABEL}.run": self.run_id}
        self.network = self.dc.networks.create(self.net_name, driver="bridge", labels=labels)
        for name in self.names:
            vol = self.dc.volumes.create(f"{name}-docker", labels=labels)
            self.volumes.append(vol)
            # The docker CLI: `systempaths=unconfined` is its own option (empty masked and read-only paths),
            # which the Engine API takes as fields the SDK does not set.
            cid = sh(["docker", "run", "-d", "--name", name, "--hostname", name.rsplit("-", 1)[1],
                      *[a for k, v in labels.items() for a in ("--label", f"{k}={v}")],
                      "--network", self.net_name, "-v", f"{vol.name}:/var/lib/docker", *binds,
                      "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
                      "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
                      "--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm",
                      INNER_IMAGE, "sh", "-c", ENTRYPOINT]).stdout.strip()
            c = self.dc.containers.get(cid)
            self.containers.append(c)
        for c in self.containers:
            c.reload()
            self.addrs.append(c.attrs["NetworkSettings"]["Networks"][self.net_name]["IPAddress"])
        deadline = time.monotonic() + 90
        for name, c in zip(self.names, self.containers, strict=True):
            for _ in ticks(0.5):  # bounded: deadline
                if sh(["docker", "exec", name, "docker", "info"], check=False, timeout=30).returncode == 0:
                    break
                c.reload()
                if c.status != "running" or time.monotonic() > deadline:
                    out = sh(["docker", "exec", name, "tail", "-20", "/var/log/dockerd.log"], check=False)
                    raise RuntimeError(f"{name}: dockerd did not start ({c.status}):\n{c.logs()[-2000:]!r}{out.stdout}")
        return time.monotonic() - t

    def load_image(self, image: str) -> float:
        t = time.monotonic()

        def one(name: str) -> None:
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            try:
                sh(["docker", "exec", "-i", name, "docker", "load", "-q"], stdin=save.stdout, timeout=600)
            finally:
                if save.stdout:
                    save.stdout.close()
                save.wait(60)

        with concurrent.futures.ThreadPoolExecutor(NODES) as pool:
            for f in [pool.submit(one, n) for n in self.names]:
                f.result()
        return time.monotonic() - t

    def form_swarm(self) -> float:
        t = time.monotonic()
        first = self.names[0]
        sh(["docker", "exec", first, "docker", "swarm", "init", "--advertise-addr", self.addrs[0]])
        token = sh(["docker", "exec", first, "docker", "swarm", "join-token", "-q", "worker"]).stdout.strip()
        for name, addr in zip(self.names[1:], self.addrs[1:], strict=True):
            sh(["docker", "exec", name, "docker", "swarm", "join", "--advertise-addr", addr, "--token", token,
                f"{self.addrs[0]}:2377"])
        ls = sh(["docker", "exec", first, "docker", "node", "ls", "--format", "{{.Hostname}} {{.Status}}"]).stdout
        if ls.count("Ready") != NODES:
            raise RuntimeError(f"the Swarm has not {NODES} ready nodes:\n{ls}")
        return time.monotonic() - t

    def memory_mb(self) -> tuple[float, float]:
        """(the three Swarm nodes' containers in total, the kctl node containers inside them in total), MB."""
        outer = 0.0
        for c in self.containers:
            c.reload()
            if c.status != "running":
                continue
            s = self.dc.api.stats(c.id, stream=False)
            mem = s.get("memory_stats", {})
            outer += (mem.get("usage", 0) - (mem.get("stats", {}) or {}).get("cache", 0)) / 1e6
        inner = 0.0
        for name in self.names:
            p = sh(["docker", "exec", name, "docker", "stats", "--no-stream", "--format", "{{json .}}"], check=False,
                   timeout=60)
            for line in p.stdout.splitlines():
                inner += _mb(json.loads(line)["MemUsage"].split("/")[0])
        return outer, inner

    def close(self) -> None:
        for c in self.containers:
            try:
                c.remove(force=True, v=True)
            except docker.errors.APIError as exc:
                log(f"removing {c.name}: {exc}")
        for v in self.volumes:
            try:
                v.remove(force=True)
            except docker.errors.APIError as exc:
                log(f"removing volume {v.name}: {exc}")
        if self.network is not None:
            try:
                self.network.remove()
            except docker.errors.APIError as exc:
                log(f"removing network {self.net_name}: {exc}")
        log("removed the Swarm nodes' containers, volumes and network")


def _mb(text: str) -> float:
    text = text.strip()
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9),
                         ("B", 1)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor / 1e6
    return 0.0


def _free_base(start: int) -> int:
    import socket

    for base in range(start, start + 2000, 10):
        try:
            for port in range(base, base + NODES):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no three free ports from {start}")


ZK_PORT_BASE = _free_base(32180)
KAFKA_PORT_BASE = _free_base(39190)


def _spec(addrs: list[str]) -> dict[str, Any]:
    return {
        "name": "swarmcheck",
        "engine": "swarm",
        "zookeeper": {"host_port_base": ZK_PORT_BASE},
        "kafka": {"external_port_base": KAFKA_PORT_BASE},
        "nodes": [{"id": i, "hostname": f"logger{i}", "advertised_host": addrs[i - 1]} for i in range(1, NODES + 1)],
    }


def kctl(spec_file: Path, env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], capture_output=True,
                          text=True, timeout=timeout, cwd=spec_file.parent, env=env)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    dc = docker.from_env()
    fig: dict[str, Any] = {}
    check = Check(dc)
    try:
        fig["inner_image_s"] = check.inner_image()
        log("starting three Docker-in-Docker Swarm nodes")
        fig["nodes_s"] = check.start_nodes()
        log(f"  dockerd ready in all three after {fig['nodes_s']:.1f} s: {', '.join(check.addrs)}")
        log(f"docker save {args.image} | docker load into each")
        fig["load_s"] = check.load_image(args.image)
        log(f"  {fig['load_s']:.1f} s")
        fig["swarm_s"] = check.form_swarm()
        log(f"swarm init + join: {fig['swarm_s']:.1f} s")

        with tempfile.TemporaryDirectory(prefix="kctl-swarmcheck-") as tmp:
            spec_file = Path(tmp) / "kctl.yaml"
            spec_file.write_text(yaml.safe_dump(_spec(check.addrs)))
            env = {**os.environ, "DOCKER_HOST": f"tcp://{check.addrs[0]}:{DOCKERD_PORT}"}
            log("kctl up (engine swarm, through the first node's engine)")
            t = time.monotonic()
            p = kctl(spec_file, env, "up")
            fig["up_s"] = time.monotonic() - t
            if p.returncode != 0:
                raise RuntimeError(f"kctl up exited {p.returncode}:\n{p.stdout[-4000:]}{p.stderr[-4000:]}")
            log(f"  healthy in {fig['up_s']:.1f} s")
            placed = sh(["docker", "exec", check.names[0], "docker", "service", "ps", "-f", "desired-state=running",
                         "--format", "{{.Name}} {{.Node}}", *[f"kctl-swarmcheck_logger{i}" for i in (1, 2, 3)]]).stdout
            log("  placement: " + "; ".join(placed.split("\n")).strip("; "))
            hosts = {line.split()[1] for line in placed.splitlines() if line.strip()}
            if len(hosts) != NODES:
                raise RuntimeError(f"the three kctl nodes are not on three Swarm nodes:\n{placed}")
            p = kctl(spec_file, env, "status", "--wait", "60", "-o", "json")
            if p.returncode != 0:
                raise RuntimeError(f"kctl status exited {p.returncode}:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
            log("kctl status: healthy")
            time.sleep(5)
            fig["mem_outer_mb"], fig["mem_inner_mb"] = check.memory_mb()
            log(f"memory: {fig['mem_outer_mb']:.0f} MB (the three Swarm nodes), {fig['mem_inner_mb']:.0f} MB of it "
                "the kctl nodes' containers")

            bootstrap = ",".join(f"{a}:{KAFKA_PORT_BASE + i}" for i, a in enumerate(check.addrs))
            topic = f"swarmcheck-{check.run_id}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3,
                                          config={"min.insync.replicas": "2"})])[topic].result(30)
            acked: set[str] = set()
            errors: list[str] = []

            def delivered(err: Any, msg: Any) -> None:
                if err is None:
                    acked.add(msg.value().decode())
                else:
                    errors.append(str(err))

            prod = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 120000})
            half = args.records // 2
            for i in range(half):
                prod.produce(topic, f"r{i}".encode(), on_delivery=delivered)
            prod.flush(60)
            victim = check.names[-1]
            log(f"{len(acked)} records acknowledged; killing Swarm node {victim} ({check.addrs[-1]}, logger{NODES})")
            dc.containers.get(victim).kill()
            for i in range(half, args.records):
                prod.produce(topic, f"r{i}".encode(), on_delivery=delivered)
                prod.poll(0)
            left = prod.flush(150)
            fig["acked"], fig["sent"], fig["not_acked"] = len(acked), args.records, len(errors) + left
            log(f"{len(acked)} of {args.records} acknowledged in total ({len(errors)} failed, {left} unsettled)")

            live = ",".join(f"{a}:{KAFKA_PORT_BASE + i}" for i, a in enumerate(check.addrs[:-1]))
            t = time.monotonic()
            p = sh(["kcat", "-b", live, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\n"], timeout=180)
            read = set(p.stdout.split())
            lost = acked - read
            fig["read"], fig["lost"] = len(read & acked), len(lost)
            log(f"kcat read back {len(read)} distinct records in {time.monotonic() - t:.1f} s; "
                f"{len(lost)} acknowledged records missing")
            if lost:
                raise RuntimeError(f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}")
        fig["ok"] = True
        return fig
    finally:
        check.close()


def section(fig: dict[str, Any], image: str) -> str:
    rows = [
        ("inner image (Debian + docker.io + iproute2)", f"{fig['inner_image_s']:.1f} s (0 when it is there)"),
        ("three Docker-in-Docker nodes, dockerd ready", f"{fig['nodes_s']:.1f} s"),
        (f"`docker save {image} \\| docker load` into all three", f"{fig['load_s']:.1f} s"),
        ("swarm init + 2 joins, three nodes ready", f"{fig['swarm_s']:.1f} s"),
        ("**`kctl up` (engine swarm) to verified healthy**", f"**{fig['up_s']:.1f} s**"),
        ("memory of the three Swarm nodes (dockerd + kctl nodes)", f"{fig['mem_outer_mb']:.0f} MB"),
        ("of it, the three kctl node containers", f"{fig['mem_inner_mb']:.0f} MB"),
        ("records acknowledged (acks=all) / sent, one Swarm node killed halfway",
         f"{fig['acked']} / {fig['sent']}"),
        ("acknowledged records read back by kcat / lost", f"{fig['read']} / {fig['lost']}"),
    ]
    return "\n".join([
        SECTION, "",
        f"`make swarm-check` (`python -m kctl.bench.swarm`), {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores: the default 3-node spec with `engine: swarm` on a Swarm of three Docker-in-Docker "
        "nodes of this machine, one kctl node per Swarm node (docs/multi-host.md). The last Swarm node's container "
        "is killed (its ZooKeeper and broker with it) halfway through producing.", "",
        *table(("step", "figure"), rows), "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.bench.swarm", description=__doc__.splitlines()[0])
    ap.add_argument("--image", default=None, help="the node image to copy into the Swarm nodes (default: kctl's)")
    ap.add_argument("--records", type=int, default=2000, help="records produced with acks=all")
    add_output_args(ap)
    args = ap.parse_args(argv)
    if args.image is None:
        from kctl.model.spec import parse_spec

        args.image = parse_spec(_spec(["127.0.0.1"] * NODES))[0].image_ref  # the tag kctl up deploys
    # Ctrl-C and a plain kill both unwind through the teardown.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        fig = run(args)
    except KeyboardInterrupt:
        log("interrupted; everything it made is removed")
        return 130
    except Exception as exc:  # noqa: BLE001 - a check reports where it stopped, then exits non-zero
        log(f"FAILED: {exc}")
        return 1
    publish(section(fig, args.image), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
