"""Comparison output: the rules checklist and the results table as a terminal table, Markdown, CSV
or JSON. Cells whose rule failed are marked with ✗."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from labctl.compare.rules import RULE_COLUMNS, Check

FORMATS = ("table", "markdown", "csv", "json")
COLUMNS = [
    ("engine", "engine"),
    ("profile", "profile"),
    ("image_digest", "digest"),
    ("engine_version", "version"),
    ("pull_s", "pull s"),
    ("build_s", "build s"),
    ("cold_start_s", "cold start s"),
    ("model", "model@rev"),
    ("thinking", "thinking"),
    ("memory", "memory option"),
    ("workload", "workload"),
    ("environment_label", "env"),
    ("gpu", "GPU"),
    ("concurrency", "conc"),
    ("median_ttft_ms", "TTFT p50"),
    ("p99_ttft_ms", "TTFT p99"),
    ("median_tpot_ms", "TPOT p50"),
    ("p99_itl_ms", "ITL p99"),
    ("output_throughput", "out tok/s"),
    ("goodput", "goodput"),
    ("quality", "quality"),
    ("suite_version", "suite version"),
]


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
        mark = "✓" if check.ok else "✗"
        distinct = sorted(set(check.values.values()))
        detail = distinct[0] if len(distinct) == 1 else "; ".join(f"{k}: {v}" for k, v in check.values.items())
        lines.append(f"{mark} {check.rule}: {detail}")
    return lines


def render(checks: list[Check], rows: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "checklist": [{"rule": c.rule, "ok": c.ok, "values": c.values} for c in checks],
                "same_rules": all(c.ok for c in checks),
                "rows": rows,
            },
            indent=1,
        )
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow([title for _, title in COLUMNS] + ["mismatch"])
        for row in rows:
            writer.writerow([row.get(key) for key, _ in COLUMNS] + ["; ".join(row["mismatch"])])
        return buffer.getvalue()
    if fmt == "markdown":
        head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
        rule = "|" + "---|" * len(COLUMNS)
        body = ["| " + " | ".join(cell(row, key).replace("|", "\\|") for key, _ in COLUMNS) + " |" for row in rows]
        checks_md = [f"- {line}" for line in checklist_lines(checks)]
        return "\n".join(["**Same rules?**", "", *checks_md, "", head, rule, *body]) + "\n"
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for _, title in COLUMNS:
        table.add_column(title, overflow="fold")
    for row in rows:
        table.add_row(*[cell(row, key) for key, _ in COLUMNS])
    buffer = io.StringIO()
    Console(file=buffer, width=240, force_terminal=False).print(table)
    return "\n".join(checklist_lines(checks)) + "\n" + buffer.getvalue()
