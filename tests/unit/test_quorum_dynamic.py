"""The dynamic controller quorum (KIP-853), pure parts: Kafka 4.3's `kafka-metadata-quorum.sh describe --status` and
`--replication` parsed (directory ids, a static quorum's zero one), the gates of a voter's add and removal, the
releases that convert a static quorum, what `kctl quorum` calls a problem, and the render of a dynamic quorum
(controller.quorum.bootstrap.servers, no voters) for controllers and brokers alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from kctl.cluster import quorum as q
from kctl.errors import UsageError
from kctl.kraft import config as kc
from kctl.kraft.phases import Phase, Record
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine.engines import Capability

STATUS_DYNAMIC = """ClusterId:              qwn_MFV-TMOwHJhBeeRGqQ
LeaderId:               3002
LeaderEpoch:            1
HighWatermark:          138
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   120
CurrentVoters:          [{"id": 3001, "directoryId": "blKKprMLSBu5td-8vuxn5w", "endpoints": \
["CONTROLLER://logger1:9095"]}, \
{"id": 3002, "directoryId": "C1m-8ujKVEIvcSbhg6nBow", "endpoints": ["CONTROLLER://logger2:9095"]}, \
{"id": 3003, "directoryId": "_XDXD1l69NFMsbqCyXZoiQ", "endpoints": ["CONTROLLER://logger3:9095"]}]
CurrentObservers:       [{"id": 3, "directoryId": "SyWFhl_wZHWY8MntO3B6KQ"}, \
{"id": 1, "directoryId": "nu7MN0EznTzi7yXNuuzaeQ"}]
"""

STATUS_STATIC = """ClusterId:              qwn_MFV-TMOwHJhBeeRGqQ
LeaderId:               3002
CurrentVoters:          [{"id": 3001, "endpoints": ["CONTROLLER://logger1:9095"]}, {"id": 3002, "endpoints": \
["CONTROLLER://logger2:9095"]}]
"""

REPLICATION = (
    "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus  \t\n"
    "3002  \tC1m-8ujKVEIvcSbhg6nBow\t563         \t0  \t1796494243339     \t1796494243339        \tLeader  \t\n"
    "3001  \tAAAAAAAAAAAAAAAAAAAAAA\t560         \t3  \t1796494243158     \t1796494243158        \tFollower\t\n"
    "3     \tSyWFhl_wZHWY8MntO3B6KQ\t563         \t0  \t1796494243157     \t1796494243157        \tObserver\t\n"
    "3003  \tq8ULDnAGUVkDcLO7AcCQgw\t563         \t0  \t1796494243157     \t1796494243157        \tObserver\t\n"
    "3003  \t_XDXD1l69NFMsbqCyXZoiQ\t350         \t213\t1796494137964     \t1796494137481        \tObserver\t\n"
)


def test_the_voters_directory_ids_are_read_and_a_static_quorum_names_none() -> None:
    assert q.parse_voter_dirs(STATUS_DYNAMIC) == {3001: "blKKprMLSBu5td-8vuxn5w", 3002: "C1m-8ujKVEIvcSbhg6nBow",
                                                  3003: "_XDXD1l69NFMsbqCyXZoiQ"}
    assert q.parse_voter_dirs(STATUS_STATIC) == {3001: None, 3002: None}
    assert q.parse_voter_dirs("ClusterId: x\n") == {}
    assert q.parse_quorum(STATUS_DYNAMIC).voters == [3001, 3002, 3003]  # the older parser still reads it


def test_replication_rows_keep_each_incarnation_of_a_controller_apart() -> None:
    rows = q.parse_replication(REPLICATION)
    assert [(r.id, r.status, r.lag) for r in rows] == [(3002, "Leader", 0), (3001, "Follower", 3), (3, "Observer", 0),
                                                       (3003, "Observer", 0), (3003, "Observer", 213)]
    assert rows[1].directory_id is None  # the zero id of a static quorum's voter
    assert {r.directory_id for r in rows if r.id == 3003} == {"q8ULDnAGUVkDcLO7AcCQgw", "_XDXD1l69NFMsbqCyXZoiQ"}
    assert q.parse_replication("garbage\n\n") == []


def test_a_change_waits_for_a_leader_and_every_voter_within_the_bound_but_the_leaving_one() -> None:
    rows = q.parse_replication(REPLICATION)
    assert q.voters_ok(3002, rows, set())[0]
    okay, saw = q.voters_ok(3002, rows, set(), max_lag=2)
    assert not okay and "3001 (3)" in saw
    assert q.voters_ok(3002, rows, {3001}, max_lag=2)[0]  # the one leaving may lag (a dead controller)
    okay, saw = q.voters_ok(None, rows, set())
    assert not okay and "no leader" in saw


def test_a_removal_below_three_voters_needs_force_and_the_last_one_never_goes() -> None:
    q.check_removal([3001, 3002, 3003, 3004], 3001, force=False)
    q.check_removal([3001, 3002], 3009, force=False)  # not a voter: nothing to refuse
    with pytest.raises(UsageError) as e:
        q.check_removal([3001, 3002, 3003], 3003, force=False)
    assert "leaves 2 voter(s)" in e.value.message and "--force" in (e.value.hint or "")
    q.check_removal([3001, 3002, 3003], 3003, force=True)
    with pytest.raises(UsageError) as e:
        q.check_removal([3001], 3001, force=True)
    assert "only voter" in e.value.message


def test_only_kafka_4_1_or_newer_on_every_node_converts_a_static_quorum() -> None:
    q.check_dynamic_release("4.1.1", {"logger1": "4.1", "logger2": "4.1"})
    q.check_dynamic_release("4.3.1", {"logger1": "4.3"})
    with pytest.raises(UsageError) as e:
        q.check_dynamic_release("3.9.1", {"logger1": "3.9"})
    assert "from Kafka 4.1 on" in e.value.message and "4.1.1" in (e.value.hint or "")
    with pytest.raises(UsageError) as e:
        q.check_dynamic_release("4.3.1", {"logger1": "4.3", "logger2": "4.1"})  # a roll not finished
    assert "do not all run one release" in e.value.message and "logger2: 4.1" in e.value.message
    with pytest.raises(UsageError):
        q.check_dynamic_release("4.3.1", {"logger1": None})  # a node that cannot say (3.9's tool)


def test_the_problems_name_the_command_that_fixes_each() -> None:
    rows = q.parse_replication(REPLICATION)
    dirs = q.parse_voter_dirs(STATUS_DYNAMIC)
    assert q.judge([3001, 3002, 3003], 1, True, 3002, rows, dirs) == []
    said = q.judge([3001, 3002, 3003], 1, False, 3002, rows, dirs)
    assert len(said) == 1 and "kctl quorum make-dynamic" in said[0] and "KAFKA-21426" in said[0]
    said = q.judge([3001, 3002, 3003, 3004], 1, True, None, rows, {3001: "a", 3002: "b", 3005: "c"})
    text = "\n".join(said)
    assert "no leader" in text
    assert "controller 3003 is in kctl.yaml but not a voter (an observer" in text and "add-controller 3" in text
    assert "add-controller 4` once it runs" in text and "remove-controller 3005" in text


def spec(dynamic: bool) -> ClusterSpec:
    s = ClusterSpec.model_validate({"name": "q", "metadata": "kraft", "versions": {"kafka": "4.3.1"}})
    s = s.with_kraft(Phase.kraft.value, "cid")
    return s.with_dynamic_quorum(dynamic)


def test_a_dynamic_quorum_is_named_by_its_bootstrap_servers_on_controllers_and_brokers() -> None:
    static, dynamic = spec(False), spec(True)
    node = dynamic.nodes[0]
    props = kc.controller_properties(dynamic, node, Phase.kraft)
    assert "controller.quorum.voters" not in props
    assert props["controller.quorum.bootstrap.servers"] == "logger1:9095,logger2:9095,logger3:9095"
    assert props["advertised.listeners"] == "CONTROLLER://logger1:9095"  # the endpoint add-controller records
    broker = kc.broker_change(dynamic, node, Phase.kraft, {}).set
    assert "controller.quorum.voters" not in broker and "controller.quorum.bootstrap.servers" in broker
    props = kc.controller_properties(static, node, Phase.kraft)
    assert props["controller.quorum.voters"].startswith("3001@logger1:9095")
    assert "controller.quorum.bootstrap.servers" not in props and "advertised.listeners" not in props


def test_kraft_json_keeps_the_dynamic_quorum_and_an_old_record_reads_static() -> None:
    r = Record(phase=Phase.kraft, quorum="dynamic")
    assert Record.from_json(r.to_json()).quorum == "dynamic"
    assert Record.from_json('{"phase": "kraft"}').quorum is None
    on_zk = ClusterSpec.model_validate({"name": "q"}).with_dynamic_quorum(True)
    assert not on_zk.dynamic_quorum  # only a cluster on KRaft has a controller quorum


def test_every_render_after_the_conversion_names_the_bootstrap_servers(tmp_path: Path) -> None:
    """kraft.json's record is what `kctl up`, `kctl apply` and every roll resolve the spec from: once it says
    dynamic, each node's controller.properties and server.properties name the bootstrap servers, never the voters."""
    from kctl.kraft import phases
    from kctl.model.render import render
    from kctl.model.spec import load_cluster

    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text("name: q\nmetadata: kraft\nversions:\n  kafka: 4.3.1\n")
    state = tmp_path / ".kctl" / "q"
    state.mkdir(parents=True)
    phases.write(state, Record(phase=Phase.kraft, cluster_id="Xy7kQ2fnT3a1bC9dE0fG1h"))
    before, _ = load_cluster(spec_file)
    assert not before.dynamic_quorum
    phases.write(state, phases.read(state).replace(quorum="dynamic"))
    spec, _ = load_cluster(spec_file)
    assert spec.dynamic_quorum
    files = {f"{c.name}/{path}": text for c in render(spec, state).containers for path, text in c.files.items()}
    quorum_files = {k: v for k, v in files.items() if k.endswith(("/controller.properties", "/server.properties"))}
    assert len(quorum_files) == 6, sorted(files)
    for name, text in quorum_files.items():
        assert "controller.quorum.voters" not in text, name
        assert "controller.quorum.bootstrap.servers=logger1:9095,logger2:9095,logger3:9095" in text, name


def secured(dynamic: bool = True) -> ClusterSpec:
    s = ClusterSpec.model_validate({"name": "q", "metadata": "kraft", "versions": {"kafka": "4.3.1"},
                                    "security": {"enabled": True}})
    return s.with_kraft(Phase.kraft.value, "cid").with_dynamic_quorum(dynamic)


def test_the_secured_profile_asks_the_quorum_with_the_admins_controller_login_from_a_file() -> None:
    """describe and remove-controller on the secured profile: the CONTROLLER listener's SASL/PLAIN login, the file
    `kctl status` asks the quorum with; on a plain cluster no login at all."""
    from kctl import contract

    login = f"{contract.SECRETS_DIR}/{contract.CONTROLLER_CLIENT_FILE}"
    argv, user = q.quorum_tool_argv(secured(), "logger1:9095", ["describe", "--status"])
    assert user is None and argv[-4:] == ["--command-config", login, "describe", "--status"], argv
    assert argv[argv.index("--bootstrap-controller") + 1] == "logger1:9095"
    argv, _ = q.quorum_tool_argv(secured(), "logger1:9095", ["remove-controller", "--controller-id", "3002",
                                                              "--controller-directory-id", "x"])
    assert argv[argv.index("--command-config") + 1] == login and argv[-4:-2] == ["--controller-id", "3002"]
    argv, user = q.quorum_tool_argv(spec(True), "logger1:9095", ["describe", "--status"])
    assert user is None and "--command-config" not in argv


def test_a_secured_add_controller_reads_its_own_controller_file_and_the_login_from_a_private_copy(
        tmp_path: Path) -> None:
    """add-controller on the secured profile: one --command-config holding the joiner's controller.properties and
    the admin's login, made by the JVMs' user with umask 077 in the 0700 secrets dir, removed after the run (its
    exit code kept). The script is run here with a stand-in for Kafka's tool, which records its arguments and the
    file's mode and text."""
    import os
    import stat
    import subprocess

    from kctl import contract

    argv, user = q.quorum_tool_argv(secured(), "logger1:9095", ["add-controller"], join=True)
    assert user == f"{contract.JVM_UID}:{contract.JVM_UID}"
    assert argv[:2] == ["sh", "-c"] and "umask 077" in argv[2]
    assert argv[4:7] == [contract.SECRETS_DIR, f"{contract.CONF_DIR}/controller.properties",
                         f"{contract.SECRETS_DIR}/{contract.CONTROLLER_CLIENT_FILE}"]
    assert "kafka-metadata-quorum.sh" in " ".join(argv) and "password" not in " ".join(argv).lower()
    # plain: Kafka's way, the joiner's own controller.properties
    plain, user = q.quorum_tool_argv(spec(True), "logger1:9095", ["add-controller"], join=True)
    assert user is None and plain[-3:] == ["--command-config", f"{contract.CONF_DIR}/controller.properties",
                                           "add-controller"]

    secrets, conf = tmp_path / "secrets", tmp_path / "controller.properties"
    secrets.mkdir(mode=0o700)
    conf.write_text("node.id=3002\nssl.keystore.password=${file:/run/kctl/secrets/passwords.properties:k}\n"
                    "config.providers=file\ncontroller.listener.names=CONTROLLER")  # no newline at its end
    login = secrets / "controller-client.properties"
    login.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    seen = tmp_path / "seen"
    fake = tmp_path / "tool"
    fake.write_text(f'#!/bin/sh\necho "$@" > {seen}; f=$2\nstat -c %a "$f" >> {seen}; cat "$f" >> {seen}\nexit 3\n')
    fake.chmod(0o755)
    script = argv[2]
    run = subprocess.run(["sh", "-c", script, "add-controller", str(secrets), str(conf), str(login), str(fake)],
                         capture_output=True, text=True, timeout=30, env={**os.environ})
    assert run.returncode == 3, run.stderr  # the tool's exit code, kept
    args, mode, *text = seen.read_text().splitlines()
    assert args.startswith("--command-config ") and args.endswith(" add-controller")
    assert mode == "600" and text == ["node.id=3002", "controller.listener.names=CONTROLLER",
                                      "security.protocol=SASL_SSL", "sasl.mechanism=PLAIN"]
    assert list(secrets.iterdir()) == [login]  # the copy removed after the run
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700


def test_the_secured_profile_and_engines_swarm_and_hosts_are_no_longer_refused() -> None:
    q._supported(secured())  # noqa: SLF001  (no refusal)
    swarm = ClusterSpec.model_validate({"name": "q", "metadata": "kraft", "engine": "swarm",
                                        "versions": {"kafka": "4.3.1"}, "security": {"enabled": True}})
    q._supported(swarm.with_kraft(Phase.kraft.value, "cid"))  # noqa: SLF001  (no refusal)
    hosts = ClusterSpec.model_validate({"name": "q", "metadata": "kraft", "engine": "hosts",
                                        "versions": {"kafka": "4.3.1"},
                                        "nodes": [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.0.0.{i}"}
                                                  for i in (1, 2, 3)]})
    q._supported(hosts.with_kraft(Phase.kraft.value, "cid"))  # noqa: SLF001  (no refusal)


def test_an_engine_without_the_capability_is_refused_with_nothing_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.runtime.engine.swarm import SwarmEngine

    monkeypatch.setattr(SwarmEngine, "capabilities", SwarmEngine.capabilities - {Capability.DYNAMIC_QUORUM})
    swarm = ClusterSpec.model_validate({"name": "q", "metadata": "kraft", "engine": "swarm",
                                        "versions": {"kafka": "4.3.1"}})
    with pytest.raises(UsageError, match="not built for engine swarm, which cluster q runs on: nothing was changed"):
        q._supported(swarm.with_kraft(Phase.kraft.value, "cid"))  # noqa: SLF001
