"""95 % intervals, each of the kind the data allows (shared/DECISIONS.md "Intervals"): within one run a
percentile bootstrap over requests (bootstrap.py: fixed seed, RESAMPLES resamples); across repeats a Student-t
interval on the per-run values (n - 1 degrees of freedom; one run has none); a pass rate a Wilson score interval.
scripts/interval_coverage.py measures how often each covers the truth at the sizes labctl uses.

Across three repeats a bootstrap of the mean is about [min, max], narrower than the data allows ([100, 110]
on 100, 105, 110, where Student-t says [92.6, 117.4]); a bootstrap of 12 pass/fail cases says 100 %-100 % for
12/12, where Wilson says 76 %-100 %."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

RESAMPLES = 1000
SEED = 20261203
LEVEL = 95.0

REQUEST_METHOD = f"95 % percentile bootstrap over requests ({RESAMPLES} resamples, seed {SEED})"
REPEAT_METHOD = "95 % Student-t interval over the per-run values (mean ± t(0.975, n - 1) · s / √n)"
PASS_RATE_METHOD = "95 % Wilson score interval on passed/total"


def tail() -> float:
    """Each side's share of a LEVEL % interval, in %."""
    return (100.0 - LEVEL) / 2


def t_quantile(dof: int) -> float:
    """Student's t quantile for a two-sided LEVEL % interval with `dof` degrees of freedom."""
    # scipy comes with lm-eval; its special functions cost a few hundred ms to import, paid only here
    from scipy.special import stdtrit

    return float(stdtrit(dof, 1.0 - tail() / 100))


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
    z = statistics.NormalDist().inv_cdf(1.0 - tail() / 100)
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
