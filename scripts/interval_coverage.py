"""How often labctl's 95 % intervals cover the truth, at the sizes labctl uses: prints a table (kind, size,
coverage) of 2,000 draws each, from fixed seeds.

    python scripts/interval_coverage.py

- Student-t across repeats: 3 per-run values from a normal distribution (a per-run median or rate is a mean
  of many requests' effects); the truth is its mean.
- Wilson for a pass rate: 12 cases, each sample's true pass rate drawn uniformly from (0, 1); the truth is
  that rate. At one fixed rate, Wilson's coverage at 12 cases swings with the rate (the table's exact rows).
- Percentile bootstrap within a run (labctl's own: 1,000 resamples, its fixed seed): 200 requests' TTFTs from
  a log-normal distribution (median 100 ms, sigma 0.5); the truth is its median, mean, p90, p95 or p99.

tests/bench/test_interval_coverage.py checks the rows it names against 93-97 %."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labctl.bench.bootstrap import value_intervals  # noqa: E402
from labctl.bench.intervals import t_interval, wilson_interval  # noqa: E402

DRAWS = 2000
REPEATS = 3
CASES = 12
REQUESTS = 200
SEED = 34
TTFT_MEDIAN_MS, TTFT_SIGMA = 100.0, 0.5


@dataclass(frozen=True)
class Row:
    kind: str
    size: str
    coverage: float


def covered(interval: list[float] | None, truth: float) -> bool:
    return interval is not None and interval[0] <= truth <= interval[1]


def student_t(draws: int = DRAWS, seed: int = SEED) -> Row:
    samples = np.random.default_rng(seed).normal(100.0, 10.0, (draws, REPEATS))
    hits = sum(covered(t_interval(row.tolist()), 100.0) for row in samples)
    return Row("Student-t, mean of per-run values", f"{REPEATS} repeats", hits / draws)


def wilson(draws: int = DRAWS, seed: int = SEED) -> Row:
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.0, 1.0, draws)
    passed = rng.binomial(CASES, rates)
    hits = sum(covered(wilson_interval(int(k), CASES), float(p)) for k, p in zip(passed, rates, strict=True))
    return Row("Wilson, pass rate (true rate uniform on 0-1)", f"{CASES} cases", hits / draws)


def wilson_exact(rate: float) -> Row:
    """The exact coverage at one true pass rate (a sum over the binomial, no draws)."""
    chance = sum(
        math.comb(CASES, k) * rate**k * (1 - rate) ** (CASES - k)
        for k in range(CASES + 1)
        if covered(wilson_interval(k, CASES), rate)
    )
    return Row(f"Wilson, pass rate {rate:g} (exact)", f"{CASES} cases", chance)


TRUTHS: dict[str, Callable[[float, float], float]] = {
    "median": lambda median, sigma: median,
    "mean": lambda median, sigma: median * math.exp(sigma**2 / 2),
    "p90": lambda median, sigma: median * math.exp(sigma * 1.2815515655446004),
    "p95": lambda median, sigma: median * math.exp(sigma * 1.6448536269514722),
    "p99": lambda median, sigma: median * math.exp(sigma * 2.3263478740408408),
}


def bootstrap(draws: int = DRAWS, seed: int = SEED, stats: tuple[str, ...] = ("median", "mean")) -> list[Row]:
    samples = np.random.default_rng(seed).lognormal(math.log(TTFT_MEDIAN_MS), TTFT_SIGMA, (draws, REQUESTS))
    hits = dict.fromkeys(stats, 0)
    for sample in samples:
        found = value_intervals(sample)
        for stat in stats:
            hits[stat] += covered(found.get(stat), TRUTHS[stat](TTFT_MEDIAN_MS, TTFT_SIGMA))
    return [Row(f"bootstrap, {stat} TTFT (log-normal)", f"{REQUESTS} requests", hits[stat] / draws) for stat in stats]


def table() -> list[Row]:
    return [
        student_t(),
        wilson(),
        *(wilson_exact(rate) for rate in (0.5, 0.75, 0.8, 0.9)),
        *bootstrap(stats=tuple(TRUTHS)),
    ]


def main() -> None:
    rows = table()
    width = max(len(r.kind) for r in rows)
    print(f"{'kind':<{width}}  {'size':<12}  coverage (95 % nominal; {DRAWS} draws unless exact)")
    for r in rows:
        print(f"{r.kind:<{width}}  {r.size:<12}  {r.coverage:.1%}")


if __name__ == "__main__":
    main()
