"""Submit the job: checks before Spark starts, jar resolution, and the job process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from kctl.errors import KctlError, UsageError
from kctl.extras import require
from kctl.kafka.client import Target
from kctl.stream import jars as jarlib
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
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def submit(cfg: JobConfig, *, detach: bool = False, timeout_s: float | None = None) -> dict[str, Any]:
    """Check, resolve and start the job. Foreground: wait for it; ``detach``: return once it runs."""
    require("pyspark", "stream")  # the job process needs it; say so before anything starts
    if not cfg.topics:
        raise UsageError("no topic to read", hint="pass --topic")
    check_metrics_table(Path(cfg.out) / "metrics")  # before anything starts: the job could not write it
    check_topics(Target.of(cfg.secured_spec(), cfg.bootstrap_servers), cfg.topics)
    if not cfg.jars and not cfg.packages:
        cfg.jars = jarlib.jars_for_job(None)
    sd = state_dir(cfg.checkpoint)
    job = read_json(sd / "job.json") or {}
    if pid_alive(job.get("pid")) and job.get("state") in ("starting", "running"):
        raise KctlError(f"a stream job (pid {job['pid']}) already runs with checkpoint {cfg.checkpoint}",
                        hint="see `kctl stream status`; stop it with `kctl stream stop`")
    sd.mkdir(parents=True, exist_ok=True)
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
