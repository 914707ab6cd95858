"""The KRaft controller quorum as its controllers answer: `kafka-metadata-quorum.sh describe --status`, asked
inside a controller's node, and the wait for a whole quorum (a leader, every voter, no lag, the cluster's id)
that the migration, its finalize and a roll of the controllers' nodes gate on."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kctl import contract
from kctl.cluster import features
from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kafka import controllers
from kctl.kraft import config as kc
from kctl.kraft import phases
from kctl.model.spec import ClusterSpec, NodeSpec
from kctl.runtime.engine import engines, services
from kctl.runtime.engine.engines import Capability
from kctl.wait import wait_until

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
    views = list(controllers.views(spec, 3.0).values())
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


# ----- the dynamic quorum (KIP-853): status, conversion, add-controller, remove-controller --------------------------
# Following Kafka's operations guide for 4.x ("Controller membership changes"): a static quorum (kraft.version 0,
# controller.quorum.voters) turns dynamic by raising kraft.version to 1 (Kafka 4.1+, KAFKA-16538), after which
# every node names the quorum by controller.quorum.bootstrap.servers; a new controller is formatted with
# --no-initial-controllers, starts as an observer, catches up and is promoted by add-controller; a controller
# leaves by remove-controller with its directory id, before it is stopped.

KRAFT_VERSION = "kraft.version"
DYNAMIC_SINCE = (4, 1)  # the first release that upgrades kraft.version 0 -> 1 (a static quorum made dynamic)
MAX_LAG = 100  # records of the metadata log a voter (or a joiner) may be behind the leader for a change to go on
MIN_VOTERS = 3  # fewer voters tolerate no failure: a removal below it needs --force
MAKE_DYNAMIC = "kctl quorum make-dynamic"


@dataclass(frozen=True)
class Replica:
    """One row of `kafka-metadata-quorum.sh describe --replication`: a voter (Leader, Follower) or an Observer."""

    id: int
    directory_id: str | None
    log_end_offset: int | None
    lag: int | None
    status: str  # Leader, Follower, Observer
    last_fetch_ms: int | None = None


def parse_replication(text: str) -> list[Replica]:
    """Pure: the rows of `describe --replication` (tab-separated: NodeId, DirectoryId, LogEndOffset, Lag,
    LastFetchTimestamp, LastCaughtUpTimestamp, Status). A static quorum's voters have the zero directory id
    (AAAAAAAAAAAAAAAAAAAAAA), kept as None."""
    def num(v: str) -> int | None:
        return int(v) if re.fullmatch(r"-?\d+", v) else None

    out = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split("\t")]
        cols = [c for c in cols if c != ""] if len(cols) < 7 else cols
        if len(cols) < 7 or not re.fullmatch(r"\d+", cols[0]):
            continue
        d = cols[1] if cols[1] and set(cols[1]) != {"A"} else None
        out.append(Replica(int(cols[0]), d, num(cols[2]), num(cols[3]), cols[6], num(cols[4])))
    return out


def parse_voter_dirs(text: str) -> dict[int, str | None]:
    """Pure: {voter id: its directory id} of `describe --status`'s CurrentVoters (None: a static quorum's voter,
    which names none)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "CurrentVoters":
            out: dict[int, str | None] = {}
            for obj in re.findall(r"\{[^{}]*\}", value):
                m = re.search(r'"id":\s*(-?\d+)', obj)
                if m:
                    d = re.search(r'"directoryId":\s*"([^"]+)"', obj)
                    out[int(m.group(1))] = d.group(1) if d and set(d.group(1)) != {"A"} else None
            if not out:
                out = {int(i): None for i in re.findall(r"-?\d+", value)}
            return out
    return {}


# The joining controller's add-controller on the secured profile: its own controller.properties (id, directory, the
# endpoint it advertises) and the admin's login to the CONTROLLER listener (SASL/PLAIN), which Kafka's tool reads
# from one --command-config file. That file is made in the node for the one run, by the JVMs' user under umask 077 in
# its secrets directory (0700), and removed after: the password stays in files the node's user alone reads. The
# controller's own TLS settings (its keystore, read through a config provider) are left out: the tool is a client,
# which the login's truststore serves.
JOIN_CONFIG_PREFIX = "add-controller."
_JOIN_SCRIPT = (
    'umask 077; f=$(mktemp "$1/{prefix}XXXXXX") || exit 70; shift; '
    '{{ sed -e "/^ssl\\./d" -e "/^config\\.providers/d" "$1"; echo; cat "$2"; }} > "$f" || {{ rm -f "$f"; exit 70; }}; '
    'shift 2; '
    '"$@" --command-config "$f" add-controller; rc=$?; rm -f "$f"; exit $rc')


def quorum_tool_argv(spec: ClusterSpec, bootstrap: str, args: list[str], *,
                     join: bool = False) -> tuple[list[str], str | None]:
    """Pure: (argv, user) of kafka-metadata-quorum.sh ``args`` in a controller's node. On the secured profile the
    tool logs in to the CONTROLLER listener with the admin's SASL/PLAIN login, a file in the node
    (controller-client.properties, as `kctl status` asks the quorum); ``join`` (add-controller, run in the joining
    controller's node) gives it that controller's own controller.properties with the login added (see above).
    No password is in the argv: they are in files only."""
    tool = f"{engines.for_spec(spec).kafka_bin}/{QUORUM_TOOL}"
    login = contract.secret_path(contract.CONTROLLER_CLIENT_FILE)
    own = f"{contract.CONF_DIR}/controller.properties"
    if join and spec.security.enabled:
        run = ["env", "KAFKA_HEAP_OPTS=-Xmx128m", "KAFKA_JMX_PORT=", "LOG_DIR=/tmp/kctl-quorum-logs", tool,
               "--bootstrap-controller", bootstrap]
        return (["sh", "-c", _JOIN_SCRIPT.format(prefix=JOIN_CONFIG_PREFIX), "add-controller", contract.SECRETS_DIR,
                 own, login, *run], f"{contract.JVM_UID}:{contract.JVM_UID}")
    command_config = own if join else login if spec.security.enabled else None
    config = (["--command-config", command_config] if command_config else [])
    return (["env", "KAFKA_HEAP_OPTS=-Xmx128m", "KAFKA_JMX_PORT=", tool, "--bootstrap-controller", bootstrap,
             *config, *(["add-controller"] if join else args)], None)


def _quorum_tool(spec: ClusterSpec, args: list[str], *, host: str | None = None, skip: set[str] | None = None,
                 join: bool = False, timeout: float = 60) -> tuple[int, str, str]:
    """kafka-metadata-quorum.sh ``args`` in a controller's node (the first whose node is not in ``skip``), against
    the controllers kctl.yaml names: (exit code, output, the node asked in). ``join``: add-controller of ``host``'s
    controller (:func:`quorum_tool_argv`)."""
    hosts = [h for h in controller_hosts(spec) if h not in (skip or set())]
    if not hosts:
        raise ClusterError("no controller's node to ask the quorum from")
    host = host or hosts[0]
    bootstrap = ",".join(f"{h}:{kc.CONTROLLER_PORT}" for h in hosts)
    argv, user = quorum_tool_argv(spec, bootstrap, args, join=join)
    code, out = engines.exec_in(spec, host, argv, user=user, timeout=timeout)
    return code, out, host


def _describe(spec: ClusterSpec, what: str, skip: set[str] | None = None) -> str:
    code, out, host = _quorum_tool(spec, ["describe", what], skip=skip)
    if code != 0:
        raise ClusterError(f"the controller quorum did not answer ({out.strip()[-300:]})",
                           hint=f"`kctl logs {host} --service controller`")
    return out


@dataclass
class QuorumStatus:
    """`kctl quorum`: the quorum as its leader reports it, beside what kctl.yaml and kraft.json say."""

    cluster: str
    kraft_version: int | None  # the finalized kraft.version: 0 static, 1 dynamic
    dynamic: bool  # kraft.version >= 1
    rendered: str  # what kctl renders: "controller.quorum.voters" or "controller.quorum.bootstrap.servers"
    leader: int | None
    epoch: int | None
    high_watermark: int | None
    voters: list[dict[str, object]]  # {id, node, directory_id, lag, status, last_fetch_ms}
    observers: list[dict[str, object]]
    problems: list[str] = field(default_factory=list)  # what does not match, with the command that fixes it


def node_of_controller(spec: ClusterSpec) -> dict[int, str]:
    """{controller id: its node's host} for the controllers kctl.yaml names."""
    return {kc.controller_id(n): spec.zk_host(n) for n in kc.controller_nodes(spec)}


def _row(r: Replica, hosts: dict[int, str]) -> dict[str, object]:
    return {"id": r.id, "node": hosts.get(r.id) or hosts.get(r.id + kc.CONTROLLER_ID_BASE, ""),
            "directory_id": r.directory_id, "log_end_offset": r.log_end_offset, "lag": r.lag, "status": r.status,
            "last_fetch_ms": r.last_fetch_ms}


def judge(spec_voters: list[int], kraft_version: int | None, rendered_dynamic: bool, leader: int | None,
          replicas: list[Replica], voter_dirs: dict[int, str | None], max_lag: int = MAX_LAG) -> list[str]:
    """Pure: what is wrong with the quorum against kctl.yaml's controllers (``spec_voters``), each with its fix."""
    problems = []
    if leader is None:
        problems.append("no leader: the quorum cannot change its metadata (a majority of the voters is down?)")
    if kraft_version is not None and kraft_version >= 1 and not rendered_dynamic:
        problems.append(f"kraft.version is {kraft_version} (dynamic) but kctl still renders controller.quorum.voters"
                        " (raised outside kctl, e.g. kafka-features.sh --release-version, KAFKA-21426):"
                        f" `{MAKE_DYNAMIC}` records it and rolls the nodes onto controller.quorum.bootstrap.servers")
    voters = set(voter_dirs)
    for cid in sorted(set(spec_voters) - voters):
        joining = [r for r in replicas if r.id == cid and r.status == "Observer"]
        problems.append(f"controller {cid} is in kctl.yaml but not a voter"
                        + (" (an observer: its promotion did not finish): `kctl quorum add-controller"
                           f" {cid - kc.CONTROLLER_ID_BASE}`" if joining else
                           f": `kctl quorum add-controller {cid - kc.CONTROLLER_ID_BASE}` once it runs"))
    for vid in sorted(voters - set(spec_voters)):
        problems.append(f"voter {vid} is not a controller kctl.yaml names: `kctl quorum remove-controller {vid}`")
    for r in replicas:
        if r.status in ("Leader", "Follower") and (r.lag is None or r.lag > max_lag):
            problems.append(f"voter {r.id} lags {r.lag} records behind the leader (bound {max_lag})")
    return problems


def kraft_version(spec: ClusterSpec) -> int | None:
    """The finalized kraft.version (kafka-features.sh describe, as `kctl features`)."""
    f = features.describe(spec).get(KRAFT_VERSION)
    return int(f.finalized) if f is not None and f.finalized and f.finalized.isdigit() else 0


def status(spec: ClusterSpec) -> QuorumStatus:
    if not spec.on_kraft:
        raise UsageError(f"cluster {spec.name} keeps its metadata in ZooKeeper: it has no controller quorum",
                         hint="`kctl migrate kraft` moves it to KRaft")
    text = _describe(spec, "--status")
    q, dirs = parse_quorum(text), parse_voter_dirs(text)
    replicas = parse_replication(_describe(spec, "--replication"))
    kv = kraft_version(spec)
    hosts = node_of_controller(spec)
    by_id = {b.id: spec.kafka_host(b) for b in spec.brokers}
    voters = [_row(r, hosts) for r in replicas if r.status in ("Leader", "Follower")]
    observers = [{**_row(r, hosts), "node": hosts.get(r.id) or by_id.get(r.id, "")} for r in replicas
                 if r.status == "Observer"]
    for v in voters:  # --replication names no directory id on a static quorum; --status may
        v["directory_id"] = v["directory_id"] or dirs.get(int(str(v["id"])))
    return QuorumStatus(spec.name, kv, bool(kv and kv >= 1),
                        "controller.quorum.bootstrap.servers" if spec.dynamic_quorum else "controller.quorum.voters",
                        q.leader, q.epoch, q.high_watermark, voters, observers,
                        judge(sorted(hosts), kv, spec.dynamic_quorum, q.leader, replicas, dirs))


def _supported(spec: ClusterSpec) -> None:
    """What the dynamic quorum's changes are built for here: one message, nothing changed, otherwise."""
    if not spec.on_kraft:
        raise UsageError(f"cluster {spec.name} keeps its metadata in ZooKeeper: it has no controller quorum",
                         hint="`kctl migrate kraft` moves it to KRaft first")
    if not engines.supports(spec, Capability.DYNAMIC_QUORUM):
        raise UsageError(f"the dynamic controller quorum is not built for engine {spec.engine.value}, which cluster"
                         f" {spec.name} runs on: nothing was changed",
                         hint="its quorum stays static (controller.quorum.voters); docs/kraft.md, \"Static and"
                              " dynamic quorums\"")


def _release(version: str | None) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else ()


def check_dynamic_release(kafka_version: str, node_releases: dict[str, str | None]) -> None:
    """Pure: refuse the conversion unless kctl.yaml's release and every node's are Kafka 4.1 or newer, and one."""
    since = ".".join(map(str, DYNAMIC_SINCE))
    if _release(kafka_version) < DYNAMIC_SINCE:
        raise UsageError(f"a static controller quorum turns dynamic from Kafka {since} on (kraft.version 1,"
                         f" KAFKA-16538); this cluster runs Kafka {kafka_version}: nothing was changed",
                         hint=f"upgrade first (versions.kafka: 4.1.1 or newer, `kctl apply`), then `{MAKE_DYNAMIC}`")
    older = sorted(h for h, r in node_releases.items() if _release(r) < DYNAMIC_SINCE)
    if older or len(set(node_releases.values())) > 1:
        said = ", ".join(f"{h}: {r or 'unknown'}" for h, r in sorted(node_releases.items()))
        raise UsageError(f"the nodes do not all run one release of Kafka {since}+ ({said}): nothing was changed",
                         hint="`kctl apply` finishes the roll onto the new release; then `" + MAKE_DYNAMIC + "`")


def make_dynamic(spec: ClusterSpec, state_dir: Path, say: Callable[[str], None]) -> str:
    """Raise kraft.version to 1 (the leader writes the voters with their directory ids to the metadata log) and
    record the dynamic quorum in kraft.json, so that every render names controller.quorum.bootstrap.servers. The
    caller rolls the nodes onto the new files (`kctl apply`'s gated roll). Rerun at any point: a raised
    kraft.version is found raised, a recorded quorum recorded."""
    _supported(spec)
    record = phases.read(state_dir)
    if record.migrating:
        raise UsageError("the quorum is converted once a migration to KRaft is finalized: nothing was changed",
                         hint="`kctl migrate kraft status`")
    kv = kraft_version(spec)
    if not kv:
        levels = features.node_levels(spec)
        check_dynamic_release(spec.versions.kafka, {n.host: n.release for n in levels})
        wait_until("the quorum has a leader and every voter caught up",
                   lambda: _healthy_voters(spec, set()), 60, poll=2.0)
        host = spec.kafka_host(spec.brokers[0])
        features._tool(spec, host, "upgrade", "--feature", f"{KRAFT_VERSION}=1")  # noqa: SLF001
        kv = kraft_version(spec)
        if not kv:
            raise ClusterError("kafka-features.sh upgrade --feature kraft.version=1 answered, but kraft.version is"
                               " still 0", hint="`kctl features`; `kctl quorum make-dynamic` again")
        say("kraft.version: 0 -> 1 (the quorum is dynamic: its voters, with their directory ids, are in the"
            " metadata log; it is not made static again)")
    else:
        say(f"kraft.version is already {kv}")
    if record.quorum != "dynamic":
        phases.write(state_dir, record.replace(quorum="dynamic"))
        say("kraft.json: quorum dynamic (every node's files now name controller.quorum.bootstrap.servers)")
    return f"kraft.version {kv}"


def _healthy_voters(spec: ClusterSpec, leaving: set[int], max_lag: int = MAX_LAG,
                    text: tuple[str, str] | None = None) -> tuple[bool, str]:
    """A probe: a leader, and every voter but ``leaving`` caught up within ``max_lag`` records."""
    try:
        status_text, rep_text = text or (_describe(spec, "--status"), _describe(spec, "--replication"))
    except KctlError as exc:
        return False, exc.message
    return voters_ok(parse_quorum(status_text).leader, parse_replication(rep_text), leaving, max_lag)


def voters_ok(leader: int | None, replicas: list[Replica], leaving: set[int],
              max_lag: int = MAX_LAG) -> tuple[bool, str]:
    """Pure: the quorum may change: it has a leader, and every voter but ``leaving`` is within ``max_lag``."""
    if leader is None:
        return False, "the quorum has no leader"
    voters = [r for r in replicas if r.status in ("Leader", "Follower") and r.id not in leaving]
    behind = [f"{r.id} ({r.lag})" for r in voters if r.lag is None or r.lag > max_lag]
    if behind:
        return False, f"voter(s) lagging beyond {max_lag} records: {', '.join(behind)}"
    return True, f"leader {leader}, voters {sorted(r.id for r in voters)} within {max_lag} records"


def check_removal(voter_ids: list[int], leaving: int, force: bool) -> None:
    """Pure: refuse a removal that leaves no quorum, or fewer than :data:`MIN_VOTERS` voters without --force."""
    if leaving not in voter_ids:
        return
    rest = len(voter_ids) - 1
    if rest < 1:
        raise UsageError(f"controller {leaving} is the quorum's only voter: removing it leaves no quorum; nothing was"
                         " changed", hint="add a controller first (`kctl node add --role controller`)")
    if rest < MIN_VOTERS and not force:
        raise UsageError(f"removing voter {leaving} leaves {rest} voter(s): a quorum of {rest} survives no failure"
                         f" (fewer than {MIN_VOTERS}); nothing was changed",
                         hint="add a controller first (`kctl node add --role controller`), or pass --force to"
                              " accept it (a failed controller's replacement: remove, reformat, add back)")


def directory_id(spec: ClusterSpec, host: str) -> str | None:
    """The directory id in the controller's own meta.properties on ``host`` (None: its storage is not formatted)."""
    code, out = engines.exec_in(spec, host, ["cat", f"{kc.METADATA_DIR}/meta.properties"], timeout=30)
    if code != 0:
        return None
    m = re.search(r"^directory\.id=(\S+)", out, re.MULTILINE)
    return m.group(1) if m else None


def format_joining(spec: ClusterSpec, host: str) -> str:
    """Format ``host``'s empty controller storage to join the dynamic quorum (--no-initial-controllers), as the
    controller's own user, with the cluster's id: what the image's start script does for a static quorum (which it
    cannot tell from a dynamic one). Its program, waiting as UNFORMATTED, then starts the controller, an observer."""
    if directory_id(spec, host) is not None:
        return f"{host}: the controller's storage is formatted already"

    # Only once its program waits as UNFORMATTED: a node's start makes its data directory the service user's
    # first, and a format run before that (just after `kctl node add` started the container) failed with
    # "mkdir: cannot create directory '/var/opt/kctl/controller': Permission denied".
    def waiting() -> tuple[bool, str]:
        state = services.process_state(spec, host, "controller")
        return state == "UNFORMATTED", f"{host}'s controller {state}"

    wait_until(f"{host}'s controller waiting for its storage (UNFORMATTED)", waiting, 120.0, poll=0.5,
               hint=f"`kctl logs {host} --service controller`; run the same command again")
    kafka_bin = engines.for_spec(spec).kafka_bin
    script = ("set -e; mkdir -p \"$1\"; "
              f"env -u KAFKA_JMX_PORT -u KAFKA_OPTS KAFKA_HEAP_OPTS=-Xmx128m LOG_DIR=/tmp/kctl-format-logs"
              f" {kafka_bin}/kafka-storage.sh format --cluster-id=\"$(tr -d '[:space:]' < {contract.CONF_DIR}/"
              f"cluster-id)\" --config {contract.CONF_DIR}/controller.properties --no-initial-controllers")
    code, out = engines.exec_in(spec, host, ["sh", "-c", script, "format", kc.METADATA_DIR],
                                user=f"{contract.JVM_UID}:{contract.JVM_UID}", timeout=120)
    if code != 0:
        raise ClusterError(f"{host}: kafka-storage.sh format --no-initial-controllers failed: {out.strip()[-400:]}",
                           hint=f"`kctl logs {host} --service controller`; run the same command again")
    return f"{host}: controller storage formatted to join the quorum (directory id {directory_id(spec, host)})"


def add_controller(spec: ClusterSpec, host: str, *, timeout: float = 300, max_lag: int = MAX_LAG,
                   say: Callable[[str], None] | None = None) -> str:
    """Promote ``host``'s controller (formatted with --no-initial-controllers, running as an observer) to a voter:
    gated on a leader and every voter within ``max_lag``, and on the joiner having caught up to within
    ``max_lag``; `add-controller` run in its own node with its own controller.properties (Kafka's way: the tool
    reads its id, directory id and endpoint from it). Rerun: a voter already is one."""
    say = say or (lambda _m: None)
    _supported(spec)
    if not spec.dynamic_quorum:
        raise UsageError(f"the controller quorum of {spec.name} is static (controller.quorum.voters): a voter is"
                         " added only to a dynamic quorum; nothing was changed",
                         hint=f"`{MAKE_DYNAMIC}` converts it (Kafka 4.1+)")
    cid = next((c for c, h in node_of_controller(spec).items() if h == host), None)
    if cid is None:
        raise UsageError(f"{host} runs no controller kctl.yaml names", hint="`kctl quorum` lists the controllers")
    did = directory_id(spec, host)
    if did is None:
        raise UsageError(f"{host}'s controller storage is not formatted: nothing to add",
                         hint=f"`kctl node format-storage {host} --service controller` first")
    dirs = parse_voter_dirs(_describe(spec, "--status"))
    if cid in dirs:
        if dirs[cid] in (did, None):
            return f"controller {cid} ({host}) is a voter already (directory id {did})"
        raise UsageError(f"voter {cid} is in the quorum with directory id {dirs[cid]}, not {host}'s {did} (its"
                         " storage was lost and made again): nothing was changed",
                         hint=f"`kctl quorum remove-controller {host} --directory-id {dirs[cid]}` first")

    def caught_up() -> tuple[bool, str]:
        try:
            st, rep = _describe(spec, "--status"), _describe(spec, "--replication")
        except KctlError as exc:
            return False, exc.message
        ok, saw = voters_ok(parse_quorum(st).leader, parse_replication(rep), set(), max_lag)
        me = [r for r in parse_replication(rep) if r.id == cid and r.directory_id == did]
        if not me:
            return False, f"{saw}; controller {cid} ({did}) not fetching yet"
        lag = me[0].lag
        return ok and lag is not None and lag <= max_lag, f"{saw}; controller {cid} lags {lag}"

    res = wait_until(f"controller {cid} caught up as an observer, the quorum healthy", caught_up, timeout, poll=2.0)
    say(f"ok  controller {cid} caught up ({res.seconds:.1f}s): {res.saw}")
    voters_now = [h for c, h in node_of_controller(spec).items() if c in dirs]
    code, out, _ = _quorum_tool(spec, ["add-controller"], host=host, join=True,
                                skip=set(controller_hosts(spec)) - set(voters_now), timeout=120)
    if code != 0 and cid not in parse_voter_dirs(_describe(spec, "--status")):
        raise ClusterError(f"add-controller {cid} failed: {out.strip().splitlines()[-1] if out.strip() else code}",
                           hint=f"`kctl quorum`; `kctl quorum add-controller {host}` again (it waits for the"
                                " controller to catch up first)")

    def added() -> tuple[bool, str]:
        d = parse_voter_dirs(_describe(spec, "--status"))
        return d.get(cid) == did, f"voters {sorted(d)}"

    res = wait_until(f"controller {cid} a voter", added, 60, poll=1.0)
    return f"controller {cid} ({host}, directory id {did}) added: {res.saw}"


def remove_controller(spec: ClusterSpec, ref: str, *, directory: str | None = None, force: bool = False,
                      max_lag: int = MAX_LAG, say: Callable[[str], None] | None = None) -> str:
    """remove-controller of voter ``ref`` (a node of kctl.yaml, or a controller id) with its directory id (the
    quorum's own, unless ``directory`` names one), asked of the other voters; gated on a leader, every other voter
    within ``max_lag``, and at least :data:`MIN_VOTERS` voters left (``force``). Rerun: a voter gone is gone."""
    _supported(spec)
    if not spec.dynamic_quorum:
        raise UsageError(f"the controller quorum of {spec.name} is static (controller.quorum.voters): a voter is"
                         " removed only from a dynamic quorum; nothing was changed",
                         hint=f"`{MAKE_DYNAMIC}` converts it (Kafka 4.1+)")
    hosts = node_of_controller(spec)
    if ref.isdigit() and int(ref) >= kc.CONTROLLER_ID_BASE:
        cid = int(ref)
    else:
        node = spec.node(ref)
        cid = kc.controller_id(node)
    host = hosts.get(cid)
    st = _describe(spec, "--status", skip={host} if host else None)
    dirs = parse_voter_dirs(st)
    if cid not in dirs:
        return f"controller {cid} is not a voter (removed already)"
    did = directory or dirs[cid]
    if did is None:
        raise UsageError(f"voter {cid} has no directory id in the quorum (a static quorum's voter)",
                         hint=f"`{MAKE_DYNAMIC}` first")
    check_removal(sorted(dirs), cid, force)
    res = wait_until("the quorum has a leader and every other voter caught up",
                     lambda: _healthy_voters(spec, {cid}, max_lag), 30, poll=2.0)
    (say or (lambda _m: None))(f"ok  {res.saw}")
    code, out, _ = _quorum_tool(spec, ["remove-controller", "--controller-id", str(cid),
                                       "--controller-directory-id", did], skip={host} if host else None, timeout=120)
    if code != 0 and cid in parse_voter_dirs(_describe(spec, "--status", skip={host} if host else None)):
        raise ClusterError(f"remove-controller {cid} failed: {out.strip().splitlines()[-1] if out.strip() else code}",
                           hint="`kctl quorum`; run the same command again")

    def gone() -> tuple[bool, str]:
        d = parse_voter_dirs(_describe(spec, "--status", skip={host} if host else None))
        return cid not in d, f"voters {sorted(d)}"

    res = wait_until(f"controller {cid} no longer a voter", gone, 60, poll=1.0)
    return f"controller {cid} (directory id {did}) removed from the quorum: {res.saw}"


def _require_dynamic(spec: ClusterSpec, what: str) -> None:
    _supported(spec)
    if not spec.dynamic_quorum:
        raise UsageError(f"the controller quorum of {spec.name} is static (controller.quorum.voters): {what} only"
                         " with a dynamic quorum (KIP-853); nothing was changed",
                         hint=f"`{MAKE_DYNAMIC}` converts it (Kafka 4.1+)")


def check_can_grow(spec: ClusterSpec) -> None:
    """`kctl node add --role controller`: before anything is written. A controller of kctl.yaml that is not a
    voter (an add killed between its format and its promotion) is finished first, not joined by another."""
    _require_dynamic(spec, "a controller is added")
    voters = parse_voter_dirs(_describe(spec, "--status"))
    pending = [h for c, h in node_of_controller(spec).items() if c not in voters]
    if pending:
        raise UsageError(f"{', '.join(pending)} runs a controller kctl.yaml names that is not a voter (an add or a"
                         " replacement not finished): nothing was changed",
                         hint=f"`kctl quorum add-controller {pending[0]}` finishes it (`kctl quorum` shows the quorum)")


def check_can_shrink(spec: ClusterSpec, node: NodeSpec, force: bool) -> None:
    """`kctl node remove` of a controller's node: before anything is changed (the voters asked, unless gone)."""
    _require_dynamic(spec, "a controller is removed")
    cid = kc.controller_id(node)
    dirs = parse_voter_dirs(_describe(spec, "--status", skip={spec.zk_host(node)}))
    check_removal(sorted(dirs), cid, force)


def is_voter(spec: ClusterSpec, node: NodeSpec) -> bool:
    return kc.controller_id(node) in parse_voter_dirs(_describe(spec, "--status", skip={spec.zk_host(node)}))
