"""labctl report: a folder with a Markdown report, PNG plots (matplotlib) and a static index.html.

Every plot carries the caveats of the points it draws (✗ on the point, the reason under the plot), so
a PNG sent on its own still says what is wrong with it."""

from __future__ import annotations

import html
import math
import textwrap
from pathlib import Path
from typing import Any

from labctl import __version__
from labctl.compare.formats import (
    SETUP_COLUMNS,
    cell,
    checklist_lines,
    command_lines,
    markdown_tables,
    setup_rows,
    workload_lines,
)
from labctl.compare.pivot import (
    all_caveats,
    interval_of,
    legend,
    letter,
    level_caveats,
    level_key,
    level_name,
    pivot,
    pivot_cells,
    pivot_head,
    value_of,
)
from labctl.compare.rules import Check, Entry
from labctl.errors import LabctlError
from labctl.host.files import write_atomically
from labctl.host.identity import host_name
from labctl.run.records.record import now

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


def _series_label(index: int, entry: Entry) -> str:
    name = entry.label if entry.record.engine != "external" else f"external {entry.result['target']['base_url']}"
    return f"{letter(index)} {name} [{entry.result['target'].get('environment_label', '?')}]"


def _levels(entry: Entry) -> list[dict[str, Any]]:
    return sorted(entry.result["levels"], key=level_key)


def _by_rate(entries: list[Entry]) -> bool:
    """Rate sweeps are drawn against the rate; everything else against concurrency."""
    return all(level.get("target_rate") for e in entries for level in e.result["levels"])


def _footer(figure: Any, caveats: list[str], failed_rules: list[str]) -> None:
    notes = [f"✗ rule not met: {rule}" for rule in failed_rules] + [f"✗ {c}" for c in caveats]
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


def draw_plots(folder: Path, entries: list[Entry], checks: list[Check]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LabctlError("labctl report needs matplotlib: pip install 'labctl[report]'.") from None
    failed = sorted(c.rule for c in checks if not c.ok and c.blocking)  # a cold/warm start moves no point
    caveats = [c for c in all_caveats(entries, checks) if not c.startswith("rule not met")]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    by_rate = _by_rate(entries)
    written = [
        _pareto(plt, folder, entries, failed, caveats, colors),
        _telemetry(plt, folder, entries, failed, caveats, colors, by_rate),
    ]
    for filename, title, unit, keys in PLOTS:
        figure, axis = plt.subplots(figsize=(7.5, 4.8), dpi=110)
        ticks: set[float] = set()
        for index, entry in enumerate(entries):
            levels = _levels(entry)
            x = [float(lv["target_rate"]) if by_rate else float(lv["concurrency"]) for lv in levels]
            ticks.update(x)
            for key in keys:  # one colour per engine; p99 dashed
                y = [value_of(lv, key) for lv in levels]
                if all(v is None for v in y):
                    continue
                style = "--" if key.startswith("p99") else "-"
                suffix = "" if len(keys) == 1 else (" p99" if key.startswith("p99") else " p50")
                color = colors[index % len(colors)]
                drawn = [math.nan if v is None else v for v in y]
                axis.plot(x, drawn, style, marker="o", color=color, label=_series_label(index, entry) + suffix)
                intervals = [interval_of(lv, key) for lv in levels]
                for xi, yi, ci in zip(x, y, intervals, strict=True):
                    if ci and yi is not None:
                        axis.errorbar([xi], [yi], yerr=[[yi - ci[0]], [ci[1] - yi]], color=color, capsize=3)
                for xi, yi, lv in zip(x, y, levels, strict=True):
                    _mark(axis, xi, yi, level_caveats(entry, lv, set(failed)))
        axis.set_xscale("log", base=2)
        axis.set_xticks(sorted(ticks), [f"{t:g}" for t in sorted(ticks)])
        axis.minorticks_off()
        axis.set_xlabel("request rate (req/s)" if by_rate else "concurrency")
        axis.set_ylabel(unit)
        axis.set_title(f"{title} vs {'request rate' if by_rate else 'concurrency'}" + (" ✗" if failed else ""))
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
        figure.tight_layout()
        _footer(figure, caveats, failed)
        figure.savefig(folder / filename)
        plt.close(figure)
        written.append(filename)
    return written


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


def _x(level: dict[str, Any], by_rate: bool) -> float:
    return float(level["target_rate"]) if by_rate else float(level["concurrency"])


def _missing_reason(entry: Entry, where: tuple[str, str, str]) -> str | None:
    """Why a result has no samples for this panel, as the bench recorded it."""
    missing = (entry.result.get("telemetry") or {}).get("missing") or {}
    part, key, _ = where
    reason = missing.get(part) or (missing.get(f"engine.{key}") if part == "engine" else None)
    return None if reason is None else str(reason)


def _telemetry(
    plt: Any,
    folder: Path,
    entries: list[Entry],
    failed: list[str],
    caveats: list[str],
    colors: list[str],
    by_rate: bool,
) -> str:
    """What the GPUs and the engine did during each level, beside the latency it produced."""
    figure, axes = plt.subplots(2, 2, figsize=(9.5, 6.6), dpi=110)
    simulated = any(((e.result.get("telemetry") or {}).get("gpu") or {}).get("simulated") for e in entries)
    for axis, (title, unit, where) in zip(axes.flat, TELEMETRY_PANELS, strict=True):
        drawn = False
        for index, entry in enumerate(entries):
            levels = _levels(entry)
            points = [(_x(lv, by_rate), telemetry_value(lv, where), lv) for lv in levels]
            points = [(x, y, lv) for x, y, lv in points if y is not None]
            if not points:
                continue
            drawn = True
            color = colors[index % len(colors)]
            axis.plot(
                [p[0] for p in points], [p[1] for p in points], "-o", color=color, label=_series_label(index, entry)
            )
            for x, y, lv in points:
                _mark(axis, x, y, level_caveats(entry, lv, set(failed)))
        if drawn:
            ticks = sorted({_x(lv, by_rate) for e in entries for lv in _levels(e)})
            axis.set_xscale("log", base=2)
            axis.set_xticks(ticks, [f"{t:g}" for t in ticks])
            axis.minorticks_off()
            axis.legend(fontsize=6)
        else:
            reasons = sorted({reason for e in entries if (reason := _missing_reason(e, where))})
            note = "no samples" + (f":\n{textwrap.shorten(reasons[0], 60)}" if reasons else "")
            axis.text(0.5, 0.5, note, ha="center", va="center", fontsize=8, color="#666666", transform=axis.transAxes)
        axis.set_title(title + (" (simulated GPU)" if simulated and where[0] == "gpu" else ""), fontsize=9)
        axis.set_xlabel("request rate (req/s)" if by_rate else "concurrency", fontsize=8)
        axis.set_ylabel(unit, fontsize=8)
        axis.grid(True, alpha=0.3)
    figure.suptitle("Telemetry per level" + (" ✗" if failed else ""))
    figure.tight_layout()
    _footer(figure, caveats, failed)
    figure.savefig(folder / TELEMETRY)
    plt.close(figure)
    return TELEMETRY


def _pareto(
    plt: Any, folder: Path, entries: list[Entry], failed: list[str], caveats: list[str], colors: list[str]
) -> str:
    """Output tokens/s per user against total output tokens/s: up and to the right is better."""
    figure, axis = plt.subplots(figsize=(7.5, 5.2), dpi=110)
    for index, entry in enumerate(entries):
        points = [
            (value_of(lv, "output_throughput"), value_of(lv, "tokens_per_user"), lv)
            for lv in sorted(entry.result["levels"], key=level_key)
        ]
        points = [(x, y, lv) for x, y, lv in points if x is not None and y is not None]
        if not points:
            continue
        color = colors[index % len(colors)]
        axis.plot([p[0] for p in points], [p[1] for p in points], "-o", color=color, label=_series_label(index, entry))
        for x, y, lv in points:
            axis.annotate(
                level_name(level_key(lv)), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7, color=color
            )
            _mark(axis, x, y, level_caveats(entry, lv, set(failed)))
    axis.set_xlabel("total output tokens/s")
    axis.set_ylabel("output tokens/s per user (1000 / TPOT p50)")
    axis.set_title("Throughput vs interactivity (points: their level)" + (" ✗" if failed else ""))
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    _footer(figure, caveats, failed)
    figure.savefig(folder / PARETO)
    plt.close(figure)
    return PARETO


def header_lines(entries: list[Entry]) -> list[str]:
    return [
        f"Written {now()[:16].replace('T', ' ')} UTC on {host_name()} by labctl {__version__}.",
        *legend(entries),
    ]


def markdown(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], plots: list[str]) -> str:
    lines = ["# labctl comparison report", "", *[f"- {line}" for line in header_lines(entries)], ""]
    lines += [markdown_tables(checks, rows, entries), "## Plots", ""]
    lines += [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def page(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], plots: list[str]) -> str:
    esc = html.escape
    checklist = "".join(
        f"<li class={'ok' if c.ok else 'bad'}>{esc(line)}</li>"
        for c, line in zip(checks, checklist_lines(checks), strict=False)
    )
    setups = setup_rows(rows, entries, checks)
    setup_head = "".join(f"<th>{esc(t)}</th>" for t in ["key", *[title for _, title in SETUP_COLUMNS]])
    setup = "".join(
        "<tr>"
        + f"<td>{esc(s['key'])}</td>"
        + "".join(f"<td>{esc(cell(s, k))}</td>" for k, _ in SETUP_COLUMNS)
        + "</tr>"
        for s in setups
    )
    pivot_head_html = "".join(f"<th>{esc(t)}</th>" for t in pivot_head(entries))
    pivot_rows = pivot(entries, checks)
    body = ""
    for index, p in enumerate(pivot_rows):
        first = index == 0 or pivot_rows[index - 1].level != p.level
        css = " class=caveat" if p.metric == "caveats" else (" class=first" if first else "")
        body += f"<tr{css}>" + "".join(f"<td>{esc(c)}</td>" for c in pivot_cells(p)) + "</tr>"
    caveats = "".join(f"<li class=bad>✗ {esc(c)}</li>" for c in all_caveats(entries, checks)) or "<li>none</li>"
    commands = "".join(f"<li><code>{esc(line)}</code></li>" for line in command_lines(rows, entries))
    header = "".join(f"<li>{esc(line)}</li>" for line in header_lines(entries))
    spec = "".join(f"<li>{esc(line)}</li>" for line in workload_lines(entries))
    images = "".join(f'<figure><img src="{esc(name)}" alt="{esc(name)}"></figure>' for name in plots)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>labctl comparison report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; }}
th {{ background: #f0f0f0; }} tr.first td {{ border-top: 2px solid #888; }} tr.caveat td {{ color: #b00; }}
li.ok::marker {{ color: green; }} li.bad {{ color: #b00; }}
code, ul.spec {{ font-size: 12px; word-break: break-all; }}
figure {{ display: inline-block; margin: 0 1em 1em 0; }} img {{ max-width: 640px; border: 1px solid #ddd; }}
</style></head><body>
<h1>labctl comparison report</h1>
<ul>{header}</ul>
<h2>Same rules?</h2><ul>{checklist}</ul>
<h2>Setups</h2><table><tr>{setup_head}</tr>{setup}</table>
<p>Commands, as Docker reports them:</p><ul class=spec>{commands}</ul>
<h2>Workload and SLO</h2><ul class=spec>{spec}</ul>
<h2>Side by side per level</h2><table><tr>{pivot_head_html}</tr>{body}</table>
<h2>Caveats</h2><ul>{caveats}</ul>
<h2>Plots</h2>{images}
</body></html>
"""


def write_report(folder: Path, checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plots = draw_plots(folder, entries, checks)
    write_atomically(folder / "report.md", markdown(checks, rows, entries, plots))
    write_atomically(folder / "index.html", page(checks, rows, entries, plots))
    return folder
