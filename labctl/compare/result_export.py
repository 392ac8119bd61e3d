"""One bench result as rows for other tools: every metric of the table and its 95 % interval per level, with
what identifies the result beside it (CSV for spreadsheets, Markdown for notes, JSON rows for scripts)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from labctl.bench.metric_table import metric_columns
from labctl.bench.results import BenchResult
from labctl.compare.formats import md

FORMATS = ("table", "csv", "markdown", "json")
IDENTITY = ("bench_id", "run_id", "engine", "profile", "model", "environment_label", "workload", "workload_sha256")
LEVEL = ("concurrency", "repeat", "requests", "completed", "failed", "interrupted", "partial", "interval_basis")


def result_rows(result: BenchResult) -> list[dict[str, Any]]:
    target, workload = result.target, result.workload
    identity = [
        result.bench_id,
        result.run_id,
        target.engine,
        target.profile,
        target.model,
        target.environment_label,
        workload.name,
        workload.sha256,
    ]
    rows = []
    for level in result.levels:
        facts = [
            level.concurrency,
            level.repeat,
            level.requests,
            level.completed,
            level.failed,
            level.interrupted,
            level.partial,
            level.interval_basis,
        ]
        rows.append({**dict(zip(IDENTITY, identity, strict=True)), **dict(zip(LEVEL, facts, strict=True))})
        rows[-1].update(level.metric_cells())
    return rows


def columns() -> list[str]:
    return [*IDENTITY, *LEVEL, *metric_columns()]


def as_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns())
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _csv_safe(row[c]) for c in columns()])
    return buffer.getvalue()


def as_markdown(rows: list[dict[str, Any]]) -> str:
    head = columns()
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(md(_shown(row.get(c))) for c in head) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def as_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=1)


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _csv_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (`=`, `+`, `-`, `@` first) is quoted with a `'`."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
