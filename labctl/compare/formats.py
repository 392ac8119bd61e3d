"""Comparison output: the rules checklist, each setup once, then engines side by side per level
(labctl.compare.pivot) as a terminal table (within 120 columns), Markdown, CSV or JSON. Cells whose
rule failed are marked with ✗; every caveat is listed."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import textwrap
from typing import Any

from labctl.bench.metric_table import View, metric_columns, shown_in
from labctl.compare.pivot import (
    INTERVALS_SAID,
    OVERLAP_SAID,
    all_caveats,
    legend,
    letter,
    pivot,
    pivot_cells,
    pivot_head,
)
from labctl.compare.quality import paired_quality, quality_lines
from labctl.compare.rules import RULE_COLUMNS, Check, Entry

FORMATS = ("table", "markdown", "csv", "json")
TERMINAL_WIDTH = 120
# Facts about a setup: shown once per result, never repeated per level.
SETUP_COLUMNS = [
    ("engine", "engine"),
    ("profile", "profile"),
    ("image_digest", "digest"),
    ("engine_version", "version"),
    ("image", "image"),
    ("pull_s", "pull s"),
    ("fetch_s", "fetch s"),
    ("build_s", "build s"),
    ("load_s", "load s"),
    ("warmup_s", "warm-up s"),
    ("cold_start_s", "cold start s"),
    ("cache", "served from cache"),
    ("model", "model@rev"),
    ("thinking", "thinking"),
    ("memory", "memory option"),
    ("kv_cache_dtype", "KV cache"),
    ("prefix_caching", "prefix caching"),
    ("settings", "settings"),
    ("workload", "workload"),
    ("environment_label", "env"),
    ("accelerator", "accelerator"),
    ("gpu", "GPU"),
    ("quality", "quality"),
    ("suite_version", "suite version"),
    ("bench_date", "measured"),
    ("host", "client host"),
    ("labctl_version", "labctl"),
]
LEVEL_COLUMNS = [
    ("concurrency", "conc"),
    ("rate", "rate"),
    ("completed", "n"),
    ("requests", "N"),
    ("failed", "failed"),
    ("interrupted", "interrupted"),
    *[(metric.key, metric.label) for metric in shown_in(View.COMPARE_ROW)],
]
COLUMNS = SETUP_COLUMNS[:14] + LEVEL_COLUMNS + SETUP_COLUMNS[14:] + [("command", "command")]


def cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        text = "-"
    elif isinstance(value, float):
        text = f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    else:
        text = str(value)
    marked = {RULE_COLUMNS[rule] for rule in row["mismatch"]}
    return text + " ✗" if key in marked else text


def checklist_lines(checks: list[Check]) -> list[str]:
    lines = []
    for check in checks:
        distinct = sorted(set(check.values.values()))
        detail = distinct[0] if len(distinct) == 1 else "; ".join(f"{k}: {v}" for k, v in check.values.items())
        unchecked = "" if check.checked else " (not checked: no result records it)"
        lines.append(f"{check.mark} {check.rule}: {detail}{unchecked}")
    return lines


def setup_rows(rows: list[dict[str, Any]], entries: list[Entry], checks: list[Check]) -> list[dict[str, Any]]:
    """One row per result: its first level's row carries the setup facts (and the rule marks)."""
    failed = sorted(c.rule for c in checks if not c.ok and c.checked)
    out = []
    for index, entry in enumerate(entries):
        mine = [r for r in rows if r["id"] == entry.result.bench_id]
        base = dict(mine[0]) if mine else {"mismatch": []}
        base["mismatch"] = sorted(set(failed) - {"concurrency within built max batch size"})
        base["key"] = letter(index)
        out.append(base)
    return out


def workload_lines(entries: list[Entry]) -> list[str]:
    """The workload spec and its SLO, once when every result shares it."""
    specs = {json.dumps(e.result.workload.spec, sort_keys=True) for e in entries}
    lines = []
    for index, e in enumerate(entries if len(specs) > 1 else entries[:1]):
        w = e.result.workload
        who = "" if len(specs) == 1 else f"{letter(index)}: "
        spec = _set_only(w.spec or {})
        slo = spec.get("slo")
        lines.append(f"{who}workload {w.name} ({w.sha256[:12]}): {json.dumps(spec, sort_keys=True)}")
        lines.append(
            f"{who}SLO behind goodput: " + (", ".join(f"{k} ≤ {v:g}" for k, v in slo.items()) if slo else "none")
        )
        if w.length_unit:
            lines.append(f"{who}lengths in {w.length_unit}: {w.tokenizer or '-'}")
        if w.overrides:
            lines.append(f"{who}overrides: " + " ".join(f"{o.flag} {_flag(o.value)}" for o in w.overrides))
        found = e.result.max_rate_meeting_slo
        if found:
            whose = f"{letter(index)}: " if len(entries) > 1 else ""  # one result has no letter
            lines.append(f"{whose}max_rate_meeting_slo: {found.note}")
    return lines


def _set_only(value: Any) -> Any:
    """The spec as written: fields left unset (null) are not shown."""
    if isinstance(value, dict):
        return {k: _set_only(v) for k, v in value.items() if v is not None}
    return value


def command_lines(rows: list[dict[str, Any]], entries: list[Entry]) -> list[str]:
    """Each engine's command line as Docker reports it, once per result."""
    out = []
    for index, entry in enumerate(entries):
        mine = next((r for r in rows if r["id"] == entry.result.bench_id), None)
        out.append(f"{letter(index)}: {mine['command'] if mine else '-'}")
    return out


def _flag(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_flag(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={_flag(v)}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def render(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "checklist": [
                    {"rule": c.rule, "ok": c.ok, "checked": c.checked, "values": c.values, "blocking": c.blocking}
                    for c in checks
                ],
                "same_rules": all(c.ok for c in checks if c.blocking),
                "not_checked": [c.rule for c in checks if not c.checked],
                "results": legend(entries),
                "rows": rows,
                "pivot": [
                    {"level": p.level, "metric": p.metric, "cells": p.cells, "deltas": p.deltas}
                    for p in pivot(entries, checks)
                ],
                "caveats": all_caveats(entries, checks),
                "quality_paired": paired_quality(entries),
            },
            indent=1,
        )
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        shown = {key for key, _ in COLUMNS}
        more = [key for key in metric_columns() if key not in shown]  # every other metric, every interval bound
        writer.writerow([title for _, title in COLUMNS] + more + ["mismatch"])
        for row in rows:
            cells = row.get("cells") or {}
            values = [row.get(key) for key, _ in COLUMNS] + [cells.get(key) for key in more]
            writer.writerow(values + ["; ".join(row["mismatch"])])
        return buffer.getvalue()
    if fmt == "markdown":
        return markdown_tables(checks, rows, entries)
    return terminal(checks, rows, entries)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def md(text: str) -> str:
    """Text from files made inert in Markdown: on one line, HTML and `|` escaped (a value cannot open a tag,
    a script or a table cell), any other control character shown as `\\xNN`."""
    one_line = " ".join(str(text).split())
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "?", one_line)
    return html.escape(shown, quote=False).replace("|", "\\|")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(md(c) for c in cells) + " |"


def markdown_tables(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry]) -> str:
    setup_head = ["key", *[title for _, title in SETUP_COLUMNS]]
    lines = ["**Same rules?**", "", *[f"- {md(line)}" for line in checklist_lines(checks)], "", "**Setups**", ""]
    lines += [_md_row(setup_head), "|" + "---|" * len(setup_head)]
    lines += [_md_row([s["key"], *[cell(s, k) for k, _ in SETUP_COLUMNS]]) for s in setup_rows(rows, entries, checks)]
    lines += ["", "Commands:", "", *[f"- <code>{md(line)}</code>" for line in command_lines(rows, entries)]]
    lines += ["", *[f"- {md(line)}" for line in workload_lines(entries)], "", "**Side by side per level**", ""]
    head = pivot_head(entries)
    lines += [_md_row(head), "|" + "---|" * len(head)]
    lines += [_md_row(pivot_cells(p)) for p in pivot(entries, checks)]
    lines += ["", md(f"{INTERVALS_SAID} {OVERLAP_SAID}")]
    quality = quality_lines(entries)
    if quality:
        lines += ["", "**Quality, case by case**", "", *[f"- {md(line.strip())}" for line in quality]]
    caveats = all_caveats(entries, checks)
    lines += ["", "**Caveats**", "", *([f"- ✗ {md(c)}" for c in caveats] or ["- none"])]
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    """A line break inside a value is shown, never taken (the rest of what a terminal would act on is
    escaped by the CLI's printing layer)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _clip(text: str, width: int) -> str:
    text = _one_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _keep(column: int, chunk: list[int], count: int) -> bool:
    """Columns of the pivot kept for entries `chunk` (indexes after A): level, metric, A, theirs, their Δ."""
    if column < 3:
        return True
    if column < 2 + count:
        return column - 2 in chunk
    return column - 2 - count + 1 in chunk


def _chunks(count: int, table: list[list[str]]) -> list[list[int]]:
    """Split the results after A into groups whose table (A repeated in each) fits TERMINAL_WIDTH."""

    def width(chunk: list[int]) -> int:
        kept = [i for i in range(len(table[0])) if _keep(i, chunk, count)]
        return sum(max(len(r[i]) for r in table) + 2 for i in kept)

    chunks: list[list[int]] = []
    for index in range(1, count):
        if chunks and width([*chunks[-1], index]) <= TERMINAL_WIDTH:
            chunks[-1].append(index)
        else:
            chunks.append([index])
    return chunks or [[]]


def terminal(checks: list[Check], rows: list[dict[str, Any]], entries: list[Entry]) -> str:
    """Fits TERMINAL_WIDTH: facts of each setup on a few wrapped lines, numbers in a narrow pivot."""
    # a long rule line (effective settings with their sources) wraps, indented, never cut: it says why
    lines = [
        part
        for line in checklist_lines(checks)
        for part in textwrap.wrap(_one_line(line), TERMINAL_WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    ]
    lines.append("")
    for s, entry in zip(setup_rows(rows, entries, checks), entries, strict=True):
        facts = [f"{title} {cell(s, key)}" for key, title in [*SETUP_COLUMNS[2:], ("command", "command")]]
        lines.append(
            _clip(f"{s['key']} = {cell(s, 'engine')}/{cell(s, 'profile')} ({entry.result.bench_id})", TERMINAL_WIDTH)
        )
        current = "   "
        for fact in facts:
            fact = _clip(fact, TERMINAL_WIDTH - 4)
            if len(current) + len(fact) + 3 > TERMINAL_WIDTH:
                lines.append(current.rstrip(" ·"))
                current = "   "
            current += fact + " · "
        lines.append(current.rstrip(" ·"))
    lines += [_clip(line, TERMINAL_WIDTH) for line in workload_lines(entries)]
    lines.append("")
    # a long caveat cell is cut here; the list under the table has it whole
    table = [pivot_head(entries), *[[_clip(c, 34) for c in pivot_cells(p)] for p in pivot(entries, checks)]]
    for chunk in _chunks(len(entries), table):
        head, *cells = [[c for i, c in enumerate(r) if _keep(i, chunk, len(entries))] for r in table]
        widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(head))]
        for r in [head, *cells]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        lines.append("")
    quality = quality_lines(entries)
    lines += [_clip(_one_line(line), TERMINAL_WIDTH) for line in quality] + ([""] if quality else [])
    caveats = all_caveats(entries, checks)
    lines += [_clip(f"✗ {c}", TERMINAL_WIDTH) for c in caveats]
    return "\n".join(lines) + "\n"
