"""A small declarative checker for YAML mappings: types, ranges, choices, unknown keys, defaults.

Each problem becomes one BadInput naming file, line, field, what is allowed and what to do.
Every number is finite and bounded: by the field's own `high` (its `allowed` text says why), else
by 2**53.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labctl.catalog.limits import EXACT, finite
from labctl.catalog.sourcefile import KeyPath, SourceFile

MISSING: Any = object()


@dataclass(frozen=True)
class Field:
    kind: str  # str | int | float | bool | list | map | any
    allowed: str = ""
    required: bool = False
    default: Any = MISSING
    check: Callable[[Any], bool] | None = None
    fields: dict[str, Field] | None = None  # for kind == "map" with fixed keys
    item: Field | None = None  # for kind == "list", or "map" with free keys (values)
    high: float | None = None  # for numbers: the largest allowed; `allowed` says why


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "map":
        return isinstance(value, dict)
    return True


_KIND_WORDS = {
    "str": "a string",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "map": "a mapping",
}


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return type(value).__name__
    return repr(value)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _check_number(src: SourceFile, key: KeyPath, value: float, spec: Field) -> None:
    want = spec.allowed or _KIND_WORDS.get(spec.kind, spec.kind)
    if not finite(value):
        raise src.problem(key, f"{_describe(value)} is not allowed: expected a finite number ({want}).")
    if spec.high is not None and value > spec.high:
        raise src.problem(key, f"{_number(value)} is above the most allowed, {_number(spec.high)}: {want}.")
    if abs(value) > EXACT:
        raise src.problem(key, f"{_number(value)} is too large: numbers here stay within ±2**53 ({want}).")


def check_value(src: SourceFile, key: KeyPath, value: Any, spec: Field) -> Any:
    if not _type_ok(spec.kind, value):
        want = spec.allowed or _KIND_WORDS.get(spec.kind, spec.kind)
        raise src.problem(key, f"expected {want}, found {_describe(value)}.")
    if spec.kind == "float":
        value = float(value)
    if spec.kind in ("int", "float"):
        _check_number(src, key, value, spec)
    if spec.check is not None and not spec.check(value):
        raise src.problem(key, f"{_describe(value)} is not allowed: expected {spec.allowed}.")
    if spec.kind == "map" and spec.fields is not None:
        return check_mapping(src, key, value, spec.fields)
    if spec.kind == "map" and spec.item is not None:
        return {k: check_value(src, (*key, str(k)), v, spec.item) for k, v in value.items()}
    if spec.kind == "list" and spec.item is not None:
        return [check_value(src, (*key, i), v, spec.item) for i, v in enumerate(value)]
    return value


def check_mapping(src: SourceFile, prefix: KeyPath, data: dict[str, Any], fields: dict[str, Field]) -> dict[str, Any]:
    for name in data:
        if name not in fields:
            close = difflib.get_close_matches(str(name), list(fields), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            allowed = ", ".join(sorted(fields))
            raise src.problem((*prefix, str(name)), f"unknown field.{hint} Allowed here: {allowed}.")
    out: dict[str, Any] = {}
    for name, spec in fields.items():
        if name in data and data[name] is None and not spec.required:
            out[name] = None  # an explicit null means "not set"
        elif name in data:
            out[name] = check_value(src, (*prefix, name), data[name], spec)
        elif spec.required:
            what = spec.allowed or _KIND_WORDS.get(spec.kind, spec.kind)
            raise src.problem(prefix, f"missing required field {name!r} ({what}).")
        elif spec.default is not MISSING:
            out[name] = spec.default() if callable(spec.default) else spec.default
        else:
            out[name] = None
    return out
