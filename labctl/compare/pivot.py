"""Engines side by side per level: one row per (level, metric), one column per result, Δ % against the
first; every caveat (interrupted, over a batch limit, a mismatched rule, a client that fell behind)
kept with the level it touches. Pure: tables, Markdown, HTML and plots all read from here."""

from __future__ import annotations

import string
from dataclasses import dataclass

from labctl.bench.metric_table import View, shown_in
from labctl.bench.results import BenchResult, Level
from labctl.compare.rules import Check, Entry

BATCH_RULE = "concurrency within built max batch size"


def letter(index: int) -> str:
    return string.ascii_uppercase[index] if index < 26 else f"R{index + 1}"


def level_key(level: Level) -> tuple[int, float]:
    return level.concurrency, float(level.target_rate or 0.0)


def level_name(key: tuple[int, float]) -> str:
    return f"c={key[0]}" + (f" r={key[1]:g}/s" if key[1] else "")


def number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


INTERVALS_SAID = (
    "95 % intervals in brackets: within one run a percentile bootstrap over its completed requests (the n of "
    "n/N); across repeats a Student-t interval over the per-run values (n=runs beside it); none for one run's "
    "rates."
)
OVERLAP_SAID = "≈: the two intervals of a Δ overlap: the data do not tell the two apart."


def repeats_said(level: Level) -> str:
    """Beside an interval across repeats, its n (Student-t over n runs); a run's own is over the n of `n/N`."""
    return f" n={level.repeat}" if level.repeat > 1 else ""


def level_caveats(entry: Entry, level: Level, failed_rules: set[str]) -> list[str]:
    caveats = []
    if level.interrupted or entry.result.status == "interrupted":
        caveats.append("interrupted")
    if level.over_max_batch_size:
        caveats.append("over batch limit")
    cap = entry.result.target.batch_cap
    if cap is not None and cap.value is not None and level.concurrency > cap.value and not level.over_max_batch_size:
        caveats.append(f"ran against a cap of {cap.value}: {level.concurrency - cap.value} requests queue")
    if level.kv_bound is not None:  # the engine queued and preempted: what the level measures, said beside it
        caveats.append(str(level.kv_bound_text()))
    caveats += [f"mismatch: {rule}" for rule in sorted(failed_rules) if rule != BATCH_RULE]
    if level.failed:
        caveats.append(f"{level.failed} failed")
    if level.usage_fallback:  # output tokens counted from chunks: the throughputs may be wrong
        caveats.append("no usage from server")
    if level.chunks_unlike_usage:  # token chunks other than usage: ITL pools fewer (or more) gaps
        caveats.append(f"{level.chunks_unlike_usage} streamed unlike usage")
    if level.partial:  # more than --max-error-rate failed: the figures are the survivors'
        caveats.append("partial (too many failed)")
    if level.engine_shared:  # another client measured the engine too
        caveats.append("engine shared")
    for warning in level.warnings:
        if warning.startswith("CLIENT SATURATED"):
            caveats.append("client saturated")
        elif warning.startswith("CLIENT FELL BEHIND"):
            caveats.append("client fell behind")
    return caveats


def result_caveat(result: BenchResult) -> str | None:
    """What the whole result's status says beyond its levels: partial, or measured on a shared engine."""
    said = []
    if result.status == "partial":
        said.append(f"partial: more than {result.max_error_rate:.0%} of a level's requests failed")
    if result.shared_engine:
        said.append(f"measured beside {result.shared_engine.holder or 'another bench'} (--allow-shared-engine)")
    return "; ".join(said) or None


@dataclass
class PivotRow:
    level: str
    metric: str
    cells: list[str]  # one per entry
    deltas: list[str]  # one per entry after the first: Δ % against the first


def pivot(entries: list[Entry], checks: list[Check]) -> list[PivotRow]:
    failed = {c.rule for c in checks if not c.ok and c.blocking}
    by_entry = [{level_key(lv): lv for lv in e.result.levels} for e in entries]
    keys = sorted({k for levels in by_entry for k in levels})
    out = []
    for key in keys:
        levels = [levels.get(key) for levels in by_entry]
        counts = ["-" if lv is None else f"{lv.completed}/{lv.requests}" for lv in levels]
        out.append(PivotRow(level_name(key), "n/N", counts, ["-"] * (len(levels) - 1)))
        for metric in shown_in(View.PIVOT):
            cells: list[str] = []
            values: list[float | None] = []
            intervals: list[tuple[float, float] | None] = []
            for level in levels:
                value = None if level is None else level.value(metric)
                interval = None if level is None else level.interval(metric)
                if level is None:
                    cells.append("-")
                else:
                    ci = f" [{number(interval[0])}, {number(interval[1])}]{repeats_said(level)}" if interval else ""
                    cells.append(number(value) + ci)
                values.append(value)
                intervals.append(interval)
            deltas = [_delta(values[0], values[i], intervals[0], intervals[i]) for i in range(1, len(levels))]
            out.append(PivotRow(level_name(key), metric.titled, cells, deltas))
        caveats = [_caveat_cell(e, lv, failed) for e, lv in zip(entries, levels, strict=True)]
        if any(c.startswith("✗") for c in caveats):
            out.append(PivotRow(level_name(key), "caveats", caveats, [""] * (len(entries) - 1)))
    return out


def _caveat_cell(entry: Entry, level: Level | None, failed: set[str]) -> str:
    if level is None:
        return "(not run)"
    caveats = level_caveats(entry, level, failed)
    return "✗ " + ", ".join(caveats) if caveats else "-"


def _delta(
    base: float | None, other: float | None, base_ci: tuple[float, float] | None, other_ci: tuple[float, float] | None
) -> str:
    if base is None or other is None or base == 0:
        return "-"
    text = f"{(other - base) / base * 100:+.1f}%"
    if base_ci and other_ci and base_ci[0] <= other_ci[1] and other_ci[0] <= base_ci[1]:
        text += " ≈"  # the intervals overlap: not distinguishable
    return text


def pivot_head(entries: list[Entry]) -> list[str]:
    names = [letter(i) for i in range(len(entries))]
    return ["level", "metric", *names, *[f"Δ {n} vs A" for n in names[1:]]]


def pivot_cells(row: PivotRow) -> list[str]:
    return [row.level, row.metric, *row.cells, *row.deltas]


def legend(entries: list[Entry]) -> list[str]:
    """Who A, B, … are: said once, above the table."""
    return [f"{letter(i)} = {e.label} ({e.result.bench_id})" for i, e in enumerate(entries)]


def all_caveats(entries: list[Entry], checks: list[Check]) -> list[str]:
    failed = {c.rule for c in checks if not c.ok and c.blocking}
    lines = []
    for index, e in enumerate(entries):
        if e.result.status == "interrupted":
            lines.append(f"{letter(index)}: the benchmark was interrupted; its last level is partial")
        if result_caveat(e.result):
            lines.append(f"{letter(index)}: {result_caveat(e.result)}")
        for lv in e.result.levels:
            caveats = [c for c in level_caveats(e, lv, failed) if not c.startswith("mismatch")]
            if caveats:
                lines.append(f"{letter(index)} {level_name(level_key(lv))}: " + ", ".join(caveats))
    lines += [f"rule not met: {rule} (cells marked ✗)" for rule in sorted(failed)]
    return lines
