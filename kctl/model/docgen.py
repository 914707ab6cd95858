"""Generate docs/spec.md from the spec model's field descriptions (`python -m kctl.model.docgen`)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kctl.model.spec import CROSS_FIELD_RULES, ClusterSpec

DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return f"{len(value)} items"
    if value is None:
        return "—"
    return f"`{value}`"


def _submodel(annotation: Any) -> type[BaseModel] | None:
    for sub in (*getattr(annotation, "__args__", ()), annotation):
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            return sub
        if sub is not annotation and getattr(sub, "__args__", None):  # list[X] | None: X's settings too
            found = _submodel(sub)
            if found is not None:
                return found
    return None


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows: list[str] = []
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        sub = _submodel(field.annotation)
        is_list = "list" in str(field.annotation)
        rows.append(f"| `{path}` | {_default(field)} | {field.description or ''} |")
        if sub is not None:
            nested.append((f"{path}[]." if is_list else f"{path}.", sub))
    for p, sub in nested:
        rows.extend(_rows(sub, p))
    return rows


def render() -> str:
    lines = [
        "# kctl.yaml reference",
        "",
        "Generated from the spec model's field descriptions by `python -m kctl.model.docgen`;",
        "a unit test fails when this file is out of date. Every setting is optional;",
        "unknown keys are rejected, and every problem is reported with its field path (exit 2).",
        "",
        "| setting | default | meaning |",
        "|---|---|---|",
        *_rows(ClusterSpec, ""),
        "",
        "Cross-field rules (errors unless marked as warnings):",
        "",
        *(f"- {rule}" for rule in CROSS_FIELD_RULES),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render(), encoding="utf-8")
    print(DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
