"""The report's PNG plots (matplotlib): lines against concurrency (or the request rate for rate sweeps),
the Pareto plot and the telemetry panels, for a comparison.

Every plot carries the caveats of the points it draws (✗ on the point, the reason under the plot), so
a PNG sent on its own still says what is wrong with it."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.compare.pivot import all_caveats, interval_of, letter, level_caveats, level_key, level_name, value_of
from labctl.compare.rules import Check, Entry
from labctl.errors import LabctlError

PARETO = "pareto.png"
TELEMETRY = "telemetry.png"
# (title, y label, where in a level's telemetry): GPU figures are averaged over the run's GPUs.
TELEMETRY_PANELS = [
    ("GPU utilisation (mean)", "%", ("gpu", "utilization_gpu_pct", "mean")),
    ("GPU memory used (max)", "MiB", ("gpu", "memory_used_mib", "max")),
    ("Engine: running requests (mean)", "requests", ("engine", "running", "mean")),
    ("Engine: KV-cache usage (mean)", "fraction", ("engine", "kv_cache_usage", "mean")),
]
# (file, title, y label, keys): lines against concurrency (or the request rate for rate sweeps)
PLOTS = [
    ("throughput.png", "Output throughput", "output tokens/s", ["output_throughput"]),
    ("ttft.png", "TTFT", "ms", ["median_ttft_ms", "p99_ttft_ms"]),
    ("tpot.png", "TPOT", "ms", ["median_tpot_ms", "p99_tpot_ms"]),
]


@dataclass
class Frame:
    """What every plot of one report carries besides its lines."""

    labels: list[str]  # one per entry: who each line is
    failed: list[str]  # blocking rules not met: ✗ in every title
    notes: list[str]  # caveats, written under every plot
    by_rate: bool


@dataclass
class Line:
    label: str
    color: str
    style: str
    points: list[tuple[float, float | None, tuple[float, float] | None, list[str]]] = field(default_factory=list)


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LabctlError("labctl report needs matplotlib: pip install 'labctl[report]'.") from None
    return plt


def series_label(index: int, entry: Entry) -> str:
    name = entry.label if entry.record.engine != "external" else f"external {entry.result['target']['base_url']}"
    return f"{letter(index)} {name} [{entry.result['target'].get('environment_label', '?')}]"


def levels_of(entry: Entry) -> list[dict[str, Any]]:
    return sorted(entry.result["levels"], key=level_key)


def by_rate(entries: list[Entry]) -> bool:
    """Rate sweeps are drawn against the rate; everything else against concurrency."""
    return all(level.get("target_rate") for e in entries for level in e.result["levels"])


def _x(level: dict[str, Any], rate: bool) -> float:
    return float(level["target_rate"]) if rate else float(level["concurrency"])


def _x_label(rate: bool) -> str:
    return "request rate (req/s)" if rate else "concurrency"


def draw_plots(folder: Path, entries: list[Entry], checks: list[Check]) -> list[str]:
    """A comparison: one colour per result, p99 dashed."""
    plt = pyplot()
    failed = sorted(c.rule for c in checks if not c.ok and c.blocking)  # a cold/warm start moves no point
    caveats = [c for c in all_caveats(entries, checks) if not c.startswith("rule not met")]
    notes = [f"✗ rule not met: {rule}" for rule in failed] + [f"✗ {c}" for c in caveats]
    frame = Frame([series_label(i, e) for i, e in enumerate(entries)], failed, notes, by_rate(entries))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = [_pareto(plt, folder, entries, frame, colors), _telemetry(plt, folder, entries, frame, colors)]
    for filename, title, unit, keys in PLOTS:
        lines = []
        for index, entry in enumerate(entries):
            for key in keys:
                suffix = "" if len(keys) == 1 else (" p99" if key.startswith("p99") else " p50")
                style = "--" if key.startswith("p99") else "-"
                color = colors[index % len(colors)]
                lines.append(_line(entry, key, frame, Line(frame.labels[index] + suffix, color, style)))
        written.append(_line_plot(plt, folder, filename, title, unit, entries, lines, frame))
    return written


def _line(entry: Entry, key: str, frame: Frame, line: Line) -> Line:
    failed = set(frame.failed)
    for level in levels_of(entry):
        line.points.append(
            (
                _x(level, frame.by_rate),
                value_of(level, key),
                interval_of(level, key),
                level_caveats(entry, level, failed),
            )
        )
    return line


def _line_plot(
    plt: Any, folder: Path, filename: str, title: str, unit: str, entries: list[Entry], lines: list[Line], frame: Frame
) -> str:
    figure, axis = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    for line in lines:
        if all(y is None for _, y, _, _ in line.points):
            continue
        x = [p[0] for p in line.points]
        y = [math.nan if p[1] is None else p[1] for p in line.points]
        axis.plot(x, y, line.style, marker="o", color=line.color, label=line.label)
        for xi, yi, ci, caveats in line.points:
            if ci and yi is not None:
                axis.errorbar([xi], [yi], yerr=[[yi - ci[0]], [ci[1] - yi]], color=line.color, capsize=3)
            _mark(axis, xi, yi, caveats)
    _log_x(axis, sorted({_x(lv, frame.by_rate) for e in entries for lv in e.result["levels"]}))
    axis.set_xlabel(_x_label(frame.by_rate))
    axis.set_ylabel(unit)
    axis.set_title(f"{title} vs {'request rate' if frame.by_rate else 'concurrency'}" + (" ✗" if frame.failed else ""))
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    _footer(figure, frame)
    figure.savefig(folder / filename)
    plt.close(figure)
    return filename


def _log_x(axis: Any, ticks: list[float]) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(ticks, [f"{t:g}" for t in ticks])
    axis.minorticks_off()


def _footer(figure: Any, frame: Frame) -> None:
    notes = frame.notes
    if not notes:
        return
    text = "\n".join(textwrap.shorten(n, 110) for n in notes[:6])
    if len(notes) > 6:
        text += f"\n… and {len(notes) - 6} more caveats (see the report's table)"
    figure.text(0.01, 0.01, text, fontsize=7, color="#b00000", va="bottom", ha="left")
    figure.subplots_adjust(bottom=0.16 + 0.035 * min(len(notes), 7))


def _mark(axis: Any, x: float | None, y: float | None, caveats: list[str]) -> None:
    """A ✗ on a point whose own level has a caveat; a rule broken by the whole result is in the title."""
    if any(not c.startswith("mismatch") for c in caveats) and x is not None and y is not None:
        axis.annotate("✗", (x, y), color="#b00000", fontsize=13, ha="center", va="center", fontweight="bold")


def telemetry_value(level: dict[str, Any], where: tuple[str, str, str]) -> float | None:
    """One level's telemetry figure: an engine gauge, or a GPU field averaged over the run's GPUs."""
    part, key, stat = where
    section = (level.get("telemetry") or {}).get(part) or {}
    if part == "engine":
        value = (section.get(key) or {}).get(stat)
        return None if value is None else float(value)
    raw = [(gpu.get(key) or {}).get(stat) for gpu in (section.get("gpus") or {}).values()]
    values = [float(v) for v in raw if v is not None]
    return sum(values) / len(values) if values else None


def missing_reason(entry: Entry, where: tuple[str, str, str]) -> str | None:
    """Why a result has no samples for this panel, as the bench recorded it."""
    missing = (entry.result.get("telemetry") or {}).get("missing") or {}
    part, key, _ = where
    reason = missing.get(part) or (missing.get(f"engine.{key}") if part == "engine" else None)
    return None if reason is None else str(reason)


def _telemetry(plt: Any, folder: Path, entries: list[Entry], frame: Frame, colors: list[str]) -> str:
    """What the GPUs and the engine did during each level, beside the latency it produced."""
    figure, axes = plt.subplots(2, 2, figsize=(9.5, 6.6), dpi=110)
    simulated = any(((e.result.get("telemetry") or {}).get("gpu") or {}).get("simulated") for e in entries)
    failed = set(frame.failed)
    for axis, (title, unit, where) in zip(axes.flat, TELEMETRY_PANELS, strict=True):
        drawn = False
        for index, entry in enumerate(entries):
            points = [(_x(lv, frame.by_rate), telemetry_value(lv, where), lv) for lv in levels_of(entry)]
            points = [(x, y, lv) for x, y, lv in points if y is not None]
            if not points:
                continue
            drawn = True
            color = colors[index % len(colors)]
            axis.plot([p[0] for p in points], [p[1] for p in points], "-o", color=color, label=frame.labels[index])
            for x, y, lv in points:
                _mark(axis, x, y, level_caveats(entry, lv, failed))
        if drawn:
            _log_x(axis, sorted({_x(lv, frame.by_rate) for e in entries for lv in levels_of(e)}))
            axis.legend(fontsize=6)
        else:
            reasons = sorted({reason for e in entries if (reason := missing_reason(e, where))})
            note = "no samples" + (f":\n{textwrap.shorten(reasons[0], 60)}" if reasons else "")
            axis.text(0.5, 0.5, note, ha="center", va="center", fontsize=8, color="#666666", transform=axis.transAxes)
        axis.set_title(title + (" (simulated GPU)" if simulated and where[0] == "gpu" else ""), fontsize=9)
        axis.set_xlabel(_x_label(frame.by_rate), fontsize=8)
        axis.set_ylabel(unit, fontsize=8)
        axis.grid(True, alpha=0.3)
    figure.suptitle("Telemetry per level" + (" ✗" if frame.failed else ""))
    figure.tight_layout()
    _footer(figure, frame)
    figure.savefig(folder / TELEMETRY)
    plt.close(figure)
    return TELEMETRY


def _pareto(plt: Any, folder: Path, entries: list[Entry], frame: Frame, colors: list[str]) -> str:
    """Output tokens/s per user against total output tokens/s: up and to the right is better."""
    figure, axis = plt.subplots(figsize=(7.5, 5.2), dpi=110)
    failed = set(frame.failed)
    for index, entry in enumerate(entries):
        points = [(value_of(lv, "output_throughput"), value_of(lv, "tokens_per_user"), lv) for lv in levels_of(entry)]
        points = [(x, y, lv) for x, y, lv in points if x is not None and y is not None]
        if not points:
            continue
        color = colors[index % len(colors)]
        axis.plot([p[0] for p in points], [p[1] for p in points], "-o", color=color, label=frame.labels[index])
        for x, y, lv in points:
            axis.annotate(
                level_name(level_key(lv)), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7, color=color
            )
            _mark(axis, x, y, level_caveats(entry, lv, failed))
    axis.set_xlabel("total output tokens/s")
    axis.set_ylabel("output tokens/s per user (1000 / TPOT p50)")
    axis.set_title("Throughput vs interactivity (points: their level)" + (" ✗" if frame.failed else ""))
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    _footer(figure, frame)
    figure.savefig(folder / PARETO)
    plt.close(figure)
    return PARETO
