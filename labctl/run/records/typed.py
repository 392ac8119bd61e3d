"""Typed values from the JSON labctl reads back (records, bench results, evaluations): one generic reader
that builds a dataclass from data and names the field whose shape is wrong, and the schema-version check
every kind of file shares. A file may come from a colleague, a crash or an editor: it is data to check."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, TypeVar, Union

from labctl.compose.labels import RunLabels

T = TypeVar("T")
MAX_DEPTH = 64  # labctl writes a few levels; anything this deep is not a file it wrote


class ShapeError(ValueError):
    """A field of the wrong shape: `field` is its path (levels[2].median_ttft_ms), `problem` what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = _printable(field) or "the top level"  # keys come from the file: one line, whatever they hold
        self.problem = _printable(problem)
        super().__init__(f"{self.field}: {self.problem}")


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class FutureSchema(ValueError):
    """Written by a newer labctl: refused, never misread."""


def check_version(data: dict[str, Any], readable: tuple[int, ...], default: int) -> int:
    """The file's schema_version: absent means `default` (files written before versions); a newer one than
    this labctl reads raises FutureSchema, anything else that is not a known version ShapeError."""
    version = data.get("schema_version", default)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ShapeError("schema_version", f"expected a whole number, found {_kind(version)}")
    if version > max(readable):
        raise FutureSchema(
            f"schema version {version} was written by a newer labctl (this one reads {max(readable)}): upgrade labctl"
        )
    if version not in readable:
        raise ShapeError("schema_version", f"unknown version {version} (this labctl reads {list(readable)})")
    return version


def check_depth(data: Any, limit: int = MAX_DEPTH) -> None:
    """Nested lists and mappings no deeper than `limit` (checked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            raise ShapeError("", f"nested more than {limit} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def from_json(kind: Any, data: Any, where: str = "") -> Any:
    """A value of type `kind` built from JSON data; a wrong shape raises ShapeError naming the field.
    Unknown keys are ignored (a newer labctl's optional fields); missing ones take their defaults."""
    origin = typing.get_origin(kind)
    if kind is Any or data is None and _optional(kind):
        return data
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        return from_json(inner[0], data, where) if len(inner) == 1 else data
    if kind is RunLabels:
        labels = expect(dict, data, where)
        return RunLabels.from_labels({str(k): str(v) for k, v in labels.items() if isinstance(v, str | int | float)})
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, data, where)
    if origin is tuple:
        args = typing.get_args(kind)
        return tuple(from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(expect(list, data, where)))
    if origin is dict:
        args = typing.get_args(kind)
        items = expect(dict, data, where).items()
        return {k: from_json(args[1], v, _join(where, str(k))) for k, v in items}
    if kind is dict:
        return dict(expect(dict, data, where))
    if kind is float:
        return _number(data, where)
    if kind in (str, int, bool):
        return expect(kind, data, where)
    return data


def _dataclass(kind: Any, data: Any, where: str) -> Any:
    hints = typing.get_type_hints(kind)
    fields = {f.name: f for f in dataclasses.fields(kind)}
    values = {k: from_json(hints[k], v, _join(where, k)) for k, v in expect(dict, data, where).items() if k in fields}
    for name, spec in fields.items():
        no_default = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        if no_default and name not in values:
            raise ShapeError(_join(where, name), "missing")
    return kind(**values)


def _number(data: Any, where: str) -> float:
    if isinstance(data, bool) or not isinstance(data, int | float):
        raise ShapeError(where, f"expected a number, found {_kind(data)}")
    try:
        value = float(data)
    except OverflowError:
        raise ShapeError(where, "a number too large") from None
    if not math.isfinite(value):
        raise ShapeError(where, f"not a finite number ({value})")
    return value


def expect(kind: type[T], data: Any, where: str = "") -> T:
    if not isinstance(data, kind) and kind is dict and not where:
        raise ShapeError(where, f"not a JSON object (found {_kind(data)})")
    if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
        names = {dict: "a mapping", list: "a list", str: "a string", int: "a whole number", bool: "true or false"}
        raise ShapeError(where, f"expected {names.get(kind, kind.__name__)}, found {_kind(data)}")
    return data


def _kind(data: Any) -> str:
    if data is None:
        return "null"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    shown = repr(data)[:40] if isinstance(data, str | int | float) else ""
    return names.get(type(data), type(data).__name__) + (f" {shown}" if shown else "")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _optional(kind: Any) -> bool:
    return typing.get_origin(kind) in (Union, types.UnionType) and type(None) in typing.get_args(kind)


def check_interval(interval: tuple[float, ...] | None, where: str) -> None:
    """A 95 % interval is [low, high] or absent: the typed reader checks numbers, not how many."""
    if interval is not None and len(interval) != 2:
        raise ShapeError(where, "expected [low, high]")
