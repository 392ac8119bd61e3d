"""compare and effective settings, in process: prefix caching and the KV-cache dtype are same-rules fields (a
mismatch refuses the table unless --allow-mismatch, and marks it), the other settings that differ are shown
with how each was known, and a result carries its run's settings."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from helpers.support import REPO

from labctl.bench.results import parse_result
from labctl.catalog.engine_settings import Effective
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.cli.quality import _refuse_mixed
from labctl.compare.formats import checklist_lines, render
from labctl.compare.rules import LEVEL_KEYS, SETTINGS_RULE, Entry, checklist, rows
from labctl.compose.declared_settings import effective_settings
from labctl.errors import BadInput
from labctl.harness.persona_http import metrics_text
from labctl.harness.personas import build_persona
from labctl.run.records.record import Record

LAB = Lab(REPO)
COUNTERS = {"requests_success_total": 0, "prompt_tokens_total": 0, "generation_tokens_total": 0}


def vllm_as_run(*argv: str) -> dict[str, Effective]:
    """vLLM's settings as `up` records them: its persona's /metrics read over the rendered command."""
    persona, _ = build_persona("vllm", "0.34.0", ["serve", "M", *argv], {"NVIDIA_VISIBLE_DEVICES": "0,1"})
    found = effective_settings(load_profile(LAB, "vllm", "qwen3-32b"), metrics_text(persona, COUNTERS, 0, 0, 8))
    assert found is not None
    return found


def atlas_as_run() -> dict[str, Effective]:
    found = effective_settings(load_profile(LAB, "atlas", "qwen3.6-35b-a3b-fp8"))
    assert found is not None
    return found


def entry(given: str, engine: str, settings: dict[str, Effective] | None, in_result: bool = True) -> Entry:
    level: dict[str, Any] = {"concurrency": 4, "requests": 8, "completed": 8, **dict.fromkeys(LEVEL_KEYS)}
    target = {"engine": engine, "environment_label": "harness-check"}
    if in_result and settings is not None:
        target["settings"] = {k: asdict(v) for k, v in settings.items()}
    data = {
        "schema_version": 1,
        "bench_id": f"b20261206-120000-{given * 6}",
        "run_id": f"20261206-120000-{given * 6}",
        "target": target,
        "workload": {"name": "w", "sha256": "0" * 64},
        "levels": [level],
    }
    record = Record(
        run_id=data["run_id"],
        status="stopped",
        engine=engine,
        profile="p",
        served_model_name="m",
        settings=None if in_result else settings,
    )
    return Entry(given=given, result=parse_result(data), record=record, evals={})


def test_prefix_caching_and_kv_dtype_mismatches_refuse_the_table_unless_allowed() -> None:
    vllm, atlas = entry("a", "vllm", vllm_as_run()), entry("b", "atlas", atlas_as_run())
    checks = checklist([vllm, atlas])
    by_rule = {c.rule: c for c in checks}
    assert not by_rule["prefix caching"].ok and by_rule["prefix caching"].blocking
    assert not by_rule["KV-cache dtype"].ok and by_rule["KV-cache dtype"].blocking
    lines = checklist_lines(checks)
    assert (
        "✗ prefix caching: a: on (True) [engine: GET /metrics vllm:cache_config_info{enable_prefix_caching}]; "
        "b: off (False) [default: serve_args.rs enable_prefix_caching default_value_t = false]"
    ) in lines
    assert any(
        line.startswith("✗ KV-cache dtype: a: auto [engine: ") and "b: fp8 [default: serve_args.rs" in line
        for line in lines
    )
    with pytest.raises(BadInput, match="not measured under the same rules"):
        _refuse_mixed(checks, False, "these results were not measured under the same rules")
    _refuse_mixed(checks, True, "unused")  # --allow-mismatch: the table is shown, marked
    table = rows([vllm, atlas], checks)
    assert {"prefix caching", "KV-cache dtype"} <= set(table[0]["mismatch"])
    assert table[0]["prefix_caching"] == "on" and table[1]["prefix_caching"] == "off"
    shown = render(checks, table, [vllm, atlas], "table")
    assert "prefix caching on ✗" in shown and "prefix caching off ✗" in shown
    assert "rule not met: prefix caching (cells marked ✗)" in shown


def test_the_other_settings_that_differ_are_shown_with_whence_not_enforced() -> None:
    checks = checklist([entry("a", "vllm", vllm_as_run()), entry("b", "atlas", atlas_as_run())])
    other = next(c for c in checks if c.rule == SETTINGS_RULE)
    assert not other.ok and not other.blocking
    assert other.values["a"].startswith("batch cap 64 [command], sampling defaults model [default]")
    assert other.values["b"] == "batch cap 8 [default], sampling defaults engine: min_p 0.08, top_n_sigma 1.0 [default]"


def test_equal_settings_pass_and_are_shown_once() -> None:
    checks = checklist([entry("a", "vllm", vllm_as_run()), entry("b", "vllm", vllm_as_run(), in_result=False)])
    assert all(c.ok for c in checks if c.checked), checklist_lines(checks)  # these records know no model or GPU
    lines = checklist_lines(checks)
    assert (
        "✓ other effective settings (shown, not enforced): chunked prefill on, speculative decoding off, batch cap 64, sampling defaults model"
        in lines
    )


def test_a_kv_dtype_set_on_one_engine_only_is_refused() -> None:
    fp8 = vllm_as_run("--kv-cache-dtype", "fp8")
    checks = checklist([entry("a", "vllm", vllm_as_run()), entry("b", "vllm", fp8)])
    assert [c.rule for c in checks if not c.ok] == ["KV-cache dtype"]


def test_results_without_settings_say_unknown_and_unknown_beside_known_refuses() -> None:
    old = entry("a", "vllm", None)
    assert old.setting("prefix_caching").value == "unknown"
    assert all(c.ok for c in checklist([old, entry("b", "vllm", None)]) if c.blocking)
    mixed = checklist([old, entry("b", "vllm", vllm_as_run())])
    assert not next(c for c in mixed if c.rule == "prefix caching").ok


def test_facts_unknown_on_every_side_are_not_checked_never_ticked() -> None:
    """Two results whose records say nothing of the model, the GPU or the thinking mode: equal as `?@?` and
    `unknown`, but nobody knows to what, so the checklist says `not checked`, and the JSON lists them."""
    a, b = entry("a", "vllm", vllm_as_run()), entry("b", "vllm", vllm_as_run())
    checks = {c.rule: c for c in checklist([a, b])}
    for rule in ("model family and revision", "GPU model", "thinking mode"):
        assert not checks[rule].checked and checks[rule].mark == "?" and not checks[rule].blocking, checks[rule]
    lines = checklist_lines(list(checks.values()))
    assert "? model family and revision: ?@? (not checked: no result records it)" in lines
    assert not any(line.startswith("✓ GPU model") for line in lines)
    assert checks["environment label"].checked and checks["environment label"].mark == "✓"
    as_json = json.loads(render(list(checks.values()), rows([a, b], list(checks.values())), [a, b], "json"))
    assert {"model family and revision", "GPU model", "thinking mode"} <= set(as_json["not_checked"])
