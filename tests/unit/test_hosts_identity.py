"""engine hosts: whose host it is (kctl/runtime/engine/host_identity.py). The observation script runs for real in a
shell here, on directories of the test's own; the decisions are pure. Nothing here reaches a host."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kctl import contract
from kctl.errors import KctlError
from kctl.model.spec import ClusterSpec
from kctl.runtime.engine import host_identity as hid
from kctl.runtime.engine import hosts

UID = "0f" * 16


def spec(state_dir: str = "/tmp/kctl-state") -> ClusterSpec:
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    return ClusterSpec.model_validate({"engine": "hosts", "name": "hl", "nodes": nodes, "state_dir": state_dir,
                                       "ssh": {"user": "ops"}})


def ident(cluster: str = "hl", uid: str = UID, node: str = "logger1", nid: int = 1) -> dict[str, str]:
    return {"cluster": cluster, "uid": uid, "node": node, "id": str(nid)}


WANT = hid.Expected("hl", UID, "logger1", 1)


def test_the_identity_file_names_cluster_uid_and_node_and_reads_back() -> None:
    s = spec()
    text = hid.identity_text(s, UID, "logger2", s.nodes[1])
    assert text.startswith("# kctl: this host is node logger2 (id 2) of cluster hl")
    assert hid.parse_identity(text) == ident(node="logger2", nid=2)
    # as the observation prints it: one line, blank-separated
    assert hid.parse_identity("cluster=hl uid=x node=logger1 id=1 ") == ident(uid="x")


def test_the_uid_is_made_once_and_kept(tmp_path: Path) -> None:
    assert hid.read_uid(tmp_path) is None
    made = hid.ensure_uid(tmp_path)
    assert len(made) == 32 and hid.ensure_uid(tmp_path) == made == hid.read_uid(tmp_path)
    assert (tmp_path / contract.CLUSTER_UID_FILE).read_text() == made + "\n"


def test_the_data_dirs_are_the_root_and_what_the_rendered_files_name() -> None:
    s = spec()
    dirs = hid.data_dirs(s, s.nodes[0], ("zookeeper", "kafka"))
    assert dirs[0] == contract.DATA_ROOT
    assert all(d.startswith(contract.DATA_ROOT) for d in dirs) and len(dirs) >= 3
    assert hid.data_dirs(s, s.nodes[0], ("zookeeper",)) != dirs  # no Kafka log dir without a broker


def test_the_observation_script_tells_absent_empty_marked_and_foreign_data_apart(tmp_path: Path) -> None:
    absent, empty, marked, data = (tmp_path / n for n in ("absent", "empty", "marked", "data dir"))
    empty.mkdir()
    marked.mkdir()
    (marked / contract.DATA_MARKER).write_text(hid.identity_text(spec(), UID, "logger1", spec().nodes[0]))
    (marked / "version-2").mkdir()
    data.mkdir()
    (data / "myid").write_text("7\n")
    out = subprocess.run(["sh", "-c", hid.observe_script([str(absent), str(empty), str(marked), str(data)])],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    facts = hid.parse_facts(out)
    assert [(d.path, d.state) for d in facts.dirs] == [(str(absent), "absent"), (str(empty), "empty"),
                                                        (str(marked), "marked"), (str(data), "data")]
    assert facts.dirs[2].marker == ident()


def test_a_bare_host_or_this_nodes_own_is_fine() -> None:
    assert hid.problems(WANT, hid.HostFacts("m1", None, None)) == []
    mine = hid.HostFacts("m1", ident(), None, (hid.DirState("/var/opt/kctl", "marked", ident()),
                                                hid.DirState("/var/opt/kctl/kafka/data", "data")))
    assert hid.problems(WANT, mine) == []  # data of its own install (written before the markers)
    # an earlier kctl's install (bundle.env, no identity) of this very node
    assert hid.problems(WANT, hid.HostFacts("m1", None, {"cluster": "hl", "node": "logger1"},
                                            (hid.DirState("/var/opt/kctl", "data"),))) == []


@pytest.mark.parametrize(("facts", "said"), [
    (hid.HostFacts("m", ident(cluster="other", uid="aa"), None),
     "/etc/kctl/identity says it is node logger1 (id 1) of cluster 'other' (uid aa), another cluster"),
    (hid.HostFacts("m", ident(uid="bb"), None), "of cluster 'hl' (uid bb), another cluster than this state dir's"),
    (hid.HostFacts("m", ident(node="logger2", nid=2), None), "another node of this cluster, not logger1 (id 1)"),
    (hid.HostFacts("m", None, {"cluster": "hl", "node": "logger3"}),
     "it holds kctl's install of node logger3 of cluster 'hl'"),
    (hid.HostFacts("m", None, None, (hid.DirState("/var/opt/kctl/zookeeper/snapshots", "data"),)),
     "/var/opt/kctl/zookeeper/snapshots holds data that kctl did not install there"),
    (hid.HostFacts("m", None, None, (hid.DirState("/data/kafka", "marked", ident(node="logger2", nid=2)),)),
     "/data/kafka holds the data of node logger2 (id 2)"),
])
def test_another_clusters_or_nodes_host_or_data_is_refused(facts: hid.HostFacts, said: str) -> None:
    found = hid.problems(WANT, facts)
    assert len(found) == 1 and said in found[0], found


def test_a_state_dir_without_a_uid_owns_no_host_that_has_one() -> None:
    fresh = hid.Expected("hl", None, "logger1", 1)
    (why,) = hid.problems(fresh, hid.HostFacts("m", ident(), None))
    assert "no uid yet: it never installed this cluster on hosts" in why


def test_down_without_volumes_leaves_unmarked_data_alone_and_does_not_refuse_it() -> None:
    facts = hid.HostFacts("m", None, None, (hid.DirState("/var/opt/kctl", "data"),))
    assert hid.problems(WANT, facts, data=False) == []
    assert hid.problems(WANT, facts, data=True) != []


def test_two_nodes_on_one_machine() -> None:
    assert hid.same_machines([("logger1 (a)", "m1"), ("logger2 (b)", "m2"), ("logger3 (c)", "m1"),
                              ("logger4 (d)", None), ("logger5 (e)", None)]) == [
        "logger1 (a) and logger3 (c) are one machine (/etc/machine-id m1)"]


def test_preflight_refuses_foreign_hosts_with_one_message_before_any_change(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    state = tmp_path / "state"
    s = spec(str(state))
    facts = {1: hid.HostFacts("m1", None, None), 2: hid.HostFacts("m2", ident(cluster="zz", node="logger1"), None),
             3: hid.HostFacts("m1", None, None)}
    monkeypatch.setattr(hosts.HostsEngine, "host_checks",
                        lambda self, sp: [(n, None, facts[n.id]) for n in sp.nodes])
    with pytest.raises(KctlError) as err:
        hosts.HostsEngine().preflight(s, {}, None, lambda _m: None)
    msg = err.value.message
    assert msg.startswith("refusing to install: the hosts are not all this cluster's nodes; nothing was changed"
                          " on any host")
    assert "logger2 (10.9.0.2): /etc/kctl/identity says it is node logger1 (id 1) of cluster 'zz'" in msg
    assert "logger1 (10.9.0.1) and logger3 (10.9.0.3) are one machine (/etc/machine-id m1)" in msg
    assert "nodes[].advertised_host" in (err.value.hint or "")
    assert not state.exists()  # not even the uid is made before the hosts pass


def test_down_is_refused_on_a_foreign_host_before_anything_stops(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    s = spec(str(tmp_path))
    foreign = hid.HostFacts("m3", None, None, (hid.DirState(contract.DATA_ROOT, "data"),))
    monkeypatch.setattr(hosts.HostsEngine, "host_facts",
                        lambda self, sp, nodes: [(n, foreign if n.id == 3 else None) for n in nodes])
    eng = hosts.HostsEngine()
    eng.check_before_down(s, tmp_path, volumes=False)  # unmarked data is kept by a plain down: not refused
    with pytest.raises(KctlError) as err:
        eng.check_before_down(s, tmp_path, volumes=True)
    assert err.value.message.startswith("refusing to uninstall and delete the data:")
    assert f"logger3 (10.9.0.3): {contract.DATA_ROOT} holds data that kctl did not install there" in err.value.message


def test_install_sh_and_kctl_prepare_check_the_identity_before_writing() -> None:
    """The host's own check, for a bundle installed by hand: in install.sh before its first write, in
    kctl-prepare before a myid is written (the scripts run as root on a host: their order is what is checked
    here, their refusals by tests/integration/test_hosts.py)."""
    here = Path(hosts.__file__).parent / "host"
    install = (here / "install.sh").read_text()
    assert install.index("/etc/kctl/identity") < install.index("groupadd")
    assert "did not install here" in install
    prepare = (here / "kctl-prepare").read_text()
    assert prepare.index("refusing to rewrite it") < prepare.index('install -m 0644 -o "$U" -g "$U" "$CONF_DIR/myid"')
    for script in (here / "install.sh", here / "kctl-prepare"):
        subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
