"""A JSON Schema (draft 2020-12) from a field table (catalog/fields.py): what an editor can check as a file is
typed. The loaders stay the authority: a rule written as code (`check`) reaches the schema only as the field's
description, so a file the schema accepts may still be refused with one line by `labctl validate`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labctl.catalog.fields import MISSING, Field

DRAFT = "https://json-schema.org/draft/2020-12/schema"
KeyPath = tuple[str, ...]
EACH = "*"  # in a key path: every entry of a list or of a map with free keys

_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array", "map": "object"}


def json_schema(
    title: str, description: str, fields: Mapping[str, Field], entries: Mapping[KeyPath, Mapping[str, Field]]
) -> dict[str, Any]:
    """The schema of a file whose top level is `fields`. `entries` gives the fields of the entries a loader
    checks one by one (("hosts", "*"): each host's entry), which the table itself leaves as a plain mapping."""
    top = _object(fields, (), entries)
    return {"$schema": DRAFT, "title": title, "description": description, **top}


def _object(
    fields: Mapping[str, Field], path: KeyPath, entries: Mapping[KeyPath, Mapping[str, Field]]
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _property(spec, (*path, name), entries) for name, spec in fields.items()},
        "additionalProperties": False,
    }
    required = [name for name, spec in fields.items() if spec.required]
    if required:
        schema["required"] = required
    return schema


def _property(spec: Field, path: KeyPath, entries: Mapping[KeyPath, Mapping[str, Field]]) -> dict[str, Any]:
    schema = _field(spec, path, entries)
    if not spec.required and "type" in schema:  # an explicit null means "not set" (check_mapping)
        schema["type"] = [schema["type"], "null"]
    return schema


def _field(spec: Field, path: KeyPath, entries: Mapping[KeyPath, Mapping[str, Field]]) -> dict[str, Any]:
    if spec.kind == "map" and spec.fields is not None:
        schema = _object(spec.fields, path, entries)
    else:
        schema = {"type": _TYPES[spec.kind]} if spec.kind in _TYPES else {}
        each = (*path, EACH)
        inner: dict[str, Any] | None = None
        if each in entries:
            inner = _object(entries[each], each, entries)
        elif spec.item is not None:
            inner = _field(spec.item, each, entries)
        if inner is not None and spec.kind == "list":
            schema["items"] = inner
        elif inner is not None and spec.kind == "map":
            schema["additionalProperties"] = inner
    if spec.allowed:
        schema["description"] = spec.allowed
    if spec.high is not None:
        schema["maximum"] = int(spec.high) if float(spec.high).is_integer() else spec.high
    if spec.default is not MISSING and not callable(spec.default):
        schema["default"] = spec.default
    return schema
