"""Every command, run from the wrong place, refuses with a message and a hint, and the cluster that
happens to answer is left unchanged (issue 14).

One running cluster (the session's ``kafka_cluster``) plays "the other cluster". The commands are
discovered from the Typer app, so a new command is swept without touching this file (a new command
with required arguments fails ``test_every_command_has_its_arguments`` until it gets a line in ARGS).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from kctl.cli.main import app
from kctl.runtime.ports import free_ports

TOPIC, GROUP = "sweep-t", "sweep-g"

# Arguments for the commands that need them: real names in the other cluster, and the options
# that make a change happen (--yes, --execute), so a missing guard would show as a changed cluster.
ARGS: dict[tuple[str, ...], list[str]] = {
    ("logs",): ["logger1"],
    ("produce",): [TOPIC],
    ("consume",): [TOPIC, "--group", GROUP, "--from-beginning", "--max", "1", "--timeout", "3"],
    ("zk", "get"): ["/cluster/id"],
    ("topic", "create"): ["sweep-new", "-p", "1", "-r", "1"],
    ("topic", "describe"): [TOPIC],
    ("topic", "alter"): [TOPIC, "--partitions", "4"],
    ("topic", "delete"): [TOPIC, "--yes"],
    ("config", "describe"): ["--topic", TOPIC],
    ("config", "set"): ["retention.ms=1000", "--topic", TOPIC],
    ("config", "delete"): ["retention.ms", "--topic", TOPIC],
    ("group", "describe"): [GROUP],
    ("group", "reset-offsets"): [GROUP, "--topic", TOPIC, "--to-earliest", "--execute"],
    ("group", "delete"): [GROUP],
    ("gen", "logs"): ["--topic", TOPIC, "--count", "5"],
    ("stream", "submit"): ["--topic", TOPIC, "--available-now"],
    ("restart",): ["--rolling", "--yes", "--timeout", "30"],
    ("apply",): ["--yes", "--timeout", "30"],
    ("zk", "purge"): ["--keep", "3"],
    # baseline injects no fault: a missing guard would show as a drill topic in the other cluster
    ("drill", "run"): ["baseline", "--duration", "3s", "--rate", "10", "--bounces", "1", "--hold", "0s"],
    ("user", "create"): ["sweep-u"],
    ("user", "passwd"): ["sweep-u"],
    ("user", "delete"): ["sweep-u"],
    ("acl", "add"): ["--allow", "User:sweep-u", "--operation", "write", "--topic", TOPIC],
    ("acl", "remove"): ["--allow", "User:sweep-u", "--operation", "write", "--topic", TOPIC],
    ("quota", "set"): ["producer_byte_rate=1000", "--user", "sweep-u"],
    ("quota", "delete"): ["producer_byte_rate", "--user", "sweep-u"],
    ("zk", "reconfig"): ["--remove", "3", "--force"],
    ("reassign", "plan"): ["--brokers", "1,2,3"],
    ("reassign", "execute"): ["plan.json", "--wait"],
    ("reassign", "verify"): ["plan.json"],
    ("node", "remove"): ["3", "--yes"],
    ("console", "user", "add"): ["sweep-c", "--role", "admin"],
    ("console", "user", "remove"): ["sweep-c"],
    ("mirror", "failover"): [GROUP, "--yes"],
    ("support-bundle",): ["--out", "sweep-bundle.tar.gz"],
    ("node", "format-storage"): ["1", "--service", "kafka", "--yes"],
    ("quorum", "add-controller"): ["logger1"],
    ("quorum", "remove-controller"): ["logger1", "--force"],
}

# Commands the sweep does not run, and why.
SKIP: dict[tuple[str, ...], str] = {
    ("init",): "writes the kctl.yaml the cases are about (its warnings: tests/unit/test_identity.py)",
    ("image", "build"): "builds the node image; touches no cluster",
    ("stream", "status"): "reads the stream job's checkpoint, not a kctl.yaml's cluster",
    ("stream", "stop"): "signals the stream job of a checkpoint, not a kctl.yaml's cluster",
    ("stream", "metrics"): "reads the stream job's output files only",
    ("stream", "query"): "reads the stream job's output files only (DuckDB over its Delta tables)",
    ("stream", "optimize"): "compacts the stream job's output files only",
}

# Commands that work offline on the spec and its state dir: they may succeed where the cluster is absent.
OFFLINE = {("render",), ("doctor",), ("zk", "storage"), ("drill", "list"), ("client-config",), ("swarm", "label"),
           # engine hosts' bundles: files from the spec; it refuses any other engine's spec by itself
           ("bundle",),
           # the monitor's record and store in this kctl.yaml's state dir
           ("monitor", "status"), ("monitor", "stop"), ("alerts",),
           # the console's users file in this kctl.yaml's state dir
           ("console", "user", "add"), ("console", "user", "remove"), ("console", "user", "list"),
           # the certificates in this kctl.yaml's state dir (a plain cluster has none: refused with its hint)
           ("cert", "status"),
           # this kctl.yaml's files and logs; the live answers only from its own cluster (errors.txt says why not)
           ("support-bundle",)}
# Commands whose report is a table of checks, each with its hint (on stdout): exit 1 is their verdict.
REPORTS = {("doctor",)}
# Per case, the commands that may exit 0 because they are right to: nothing of another cluster is touched.
MAY_SUCCEED: dict[str, set[tuple[str, ...]]] = {
    "none": {("doctor",), ("drill", "list")},  # the machine's prerequisites and kctl's scenarios need no kctl.yaml
    "stopped": OFFLINE | {("down",)},  # removing a stopped cluster's (absent) containers is a no-op
    "held": OFFLINE | {("down",)},  # down acts by this cluster's own name and state dir: nothing of the other
    "same-name": OFFLINE,
}
# Not run per case (and why).
CASE_SKIP: dict[str, dict[tuple[str, ...], str]] = {
    "stopped": {("up",): "would start the stopped cluster: it is not wrong input"},
}


def leaves() -> list[tuple[tuple[str, ...], list[str]]]:
    """Every leaf command of the CLI (path, required parameter names)."""
    out: list[tuple[tuple[str, ...], list[str]]] = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if hasattr(cmd, "list_commands"):
            ctx = cmd.make_context("kctl", [], resilient_parsing=True)
            for n in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, n), (*path, n))
        else:
            out.append((path, [p.name for p in cmd.params if p.required]))

    walk(typer.main.get_command(app), ())
    return out


def run(cwd: Path, *args: str, stdin: str = "", timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def js(cluster: Any, *args: str) -> Any:
    p = run(cluster.workdir, *args, "-f", str(cluster.spec_file), "-o", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def snapshot(cluster: Any) -> dict[str, Any]:
    """What a wrong command could change: topics, broker and topic configs, the group's offsets."""
    return {
        "topics": js(cluster, "topic", "list"),
        "topic_configs": js(cluster, "config", "describe", "--topic", TOPIC),
        "broker_configs": js(cluster, "config", "describe", "--broker", "1"),
        "broker_default": js(cluster, "config", "describe", "--broker-default"),
        "group": [(p["topic"], p["partition"], p["committed"]) for p in js(cluster, "group", "describe",
                                                                            GROUP)["partitions"]],
    }


def explains(p: subprocess.CompletedProcess[str]) -> bool:
    """A message and a hint: kctl's `error:`/`hint:` lines, or the parser's usage error and its `Try ...`."""
    err = p.stderr
    return ("error:" in err and "hint:" in err) or ("Error" in err and "Try '" in err and "-h' for help" in err)


def test_every_command_has_its_arguments() -> None:
    for path, required in leaves():
        if required and path not in SKIP:
            assert path in ARGS, f"`kctl {' '.join(path)}` needs {required}: add it to ARGS (or SKIP, with why)"


@pytest.fixture(scope="module")
def other(kafka_cluster: Any) -> Any:
    c = kafka_cluster
    rf = str(min(3, len(c.spec.nodes)))
    p = run(c.workdir, "topic", "create", TOPIC, "-p", "3", "-r", rf, "-c", "retention.ms=86400000",
            "--if-not-exists", "-f", str(c.spec_file))
    assert p.returncode == 0, p.stderr
    p = run(c.workdir, "produce", TOPIC, "-f", str(c.spec_file), stdin="a\nb\nc\n")
    assert p.returncode == 0, p.stderr
    p = run(c.workdir, "consume", TOPIC, "--group", GROUP, "--from-beginning", "--max", "3", "--timeout", "10",
            "-f", str(c.spec_file))
    assert p.returncode == 0, p.stderr
    return c


def _write(d: Path, data: dict[str, Any]) -> Path:
    d.mkdir(parents=True)
    (d / "kctl.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return d


# The two places where another cluster answers (a kctl.yaml of another name on its ports, and its own name from
# another directory) run in `make test`; no kctl.yaml at all and a cluster that is not running, in make test-long.
@pytest.mark.parametrize("only", ["held", "same-name", pytest.param("none", marks=pytest.mark.long),
                                  pytest.param("stopped", marks=pytest.mark.long)])
def test_sweep_every_command_refuses_and_the_other_cluster_is_unchanged(other: Any, tmp_path: Path,
                                                                         only: str) -> None:
    theirs = other.spec.model_dump(mode="json", exclude_none=True)
    free = iter(free_ports(2 * len(other.spec.nodes)))
    stopped_nodes = [{"id": n.id, "hostname": n.hostname, "zookeeper_port": next(free), "kafka_port": next(free)}
                     for n in other.spec.nodes]
    made = {
        "none": lambda: tmp_path / "none",
        "stopped": lambda: _write(tmp_path / "stopped", {"name": "sweep-stopped", "nodes": stopped_nodes,
                                                         "kafka": theirs["kafka"]}),
        "held": lambda: _write(tmp_path / "held", {**theirs, "name": "sweep-probe"}),
        "same-name": lambda: _write(tmp_path / "same-name", theirs),
    }
    cases = {only: made[only]()}
    cases[only].mkdir(exist_ok=True)
    before = snapshot(other)

    jobs = []
    for case, cwd in cases.items():
        for path, _ in leaves():
            if path in SKIP or path in CASE_SKIP.get(case, {}):
                continue
            argv = [*path, *ARGS.get(path, []), "-f", "kctl.yaml"]
            jobs.append((case, path, cwd, argv))
    with cf.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: (j[0], j[1], run(j[2], *j[3], stdin="sweep\n")), jobs))

    problems = []
    for case, path, p in results:
        cmd = f"[{case}] kctl {' '.join(path)}"
        out = p.stdout + p.stderr
        if "Traceback" in out:
            problems.append(f"{cmd}: traceback\n{out[-1500:]}")
            continue
        if p.returncode == 0:
            if path not in MAY_SUCCEED[case]:
                problems.append(f"{cmd}: exit 0\n{out[-600:]}")
            continue
        if path in REPORTS:
            if "hint" not in p.stdout.lower():
                problems.append(f"{cmd}: exit {p.returncode} without its table of checks\n{out[-600:]}")
        elif not explains(p):
            problems.append(f"{cmd}: exit {p.returncode} without a message and a hint\n{p.stderr[-600:]}")
        elif case in ("held", "same-name") and path not in OFFLINE | {("logs",)} and other.spec.name not in p.stderr:
            problems.append(f"{cmd}: does not name the cluster that answered ({other.spec.name})\n{p.stderr[-600:]}")
        elif case == "same-name" and path == ("up",) and str(other.state_dir.resolve()) not in p.stderr:
            problems.append(f"{cmd}: does not name the other state dir\n{p.stderr[-600:]}")
    assert not problems, f"{len(problems)} of {len(results)} runs:\n\n" + "\n\n".join(problems)
    assert snapshot(other) == before


# (option values, what stderr must say): each against the other cluster's own kctl.yaml.
INVALID: list[tuple[list[str], list[str]]] = [
    (["topic", "create", "sweep-x", "--partitions", "0"], ["--partitions must be at least 1"]),
    (["topic", "create", "bad name!"], ["bad name!"]),
    (["topic", "alter", TOPIC, "--partitions", "1"], [TOPIC]),
    (["topic", "delete", "sweep-nope", "--yes"], ["does not exist"]),
    (["config", "set", "--broker", "9", "foo=bar"], ["broker 9 does not exist"]),
    (["config", "set", "--broker", "1", "foo=bar"], ["foo: not a broker config Kafka knows"]),
    (["config", "set", "--topic", TOPIC, "foo=bar"], ["foo: not a topic config Kafka knows"]),
    (["gen", "logs", "--count", "-1", "--topic", TOPIC], ["--count must be 0 or more"]),
    (["gen", "logs", "--rate", "0", "--topic", TOPIC], ["--rate must be above 0"]),
    (["group", "reset-offsets", GROUP, "--topic", TOPIC], ["exactly one"]),
    (["group", "delete", "sweep-nope"], ["sweep-nope"]),
    (["logs", "logger9"], ["logger9"]),
    (["zk", "tree", "--depth", "99"], ["--depth"]),
    (["zk", "srvr", "--node", "logger9"], ["logger9"]),
    (["drill", "run", "baseline", "--rate", "0"], ["--rate 0 is not positive", "nothing was injected"]),
    (["drill", "run", "leader-kill", "--topic", "sweep-nope"], ["does not exist", "nothing was injected"]),
]


def test_invalid_option_values_change_nothing(other: Any) -> None:
    before = snapshot(other)
    with cf.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda a: (a, run(other.workdir, *a[0], "-f", str(other.spec_file))), INVALID))
    problems = []
    for (argv, wanted), p in results:
        cmd = f"kctl {' '.join(argv)}"
        if p.returncode == 0 or "Traceback" in p.stderr or not explains(p):
            problems.append(f"{cmd}: exit {p.returncode}\n{p.stderr[-800:]}")
        for w in wanted:
            if w not in p.stderr:
                problems.append(f"{cmd}: stderr lacks {w!r}\n{p.stderr[-800:]}")
    assert not problems, "\n\n".join(problems)
    # The broker is named before the key: `foo` is not even looked at when broker 9 does not exist.
    p9 = dict((tuple(a), p) for (a, _), p in results)[("config", "set", "--broker", "9", "foo=bar")]
    assert "foo" not in p9.stderr.split("hint:")[0]
    assert snapshot(other) == before


def test_own_cluster_defaults_and_bootstrap_override(other: Any, tmp_path: Path) -> None:
    # topic create takes the cluster's num.partitions and default.replication.factor, like kafka-topics.
    p = run(other.workdir, "topic", "create", "sweep-defaults", "-f", str(other.spec_file))
    assert p.returncode == 0, p.stderr
    d = js(other, "topic", "describe", "sweep-defaults")
    assert d["partition_count"] == other.spec.kafka.num_partitions
    assert d["replication_factor"] == other.spec.kafka.default_replication_factor
    run(other.workdir, "topic", "delete", "sweep-defaults", "--yes", "-f", str(other.spec_file))
    # up recorded nothing for the testing API's cluster, so the first command recorded its identity.
    ident = json.loads((other.state_dir / "identity.json").read_text())
    assert ident["cluster"] == other.spec.name and ident["cluster_id"]
    # --bootstrap-server from a directory without kctl.yaml: reading works and names the cluster id...
    p = run(tmp_path, "topic", "list", "--bootstrap-server", other.bootstrap_servers)
    assert p.returncode == 0, p.stderr
    assert f"talking to Kafka cluster id {ident['cluster_id']}" in p.stderr and TOPIC in p.stdout
    # ...changing does not.
    p = run(tmp_path, "topic", "delete", TOPIC, "--yes", "--bootstrap-server", other.bootstrap_servers)
    assert p.returncode == 2 and "refusing to change" in p.stderr and ident["cluster_id"] in p.stderr
    assert TOPIC in [t["name"] for t in js(other, "topic", "list")]
