"""Submit the job: checks before Spark starts, jar resolution, and the job process."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.extras import require
from kctl.kafka.client import Target
from kctl.stream import jars as jarlib
from kctl.stream import login, s3, spark, spark_hosts, spark_swarm, warm
from kctl.stream.config import JobConfig, state_dir
from kctl.stream.preflight import check_topics
from kctl.stream.record import pid_alive, read_json
from kctl.stream.sinks import check_metrics_table
from kctl.wait import GiveUp, wait_until

_TRIGGER = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|sec|seconds?|minutes?)?$")


def trigger_interval(text: str) -> str:
    """'5s' -> '5 seconds' (Spark's interval syntax); 'available-now' unchanged."""
    if text == "available-now":
        return text
    m = _TRIGGER.match(text.strip())
    if not m:
        raise UsageError(f"bad --trigger {text!r}", hint="use e.g. 1s, 500ms, 2m, or --available-now")
    n, unit = m.group(1), (m.group(2) or "s")
    unit = {"ms": "milliseconds", "s": "seconds", "sec": "seconds", "m": "minutes"}.get(unit, unit)
    if not unit.endswith("s"):
        unit += "s"
    return f"{n} {unit}"


def job_env() -> dict[str, str]:
    """The job process's environment: this one's, without AWS keys (the job reads the S3 credentials file)."""
    env = s3.env_without_aws(dict(os.environ))
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def check_s3(out: str, checkpoint: str, store: s3.Settings | None, master: str | None) -> s3.Settings | None:
    """The S3 settings of a job whose --out or --checkpoint is an s3a:// URL, checked before anything starts (the
    URLs, the credentials file, the store and its buckets): one message with a hint, nothing written. None for
    a job on local dirs (the --s3-* options are then refused). ``master`` None: kctl.yaml's Spark cluster; on
    any master the store is asked from this host (a standalone cluster's executors must reach it at the same
    endpoint: docs/pipeline.md)."""
    urls = [u for u in (out, checkpoint) if s3.is_s3(u)]
    if not urls:
        if store is not None and (store.endpoint or store.credentials_file):
            raise UsageError("--s3-endpoint and --s3-credentials apply to an s3a:// --out or --checkpoint only",
                             hint="write --out s3a://BUCKET/PREFIX, or leave the --s3-* options out")
        return None
    store = store or s3.Settings()
    locs = [s3.parse_url(u) for u in urls]
    if len(locs) == 2 and (locs[0].bucket, locs[0].key) == (locs[1].bucket, locs[1].key):
        raise UsageError("--out and --checkpoint name the same S3 prefix", hint="e.g. --out s3a://B/job/out "
                         "--checkpoint s3a://B/job/checkpoint")
    for u in urls:
        store.validate(u)
    creds = s3.read_credentials(str(store.credentials_file), profile=store.profile)
    for loc in {(x.bucket): x for x in locs}.values():
        s3.check_store(store, creds, loc)
    return store


def submit(cfg: JobConfig, *, detach: bool = False, timeout_s: float | None = None) -> dict[str, Any]:
    """Check, resolve and start the job. Foreground: wait for it; ``detach``: return once it runs."""
    require("pyspark", "stream")  # the job process needs it; say so before anything starts
    if not cfg.topics:
        raise UsageError("no topic to read", hint="pass --topic")
    on_s3 = s3.is_s3(cfg.out) or s3.is_s3(cfg.checkpoint)
    if on_s3:
        check_s3(cfg.out, cfg.checkpoint, cfg.s3_settings(), cfg.master)
    # before anything starts: the job could not write it
    check_metrics_table(cfg.table("metrics"), cfg.storage_options())
    check_topics(Target.of(cfg.secured_spec(), cfg.bootstrap_servers), cfg.topics)
    if not cfg.jars and not cfg.packages:
        cfg.jars = jarlib.jars_for_job(None, s3=on_s3)
    sd = cfg.state()
    job = read_json(sd / "job.json") or {}
    if pid_alive(job.get("pid")) and job.get("state") in ("starting", "running"):
        raise KctlError(f"a stream job (pid {job['pid']}) already runs with checkpoint {cfg.checkpoint}",
                        hint="see `kctl stream status`; stop it with `kctl stream stop`")
    sd.mkdir(parents=True, exist_ok=True)
    if not s3.is_s3(cfg.out):
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
    cfg_path = sd / "config.json"
    cfg_path.write_text(cfg.to_json(), encoding="utf-8")
    cmd = [sys.executable, "-m", "kctl.stream.job", "--config", str(cfg_path)]
    log = sd / "job.log"
    if detach:
        with log.open("ab") as lf:
            proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=job_env(), start_new_session=True)
        _wait_running(proc, sd, log)
        return {"pid": proc.pid, "detached": True, "checkpoint": cfg.checkpoint, "out": cfg.out, "log": str(log)}
    proc = subprocess.Popen(cmd, env=job_env())
    try:
        rc = proc.wait(timeout=timeout_s)
    except KeyboardInterrupt:
        (sd / "stop").write_text("stop\n")
        rc = proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise KctlError(f"stream job ran longer than {timeout_s}s and was killed") from None
    job = read_json(sd / "job.json") or {}
    if rc != 0:
        raise KctlError(f"stream job exited with code {rc}: {job.get('error', 'see the output above')}",
                        hint="run again with KCTL_SPARK_LOG_LEVEL=INFO for Spark's own log")
    return {"pid": proc.pid, "detached": False, "state": job.get("state"), "counters": job.get("counters"),
            "checkpoint": cfg.checkpoint, "out": cfg.out}


def _wait_running(proc: subprocess.Popen[bytes], sd: Path, log: Path, timeout_s: float = 120.0) -> None:
    """Until the detached job says it runs; GiveUp when it exits first, TimeoutReached after ``timeout_s``."""
    def probe() -> tuple[bool, str]:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise GiveUp(f"stream job exited at start with code {proc.returncode}:\n{tail}")
        job = read_json(sd / "job.json") or {}
        return job.get("pid") == proc.pid and job.get("state") == "running", \
            f"job.json: pid {job.get('pid')}, state {job.get('state') or 'not written yet'}"

    wait_until(f"stream job (pid {proc.pid}) running", probe, timeout_s, poll=0.3,
               log_tail=lambda _saw: "\n".join(log.read_text(errors="replace").splitlines()[-15:]),
               hint=f"see {log}")


def cluster_paths(cluster_dir: Path, name: str, out: str | None, checkpoint: str | None) -> tuple[str, str]:
    """The job's --out and --checkpoint on a Spark cluster: given ones checked to lie in its shared directory,
    else that directory's ``<job>/out`` and ``<job>/checkpoint``."""
    base = spark.data_dir(cluster_dir) / name
    o = out if out and s3.is_s3(out) else str(Path(out).resolve()) if out else str(base / "out")
    c = checkpoint if checkpoint and s3.is_s3(checkpoint) else (
        str(Path(checkpoint).resolve()) if checkpoint else str(base / "checkpoint"))
    spark.check_shared(cluster_dir, *(p for p in (o, c) if not s3.is_s3(p)))
    return o, c


def record_home(cluster_dir: Path, name: str) -> Path:
    """kctl's own files of the ``name`` job on the Spark cluster when its checkpoint is on S3 (a local checkpoint
    holds them in its ``_kctl``): the shared dir's ``JOB/_kctl``."""
    return spark.data_dir(cluster_dir) / name / "_kctl"


def find_job(cluster_dir: Path, name: str, checkpoint: str | None) -> tuple[str, Path | None]:
    """The checkpoint and record dir of the ``name`` job on the Spark cluster, as `kctl stream status|stop|
    optimize` look it up: ``checkpoint`` when given (with the job's record dir if the job of that name ran with
    it on S3), else the one the job of that name last ran with: its shared dir's checkpoint, or the S3 one its
    record names (whichever started last)."""
    home = record_home(cluster_dir, name)
    recorded = (read_json(home / "config.json") or {}).get("checkpoint")
    if checkpoint is not None:
        return checkpoint, home if recorded is not None and recorded == checkpoint else None
    local = cluster_paths(cluster_dir, name, None, None)[1]
    if not recorded or not s3.is_s3(recorded):
        return local, None

    def started(sd: Path) -> str:
        return str((read_json(sd / "job.json") or {}).get("started_at") or "")

    return (recorded, home) if started(home) >= started(state_dir(local)) else (local, None)


@contextlib.contextmanager
def _submit_lock(sd: Path, job: str) -> Iterator[None]:
    """Held while a submit of the job starts it (flock: released when the process ends, however it ends): two at
    once would both find no driver running, and start two."""
    fd = os.open(sd / "submit.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise KctlError(f"another `kctl stream submit` of the job {job} is under way",
                            hint=f"let it finish; `kctl stream status --name {job}` shows the job") from None
        yield
    finally:
        os.close(fd)


def _refuse_running(spec: Any, cluster_dir: Path, cfg: JobConfig, cfg_path: Path) -> None:
    """The job must not run already: in its own driver's container, or in a warm driver it was handed."""
    recorded = (read_json(cfg_path) or {}).get("container")
    for c in {spark.driver_container(spec, cfg.name), recorded} - {None}:
        mine = c == spark.driver_container(spec, cfg.name) or warm.claimed_by(c, cluster_dir) == str(cfg_path)
        if mine and spark.driver_state(str(c)) in ("running", "restarting"):
            raise KctlError(f"the stream job {cfg.name} already runs in container {c}",
                            hint="see `kctl stream status`; stop it with `kctl stream stop`")


def submit_to_cluster(cfg: JobConfig, spec: Any, cluster_dir: Path, *, detach: bool = False,
                      timeout_s: float | None = None) -> dict[str, Any]:
    """Run the job on the kctl.yaml's Spark cluster: its driver in a container of its own (restarted by Docker
    after a crash), its executors on the workers. Foreground: until the driver exits; ``detach``: once it runs."""
    require("pyspark", "stream")
    if not cfg.topics:
        raise UsageError("no topic to read", hint="pass --topic")
    sp = spec.spark
    spark.check_python()
    if spark_hosts.on_hosts(spec):
        local = [f"{what} {p}" for what, p in (("--out", cfg.out), ("--checkpoint", cfg.checkpoint))
                 if not s3.is_s3(p)]
        if local:
            raise UsageError(f"{', '.join(local)}: the Spark cluster on the hosts shares no directory with this"
                             " machine; its executors write the tables and the checkpoint on S3",
                             hint="pass --out s3a://BUCKET/PREFIX and --checkpoint s3a://BUCKET/PREFIX (with"
                                  " --s3-endpoint and --s3-credentials-file), or run the job here with"
                                  " `--master local[N]`")
    if spark_swarm.on_swarm(spec):
        local = [f"{what} {p}" for what, p in (("--out", cfg.out), ("--checkpoint", cfg.checkpoint))
                 if not s3.is_s3(p)]
        remote = spark_swarm.remote_workers(spec) if local else []
        if remote:
            raise UsageError(f"{', '.join(local)}: the Spark workers {', '.join(remote)} share no directory with this"
                             " machine; their executors write the tables and the checkpoint on S3",
                             hint="pass --out s3a://BUCKET/PREFIX and --checkpoint s3a://BUCKET/PREFIX (with"
                                  " --s3-endpoint and --s3-credentials-file), or run the job here with"
                                  " `--master local[N]`")
    store = cfg.s3_settings()
    if store is not None:
        check_s3(cfg.out, cfg.checkpoint, store, None)
    check_metrics_table(cfg.table("metrics"), cfg.storage_options())
    host_bs = cfg.host_bootstrap_servers or spec.bootstrap_servers
    check_topics(Target.of(spec, host_bs), cfg.topics)  # as kctl's own clients log in (the admin, when secured)
    st = spark.status(spec)  # the master answers, with a worker to run executors on
    alive = [w for w in st["workers"] if w["state"] == "ALIVE"]
    if not alive:
        raise KctlError(f"the Spark cluster has no worker alive (master {st['status']})",
                        hint="`kctl status` lists them; `kctl up` starts them; `kctl logs spark-worker-1`")
    cfg.jars = spark.shared_jars(cfg.jars or jarlib.jars_for_job(None, s3=store is not None), cluster_dir)
    cfg.master = spark.master_url()
    cfg.driver_host = spark.driver_host(cfg.name)
    cfg.container = spark.driver_container(spec, cfg.name)
    cfg.cores_max = sp.workers * sp.worker_cores
    cfg.spark_ui_port = sp.ui_port
    if s3.is_s3(cfg.checkpoint):  # kctl's record of the job where the driver's container and this host see it
        cfg.record_dir = str(record_home(cluster_dir, cfg.name))
    cfg.bootstrap_servers = spec.internal_bootstrap_servers
    cfg.host_bootstrap_servers = host_bs
    if spark_hosts.on_hosts(spec):
        # The executors run on the hosts: they reach the brokers where kctl does, and the driver (on this
        # machine's network) at the address the hosts see this machine at.
        cfg.master = spark_hosts.master_url(spec)
        cfg.driver_host = cfg.driver_bind = spark_hosts.driver_address(spec)
        cfg.spark_ui_host = spark_hosts.master_address(spec)
        cfg.bootstrap_servers = host_bs
    if spark_swarm.on_swarm(spec):
        cfg.spark_ui_host = spark_swarm.master_address(spec)
    if spec.kctl_logs_in:  # the job logs in as its own user; kctl's readers on this host as the admin
        cfg.kafka_login = str(login.provision(spec, cluster_dir, cfg.name, cfg.topics))
    sd = cfg.state()
    sd.mkdir(parents=True, exist_ok=True)
    if not s3.is_s3(cfg.out):
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
    cfg_path = sd / "config.json"
    with _submit_lock(sd, cfg.name):  # a second submit of the job at the same time is refused
        _refuse_running(spec, cluster_dir, cfg, cfg_path)
        before = (read_json(sd / "job.json") or {}).get("started_at")

        def write_config(c: JobConfig) -> Path:
            tmp = cfg_path.with_name(".config.json.tmp")
            tmp.write_text(c.to_json(), encoding="utf-8")
            os.replace(tmp, cfg_path)
            return cfg_path

        # A warm driver (spark.warm_driver) takes the job when it holds the session the job would build; else the
        # job's own driver starts.
        name = warm.claim(spec, cluster_dir, cfg, write_config)
        cold: dict[str, Any] = {}
        if name is None and sp.warm_driver:
            # A warm driver that waits holds the workers' cores: this job's executors would wait for them forever.
            cold = {"warm_driver_not_taken": warm.cold_reason(spec, cluster_dir, cfg),
                    "warm_drivers_removed": warm.retire_idle(spec, cluster_dir)}
        if name is None:
            write_config(cfg)
            # The S3 credentials file, read-only at the same path: the driver reads the keys itself (never in its
            # environment or arguments) and hands them to the executors in its jobs' hadoop configuration.
            files = [store.credentials_file] if store is not None and store.credentials_file else []
            if cfg.kafka_login:  # the job's Kafka login, read-only into its driver's container alone
                files.append(cfg.kafka_login)
            name = spark.start_driver(spec, cluster_dir, cfg.name, cfg_path, files=files)
        log = spark.logs_dir(cluster_dir) / f"{spark.driver_host(cfg.name)}.log"

        def tail() -> str:
            try:
                return "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            except OSError:
                return ""

        def probe() -> tuple[bool, str]:
            state = spark.driver_state(name)
            job = read_json(sd / "job.json") or {}
            fresh = job.get("started_at") != before
            if fresh and job.get("state") == "failed":
                raise GiveUp(f"the stream job failed at start: {job.get('error')}\n{tail()}")
            done = fresh and job.get("state") in ("finished", "stopped")
            if not done and state in ("exited", "dead", None) and spark.driver_exit_code(name) != 0:
                raise GiveUp(f"the driver container {name} exited at start (code {spark.driver_exit_code(name)}):"
                             f"\n{tail()}")
            ok = fresh and job.get("state") in ("running", "finished", "stopped")
            return ok, f"container {state}; job.json: state {job.get('state') if fresh else 'not written yet'}"

        try:
            wait_until(f"stream job driver {name} running", probe, 180.0, poll=0.5, log_tail=lambda _s: tail(),
                       hint=f"see {log} (`kctl logs {spark.driver_host(cfg.name)}`)")
        except KctlError:
            spark.remove_driver(name)  # nothing half-made: Docker would restart a driver that fails at start forever
            raise
        res = {"container": name, "master": cfg.master, "ui": st["ui"], "checkpoint": cfg.checkpoint, "out": cfg.out,
               "log": str(log), "warm_driver": name != spark.driver_container(spec, cfg.name), **cold}
        if detach:
            return {**res, "detached": True}

        def exited() -> tuple[bool, str]:
            s = spark.driver_state(name)
            return s in ("exited", "dead", None), f"container {s}"

        try:
            wait_until(f"stream job driver {name} to exit", exited, timeout_s or 10 ** 9, poll=1.0)
        except KeyboardInterrupt:
            (sd / "stop").write_text("stop\n")
            wait_until(f"stream job driver {name} to stop", exited, 180.0, poll=0.5)
        code = spark.driver_exit_code(name)
        warm.ensure(spec, cluster_dir)  # the job gave the workers' cores back: the next warm driver (if asked for)
        job = read_json(sd / "job.json") or {}
        if code:
            raise KctlError(f"stream job exited with code {code}: {job.get('error', 'see its log')}",
                            hint=f"`kctl logs {spark.driver_host(cfg.name)}`")
        return {**res, "detached": False, "state": job.get("state"), "counters": job.get("counters")}
