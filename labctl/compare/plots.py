"""The report's PNG plots (matplotlib): lines against concurrency (or the request rate for rate sweeps),
the Pareto plot and the telemetry panels, for a comparison or for one result.

Every plot carries the caveats of the points it draws (✗ on the point, the reason under the plot), so
a PNG sent on its own still says what is wrong with it."""

from __future__ import annotations

import math
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.bench.metric_table import BY_KEY, Metric
from labctl.bench.results import Level
from labctl.catalog.engine_metrics import LEGACY_NAMES
from labctl.compare.pivot import all_caveats, letter, level_caveats, level_key, level_name
from labctl.compare.rules import Check, Entry
from labctl.errors import LabctlError

# Matplotlib warns when placing a legend "best" took long, which on a loaded machine is timing, not a result;
# the message would otherwise reach stderr, which callers show as labctl's own.
warnings.filterwarnings("ignore", message='Creating legend with loc="best" can be slow', category=UserWarning)

PARETO = "pareto.png"
TELEMETRY = "telemetry.png"
# (title, y label, where in a level's telemetry): GPU figures are averaged over the run's GPUs.
TELEMETRY_PANELS = [
    ("GPU utilisation (mean)", "%", ("gpu", "utilization_gpu_pct", "mean")),
    ("GPU memory used (max)", "MiB", ("gpu", "memory_used_mib", "max")),
    ("Engine: running requests (mean)", "requests", ("engine", "running", "mean")),
    ("Engine: KV-cache usage (mean)", "%", ("engine", "kv_cache_usage_fraction", "mean")),
]
PERCENT_OF_FRACTION = {"kv_cache_usage_fraction"}  # stored as 0-1, drawn as %
# (file, title, y label, metrics): lines against concurrency (or the request rate for rate sweeps)
M = BY_KEY
PLOTS = [
    ("throughput.png", "Output throughput", M["output_throughput"].named, [M["output_throughput"]]),
    ("ttft.png", "TTFT", "ms", [M["median_ttft_ms"], M["p99_ttft_ms"]]),
    ("tpot.png", "TPOT", "ms", [M["median_tpot_ms"], M["p99_tpot_ms"]]),
]

# One result: one line per metric (its legend the metric's name), p50 solid, p99 dashed, ITL dotted:
# (file, title, y label, [(metric, colour, dash)])
P50, P99, ITL = ("C0", "-"), ("C3", "--"), ("C2", ":")
ONE_RESULT_PLOTS = [
    ("throughput.png", "Output throughput", M["output_throughput"].named, [(M["output_throughput"], *P50)]),
    ("ttft.png", "TTFT", "ms", [(M["median_ttft_ms"], *P50), (M["p99_ttft_ms"], *P99)]),
    (
        "tpot.png",
        "TPOT and ITL",
        "ms",
        [(M["median_tpot_ms"], *P50), (M["p99_tpot_ms"], *P99), (M["p99_itl_ms"], *ITL)],
    ),
    ("e2e.png", "End-to-end latency", "ms", [(M["median_e2el_ms"], *P50), (M["p99_e2el_ms"], *P99)]),
]
DODGE = 0.03  # octaves between lines drawn at the same level


@dataclass
class Frame:
    """What every plot of one report carries besides its lines."""

    labels: list[str]  # one per entry: who each line is
    failed: list[str]  # blocking rules not met: ✗ in every title
    notes: list[str]  # caveats, written under every plot
    by_rate: bool
    about: str = ""  # one result: which result this is, under every plot (a PNG may travel alone)


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
        raise LabctlError(
            "labctl report needs matplotlib: pip install 'llm-labctl[report]' (or pipx inject llm-labctl matplotlib)."
        ) from None
    return plt


def series_label(index: int, entry: Entry) -> str:
    target = entry.result.target
    name = entry.label if entry.record.engine != "external" else f"external {target.base_url}"
    return f"{letter(index)} {name} [{target.environment_label or '?'}]"


def levels_of(entry: Entry) -> list[Level]:
    return sorted(entry.result.levels, key=level_key)


def by_rate(entries: list[Entry]) -> bool:
    """Rate sweeps are drawn against the rate; everything else against concurrency."""
    return all(level.target_rate for e in entries for level in e.result.levels)


def _x(level: Level, rate: bool) -> float:
    return float(level.target_rate or 0.0) if rate else float(level.concurrency)


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
    for filename, title, unit, metrics in PLOTS:
        lines = []
        for index, entry in enumerate(entries):
            for metric in metrics:
                suffix = "" if len(metrics) == 1 else (" p99" if metric.key.startswith("p99") else " p50")
                style = "--" if metric.key.startswith("p99") else "-"
                color = colors[index % len(colors)]
                lines.append(_line(entry, metric, frame, Line(frame.labels[index] + suffix, color, style)))
        written.append(_line_plot(plt, folder, filename, title, unit, entries, lines, frame))
    return written


def draw_one_result(folder: Path, entry: Entry, label: str, about: str, notes: list[str]) -> list[str]:
    """One result: one colour per metric, which result it is under every plot, and every caveat it carries."""
    plt = pyplot()
    frame = Frame([label], [], [f"✗ {n}" for n in notes], by_rate([entry]), about)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []
    for filename, title, unit, metrics in ONE_RESULT_PLOTS:
        lines = [_line(entry, metric, frame, Line(metric.named, color, dash)) for metric, color, dash in metrics]
        written.append(_line_plot(plt, folder, filename, title, unit, [entry], lines, frame))
    return [*written, _pareto(plt, folder, [entry], frame, colors), _telemetry(plt, folder, [entry], frame, colors)]


def _line(entry: Entry, metric: Metric, frame: Frame, line: Line) -> Line:
    failed = set(frame.failed)
    for level in levels_of(entry):
        line.points.append(
            (
                _x(level, frame.by_rate),
                level.value(metric),
                level.interval(metric),
                level_caveats(entry, level, failed),
            )
        )
    return line


def _line_plot(
    plt: Any, folder: Path, filename: str, title: str, unit: str, entries: list[Entry], lines: list[Line], frame: Frame
) -> str:
    figure, axis = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    drawn = [line for line in lines if any(y is not None for _, y, _, _ in line.points)]
    for index, line in enumerate(drawn):
        nudge = 2 ** (DODGE * (index - (len(drawn) - 1) / 2))  # lines side by side: no interval hides another
        x = [p[0] * nudge for p in line.points]
        y = [math.nan if p[1] is None else p[1] for p in line.points]
        axis.plot(x, y, line.style, marker="o", color=line.color, label=line.label)
        for xi, (_, yi, ci, caveats) in zip(x, line.points, strict=True):
            if ci and yi is not None:
                axis.errorbar([xi], [yi], yerr=[[yi - ci[0]], [ci[1] - yi]], color=line.color, capsize=3)
            _mark(axis, xi, yi, caveats)
    _log_x(axis, sorted({_x(lv, frame.by_rate) for e in entries for lv in e.result.levels}))
    axis.set_xlabel(_x_label(frame.by_rate))
    axis.set_ylabel(unit)
    axis.set_title(f"{title} vs {'request rate' if frame.by_rate else 'concurrency'}" + (" ✗" if frame.failed else ""))
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    _lay_out(figure, frame)
    figure.savefig(folder / filename)
    plt.close(figure)
    return filename


def _log_x(axis: Any, ticks: list[float]) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(ticks, [f"{t:g}" for t in ticks])
    axis.minorticks_off()
    if len(ticks) == 1:  # one level: a little room either side, not the width of the nudges
        axis.set_xlim(ticks[0] / 1.5, ticks[0] * 1.5)


def _lay_out(figure: Any, frame: Frame) -> None:
    """Lay the plot out, then grow the figure downwards for what is written under it — the caveats in red
    and, for one result, which result it is in grey — so the plot keeps its size however many there are."""
    notes = [textwrap.shorten(n, 110) for n in frame.notes[:6]]
    if len(frame.notes) > 6:
        notes.append(f"… and {len(frame.notes) - 6} more caveats (see the report's table)")
    count = len(notes) + (1 if frame.about else 0)
    if not count:
        figure.tight_layout()
        return
    line = 7 * 1.35 / 72  # one 7-point line, in inches
    under = count * line + 0.2
    height = figure.get_figheight() + under
    figure.set_figheight(height)
    figure.tight_layout(rect=(0, under / height, 1, 1))
    bottom = 0.06 / height
    if frame.about:
        fits = int(figure.get_figwidth() * 72 / (7 * 0.62))
        figure.text(0.01, bottom, textwrap.shorten(frame.about, fits), fontsize=7, color="#555555", va="bottom")
        bottom += line / height
    if notes:
        figure.text(0.01, bottom, "\n".join(notes), fontsize=7, color="#b00000", va="bottom", ha="left")


def _mark(axis: Any, x: float | None, y: float | None, caveats: list[str]) -> None:
    """A ✗ on a point whose own level has a caveat; a rule broken by the whole result is in the title."""
    if any(not c.startswith("mismatch") for c in caveats) and x is not None and y is not None:
        axis.annotate("✗", (x, y), color="#b00000", fontsize=13, ha="center", va="center", fontweight="bold")


def telemetry_value(telemetry: dict[str, Any] | None, where: tuple[str, str, str]) -> float | None:
    """One level's telemetry figure: an engine gauge, or a GPU field averaged over the run's GPUs."""
    part, key, stat = where
    section = (telemetry or {}).get(part) or {}
    if part == "engine":
        value = (section.get(key) or section.get(LEGACY_NAMES.get(key, key)) or {}).get(stat)
        return None if value is None else float(value)
    raw = [(gpu.get(key) or {}).get(stat) for gpu in (section.get("gpus") or {}).values()]
    values = [float(v) for v in raw if v is not None]
    return sum(values) / len(values) if values else None


def missing_reason(entry: Entry, where: tuple[str, str, str]) -> str | None:
    """Why a result has no samples for this panel, as the bench recorded it."""
    missing = (entry.result.telemetry or {}).get("missing") or {}
    part, key, _ = where
    legacy = LEGACY_NAMES.get(key, key)
    reason = missing.get(part) or (
        (missing.get(f"engine.{key}") or missing.get(f"engine.{legacy}")) if part == "engine" else None
    )
    return None if reason is None else str(reason)


def _telemetry(plt: Any, folder: Path, entries: list[Entry], frame: Frame, colors: list[str]) -> str:
    """What the GPUs and the engine did during each level, beside the latency it produced."""
    figure, axes = plt.subplots(2, 2, figsize=(9.5, 6.6), dpi=110)
    simulated = any(((e.result.telemetry or {}).get("gpu") or {}).get("simulated") for e in entries)
    failed = set(frame.failed)
    for axis, (title, unit, where) in zip(axes.flat, TELEMETRY_PANELS, strict=True):
        drawn = False
        for index, entry in enumerate(entries):
            scale = 100.0 if where[1] in PERCENT_OF_FRACTION else 1.0
            points = [(_x(lv, frame.by_rate), telemetry_value(lv.telemetry, where), lv) for lv in levels_of(entry)]
            points = [(x, y * scale, lv) for x, y, lv in points if y is not None]
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
            note = "no samples" + (":\n" + textwrap.fill(textwrap.shorten(reasons[0], 150), 50) if reasons else "")
            axis.text(0.5, 0.5, note, ha="center", va="center", fontsize=8, color="#666666", transform=axis.transAxes)
            axis.set_xticks([])
            axis.set_yticks([])
        axis.set_title(title + (" (simulated GPU)" if simulated and where[0] == "gpu" else ""), fontsize=9)
        axis.set_xlabel(_x_label(frame.by_rate), fontsize=8)
        axis.set_ylabel(unit, fontsize=8)
        axis.grid(True, alpha=0.3)
    figure.suptitle("Telemetry per level" + (" ✗" if frame.failed else ""))
    _lay_out(figure, frame)
    figure.savefig(folder / TELEMETRY)
    plt.close(figure)
    return TELEMETRY


def _label_points(figure: Any, axis: Any, labels: list[tuple[float, float, str, str]]) -> None:
    """Each point's level beside it: above right, else where it covers no label placed before it."""
    (x0, x1), (y0, y1) = axis.get_xlim(), axis.get_ylim()
    box = axis.get_window_extent()
    width, height = box.width * 72 / figure.dpi, box.height * 72 / figure.dpi  # the axes, in points
    placed: list[tuple[float, float, float, float]] = []
    for x, y, text, color in labels:
        px, py = (x - x0) / ((x1 - x0) or 1) * width, (y - y0) / ((y1 - y0) or 1) * height
        wide = len(text) * 7 * 0.6
        tries = []
        for dx, dy, align in ((5, 5, "left"), (5, -13, "left"), (-5, 5, "right"), (-5, -13, "right")):
            left = px + dx - (wide if align == "right" else 0)
            tries.append((dx, dy, align, (left, py + dy, left + wide, py + dy + 9)))
        free = [t for t in tries if not any(_overlap(t[3], other) for other in placed)]
        dx, dy, align, spot = (free or tries)[0]
        placed.append(spot)
        axis.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), ha=align, fontsize=7, color=color)


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _pareto(plt: Any, folder: Path, entries: list[Entry], frame: Frame, colors: list[str]) -> str:
    """Output tokens/s per user against output tokens/s per GPU (total where a side's GPUs are not known, said on the
    axis): up and to the right is better."""
    figure, axis = plt.subplots(figsize=(7.5, 5.2), dpi=110)
    failed = set(frame.failed)
    labels: list[tuple[float, float, str, str]] = []
    every = [lv for entry in entries for lv in levels_of(entry)]
    per_gpu = bool(every) and all(lv.value(M["output_throughput_per_gpu"]) is not None for lv in every)
    across = M["output_throughput_per_gpu"] if per_gpu else M["output_throughput"]
    for index, entry in enumerate(entries):
        points = [
            (x, y, lv)
            for lv in levels_of(entry)
            if (x := lv.value(across)) is not None and (y := lv.value(M["tokens_per_user"])) is not None
        ]
        if not points:
            continue
        color = colors[index % len(colors)]
        axis.plot([p[0] for p in points], [p[1] for p in points], "-o", color=color, label=frame.labels[index])
        for x, y, lv in points:
            labels.append((x, y, level_name(level_key(lv)), color))
            _mark(axis, x, y, level_caveats(entry, lv, failed))
        if entry.censored:  # a study's cell whose engine died: no number, a bound
            x, y, _ = points[-1]
            axis.plot([x], [y], marker=">", markersize=11, color=color, linestyle="none")
            labels.append((x, y, f"c≥{min(entry.censored)} censored", color))
    axis.margins(0.08)  # room for the labels of the outermost points
    _label_points(figure, axis, labels)
    axis.set_xlabel(
        "output tokens/s per GPU (total / the GPUs each engine held)"
        if per_gpu
        else "total output tokens/s (not per GPU: a side's GPU count is not known)"
    )
    axis.set_ylabel("output tokens/s per user (1000 / TPOT p50)")
    axis.set_title("Throughput vs interactivity (points: their level)" + (" ✗" if frame.failed else ""))
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    _lay_out(figure, frame)
    figure.savefig(folder / PARETO)
    plt.close(figure)
    return PARETO
