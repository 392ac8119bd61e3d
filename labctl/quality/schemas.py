"""json_schema checks: JSON Schema draft 2020-12, validated by the `jsonschema` library, offline.

A check must never pass an answer because a constraint was silently skipped. So a schema is read at
load, and every keyword that would not be checked is refused there, naming it: keywords of no draft
(a typo such as `minimun` is ignored by every validator), keywords that are annotations only
(`contentMediaType`, …), formats nothing here can check, and `$ref`s that leave the schema: labctl
never fetches a schema, and its registry has nothing to fetch with."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from labctl.host.sandbox.regex import MAX_PATTERN_CHARS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
# Bumped whenever what a json_schema verdict means changes (suites hash it into their version).
CHECK_VERSION = 2
FORMATS = FormatChecker()
NOTES = {"$schema", "$id", "$anchor", "$dynamicAnchor", "$comment", "$defs", "title", "description"}
NOTES |= {"default", "examples", "deprecated", "readOnly", "writeOnly"}
KEYWORDS = set(Draft202012Validator.VALIDATORS) | {"then", "else"} | NOTES
ONE_SCHEMA = {"items", "contains", "additionalProperties", "propertyNames", "if", "then", "else", "not"}
ONE_SCHEMA |= {"unevaluatedItems", "unevaluatedProperties"}
SCHEMA_LIST = {"allOf", "anyOf", "oneOf", "prefixItems"}
SCHEMA_MAP = {"properties", "patternProperties", "$defs", "dependentSchemas"}
# Keywords whose regular expressions meet the answer's text: such a schema is checked in a child
# process with a time limit, like a regex check.
REGEX_KEYWORDS = {"pattern", "patternProperties"}
NOT_CHECKED = {
    "contentMediaType": "an annotation in draft 2020-12: it is never checked",
    "contentEncoding": "an annotation in draft 2020-12: it is never checked",
    "contentSchema": "an annotation in draft 2020-12: it is never checked",
    "definitions": "not a draft 2020-12 keyword: use $defs",
    "dependencies": "not a draft 2020-12 keyword: use dependentRequired or dependentSchemas",
    "additionalItems": "not a draft 2020-12 keyword: use prefixItems and items",
}

KeyPath = tuple[str | int, ...]


def _walk(schema: Any, at: KeyPath) -> Iterator[tuple[KeyPath, str, Any]]:
    """(where, keyword, value) for every keyword of every subschema."""
    if not isinstance(schema, dict):
        return
    for keyword, value in schema.items():
        yield (*at, keyword), keyword, value
        if keyword in ONE_SCHEMA:
            yield from _walk(value, (*at, keyword))
        elif keyword in SCHEMA_LIST and isinstance(value, list):
            for i, item in enumerate(value):
                yield from _walk(item, (*at, keyword, i))
        elif keyword in SCHEMA_MAP and isinstance(value, dict):
            for name, item in value.items():
                yield from _walk(item, (*at, keyword, name))


def schema_problem(schema: Any) -> tuple[KeyPath, str] | None:
    """Where (a key path inside the schema) and why labctl would not check all of this schema."""
    if not isinstance(schema, dict):
        return (), "a json_schema check needs schema: {...} (a JSON Schema object)."
    for where, keyword, value in _walk(schema, ()):
        problem = _keyword_problem(where, keyword, value)
        if problem:
            return where, problem
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return tuple(exc.path), f"not a valid draft 2020-12 schema: {exc.message[:200]}."
    resolver = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    for where, keyword, value in _walk(schema, ()):
        if keyword in ("$ref", "$dynamicRef"):
            try:
                resolver.lookup(value)
            except Unresolvable:
                return where, f"{keyword} {value!r} points to nothing in this schema."
    cycle = _ref_cycle(schema, lambda ref: resolver.lookup(ref).contents)
    if cycle is not None:
        return cycle, (
            "this $ref leads back to itself without reading any part of the answer (through $ref, allOf, anyOf, "
            "oneOf, not, if/then/else): checking would never end. Put the recursion under properties or items."
        )
    return None


# Applicators that check the same value again: a cycle through these alone never reaches the answer's parts.
IN_PLACE_ONE = ("not", "if", "then", "else")
IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
IN_PLACE_MAP = ("dependentSchemas",)


def _in_place(node: dict[str, Any], lookup: Any) -> Iterator[Any]:
    yield from (node[k] for k in IN_PLACE_ONE if k in node)
    yield from (item for k in IN_PLACE_LIST for item in node.get(k) or [])
    yield from (item for k in IN_PLACE_MAP for item in (node.get(k) or {}).values())
    yield from (lookup(node[k]) for k in ("$ref", "$dynamicRef") if isinstance(node.get(k), str))


def _ref_cycle(schema: dict[str, Any], lookup: Any) -> KeyPath | None:
    """Where a subschema reaches itself again through in-place applicators only (None: no such cycle)."""
    subschemas: list[tuple[KeyPath, Any]] = [((), schema)]
    for where, keyword, value in _walk(schema, ()):
        if keyword in ONE_SCHEMA:
            subschemas.append((where, value))
        elif keyword in SCHEMA_LIST and isinstance(value, list):
            subschemas += [((*where, i), item) for i, item in enumerate(value)]
        elif keyword in SCHEMA_MAP and isinstance(value, dict):
            subschemas += [((*where, name), item) for name, item in value.items()]
    done: set[int] = set()
    for where, start in subschemas:
        if not isinstance(start, dict) or id(start) in done:
            continue
        on_path: set[int] = set()
        stack = [(start, iter(_in_place(start, lookup)))]
        on_path.add(id(start))
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(id(node))
                done.add(id(node))
                continue
            if not isinstance(child, dict) or id(child) in done:
                continue
            if id(child) in on_path:
                return where
            on_path.add(id(child))
            stack.append((child, iter(_in_place(child, lookup))))
    return None


def _keyword_problem(where: KeyPath, keyword: str, value: Any) -> str | None:
    if keyword in NOT_CHECKED:
        return f"the JSON Schema keyword {keyword!r} is {NOT_CHECKED[keyword]}; labctl refuses what it would not check."
    if keyword not in KEYWORDS:
        return (
            f"the JSON Schema keyword {keyword!r} is not one labctl checks (draft 2020-12): a keyword no "
            "validator knows is silently ignored, so it is refused. Fix its spelling or remove it."
        )
    if keyword == "$schema" and value.rstrip("#") != DRAFT:
        return f"$schema {str(value)[:80]!r}: labctl checks draft 2020-12 only ({DRAFT})."
    if keyword == "$id" and len(where) > 1:
        return "a $id inside a schema starts a new base for $ref: keep $id at the root, or remove it."
    if keyword in ("$ref", "$dynamicRef") and not (isinstance(value, str) and value.startswith("#")):
        return (
            f"{keyword} {str(value)[:80]!r} leaves this schema: labctl never fetches a schema. Copy what it "
            "names under $defs and refer to it as '#/$defs/NAME'."
        )
    if keyword == "format" and value not in FORMATS.checkers:
        known = ", ".join(sorted(FORMATS.checkers))
        return f"format {str(value)[:40]!r} cannot be checked here (it would be ignored); checkable formats: {known}."
    patterns = [value] if keyword == "pattern" else list(value) if keyword == "patternProperties" else []
    for pattern in patterns:
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
            return f"{keyword}: a pattern must be a string of at most {MAX_PATTERN_CHARS} characters."
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"{keyword} {pattern[:80]!r} is not a valid regular expression: {exc}."
    return None


def uses_regex(schema: dict[str, Any]) -> bool:
    return any(keyword in REGEX_KEYWORDS for _, keyword, _ in _walk(schema, ()))


def validation_errors(data: Any, schema: dict[str, Any]) -> list[str]:
    """Up to three errors, each `$.path: message`; none when the data is valid."""
    validator = Draft202012Validator(schema, registry=Registry(), format_checker=FORMATS)
    try:
        errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    except RecursionError:  # nested deeper than Python's stack: a hostile answer or schema, not a verdict
        return ["$: nested too deeply to check"]
    return [f"{error.json_path}: {error.message[:160]}" for error in errors[:3]]
