"""The runbook runner's parsing (tests/integration/runbook.py): which lines of a runbook are run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import runbook

TEXT = """# Runbook

```sh
kctl status
# expect: HEALTHY
# a comment, not a command

kctl diff
# exit: 1
# expect: drift
```

```yaml
kafka:
  overrides: {a: b}
```

```
not run
```

```sh
kctl apply --yes
```
"""


def test_steps_are_the_sh_lines_with_what_they_must_show() -> None:
    got = [(s.command, s.expect, s.exit_code, s.line) for s in runbook.steps(TEXT)]
    assert got == [("kctl status", ["HEALTHY"], 0, 4), ("kctl diff", ["drift"], 1, 8),
                   ("kctl apply --yes", [], 0, 23)]


def test_other_blocks_are_returned_not_run() -> None:
    assert runbook.blocks(TEXT, "yaml") == ["kafka:\n  overrides: {a: b}\n"]
    assert "not run" not in [s.command for s in runbook.steps(TEXT)]


def test_an_expectation_before_any_command_is_an_error() -> None:
    with pytest.raises(ValueError, match="before any command"):
        runbook.steps("```sh\n# expect: x\n```\n")


@pytest.mark.parametrize("path", sorted(runbook.RUNBOOKS.glob("*.md")), ids=lambda p: p.name)
def test_every_runbook_has_steps(path: object) -> None:
    assert runbook.steps(path.read_text())  # type: ignore[attr-defined]


def _files(tmp_path: object) -> tuple[Path, Path]:
    """A kctl.yaml and a runbook's path in ``tmp_path``."""
    d = Path(str(tmp_path))
    spec = d / "kctl.yaml"
    spec.write_text("name: x\n")
    return spec, d / "rb.md"


def test_run_executes_each_line_with_the_cluster_in_its_environment(tmp_path: object) -> None:
    spec, md = _files(tmp_path)
    md.write_text('```sh\necho "$KCTL_FILE $KCTL_STATE"\n# expect: kctl.yaml /st\ncommand -v kctl\n'
                  '# expect: /kctl\nexit 3\n# exit: 3\n```\n')
    seen: list[str] = []
    ran = runbook.run(md, spec, state_dir=Path("/st"), before=lambda s: seen.append(s.command))
    assert [r.returncode for r in ran] == [0, 0, 3] and seen == [r.step.command for r in ran]
    md.write_text("```sh\necho hello\n# expect: goodbye\n```\n")
    with pytest.raises(AssertionError, match="'goodbye' not in its output"):
        runbook.run(md, spec)


def test_lines_for_one_metadata_mode_apply_only_on_a_cluster_in_it(tmp_path: object) -> None:
    spec, md = _files(tmp_path)
    md.write_text("```sh\necho common zk-only\n# expect: common\n# expect on zookeeper: zk-only\n"
                  "# expect on kraft: kraft-only\necho on-zookeeper\n# only on zookeeper\n```\n")
    (step, only) = runbook.steps(md.read_text())
    assert step.expect_on == {"zookeeper": ["zk-only"], "kraft": ["kraft-only"]} and only.only_on == "zookeeper"
    ran = runbook.run(md, spec)
    assert [r.step.command for r in ran] == ["echo common zk-only", "echo on-zookeeper"]
    with pytest.raises(AssertionError, match="'kraft-only' not in its output"):
        runbook.run(md, spec, metadata="kraft")
    md.write_text("```sh\necho common\n# expect on zookeeper: zk-only\necho on-zookeeper\n# only on zookeeper\n```\n")
    assert [r.step.command for r in runbook.run(md, spec, metadata="kraft")] == ["echo common"]
