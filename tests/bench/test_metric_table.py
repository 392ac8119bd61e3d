"""Each metric is named once, in the metric table, and every view reads it from there: a metric added as one
row (the prefix-cache hit rate, derived from the engine's own counters) shows in the report and the pivot."""

from __future__ import annotations

from typing import Any

import pytest

from labctl.bench.metric_table import BY_KEY, METRICS, View, shown_in
from labctl.bench.results import level_from_json, parse_result
from labctl.compare.pivot import pivot
from labctl.compare.rules import Entry, checklist
from labctl.compare.single import OneResult, level_head, level_rows
from labctl.run.records.record import Record
from labctl.run.records.typed import ShapeError

HITS = BY_KEY["prefix_cache_hit_rate"]


def test_keys_and_labels_are_named_once() -> None:
    assert len({m.key for m in METRICS}) == len(METRICS)
    assert len({m.titled for m in METRICS}) == len(METRICS)
    assert [m.titled for m in shown_in(View.PIVOT)][:3] == ["TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms"]
    assert BY_KEY["output_throughput"].said("130") == "130 out tok/s"
    assert BY_KEY["goodput"].said("1.20") == "goodput 1.20 req/s" and BY_KEY["request_throughput"].heading == "REQ/s"


def level(engine: dict[str, Any] | None) -> dict[str, Any]:
    telemetry = None if engine is None else {"engine": {"samples": 4, **engine}}
    return {"concurrency": 4, "completed": 8, "requests": 8, "median_tpot_ms": 2.0, "telemetry": telemetry}


def test_the_prefix_cache_hit_rate_is_read_from_the_engines_counters_in_percent() -> None:
    counters = level_from_json(level({"prefix_cache_hit_rate": {"mean": 0.25, "max": None}}))
    assert counters.value(HITS) == 25.0
    assert level_from_json(level({"prefix_cache_hit_rate": None})).value(HITS) is None  # the engine exports none
    assert level_from_json(level(None)).value(HITS) is None  # --no-telemetry
    assert level_from_json(level({"prefix_cache_hit_rate": "x"})).value(HITS) is None  # free-form, not trusted


def entry(given: str, rate: float | None) -> Entry:
    engine = None if rate is None else {"prefix_cache_hit_rate": {"mean": rate, "max": None}}
    doc = {
        "bench_id": given,
        "run_id": "20261204-100000-bbbbbb",
        "levels": [level(engine)],
        "workload": {"name": "shared-prefix", "sha256": "1" * 64},
        "target": {"environment_label": "real-gpu", "model": "q"},
    }
    record = Record(run_id=doc["run_id"], status="stopped", engine="vllm", profile="p", served_model_name="q")
    return Entry(given=given, result=parse_result(doc), record=record, evals={})


def test_the_report_and_the_pivot_show_it_as_one_row_of_the_table_says() -> None:
    one = OneResult(entry("b20261204-100000-aaaaaa", 0.5))
    head = level_head(one)
    assert head[head.index("goodput req/s") + 1] == "prefix hits %"
    assert level_rows(one)[0][head.index("prefix hits %")] == ("50.0", "")
    entries = [entry("b20261204-100000-aaaaaa", 0.5), entry("b20261204-110000-cccccc", None)]
    row = next(p for p in pivot(entries, checklist(entries)) if p.metric == "prefix hits %")
    assert row.cells == ["50.0", "-"] and row.deltas == ["-"]


PER_GPU = BY_KEY["output_throughput_per_gpu"]


def result_on(gpus: int | None) -> dict[str, Any]:
    figures = {"output_throughput": 900.0, "output_throughput_ci95": [840.0, 960.0]}
    return {
        "bench_id": "b20261204-100000-aaaaaa",
        "run_id": "20261204-100000-bbbbbb",
        "levels": [{**level(None), **figures}],
        "workload": {"name": "chat-sweep", "sha256": "1" * 64},
        "target": {"environment_label": "real-gpu", "model": "q", "gpus": gpus},
    }


def test_throughput_per_gpu_divides_the_total_and_its_interval_by_the_gpus_the_engine_held() -> None:
    [two] = parse_result(result_on(2)).levels
    assert two.value(PER_GPU) == 450.0 and two.interval(PER_GPU) == (420.0, 480.0)
    assert two.value(BY_KEY["output_throughput"]) == 900.0  # the total stays beside it
    [unknown] = parse_result(result_on(None)).levels  # a CPU engine, an endpoint, or a result from before
    assert unknown.value(PER_GPU) is None and unknown.interval(PER_GPU) is None
    assert "output_throughput_per_gpu_ci95_low" in two.metric_cells()
    assert PER_GPU.titled == "out tok/s/GPU" and View.PIVOT in PER_GPU.views and View.BENCH_TABLE in PER_GPU.views


def test_a_result_that_held_no_gpu_but_says_gpus_0_is_refused() -> None:
    with pytest.raises(ShapeError, match="target.gpus"):
        parse_result(result_on(0))


JOULES = BY_KEY["joules_per_output_token"]
COST = BY_KEY["cost_per_million_output_tokens"]


def with_power(watts: list[float | None]) -> dict[str, Any]:
    gpus = {str(i): {"name": "H100", "power_draw_w": {"mean": w, "max": w}} for i, w in enumerate(watts)}
    return {"gpu": {"samples": 5, "gpus": gpus}}


def test_energy_per_token_is_the_gpus_mean_power_over_the_output_rate() -> None:
    doc = result_on(2)
    doc["levels"][0]["telemetry"] = with_power([300.0, 150.0])
    [measured] = parse_result(doc).levels
    assert measured.value(JOULES) == 0.5  # 450 W over 900 tok/s
    assert measured.interval(JOULES) is None  # power has its own spread: no interval from the throughput alone
    doc["levels"][0]["telemetry"] = with_power([300.0, None])  # one GPU without a power figure: no guess
    assert parse_result(doc).levels[0].value(JOULES) is None
    doc["levels"][0]["telemetry"] = None  # --no-telemetry
    assert parse_result(doc).levels[0].value(JOULES) is None


def test_cost_per_million_tokens_prices_the_gpu_hours_and_carries_the_throughputs_interval() -> None:
    doc = result_on(2)
    doc["target"]["gpu_hour_price"] = 3.0
    [priced] = parse_result(doc).levels
    # 2 GPUs × 3.0 an hour = 6.0 an hour for 900 tok/s × 3600 s = 3.24 M tokens
    assert priced.value(COST) == pytest.approx(6.0 / 3.24)
    low, high = priced.interval(COST)  # type: ignore[misc]
    assert low == pytest.approx(6.0 / (960 * 3600 / 1e6)) and high == pytest.approx(6.0 / (840 * 3600 / 1e6))
    assert parse_result(result_on(2)).levels[0].value(COST) is None  # no price in the hosts file: no cost
    doc["target"]["gpu_hour_price"] = -1.0
    with pytest.raises(ShapeError, match="gpu_hour_price"):
        parse_result(doc)
