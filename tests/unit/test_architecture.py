"""The package graph flows one way (docs/architecture.md): imports parsed with ast, function-level ones included.

Rules name packages by prefix: ``kctl.runtime`` covers every module below it. A rule is
broken by an import of the forbidden package or of anything below it, wherever in the
importing module the import statement stands.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kctl"

# (importer, imported): a module under the first must not import one under the second.
RULES: tuple[tuple[str, str, str], ...] = (
    ("kctl", "kctl.bench", "product code never imports the benchmarks"),
    *(("kctl.runtime", target, "the runtime drives Docker only; ops sit above it")
      for target in ("kctl.kafka", "kctl.zk", "kctl.stream", "kctl.agent", "kctl.cli")),
    *((ops, target, "ops modules return data to the CLI and stay apart from the pipeline")
      for ops in ("kctl.kafka", "kctl.zk") for target in ("kctl.cli", "kctl.stream", "kctl.agent")),
    ("kctl.agent", "kctl.stream", "the log agent and the Spark job are independent"),
    ("kctl.stream", "kctl.agent", "the log agent and the Spark job are independent"),
    ("kctl.cli", "kctl.cli.main", "command modules register on the app they are given; only main imports them"),
)



def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT, *, kctl_only: bool = True) -> set[str]:
    """Every (kctl) module ``path`` imports, at any depth of its code (``from a import b`` gives a and a.b)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if not kctl_only or m == "kctl" or m.startswith("kctl.")}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PKG.rglob("*.py"))}


def _exempt(importer: str, rule_importer: str, target: str) -> bool:
    # kctl.bench itself, and kctl.cli.main (the one module that imports the command modules).
    if target == "kctl.bench" and _under(importer, "kctl.bench"):
        return True
    return target == "kctl.cli.main" and importer == "kctl.cli.main"


def violations() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for importer, imported in _graph().items():
        for rule_importer, target, _why in RULES:
            if not _under(importer, rule_importer) or _exempt(importer, rule_importer, target):
                continue
            for m in imported:
                if _under(m, target):
                    found.add((importer, target))
    return found


# ----- layers: every module in one, imports point down only, and no cycle --------------------------------

# docs/architecture.md's layers, lowest first: each a set of folders (a folder holds one layer, its sub-folders
# included), and the modules directly under kctl/ are the base. A module may import modules of its own layer or
# below, never above.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("kctl",)),
    ("model", ("kctl.model", "kctl.kraft")),
    ("security", ("kctl.security",)),
    ("runtime", ("kctl.runtime",)),
    ("zk", ("kctl.zk",)),
    ("kafka", ("kctl.kafka",)),
    ("stream/agent", ("kctl.stream", "kctl.agent")),
    ("monitor", ("kctl.monitor",)),
    ("mirror", ("kctl.mirror",)),
    ("cluster", ("kctl.cluster",)),
    ("roll/testing", ("kctl.roll", "kctl.testing")),
    ("migrate/drill", ("kctl.migrate", "kctl.drill")),
    ("console", ("kctl.console",)),
    ("cli", ("kctl.cli",)),
    ("bench", ("kctl.bench",)),
)
# `python -m kctl`: the one module under kctl/ that is no part of the base (it only calls the CLI).
ENTRY = "kctl.__main__"

# Exceptions to the direction and cycle rules; each must still occur (a stale entry fails), so none is added
# without a reason written here.
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()


def layer_of(module: str) -> int | None:
    """The layer of a module: its top folder's (``kctl.runtime.engine.hosts``: ``kctl.runtime``'s), the base for
    a module directly under kctl/, none for a name outside kctl."""
    parts = module.split(".")
    if parts[0] != "kctl":
        return None
    if module == "kctl":
        return 0
    if module == ENTRY:
        return next(rank for rank, (name, _) in enumerate(LAYERS) if name == "cli")
    folder = ".".join(parts[:2])
    top = folder if len(parts) > 2 or (PKG / parts[1]).is_dir() else "kctl"
    return next((rank for rank, (_name, folders) in enumerate(LAYERS) if top in folders), None)


def test_a_layer_is_a_set_of_folders() -> None:
    """Every folder of kctl/ is named in one layer, every name in LAYERS is a folder (the base aside), and
    nothing but the base and the entry point lies directly under kctl/."""
    named = [f for _layer, folders in LAYERS for f in folders if f != "kctl"]
    assert len(named) == len(set(named)), "a folder named in two layers"
    folders = {f"kctl.{p.name}" for p in PKG.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    assert sorted(folders - set(named)) == [], "folders in no layer: give each its layer in LAYERS and the document"
    assert sorted(set(named) - folders) == [], "LAYERS names folders that do not exist"
    assert all("." not in f.removeprefix("kctl.") for f in named), "a layer names top folders, never a sub-folder"


def module_graph() -> dict[str, set[str]]:
    """Module -> the kctl modules it imports (a name imported from a module resolves to that module)."""
    graph = _graph()

    def resolve(name: str) -> str:
        while name and name not in graph:
            name = name.rpartition(".")[0]
        return name

    return {m: {r for n in names if (r := resolve(n)) and r != m} for m, names in graph.items()}


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, dep) for m, deps in graph.items() for dep in deps
            if (lm := layer_of(m)) is not None and (ld := layer_of(dep)) is not None and ld > lm}


def cycles(graph: dict[str, set[str]]) -> list[tuple[frozenset[str], list[str]]]:
    """Every strongly connected component of more than one module, with one of its cycles as a path back to
    its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(((frozenset(comp), _path_back(graph, comp, min(comp))) for comp in found), key=lambda c: c[1])


def _path_back(graph: dict[str, set[str]], comp: set[str], start: str) -> list[str]:
    """The shortest import path from ``start`` back to itself inside ``comp`` (breadth first)."""
    prev: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & comp):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is in no cycle")


def test_every_module_has_a_layer() -> None:
    lost = sorted(m for m in module_graph() if layer_of(m) is None)
    assert not lost, f"modules in no layer of LAYERS (give each its layer in docs/architecture.md too): {lost}"


def test_imports_point_down_the_layers() -> None:
    up = upward_imports(module_graph())
    names = [name for name, _ in LAYERS]
    bad = sorted(up - ALLOWED_UPWARD)
    assert not bad, "imports that point up the layers (move the module to its layer, not the import into a" \
        " function):\n" + "\n".join(f"  {m} ({names[layer_of(m) or 0]}) imports {d} ({names[layer_of(d) or 0]})"
                                   for m, d in bad)
    stale = sorted(ALLOWED_UPWARD - up)
    assert not stale, f"ALLOWED_UPWARD lists imports that no longer exist: remove {stale}"


def test_no_import_cycle() -> None:
    found = cycles(module_graph())
    bad = [(comp, path) for comp, path in found if comp not in ALLOWED_CYCLES]
    assert not bad, "import cycles (move what both need to a module below them):\n" + "\n".join(
        "  " + " -> ".join(path) + (f" (among {', '.join(sorted(comp))})" if len(comp) > len(path) - 1 else "")
        for comp, path in bad)
    stale = [sorted(c) for c in ALLOWED_CYCLES if c not in {comp for comp, _ in found}]
    assert not stale, f"ALLOWED_CYCLES lists cycles that no longer exist: remove {stale}"


def test_the_layer_and_cycle_checks_can_fail() -> None:
    graph = {"kctl.model.spec": {"kctl.cluster.health"}, "kctl.cluster.health": {"kctl.model.spec"},
             "kctl.zk.a": {"kctl.zk.b"},
             "kctl.zk.b": {"kctl.zk.c"}, "kctl.zk.c": {"kctl.zk.a"}, "kctl.cli.x": {"kctl.model.spec"}}
    assert upward_imports(graph) == {("kctl.model.spec", "kctl.cluster.health")}
    assert [path for _comp, path in cycles(graph)] == [
        ["kctl.cluster.health", "kctl.model.spec", "kctl.cluster.health"],
                                                       ["kctl.zk.a", "kctl.zk.b", "kctl.zk.c", "kctl.zk.a"]]
    assert layer_of("kctl.runtime.engine.swarm") == layer_of("kctl.runtime.doctor") == layer_of("kctl.runtime")
    assert layer_of("kctl.errors") == 0 and layer_of("elsewhere") is None


def test_import_directions() -> None:
    new = violations()
    why = {target: reason for _imp, target, reason in RULES}
    assert not new, "imports against the layering:\n" + "\n".join(
        f"  {importer} imports {target}: {why[target]}" for importer, target in sorted(new))


def test_the_parser_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "kctl" / "runtime"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "x.py").write_text(
        "import os\n\n"
        "def f():\n    from kctl.kafka import client\n    import kctl.zk.fourlw\n\n"
        "class C:\n    def g(self):\n        from ..stream import jars\n        from . import compose\n")
    assert imports_of(pkg / "x.py", tmp_path) == {
        "kctl.kafka", "kctl.kafka.client", "kctl.zk.fourlw", "kctl.stream", "kctl.stream.jars",
        "kctl.runtime", "kctl.runtime.compose"}


def test_unit_tests_start_no_jvm() -> None:
    """Spark-marked tests (a JVM) live in tests/integration; tests/unit needs neither Docker nor Java."""
    for path in sorted((ROOT / "tests" / "unit").rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        assert "mark.spark" not in text and "build_session" not in text, path
        assert not {m for m in _all_imports(path) if m.split(".")[0] in ("pyspark", "testcontainers")}, path


def _all_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_document_states_the_rules() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for importer, target, _why in RULES:
        assert f"`{importer}`" in doc or importer == "kctl", importer
        assert f"`{target}`" in doc, target


# ----- third-party clients: which layer may touch which system ----------------------------------


def test_runtime_imports_neither_zookeeper_nor_kafka_clients() -> None:
    for path in sorted((PKG / "runtime").rglob("*.py")):
        bad = {m for m in imports_of(path, kctl_only=False) if m.split(".")[0] in ("kazoo", "confluent_kafka")}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_configs_reaches_docker_only_through_runtime_cluster() -> None:
    mods = imports_of(PKG / "kafka" / "configs.py", kctl_only=False)
    assert not {m for m in mods if m.startswith(("docker", "kctl.runtime.engine"))}


def test_status_path_avoids_the_heavy_clients() -> None:
    # kctl status: the heavy clients load when asked, not when kctl.cluster.health is imported (module level only).
    for mod in ("cluster/health.py", "runtime/engine/engines.py", "runtime/engine/base.py",
                "runtime/docker_api.py",
                "kafka/describe.py", "kafka/client.py", "zk/fourlw.py"):
        tree = ast.parse((PKG / mod).read_text(encoding="utf-8"))
        top: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                top.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                top.add(node.module)
        heavy = {m for m in top if m.split(".")[0] in ("docker", "kazoo", "confluent_kafka", "jinja2", "http")}
        assert not heavy, f"{mod} imports {sorted(heavy)} at module level"


def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def test_a_main_guard_comes_last() -> None:
    # `python -m kctl.x` runs the guard as it is reached: a definition below it does not exist yet.
    late = []
    for path in sorted(PKG.rglob("*.py")):
        body = ast.parse(path.read_text()).body
        guards = [i for i, node in enumerate(body) if _is_main_guard(node)]
        if guards and guards[-1] != len(body) - 1:
            late.append(module_name(path))
    assert not late, f"statements after `if __name__ == '__main__'` in {late}"


# ---- imports at module top --------------------------------------------------------------------------------------
# A reader sees a module's kctl dependencies at the top of its file. An import inside a function is laziness, kept
# only where it pays: in the CLI (each command loads what it runs), in the benchmarks, and for the heavy
# third-party packages below (each costs tens of milliseconds or starts threads on import, and most commands never
# use it). Files that keep a kctl import inside a function, with the reason.
LAZY_KCTL_FILES: dict[str, str] = {
    "kctl/testing/__init__.py": "a pytest plugin package: loaded by every pytest run, it imports the cluster on use",
    "kctl/testing/plugin.py": "a pytest plugin: loaded by every pytest run, it imports the cluster on use",
}
HEAVY_PACKAGES: dict[str, str] = {
    "confluent_kafka": "librdkafka's binding: 40+ ms, loaded by commands that talk to Kafka only",
    "cryptography": "OpenSSL's binding: only the secured profile's certificates and secrets use it",
    "pyspark": "the Spark job's side only (the driver JVM's gateway)",
    "delta": "delta-spark, the Spark job's side only",
    "deltalake": "delta-rs: the independent reader of the pipeline's tables",
    "pyarrow": "delta-rs's tables: the independent reader only",
    "kazoo": "ZooKeeper's client: ZooKeeper commands only (none on KRaft)",
    "docker": "docker-py: commands that reach no container do not load it",
    "rich": "tables and colours: output.py loads them for a table, not for JSON or a message",
    "yaml": "output.py's YAML printer: -o yaml only",
    "ruamel": "round-trip YAML: edits of kctl.yaml keep its comments (node add/remove only)",
    "prometheus_client": "the metrics exposition: the monitor's service only",
    "matplotlib": "the drill report's charts only",
    "fastapi": "the console's app: `kctl console` only",
    "uvicorn": "the console's server: `kctl console` only",
    "argon2": "the console's password hashes: console users only",
}
OUTSIDE_THE_RULE = ("kctl/cli/", "kctl/bench/", "kctl/__main__.py")


def _function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when a function (or a class body) runs: not at module top, not under `if TYPE_CHECKING`."""
    top: set[int] = set()

    def mark(body: list[ast.stmt]) -> None:
        for n in body:
            top.add(id(n))
            if isinstance(n, ast.If):
                mark(n.body)
                mark(n.orelse)
            elif isinstance(n, ast.Try):
                mark(n.body)
                mark(n.orelse)
                mark(n.finalbody)
                for h in n.handlers:
                    mark(h.body)

    mark(tree.body)
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in top]


def _import_roots(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return ["kctl" if node.level else (node.module or "").split(".")[0]]
    return [a.name.split(".")[0] for a in node.names]


def function_import_offences(root: Path) -> list[str]:
    import sys

    stdlib = set(sys.stdlib_module_names)
    out = []
    for path in sorted((root / "kctl").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(OUTSIDE_THE_RULE):
            continue
        for node in _function_imports(ast.parse(path.read_text(), rel)):
            for name in _import_roots(node):
                if name == "kctl" and rel not in LAZY_KCTL_FILES:
                    out.append(f"{rel}:{node.lineno}: kctl's own import inside a function (move it to the top)")
                elif name not in ("kctl", "__future__") and name not in stdlib and name not in HEAVY_PACKAGES:
                    out.append(f"{rel}:{node.lineno}: {name} imported inside a function: import it at the top,"
                               " or name it in HEAVY_PACKAGES with what its laziness saves")
    return out


def test_kctl_imports_its_own_modules_at_module_top_outside_the_cli() -> None:
    assert function_import_offences(ROOT) == []


def test_the_import_rule_can_fail(tmp_path: Path) -> None:
    (tmp_path / "kctl" / "kafka").mkdir(parents=True)
    (tmp_path / "kctl" / "cli").mkdir()
    (tmp_path / "kctl" / "kafka" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kctl import spec\n"
        "def f():\n    from kctl.model import spec\n    import confluent_kafka\n    import json\n    import typer\n"
        "class C:\n    from . import b\n")
    (tmp_path / "kctl" / "cli" / "c.py").write_text("def f():\n    from kctl.model import spec\n    import typer\n")
    assert function_import_offences(tmp_path) == [
        "kctl/kafka/a.py:5: kctl's own import inside a function (move it to the top)",
        "kctl/kafka/a.py:8: typer imported inside a function: import it at the top, or name it in HEAVY_PACKAGES"
        " with what its laziness saves",
        "kctl/kafka/a.py:10: kctl's own import inside a function (move it to the top)",
    ]
    assert all(Path(ROOT / f).is_file() for f in LAZY_KCTL_FILES)
