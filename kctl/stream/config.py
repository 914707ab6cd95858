"""The job's configuration: written by the submitter, read by the job process."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.kafka.client import Target
from kctl.model.spec import load_cluster
from kctl.security import store
from kctl.stream import s3 as objstore
from kctl.stream.s3 import Settings as S3Settings

DEFAULT_TOPIC = "access-logs"
DEFAULT_OUT = Path(".kctl/stream/out")
DEFAULT_CHECKPOINT = Path(".kctl/stream/checkpoint")


# Spark settings the job sets from its own options or needs as they are: `--conf` may not name them (-> what
# to do instead).
OWN_CONF = {"spark.master": "use --master", "spark.driver.memory": "use --driver-memory",
            "spark.jars": "use --jars", "spark.jars.packages": "use --jars",
            "spark.app.name": "the job is always kctl-stream (--name names its consumer group)",
            "spark.driver.host": "the driver binds to 127.0.0.1 only",
            "spark.driver.bindAddress": "the driver binds to 127.0.0.1 only",
            "spark.sql.extensions": "the job's Delta Lake tables need Delta's",
            "spark.sql.catalog.spark_catalog": "the job's Delta Lake tables need Delta's"}


def parse_conf(items: list[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` items (spark-submit's form) -> settings; ValueError says which item is wrong and why.
    A setting that looks like a secret is refused: it would sit in the process's arguments and the job's
    config file (a secured cluster's credentials come from its state dir at run time)."""
    import re

    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.startswith("spark.") or not value:
            raise ValueError(f"--conf {item!r} is not spark.KEY=VALUE")
        if key in OWN_CONF:
            raise ValueError(f"--conf {key} is kctl's own setting of the job: {OWN_CONF[key]}")
        if re.search(r"(?i)password|secret|token|credential", key):
            raise ValueError(f"--conf {key} would put a secret in the process's arguments and the job's config")
        out[key] = value
    return out


@dataclass
class JobConfig:
    bootstrap_servers: str
    topics: list[str]
    out: str
    checkpoint: str
    master: str = "local[2]"
    trigger: str = "1 second"  # a processing-time interval, or "available-now" (docs/pipeline.md: why 1 s)
    starting_offsets: str = "earliest"
    fail_on_data_loss: bool = False
    # Bounds a catch-up batch (its cached rows: about 130 MB per 100,000 events); 0 or None: no cap. 200,000: the
    # job's CPU per event at steady state falls with the batch's size (a fixed cost per batch), 48.6 CPU-s per
    # million at 100,000 against 41.3 at 200,000 in one run of kctl.bench.cost (docs/benchmarks.md).
    max_offsets_per_trigger: int | None = 200_000
    watermark: str = "10 minutes"
    # A batch of at most this many records (known from the checkpoint's offset log) is written in one Spark job
    # and delta-rs commits from the driver, instead of Spark's Delta appends (a second Spark job and a JVM
    # commit each, about a second even for a few rows); so are a larger batch's bad rows when at most this many;
    # 0: every batch through Spark (docs/pipeline.md).
    small_batch_rows: int = 5_000
    jars: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    driver_memory: str = "768m"
    executor_memory: str = "512m"
    # The shuffles of a batch (its aggregation, the MERGE) carry a few hundred rows: one task is cheapest
    # (measured: docs/benchmarks.md, docs/pipeline.md).
    shuffle_partitions: int = 1
    ui: bool = False
    extra_conf: dict[str, str] = field(default_factory=dict)
    # The consumer group the job commits its offsets to is kctl-stream-<name>.
    name: str = "main"
    # Compact and VACUUM the Delta tables every N micro-batches (0: only on `kctl stream optimize`).
    optimize_every: int = 0
    # VACUUM keeps files unreferenced for less than this: longer than any reader of the tables runs.
    vacuum_retain_hours: float = 168.0
    # The tables the job writes (a benchmark names one to measure it alone).
    outputs: list[str] = field(default_factory=lambda: ["archive", "deadletter", "metrics"])
    # Progress events kept on disk (see kctl.stream.progress); a benchmark asks for as many as it reads.
    progress_history: int = 500
    # A secured cluster's kctl.yaml: the job and the preflight take the admin user's client settings from
    # its state dir at run time, so no password is ever written into this config.
    spec_file: str | None = None
    # Tables on an S3-compatible store (an s3a:// out): kctl.stream.s3.Settings as a dict -- the endpoint, region,
    # addressing and the credentials FILE's path; the keys themselves are read by the driver (never written here).
    s3: dict[str, Any] | None = None
    # A driver in a container of the Spark cluster (kctl.stream.spark): its host name on the cluster network (the
    # executors connect to it there; None: 127.0.0.1, a driver on this host), its container (what `kctl stream
    # status|stop` ask Docker about: the pid it records is the container's own), the cores it may take, and the
    # bootstrap servers this host reaches the brokers on (bootstrap_servers are then the INTERNAL listeners).
    driver_host: str | None = None
    # On engine hosts the driver runs on this machine's network: it binds the one address the hosts reach it at
    # (spark.driver.bindAddress; None: 0.0.0.0 in its container on the cluster network, or 127.0.0.1).
    driver_bind: str | None = None
    container: str | None = None
    cores_max: int = 2
    host_bootstrap_servers: str | None = None
    spark_ui_port: int | None = None  # the Spark master's UI on 127.0.0.1 (`kctl stream status` lists the workers)
    spark_ui_host: str | None = None  # on engine hosts: the master's host (None: 127.0.0.1)
    # kctl's own files of the job where state_dir(checkpoint) would not put them: a job on kctl.yaml's Spark
    # cluster whose checkpoint is on S3 keeps them in the cluster's shared dir (JOB/_kctl), which its driver's
    # container and this host both see. None: state_dir(checkpoint).
    record_dir: str | None = None
    # A job on kctl.yaml's Spark cluster beside a secured cluster: the 0600 file of its own user's login (librdkafka's
    # settings with the CA's PEM, kctl.stream.login), mounted read-only into its driver's container alone. The driver
    # hands the login to its executors inside the Kafka source's options (never a file, an argument or an
    # environment variable on a worker). None: spec_file's admin login, or a plain cluster.
    kafka_login: str | None = None
    # kctl.yaml of a job on its Spark cluster, for kctl's readers on this host (`kctl stream status`: their login);
    # the driver, in its container, never reads it.
    host_spec_file: str | None = None

    def state(self) -> Path:
        """kctl's own files of this job (pid, progress, stop marker, config): :func:`state_dir`."""
        return state_dir(self.checkpoint, self.record_dir)

    def secured_spec(self) -> Any:
        """The ClusterSpec of ``spec_file`` when its cluster is secured (kctl's client factory adds SASL_SSL)."""
        if not self.spec_file:
            return None

        spec, _ = load_cluster(self.spec_file)
        if not spec.kctl_logs_in:  # PLAINTEXT, or the first step of securing a running cluster
            return None
        return spec

    def client_settings(self) -> dict[str, str]:
        """librdkafka's security settings of the job's clients: its own login's (:attr:`kafka_login`), else the
        admin's of a secured ``spec_file``; {} for a plain cluster."""
        if self.kafka_login:
            data: dict[str, str] = json.loads(Path(self.kafka_login).read_text(encoding="utf-8"))
            return data
        spec = self.secured_spec()
        return store.client_settings(spec) if spec is not None else {}

    def kafka_security(self) -> dict[str, str]:
        """The Java client's security settings (Spark's ``kafka.*`` options); {} for a plain cluster. A login with
        the CA's PEM gives it as the truststore's content, so no executor needs a file of it."""
        settings = self.client_settings()
        if "ssl.ca.pem" not in settings:
            return store.java_settings(settings)
        java = store.java_settings({k: v for k, v in settings.items() if k != "ssl.ca.pem"})
        return java | {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": settings["ssl.ca.pem"]}

    def target(self, bootstrap: str) -> Target:
        """kctl's clients of the job (its group's commits, the preflight) as the job logs in."""
        if self.kafka_login:
            return Target.foreign(bootstrap, self.client_settings(), name=f"the stream job {self.name}")
        return Target.of(self.secured_spec(), bootstrap)

    def s3_settings(self) -> S3Settings | None:
        return S3Settings(**self.s3) if self.s3 else None

    def files(self) -> objstore.Files:
        """The checkpoint's and the output's small files, local or on the store (keys read from the file)."""
        return objstore.Files.of(self.s3_settings())

    def storage_options(self) -> dict[str, str] | None:
        """delta-rs's options for tables under ``out`` (None for a local dir)."""
        store = self.s3_settings()
        if store is None or not objstore.is_s3(self.out):
            return None
        creds = objstore.read_credentials(str(store.credentials_file), profile=store.profile)
        return objstore.storage_options(store, creds)

    def table(self, name: str) -> str:
        """The path (or s3a:// URL) of one of the job's tables."""
        return objstore.join(self.out, name)

    @property
    def available_now(self) -> bool:
        return self.trigger == "available-now"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> JobConfig:
        data: dict[str, Any] = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# kctl's own files for a job whose checkpoint is on S3: a local dir named after the checkpoint's URL (its pid, stop
# marker and log are this machine's, and status reads them without the store).
S3_STATE = Path(".kctl/stream/s3")


def state_dir(checkpoint: str | Path, record: str | Path | None = None) -> Path:
    """kctl's own files for a job (pid, progress, stop marker, log), beside Spark's in the checkpoint; for a
    checkpoint on S3, in ``.kctl/stream/s3/BUCKET/PREFIX/_kctl`` of the working directory, or in ``record``
    when the job names one (:attr:`JobConfig.record_dir`: a job on kctl.yaml's Spark cluster)."""
    if record is not None:
        return Path(record)
    if objstore.is_s3(str(checkpoint)):
        loc = objstore.parse_url(str(checkpoint))
        return (S3_STATE / loc.bucket / loc.key / "_kctl").resolve()
    return Path(checkpoint) / "_kctl"
