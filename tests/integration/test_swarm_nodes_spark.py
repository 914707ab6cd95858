"""kctl.yaml's Spark cluster on a Swarm of three nodes: the Docker-in-Docker Swarm of `make swarm-check`
(kctl.bench.swarm.Check), one kctl node per Swarm node, a Spark worker beside each broker.

kctl talks to the first node's engine (DOCKER_HOST), as it would on a manager: this machine's directories that the
job's driver mounts (the installed packages, kctl, the test's directory with the state dir) are bind-mounted into
the nodes at the same paths, so the driver's container on the first node sees what kctl wrote. The Spark image
every node runs is built here and copied into each node (no registry: `docker save | docker load`, as
docs/multi-host.md says). The tables and checkpoint are on a real S3-compatible server (moto) whose endpoint listens
on this machine's address on the nodes' bridge network. What is asserted is read from the Swarm (where each task
runs), from the master's JSON, and from the store by this test's own delta-rs reader against the generated events.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import kctl
from tests.integration.s3store import SECRET_KEY, moto_store

pytestmark = [pytest.mark.integration, pytest.mark.long, pytest.mark.spark]


def _kctl(spec_file: Path, env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "kctl", *args, "-f", str(spec_file)], capture_output=True, text=True,
                       timeout=timeout, cwd=spec_file.parent, env=env)
    assert SECRET_KEY not in p.stdout + p.stderr
    return p


def test_spark_workers_on_three_swarm_nodes_run_the_job_through_a_dead_node_with_exact_tables_on_s3(
        tmp_path: Path) -> None:
    """`kctl up` places the Spark master beside the first broker and worker N beside the N-th, each on its own
    Swarm node; local paths for the tables are refused (the workers share no directory with this machine); a job
    with its tables on S3 runs its executors on the three nodes; a worker's task killed (Swarm starts it again),
    the master's task killed (its recovery state brings the workers and the job back) and a whole Swarm node
    killed (its broker and worker with it) lose nothing: every table equals the ground truth. Before that, kctl
    against the first node's engine with a state dir that engine does not see is refused before anything is
    deployed."""
    import docker

    from kctl.bench import swarm as check_mod
    from kctl.model.spec import parse_spec
    from kctl.stream import spark, spark_swarm
    from tests.integration.ports import free_bases, spark_quick_jit
    from tests.integration.test_stream import _events, _send, _topic
    from tests.integration.test_stream_s3 import _check_s3

    dc = docker.from_env()
    found = importlib.util.find_spec("pyspark")
    assert found is not None and found.origin
    site = Path(found.origin).resolve().parent.parent
    src = Path(kctl.__file__).resolve().parent
    check = check_mod.Check(dc)
    try:
        check.inner_image()
        check.start_nodes(shared=[(str(site), True), (str(src), True), (str(tmp_path.resolve()), False)])
        base_spec = parse_spec(check_mod._spec(["127.0.0.1"] * check_mod.NODES))[0]
        spark_tag = spark.ensure_image(base_spec)
        dist = spark_swarm.dist_image(base_spec, spark_tag, site / "pyspark")
        for image in (base_spec.image_ref, spark_tag, dist):
            check.load_image(image)
        check.form_swarm()
        n1, _n2, n3 = check.names

        # kctl against an engine that does not see this machine's files (a directory not shared with the
        # nodes): refused before anything is deployed, with what to do
        unshared = Path(tempfile.mkdtemp(prefix="kctl-unshared-"))
        try:
            other = check_mod._spec(check.addrs)
            other.update(name="unseen", spark={"workers": 1})
            (unshared / "kctl.yaml").write_text(yaml.safe_dump(other))
            env = {**os.environ, "DOCKER_HOST": f"tcp://{check.addrs[0]}:{check_mod.DOCKERD_PORT}"}
            r = _kctl(unshared / "kctl.yaml", env, "up", timeout=600)
            assert r.returncode != 0 and "does not see this machine's files" in r.stderr, r.stdout + r.stderr
            assert "run kctl on the engine's own machine" in r.stderr and "Traceback" not in r.stderr
            services = check_mod.sh(["docker", "exec", n1, "docker", "service", "ls", "-q"]).stdout
            assert services.split() == [], services
        finally:
            shutil.rmtree(unshared, ignore_errors=True)

        net = dc.networks.get(check.net_name)
        gateway = str(net.attrs["IPAM"]["Config"][0]["Gateway"])
        with moto_store(tmp_path, bind=gateway) as store:
            ui = free_bases(1, nodes=4)[0]
            data = check_mod._spec(check.addrs)
            data["name"] = "swsp"
            data["spark"] = {"workers": 3, "worker_cores": 1, "worker_memory": "768m", "ui_port": ui}
            spec_file = tmp_path / "kctl.yaml"
            spec_file.write_text(yaml.safe_dump(data))
            env = {**os.environ, "DOCKER_HOST": f"tcp://{check.addrs[0]}:{check_mod.DOCKERD_PORT}"}
            p = _kctl(spec_file, env, "up", timeout=1200)
            assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-4000:]

            placed = check_mod.sh(["docker", "exec", n1, "docker", "service", "ps", "-f", "desired-state=running",
                                   "--format", "{{.Name}} {{.Node}}",
                                   *[f"kctl-swsp-spark_spark-{s}" for s in ("master", "worker-1", "worker-2",
                                                                            "worker-3")]]).stdout
            where = dict(line.split()[0].rsplit(".", 1)[0].split("_", 1)[1:2] + line.split()[1:2]
                         for line in placed.splitlines() if line.strip())
            assert where == {"spark-master": "n1", "spark-worker-1": "n1", "spark-worker-2": "n2",
                             "spark-worker-3": "n3"}, placed
            st = json.loads(_kctl(spec_file, env, "status", "-o", "json").stdout)
            sp = st["spark"]
            assert sp["status"] == "ALIVE" and sp["ui"] == f"http://{check.addrs[0]}:{ui}", sp
            assert [(w["name"], w["state"], w["ui"]) for w in sp["workers"]] == [
                (f"spark-worker-{i}", "ALIVE", f"http://{check.addrs[i - 1]}:{ui + i}") for i in (1, 2, 3)]
            r = _kctl(spec_file, env, "logs", "spark-worker-3", "--tail", "50")
            assert r.returncode == 0 and "Successfully registered with master" in r.stdout, r.stdout + r.stderr

            bs = ",".join(f"{a}:{check_mod.KAFKA_PORT_BASE + i}" for i, a in enumerate(check.addrs))
            topic = _topic(bs, partitions=3)
            r = _kctl(spec_file, env, "stream", "submit", "-t", topic, "--available-now")
            assert r.returncode == 2 and "share no directory with this machine" in r.stderr, r.stderr
            assert "spark-worker-2 on n2" in r.stderr and "s3a://" in r.stderr and "Traceback" not in r.stderr

            events = _events(1600, seed=97, start=dt.datetime(2024, 6, 7, 10, 0, 0, tzinfo=dt.timezone.utc))
            parts = [events[i * 400:(i + 1) * 400] for i in range(4)]
            bucket = store.bucket("kctl-swarm")
            _send(bs, topic, parts[0], bad=5, seed=97)
            r = _kctl(spec_file, env, "stream", "submit", "-d", "--name", "sn", "-t", topic, "--trigger", "1s",
                      "--out", f"s3a://{bucket}/out", "--checkpoint", f"s3a://{bucket}/cp", *store.s3_args(),
                      "--conf", "=".join(spark_quick_jit()), "-o", "json", timeout=900)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]

            def caught_up(want: int, timeout: float = 480) -> dict[str, Any]:
                deadline = time.monotonic() + timeout
                got: dict[str, Any] = {}
                while time.monotonic() < deadline:
                    q = _kctl(spec_file, env, "stream", "status", "--name", "sn", "-o", "json")
                    got = json.loads(q.stdout or "{}")
                    if got.get("total_lag") == 0 and sum(x["latest"] for x in got.get("partitions") or []) == want:
                        return got
                    time.sleep(2)
                raise AssertionError(f"not caught up to {want}: {json.dumps(got)[:2000]}")

            def kill_task(node: str, role_filter: str) -> None:
                ids = check_mod.sh(["docker", "exec", node, "docker", "ps", "-q", "--filter", role_filter]).stdout
                assert ids.split(), (node, role_filter)
                check_mod.sh(["docker", "exec", node, "docker", "kill", *ids.split()])

            caught_up(405)
            executors = check_mod.sh(["docker", "exec", check.names[1], "sh", "-c",
                                      "docker logs $(docker ps -q --filter label=io.kctl.spark-role=worker) 2>&1"
                                      " | grep -c 'Asked to launch executor'"], check=False).stdout.strip()
            assert executors not in ("", "0"), "worker 2 launched no executor"
            # a worker's task on the second node killed with the job running: Swarm starts it again
            _send(bs, topic, parts[1])
            kill_task(check.names[1], "label=io.kctl.spark-role=worker")
            caught_up(805)
            # the master's task killed: a new one recovers the workers and the application from its volume
            kill_task(n1, "label=io.kctl.spark-role=master")
            _send(bs, topic, parts[2])
            caught_up(1205)
            # a whole Swarm node dies (its broker and its worker): the job goes on with the others
            dc.containers.get(n3).kill()
            _send(bs, topic, parts[3])
            st = caught_up(1605, timeout=600)
            assert st["state"] == "running", st
            r = _kctl(spec_file, env, "stream", "stop", "--name", "sn", "-o", "json", timeout=300)
            assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped", r.stdout + r.stderr
            _check_s3(store, f"s3://{bucket}/out", events, bad=5)
            r = _kctl(spec_file, env, "status", "-o", "json")
            workers = {w["name"]: w["state"] for w in json.loads(r.stdout)["spark"]["workers"]}
            assert workers["spark-worker-1"] == workers["spark-worker-2"] == "ALIVE" and \
                workers["spark-worker-3"] != "ALIVE", workers
    finally:
        check.close()
