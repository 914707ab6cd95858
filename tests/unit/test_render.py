"""Rendering: golden files, determinism, the seed's lines, and a hypothesis sweep."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kctl.errors import SpecError
from kctl.model.render import COMPOSE_FILE, render, write
from kctl.model.spec import parse_spec

GOLDEN = Path(__file__).parent / "golden"

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "split": {"topology": "split"},
    "observer": {"nodes": [{"id": 1, "hostname": "logger1"}, {"id": 2, "hostname": "logger2"},
                           {"id": 3, "hostname": "logger3"},
                           {"id": 4, "hostname": "logger4", "role": "observer"}]},
    "secure": {"security": {"enabled": True}},
    "swarm": {"engine": "swarm", "nodes": [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.0.0.{i}"}
                                           for i in (1, 2, 3)]},
    # `kctl node add --no-broker --role observer`: a ZooKeeper-only fourth node
    "zk-only": {"nodes": [{"id": 1, "hostname": "logger1"}, {"id": 2, "hostname": "logger2"},
                          {"id": 3, "hostname": "logger3"},
                          {"id": 4, "hostname": "logger4", "role": "observer", "broker": False}]},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    spec, _ = parse_spec(CASES[case])
    files = render(spec).files
    root = GOLDEN / case
    if os.environ.get("KCTL_UPDATE_GOLDEN"):
        shutil.rmtree(root, ignore_errors=True)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    expected = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    assert sorted(files) == sorted(expected)
    for rel, text in files.items():
        assert text == expected[rel], f"{case}/{rel} differs from the golden file"


def test_deterministic() -> None:
    spec, _ = parse_spec({})
    assert render(spec).files == render(spec).files


def test_seed_lines() -> None:
    spec, _ = parse_spec({})
    files = render(spec).files
    for i in (1, 2, 3):
        zoo, dynamic = files[f"logger{i}/conf/zoo.cfg"], files[f"logger{i}/conf/zoo.cfg.dynamic"]
        # The ensemble lives in the dynamic config file (ZooKeeper 3.5+), so that reconfig can change it.
        assert "reconfigEnabled=true\n" in zoo and "dynamicConfigFile=/etc/kctl/zoo.cfg.dynamic\n" in zoo
        assert "server." not in zoo
        for j in (1, 2, 3):
            assert f"server.{j}=logger{j}:2888:3888:participant;2181\n" in dynamic
        assert files[f"logger{i}/conf/myid"].strip() == str(i)
        props = files[f"logger{i}/conf/server.properties"]
        assert f"broker.id={i}\n" in props
        assert "zookeeper.connect=logger1:2181,logger2:2181,logger3:2181\n" in props
        assert f"advertised.listeners=INTERNAL://logger{i}:9092,EXTERNAL://127.0.0.1:{19091 + i}\n" in props
        assert "dataLogDir=/var/opt/kctl/zookeeper/txnlogs\n" in zoo
        assert "4lw.commands.whitelist=*" not in zoo
        assert "admin.enableServer=false\n" in zoo
        assert "RollingFileAppender" in files[f"logger{i}/conf/log4j-zookeeper.properties"]


def test_compose_file_shape() -> None:
    spec, _ = parse_spec({})
    rendered = render(spec)
    doc = yaml.safe_load(rendered.files[COMPOSE_FILE])
    assert doc["name"] == "kctl-logger"
    assert sorted(doc["services"]) == ["logger1", "logger2", "logger3"]
    for name, svc in doc["services"].items():
        assert svc["hostname"] == name
        assert all(p.startswith("127.0.0.1:") for p in svc["ports"])
        assert svc["labels"]["io.kctl.cluster"] == "logger"
        assert svc["labels"]["io.kctl.config-hash"] == rendered.container(name).config_hash
        assert "healthcheck" in svc
        assert any(v.startswith(f"./{name}/data:") for v in svc["volumes"])


def test_overrides_last_wins() -> None:
    spec, _ = parse_spec({
        "kafka": {"overrides": {"num.partitions": 6, "log.cleaner.threads": 2}},
        "zookeeper": {"overrides": {"tickTime": 3000}},
        "nodes": [{"id": 1, "hostname": "logger1", "overrides": {"kafka": {"num.partitions": 9}}},
                  {"id": 2, "hostname": "logger2"}, {"id": 3, "hostname": "logger3"}],
    })
    files = render(spec).files
    assert "num.partitions=9\n" in files["logger1/conf/server.properties"]
    assert "num.partitions=6\n" in files["logger2/conf/server.properties"]
    assert "log.cleaner.threads=2\n" in files["logger2/conf/server.properties"]
    assert "tickTime=3000\n" in files["logger3/conf/zoo.cfg"]


def test_config_hash_changes_only_for_changed_node() -> None:
    base = {"nodes": [{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)]}
    changed = {"nodes": [{"id": 1, "hostname": "logger1"},
                         {"id": 2, "hostname": "logger2", "overrides": {"kafka": {"log.cleaner.threads": 2}}},
                         {"id": 3, "hostname": "logger3"}]}
    a = {c.name: c.config_hash for c in render(parse_spec(base)[0]).containers}
    b = {c.name: c.config_hash for c in render(parse_spec(changed)[0]).containers}
    assert a["logger1"] == b["logger1"] and a["logger3"] == b["logger3"]
    assert a["logger2"] != b["logger2"]


def test_write_is_idempotent(tmp_path: Path) -> None:
    spec, _ = parse_spec({})
    r = render(spec)
    first = write(r, tmp_path)
    assert len(first) == len(r.files)
    assert write(r, tmp_path) == []
    assert (tmp_path / "logger1" / "data").is_dir()


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client")
def test_compose_config_accepts(tmp_path: Path) -> None:
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no compose plugin")
    for case in CASES.values():
        write(render(parse_spec(case)[0]), tmp_path)
        p = subprocess.run(["docker", "compose", "-f", str(tmp_path / COMPOSE_FILE), "config", "-q"],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


hostnames = st.from_regex(r"[a-z][a-z0-9-]{0,6}[a-z0-9]", fullmatch=True) | st.text(max_size=6)
node = st.fixed_dictionaries(
    {"id": st.integers(-2, 300), "hostname": hostnames},
    optional={"role": st.sampled_from(["participant", "observer", "boss"]),
              "kafka_port": st.integers(0, 70000)},
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["logger", "x", "Bad Name", "a-b"]),
        "topology": st.sampled_from(["colocated", "split", "mesh"]),
        "nodes": st.lists(node, min_size=0, max_size=6),
        "kafka": st.fixed_dictionaries({}, optional={
            "default_replication_factor": st.integers(-1, 6),
            "min_insync_replicas": st.integers(-1, 6),
            "external_port_base": st.integers(1, 70000),
            "heap": st.sampled_from(["512m", "1g", "x"]),
            "overrides": st.dictionaries(st.sampled_from(["a.b", "num.partitions"]), st.integers(0, 9)),
        }),
        "zookeeper": st.fixed_dictionaries({}, optional={
            "tick_time": st.integers(0, 100000),
            "four_letter_words": st.lists(st.sampled_from(["srvr", "*", "ab", "mntr"])),
            "host_port_base": st.integers(1, 70000),
        }),
        "extra": st.integers(),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_random_specs_render_or_fail_cleanly(data: dict[str, Any]) -> None:
    try:
        spec, _ = parse_spec(data)
    except SpecError as exc:
        assert exc.problems and all(":" in p for p in exc.problems)
        return
    files = render(spec).files
    assert "compose.yaml" in files
    yaml.safe_load(files["compose.yaml"])


def test_jmx_ports_published_on_loopback() -> None:
    spec, _ = parse_spec({"kafka": {"jmx": True, "jmx_port_base": 29999}})
    doc = yaml.safe_load(render(spec).files[COMPOSE_FILE])
    for i, name in enumerate(("logger1", "logger2", "logger3")):
        svc = doc["services"][name]
        assert f"127.0.0.1:{29999 + i}:{29999 + i}" in svc["ports"]
        assert svc["environment"]["KAFKA_JMX_PORT"] == str(29999 + i)


def test_compose_file_quotes_every_string_a_yaml_1_2_reader_could_take_for_something_else() -> None:
    """PyYAML writes YAML 1.1, Compose reads 1.2: a label such as 0o17 (1.2's octal) or 12:30 (1.1's base 60)
    is written double-quoted, so both read the same string."""
    import yaml

    labels = {"octal": "0o17", "clock": "12:30", "word": "yes", "float": "1e3", "plain": "team-a/x.y"}
    text = render(parse_spec({"labels": labels})[0]).files[COMPOSE_FILE]
    for key in ("octal", "clock", "word", "float"):
        assert f'      {key}: "{labels[key]}"\n' in text
    assert "      plain: team-a/x.y\n" in text
    doc = yaml.safe_load(text)
    assert text.startswith('# Compose file of kctl cluster "logger", rendered by kctl from kctl.yaml.\n')
    assert {k: doc["services"]["logger1"]["labels"][k] for k in labels} == labels
    assert list(doc) == ["name", "services", "networks"]


def test_jvm_options_reach_each_service_after_kctls_own_and_change_the_config_hash() -> None:
    base = parse_spec({})[0]
    spec = parse_spec({"zookeeper": {"jvm_options": ["-XX:TieredStopAtLevel=1"]},
                       "kafka": {"jvm_options": ["-XX:TieredStopAtLevel=1", "-XX:+AlwaysPreTouch"]}})[0]
    env = yaml.safe_load(render(spec).files[COMPOSE_FILE])["services"]["logger2"]["environment"]
    assert env["ZK_OPTS"] == "-XX:TieredStopAtLevel=1"
    assert env["KAFKA_OPTS"] == "-XX:TieredStopAtLevel=1 -XX:+AlwaysPreTouch"
    assert "KAFKA_OPTS" not in yaml.safe_load(render(base).files[COMPOSE_FILE])["services"]["logger2"]["environment"]
    assert {c.config_hash for c in render(base).containers}.isdisjoint(c.config_hash for c in render(spec).containers)
    secured = parse_spec({"security": {"enabled": True}, "kafka": {"jvm_options": ["-XX:TieredStopAtLevel=1"]}})[0]
    opts = yaml.safe_load(render(secured).files[COMPOSE_FILE])["services"]["logger1"]["environment"]["KAFKA_OPTS"]
    assert opts.startswith("-Djava.security.auth.login.config=") and opts.endswith(" -XX:TieredStopAtLevel=1")


@pytest.mark.parametrize(("flag", "words"), [
    ("-XX:TieredStopAtLevel=1 -Xss1m", "one JVM flag"),
    ("XX:+UseG1GC", "one JVM flag"),
    ("-Xmx2g", "use the `heap` setting"),
    ("-Djavax.net.ssl.keyStorePassword=hunter2", "secret"),
])
def test_jvm_options_refuse_what_is_not_one_flag_the_heap_or_a_secret(flag: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"kafka": {"jvm_options": [flag]}})
    assert words in str(err.value)
    assert "hunter2" not in str(err.value)


def test_node_containers_come_back_after_a_daemon_restart_but_not_after_a_stop() -> None:
    """Compose: `restart: unless-stopped` on every node (a daemon restart or a reboot starts it again; `docker
    stop` keeps it stopped); Swarm: its own restart_policy, and no Compose-only `restart` key it would ignore."""
    import yaml

    for case in ("default", "split", "zk-only"):
        spec, _ = parse_spec(CASES[case])
        doc = yaml.safe_load(render(spec).files[COMPOSE_FILE])
        assert {name: svc.get("restart") for name, svc in doc["services"].items()} == {
            name: "unless-stopped" for name in doc["services"]}, case
    spec, _ = parse_spec(CASES["swarm"])
    doc = yaml.safe_load(render(spec).files[COMPOSE_FILE])
    for svc in doc["services"].values():
        assert "restart" not in svc and svc["deploy"]["restart_policy"]["condition"] == "any"
