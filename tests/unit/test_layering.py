"""The runtime layer speaks only to Docker; ops modules reach Docker only through it."""

from __future__ import annotations

import ast
from pathlib import Path

KCTL = Path(__file__).resolve().parents[2] / "kctl"


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_runtime_imports_neither_zookeeper_nor_kafka_clients() -> None:
    for path in sorted((KCTL / "runtime").glob("*.py")):
        bad = {m for m in _imports(path)
               if m.startswith(("kctl.zk", "kctl.kafka", "kazoo", "confluent_kafka"))}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_configs_reaches_docker_only_through_runtime_cluster() -> None:
    mods = _imports(KCTL / "kafka" / "configs.py")
    assert not {m for m in mods if m.startswith(("docker", "kctl.runtime.compose", "kctl.runtime.engine"))}


def test_status_path_avoids_the_heavy_clients() -> None:
    # kctl status: Docker over its socket, Kafka by one raw Metadata request (imports only, at module level).
    for mod in ("health.py", "runtime/engine.py", "kafka/metadata.py", "zk/fourlw.py"):
        tree = ast.parse((KCTL / mod).read_text(encoding="utf-8"))
        top = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                top.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                top.add(node.module)
        heavy = {m for m in top if m.split(".")[0] in ("docker", "kazoo", "confluent_kafka", "jinja2", "http")}
        assert not heavy, f"{mod} imports {sorted(heavy)} at module level"
