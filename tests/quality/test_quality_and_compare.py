"""The pure core of results: metric definitions, the judge, the same-rules checklist and its formats."""

from __future__ import annotations

import json
import math

import pytest

from labctl.bench.client import RequestResult
from labctl.bench.metrics import level_metrics, percentile
from labctl.bench.results import parse_result
from labctl.compare.formats import checklist_lines, render
from labctl.compare.rules import Check, Entry, checklist, rows
from labctl.quality.suites import judge
from labctl.run.records.record import Record


def test_percentile_and_metric_definitions() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([5], 99) == 5
    r = RequestResult(
        ok=True,
        sent=0.0,
        first_token=0.05,
        chunk_times=[0.05, 0.07, 0.09, 0.11],
        output_tokens=4,
        usage_reported=True,
        prompt_tokens=10,
    )
    m = level_metrics([r, RequestResult(ok=False, error="HTTP 503: busy")], duration_s=1.0, slo={"ttft_ms": 60})
    assert math.isclose(m["median_ttft_ms"], 50) and math.isclose(m["median_tpot_ms"], 20)
    assert math.isclose(m["median_itl_ms"], 20) and math.isclose(m["median_e2el_ms"], 110)
    assert m["completed"] == 1 and m["failed"] == 1 and m["failures"] == {"HTTP 503: busy": 1}
    assert m["output_throughput"] == 4 and m["total_token_throughput"] == 14 and m["goodput"] == 1


@pytest.mark.parametrize(
    "check, answer, passed",
    [
        ({"kind": "exact", "expected": "Paris"}, " Paris\n", True),
        ({"kind": "exact", "expected": "Paris"}, "paris", False),
        ({"kind": "regex", "pattern": r"4\d"}, "42", True),
        ({"kind": "regex", "pattern": r"4\d"}, "x42", False),
        ({"kind": "number", "expected": 3.14, "tolerance": 0.01}, "3.141", True),
        ({"kind": "number", "expected": 1000, "tolerance": 0}, "1,000", True),
        ({"kind": "number", "expected": 1, "tolerance": 0}, "one", False),
        ({"kind": "json_schema", "schema": {"type": "object", "required": ["a"]}}, '```json\n{"a": 1}\n```', True),
        ({"kind": "json_schema", "schema": {"type": "object", "required": ["a"]}}, '{"b": 1}', False),
        ({"kind": "json_schema", "schema": {"type": "object"}}, "not json", False),
    ],
)
@pytest.mark.process
def test_judge(check: dict[str, object], answer: str, passed: bool) -> None:
    verdict = judge(check, answer)
    assert verdict.passed is passed and verdict.reason


def entry(
    given: str, engine: str, workload_sha: str, label: str = "harness-check", accelerator: str | None = None
) -> Entry:
    level = {"concurrency": 1, "median_ttft_ms": 10.0, "median_tpot_ms": 2.0, "output_throughput": 100.0}
    result = {
        "bench_id": given,
        "run_id": "r",
        "levels": [level],
        "workload": {"name": "w", "sha256": workload_sha * 12},
        "target": {"environment_label": label},
    }
    record = Record(
        run_id="r",
        status="stopped",
        engine=engine,
        profile="p",
        served_model_name="m",
        resolved_profile={"model": {"family": "qwen3", "revision": "main"}},
        accelerator=accelerator,
    )
    return Entry(given=given, result=parse_result(result), record=record, evals={})


def edit(e: Entry, level: dict[str, object] | None = None, target: dict[str, object] | None = None) -> None:
    """The entry's result with its first level's or its target's fields set (a typed result is not changed)."""
    doc = json.loads(json.dumps(e.result.to_json()))
    doc["levels"][0] |= level or {}
    doc["target"] |= target or {}
    e.result = parse_result(doc)


def test_checklist_accepts_same_rules_and_names_what_differs() -> None:
    same = checklist([entry("a", "vllm", "1"), entry("b", "sglang", "1")])
    assert all(c.ok for c in same)
    differ = checklist([entry("a", "vllm", "1"), entry("b", "sglang", "2", label="real-gpu")])
    failed = {c.rule for c in differ if not c.ok}
    assert failed == {"workload", "environment label"}
    lines = checklist_lines(differ)
    assert any(line.startswith("✗ workload:") for line in lines)


def test_the_accelerator_is_a_rule_of_its_own() -> None:
    """A real engine on CPU, a persona on simulated GPUs and an endpoint nobody knows never compare as equals,
    whatever their labels say; a record written before the field derives it (here: a GPU run)."""
    gpu, cpu = entry("a", "vllm", "1"), entry("b", "vllm", "1", accelerator="cpu")
    differ = checklist([gpu, cpu])
    assert {c.rule for c in differ if not c.ok} == {"accelerator"}
    assert next(c for c in differ if c.rule == "accelerator").values == {"a": "gpu", "b": "cpu"}
    table_rows = rows([gpu, cpu], differ)
    assert all(row["mismatch"] == ["accelerator"] for row in table_rows)
    assert "cpu ✗" in render(differ, table_rows, [gpu, cpu], "markdown")
    external = Record(run_id="r", status="external", engine="external", profile="-", served_model_name="m")
    assert external.accelerator_kind == "unknown"
    same = checklist([entry("c", "x", "1", accelerator="simulated"), entry("d", "y", "1", accelerator="simulated")])
    assert all(c.ok for c in same)
    persona = checklist([entry("e", "x", "1", accelerator="simulated"), entry("f", "x", "1", accelerator="cpu")])
    assert {c.rule for c in persona if not c.ok} == {"accelerator"}


def test_formats_carry_the_mismatch_marks() -> None:
    entries = [entry("a", "vllm", "1"), entry("b", "sglang", "2")]
    checks = checklist(entries)
    table_rows = rows(entries, checks)
    assert all(row["mismatch"] == ["workload"] for row in table_rows)
    doc = json.loads(render(checks, table_rows, entries, "json"))
    assert doc["same_rules"] is False and len(doc["rows"]) == 2
    assert "✗" in render(checks, table_rows, entries, "table")
    assert "workload" in render(checks, table_rows, entries, "csv")
    assert Check("x", True, {}).ok


def test_pivot_puts_engines_side_by_side_with_deltas_and_intervals() -> None:
    from labctl.compare.pivot import pivot

    a, b = entry("a", "vllm", "1"), entry("b", "sglang", "1")
    edit(b, level={"median_tpot_ms": 3.0, "interrupted": True})
    rows_ = {(p.level, p.metric): p for p in pivot([a, b], checklist([a, b]))}
    tpot = rows_[("c=1", "TPOT p50 ms")]
    assert tpot.cells == ["2.00", "3.00"] and tpot.deltas == ["+50.0%"]
    assert rows_[("c=1", "tok/s per user")].cells == ["500.0", "333.3"]
    assert rows_[("c=1", "caveats")].cells == ["-", "✗ interrupted"]
    edit(a, level={"median_tpot_ms_ci95": [1.5, 2.5]})
    edit(b, level={"median_tpot_ms_ci95": [2.4, 3.6]})
    overlapping = {(p.level, p.metric): p for p in pivot([a, b], checklist([a, b]))}[("c=1", "TPOT p50 ms")]
    assert overlapping.cells == ["2.00 [1.50, 2.50]", "3.00 [2.40, 3.60]"] and overlapping.deltas == ["+50.0% ≈"]
    edit(b, level={"median_tpot_ms_ci95": [2.6, 3.6]})
    apart = {(p.level, p.metric): p for p in pivot([a, b], checklist([a, b]))}[("c=1", "TPOT p50 ms")]
    assert apart.deltas == ["+50.0%"]


def test_thinking_off_reaches_every_chat_request_and_the_checklist() -> None:
    from labctl.bench.client import Target
    from labctl.quality.evaluate import split_reasoning

    assert Target("http://127.0.0.1:1/v1", "m", thinking="off").chat_extras() == {
        "chat_template_kwargs": {"enable_thinking": False}
    }
    assert Target("http://127.0.0.1:1/v1", "m", thinking="on").chat_extras() == {}
    assert split_reasoning("<think>\nhmm, 6 x 7\n</think>\n\n42") == ("42", "\nhmm, 6 x 7\n")
    assert split_reasoning("<think>never closed") == ("", "never closed")
    assert split_reasoning("42") == ("42", "")
    a, b = entry("a", "vllm", "1"), entry("b", "sglang", "1")
    edit(a, target={"thinking": "off"})
    edit(b, target={"thinking": "on"})
    failed = {c.rule for c in checklist([a, b]) if not c.ok}
    assert failed == {"thinking mode"}


def test_terminal_table_stays_within_120_columns_for_many_results_with_intervals() -> None:
    entries = [entry(f"b{i}", "vllm", "1") for i in range(6)]
    for i, e in enumerate(entries):
        edit(e, level={"median_ttft_ms": 1234.5 + i, "median_ttft_ms_ci95": [1200.25, 1300.75], "interrupted": i == 5})
    checks = checklist(entries)
    text = render(checks, rows(entries, checks), entries, "table")
    assert max(len(line) for line in text.splitlines()) <= 120
    heads = [line.split() for line in text.splitlines() if line.startswith("level")]
    assert len(heads) > 1  # split into several tables, A repeated in each
    shown = {word for head in heads for word in head[2:] if len(word) == 1 and word != "Δ"}
    assert shown == {"A", "B", "C", "D", "E", "F"}
    assert "✗ F c=1: interrupted" in text
