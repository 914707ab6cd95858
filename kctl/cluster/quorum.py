"""The KRaft controller quorum as its controllers answer: `kafka-metadata-quorum.sh describe --status`, asked
inside a controller's node, and the wait for a whole quorum (a leader, every voter, no lag, the cluster's id)
that the migration, its finalize and a roll of the controllers' nodes gate on."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kctl import contract
from kctl.cluster import health
from kctl.errors import ClusterError, KctlError
from kctl.kraft import config as kc
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import engines

QUORUM_TOOL = "kafka-metadata-quorum.sh"


@dataclass
class Quorum:
    """The KRaft controller quorum as `kafka-metadata-quorum.sh describe --status` reports it."""

    cluster_id: str | None = None
    leader: int | None = None
    epoch: int | None = None
    high_watermark: int | None = None
    max_follower_lag: int | None = None
    voters: list[int] = field(default_factory=list)
    observers: list[int] = field(default_factory=list)  # KRaft brokers following the metadata log


def parse_quorum(text: str) -> Quorum:
    """Pure: the fields of `kafka-metadata-quorum.sh describe --status` (3.7+ prints voters as JSON objects
    with an "id", older releases as a list of ids)."""
    q = Quorum()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "ClusterId":
            q.cluster_id = value
        elif key in ("LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag") and re.fullmatch(r"-?\d+",
                                                                                                      value):
            setattr(q, {"LeaderId": "leader", "LeaderEpoch": "epoch", "HighWatermark": "high_watermark",
                        "MaxFollowerLag": "max_follower_lag"}[key], int(value))
        elif key in ("CurrentVoters", "CurrentObservers"):
            ids = re.findall(r'"id":\s*(-?\d+)', value) or re.findall(r"-?\d+", value)
            setattr(q, "voters" if key == "CurrentVoters" else "observers", sorted(int(i) for i in ids))
    return q



def controller_hosts(spec: ClusterSpec) -> list[str]:
    return [spec.zk_host(n) for n in kc.controller_nodes(spec)]


def describe_quorum(spec: ClusterSpec, host: str | None = None) -> Quorum:
    """The quorum as a controller answers, asked from inside ``host`` (the first controller's node)."""
    host = host or controller_hosts(spec)[0]
    bootstrap = ",".join(f"{h}:{kc.CONTROLLER_PORT}" for h in controller_hosts(spec))
    tool = f"{engines.for_spec(spec).kafka_bin}/{QUORUM_TOOL}"
    login = (["--command-config", contract.secret_path(contract.CONTROLLER_CLIENT_FILE)]
             if spec.security.enabled else [])  # the CONTROLLER listener's SASL/PLAIN: a file, no password in argv
    code, out = engines.exec_in(spec, host, ["env", "KAFKA_HEAP_OPTS=-Xmx128m", "KAFKA_JMX_PORT=", tool,
                                             "--bootstrap-controller", bootstrap, *login, "describe", "--status"],
                                timeout=60)  # its error, if any, is on stderr; parse_quorum reads its own keys only
    if code != 0:
        raise ClusterError(f"the controller quorum did not answer ({out.strip()[-300:]})",
                           hint=f"`kctl logs {host} --service controller`")
    return parse_quorum(out)


def _controller_states(spec: ClusterSpec) -> str:
    """Each controller's program as its supervisor reports it (what a quorum that does not answer is waiting for)."""
    states = []
    for host in controller_hosts(spec):
        try:
            state = engines.process_states(spec, host, timeout=30).get("controller")
            said = f"controller {state}" if state else "no controller program"
        except KctlError as exc:
            said = exc.message
        states.append(f"{host}: {said}")
    return "controllers " + ", ".join(states)


def files_agree(spec: ClusterSpec) -> tuple[bool, str]:
    """Every controller's quorum-state file names one leader in one epoch (a `cat` in each node, read in
    parallel): the cheap sign that a quorum has formed. A file outlives its controller's process, so agreement
    is no proof; a disagreement or a missing file is a sure "not yet"."""
    import concurrent.futures as cf

    nodes = kc.controller_nodes(spec)
    with cf.ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        views = list(pool.map(lambda n: health.controller_view(spec, spec.zk_host(n), kc.controller_id(n), 3.0), nodes))
    named = {(v.epoch, v.leader) for v in views}
    saw = ", ".join(f"{v.node}: " + (v.error or f"leader {v.leader} (epoch {v.epoch})") for v in views)
    return all(v.error is None for v in views) and len(named) == 1, saw


def quorum_ready(spec: ClusterSpec, cluster_id: str | None) -> Callable[[], tuple[bool, str]]:
    """A probe of a whole quorum: a leader among the voters, every voter there and caught up, the cluster's id.
    Asked of Kafka's own tool (a JVM, seconds of CPU) only once the controllers' quorum-state files agree on a
    leader; until then those files say what the quorum waits for."""
    want = sorted(kc.controller_id(n) for n in kc.controller_nodes(spec))

    def probe() -> tuple[bool, str]:
        agree, saw = files_agree(spec)
        if not agree:
            return False, f"the controllers' quorum-state files do not agree on a leader yet: {saw}"
        try:
            q = describe_quorum(spec)
        except KctlError as exc:
            return False, f"{exc.message}; {_controller_states(spec)}"
        ok = (q.leader is not None and q.leader in want and q.voters == want and q.max_follower_lag == 0
              and q.cluster_id == cluster_id)
        return ok, (f"leader {q.leader}, voters {q.voters} (want {want}), max follower lag {q.max_follower_lag},"
                    f" cluster id {q.cluster_id}")
    return probe
