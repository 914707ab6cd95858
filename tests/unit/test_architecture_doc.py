"""docs/architecture.md holds to the code: its import-graph picture is the one the code gives today, each rule it
states names the tests that fail when the rule is broken (and they exist), and the rules no other file checks
are checked here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests import graph

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
RULE = re.compile(r"^- \*\*R(\d+)\*\* .*?\(checked by ([^)]*)\)", re.M | re.S)
TEST_REF = re.compile(r"`(tests/unit/[\w/]+\.py)::(\w+)`")


def _rules(text: str) -> dict[int, list[tuple[str, str]]]:
    section = text.split("## Rules", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n(?=- \*\*R\d+\*\*)", section)
    out: dict[int, list[tuple[str, str]]] = {}
    for item in items:
        m = re.match(r"- \*\*R(\d+)\*\*", item.strip())
        if m:
            out[int(m.group(1))] = TEST_REF.findall(item)
    return out


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_the_import_graph_picture_is_the_codes() -> None:
    text = DOC.read_text()
    assert graph.BEGIN in text and graph.END in text
    assert graph.rewrite(text) == text, "docs/architecture.md's import graph is stale: run `make architecture-graph`"


def test_every_rule_names_the_tests_that_check_it_and_they_exist() -> None:
    rules = _rules(DOC.read_text())
    assert sorted(rules) == list(range(1, len(rules) + 1)) and len(rules) >= 10, sorted(rules)
    for number, refs in rules.items():
        assert refs, f"R{number} names no test that checks it"
        for file, name in refs:
            assert (ROOT / file).is_file(), f"R{number}: {file} does not exist"
            assert name in _test_names(ROOT / file), f"R{number}: {file} has no {name}"


def test_the_rule_parser_sees_a_rule_without_a_test(tmp_path: Path) -> None:
    text = ("## Rules\n\n- **R1** one (checked by `tests/unit/test_wait.py::test_srvr_parsed`).\n"
            "- **R2** two, said and not checked.\n\n## Next\n")
    assert _rules(text) == {1: [("tests/unit/test_wait.py", "test_srvr_parsed")], 2: []}


# ----- rules checked here ----------------------------------------------------------------------------------------

def _kctl_files() -> list[tuple[str, ast.Module]]:
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text()))
            for p in sorted((ROOT / "kctl").rglob("*.py"))]


def _runtime_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every import that runs (those under ``if TYPE_CHECKING:`` do not)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.lineno, node.module))
    return out


DOCKER_SDK_MODULES = {"kctl/runtime/docker_api.py"}


def docker_sdk_importers(files: list[tuple[str, ast.Module]]) -> list[str]:
    return [f"{rel}:{line}" for rel, tree in files for line, mod in _runtime_imports(tree)
            if mod.split(".")[0] == "docker" and rel not in DOCKER_SDK_MODULES and not rel.startswith("kctl/bench/")]


def test_the_docker_sdk_is_imported_by_docker_api_only() -> None:
    # Everything else takes the SDK through docker_api (sdk(), client()), which imports it once, lazily and under a
    # lock (threads of the status path importing it at once met in the import system's deadlock detection).
    assert docker_sdk_importers(_kctl_files()) == []


def test_the_docker_sdk_check_can_fail() -> None:
    files = [("kctl/cluster/x.py", ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import docker\n"
                                             "def f():\n    import docker.errors\n")),
             ("kctl/runtime/docker_api.py", ast.parse("import docker\n"))]
    assert docker_sdk_importers(files) == ["kctl/cluster/x.py:5"]


# Modules outside kctl/cli that write to the terminal themselves, and why.
OWN_WRITERS = {
    "kctl/output.py": "the printer: tables, JSON, YAML, messages",
    "kctl/stream/job.py": "the Spark job: its own process under spark-submit, whose stderr is the job's log",
    "kctl/stream/warm.py": "a warm driver: the process of its container, whose output is its log, then its job's",
    "kctl/model/docgen.py": "`python -m kctl.model.docgen` prints docs/spec.md",
}


def terminal_writers(files: list[tuple[str, ast.Module]]) -> list[str]:
    out = []
    for rel, tree in files:
        if rel.startswith(("kctl/cli/", "kctl/bench/")) or rel in OWN_WRITERS:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = ast.unparse(node.func)
            if f in ("print", "typer.echo", "sys.stdout.write", "sys.stderr.write"):
                out.append(f"{rel}:{node.lineno}: {f}")
    return out


def test_only_the_printer_writes_to_the_terminal_below_the_cli() -> None:
    assert terminal_writers(_kctl_files()) == []
    assert all((ROOT / f).is_file() for f in OWN_WRITERS)


def test_the_printer_check_can_fail() -> None:
    files = [("kctl/kafka/x.py", ast.parse("import sys\ndef f():\n    print('x')\n    sys.stderr.write('y')\n")),
             ("kctl/cli/y.py", ast.parse("print('ok')\n"))]
    assert terminal_writers(files) == ["kctl/kafka/x.py:3: print", "kctl/kafka/x.py:4: sys.stderr.write"]


# What the pure model may import beyond its own layer's modules and the base: nothing that reaches a process, a
# socket or a container.
IMPURE = ("subprocess", "socket", "docker", "kazoo", "confluent_kafka", "urllib", "http", "ssl")


def impure_imports(files: list[tuple[str, ast.Module]], folder: str) -> list[str]:
    return [f"{rel}:{line}: {mod}" for rel, tree in files if rel.startswith(folder)
            for line, mod in _runtime_imports(tree) if mod.split(".")[0] in IMPURE]


def test_the_kraft_folder_is_pure() -> None:
    # The phases of a migration and each node's files per phase: decisions and records, no command runs from it
    # (the node-side quorum and features are kctl/cluster's, the steps kctl/migrate's).
    assert impure_imports(_kctl_files(), "kctl/kraft/") == []


def test_the_purity_check_can_fail() -> None:
    files = [("kctl/kraft/x.py", ast.parse("import json\ndef f():\n    import subprocess\n"))]
    assert impure_imports(files, "kctl/kraft/") == ["kctl/kraft/x.py:3: subprocess"]
