"""Rendering of command results: data to stdout, progress and warnings to stderr.

Every read command accepts ``-o table|wide|json|yaml`` (some also ``raw``).
Ops modules return plain data (dataclasses, dicts, lists); only this module
turns them into text. rich and yaml are imported when something is printed
with them, not when a command module imports this one: ``kctl --help`` and
commands that print JSON never pay for them.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


@functools.cache
def _console(err: bool) -> Console:
    from rich.console import Console

    # emoji=False: a topic or config value like ":fire:" is data, printed as is.
    if err:
        return Console(stderr=True, soft_wrap=True, emoji=False)
    # Not a terminal (a pipe, CI): do not squeeze tables into 80 columns.
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200, emoji=False)


def __getattr__(name: str) -> Any:
    # ``output.stdout`` / ``output.stderr``: the rich consoles, created on first use.
    if name in ("stdout", "stderr"):
        return _console(name == "stderr")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Format(str, enum.Enum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"
    raw = "raw"


def to_plain(obj: Any) -> Any:
    """Convert dataclasses, enums and datetimes to JSON-compatible data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "model_dump"):
        return to_plain(obj.model_dump(mode="json"))
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (_dt.datetime, _dt.date)):
        return obj.isoformat()
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    return obj


def dump_json(obj: Any) -> str:
    return json.dumps(to_plain(obj), indent=2, sort_keys=False, default=str)


def dump_yaml(obj: Any) -> str:
    import yaml

    return yaml.safe_dump(to_plain(obj), sort_keys=False, default_flow_style=False)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return ",".join(_cell(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={_cell(x)}" for k, x in v.items())
    return str(v)


def table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    title: str | None = None,
) -> Table:
    from rich.table import Table
    from rich.text import Text

    headers, cells = _grid(rows, columns)
    t = Table(title=title, show_lines=False, header_style="bold")
    for h in headers:
        t.add_column(h)
    for r in cells:
        # Text, not str: a cell is data, never rich markup (a config value "[x]" stays "[x]").
        t.add_row(*(Text(c) for c in r))
    return t


def _grid(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None) -> tuple[list[str], list[list[str]]]:
    cols = list(columns) if columns else (list(rows[0].keys()) if rows else [])
    return [c.upper().replace("_", " ") for c in cols], [[_cell(r.get(c)) for c in cols] for r in rows]


PLAIN_WIDTH = 200  # the width rich is given when stdout is not a terminal


def plain_table(headers: Sequence[str], cells: Sequence[Sequence[str]], title: str | None = None) -> str | None:
    """The table rich prints to a non-terminal (heavy-head box, one space of padding), without rich.

    None when rich would lay it out differently (wider than :data:`PLAIN_WIDTH`, a cell
    with a line break, characters whose width on screen is not one cell): rich then prints it.
    """
    texts = [*headers, *(c for row in cells for c in row)]
    if title is not None:
        texts.append(title)
    if not all(t.isascii() and t.isprintable() for t in texts):
        return None
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    if sum(widths) + 3 * len(widths) + 1 > PLAIN_WIDTH:
        return None

    def line(left: str, fill: str, mid: str, right: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def row(bar: str, values: Sequence[str]) -> str:
        return bar + bar.join(f" {v.ljust(w)} " for v, w in zip(values, widths, strict=True)) + bar

    out = [title] if title else []
    out += [line("┏", "━", "┳", "┓"), row("┃", headers), line("┡", "━", "╇", "┩")]
    out += [row("│", r) for r in cells]
    out.append(line("└", "─", "┴", "┘"))
    return "\n".join(out) + "\n"


def emit(
    data: Any,
    fmt: Format | str = Format.table,
    *,
    rows: Sequence[Mapping[str, Any]] | None = None,
    columns: Sequence[str] | None = None,
    wide_columns: Sequence[str] | None = None,
    title: str | None = None,
    raw: str | None = None,
    footer: str | None = None,
) -> None:
    """Print ``data`` in the requested format.

    ``rows`` (and ``columns``) drive the table view; json/yaml always print the
    whole ``data``. ``raw`` is the server's own text, for ``-o raw``.
    """
    f = Format(fmt)
    if f is Format.json:
        sys.stdout.write(dump_json(data) + "\n")
        return
    if f is Format.yaml:
        sys.stdout.write(dump_yaml(data))
        return
    if f is Format.raw:
        sys.stdout.write((raw if raw is not None else dump_json(data)).rstrip("\n") + "\n")
        return
    plain_rows = rows if rows is not None else _rows_of(data)
    cols = list(columns) if columns else None
    if f is Format.wide and wide_columns:
        cols = (cols or []) + [c for c in wide_columns if c not in (cols or [])]
    if not sys.stdout.isatty():
        # A pipe, a file, CI: the same table without loading rich (a quarter of a quick command's start-up).
        text = plain_table(*_grid(plain_rows, cols), title)
        if text is not None:
            sys.stdout.write(text + (footer + "\n" if footer else ""))
            return
    out = _console(False)
    out.print(table(plain_rows, cols, title))
    if footer:
        out.print(footer, markup=False, highlight=False)


def emit_change(result: Any, fmt: Format | str, line: str) -> None:
    """The outcome of a command that changes something: ``line`` on stderr, or the whole result as json/yaml."""
    if Format(fmt) in (Format.json, Format.yaml):
        emit(result, fmt)
    else:
        info(line)


def _rows_of(data: Any) -> list[dict[str, Any]]:
    plain = to_plain(data)
    if isinstance(plain, list):
        return [r if isinstance(r, dict) else {"value": r} for r in plain]
    if isinstance(plain, dict):
        return [{"key": k, "value": v} for k, v in plain.items()]
    return [{"value": plain}]


def _plain_line(msg: str) -> bool:
    """A message rich would print unchanged (no markup) to a stderr that is not a terminal."""
    return "[" not in msg and not (sys.stderr is not None and sys.stderr.isatty())


def info(msg: str) -> None:
    if _plain_line(msg):  # the summary line of produce/consume and the like: no need to load rich
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
        return
    _console(True).print(msg, highlight=False)


def warn(msg: str) -> None:
    if _plain_line(msg):
        sys.stderr.write(f"warning: {msg}\n")
        sys.stderr.flush()
        return
    _console(True).print(f"[yellow]warning:[/yellow] {msg}", highlight=False)


@contextmanager
def waiting() -> Iterator[tuple[Callable[[str, str], None], Callable[[str], None]]]:
    """``(stage, say)`` for a long wait: ``stage(name, saw)`` rewrites one transient status line on
    stderr, ``say(msg)`` prints a line above it that stays."""
    from rich.live import Live
    from rich.text import Text

    with Live(Text(""), console=_console(True), transient=True, refresh_per_second=8) as live:
        def stage(name: str, saw: str) -> None:
            live.update(Text(f"waiting: {name} — {saw}"[:200]))

        def say(msg: str) -> None:
            live.console.print(msg, highlight=False)

        yield stage, say
