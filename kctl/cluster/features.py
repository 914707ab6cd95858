"""Kafka's finalized features on a cluster on KRaft, above all ``metadata.version``: what `kafka-features.sh
describe` answers, asked inside a node, and the raise of ``metadata.version`` to the newest level every node
supports (`upgrade --feature metadata.version=N`), which `kctl apply` makes once every node runs a new release."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kctl import contract
from kctl.errors import ClusterError, KctlError
from kctl.kraft import phases as kraft_record
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import engines

FEATURES_TOOL = "kafka-features.sh"
METADATA_VERSION = "metadata.version"


@dataclass(frozen=True)
class Feature:
    name: str
    supported_max: str | None  # e.g. 4.1-IV1: the newest level the node that answered supports
    finalized: str | None  # the level the cluster runs at


def parse_describe(text: str) -> dict[str, Feature]:
    """Pure: the features of `kafka-features.sh describe` (one tab-separated line per feature)."""
    out: dict[str, Feature] = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+):\s*(\S+)", line))
        if "Feature" in fields:
            out[fields["Feature"]] = Feature(fields["Feature"], fields.get("SupportedMaxVersion"),
                                             fields.get("FinalizedVersionLevel"))
    return out


def parse_level(text: str, feature: str = METADATA_VERSION) -> int | None:
    """Pure: the numeric level of ``feature`` in `kafka-features.sh version-mapping` (``metadata.version=27``)."""
    m = re.search(rf"{re.escape(feature)}=(\d+)", text)
    return int(m.group(1)) if m else None


def release(level: str | None) -> tuple[int, ...]:
    """Pure: a metadata.version's name as a sortable tuple (3.9-IV0 -> (3, 9, 0))."""
    m = re.fullmatch(r"(\d+)\.(\d+)-IV(\d+)", level or "")
    return tuple(int(g) for g in m.groups()) if m else ()


def _tool(spec: ClusterSpec, host: str, *args: str) -> str:
    bootstrap = f"{host}:{spec.kafka.internal_port}"
    tool = f"{engines.for_spec(spec).kafka_bin}/{FEATURES_TOOL}"
    login = (["--command-config", contract.secret_path(contract.ADMIN_CLIENT_FILE)]
             if spec.kctl_logs_in else [])  # the admin's SCRAM login: a file in the node, no password in argv
    code, out = engines.exec_in(spec, host, ["env", "KAFKA_HEAP_OPTS=-Xmx128m", "KAFKA_JMX_PORT=", tool,
                                             "--bootstrap-server", bootstrap, *login, *args], timeout=60)
    if code != 0:
        raise ClusterError(f"{FEATURES_TOOL} {args[0]} failed in {host}: {out.strip()[-300:]}",
                           hint=f"`kctl logs {host} --service kafka`")
    return out


def describe(spec: ClusterSpec) -> dict[str, Feature]:
    return parse_describe(_tool(spec, spec.kafka_host(spec.brokers[0]), "describe"))


def raise_metadata_version(spec: ClusterSpec) -> tuple[str | None, str | None]:
    """Raise metadata.version to the newest level the cluster's release supports, if it runs an older one:
    (before, after); (level, level) when there was nothing to raise. Kafka refuses it unless every broker and
    controller supports the level, and a raised metadata.version is not lowered again."""
    host = spec.kafka_host(spec.brokers[0])
    mv = describe(spec).get(METADATA_VERSION)
    if mv is None or mv.supported_max is None:
        raise ClusterError(f"{FEATURES_TOOL} describe named no {METADATA_VERSION}", hint="is the cluster on KRaft?")
    if release(mv.finalized) >= release(mv.supported_max):
        return mv.finalized, mv.finalized
    level = parse_level(_tool(spec, host, "version-mapping", "--release-version", mv.supported_max))
    if level is None:
        raise ClusterError(f"{FEATURES_TOOL} version-mapping named no level for {mv.supported_max}")
    _tool(spec, host, "upgrade", "--feature", f"{METADATA_VERSION}={level}")
    after = describe(spec).get(METADATA_VERSION)
    return mv.finalized, after.finalized if after else None


def raise_and_record(spec: ClusterSpec, state_dir: Path, say: Callable[[str], None]
                     ) -> tuple[str | None, str | None]:
    """Every node runs the new release now: Kafka's metadata.version up to it (Kafka's last upgrade step), and the
    level recorded in kraft.json, so that a later kctl.yaml with an older release is refused before anything is
    rendered (kctl.kraft.phases.check_downgrade)."""
    try:
        before, after = raise_metadata_version(spec)
    except KctlError as exc:
        raise KctlError(f"every node runs Kafka {spec.versions.kafka}, but raising metadata.version failed:"
                        f" {exc.message}",
                        hint=f"the raise stays owed (kraft.json): `{kraft_record.RAISE_COMMAND}` (or the next"
                             f" `kctl apply` / `kctl up`) raises it; {exc.hint or '`kctl status` first'}") from None
    kraft_record.record_metadata_version(state_dir, after, spec.versions.kafka)
    say(f"metadata.version: {before} (already the newest {spec.versions.kafka} supports)" if before == after
        else f"metadata.version: {before} -> {after} (every node runs Kafka {spec.versions.kafka};"
             " a raised metadata.version is not lowered again)")
    return before, after
