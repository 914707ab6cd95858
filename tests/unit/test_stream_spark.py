"""kctl.yaml's spark section: its checks, and the Spark cluster's files as kctl renders them (no container)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.errors import UsageError
from kctl.model.spec import ClusterSpec, check_rules, parse_spec, spark_memory_mb
from kctl.stream import spark


def _spec(**data: Any) -> ClusterSpec:
    return parse_spec({"name": "sp", **data})[0]


def test_absent_means_no_spark_cluster() -> None:
    assert _spec().spark is None


def test_defaults() -> None:
    sp = _spec(spark={}).spark
    assert sp is not None and (sp.workers, sp.worker_cores, sp.worker_memory, sp.ui_port) == (1, 1, "1g", 18080)


@pytest.mark.parametrize(("section", "says"), [
    ({"workers": 0}, "0 workers: a Spark cluster needs 1 to 16 workers"),
    ({"workers": 17}, "1 to 16 workers"),
    ({"worker_cores": 0}, "each worker offers 1 to 64 cores"),
    ({"worker_memory": "lots"}, "'lots' is not a memory size such as 512m or 1g"),
    ({"worker_memory": "256m"}, "a worker needs at least 512m"),
])
def test_bad_values_are_refused_with_what_is_allowed(section: dict[str, Any], says: str) -> None:
    with pytest.raises(Exception) as exc:  # noqa: PT011 - SpecError (kctl's) or pydantic's, said the same way
        parse_spec({"name": "sp", "spark": section})
    assert says in str(exc.value) + " ".join(str(p) for p in getattr(exc.value, "problems", []) or [])


def _hosts(n: int = 2, **spark_section: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "name": "sp", "engine": "hosts", "spark": spark_section,
        "nodes": [{"id": i, "hostname": f"h{i}", "advertised_host": f"10.9.0.{10 + i}"} for i in range(1, n + 1)]})


def test_engine_hosts_swarm_and_a_secured_cluster_are_taken_with_what_hosts_cannot_do_yet() -> None:
    errors, _ = check_rules(ClusterSpec.model_validate({"name": "sp", "engine": "swarm", "spark": {}}))
    assert [e for e in errors if e.startswith("spark")] == []
    errors, _ = check_rules(_hosts(2, workers=2))
    assert [e for e in errors if e.startswith("spark")] == []
    errors, _ = check_rules(_hosts(2, workers=3))
    assert "spark.workers: 3 workers on engine hosts run one per node's host, and the cluster has 2 node(s);" \
           " lower spark.workers" in errors
    errors, _ = check_rules(_hosts(2, warm_driver=True))
    assert any(e.startswith("spark.warm_driver: a warm driver on engine hosts is not built yet") for e in errors)
    secured = _hosts(2).model_copy(update={"security": ClusterSpec.model_validate(
        {"name": "x", "security": {"enabled": True}}).security})
    errors, _ = check_rules(secured)
    assert any("beside the secured profile is not built yet" in e and "--master local[N]" in e for e in errors)
    errors, _ = check_rules(ClusterSpec.model_validate({"name": "sp", "security": {"enabled": True}, "spark": {}}))
    assert [e for e in errors if e.startswith("spark")] == []


def test_on_hosts_the_master_is_on_the_first_node_and_worker_n_on_the_nth() -> None:
    from kctl.stream import spark_hosts

    spec = _hosts(3, workers=2, ui_port=18300, worker_cores=2, worker_memory="1g")
    assert spark_hosts.master_url(spec) == "spark://10.9.0.11:7077"
    assert [(i, h) for i, h, _n in spark_hosts.worker_nodes(spec)] == [(1, "h1"), (2, "h2")]
    assert [spark_hosts.units_of(spec, h) for h in ("h1", "h2", "h3")] == [
        ("spark-master", "spark-worker"), ("spark-worker",), ()]
    assert spark_hosts.worker_names(spec) == {"10.9.0.11": ("spark-worker-1", "http://10.9.0.11:18301"),
                                              "10.9.0.12": ("spark-worker-2", "http://10.9.0.12:18302")}
    files = spark_hosts.host_files(spec, "abc123", spark.spark_defaults(spec))
    assert sorted(files) == ["h1", "h2"]  # h3 runs no Spark unit: no bundle
    assert sorted(files["h2"]) == ["install-spark.sh", "spark-defaults.conf", "spark.env", "uninstall-spark.sh",
                                   "units/kctl-spark-worker.service"]
    assert 'KCTL_SPARK_UNITS="spark-master spark-worker"' in files["h1"]["spark.env"][0].decode()
    worker = files["h2"]["units/kctl-spark-worker.service"][0].decode()
    assert ("ExecStart=/opt/kctl/spark-dists/abc123/spark/bin/spark-class org.apache.spark.deploy.worker.Worker"
            " spark://10.9.0.11:7077 --host 10.9.0.12 --cores 2 --memory 1g --webui-port 18302"
            " --work-dir /var/opt/kctl/spark/work") in worker
    assert "SPARK_LOCAL_IP=10.9.0.12 " in worker and "User=logger" in worker and "Restart=on-failure" in worker
    assert "ReadWritePaths=/var/opt/kctl/spark /var/log/kctl" in worker
    assert "StandardOutput=append:/var/log/kctl/spark-worker.log" in worker
    master = files["h1"]["units/kctl-spark-master.service"][0].decode()
    assert "org.apache.spark.deploy.master.Master --host 10.9.0.11 --port 7077 --webui-port 18300" in master
    assert "spark.deploy.recoveryMode FILESYSTEM" in files["h1"]["spark-defaults.conf"][0].decode()


def test_on_hosts_the_master_s_workers_are_named_by_their_host_s_address() -> None:
    spec = _hosts(2, workers=2, ui_port=18300)
    doc = {"url": "spark://10.9.0.11:7077", "status": "ALIVE", "workers": [
        {"id": "w-old", "host": "10.9.0.12", "state": "DEAD"}, {"id": "w-2", "host": "10.9.0.12", "state": "ALIVE"},
        {"id": "w-1", "host": "10.9.0.11", "state": "ALIVE"}], "activeapps": []}
    st = spark._status(doc, 18300, "10.9.0.11", spark._names(spec))
    assert st["ui"] == "http://10.9.0.11:18300" and st["master"] == "spark://10.9.0.11:7077"
    assert [(w["name"], w["state"], w["ui"]) for w in st["workers"]] == [
        ("spark-worker-1", "ALIVE", "http://10.9.0.11:18301"), ("spark-worker-2", "ALIVE", "http://10.9.0.12:18302")]
    assert spark.problems(spec, st) == []


def test_ui_ports_may_not_clash_with_the_nodes_ports() -> None:
    spec = ClusterSpec.model_validate({"name": "sp", "spark": {"ui_port": 12181, "workers": 2}})
    errors, _ = check_rules(spec)
    assert "spark.ui_port: host port 12181 is also used by nodes.0.zookeeper_port" in errors
    assert "spark.ui_port + 1 (worker 1): host port 12182 is also used by nodes.1.zookeeper_port" in errors


def test_memory_sizes() -> None:
    assert [spark_memory_mb(s) for s in ("512m", "1g", "2G", "1024k")] == [512, 1024, 2048, 1]


def test_workers_larger_than_the_machine_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark, "machine_memory_mb", lambda: 4096)
    spark.check_fits(_spec(spark={"workers": 3, "worker_memory": "1g"}))  # 3 x (1024 + 256) = 3840 fits
    with pytest.raises(UsageError) as exc:
        spark.check_fits(_spec(spark={"workers": 4, "worker_memory": "1g"}))
    assert exc.value.message == ("spark: 4 worker(s) x worker_memory 1g (+256m each for the worker itself) need"
                                 " 5120 MiB; this machine has 4096 MiB")
    assert "lower spark.worker_memory or spark.workers" in (exc.value.hint or "")


def test_the_compose_file_and_spark_defaults(tmp_path: Path) -> None:
    spec = _spec(spark={"workers": 2, "worker_cores": 2, "worker_memory": "1g", "ui_port": 18100},
                 labels={"team": "logs"})
    files = spark.render(spec, tmp_path, "kctl/spark:test")
    doc = yaml.safe_load(files["compose.yaml"])
    assert doc["name"] == "kctl-sp-spark"
    assert doc["networks"] == {"cluster": {"name": "kctl-sp", "external": True}}  # beside the brokers
    assert list(doc["services"]) == ["spark-master", "spark-worker-1", "spark-worker-2"]
    m, w2 = doc["services"]["spark-master"], doc["services"]["spark-worker-2"]
    assert m["ports"] == ["127.0.0.1:18100:8080"] and w2["ports"] == ["127.0.0.1:18102:8081"]
    assert "org.apache.spark.deploy.master.Master" in m["command"]
    cmd = w2["command"]
    assert cmd[cmd.index("--cores") + 1] == "2" and cmd[cmd.index("--memory") + 1] == "1g"
    assert "spark://spark-master:7077" in cmd
    assert m["labels"] == {"io.kctl.spark": "sp", "io.kctl.spark-role": "master", "team": "logs"}
    shared = str(spark.data_dir(tmp_path))
    assert f"{shared}:{shared}" in w2["volumes"]  # the same path in every container and on this host
    assert "&id" not in files["compose.yaml"]
    conf = files["conf/spark-defaults.conf"]
    assert "spark.deploy.recoveryMode FILESYSTEM\n" in conf


def test_the_job_s_paths_must_be_in_the_shared_directory(tmp_path: Path) -> None:
    shared = spark.data_dir(tmp_path)
    spark.check_shared(tmp_path, str(shared / "j" / "out"), str(shared / "j" / "cp"))
    with pytest.raises(UsageError) as exc:
        spark.check_shared(tmp_path, "/elsewhere/out", str(shared / "cp"))
    assert "/elsewhere/out: not in the Spark cluster's shared directory" in exc.value.message


def test_a_master_down_or_a_declared_worker_not_alive_is_a_problem() -> None:
    spec = _spec(spark={"workers": 2})
    alive = {"status": "ALIVE", "workers": [{"name": "spark-worker-1", "state": "ALIVE"},
                                            {"name": "spark-worker-2", "state": "ALIVE"}]}
    assert spark.problems(spec, alive) == []
    dead = {**alive, "workers": [{"name": "spark-worker-1", "state": "ALIVE"},
                                 {"name": "spark-worker-2", "state": "DEAD"}]}
    assert spark.problems(spec, dead) == [
        "spark: worker spark-worker-2 is DEAD at the master (its executors are gone); `kctl logs spark-worker-2`,"
        " `kctl up` starts it again"]
    gone = {**alive, "workers": [{"name": "spark-worker-2", "state": "ALIVE"}]}
    assert [p.split(" (")[0] for p in spark.problems(spec, gone)] == [
        "spark: worker spark-worker-1 is not registered at the master"]
    down = {"status": "down", "workers": [], "error": "connection refused"}
    assert spark.problems(spec, down) == [
        "spark: the master does not answer (connection refused); `kctl logs spark-master`, `kctl up` starts it"
        " again"]


def test_a_job_with_its_checkpoint_on_s3_is_found_by_name_through_its_record_in_the_shared_dir(
        tmp_path: Path) -> None:
    """On kctl.yaml's Spark cluster a job whose checkpoint is on S3 keeps kctl's record of it (config, job.json,
    progress, the stop marker) in the shared dir's JOB/_kctl, which the driver's container sees; `kctl stream
    status|stop|optimize --name JOB` find the checkpoint and that record, or the job's local checkpoint when the
    job of that name last ran with one."""
    import json

    from kctl.stream.config import JobConfig, state_dir
    from kctl.stream.submit import cluster_paths, find_job, record_home

    local = cluster_paths(tmp_path, "main", None, None)[1]
    assert find_job(tmp_path, "main", None) == (local, None)  # nothing ran yet: the shared dir's checkpoint
    home = record_home(tmp_path, "main")
    assert home == spark.data_dir(tmp_path) / "main" / "_kctl"
    cfg = JobConfig("b:9092", ["t"], "s3a://b/out", "s3a://b/cp", record_dir=str(home))
    assert cfg.state() == home and state_dir("s3a://b/cp", None) != home  # the record wins over the cwd's
    home.mkdir(parents=True)
    (home / "config.json").write_text(cfg.to_json())
    (home / "job.json").write_text(json.dumps({"started_at": "2026-12-06T03:00:00+00:00"}))
    assert find_job(tmp_path, "main", None) == ("s3a://b/cp", home)
    assert find_job(tmp_path, "main", "s3a://b/cp") == ("s3a://b/cp", home)
    assert find_job(tmp_path, "main", "s3a://b/other") == ("s3a://b/other", None)
    assert find_job(tmp_path, "other", None)[1] is None
    # the same name later run with its checkpoint in the shared dir: that one is the job's now
    (Path(local) / "_kctl").mkdir(parents=True)
    (Path(local) / "_kctl" / "job.json").write_text(json.dumps({"started_at": "2026-12-06T04:00:00+00:00"}))
    assert find_job(tmp_path, "main", None) == (local, None)


# ----- the job's own login beside a secured cluster (kctl.stream.login) ------------------------------------------


def test_the_job_user_is_granted_its_topics_its_group_and_its_spark_consumers_groups_only() -> None:
    from kctl.stream import login

    got = {(g.resource, g.name, g.operation, g.prefixed) for g in login.grants("main", ["b", "a", "a"])}
    assert got == {("topic", "a", "read", False), ("topic", "a", "describe", False),
                   ("topic", "b", "read", False), ("topic", "b", "describe", False),
                   ("group", "kctl-stream-main", "read", False), ("group", "kctl-stream-main", "describe", False),
                   ("group", "kctl-stream-main.spark-", "read", True)}
    assert login.user("main") == login.group("main") == "kctl-stream-main"
    # another job's group is outside the prefix the Spark consumers are granted
    assert not "kctl-stream-main2.spark-x".startswith("kctl-stream-main.spark-")


def test_a_login_file_gives_the_executors_the_ca_as_content_and_the_driver_a_foreign_target(tmp_path: Path) -> None:
    import json

    from kctl.stream.config import JobConfig

    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    f = tmp_path / "main.json"
    f.write_text(json.dumps({"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                             "sasl.username": "kctl-stream-main", "sasl.password": "pw-123456", "ssl.ca.pem": pem}))
    cfg = JobConfig("logger1:19092", ["t"], "/o", "/c", name="main", kafka_login=str(f),
                    spec_file="/nowhere/kctl.yaml")  # never read when the job has its own login
    java = cfg.kafka_security()
    assert java == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required"
                                        ' username="kctl-stream-main" password="pw-123456";',
                    "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem}
    assert not any("location" in k for k in java)  # no file an executor would need
    t = cfg.target("logger1:19092")
    assert t.spec is None and t.security["sasl.username"] == "kctl-stream-main" and t.security["ssl.ca.pem"] == pem
    assert "pw-123456" not in repr(t) and "pw-123456" not in cfg.to_json()
    # without a login file and without a secured kctl.yaml: no security settings at all
    assert JobConfig("b:9092", ["t"], "/o", "/c").kafka_security() == {}


def test_on_hosts_a_worker_s_memory_must_fit_its_host_as_the_preflight_reads_it() -> None:
    from kctl.runtime.engine.host_identity import HostFacts, parse_facts
    from kctl.runtime.engine.hosts import spark_short_of_memory

    assert parse_facts("machine-id\tabc\nmem\t2048000\n").mem_total_mb == 2000
    assert parse_facts("mem\t\n").mem_total_mb is None
    spec = _hosts(3, workers=2, worker_memory="2g")
    facts = [(n, HostFacts(f"m{n.id}", None, None, (), mb))
             for n, mb in zip(spec.nodes, (2304, 2303, 512), strict=True)]
    # h1 fits exactly (2048 + 256), h2 is one short, h3 runs no worker
    assert spark_short_of_memory(spec, facts) == (
        "spark: worker_memory 2g (+256m for the worker itself) needs 2304 MiB on each worker's host;"
        " h2 (10.9.0.12) has 2303 MiB")
    assert spark_short_of_memory(spec, [(n, None) for n in spec.nodes]) is None  # unreachable: the preflight says
    assert spark_short_of_memory(_hosts(3).model_copy(update={"spark": None}), facts) is None


def _swarm(n: int = 3, **spark_section: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "name": "sw", "engine": "swarm", "spark": spark_section, "labels": {"team": "logs"},
        "nodes": [{"id": i, "hostname": f"h{i}", "advertised_host": f"10.9.0.{10 + i}"} for i in range(1, n + 1)]})


def test_on_swarm_each_daemon_is_a_service_of_its_own_stack_pinned_beside_a_broker(tmp_path: Path) -> None:
    """engine swarm: the master beside the first node's container, worker N beside the N-th node's (round the
    nodes again), each pinned by the label kctl sets for that container, one task resolved at its own address
    (dnsrr), its UI published on its node (host mode); only a service on this engine's node gets the shared
    directory, and nothing of this machine is mounted but that."""
    from kctl.stream import spark_swarm

    spec = _swarm(2, workers=3, worker_cores=2, worker_memory="1g", ui_port=18100)
    assert {k: h for k, (h, _n) in spark_swarm.placement(spec).items()} == {
        "spark-master": "h1", "spark-worker-1": "h1", "spark-worker-2": "h2", "spark-worker-3": "h1"}
    data = tmp_path / "spark" / "data"
    files = spark_swarm.render(spec, "reg.example:5000/kctl/spark-dist:t", data, spark.spark_defaults(spec),
                               local={"spark-master", "spark-worker-1", "spark-worker-3"})
    doc = yaml.safe_load(files["stack.yaml"])
    assert doc["networks"] == {"cluster": {"name": "kctl-sw", "external": True}}
    assert list(doc["services"]) == ["spark-master", "spark-worker-1", "spark-worker-2", "spark-worker-3"]
    m, w2 = doc["services"]["spark-master"], doc["services"]["spark-worker-2"]
    for name, svc in doc["services"].items():
        assert svc["image"] == "reg.example:5000/kctl/spark-dist:t"
        host = spark_swarm.placement(spec)[name][0]
        assert svc["deploy"]["placement"]["constraints"] == [f"node.labels.io.kctl.place.sw.{host} == true"]
        assert svc["deploy"]["endpoint_mode"] == "dnsrr" and svc["deploy"]["replicas"] == 1
        assert svc["deploy"]["restart_policy"]["condition"] == "any"
        assert svc["configs"] == [{"source": "spark-defaults", "target": "/etc/kctl-spark/spark-defaults.conf",
                                   "mode": 0o444}]
        binds = [v for v in svc["volumes"] if isinstance(v, dict)]
        assert binds == ([] if name == "spark-worker-2" else
                         [{"type": "bind", "source": str(data), "target": str(data)}]), name
        assert svc["labels"]["io.kctl.spark"] == "sw" and svc["labels"]["team"] == "logs"
    assert m["ports"] == [{"target": 8080, "published": 18100, "protocol": "tcp", "mode": "host"}]
    assert w2["ports"] == [{"target": 8081, "published": 18102, "protocol": "tcp", "mode": "host"}]
    assert m["command"][1:3] == ["org.apache.spark.deploy.master.Master", "--host"]
    cmd = w2["command"]
    assert cmd[0] == "/opt/kctl/spark/bin/spark-class" and "spark://spark-master:7077" in cmd
    assert cmd[cmd.index("--host") + 1] == "spark-worker-2" and cmd[cmd.index("--cores") + 1] == "2"
    assert w2["volumes"][0] == "spark-worker-2-work:/var/opt/kctl/spark"
    assert doc["volumes"]["spark-worker-2-work"]["labels"]["io.kctl.spark"] == "sw"
    conf = doc["configs"]["spark-defaults"]
    assert conf["file"] == "./conf/spark-defaults.conf" and conf["name"].startswith("kctl-sw-spark-defaults-")
    assert "spark.deploy.recoveryMode FILESYSTEM\n" in files["conf/spark-defaults.conf"]
    # a changed spark-defaults.conf is a new config (Swarm's configs cannot change)
    other = spark_swarm.stack_document(spec, "x", data, files["conf/spark-defaults.conf"] + "#\n", set())
    assert other["configs"]["spark-defaults"]["name"] != conf["name"]
    # the master's UI at its node's address, a worker's at its own
    assert spark.master_ui_host(spec) == "10.9.0.11"
    assert spark_swarm.worker_names(spec)["spark-worker-2"] == ("spark-worker-2", "http://10.9.0.12:18102")
    st = spark._status({"status": "ALIVE", "workers": [{"host": "spark-worker-2", "state": "ALIVE", "id": "w"}]},
                       18100, "10.9.0.11", spark_swarm.worker_names(spec))
    assert st["workers"][0]["ui"] == "http://10.9.0.12:18102" and st["ui"] == "http://10.9.0.11:18100"


def test_on_swarm_a_worker_on_another_node_is_told_apart_by_the_node_labels() -> None:
    """remote_workers: the Swarm node each service's label names, against this engine's own node; a label no
    ready node carries counts as elsewhere (the cluster's `kctl up` has not labelled it)."""
    from kctl.runtime.engine import swarm
    from kctl.stream import spark_swarm

    spec = _swarm(3, workers=3)
    here = swarm.SwarmNode(id="n1", hostname="m1", addr="10.0.0.1", manager=True,
                           labels={"io.kctl.place.sw.h1": "true"})
    there = swarm.SwarmNode(id="n2", hostname="w2", addr="10.0.0.2", manager=False,
                            labels={"io.kctl.place.sw.h2": "true"})

    class Nodes:
        def __init__(self, ns: list[swarm.SwarmNode]) -> None:
            self.ns = ns

        def list(self) -> list[Any]:
            return [type("N", (), {"attrs": {"ID": n.id, "Description": {"Hostname": n.hostname},
                                             "Status": {"State": "ready", "Addr": n.addr},
                                             "Spec": {"Availability": "active", "Labels": n.labels},
                                             **({"ManagerStatus": {}} if n.manager else {})}})() for n in self.ns]

    class Dc:
        nodes = Nodes([here, there])

        def info(self) -> dict[str, Any]:
            return {"Swarm": {"LocalNodeState": "active", "ControlAvailable": True, "NodeID": "n1"}}

    assert spark_swarm.remote_workers(spec, Dc()) == ["spark-worker-2 on w2", "spark-worker-3 on no labelled node"]
    local, missing = spark_swarm.local_services(spec, Dc())
    assert local == {"spark-master", "spark-worker-1"}
    assert missing == ["spark-worker-3: no ready Swarm node is labelled for h3 (`kctl up` labels them)"]
