"""docs/benchmarks.md: each benchmark owns one ``## `` section and rewrites only that one."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def replace_section(text: str, section: str) -> str:
    """Replace the section whose heading is the first line of ``section`` (up to the next ``## ``), or append it."""
    heading = section.splitlines()[0].strip()
    pattern = re.compile(rf"^{re.escape(heading)}\s*$.*?(?=^## |\Z)", re.S | re.M)
    body = section.rstrip("\n") + "\n\n"
    if pattern.search(text):
        return pattern.sub(lambda _m: body, text, count=1).rstrip("\n") + "\n"
    if not text.strip():
        text = "# Benchmarks\n"
    return text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"


def write_section(section: str, path: Path = DOC) -> None:
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_section(old, section), encoding="utf-8")


def add_output_args(ap: argparse.ArgumentParser) -> None:
    """``--docs PATH`` and ``--no-write``, the same for every benchmark."""
    ap.add_argument("--docs", type=Path, default=DOC, help="the benchmarks document to rewrite a section of")
    ap.add_argument("--no-write", action="store_true", help="print the section only")


def publish(section: str, args: argparse.Namespace) -> None:
    """Print the section; unless ``--no-write``, rewrite it in ``--docs`` too."""
    print(section)
    if not args.no_write:
        write_section(section, args.docs)
        print(f"rewrote the {section.splitlines()[0].strip()!r} section of {args.docs}", file=sys.stderr)


def table(header: tuple[str, str], rows: list[tuple[str, str]]) -> list[str]:
    """A two-column Markdown table, one line per row."""
    return [f"| {header[0]} | {header[1]} |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
