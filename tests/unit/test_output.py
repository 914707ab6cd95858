"""Tables printed to a pipe without rich are the tables rich prints there, byte for byte."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kctl import output

TABLES = [
    ([{"a": 1, "bb": "x y"}, {"a": None, "bb": True}], None, "cluster logger"),
    ([], ["name", "value"], None),
    ([{"partition": 0, "leader": 3, "replicas": [3, 2, 1], "isr": [3, 2, 1], "offline": False}], None,
     "topic t (id RFsoc3DFRKKLr6YCoJrDOg)"),
    ([{"alpha": "xxx", "bb": "y"}], None, "a title much longer than the table it stands over"),
    ([{"key": "retention.ms", "value": "[not markup]"}], None, None),
    ([{"node": f"logger{i}", "zk_mode": "follower", "zxid": "0x1000000b1"} for i in range(1, 6)], None, ""),
]


def _rich(rows: list[dict[str, object]], columns: list[str] | None, title: str | None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, soft_wrap=True, width=output.PLAIN_WIDTH, emoji=False, force_terminal=False,
                      color_system=None)
    console.print(output.table(rows, columns, title))
    return buf.getvalue()


@pytest.mark.parametrize(("rows", "columns", "title"), TABLES)
def test_the_plain_table_is_the_one_rich_prints(rows: list[dict[str, object]], columns: list[str] | None,
                                                title: str | None) -> None:
    headers, cells = output._grid(rows, columns)
    assert output.plain_table(headers, cells, title) == _rich(rows, columns, title)


@pytest.mark.parametrize("cell", ["é😀中", "two\nlines", "x" * 250])
def test_what_rich_lays_out_differently_is_left_to_rich(cell: str) -> None:
    assert output.plain_table(["V"], [[cell]]) is None


def test_emit_to_a_pipe_prints_cells_and_footer_as_data(capsys: pytest.CaptureFixture[str]) -> None:
    output.emit([{"name": "[bold]t[/bold]"}], "table", footer="configs: a=[x] (dynamic)")
    out = capsys.readouterr().out
    assert "[bold]t[/bold]" in out and out.endswith("configs: a=[x] (dynamic)\n")
