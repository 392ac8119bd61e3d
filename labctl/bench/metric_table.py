"""Every benchmark metric a level shows, named once: its key in the result, its label and unit, which way is
better, whether the result carries its 95 % interval, and which views show it. `bench`, `compare`, `report`,
the study report and the CLI read their columns, labels and digits from here; adding a metric is one row
here plus its computation where the level is measured."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal


class View(StrEnum):
    """Where a metric is shown: each view lists the metrics that name it, in the table's order."""

    COMPARE_ROW = "compare row"  # a comparison's per-level row: its table, CSV and JSON columns
    PIVOT = "pivot"  # a comparison's side-by-side rows per level (terminal, Markdown, HTML)
    REPORT = "report"  # one result's report: a column per metric, a row per level
    BENCH_TABLE = "bench table"  # `labctl bench show`: a column per metric
    BENCH_INTERVALS = "bench intervals"  # `labctl bench show`: the 95 % intervals line of each level
    PROGRESS = "progress"  # the line the bench says when a level is done
    VERDICT = "verdict"  # the study report's verdicts between cells (higher-is-better ones first)


# A metric computed when a level is read, from its stored figures and its telemetry, never stored itself.
Derive = Callable[[Mapping[str, Any], Mapping[str, Any]], float | None]


@dataclass(frozen=True)
class Metric:
    key: str  # the level's key in the result file (vLLM's names), `<key>_ci95` its interval
    label: str  # as tables head it; it holds the unit where the unit is the name ("out tok/s", "req/s")
    unit: str
    better: Literal["lower", "higher"]
    interval: bool  # the result carries `<key>_ci95` (bench/intervals.py)
    digits: int  # decimals where the bench prints it
    views: frozenset[View]
    spelled: str | None = None  # the long name of plots and prose, where the label is too terse
    derive: Derive | None = None  # a derived metric: how it is computed from the level
    per_gpu_of: str | None = None  # a per-GPU metric: the total it divides by the GPUs the engine held
    cost_of: str | None = None  # a cost metric: the throughput it prices at the host's GPU-hour price

    @property
    def stored(self) -> bool:
        """The result file holds it (a derived or per-GPU metric is computed when the level is read)."""
        return self.derive is None and self.per_gpu_of is None and self.cost_of is None

    @property
    def titled(self) -> str:
        """The label with its unit: "TTFT p50 ms", "out tok/s", "goodput req/s"."""
        return self.label if self.unit in self.label else f"{self.label} {self.unit}"

    @property
    def heading(self) -> str:
        """A column head of `labctl bench show`: the label's leading word in capitals ("OUT tok/s")."""
        return re.sub(r"^[a-z]+", lambda m: m.group().upper(), self.label)

    @property
    def named(self) -> str:
        return self.spelled or self.label

    def said(self, value: str) -> str:
        """A value in a sentence: "TTFT p50 12.0 ms", "130 out tok/s", "goodput 1.20 req/s"."""
        return f"{value} {self.label}" if self.unit in self.label else f"{self.label} {value} {self.unit}"


def _views(*views: View) -> frozenset[View]:
    return frozenset(views)


def _prefix_hits(figures: Mapping[str, Any], telemetry: Mapping[str, Any]) -> float | None:
    """The engine's own prefix-cache hits during the level, in %: hits per queried token from its counters (vLLM),
    or the mean of its hit-rate gauge (telemetry.py); None when the engine exports neither."""
    engine = telemetry.get("engine")
    rate = engine.get("prefix_cache_hit_rate") if isinstance(engine, dict) else None
    found = rate.get("mean") if isinstance(rate, dict) else None
    if isinstance(found, bool) or not isinstance(found, int | float) or not math.isfinite(found):
        return None
    return 100.0 * found


def _gpu_watts(telemetry: Mapping[str, Any]) -> float | None:
    """The level's mean GPU power summed over the engine's GPUs (nvidia-smi's power.draw, sampled while it ran);
    None when a GPU has no power figure or none was sampled."""
    gpu = telemetry.get("gpu")
    gpus = gpu.get("gpus") if isinstance(gpu, dict) else None
    if not isinstance(gpus, dict) or not gpus:
        return None
    total = 0.0
    for row in gpus.values():
        power = row.get("power_draw_w") if isinstance(row, dict) else None
        mean = power.get("mean") if isinstance(power, dict) else None
        if isinstance(mean, bool) or not isinstance(mean, int | float) or not math.isfinite(mean) or mean < 0:
            return None
        total += mean
    return total


def _joules_per_token(figures: Mapping[str, Any], telemetry: Mapping[str, Any]) -> float | None:
    """Energy per output token: the GPUs' mean power over the level (W = J/s) over its output tokens/s."""
    watts, rate = _gpu_watts(telemetry), figures.get("output_throughput")
    if watts is None or isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
        return None
    return watts / float(rate)


def _per_user(figures: Mapping[str, Any], telemetry: Mapping[str, Any]) -> float | None:
    """Output tokens per second each user sees: 1000 / TPOT p50."""
    tpot = figures.get("median_tpot_ms")
    return 1000.0 / tpot if tpot else None


COMPARED = _views(View.COMPARE_ROW, View.PIVOT, View.REPORT)
METRICS: tuple[Metric, ...] = (
    Metric(
        "median_ttft_ms",
        "TTFT p50",
        "ms",
        "lower",
        True,
        1,
        COMPARED | _views(View.BENCH_TABLE, View.BENCH_INTERVALS, View.PROGRESS, View.VERDICT),
    ),
    Metric("p99_ttft_ms", "TTFT p99", "ms", "lower", True, 1, COMPARED | _views(View.BENCH_TABLE)),
    Metric(
        "median_tpot_ms",
        "TPOT p50",
        "ms",
        "lower",
        True,
        1,
        COMPARED | _views(View.BENCH_TABLE, View.BENCH_INTERVALS, View.PROGRESS),
    ),
    Metric("p99_tpot_ms", "TPOT p99", "ms", "lower", True, 1, _views(View.PIVOT, View.REPORT)),
    Metric("median_itl_ms", "ITL p50", "ms", "lower", True, 1, _views(View.REPORT, View.BENCH_TABLE)),
    Metric("p99_itl_ms", "ITL p99", "ms", "lower", True, 1, COMPARED | _views(View.BENCH_TABLE)),
    Metric("median_e2el_ms", "E2E p50", "ms", "lower", True, 1, _views(View.REPORT, View.BENCH_TABLE)),
    Metric("p99_e2el_ms", "E2E p99", "ms", "lower", True, 1, _views(View.REPORT)),
    Metric(
        "output_throughput",
        "out tok/s",
        "tok/s",
        "higher",
        True,
        0,
        COMPARED | _views(View.BENCH_TABLE, View.BENCH_INTERVALS, View.PROGRESS, View.VERDICT),
        spelled="output tokens/s",
    ),
    Metric(
        "output_throughput_per_gpu",
        "out tok/s/GPU",
        "tok/s",
        "higher",
        True,
        0,
        COMPARED | _views(View.BENCH_TABLE, View.VERDICT),
        spelled="output tokens/s per GPU",
        per_gpu_of="output_throughput",
    ),
    Metric(
        "tokens_per_user",
        "tok/s per user",
        "tok/s",
        "higher",
        False,
        1,
        _views(View.PIVOT, View.REPORT),
        derive=_per_user,
    ),
    Metric(
        "request_throughput", "req/s", "req/s", "higher", True, 2, _views(View.REPORT, View.BENCH_TABLE, View.PROGRESS)
    ),
    Metric("goodput", "goodput", "req/s", "higher", True, 2, COMPARED | _views(View.BENCH_TABLE, View.PROGRESS)),
    Metric(
        "prefix_cache_hit_rate",
        "prefix hits",
        "%",
        "higher",
        False,
        1,
        _views(View.PIVOT, View.REPORT),
        derive=_prefix_hits,
    ),
    Metric(
        "joules_per_output_token",
        "J/out tok",
        "J",
        "lower",
        False,
        2,
        COMPARED | _views(View.VERDICT),
        spelled="joules per output token (GPU power)",
        derive=_joules_per_token,
    ),
    Metric(
        "cost_per_million_output_tokens",
        "cost/M out tok",
        "cost",
        "lower",
        True,
        3,
        COMPARED | _views(View.VERDICT),
        spelled="cost per million output tokens (at the host's GPU-hour price)",
        cost_of="output_throughput",
    ),
)
BY_KEY = {metric.key: metric for metric in METRICS}


def shown_in(view: View) -> tuple[Metric, ...]:
    """The metrics a view shows, in the table's order."""
    return tuple(metric for metric in METRICS if view in metric.views)


def value_in(metric: Metric, figures: Mapping[str, Any], telemetry: Mapping[str, Any] | None) -> float | None:
    """A metric's value in a level's figures: a finite number or None; a derived one computed from the level."""
    if metric.derive is not None:
        return metric.derive(figures, telemetry or {})
    value = figures.get(metric.key)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def metric_columns() -> list[str]:
    """Every metric of the table, each followed by its interval's bounds when it has one (the exports' columns)."""
    return [
        key
        for metric in METRICS
        for key in (
            [metric.key, f"{metric.key}_ci95_low", f"{metric.key}_ci95_high"] if metric.interval else [metric.key]
        )
    ]
