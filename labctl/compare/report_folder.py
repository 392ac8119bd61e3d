"""labctl report of two or more results: a folder with a Markdown report, PNG plots
(labctl.compare.plots) and an index.html with an explorer (labctl.compare.explore) that works offline."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from labctl import __version__
from labctl.compare.explore import STYLE as EXPLORE_STYLE
from labctl.compare.explore import explorer
from labctl.compare.formats import (
    SETUP_COLUMNS,
    cell,
    checklist_lines,
    command_lines,
    markdown_tables,
    md,
    setup_rows,
    workload_lines,
)
from labctl.compare.pivot import INTERVALS_SAID, OVERLAP_SAID, all_caveats, legend, pivot, pivot_cells, pivot_head
from labctl.compare.plots import draw_plots
from labctl.compare.quality import quality_lines
from labctl.compare.rules import Check, Entry
from labctl.host.files.atomic import write_atomically
from labctl.host.files.outputs import write_report_folder
from labctl.host.identity import host_name
from labctl.run.records.record import now


def header_lines(entries: list[Entry]) -> list[str]:
    return [
        f"Written {now()[:16].replace('T', ' ')} UTC on {host_name()} by labctl {__version__}.",
        *legend(entries),
    ]


def markdown(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], plots: list[str]) -> str:
    lines = ["# labctl comparison report", "", *[f"- {md(line)}" for line in header_lines(entries)], ""]
    lines += [markdown_tables(checks, rows, entries), "## Plots", ""]
    lines += [f"![{md(name)}]({md(name)})" for name in plots]
    return "\n".join(lines) + "\n"


def page(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], plots: list[str]) -> str:
    esc = html.escape
    checklist = "".join(
        f"<li class={'ok' if c.ok else 'unchecked' if not c.checked else 'bad'}>{esc(line)}</li>"
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
    quality = (
        "".join(f"<li>{esc(line.strip())}</li>" for line in quality_lines(entries)) or "<li>no paired quality</li>"
    )
    images = "".join(f'<figure><img src="{esc(name)}" alt="{esc(name)}"></figure>' for name in plots)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>labctl comparison report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; }}
th {{ background: #f0f0f0; }} tr.first td {{ border-top: 2px solid #888; }} tr.caveat td {{ color: #b00; }}
li.ok::marker {{ color: green; }} li.bad {{ color: #b00; }} li.unchecked {{ color: #777; }}
code, ul.spec {{ font-size: 12px; word-break: break-all; }}
figure {{ display: inline-block; margin: 0 1em 1em 0; }} img {{ max-width: 640px; border: 1px solid #ddd; }}
{EXPLORE_STYLE}
</style></head><body>
<h1>labctl comparison report</h1>
<ul>{header}</ul>
<h2>Same rules?</h2><ul>{checklist}</ul>
<h2>Setups</h2><table><tr>{setup_head}</tr>{setup}</table>
<p>Commands, as Docker reports them:</p><ul class=spec>{commands}</ul>
<h2>Workload and SLO</h2><ul class=spec>{spec}</ul>
<h2>Side by side per level</h2><table><tr>{pivot_head_html}</tr>{body}</table><p>{esc(INTERVALS_SAID)} {esc(OVERLAP_SAID)}</p>
<h2>Explore</h2>{explorer(entries, checks)}
<h2>Quality, case by case</h2><ul>{quality}</ul>
<h2>Caveats</h2><ul>{caveats}</ul>
<h2>Plots</h2>{images}
</body></html>
"""


def write_report(
    folder: Path, checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], overwrite: bool = False
) -> Path:
    """Built beside `folder` and renamed into place (labctl.host.files.outputs): all of it, or the old one untouched."""

    def build(work: Path) -> None:
        plots = draw_plots(work, entries, checks)
        write_atomically(work / "report.md", markdown(checks, rows, entries, plots))
        write_atomically(work / "index.html", page(checks, rows, entries, plots))

    ids = [entry.result.bench_id for entry in entries]
    marker = {"kind": "comparison report", "labctl_version": __version__, "bench_ids": ids, "written_at": now()}
    return write_report_folder(folder, marker, overwrite, build)
