"""The CLI is a flag parser over domain calls: no command module paces a loop or draws a chart (docs/architecture.md,
R14). Sampling, waiting and plotting live in the domain (kctl/monitor/judge.py, kctl/monitor/plot.py, kctl/wait.py);
a command iterates what a domain generator yields and prints it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACING = {"ticks", "sleep", "pause_until", "wait_until", "wait_for_stages"}


def offences(files: dict[str, str]) -> list[str]:
    out = []
    for rel, source in sorted(files.items()):
        tree = ast.parse(source, rel)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(n.split(".")[0] == "matplotlib" for n in names):
                    out.append(f"{rel}:{node.lineno}: imports matplotlib (draw in the domain: kctl/monitor/plot.py)")
            if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Call):
                        f = sub.func
                        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                        if name in PACING:
                            out.append(f"{rel}:{sub.lineno}: a loop paced by {name}() (the domain's to do)")
    return out


def test_no_cli_module_paces_a_loop_or_draws() -> None:
    files = {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted((ROOT / "kctl" / "cli").glob("*.py"))}
    assert offences(files) == []


def test_the_thin_cli_check_can_fail() -> None:
    src = ("import time\nfrom kctl.wait import ticks\n"
           "def lag():\n    for n in ticks(1.0):\n        print(n)\n"
           "def watch():\n    while True:\n        time.sleep(1)\n"
           "def plot():\n    import matplotlib.pyplot as plt\n"
           "def fine(gen):\n    for docs in gen:\n        print(docs)\n")
    assert offences({"kctl/cli/x.py": src}) == [
        "kctl/cli/x.py:4: a loop paced by ticks() (the domain's to do)",
        "kctl/cli/x.py:8: a loop paced by sleep() (the domain's to do)",
        "kctl/cli/x.py:10: imports matplotlib (draw in the domain: kctl/monitor/plot.py)",
    ]
