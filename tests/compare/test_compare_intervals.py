"""compare shows 95 % intervals and marks differences whose intervals overlap as not distinguishable;
across repeats those are Student-t intervals with their n; eval scores carry n/N and a Wilson interval."""

from __future__ import annotations

import json

from labctl.bench.intervals import combine_repeats, wilson_interval
from labctl.bench.results import parse_result
from labctl.compare.formats import render
from labctl.compare.pivot import pivot
from labctl.compare.rules import Entry, checklist, rows, score_text
from labctl.run.records.record import Record


def entry(given: str, engine: str, ttft: float, ci: list[float], evals: dict[str, dict[str, object]]) -> Entry:
    level = {
        "concurrency": 8,
        "median_ttft_ms": ttft,
        "median_ttft_ms_ci95": ci,
        "output_throughput": 100.0,
        "output_throughput_ci95": [95.0, 105.0],
        "repeat": 3,
    }
    result = {
        "bench_id": given,
        "run_id": "r" + given,
        "levels": [level],
        "workload": {"name": "w", "sha256": "1" * 12},
        "target": {"environment_label": "harness-check"},
    }
    record = Record(
        run_id="r" + given,
        status="stopped",
        engine=engine,
        profile="p",
        served_model_name="m",
        resolved_profile={"model": {"family": "qwen3", "revision": "main"}},
    )
    return Entry(given=given, result=parse_result(result), record=record, evals=evals)  # type: ignore[arg-type]


def test_overlapping_intervals_are_marked_not_distinguishable_and_apart_ones_are_not() -> None:
    entries = [
        entry("a", "vllm", 50.0, [48.0, 52.0], {}),
        entry("b", "sglang", 60.0, [58.0, 63.0], {}),
        entry("c", "trtllm", 55.0, [49.5, 59.0], {}),
    ]
    table = rows(entries, checklist(entries))
    marks = {row["id"]: row["not_distinguishable"] for row in table}
    # a and b are apart on TTFT; c overlaps both; throughput intervals are all equal
    assert marks == {
        "a": ["median_ttft_ms", "output_throughput"],
        "b": ["median_ttft_ms", "output_throughput"],
        "c": ["median_ttft_ms", "output_throughput"],
    }
    two = rows(entries[:2], checklist(entries[:2]))
    assert [row["not_distinguishable"] for row in two] == [["output_throughput"], ["output_throughput"]]
    text = render(checklist(entries[:2]), two, entries[:2], "markdown")
    assert "≈" in text  # the throughputs' intervals overlap: the Δ is marked not distinguishable
    doc = json.loads(render(checklist(entries[:2]), two, entries[:2], "json"))
    assert doc["rows"][0]["median_ttft_ms_ci95"] == [48.0, 52.0] and doc["rows"][0]["repeat"] == 3


def test_eval_scores_carry_n_of_n_and_an_interval() -> None:
    interval = wilson_interval(8, 10)
    assert interval is not None and interval[0] < 0.8 < interval[1] < 1.0
    ev = {"score": 0.8, "passed": 8, "total": 10, "score_ci95": interval, "suite": {"full_version": "1@abc"}}
    assert score_text("coding", ev).startswith("coding 80% (8/10, 95% ")
    assert score_text("coding", {"score": 0.5, "passed": 1, "total": 2}) == "coding 50% (1/2)"
    entries = [entry("a", "vllm", 50.0, [48.0, 52.0], {"coding": ev}), entry("b", "sglang", 50.0, [48, 52], {})]
    assert rows(entries, checklist(entries))[0]["quality"] == score_text("coding", ev)


def repeated(given: str, engine: str, ttfts: list[float]) -> Entry:
    runs = [
        {
            "concurrency": 8,
            "requests": 10,
            "completed": 10,
            "failed": 0,
            "total_input_tokens": 100,
            "total_output_tokens": 100,
            "duration_s": 1.0,
            "failures": {},
            "interrupted": False,
            "usage_fallback": False,
            "warnings": [],
            "client_cpu_share": 0.1,
            "median_ttft_ms": ttft,
            "median_ttft_ms_ci95": [ttft - 0.5, ttft + 0.5],
        }
        for ttft in ttfts
    ]
    made = entry(given, engine, 0.0, [0.0, 0.0], {})
    level = combine_repeats(runs)
    return Entry(given=given, result=made.result.changed(levels=[level]), record=made.record, evals={})


def test_three_repeats_apart_by_their_range_are_not_told_apart_when_student_t_overlaps() -> None:
    """[100, 105, 110] against [112, 114, 116]: a bootstrap over the three values said about [100, 110] and
    [112, 116], apart; Student-t says [92.6, 117.4] and [109.0, 119.0], which overlap."""
    entries = [repeated("a", "vllm", [100.0, 105.0, 110.0]), repeated("b", "sglang", [112.0, 114.0, 116.0])]
    table = rows(entries, checklist(entries))
    assert all("median_ttft_ms" in row["not_distinguishable"] for row in table)
    ttft = next(p for p in pivot(entries, checklist(entries)) if p.metric == "TTFT p50 ms")
    assert ttft.cells == ["105.0 [92.6, 117.4] n=3", "114.0 [109.0, 119.0] n=3"] and ttft.deltas[0].endswith("≈")


def test_an_evaluation_read_with_a_bootstrap_interval_gets_its_wilson_one() -> None:
    """An older labctl said 12/12 was 100 %-100 %; the file is kept as written, its interval read anew."""
    from labctl.quality.evals import parse_eval

    old = {"eval_id": "e1", "run_id": "r1", "suite": {"name": "coding"}, "score": 1.0, "passed": 12, "total": 12}
    old |= {"score_ci95": [1.0, 1.0], "interval_method": "95 % percentile bootstrap over the cases"}
    evaluation = parse_eval(old)
    assert evaluation.score_ci95 == tuple(wilson_interval(12, 12) or ()) and old["score_ci95"] == [1.0, 1.0]
    assert score_text("coding", evaluation.data) == "coding 100% (12/12, 95% 76%–100%)"
    assert "Wilson" in evaluation.data["interval_method"]
    unchanged = parse_eval({k: v for k, v in old.items() if k not in ("score_ci95", "interval_method")})
    assert unchanged.score_ci95 is None  # made before intervals: none is invented
