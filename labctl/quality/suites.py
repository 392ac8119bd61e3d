"""Quality suites: versioned cases with checks (suites/<name>/suite.yaml).

A suite's version is its human version string plus the hash of its content: results are compared
only across the same hash."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.lab import Lab, check_name
from labctl.catalog.limits import EXACT, MAX_CODE_SECONDS, MAX_TOKENS, finite
from labctl.catalog.sourcefile import SourceFile, load_yaml_mapping
from labctl.errors import BadInput
from labctl.host.sandbox import launch as sandbox
from labctl.host.sandbox.regex import MATCH_SECONDS, MAX_ANSWER_CHARS, MAX_PATTERN_CHARS, timed_call, timed_fullmatch
from labctl.quality import schemas

CHECK_KINDS = ("exact", "regex", "number", "json_schema", "python")
# What each kind's verdict means, versioned: a suite that uses a kind past version 1 hashes the kind's
# version into its own, so results of a changed check never compare with results of the old one.
CHECK_VERSIONS = {"exact": 1, "regex": 1, "number": 1, "json_schema": schemas.CHECK_VERSION}
CHECK_VERSIONS["python"] = sandbox.CHECK_VERSION
_MAX_TOKENS_WHY = f"a whole number > 0, at most {MAX_TOKENS}: no served model has a longer context"
# A suite is asked case by case against a live engine; ten thousand cases is hours of answers.
MAX_CASES = 10_000

CHECK_FIELDS: dict[str, Field] = {
    "kind": Field("str", "one of " + ", ".join(CHECK_KINDS), required=True, check=lambda v: v in CHECK_KINDS),
    "expected": Field("any", "the expected answer (exact: a string; number: a number)"),
    "pattern": Field("str", "a Python regular expression the whole answer must match"),
    "tolerance": Field("float", "allowed absolute difference (>= 0, finite)", default=0.0, check=lambda v: v >= 0),
    "schema": Field("map", "a JSON Schema (draft 2020-12; a keyword labctl would not check is refused)"),
    "tests": Field("str", "Python statements (asserts) run after the model's code"),
    "timeout_s": Field(
        "float",
        f"seconds the code may run (> 0, at most {MAX_CODE_SECONDS:.0f}: longer is a hang, not a test)",
        default=10.0,
        check=lambda v: v > 0,
        high=MAX_CODE_SECONDS,
    ),
}

CASE_FIELDS: dict[str, Field] = {
    "id": Field(
        "str", "a short unique name", required=True, check=lambda v: re.fullmatch(r"[A-Za-z0-9._-]+", v) is not None
    ),
    "prompt": Field("str", "the user message"),
    "messages": Field("list", "chat messages [{role, content}]", item=Field("map")),
    "max_tokens": Field("int", _MAX_TOKENS_WHY, check=lambda v: v > 0, high=MAX_TOKENS),
    "temperature": Field("float", "a number in [0, 2]", check=lambda v: 0 <= v <= 2),
    "seed": Field("int", "a whole number"),
    "check": Field("map", required=True, fields=CHECK_FIELDS),
    "reference": Field("str", "a known-correct answer (it must pass the check)", required=True),
}

SUITE_FIELDS: dict[str, Field] = {
    "version": Field("str", "a human version string such as '1.0'", required=True),
    "description": Field("str", "one line", required=True),
    "system": Field("str", "a system prompt sent before every case"),
    "defaults": Field(
        "map",
        fields={
            "max_tokens": Field("int", _MAX_TOKENS_WHY, default=256, check=lambda v: v > 0, high=MAX_TOKENS),
            "temperature": Field("float", "a number in [0, 2]", default=0.0, check=lambda v: 0 <= v <= 2),
            "seed": Field("int", "a whole number", default=0),
            "thinking_allowance": Field(
                "int",
                "tokens added to every case's max_tokens when the model may think (its thinking mode is not off): "
                "room to reason before the answer",
                default=0,
                check=lambda v: v >= 0,
                high=MAX_TOKENS,
            ),
        },
        default=lambda: {"max_tokens": 256, "temperature": 0.0, "seed": 0, "thinking_allowance": 0},
    ),
    "cases": Field(
        "list",
        f"a list of 1 to {MAX_CASES} cases",
        required=True,
        check=lambda v: 0 < len(v) <= MAX_CASES,
        item=Field("map"),
    ),
}


@dataclass(frozen=True)
class Case:
    id: str
    messages: list[dict[str, str]]
    settings: dict[str, Any]
    check: dict[str, Any]
    reference: str
    thinking_allowance: int = 0  # tokens added to max_tokens for a model that may think

    def settings_for(self, thinking: str | None) -> dict[str, Any]:
        """The request settings: a model whose thinking is not off (on, or unknown for an endpoint labctl did not
        start) gets the suite's room to reason before the answer, so max_tokens does not end it mid-thought."""
        if thinking == "off" or not self.thinking_allowance:
            return dict(self.settings)
        return self.settings | {"max_tokens": min(MAX_TOKENS, self.settings["max_tokens"] + self.thinking_allowance)}

    @property
    def prompt(self) -> str:
        """The last user message: what the harness engine's answer map is keyed by."""
        return next(m["content"] for m in reversed(self.messages) if m["role"] == "user")


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    description: str
    cases: list[Case]
    sha256: str

    @property
    def full_version(self) -> str:
        return f"{self.version}+{self.sha256[:12]}"

    def answer_map(self) -> dict[str, str]:
        return {case.prompt: case.reference for case in self.cases}


def load_suite(lab: Lab, name: str) -> Suite:
    check_name(name, "suite")
    path = lab.inside(lab.root / "suites" / name / "suite.yaml")
    if not path.is_file():
        known = ", ".join(list_suites(lab)) or "none"
        raise BadInput(f"unknown suite {name!r}. Suites in {lab.root / 'suites'}: {known}.")
    src = load_yaml_mapping(path, display=str(path.relative_to(lab.root)))
    spec = check_mapping(src, (), src.data, SUITE_FIELDS)
    cases = [_case(src, i, raw, spec) for i, raw in enumerate(spec["cases"])]
    seen: set[str] = set()
    for i, case in enumerate(cases):
        if case.id in seen:
            raise src.problem(("cases", i, "id"), f"duplicate case id {case.id!r}.")
        seen.add(case.id)
    digest = suite_digest(src.data, {case.check["kind"] for case in cases})
    return Suite(name=name, version=spec["version"], description=spec["description"], cases=cases, sha256=digest)


def suite_digest(data: dict[str, Any], kinds: set[str]) -> str:
    versions = {kind: CHECK_VERSIONS[kind] for kind in sorted(kinds) if CHECK_VERSIONS[kind] > 1}
    hashed = {"suite": data, "check_versions": versions} if versions else data
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_versions(suite: Suite) -> dict[str, int]:
    return {kind: CHECK_VERSIONS[kind] for kind in sorted({case.check["kind"] for case in suite.cases})}


def _case(src: SourceFile, index: int, raw: dict[str, Any], suite: dict[str, Any]) -> Case:
    key = ("cases", index)
    spec = check_mapping(src, key, raw, CASE_FIELDS)
    if (spec["prompt"] is None) == (spec["messages"] is None):
        raise src.problem(key, "give exactly one of prompt: TEXT or messages: [...].")
    messages = [{"role": "user", "content": spec["prompt"]}] if spec["prompt"] is not None else spec["messages"]
    for j, message in enumerate(messages):
        if not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
            raise src.problem((*key, "messages", j), "each message needs role and content strings.")
    if suite["system"]:
        messages = [{"role": "system", "content": suite["system"]}, *messages]
    if not any(m["role"] == "user" for m in messages):
        raise src.problem(key, "a case needs a user message.")
    check = spec["check"]
    problem = check_problem(check)
    if problem:
        raise src.problem((*key, "check"), problem)
    if check["kind"] == "json_schema":
        found = schemas.schema_problem(check["schema"])
        if found:
            raise src.problem((*key, "check", "schema", *found[0]), found[1])
    if check["kind"] != "python":  # code references run in the sandbox (tests do that); the rest here
        verdict = judge(check, spec["reference"])
        if not verdict.passed:
            raise src.problem(
                (*key, "reference"),
                f"the reference answer fails its own check ({verdict.reason}): fix the check or the reference.",
            )
    defaults = suite["defaults"]
    settings = {k: spec[k] if spec[k] is not None else defaults[k] for k in ("max_tokens", "temperature", "seed")}
    return Case(
        id=spec["id"],
        messages=messages,
        settings=settings,
        check=check,
        reference=spec["reference"],
        thinking_allowance=defaults["thinking_allowance"],
    )


def check_problem(check: dict[str, Any]) -> str | None:
    kind = check["kind"]
    if kind == "exact" and not isinstance(check["expected"], str):
        return "an exact check needs expected: a string."
    if kind == "number" and (isinstance(check["expected"], bool) or not isinstance(check["expected"], (int, float))):
        return "a number check needs expected: a number."
    if kind == "number" and not (finite(check["expected"]) and abs(check["expected"]) <= EXACT):
        return f"a number check needs expected: a finite number within ±2**53, not {check['expected']!r}."
    if kind == "regex":
        if not check["pattern"]:
            return "a regex check needs pattern: REGEX."
        if len(check["pattern"]) > MAX_PATTERN_CHARS:
            return (
                f"pattern is {len(check['pattern'])} characters; at most {MAX_PATTERN_CHARS} characters "
                "(long patterns hide catastrophic backtracking): simplify it."
            )
        try:
            re.compile(check["pattern"])
        except re.error as exc:
            return f"pattern is not a valid regular expression: {exc}."
    if kind == "json_schema" and not check["schema"]:
        return "a json_schema check needs schema: {...}."
    if kind == "python" and not check["tests"]:
        return "a python check needs tests: (assert statements)."
    return None


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str


def judge(check: dict[str, Any], answer: str) -> Verdict:
    """Every check but python (which needs the sandbox)."""
    if len(answer) > MAX_ANSWER_CHARS:
        return Verdict(False, f"the answer is {len(answer)} characters, more than the {MAX_ANSWER_CHARS} a check reads")
    text = answer.strip()
    kind = check["kind"]
    if kind == "exact":
        ok = text == check["expected"].strip()
        return Verdict(ok, "exact match" if ok else f"expected {check['expected']!r}, got {text[:80]!r}")
    if kind == "regex":
        matched = timed_fullmatch(check["pattern"], text)
        if matched is None:
            return Verdict(
                False,
                f"the pattern {check['pattern'][:80]!r} ran past its {MATCH_SECONDS:g} s time limit on "
                f"{text[:40]!r} (catastrophic backtracking): simplify the pattern",
            )
        return Verdict(matched, "matches" if matched else f"{text[:80]!r} does not match {check['pattern']!r}")
    if kind == "number":
        try:
            value = float(text.replace(",", ""))
        except ValueError:
            return Verdict(False, f"not a number: {text[:80]!r}")
        ok = abs(value - float(check["expected"])) <= check["tolerance"]
        return Verdict(ok, "within tolerance" if ok else f"{value} is not {check['expected']} ± {check['tolerance']}")
    if kind == "json_schema":
        try:
            data = json.loads(strip_fence(text))
        except ValueError as exc:
            return Verdict(False, f"not JSON: {exc}")
        errors = schema_errors(data, check["schema"])
        if errors is None:
            return Verdict(
                False,
                f"the schema's patterns ran past their {MATCH_SECONDS:g} s time limit on this answer "
                "(catastrophic backtracking): simplify the patterns",
            )
        return Verdict(not errors, "valid" if not errors else "; ".join(errors[:3]))
    raise ValueError(f"judge() cannot run {kind} checks")


def strip_fence(text: str) -> str:
    match = re.search(r"```[a-zA-Z0-9]*\n(.*?)```", text, re.S)
    return match.group(1) if match else text


def schema_errors(data: Any, schema: dict[str, Any]) -> list[str] | None:
    """The answer's errors against a schema checked at load; None when its patterns ran past the time limit."""
    if not schemas.uses_regex(schema):
        return schemas.validation_errors(data, schema)
    errors = timed_call("labctl.quality.schemas", "validation_errors", [data, schema], MATCH_SECONDS)
    return None if errors is None else [str(e) for e in errors]


def list_suites(lab: Lab) -> list[str]:
    folder = lab.root / "suites"
    return sorted(p.parent.name for p in folder.glob("*/suite.yaml")) if folder.is_dir() else []
