"""Parameter coercion for the plain types kctl's commands use, without pydantic.

Typer (0.29) converts each parameter's value with a pydantic ``TypeAdapter``, built on
every run for every parameter of the invoked command: the first one imports pydantic's
validation machinery and each costs a schema build, before the command has done anything.
kctl's options are str, int, float (some with a range), Path and enums; for those, ``install()`` makes Typer
use the conversions below, which give the same values and the same error messages
(tests/unit/test_cli_coerce.py compares them with Typer's own). Anything else (lists,
clamped numbers, custom parsers, files) still goes through Typer's adapters.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_INT_MSG = "Input should be a valid integer, unable to parse string as an integer"
_FRACTION_MSG = "Input should be a valid integer, got a number with a fractional part"
_FLOAT_MSG = "Input should be a valid number, unable to parse string as a number"
_WHOLE = re.compile(r"\s*[+-]?[0-9][0-9_]*\.0*\s*")


def to_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(_FRACTION_MSG)
        return int(value)
    if isinstance(value, bytes):
        value = value.decode()
    text = str(value)
    if not text.isascii():  # int() takes other scripts' digits; pydantic does not
        raise ValueError(_INT_MSG)
    try:
        return int(text)
    except ValueError:
        pass
    if _WHOLE.fullmatch(text):  # "5.0", as pydantic takes it
        return int(text.strip().rstrip("0").rstrip("."))
    raise ValueError(_INT_MSG)


def to_float(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, bytes):
        value = value.decode()
    try:
        if not str(value).isascii():
            raise ValueError(value)
        return float(str(value))
    except ValueError:
        raise ValueError(_FLOAT_MSG) from None


_TRUE = frozenset(("1", "on", "t", "true", "y", "yes"))
_FALSE = frozenset(("0", "off", "f", "false", "n", "no"))
_BOOL_MSG = "Input should be a valid boolean, unable to interpret input"


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "" or text in _FALSE:  # Typer reads an empty flag value as False
            return False
        if text in _TRUE:
            return True
    elif not isinstance(value, (int, float)):
        raise ValueError("Input should be a valid boolean")
    raise ValueError(_BOOL_MSG)


def to_str(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _plain(annotation: Any, info: Any) -> Callable[[Any, Any, Any], Any] | None:
    """The conversion for ``annotation``, or None when Typer's own should run."""
    from typer._param_types import coerce_cli_choice, coerce_cli_path, lenient_issubclass, routes_to_path

    if info.parser is not None:
        return None
    if annotation is str:
        return lambda v, _p, _c: to_str(v)
    if annotation is bool:
        return lambda v, _p, _c: to_bool(v)
    if annotation in (int, float):
        if info.clamp:
            return None
        conv = to_int if annotation is int else to_float
        lo, hi = info.min, info.max
        if lo is None and hi is None:
            return lambda v, _p, _c: conv(v)

        def ranged(v: Any, _p: Any, _c: Any) -> Any:
            n = conv(v)
            if lo is not None and not n >= lo:
                raise ValueError(f"Input should be greater than or equal to {lo}")
            if hi is not None and not n <= hi:
                raise ValueError(f"Input should be less than or equal to {hi}")
            return n

        return ranged
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        choices = list(annotation)

        def choice(v: Any, _p: Any, c: Any) -> Any:
            try:
                return coerce_cli_choice(v, choices=choices, case_sensitive=info.case_sensitive, ctx=c)
            except ValueError as exc:  # worded as pydantic words a validator's ValueError
                raise ValueError(f"Value error, {exc}") from None

        return choice
    if lenient_issubclass(annotation, Path) and routes_to_path(annotation, info):
        path_type = info.path_type or annotation

        def path(v: Any, p: Any, c: Any) -> Any:
            if isinstance(v, (str, bytes)) or not isinstance(v, path_type):
                v = path_type(v.decode() if isinstance(v, bytes) else v)
            return coerce_cli_path(v, info, path_type=path_type, param=p, ctx=c)

        return path
    return None


def install() -> bool:
    """Route Typer's coercion of plain types through this module; False if this Typer lacks the hook."""
    try:
        import typer.core as core
        from typer._coercion import RuntimeParam, build_runtime_param
    except ImportError:
        return False
    current = getattr(core, "build_runtime_param", None)
    if current is not build_runtime_param:  # installed already, or a Typer that works differently
        return getattr(current, "__module__", "") == __name__
    from typer._click.exceptions import BadParameter

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        convert: Callable[[Any, Any, Any], Any]

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.convert(value, param, ctx)
            except ValueError as exc:
                raise BadParameter(str(exc), ctx=ctx, param=param) from exc

    def build(descriptor: Any) -> Any:
        convert = None if descriptor.file_annotation is not None else _plain(
            descriptor.annotation, descriptor.parameter_info)
        if convert is None:
            return build_runtime_param(descriptor)
        return PlainRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                                 convert=convert)

    build.__module__ = __name__
    setattr(core, "build_runtime_param", build)  # noqa: B010 - typer.core does not export the name
    return True
