"""The parts of the one-result report that no local harness bench produces: a saturated client, a server
without usage, levels over a built batch limit, a capacity search that did not converge, a simulated
GPU's telemetry; and which result a run id with several stands for."""

from __future__ import annotations

from typing import Any

from labctl.bench.results import BenchResult, parse_result
from labctl.compare.rules import Entry
from labctl.compare.single import OneResult, caveats, choice_line, level_head, level_rows, telemetry_line
from labctl.run.records.record import Record


def one(levels: list[dict[str, Any]], **result: Any) -> OneResult:
    doc = {
        "bench_id": "b20261204-100000-aaaaaa",
        "run_id": "20261204-100000-bbbbbb",
        "status": "complete",
        "levels": levels,
        "workload": {"name": "chat-sweep", "sha256": "1" * 64},
        "target": {"environment_label": "real-gpu", "model": "q"},
        **result,
    }
    record = Record(run_id=doc["run_id"], status="stopped", engine="trtllm", profile="p", served_model_name="q")
    return OneResult(Entry(given=doc["bench_id"], result=parse_result(doc), record=record, evals={}))


def other(facts: dict[str, Any]) -> BenchResult:
    """Another result of the same run: what the choice line names of it, the rest as a result file has it."""
    workload = {"sha256": "2" * 64, **facts["workload"]}
    return parse_result({"run_id": "20261204-100000-bbbbbb", "levels": [], "target": {}, **facts, "workload": workload})


def level(concurrency: int, rate: float | None = None, **extra: Any) -> dict[str, Any]:
    return {"concurrency": concurrency, "target_rate": rate, "completed": 10, "requests": 10, "failed": 0, **extra}


def test_every_caveat_a_level_carries_is_said_with_its_level() -> None:
    saturated = "CLIENT SATURATED: it used 97% of a core; latencies include its own queueing"
    usage = "the server sent no usage: output tokens were counted from chunks (may be wrong)"
    over = "concurrency 64 is above the engine's built max_batch_size 32 (--allow-over-batch-limit)"
    report = one(
        [
            level(64, over_max_batch_size=True, warnings=[over, saturated]),
            level(8, usage_fallback=True, warnings=[usage]),
            level(
                1,
                failed=2,
                requests=10,
                completed=8,
                failures={"HTTP 500: boom": 2},
                warnings=["2 request(s) failed: see failures"],
            ),
        ]
    )
    assert caveats(report) == [
        "c=1: 2 of 10 requests failed: HTTP 500: boom ×2",
        f"c=8: {usage}",
        f"c=64: {over}; {saturated}",
    ]
    cells = [row[-1][0] for row in level_rows(report)]
    assert cells == ["✗ 2 failed", "✗ no usage from server", "✗ over batch limit, client saturated"]


def test_levels_above_the_recorded_batch_cap_are_marked_in_the_table_and_the_plots() -> None:
    from labctl.compare.pivot import all_caveats

    cap = {"value": 8, "setting": "--max-num-seqs 8", "source": "set on the run's command line"}
    target = {"environment_label": "real-gpu", "model": "q", "batch_cap": cap}
    report = one([level(8), level(64)], target=target)
    assert report.entry.result.target.batch_cap is not None and report.entry.result.target.batch_cap.value == 8
    cells = [row[-1][0] for row in level_rows(report)]
    assert cells == ["-", "✗ ran against a cap of 8: 56 requests queue"]
    assert all_caveats([report.entry], []) == ["A c=64: ran against a cap of 8: 56 requests queue"]
    unknown = one([level(64)], target={**target, "batch_cap": {**cap, "value": None}})
    assert [row[-1][0] for row in level_rows(unknown)] == ["-"]  # no cap known: nothing to mark


def test_an_interrupted_result_and_a_search_that_did_not_converge_are_caveats() -> None:
    found = {"note": "meets the SLO at 4 req/s, not at 8 req/s", "converged": False}
    report = one(
        [level(32, 4.0, meets_slo=True), level(32, 8.0, meets_slo=False, interrupted=True)],
        status="interrupted",
        max_rate_meeting_slo=found,
    )
    assert caveats(report) == [
        "the benchmark was interrupted; its last level is partial",
        "the capacity search did not converge: meets the SLO at 4 req/s, not at 8 req/s",
        "c=32 r=8/s: interrupted (partial)",
    ]
    assert level_head(report)[-2:] == ["meets SLO", "caveats"]
    assert [row[-2][0] for row in level_rows(report)] == ["yes", "no"]


def test_a_result_without_caveats_says_none_and_has_no_search_column() -> None:
    report = one([level(1), level(4)])
    assert caveats(report) == [] and "meets SLO" not in level_head(report)
    assert [row[-1][0] for row in level_rows(report)] == ["-", "-"]


def test_telemetry_says_what_was_sampled_and_why_the_rest_was_not() -> None:
    telemetry = {
        "gpu": {"samples": 12, "simulated": True},
        "engine": {"samples": 0},
        "missing": {"engine": "GET /metrics answered 404", "engine.kv_cache_usage": "no such metric"},
    }
    assert telemetry_line(telemetry) == (
        "GPU: 12 samples (simulated GPU); engine metrics: no samples (GET /metrics answered 404); "
        "kv_cache_usage: no such metric"
    )
    assert telemetry_line({}) == "not recorded"


def test_a_run_with_several_results_names_the_others_newest_first() -> None:
    report = one([level(1)])
    assert choice_line(report) is None
    report.others = [
        other({"bench_id": "b20261204-090000-cccccc", "workload": {"name": "long-context"}, "status": "complete"}),
        other({"bench_id": "b20261204-110000-dddddd", "workload": {"name": "chat-sweep"}, "status": "interrupted"}),
    ]
    assert choice_line(report) == (
        "run 20261204-100000-bbbbbb has 3 bench results; this report is of its newest complete one, "
        "b20261204-100000-aaaaaa (chat-sweep). The others: b20261204-110000-dddddd (chat-sweep, interrupted), "
        "b20261204-090000-cccccc (long-context, complete). Give a bench id to report another."
    )
