"""kctl.stream.s3: URLs, the credentials file (format and mode), and the options Spark and delta-rs get."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kctl.errors import UsageError
from kctl.stream import s3

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def _file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    p = tmp_path / "creds"
    p.write_text(text)
    p.chmod(mode)
    return p


def test_parse_url() -> None:
    loc = s3.parse_url("s3a://logs/kctl/run1/")
    assert (loc.bucket, loc.key) == ("logs", "kctl/run1")
    assert loc.s3a == "s3a://logs/kctl/run1" and loc.s3 == "s3://logs/kctl/run1"
    assert loc.child("archive").s3 == "s3://logs/kctl/run1/archive"
    assert s3.parse_url("s3://b").child("metrics").s3a == "s3a://b/metrics"
    assert s3.is_s3("s3a://b/x") and not s3.is_s3("/tmp/x") and not s3.is_s3(None)


@pytest.mark.parametrize("url", ["s3a:///nobucket", "file:///tmp/x", "s3a://AKIA:secret@b/x", "s3a://b:9000/x",
                                 "s3a://b/x?versionId=1"])
def test_parse_url_refuses(url: str) -> None:
    with pytest.raises(UsageError) as e:
        s3.parse_url(url)
    assert "secret" not in e.value.message and e.value.hint


def test_simple_format(tmp_path: Path) -> None:
    c = s3.read_credentials(_file(tmp_path, f"# kctl\naccess_key = AKIAX\nsecret_key={SECRET}\n"))
    assert (c.access_key, c.secret_key, c.session_token) == ("AKIAX", SECRET, None)
    assert SECRET not in repr(c)


def test_ini_format_and_profile(tmp_path: Path) -> None:
    text = (f"[default]\naws_access_key_id = A1\naws_secret_access_key = {SECRET}\n"
            "[other]\naws_access_key_id=A2\naws_secret_access_key=S2\naws_session_token=T2\n")
    p = _file(tmp_path, text)
    assert s3.read_credentials(p).access_key == "A1"
    c = s3.read_credentials(p, profile="other")
    assert (c.access_key, c.secret_key, c.session_token) == ("A2", "S2", "T2")
    with pytest.raises(UsageError, match=r"no \[nope\] section"):
        s3.read_credentials(p, profile="nope")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_refuses_readable_by_others(tmp_path: Path, mode: int) -> None:
    p = _file(tmp_path, f"access_key=A\nsecret_key={SECRET}\n", mode)
    with pytest.raises(UsageError) as e:
        s3.read_credentials(p)
    assert "readable by others" in e.value.message and "chmod 600" in (e.value.hint or "")
    assert SECRET not in e.value.message + (e.value.hint or "")


def test_missing_or_bad_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        s3.read_credentials(tmp_path / "none")
    with pytest.raises(UsageError, match="no secret_key"):
        s3.read_credentials(_file(tmp_path, "access_key=A\n"))
    with pytest.raises(UsageError, match="line 2 is not KEY=VALUE") as e:
        s3.read_credentials(_file(tmp_path, f"access_key=A\n{SECRET}\n"))
    assert SECRET not in e.value.message


def test_settings_validate() -> None:
    with pytest.raises(UsageError, match="needs credentials"):
        s3.Settings(endpoint="http://127.0.0.1:9000").validate("s3a://b/x")
    with pytest.raises(UsageError, match="not http"):
        s3.Settings(endpoint="127.0.0.1:9000", credentials_file="f").validate("s3a://b/x")
    with pytest.raises(UsageError, match="not http"):
        s3.Settings(endpoint="http://k:s@127.0.0.1:9000", credentials_file="f").validate("s3a://b/x")
    s3.Settings(endpoint="http://127.0.0.1:9000", credentials_file="f").validate("s3a://b/x")
    s3.Settings(credentials_file="f").validate("s3a://b/x")  # AWS itself


def test_option_mapping() -> None:
    s = s3.Settings(endpoint="http://127.0.0.1:9000", region="eu-west-1", path_style=True, credentials_file="f")
    c = s3.Credentials("AK", SECRET)
    h = s3.hadoop_conf(s, c)
    assert h["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert h["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert h["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert SECRET not in str(h) and "AK" not in h.values()  # the builder's settings reach spark-submit's argv
    assert s3.hadoop_secrets(c) == {"fs.s3a.access.key": "AK", "fs.s3a.secret.key": SECRET}
    assert h["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert all(k.startswith("spark.") for k in h)
    o = s3.storage_options(s, c)
    assert o["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000" and o["AWS_ALLOW_HTTP"] == "true"
    assert o["AWS_S3_ALLOW_UNSAFE_RENAME"] == "true" and o["AWS_REGION"] == "eu-west-1"
    assert o["AWS_SECRET_ACCESS_KEY"] == SECRET and o["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false"
    https = s3.Settings(endpoint="https://s3.example", path_style=False, credentials_file="f")
    assert "AWS_ALLOW_HTTP" not in s3.storage_options(https, c)
    assert s3.hadoop_conf(https, c)["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    t = s3.Credentials("AK", SECRET, "TOK")
    assert s3.storage_options(s, t)["AWS_SESSION_TOKEN"] == "TOK"
    assert "Temporary" in s3.hadoop_conf(s, t)["spark.hadoop.fs.s3a.aws.credentials.provider"]
    assert s3.hadoop_secrets(t)["fs.s3a.session.token"] == "TOK"
    assert s3.scrub(f"failed with key {SECRET}", c) == "failed with key ***"


def test_settings_hold_no_secret() -> None:
    """What travels to the job (its config.json) is the file's path, never a key."""
    import dataclasses
    import json

    s = s3.Settings(endpoint="http://127.0.0.1:9000", credentials_file="/home/op/.kctl-s3")
    assert SECRET not in json.dumps(dataclasses.asdict(s))
    env = s3.env_without_aws({"AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ACCESS_KEY_ID": "A",
                              "AWS_SESSION_TOKEN": "T", "AWS_REGION": "r", "PATH": "/bin"})
    assert env == {"AWS_REGION": "r", "PATH": "/bin"}


def test_reading_the_file_puts_no_secret_in_argv_or_env(tmp_path: Path) -> None:
    """A child that reads the file and builds the options shows no secret in its argv or environment."""
    p = _file(tmp_path, f"access_key=A\nsecret_key={SECRET}\n")
    code = ("import sys, os; from kctl.stream import s3; c = s3.read_credentials(sys.argv[1]); "
            "s3.hadoop_conf(s3.Settings(credentials_file=sys.argv[1]), c); "
            "print(open(f'/proc/{os.getpid()}/cmdline').read()); print(open(f'/proc/{os.getpid()}/environ').read())")
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True,
                         env=s3.env_without_aws(dict(os.environ)))
    assert str(p) in out.stdout and SECRET not in out.stdout


def _submit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-m", "kctl", "stream", "submit", "-b", "127.0.0.1:1", *args],
                       capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)},
                       timeout=60)
    assert "Traceback" not in p.stderr and SECRET not in p.stderr, p.stderr
    return p


def test_submit_to_s3_checks_its_settings_first(tmp_path: Path) -> None:
    """`kctl stream submit --out s3a://...` without credentials (on a Spark master too), with a loose file, or with
    the checkpoint on the output's prefix: one message with a hint, before Kafka is asked anything (the bootstrap
    server here answers nothing), and no local dir made. (Against a real store: tests/integration/test_stream_s3.py.)"""
    p = _submit(tmp_path, "--out", "s3a://b/x")
    assert p.returncode == 2 and "needs credentials" in p.stderr and "--s3-credentials" in p.stderr
    loose = _file(tmp_path, f"access_key=A\nsecret_key={SECRET}\n", 0o640)
    p = _submit(tmp_path, "--out", "s3a://b/x", "--s3-credentials", str(loose))
    assert p.returncode == 2 and "readable by others" in p.stderr and "chmod 600" in p.stderr
    loose.chmod(0o600)
    p = _submit(tmp_path, "--out", "s3a://b/x", "--s3-credentials", str(loose), "--s3-endpoint", "ftp://h")
    assert p.returncode == 2 and "not http(s)://HOST[:PORT]" in p.stderr
    loose.unlink()
    p = _submit(tmp_path, "--out", "s3a://b/x", "--master", "spark://127.0.0.1:7077")  # checked as on local[N]
    assert p.returncode == 2 and "needs credentials" in p.stderr and "--s3-credentials" in p.stderr
    p = _submit(tmp_path, "--out", "s3a://b/x", "--checkpoint", "s3a://b/x/")
    assert p.returncode == 2 and "same S3 prefix" in p.stderr
    p = _submit(tmp_path, "--out", "s3a://b/x", "--jars", "/j/kafka.jar,/j/delta.jar")
    assert p.returncode == 2 and "names no hadoop-aws jar" in p.stderr
    p = _submit(tmp_path, "--out", str(tmp_path / "o"), "--s3-credentials", "/nowhere")
    assert p.returncode == 2 and "s3a:// --out or --checkpoint only" in p.stderr
    assert list(tmp_path.iterdir()) == []


def test_state_dir_of_a_checkpoint_on_s3_is_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.stream.config import JobConfig, state_dir

    monkeypatch.chdir(tmp_path)
    assert state_dir("s3a://b/jobs/cp/") == tmp_path / ".kctl/stream/s3/b/jobs/cp/_kctl"
    assert state_dir(str(tmp_path / "cp")) == tmp_path / "cp" / "_kctl"
    assert s3.join("s3a://b/x/", "metrics") == "s3a://b/x/metrics" and s3.join("/o", "metrics") == "/o/metrics"
    cfg = JobConfig("", ["t"], "s3a://b/out", "/cp")
    assert cfg.table("archive") == "s3a://b/out/archive" and cfg.storage_options() is None


def test_files_on_local_paths(tmp_path: Path) -> None:
    from kctl.stream.state import committed_offsets

    f = s3.Files()
    assert f.read_text(tmp_path / "cp" / "metadata") is None and f.names(tmp_path / "cp" / "commits") == []
    f.write_text(tmp_path / "cp" / "offsets" / "3", 'v1\n{"batchWatermarkMs":0}\n{"t":{"0":5,"1":7}}\n')
    f.write_text(tmp_path / "cp" / "commits" / "3", "v1\n")
    assert committed_offsets(tmp_path / "cp", f) == (3, {"t": {0: 5, 1: 7}})
    with pytest.raises(UsageError, match="no S3 settings"):
        f.read_text("s3a://b/cp/metadata")


def test_a_batchs_record_count_comes_from_the_offset_log(tmp_path: Path) -> None:
    """What decides whether a batch goes the small way (kctl.stream.job.BatchWriter): its end offsets minus the
    previous batch's; unknown for the first batch, a partition new in it, or a batch the log does not hold."""
    from kctl.stream.state import batch_end_offsets, batch_records

    f = s3.Files()
    cp = tmp_path / "cp"
    f.write_text(cp / "offsets" / "0", 'v1\n{"batchWatermarkMs":0}\n{"t":{"0":5,"1":7}}\n')
    f.write_text(cp / "offsets" / "1", 'v1\n{"batchWatermarkMs":0}\n{"t":{"0":9,"1":7}}\n')
    f.write_text(cp / "offsets" / "2", 'v1\n{"batchWatermarkMs":0}\n{"t":{"0":9,"1":10,"2":4}}\n')
    assert batch_end_offsets(cp, 1, f) == {"t": {0: 9, 1: 7}} and batch_end_offsets(cp, 7, f) is None
    assert batch_records(cp, 1, f) == 4
    assert batch_records(cp, 0, f) is None  # the first batch: where it started is not in the log
    assert batch_records(cp, 2, f) is None  # partition 2 is new in batch 2
    assert batch_records(cp, 3, f) is None  # no such batch


def test_records_waiting_counts_past_the_checkpoint_or_says_it_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    """What decides whether the job's warm-up runs: the records in its topics past its checkpoint at its start."""
    from kctl.errors import KctlError
    from kctl.stream import job
    from kctl.stream.config import JobConfig

    latest = {"t": {0: (0, 5), 1: (2, 2), 2: (10, 30)}}
    committed: dict[str, dict[int, int]] = {}
    asked: list[str] = []

    def fake_latest(target: object, topics: list[str]) -> dict[str, dict[int, tuple[int, int]]]:
        asked.append(",".join(topics))
        if topics == ["down"]:
            raise KctlError("cannot read offsets")
        return latest

    monkeypatch.setattr(job, "latest_offsets", fake_latest)
    monkeypatch.setattr(job, "committed_offsets", lambda cp, files: (None if not committed else 3, committed))
    files = s3.Files()

    def cfg(**kw: object) -> JobConfig:
        return JobConfig("b:9092", ["t"], "/o", "/c", **kw)  # type: ignore[arg-type]

    assert job.records_waiting(cfg(), files) == 5 + 0 + 20  # a new checkpoint from earliest: from each low mark
    committed.update({"t": {0: 5, 2: 25}})
    assert job.records_waiting(cfg(), files) == 0 + 0 + 5  # past the checkpoint (partition 1: none ever)
    committed["t"][2] = 30
    assert job.records_waiting(cfg(), files) == 0  # caught up: the warm-up runs
    committed.clear()
    n = len(asked)
    assert job.records_waiting(cfg(starting_offsets="latest"), files) == 0 and len(asked) == n  # Kafka not asked
    assert job.records_waiting(cfg(starting_offsets='{"t":{"0":3}}'), files) is None
    assert job.records_waiting(JobConfig("b:9092", ["down"], "/o", "/c"), files) is None
