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
    assert not {m for m in mods if m.startswith(("docker", "kctl.runtime.compose", "kctl.runtime.engine"))}


def test_status_path_avoids_the_heavy_clients() -> None:
    # kctl status: the heavy clients load when asked, not when kctl.health is imported (module level only).
    for mod in ("health.py", "runtime/engine.py", "kafka/describe.py", "kafka/client.py", "zk/fourlw.py"):
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
