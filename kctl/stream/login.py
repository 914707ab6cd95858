"""How the stream job on kctl.yaml's Spark cluster logs in to a secured cluster: a user of its own, never the admin.

The job's driver runs in a container and its executors on the Spark workers, so the admin's login (which kctl's
own clients on this host use) would reach machines that need far less. ``kctl stream submit`` makes, on the
secured cluster, the SCRAM user ``kctl-stream-<job>`` (its password kept 0600 in the state dir like any ``kctl user
create``), allowed what the job does and nothing else:

- its topics: read, describe (the Kafka source reads them, its admin client lists their offsets);
- its group ``kctl-stream-<job>``: read, describe (the driver commits the checkpointed offsets there, for Kafka's
  tools to show the job's lag);
- the groups its Spark consumers take, ``kctl-stream-<job>.spark-...`` (the source's ``groupIdPrefix``): read.

The user's login (librdkafka's settings with the CA's PEM) is written 0600 to ``<state>/spark/secrets/<job>.json``,
outside the directory the workers share, and mounted read-only into the driver's container alone. The driver gives
it to its executors inside the Kafka source's options, with the CA as the truststore's content (Kafka's
``ssl.truststore.certificates``): no worker holds a file of it, no process argument or environment variable names
it, and Kafka's clients print it as ``[hidden]``.

A job given a topic it was not granted gets the grant at its next submit; grants of topics a job no longer reads
stay until ``kctl acl remove`` (kctl does not know the job is done with them).
"""

from __future__ import annotations

import json
from pathlib import Path

from kctl.errors import KctlError
from kctl.kafka.security import Grant, ensure_user
from kctl.model.properties import security_protocol
from kctl.model.spec import ClusterSpec
from kctl.security import store

USER_PREFIX = "kctl-stream-"


def group(job: str) -> str:
    """The consumer group the job commits its checkpointed offsets to."""
    return f"{USER_PREFIX}{job}"


def spark_group_prefix(job: str) -> str:
    """The Kafka source's ``groupIdPrefix`` for a job that logs in as its own user (Spark adds ``-<uuid>-...``)."""
    return f"{group(job)}.spark"


def user(job: str) -> str:
    return f"{USER_PREFIX}{job}"


def grants(job: str, topics: list[str]) -> list[Grant]:
    out = [Grant("topic", t, op) for t in sorted(set(topics)) for op in ("read", "describe")]
    out += [Grant("group", group(job), op) for op in ("read", "describe")]
    out.append(Grant("group", f"{spark_group_prefix(job)}-", "read", prefixed=True))
    return out


def secrets_dir(cluster_dir: Path) -> Path:
    """Where the jobs' logins are kept: beside the Spark cluster's files, not in the directory the workers share."""
    return cluster_dir / "spark" / "secrets"


def settings(spec: ClusterSpec, name: str, password: str) -> dict[str, str]:
    """librdkafka's settings of the job's login, the CA (both while one is rotated) as PEM text."""
    conf = {"security.protocol": security_protocol(spec), "sasl.mechanisms": spec.security.sasl_mechanism,
            "sasl.username": name, "sasl.password": password}
    if spec.security.tls:
        ca = store.client_ca_file(store.state_dir_of(spec))
        try:
            conf["ssl.ca.pem"] = ca.read_text(encoding="ascii")
        except OSError as exc:
            raise KctlError(f"cannot read {spec.name}'s CA {ca}: {exc.strerror}",
                            hint="`kctl up` makes it") from None
    return conf


def provision(spec: ClusterSpec, cluster_dir: Path, job: str, topics: list[str]) -> Path:
    """The job's user and ACLs on the secured cluster, and the 0600 file of its login (written whole, replaced at
    once: a driver starting beside never reads half of it); its path."""
    name = user(job)
    password = ensure_user(spec, name, grants(job, topics))
    path = secrets_dir(cluster_dir) / f"{job}.json"  # its dir made 0700
    store.write_secret(path, json.dumps(settings(spec, name, password), indent=2, sort_keys=True) + "\n")
    return path
