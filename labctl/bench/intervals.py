"""95 % intervals for every summary metric: a percentile bootstrap over requests within a run (fixed
seed, RESAMPLES resamples; shared/DECISIONS.md "Intervals"), and across repeats over the per-run values.

A resample draws requests with replacement; it is kept as a count per request, so a pooled statistic
(ITL: every gap of every drawn request) is a weighted one over the original values, never a copy of
hundreds of thousands of gaps. Percentiles interpolate between closest ranks as metrics.percentile does,
so a resample that draws every request once reproduces the point value exactly.

Rates (request, output and total throughput, goodput) get no interval from one run: a resample of requests
over the run's fixed duration is not another run (with every request completed it is the same count, and with
fixed lengths the same tokens: a zero-width interval that says nothing). They get one across repeats. Nor does
a statistic whose every resample gives the same value (one request): no interval is said, never [x, x]."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from labctl.bench.client import RequestResult
from labctl.bench.metrics import PERCENTILES

RESAMPLES = 1000
SEED = 20261203
LEVEL = 95.0
Floats = npt.NDArray[np.float64]


def _interval(values: Sequence[float] | Floats, zero_width: bool = True) -> list[float] | None:
    array = np.asarray(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if array.size == 0:
        return None
    tail = (100.0 - LEVEL) / 2
    low, high = np.percentile(array, [tail, 100.0 - tail])
    if low == high and not zero_width:
        return None
    return [float(low), float(high)]


def _weighted_stats(values: Floats, owner: npt.NDArray[np.intp], counts: npt.NDArray[np.int64]) -> dict[str, float]:
    """mean, median, std, pXX and max of `values` when value i appears counts[owner[i]] times."""
    weights = counts[owner].astype(np.float64)
    total = weights.sum()
    if total <= 0:
        return {}
    mean = float((weights * values).sum() / total)
    var = float((weights * (values - mean) ** 2).sum() / total)
    cumulative = np.cumsum(weights)
    out = {"mean": mean, "std": math.sqrt(max(var, 0.0)), "max": float(values[weights > 0].max())}
    for name, q in (("median", 50.0), *((f"p{p}", float(p)) for p in PERCENTILES)):
        position = (total - 1) * q / 100
        low, high = math.floor(position), math.ceil(position)
        at = np.searchsorted(cumulative, [low, high], side="right")
        a, b = values[min(at[0], len(values) - 1)], values[min(at[1], len(values) - 1)]
        out[name] = float(a + (b - a) * (position - low))
    return out


class _Series:
    """Per-request values of one metric, sorted, each remembering which request it came from."""

    def __init__(self, pairs: list[tuple[float, int]]) -> None:
        pairs.sort()
        self.values: Floats = np.array([v for v, _ in pairs], dtype=np.float64)
        self.owner: npt.NDArray[np.intp] = np.array([i for _, i in pairs], dtype=np.intp)


RATES = ("request_throughput", "output_throughput", "total_token_throughput", "goodput")


def request_intervals(
    results: list[RequestResult],
    duration_s: float,
    slo: dict[str, float] | None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, list[float] | None]:
    """`<metric>_ci95: [lo, hi]` for the latency statistics of one run; None for its rates (see above)."""
    n = len(results)
    if n == 0 or duration_s <= 0:
        return {}
    pairs: dict[str, list[tuple[float, int]]] = {"ttft": [], "tpot": [], "itl": [], "e2el": []}
    for i, r in enumerate(results):
        if not r.ok:
            continue
        if r.first_token is not None:
            pairs["ttft"].append(((r.first_token - r.sent) * 1000, i))
            if r.output_tokens > 1:
                pairs["tpot"].append((((r.chunk_times[-1] - r.first_token) * 1000) / (r.output_tokens - 1), i))
        if r.chunk_times:
            pairs["e2el"].append(((r.chunk_times[-1] - r.sent) * 1000, i))
        pairs["itl"] += [((b - a) * 1000, i) for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]
    series = {k: _Series(v) for k, v in pairs.items()}
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(resamples):
        counts = np.bincount(rng.integers(0, n, n), minlength=n).astype(np.int64)
        for name, s in series.items():
            if s.values.size == 0:
                continue
            for stat, value in _weighted_stats(s.values, s.owner, counts).items():
                if stat == "max" and name != "itl":
                    continue
                draws.setdefault(f"{stat}_{name}_ms", []).append(value)
    out = {f"{key}_ci95": _interval(values, zero_width=False) for key, values in draws.items()}
    return out | {f"{key}_ci95": None for key in RATES if key != "goodput" or slo}


def mean_interval(values: list[float], resamples: int = RESAMPLES, seed: int = SEED) -> list[float] | None:
    """Across repeats: a percentile bootstrap of the mean of the per-run values."""
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if finite.size == 0:
        return None
    rng = np.random.default_rng(seed)
    means = finite[rng.integers(0, finite.size, (resamples, finite.size))].mean(axis=1)
    return _interval(means)


INTERVAL_KEYS = tuple(
    [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p95", "p99")]
    + ["max_itl_ms", "request_throughput", "output_throughput", "total_token_throughput", "goodput"]
)


def combine_repeats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One level from N repeats: each metric is the mean of the per-run values, its interval a bootstrap
    over those values; counts are summed; each run's own summary stays under `repeats`."""
    first = runs[0]
    level: dict[str, Any] = {k: v for k, v in first.items() if k not in INTERVAL_KEYS and not k.endswith("_ci95")}
    for key in ("requests", "completed", "failed", "total_input_tokens", "total_output_tokens", "duration_s"):
        level[key] = sum(r[key] for r in runs)
    level["failures"] = {}
    for r in runs:
        for reason, count in r["failures"].items():
            level["failures"][reason] = level["failures"].get(reason, 0) + count
    for key in INTERVAL_KEYS:
        values = [r.get(key) for r in runs]
        finite = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
        level[key] = sum(finite) / len(finite) if finite else None
        level[f"{key}_ci95"] = mean_interval(finite) if finite else None
    level["interrupted"] = any(r["interrupted"] for r in runs)
    level["usage_fallback"] = any(r["usage_fallback"] for r in runs)
    level["chunks_unlike_usage"] = sum(r.get("chunks_unlike_usage", 0) for r in runs)
    level["warnings"] = sorted({w for r in runs for w in r["warnings"]})
    level["client_cpu_share"] = max(r["client_cpu_share"] for r in runs)
    level["repeat"] = len(runs)
    level["interval_method"] = (
        f"bootstrap over the {len(runs)} per-run values (mean; {RESAMPLES} resamples, seed {SEED})"
    )
    level["repeats"] = runs
    return level
