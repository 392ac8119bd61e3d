"""labctl report: a folder with a Markdown report, PNG plots (matplotlib) and a static index.html."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from labctl.compare.formats import COLUMNS, cell, checklist_lines, render
from labctl.compare.rules import Check, Entry
from labctl.errors import LabctlError
from labctl.host.files import write_atomically

PLOTS = [
    ("throughput.png", "Output throughput vs concurrency", "output tokens/s", ["output_throughput"]),
    ("ttft.png", "TTFT vs concurrency", "ms", ["median_ttft_ms", "p99_ttft_ms"]),
    ("tpot.png", "TPOT vs concurrency", "ms", ["median_tpot_ms"]),
]


def _series_label(entry: Entry) -> str:
    name = entry.label if entry.record.engine != "external" else f"external {entry.result['target']['base_url']}"
    return f"{name} [{entry.result['target'].get('environment_label', '?')}]"


def draw_plots(folder: Path, entries: list[Entry]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LabctlError("labctl report needs matplotlib: pip install 'labctl[report]'.") from None
    written = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for filename, title, unit, keys in PLOTS:
        figure, axis = plt.subplots(figsize=(7, 4.2), dpi=110)
        ticks: set[int] = set()
        for index, entry in enumerate(entries):
            levels = sorted(entry.result["levels"], key=lambda level: level["concurrency"])
            x = [level["concurrency"] for level in levels]
            ticks.update(x)
            for key in keys:  # one colour per engine; p99 dashed
                y = [level.get(key) for level in levels]
                style = "--" if key.startswith("p99") else "-"
                suffix = "" if len(keys) == 1 else (" p99" if key.startswith("p99") else " p50")
                axis.plot(
                    x, y, style, marker="o", color=colors[index % len(colors)], label=_series_label(entry) + suffix
                )
        axis.set_xscale("log", base=2)
        axis.set_xticks(sorted(ticks), [str(t) for t in sorted(ticks)])
        axis.minorticks_off()
        axis.set_xlabel("concurrency")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(folder / filename)
        plt.close(figure)
        written.append(filename)
    return written


def setup_rows(entries: list[Entry]) -> list[list[str]]:
    out = []
    for e in entries:
        image = e.record.image
        command = " ".join(e.record.container.command_line if e.record.container else ()) or "-"
        timings = e.record.timings
        cold = "-" if timings.cold_start_s is None else timings.cold_start_s
        out.append(
            [
                e.result["bench_id"],
                e.label,
                f"{image.reference or '-'}",
                str(image.digest or "-"),
                command,
                str(e.result["target"].get("environment_label")),
                f"pull {timings.image_pull_s or 0}s, cold start {cold}s",
                e.memory,
                e.thinking,
            ]
        )
    return out


SETUP_HEAD = [
    "bench",
    "engine/profile",
    "image",
    "digest",
    "command",
    "environment",
    "prep",
    "memory option",
    "thinking",
]


def markdown(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], plots: list[str]) -> str:
    lines = [
        "# labctl comparison report",
        "",
        "## Setups",
        "",
        "| " + " | ".join(SETUP_HEAD) + " |",
        "|" + "---|" * len(SETUP_HEAD),
    ]
    for row in setup_rows(entries):
        lines.append("| " + " | ".join(c.replace("|", "\\|") if i != 4 else f"`{c}`" for i, c in enumerate(row)) + " |")
    lines += ["", "## Results", "", render(checks, rows, "markdown"), "## Plots", ""]
    lines += [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def page(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], plots: list[str]) -> str:
    esc = html.escape
    checklist = "".join(
        f"<li class={'ok' if c.ok else 'bad'}>{esc(line)}</li>"
        for c, line in zip(checks, checklist_lines(checks), strict=False)
    )
    setup = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in setup_rows(entries))
    head = "".join(f"<th>{esc(t)}</th>" for t in SETUP_HEAD)
    results_head = "".join(f"<th>{esc(title)}</th>" for _, title in COLUMNS)
    results = "".join("<tr>" + "".join(f"<td>{esc(cell(r, key))}</td>" for key, _ in COLUMNS) + "</tr>" for r in rows)
    images = "".join(f'<figure><img src="{esc(name)}" alt="{esc(name)}"></figure>' for name in plots)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>labctl comparison report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; }}
th {{ background: #f0f0f0; }}
li.ok::marker {{ color: green; }} li.bad {{ color: #b00; }}
figure {{ display: inline-block; margin: 0 1em 1em 0; }} img {{ max-width: 640px; border: 1px solid #ddd; }}
</style></head><body>
<h1>labctl comparison report</h1>
<h2>Same rules?</h2><ul>{checklist}</ul>
<h2>Setups</h2><table><tr>{head}</tr>{setup}</table>
<h2>Results</h2><table><tr>{results_head}</tr>{results}</table>
<h2>Plots</h2>{images}
</body></html>
"""


def write_report(folder: Path, checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plots = draw_plots(folder, entries)
    write_atomically(folder / "report.md", markdown(checks, rows, entries, plots))
    write_atomically(folder / "index.html", page(checks, rows, entries, plots))
    return folder
