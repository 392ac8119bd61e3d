"""The within-run 95 % intervals: a percentile bootstrap over requests (fixed seed, RESAMPLES resamples), the
only numpy in the intervals (intervals.py holds the rest, so reading a result never imports numpy).

A resample draws requests with replacement; it is kept as a count per request, so a pooled statistic
(ITL: every gap of every drawn request) is a weighted one over the original values, never a copy of
hundreds of thousands of gaps. Percentiles interpolate between closest ranks as metrics.percentile does,
so a resample that draws every request once reproduces the point value exactly.

Rates (request, output and total throughput, goodput) get no interval from one run: a resample of requests
over the run's fixed duration is not another run (with every request completed it is the same count, and with
fixed lengths the same tokens: a zero-width interval that says nothing). They get one across repeats. Nor does
a statistic whose every resample gives the same value (one request): no interval is said, never [x, x]."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from labctl.bench.client import RequestResult
from labctl.bench.intervals import RESAMPLES, SEED, tail
from labctl.bench.metrics import PERCENTILES

BLOCK = 2_000_000  # values per resample block: a block's weights stay near 16 MB, however many gaps a run has
Floats = npt.NDArray[np.float64]
Counts = npt.NDArray[np.int64]


def _interval(values: Sequence[float] | Floats) -> list[float] | None:
    """The middle LEVEL % of the resamples' values; none when they all agree."""
    array = np.asarray(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if array.size == 0:
        return None
    low, high = np.percentile(array, [tail(), 100.0 - tail()])
    if low == high:
        return None
    return [float(low), float(high)]


def resample_counts(n: int, resamples: int, rng: np.random.Generator) -> Counts:
    """(resamples, n): how many times each of n requests is drawn in each resample (n draws with replacement)."""
    drawn = rng.integers(0, n, (resamples, n)) + np.arange(resamples)[:, None] * n
    return np.bincount(drawn.ravel(), minlength=resamples * n).reshape(resamples, n).astype(np.int64)


def _weighted_stats(values: Floats, owner: npt.NDArray[np.intp], counts: Counts) -> dict[str, Floats]:
    """Per resample (a row of counts): mean, std, max, median and pXX of `values` (sorted ascending) when value
    i appears counts[row, owner[i]] times; NaN in a row that drew none of them."""
    requests = counts.shape[1]
    centred = values - values.mean()  # sums of squares about the mean: no cancellation in the variance
    per_request = [np.bincount(owner, weights=w, minlength=requests) for w in (None, centred, centred**2)]
    total, first, second = (counts @ sums for sums in per_request)
    drawn = total > 0
    share = np.where(drawn, total, 1.0)
    shift = first / share
    out = {"mean": values.mean() + shift, "std": np.sqrt(np.maximum(second / share - shift**2, 0.0))}
    # one search for every row: row r's running counts shifted by r * span stay in order across rows
    cumulative = np.cumsum(counts[:, owner], axis=1)
    rows = np.arange(len(total))
    span = int(total.max()) + 1
    flat = (cumulative + (rows * span)[:, None]).ravel()

    def at(rank: npt.NDArray[Any]) -> Floats:
        found = np.searchsorted(flat, rank + rows * span, side="right") - rows * values.size
        picked: Floats = values[np.clip(found, 0, values.size - 1)]
        return picked

    out["max"] = at(total - 1)
    for name, q in (("median", 50.0), *((f"p{p}", float(p)) for p in PERCENTILES)):
        position = (total - 1) * q / 100
        low = np.floor(position)
        a, b = at(low), at(np.ceil(position))
        out[name] = a + (b - a) * (position - low)
    return {name: np.where(drawn, stat, np.nan) for name, stat in out.items()}


class _Series:
    """Per-request values of one metric, sorted, each remembering which request it came from."""

    def __init__(self, pairs: list[tuple[float, int]]) -> None:
        pairs.sort()
        self.values: Floats = np.array([v for v, _ in pairs], dtype=np.float64)
        self.owner: npt.NDArray[np.intp] = np.array([i for _, i in pairs], dtype=np.intp)


def _bootstrap(series: dict[str, _Series], n: int, resamples: int, seed: int) -> dict[str, list[float] | None]:
    """`<stat>_<name>_ms_ci95` of every series, from the same resamples of the n requests."""
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, BLOCK // max(n, *(s.values.size for s in series.values()))))
    draws: dict[str, list[Floats]] = {}
    for start in range(0, resamples, block):
        counts = resample_counts(n, min(block, resamples - start), rng)
        for name, s in series.items():
            if s.values.size == 0:
                continue
            for stat, values in _weighted_stats(s.values, s.owner, counts).items():
                if stat == "max" and name != "itl":
                    continue
                draws.setdefault(f"{stat}_{name}_ms", []).append(values)
    return {f"{key}_ci95": _interval(np.concatenate(parts)) for key, parts in draws.items()}


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
    out = _bootstrap({k: _Series(v) for k, v in pairs.items()}, n, resamples, seed)
    return out | {f"{key}_ci95": None for key in RATES if key != "goodput" or slo}


def value_intervals(values: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, list[float]]:
    """The within-run intervals of one value per request (as TTFT, TPOT and E2EL have), keyed by statistic
    (`mean`, `median`, `p99`, ...): what request_intervals gives such a metric."""
    if len(values) == 0:
        return {}
    found = _bootstrap({"x": _Series([(float(v), i) for i, v in enumerate(values)])}, len(values), resamples, seed)
    return {key.removesuffix("_x_ms_ci95"): ci for key, ci in found.items() if ci is not None}
