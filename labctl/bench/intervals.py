"""95 % intervals, each of the kind the data allows (shared/DECISIONS.md "Intervals"): within one run a
percentile bootstrap over requests (fixed seed, RESAMPLES resamples); across repeats a Student-t interval on
the per-run values (n - 1 degrees of freedom; one run has none); a pass rate a Wilson score interval.
scripts/interval_coverage.py measures how often each covers the truth at the sizes labctl uses.

A resample draws requests with replacement; it is kept as a count per request, so a pooled statistic
(ITL: every gap of every drawn request) is a weighted one over the original values, never a copy of
hundreds of thousands of gaps. Percentiles interpolate between closest ranks as metrics.percentile does,
so a resample that draws every request once reproduces the point value exactly.

Rates (request, output and total throughput, goodput) get no interval from one run: a resample of requests
over the run's fixed duration is not another run (with every request completed it is the same count, and with
fixed lengths the same tokens: a zero-width interval that says nothing). They get one across repeats. Nor does
a statistic whose every resample gives the same value (one request): no interval is said, never [x, x].

Across three repeats a bootstrap of the mean is about [min, max], narrower than the data allows ([100, 110]
on 100, 105, 110, where Student-t says [92.6, 117.4]); a bootstrap of 12 pass/fail cases says 100 %-100 % for
12/12, where Wilson says 76 %-100 %."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from labctl.bench.client import RequestResult
from labctl.bench.metrics import PERCENTILES

if TYPE_CHECKING:  # numpy is imported where a bootstrap runs: `bench list`, `compare` and the rest never pay for it
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]
    Counts = npt.NDArray[np.int64]

RESAMPLES = 1000
SEED = 20261203
LEVEL = 95.0
BLOCK = 2_000_000  # values per resample block: a block's weights stay near 16 MB, however many gaps a run has

REQUEST_METHOD = f"95 % percentile bootstrap over requests ({RESAMPLES} resamples, seed {SEED})"
REPEAT_METHOD = "95 % Student-t interval over the per-run values (mean ± t(0.975, n - 1) · s / √n)"
PASS_RATE_METHOD = "95 % Wilson score interval on passed/total"


def _tail() -> float:
    return (100.0 - LEVEL) / 2


def _interval(values: Sequence[float] | Floats) -> list[float] | None:
    """The middle LEVEL % of the resamples' values; none when they all agree."""
    import numpy as np

    array = np.asarray(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if array.size == 0:
        return None
    low, high = np.percentile(array, [_tail(), 100.0 - _tail()])
    if low == high:
        return None
    return [float(low), float(high)]


def resample_counts(n: int, resamples: int, rng: np.random.Generator) -> Counts:
    """(resamples, n): how many times each of n requests is drawn in each resample (n draws with replacement)."""
    import numpy as np

    drawn = rng.integers(0, n, (resamples, n)) + np.arange(resamples)[:, None] * n
    return np.bincount(drawn.ravel(), minlength=resamples * n).reshape(resamples, n).astype(np.int64)


def _weighted_stats(values: Floats, owner: npt.NDArray[np.intp], counts: Counts) -> dict[str, Floats]:
    """Per resample (a row of counts): mean, std, max, median and pXX of `values` (sorted ascending) when value
    i appears counts[row, owner[i]] times; NaN in a row that drew none of them."""
    import numpy as np

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
        import numpy as np

        pairs.sort()
        self.values: Floats = np.array([v for v, _ in pairs], dtype=np.float64)
        self.owner: npt.NDArray[np.intp] = np.array([i for _, i in pairs], dtype=np.intp)


def _bootstrap(series: dict[str, _Series], n: int, resamples: int, seed: int) -> dict[str, list[float] | None]:
    """`<stat>_<name>_ms_ci95` of every series, from the same resamples of the n requests."""
    import numpy as np

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


def t_quantile(dof: int) -> float:
    """Student's t quantile for a two-sided LEVEL % interval with `dof` degrees of freedom."""
    # scipy comes with lm-eval; its special functions cost a few hundred ms to import, paid only here
    from scipy.special import stdtrit

    return float(stdtrit(dof, 1.0 - _tail() / 100))


def t_interval(values: Iterable[float | None]) -> list[float] | None:
    """Across repeats: mean ± t(0.975, n - 1) · s / √n of the n finite per-run values; None below two runs."""
    finite = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    if len(finite) < 2:
        return None
    mean = statistics.fmean(finite)
    half = t_quantile(len(finite) - 1) * statistics.stdev(finite) / math.sqrt(len(finite))
    return [mean - half, mean + half]


def wilson_interval(passed: int, total: int) -> list[float] | None:
    """A pass rate's Wilson score interval: 12/12 is about [0.76, 1], never [1, 1]; None for no cases."""
    if total <= 0 or not 0 <= passed <= total:
        return None
    z = statistics.NormalDist().inv_cdf(1.0 - _tail() / 100)
    rate, z2 = passed / total, z * z
    centre = (rate + z2 / (2 * total)) / (1 + z2 / total)
    half = z * math.sqrt(rate * (1 - rate) / total + z2 / (4 * total * total)) / (1 + z2 / total)
    return [max(0.0, centre - half), min(1.0, centre + half)]


INTERVAL_KEYS = tuple(
    [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p95", "p99")]
    + ["max_itl_ms", "request_throughput", "output_throughput", "total_token_throughput", "goodput"]
)


def repeat_method(n: int) -> str:
    return f"{REPEAT_METHOD}, n = {n} runs ({n - 1} degrees of freedom)"


def combine_repeats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One level from N repeats: each metric is the mean of the per-run values, its interval Student-t over
    those values; counts are summed; each run's own summary stays under `repeats`."""
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
        level[f"{key}_ci95"] = t_interval(finite)
    level["interrupted"] = any(r["interrupted"] for r in runs)
    level["usage_fallback"] = any(r["usage_fallback"] for r in runs)
    level["chunks_unlike_usage"] = sum(r.get("chunks_unlike_usage", 0) for r in runs)
    level["warnings"] = sorted({w for r in runs for w in r["warnings"]})
    level["client_cpu_share"] = max(r["client_cpu_share"] for r in runs)
    level["client_workers"] = max(r.get("client_workers", 1) for r in runs)
    busiest = [r["client_cpu_busiest_share"] for r in runs if r.get("client_cpu_busiest_share") is not None]
    level["client_cpu_busiest_share"] = max(busiest) if busiest else None
    level["repeat"] = len(runs)
    level["interval_method"] = repeat_method(len(runs))
    level["repeats"] = runs
    return level


def repeat_intervals(level: dict[str, Any], keys: Iterable[str]) -> dict[str, list[float] | None] | None:
    """A stored level of N > 1 repeats whose intervals an older labctl took by bootstrap over the per-run
    values (about [min, max]): its Student-t intervals, recomputed from those values; None when it needs none."""
    runs = level.get("repeats")
    if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, dict) for r in runs):
        return None
    if str(level.get("interval_method", "")).startswith(REPEAT_METHOD):
        return None
    return {key: t_interval(r.get(key) for r in runs) for key in keys}
