"""95 % intervals: a percentile bootstrap over requests (fixed seed), checked against a distribution
whose truth is known, and across repeats a Student-t interval over the per-run values; a result an older
labctl wrote with bootstrap intervals across repeats is read with Student-t ones."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np

from labctl.bench.bootstrap import _weighted_stats, request_intervals
from labctl.bench.client import RequestResult
from labctl.bench.intervals import combine_repeats, t_interval
from labctl.bench.metrics import describe, level_metrics
from labctl.bench.results import parse_result


def requests_with_ttft(ttfts_ms: list[float], tokens: int = 8, gap_ms: float = 20.0) -> list[RequestResult]:
    out = []
    for i, ttft in enumerate(ttfts_ms):
        sent = i * 0.01
        first = sent + ttft / 1000
        chunks = [first + k * gap_ms / 1000 for k in range(tokens)]
        out.append(
            RequestResult(
                ok=True, sent=sent, first_token=first, chunk_times=chunks, output_tokens=tokens, usage_reported=True
            )
        )
    return out


def test_the_median_interval_covers_the_true_median_with_the_width_theory_gives() -> None:
    rng = random.Random(7)
    sigma, n = 10.0, 400
    results = requests_with_ttft([rng.gauss(100.0, sigma) for _ in range(n)])
    ci = request_intervals(results, duration_s=10.0, slo=None)
    low, high = ci["median_ttft_ms_ci95"] or [math.nan, math.nan]
    assert low < 100.0 < high
    # the sample median's standard error is sigma * sqrt(pi / 2) / sqrt(n): a 95 % interval ~ 2 * 1.96 of it
    expected = 2 * 1.96 * sigma * math.sqrt(math.pi / 2) / math.sqrt(n)
    assert 0.6 * expected < high - low < 1.5 * expected
    mean_low, mean_high = ci["mean_ttft_ms_ci95"] or [math.nan, math.nan]
    assert 0.7 * (2 * 1.96 * sigma / math.sqrt(n)) < mean_high - mean_low < 1.3 * (2 * 1.96 * sigma / math.sqrt(n))
    point = level_metrics(results, 10.0, None)
    for key in ("median_ttft_ms", "p99_ttft_ms", "mean_e2el_ms"):
        interval = ci[f"{key}_ci95"]
        assert interval is not None and interval[0] <= point[key] + 1e-9 and point[key] - 1e-9 <= interval[1], key


def test_one_run_gives_its_rates_no_interval_rather_than_a_zero_width_one() -> None:
    """Every request completed with the same length: a resample over the run's fixed duration is always the same
    count and the same tokens, so the old interval was [x, x] (a real vLLM run showed [242.4, 242.4])."""
    results = requests_with_ttft([float(v) for v in range(50, 150)])
    ci = request_intervals(results, 5.0, {"ttft_ms": 120})
    for key in ("request_throughput", "output_throughput", "total_token_throughput", "goodput"):
        assert ci[f"{key}_ci95"] is None, key
    assert ci["median_ttft_ms_ci95"] is not None
    assert "goodput_ci95" not in request_intervals(results, 5.0, None)  # no SLO, no goodput


def test_a_statistic_every_resample_agrees_on_has_no_interval() -> None:
    one = request_intervals(requests_with_ttft([100.0]), 1.0, None)
    assert one["median_ttft_ms_ci95"] is None and one["mean_e2el_ms_ci95"] is None
    for key, interval in one.items():
        assert interval is None or interval[1] > interval[0], key


def test_a_fixed_seed_gives_the_same_interval_and_another_seed_a_different_one() -> None:
    results = requests_with_ttft([float(v) for v in range(50, 150)])
    first = request_intervals(results, 5.0, {"ttft_ms": 120})
    assert first == request_intervals(results, 5.0, {"ttft_ms": 120})
    assert first != request_intervals(results, 5.0, {"ttft_ms": 120}, seed=1)


def test_drawing_every_request_once_reproduces_the_point_statistics_exactly() -> None:
    rng = random.Random(3)
    values = sorted(rng.uniform(1, 500) for _ in range(257))
    stats = _weighted_stats(
        np.array(values), np.arange(len(values), dtype=np.intp), np.ones((1, len(values)), dtype=np.int64)
    )
    point = describe("x", values, with_max=True)
    for name in ("mean", "median", "std", "p90", "p95", "p99", "max"):
        assert math.isclose(stats[name][0], point[f"{name}_x_ms"], rel_tol=1e-12), name


def test_a_resample_counts_each_value_as_often_as_its_request_was_drawn() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    owner = np.array([0, 1, 0, 2, 1, 2], dtype=np.intp)  # three requests, two gaps each (pooled like ITL)
    counts = np.array([[2, 0, 1], [0, 0, 0], [0, 3, 0]], dtype=np.int64)
    stats = _weighted_stats(values, owner, counts)
    drawn = [1.0, 1.0, 3.0, 3.0, 4.0, 6.0]  # request 0 twice, request 2 once
    assert math.isclose(stats["mean"][0], statistics.fmean(drawn)) and stats["max"][0] == 6.0
    assert math.isclose(stats["median"][0], 3.0) and math.isclose(stats["std"][0], statistics.pstdev(drawn))
    assert all(math.isnan(stat[1]) for stat in stats.values())  # a resample that drew none of these values
    assert stats["mean"][2] == 3.5 and stats["median"][2] == 3.5 and stats["max"][2] == 5.0


def test_across_repeats_the_interval_is_student_t_over_the_per_run_values() -> None:
    assert t_interval([10.0, 10.0, 10.0]) == [10.0, 10.0]
    low, high = t_interval([9.0, 10.0, 11.0]) or [0.0, 0.0]
    assert low < 9.0 and high > 11.0  # three values: wider than their range, as t with 2 dof says
    runs = []
    for offset in (0.0, 5.0, 10.0):
        results = requests_with_ttft([100.0 + offset] * 20)
        run = {"concurrency": 4, "requests": 20, "client_cpu_share": 0.1, "interrupted": False, "warnings": []}
        run |= level_metrics(results, 2.0, None) | request_intervals(results, 2.0, None)
        runs.append(run)
    level = combine_repeats(runs)
    assert level["repeat"] == 3 and level["requests"] == 60 and level["completed"] == 60
    assert math.isclose(level["median_ttft_ms"], statistics.fmean([100.0, 105.0, 110.0]))
    ci_low, ci_high = level["median_ttft_ms_ci95"]
    assert round(ci_low, 1) == 92.6 and round(ci_high, 1) == 117.4
    assert [r["median_ttft_ms"] for r in level["repeats"]] == [100.0, 105.0, 110.0]
    assert "Student-t" in level["interval_method"] and "n = 3 runs" in level["interval_method"]
    assert level["request_throughput_ci95"] is not None  # rates get one across repeats


def test_a_result_with_bootstrap_intervals_across_repeats_is_read_with_student_t_ones() -> None:
    """A result an older labctl wrote: its repeat level's interval was about [min, max] of the per-run values."""
    runs = [{"concurrency": 4, "median_ttft_ms": v, "median_ttft_ms_ci95": [v - 1, v + 1]} for v in (100.0, 105, 110)]
    old = {"concurrency": 4, "repeat": 3, "median_ttft_ms": 105.0, "median_ttft_ms_ci95": [100.0, 110.0]}
    old |= {"interval_method": "bootstrap over the 3 per-run values (mean; 1000 resamples, seed 20261203)"}
    document = {
        "bench_id": "b1",
        "run_id": "r1",
        "repeat": 3,
        "interval_method": "95 % percentile bootstrap over requests ... over the N per-run values",
        "levels": [old | {"repeats": runs}, {"concurrency": 8, "median_ttft_ms": 7.0, "median_ttft_ms_ci95": [6, 8]}],
        "workload": {"name": "w", "sha256": "1" * 12},
        "target": {},
    }
    result = parse_result(document)
    low, high = result.levels[0].intervals["median_ttft_ms"] or (0.0, 0.0)
    assert round(low, 1) == 92.6 and round(high, 1) == 117.4
    assert result.levels[1].intervals["median_ttft_ms"] == (6, 8)  # one run: its own interval, as written
    assert "Student-t" in (result.interval_method or "") and "recomputed" in (result.interval_method or "")
    assert result.to_json() == document  # the file's document is kept as written
    assert result.levels[0].interval_basis == "n=3 runs"
