"""A warm driver for kctl.yaml's Spark cluster (``spark.warm_driver``): a stream-job driver started before any job
asks for it, which a job's submit takes over instead of starting one.

Most of the wait between `kctl stream submit` and a job's first batch on the Spark cluster is not the job's: the
driver's container and JVM, its Spark session, an executor started on a worker and its JVM, the jars fetched, the
writer's first calls compiled (docs/benchmarks.md). A warm driver does all of that while nobody waits: it builds
the session a job with default settings builds (kctl.stream.job.build_session), runs the writer once on
generated records (kctl.stream.job.warm_up, on the executors too), says so in its slot's ``ready.json`` and waits.
`kctl stream submit` then writes the job's config, *claims* the slot (an exclusive link of ``claim.json``: of two
submits at once one gets it, the other starts a driver of its own as before) and waits for the job to run; the
driver reads the claim, moves its log to the job's (``kctl logs stream-<job>``) and runs the job in the session
it holds (kctl.stream.job.run).

The slot, ``<shared dir>/_warm/<id>/``: ``config.json`` (the session's settings, a JobConfig), ``ready.json``
(the session's key and when it was warm), ``claim.json`` (the job's config file and its log's name). The
container, ``kctl-<name>-stream-warm-<id>`` (host ``stream-warm-<id>``), is a driver like any other: Docker
starts it again after a crash (``on-failure``), and then it finds its claim and runs the job from its
checkpoint in a session of its own; `kctl stream status|stop` find it in the job's record (its config's
``container``), as they find a driver started for the job.

Only a job whose session is the warm one's is handed over: the same jars, memory, cores and Spark settings, and
neither a login of its own to mount (a secured cluster: its login file goes into its own driver alone) nor
tables on S3 (the credentials file and hadoop-aws from the driver's start). Any other starts its driver as
before; :func:`why_cold` says why. One warm driver waits while no job holds the cluster: `kctl up` starts it,
and `kctl stream stop` starts the next once its job has given the workers' cores back.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO

from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec
from kctl.runtime import docker_api
from kctl.stream import jars as jarlib
from kctl.stream import job, spark
from kctl.stream.config import JobConfig
from kctl.stream.record import read_json
from kctl.wait import ticks

LABEL_WARM = "io.kctl.stream-warm"  # on a warm driver's container: its slot's id
# What a Spark session is made of (kctl.stream.job.build_session): a job is handed a warm session only when
# these are the same in its config.
SESSION_FIELDS = ("master", "driver_memory", "executor_memory", "shuffle_partitions", "ui", "jars", "packages",
                  "extra_conf", "cores_max")
CLAIM_POLL_S = 0.1
SLOT_GRACE_S = 60.0  # a slot without a container is another kctl's in the making for this long


def slots_dir(state_dir: Path) -> Path:
    return spark.data_dir(state_dir) / "_warm"


def container_name(spec: ClusterSpec, wid: str) -> str:
    return f"{spec.project}-stream-warm-{wid}"


def host_name(wid: str) -> str:
    return f"stream-warm-{wid}"


def session_key(cfg: JobConfig) -> dict[str, Any]:
    return {f: getattr(cfg, f) for f in SESSION_FIELDS}


def why_cold(cfg: JobConfig) -> str | None:
    """Why the job cannot take a warm driver whatever its settings (None: it can)."""
    if cfg.s3:
        return "its tables or checkpoint are on S3 (the driver reads the store's credentials file from its start)"
    if cfg.kafka_login:
        return "it logs in to a secured cluster (its login file is mounted into its own driver alone)"
    return None


def base_config(spec: ClusterSpec, state_dir: Path, wid: str) -> JobConfig:
    """The warm driver's own config: the session a job submitted with default settings builds on this Spark
    cluster (kctl.stream.submit.submit_to_cluster), a scratch dir in its slot for the writer's warm-up."""
    sp = spec.spark
    assert sp is not None
    slot = slots_dir(state_dir) / wid
    return JobConfig(bootstrap_servers=spec.internal_bootstrap_servers, topics=[], out=str(slot / "out"),
                     checkpoint=str(slot / "cp"), master=spark.master_url(), name=f"warm-{wid}",
                     jars=spark.shared_jars(jarlib.jars_for_job(None, s3=False), state_dir),
                     driver_host=host_name(wid), container=container_name(spec, wid),
                     cores_max=sp.workers * sp.worker_cores, spark_ui_port=sp.ui_port)


# ----- on this host -----------------------------------------------------------------------------------------------

def _containers(spec: ClusterSpec) -> list[Any]:
    return list(docker_api.client().containers.list(
        all=True, filters={"label": [f"{spark.LABEL_SPARK}={spec.name}", LABEL_WARM]}, ignore_removed=True))


def tidy(spec: ClusterSpec, state_dir: Path) -> list[Any]:
    """Remove the warm drivers that ended (their job stopped, or they were stopped before one came) and the slots
    no container has; the running ones (waiting, or running a job, or restarting after a crash)."""
    running = []
    for c in _containers(spec):
        if c.status in ("running", "restarting"):
            running.append(c)
            continue
        c.remove(force=True)
    have = {(c.labels or {}).get(LABEL_WARM) for c in running}
    d = slots_dir(state_dir)
    if d.is_dir():
        now = time.time()
        for slot in d.iterdir():
            # a slot younger than a minute may be another kctl's whose container is not created yet
            if slot.is_dir() and slot.name not in have and now - slot.stat().st_mtime > SLOT_GRACE_S:
                shutil.rmtree(slot, ignore_errors=True)
    return running


def _take(slot: Path, payload: dict[str, Any]) -> bool:
    """Link ``claim.json`` into the slot holding ``payload``: True for the one caller that did (a job's submit, or
    a retirement), False when the slot was taken already."""
    tmp = slot / f".claim-{os.getpid()}-{uuid.uuid4().hex[:6]}.tmp"
    try:
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.link(tmp, slot / "claim.json")
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def retire_idle(spec: ClusterSpec, state_dir: Path) -> list[str]:
    """Remove the warm drivers no job was handed, so that they give the workers' cores back (a job that cannot take
    one starts a driver of its own, whose executors would otherwise wait for those cores; kctl.yaml that asks for
    none any more). Each is taken first as a job's submit takes it (an exclusive claim, which says "retire"), so a
    submit at the same moment either got it (and it is left to its job) or finds it taken. Their names."""
    gone = []
    for c in tidy(spec, state_dir):
        wid = (c.labels or {}).get(LABEL_WARM, "-")
        slot = slots_dir(state_dir) / wid
        if slot.is_dir() and _take(slot, {"retire": True}):
            c.remove(force=True)
            shutil.rmtree(slot, ignore_errors=True)
            gone.append(str(c.name))
    return gone


def ensure(spec: ClusterSpec, state_dir: Path, progress: Any = None) -> dict[str, Any] | None:
    """One warm driver waiting (none when kctl.yaml does not ask for it): the one that waits, else a new one
    (it warms in the background). {"container", "slot", "ready"}; None when kctl.yaml asks for none."""
    if spec.spark is None or not spec.spark.warm_driver:
        retire_idle(spec, state_dir)  # kctl.yaml asks for none (any more): the one that waits goes
        return None
    for c in tidy(spec, state_dir):
        slot = slots_dir(state_dir) / (c.labels or {})[LABEL_WARM]
        if not (slot / "claim.json").exists():  # waiting, warming, or started again after a crash
            return {"container": c.name, "slot": str(slot), "ready": (slot / "ready.json").exists()}
    wid = uuid.uuid4().hex[:8]
    slot = slots_dir(state_dir) / wid
    (slot / "cp").mkdir(parents=True)
    cfg = base_config(spec, state_dir, wid)
    (slot / "config.json").write_text(cfg.to_json(), encoding="utf-8")
    name = container_name(spec, wid)
    spark.run_driver(spec, state_dir, name, host_name(wid), ["python3", "-m", "kctl.stream.warm", "--slot", str(slot)],
                     {LABEL_WARM: wid})
    if progress:
        progress(f"spark: warm driver {name} starting (it takes the next `kctl stream submit`)")
    return {"container": name, "slot": str(slot), "ready": False}


def describe(spec: ClusterSpec, state_dir: Path) -> list[dict[str, Any]]:
    """The warm drivers as `kctl status` lists them: [{"container", "state": warming | ready | running the job
    <name> | restarting ..., "ui"?}], from Docker and their slots."""
    out = []
    try:
        found = _containers(spec)
    except KctlError as exc:
        return [{"container": None, "state": f"unknown ({exc.message})"}]
    for c in sorted(found, key=lambda c: str(c.name)):
        slot = slots_dir(state_dir) / (c.labels or {}).get(LABEL_WARM, "-")
        claimed = read_json(slot / "claim.json")
        if claimed and claimed.get("retire"):
            state = "retiring"
        elif claimed:
            state = f"running the job {claimed.get('job')}" if c.status == "running" else \
                f"{c.status} (the job {claimed.get('job')})"
        elif c.status != "running":
            state = str(c.status)
        else:
            state = "ready" if (slot / "ready.json").exists() else "warming"
        out.append({"container": c.name, "state": state})
    return out


def claim(spec: ClusterSpec, state_dir: Path, cfg: JobConfig, write_config: Any) -> str | None:
    """Hand the job to a warm driver that is ready and holds its session: sets ``cfg.container`` and
    ``cfg.driver_host`` to the warm driver's, ``write_config(cfg)`` writes the job's config file (its path), and
    the slot's ``claim.json`` is linked into place (exclusive: a slot another submit took is passed over). The
    container's name, or None (``cfg`` untouched) when no warm driver takes it."""
    if spec.spark is None or not spec.spark.warm_driver or why_cold(cfg) or not slots_dir(state_dir).is_dir():
        return None
    want = session_key(cfg)
    cold = (cfg.container, cfg.driver_host)
    for slot in sorted(slots_dir(state_dir).iterdir()):
        ready = read_json(slot / "ready.json")
        if not ready or ready.get("key") != want or (slot / "claim.json").exists():
            continue
        if spark.driver_state(ready["container"]) != "running":
            continue
        cfg.container, cfg.driver_host = ready["container"], ready["host"]
        path = write_config(cfg)
        if _take(slot, {"config": str(path), "job": cfg.name, "log": f"{spark.driver_host(cfg.name)}.log"}):
            return str(cfg.container)
    cfg.container, cfg.driver_host = cold
    return None


def cold_reason(spec: ClusterSpec, state_dir: Path, cfg: JobConfig) -> str:
    """Why :func:`claim` handed the job to no warm driver, in the submit's answer."""
    why = why_cold(cfg)
    if why:
        return why
    d = slots_dir(state_dir)
    ready = [r for slot in (sorted(d.iterdir()) if d.is_dir() else [])
             if (r := read_json(slot / "ready.json")) and not (slot / "claim.json").exists()]
    if not ready:
        return "no warm driver was ready (one warms after `kctl up` and after `kctl stream stop`)"
    want = session_key(cfg)
    differ = sorted({f for r in ready for f in SESSION_FIELDS if (r.get("key") or {}).get(f) != want[f]})
    if differ:
        return f"its Spark session differs from the warm driver's ({', '.join(differ)})"
    return "the warm driver was taken by another submit"


def claimed_by(container: str | None, state_dir: Path) -> str | None:
    """The job config file a warm driver's container was handed (None: not a warm driver, or not claimed)."""
    if not container or not slots_dir(state_dir).is_dir():
        return None
    for slot in slots_dir(state_dir).iterdir():
        c = read_json(slot / "claim.json")
        cfg = read_json(slot / "config.json") or {}
        if c and cfg.get("container") == container:
            return str(c.get("config"))
    return None


# ----- in its container -------------------------------------------------------------------------------------------

class _Log:
    """The process's stdout and stderr (and its JVM's, which inherits them) through a pipe into a log file that
    can change: the warm driver's own until a job comes, then the job's."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._file: BinaryIO = path.open("ab")
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.close(w)
        self._r = r
        self._pump_thread = threading.Thread(target=self._pump, name="kctl-log", daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        while chunk := os.read(self._r, 65536):
            with self._lock:
                self._file.write(chunk)
                self._file.flush()

    def close(self, timeout_s: float = 1.0) -> None:
        """Everything written so far into the file before the process ends: this process's ends of the pipe
        closed, the pump drained (up to ``timeout_s``: a JVM still running holds its own ends open)."""
        sys.stdout.flush()
        sys.stderr.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        self._pump_thread.join(timeout_s)
        with self._lock:
            self._file.flush()

    def switch(self, path: Path) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        new = path.open("ab")
        with self._lock:
            old, self._file = self._file, new
        old.close()


def _say(text: str) -> None:
    print(f"{dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')} kctl: {text}", flush=True)


def serve(slot: Path) -> int:
    """The warm driver: the session and the warm-up, ``ready.json``, then the job its claim names (or the job
    at once, when it starts again after a crash with a claim); exit 0 on SIGTERM before a job came."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    base = JobConfig.from_json((slot / "config.json").read_text(encoding="utf-8"))
    claimed = read_json(slot / "claim.json")
    if claimed and claimed.get("retire"):
        return 0
    (slot / "ready.json").unlink(missing_ok=True)  # started again after a crash: not ready until warm again
    log = _Log(Path(spark.LOGS) / (claimed["log"] if claimed else f"{base.driver_host}.log"))
    try:
        return _serve(slot, base, claimed, log)
    finally:
        log.close()


def _serve(slot: Path, base: JobConfig, claimed: dict[str, Any] | None, log: _Log) -> int:
    if claimed:
        _say(f"warm driver {base.container} started again: it runs the job it was handed ({claimed['job']})")
        return job.run_config(JobConfig.from_json(Path(claimed["config"]).read_text(encoding="utf-8")))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        session = job.build_session(base)
        base.state().mkdir(parents=True, exist_ok=True)
        warm_s, _ = job.warm_up(session, base)
    except Exception as exc:  # noqa: BLE001 - no job waits on it: said, and it ends (exit 0: Docker leaves it)
        _say(f"warm driver {base.container} could not warm ({str(exc).splitlines()[0][:500] if str(exc) else exc!r});"
             " it stops, and jobs start drivers of their own until `kctl up` starts another")
        return 0
    tmp = slot / ".ready.json.tmp"
    tmp.write_text(json.dumps({
        "key": session_key(base), "host": base.driver_host, "container": base.container,
        "warm_up_s": round(warm_s, 2), "ready_at": dt.datetime.now(dt.timezone.utc).isoformat()}), encoding="utf-8")
    os.replace(tmp, slot / "ready.json")  # whole, for the submit that reads it
    _say(f"warm driver {base.container} ready (warm-up {warm_s:.1f} s); waiting for `kctl stream submit`")
    for _ in ticks(CLAIM_POLL_S, stop=stop):
        claimed = read_json(slot / "claim.json")
        if claimed:
            break
    if not claimed or claimed.get("retire"):
        _say("warm driver stopped before a job came")
        session.stop()
        return 0
    _say(f"warm driver {base.container} takes the job {claimed['job']}; its log goes on in {claimed['log']}")
    log.switch(Path(spark.LOGS) / claimed["log"])
    _say(f"the job {claimed['job']} runs in the warm driver {base.container}")
    return job.run_config(JobConfig.from_json(Path(claimed["config"]).read_text(encoding="utf-8")), session)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.stream.warm")
    ap.add_argument("--slot", required=True, type=Path, help="the warm driver's slot (kctl.stream.warm.ensure)")
    return serve(ap.parse_args(argv).slot)


if __name__ == "__main__":
    sys.exit(main())
