"""`kctl group reset-offsets` and `kctl group delete` of a streams group: refused with one message that names
Kafka's own tool (a streams group's offsets and its application's internal topics go together, which kctl does not
do yet), before anything is changed; a share group still goes to Kafka's share-group tool, a classic group to the
AdminClient."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from kctl.cli.main import app
from kctl.errors import KctlError
from kctl.kafka.client import Target
from kctl.model.spec import parse_spec


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from kctl.cli import group as cli_group
    from kctl.kafka import groups, share_groups
    from kctl.monitor import sources

    spec, _ = parse_spec({"name": "streams", "metadata": "kraft", "versions": {"kafka": "4.3.1"}})
    spec = spec.with_kraft("kraft", "AAAAAAAAAAAAAAAAAAAAAA")  # a cluster on KRaft, as its state says
    seen: dict[str, Any] = {"kind": None, "done": [], "asked": 0}

    def describe(target: Target, group: str) -> Any:
        if seen["kind"] is not None:  # the AdminClient knows no share group, and a streams group only as DEAD
            raise KctlError(f"group {group!r} does not exist")
        return SimpleNamespace(state="STABLE")

    def tool_kind(spec: Any, group: str) -> str | None:
        seen["asked"] += 1
        return seen["kind"]  # type: ignore[no-any-return]

    monkeypatch.setattr(cli_group, "connect", lambda *a, **kw: Target(spec, "127.0.0.1:9092"))
    monkeypatch.setattr(groups, "describe", describe)
    monkeypatch.setattr(sources, "tool_kind", tool_kind)
    for mod, name in ((groups, "delete"), (groups, "reset_offsets"), (share_groups, "delete"),
                      (share_groups, "reset_offsets")):
        monkeypatch.setattr(mod, name, lambda *a, _n=f"{mod.__name__}.{name}", **kw: seen["done"].append(_n))
    return seen


@pytest.mark.parametrize("args", [["reset-offsets", "wordcount", "--topic", "in", "--to-earliest", "--execute"],
                                  ["delete", "wordcount"]])
def test_a_streams_group_is_refused_with_kafkas_tool_named_and_nothing_done(calls: dict[str, Any],
                                                                             args: list[str]) -> None:
    calls["kind"] = "streams"
    from kctl.errors import UsageError

    run = CliRunner().invoke(app, ["group", *args])
    err = run.exception  # kctl's entry point prints it as one message and its hint, exit 2
    assert isinstance(err, UsageError), run.output
    assert "'wordcount' is a streams group" in err.message and "kafka-streams-groups.sh" in (err.hint or ""), err
    assert calls["done"] == []


@pytest.mark.parametrize(("kind", "expected"), [(None, "kctl.kafka.groups.delete"),
                                                ("share", "kctl.kafka.share_groups.delete")])
def test_share_and_classic_groups_are_still_deleted_by_their_own_path(calls: dict[str, Any], kind: str | None,
                                                                      expected: str) -> None:
    calls["kind"] = kind
    run = CliRunner().invoke(app, ["group", "delete", "g"])
    assert run.exit_code == 0, run.output
    assert calls["done"] == [expected]
    # a group the AdminClient describes as live asks no Kafka tool (two JVMs in a node) what it is
    assert calls["asked"] == (0 if kind is None else 1)
