"""The engine seam (kctl/runtime/engine): what each engine supports, asked by capability (``engines.supports``)
and never by the engine's name above kctl/runtime and kctl/model."""

from __future__ import annotations

import ast
from pathlib import Path
from unittest import mock

import pytest

from kctl.model.spec import ClusterSpec
from kctl.model.spec import Engine as EngineKind
from kctl.runtime import faults
from kctl.runtime.engine import engines
from kctl.runtime.engine.base import Capability, Engine
from kctl.runtime.engine.compose import ComposeEngine
from kctl.runtime.engine.hosts import HostsEngine
from kctl.runtime.engine.swarm import SwarmEngine

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kctl"

# ----- capabilities: the table ------------------------------------------------------------------------------------

C = Capability
EXPECTED: dict[type[Engine], set[Capability]] = {
    ComposeEngine: {C.CONTAINERS, C.PORTS_BY_INDEX, C.DATA_IN_STATE_DIR, C.KRAFT_MIGRATION, C.CHOSEN_BY_FLAG,
                    C.NODE_FAULTS, C.DYNAMIC_QUORUM},
    SwarmEngine: {C.CONTAINERS, C.PORTS_BY_INDEX, C.SWARM_LABELS, C.KRAFT_MIGRATION, C.CHOSEN_BY_FLAG,
                  C.NODE_FAULTS, C.DYNAMIC_QUORUM, C.SPARK_ON_SWARM},
    HostsEngine: {C.SSH_HOSTS, C.DYNAMIC_QUORUM, C.SPARK_ON_HOSTS},
}


def _concrete_engines() -> set[type[Engine]]:
    found: set[type[Engine]] = set()
    todo = list(Engine.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("kctl.") and not getattr(cls, "__abstractmethods__", None):
            found.add(cls)
    return found


def test_every_engine_and_capability_is_in_the_table() -> None:
    for kind in EngineKind:
        engines.implementation(kind)  # every implementation's module imported: its class is a subclass now
    assert _concrete_engines() == set(EXPECTED), "an engine class not in EXPECTED (or one gone): give it its row"
    assert {engines.implementation(kind) for kind in EngineKind} == set(EXPECTED)
    assert {engines.implementation(kind).kind for kind in EngineKind} == {kind.value for kind in EngineKind}


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
@pytest.mark.parametrize("capability", list(Capability), ids=lambda c: c.name)
def test_what_each_engine_supports(cls: type[Engine], capability: Capability) -> None:
    want = capability in EXPECTED[cls]
    assert cls.supports(capability) is want
    kind = EngineKind(cls.kind)
    # the module-level helper asks the spec's engine class (no Docker, no ssh, no client): the same answer
    spec = ClusterSpec().model_copy(update={"engine": kind})
    with mock.patch.object(cls, "client", side_effect=AssertionError("a client was made")), \
            mock.patch.object(cls, "__init__", side_effect=AssertionError("an engine was made")):
        assert engines.supports(spec, capability) is want


def test_every_capability_is_supported_by_some_engine() -> None:
    for capability in Capability:
        supporters = [cls for cls in EXPECTED if cls.supports(capability)]
        assert supporters, f"{capability.name}: no engine supports it (remove it)"


# ----- no engine-name branch above the seam ---------------------------------------------------------------------

KINDS = {kind.value for kind in EngineKind}
ENGINE_CLASSES = {"ComposeEngine", "SwarmEngine", "HostsEngine"}
# Where kctl may decide by the engine's kind: the seam itself, and the spec's validation and rendering.
SEAM = ("kctl/runtime/", "kctl/model/")
# (module path, what it names) -> why it must stay; every entry must still occur.
ALLOWED_ENGINE_BRANCHES: dict[tuple[str, str], str] = {}


def _names_a_kind(node: ast.AST) -> str | None:
    """``Engine.hosts``/``EngineKind.swarm`` (any module path before it), ``EngineKind.<anything>``, an engine
    class by name, or a comparison of ``<x>.engine``/``<x>.engine.value``/``<x>.kind`` with a kind's string."""
    if isinstance(node, ast.Attribute):
        base = node.value
        base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        if base_name == "EngineKind" or (base_name == "Engine" and node.attr in KINDS):
            return f"{base_name}.{node.attr}"
        if node.attr in ENGINE_CLASSES:
            return node.attr
    if isinstance(node, ast.Name) and node.id in ENGINE_CLASSES:
        return node.id
    if isinstance(node, ast.alias) and (node.asname or node.name).split(".")[-1] in ENGINE_CLASSES | {"EngineKind"}:
        return node.asname or node.name
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        strings = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
        for s in sides:
            if isinstance(s, (ast.Tuple, ast.List, ast.Set)):
                strings |= {e.value for e in s.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        engine_side = any(isinstance(s, ast.Attribute) and (
            s.attr in ("engine", "kind") or (s.attr == "value" and isinstance(s.value, ast.Attribute)
                                             and s.value.attr == "engine")) for s in sides)
        if engine_side and strings & KINDS:
            return f"engine compared with {sorted(strings & KINDS)}"
    return None


def engine_branches(source: str) -> list[tuple[int, str]]:
    return sorted({(getattr(n, "lineno", 0), what) for n in ast.walk(ast.parse(source))
                   if (what := _names_a_kind(n)) is not None})


def test_no_module_above_the_seam_decides_by_the_engine_kind() -> None:
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(SEAM):
            continue
        for line, what in engine_branches(path.read_text(encoding="utf-8")):
            found.setdefault((rel, what), []).append(line)
    bad = {k: v for k, v in found.items() if k not in ALLOWED_ENGINE_BRANCHES}
    assert not bad, ("decisions by the engine's kind above kctl/runtime and kctl/model (ask"
                     " kctl.runtime.engine.engines.supports(spec, Capability.X) instead):\n"
                     + "\n".join(f"  {p}:{','.join(map(str, lines))}: {w}" for (p, w), lines in sorted(bad.items())))
    stale = sorted(set(ALLOWED_ENGINE_BRANCHES) - set(found))
    assert not stale, f"ALLOWED_ENGINE_BRANCHES lists branches that no longer exist: remove {stale}"


def test_the_engine_branch_check_can_fail() -> None:
    source = ("from kctl.model.spec import Engine\nfrom kctl.model import spec as sm\n"
              "from kctl.model.spec import Engine as EngineKind\nfrom kctl.runtime.engine.hosts import HostsEngine\n"
              "def f(spec, eng):\n"
              "    a = spec.engine is Engine.hosts\n"
              "    b = spec.engine is not sm.Engine.swarm\n"
              "    c = Engine.compose in (spec.engine,)\n"
              "    d = EngineKind.hosts.value\n"
              "    e = spec.engine.value == 'hosts'\n"
              "    g = eng.kind in ('swarm', 'compose')\n"
              "    h = isinstance(eng, HostsEngine)\n"
              "    ok = Engine(spec.engine.value), spec.engine.value, kind == 'broker'\n")
    whats = [w for _line, w in engine_branches(source)]
    assert whats.count("Engine.hosts") == 1 and "Engine.swarm" in whats and "Engine.compose" in whats
    assert "EngineKind.hosts" in whats and "EngineKind" in whats  # the alias imported, and its use
    assert "engine compared with ['hosts']" in whats and "engine compared with ['compose', 'swarm']" in whats
    assert whats.count("HostsEngine") == 2  # imported and used
    assert not [line for line, _w in engine_branches(source) if line == 13]  # line 13: none of these


def test_the_fault_injectors_are_picked_by_capability() -> None:
    assert type(faults.open_faults(ClusterSpec(), dc=object())) is faults.Faults
    hosts_spec = ClusterSpec().model_copy(update={"engine": EngineKind.hosts})
    assert type(faults.open_faults(hosts_spec)) is faults.HostFaults
