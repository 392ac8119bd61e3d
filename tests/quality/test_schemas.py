"""json_schema checks say what they cannot check: every keyword of draft 2020-12 is checked (the old
subset silently skipped pattern, minimum, maxLength, const, oneOf, $ref, …), and a keyword that would
not be checked is refused when the suite loads, with the suite file, the line and the keyword."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.support import run_labctl

from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.quality.suites import judge, load_suite

# (schema, an answer the old subset passed although it breaks the schema, a right answer)
SKIPPED_BEFORE = [
    ({"type": "string", "pattern": "^[A-Z]{3}$"}, '"oslo"', '"OSL"'),
    ({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}, '{"age": -4}', '{"age": 36}'),
    ({"type": "string", "maxLength": 5}, '"far too long"', '"short"'),
    ({"type": "object", "properties": {"ok": {"const": True}}, "required": ["ok"]}, '{"ok": false}', '{"ok": true}'),
    (
        {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "integer", "multipleOf": 5}]},
        "15",  # both: oneOf means exactly one
        "9",
    ),
    (
        {"$defs": {"unit": {"enum": ["celsius", "fahrenheit"]}}, "properties": {"unit": {"$ref": "#/$defs/unit"}}},
        '{"unit": "kelvin"}',
        '{"unit": "celsius"}',
    ),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "maxItems": 3}, "[1, 1, 2, 3]", "[1, 2, 3]"),
    ({"type": "string", "format": "email"}, '"not an address"', '"ada@example.org"'),
    ({"type": "object", "properties": {"n": {"enum": [1]}}}, '{"n": true}', '{"n": 1}'),  # true is not 1 in JSON
]


@pytest.mark.parametrize("schema, wrong, right", SKIPPED_BEFORE)
@pytest.mark.process
def test_a_constraint_the_subset_skipped_is_checked(schema: dict[str, Any], wrong: str, right: str) -> None:
    check = {"kind": "json_schema", "schema": schema}
    verdict = judge(check, wrong)
    assert not verdict.passed and verdict.reason.startswith("$"), verdict.reason
    assert judge(check, right).passed


def write_suite(lab: Path, schema: dict[str, Any], reference: str = "{}") -> Path:
    folder = lab / "suites" / "schema"
    folder.mkdir(parents=True, exist_ok=True)
    case = {"id": "a", "prompt": "JSON?", "check": {"kind": "json_schema", "schema": schema}, "reference": reference}
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump({"version": "1", "description": "x", "cases": [case]}, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "schema, line, message",
    [
        (
            {"type": "object", "properties": {"age": {"minimun": 0}}},
            12,
            "properties.age.minimun: the JSON Schema keyword 'minimun' is not one labctl checks",
        ),
        (
            {"contentMediaType": "application/json"},
            9,
            "contentMediaType: the JSON Schema keyword 'contentMediaType' is an annotation",
        ),
        (
            {"definitions": {"a": {}}},
            9,
            "definitions: the JSON Schema keyword 'definitions' is not a draft 2020-12 keyword: use $defs",
        ),
        (
            {"$ref": "https://example.com/person.json"},
            9,
            "$ref: $ref 'https://example.com/person.json' leaves this schema: labctl never fetches",
        ),
        (
            {"properties": {"p": {"$ref": "other.json#/a"}}},
            11,
            "properties.p.$ref: $ref 'other.json#/a' leaves this schema",
        ),
        ({"$ref": "#/$defs/missing"}, 9, "$ref: $ref '#/$defs/missing' points to nothing in this schema"),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#"},
            9,
            "$schema: $schema 'http://json-schema.org/draft-07/schema#': labctl checks draft 2020-12 only",
        ),
        ({"type": "string", "format": "uri"}, 10, "format: format 'uri' cannot be checked here"),
        (
            {"type": "string", "pattern": "(unclosed"},
            10,
            "pattern: pattern '(unclosed' is not a valid regular expression",
        ),
        ({"type": "strin"}, 9, "not a valid draft 2020-12 schema"),
        ({"$ref": "#"}, 8, "this $ref leads back to itself without reading any part of the answer"),
        (
            {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
            8,
            "checking would never end",
        ),
        ({"anyOf": [{"type": "string"}, {"not": {"$ref": "#"}}]}, 8, "checking would never end"),
    ],
)
def test_a_schema_labctl_would_not_fully_check_is_refused_at_load(
    lab: Path, schema: dict[str, Any], line: int, message: str
) -> None:
    write_suite(lab, schema)
    with pytest.raises(BadInput) as refused:
        load_suite(Lab(lab), "schema")
    assert str(refused.value).startswith(f"suites/schema/suite.yaml:{line}: cases[0].check.schema"), refused.value
    assert message in str(refused.value), refused.value
    assert "\n" not in str(refused.value)


def test_no_schema_is_ever_fetched(lab: Path) -> None:
    """A root $id makes '#' refs resolve inside the schema; nothing names a remote document to fetch."""
    schema = {"$id": "http://127.0.0.1:9/s.json", "$defs": {"n": {"type": "integer"}}, "items": {"$ref": "#/$defs/n"}}
    write_suite(lab, schema, "[1, 2]")
    check = load_suite(Lab(lab), "schema").cases[0].check
    assert judge(check, "[1, 2]").passed and not judge(check, '[1, "2"]').passed


@pytest.mark.process
def test_a_catastrophic_schema_pattern_cannot_hang_labctl() -> None:
    check = {"kind": "json_schema", "schema": {"type": "string", "pattern": "^(a|a)*b$"}}
    started = time.monotonic()
    verdict = judge(check, json.dumps("a" * 40))
    assert not verdict.passed and "ran past" in verdict.reason
    assert time.monotonic() - started < 15
    assert judge(check, '"aab"').passed


@pytest.mark.process
def test_the_cli_refuses_the_suite_with_one_line_and_exit_2(lab: Path, tmp_path: Path) -> None:
    write_suite(lab, {"type": "object", "properties": {"name": {"type": "string", "patern": "^A"}}})
    result = run_labctl("suites", "schema", lab=lab, env={"LABCTL_HOME": str(tmp_path / "h")})
    assert result.code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: suites/schema/suite.yaml:13: cases[0].check.schema.properties.name.patern: the JSON Schema keyword "
        "'patern' is not one labctl checks (draft 2020-12): a keyword no validator knows is silently ignored, so it "
        "is refused. Fix its spelling or remove it."
    ]


def test_recursion_under_properties_or_items_is_a_schema_not_a_cycle(lab: Path) -> None:
    """A linked list: each step reads a part of the answer, so checking ends."""
    schema = {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
    write_suite(lab, schema, '{"next": {"next": {}}}')
    check = load_suite(Lab(lab), "schema").cases[0].check
    assert judge(check, '{"next": {"next": {}}}').passed and not judge(check, '{"next": {"next": 1}}').passed


@pytest.mark.process
def test_a_ref_cycle_is_one_skipped_suite_in_the_listing(lab: Path, tmp_path: Path) -> None:
    write_suite(lab, {"$ref": "#"})
    listing = run_labctl("suites", lab=lab, env={"LABCTL_HOME": str(tmp_path / "h")})
    assert listing.code in (0, 1) and "Traceback" not in listing.stderr and "RecursionError" not in listing.stderr
    assert "schema" in listing.stderr and "leads back to itself" in listing.stderr, listing.stderr
    assert "short-answer" in listing.stdout  # the other suites are listed
