"""The runbook runner's parsing (tests/integration/runbook.py): which lines of a runbook are run."""

from __future__ import annotations

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
