"""labctl report of one result: its setup once, its levels with n/N and 95 % intervals, every caveat it
carries, and its plots (labctl.compare.plots). Nothing is compared, so there is no checklist, no A/B and
no Δ: a bench of one engine needs none."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl import __version__
from labctl.bench.metric_table import View, shown_in
from labctl.bench.results import BenchResult, Level, list_results
from labctl.compare.explore import STYLE as EXPLORE_STYLE
from labctl.compare.explore import explorer
from labctl.compare.formats import md, workload_lines
from labctl.compare.pivot import (
    INTERVALS_SAID,
    level_caveats,
    level_key,
    level_name,
    number,
    repeats_said,
    result_caveat,
)
from labctl.compare.plots import draw_one_result
from labctl.compare.rules import Entry, load_entry, rows
from labctl.errors import BadInput
from labctl.host.files.atomic import write_atomically
from labctl.host.files.outputs import write_report_folder
from labctl.host.identity import host_name
from labctl.run.records.record import now
from labctl.run.records.store import Runs, is_run_id

PREP = [("pull", "pull_s"), ("fetch", "fetch_s"), ("build", "build_s"), ("load", "load_s"), ("warm-up", "warmup_s")]


@dataclass
class OneResult:
    entry: Entry
    others: list[BenchResult] = field(default_factory=list)  # the run's other results, when a run id was given

    @property
    def name(self) -> str:
        if self.entry.record.engine == "external":
            return f"external {self.entry.result.target.base_url}"
        return self.entry.label

    @property
    def about(self) -> str:
        """Which result this is, in one line: under every plot, since a PNG may travel alone."""
        result, facts = self.entry.result, self.entry.facts()
        model = facts["model family and revision"]
        if model == "?@?":  # an endpoint labctl did not start: only its served name is known
            model = f"model {result.target.model}"
        when = (result.created_at or "-")[:16].replace("T", " ") + " UTC"
        workload = facts["workload"].split(",")[0]
        return " · ".join([result.bench_id, self.name, workload, facts["environment label"], model, when])


def load_one(runs: Runs, given: str, skipped: Callable[[str], None] | None = None) -> OneResult:
    """A bench id, or a run id: its newest complete result, with the run's other results named."""
    entry = load_entry(runs, given, skipped)
    if not entry.result.levels:
        raise BadInput(f"bench result {entry.result.bench_id} has no measured level: nothing to report.")
    others = []
    if is_run_id(given):
        others = [r for r in list_results(runs, given, skipped) if r.bench_id != entry.result.bench_id]
    return OneResult(entry, others)


def choice_line(one: OneResult) -> str | None:
    """Said when a run id had several results: which one this is, and how to pick another."""
    if not one.others:
        return None
    result = one.entry.result
    others = ", ".join(f"{r.bench_id} ({r.workload.name}, {r.status})" for r in reversed(one.others))
    return (
        f"run {result.run_id} has {len(one.others) + 1} bench results; this report is of its newest complete "
        f"one, {result.bench_id} ({result.workload.name}). The others: {others}. "
        "Give a bench id to report another."
    )


def setup_facts(one: OneResult) -> list[tuple[str, str]]:
    """The setup, once: what ran, on what, measured how (the facts of the comparison's setup row)."""
    entry = one.entry
    row = {key: _text(value) for key, value in rows([entry], [])[0].items()}
    record, result = entry.record, entry.result
    facts = [
        ("result", f"{result.bench_id} of run {result.run_id} ({result.status})"),
        ("engine", row["engine"]),
        ("profile", row["profile"]),
        ("image", row["image"]),
        (
            "image digest",
            record.image.digest or (f"none: local image {record.image.image_id}" if record.image.image_id else "-"),
        ),
        ("engine version", row["engine_version"]),
        ("served model", result.target.model or record.served_model_name or "-"),
        ("model@revision", row["model"]),
        ("thinking", row["thinking"]),
        ("memory option", row["memory"]),
        ("GPU", row["gpu"]),
        ("environment label", row["environment_label"]),
        ("accelerator", row["accelerator"]),
        ("workload", row["workload"]),
        ("quality", row["quality"]),
        ("suite version", row["suite_version"]),
        ("measured (UTC)", row["bench_date"]),
        ("client host", row["host"]),
        ("labctl (client)", row["labctl_version"]),
    ]
    if record.engine != "external":
        where = record.host_entry + (f" ({record.docker_host_name})" if record.docker_host_name else "")
        facts.append(("engine host", where))
    prep = " · ".join(f"{title} {row[key]}" for title, key in PREP)
    facts += [
        ("prep (s)", f"{prep} · cold start {row['cold_start_s']}"),
        ("served from cache", row["cache"]),
        ("command", row["command"]),
        ("telemetry", telemetry_line(result.telemetry)),
        ("engine metrics", engine_metrics_line(result)),
        ("intervals", f"{result.interval_method or '-'} (repeat {result.repeat})"),
    ]
    return facts


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return number(value)
    return " ".join(str(value).split())


def telemetry_line(telemetry: dict[str, Any] | None) -> str:
    """What was sampled during the levels, and what was not and why (as the bench recorded it)."""
    telemetry = telemetry or {}
    if not telemetry:
        return "not recorded"
    missing = telemetry.get("missing") or {}
    parts = []
    for name, title in (("gpu", "GPU"), ("engine", "engine metrics")):
        section = telemetry.get(name) or {}
        if section.get("samples"):
            simulated = " (simulated GPU)" if section.get("simulated") else ""
            parts.append(f"{title}: {section['samples']} samples{simulated}")
        else:
            parts.append(f"{title}: no samples ({missing.get(name, 'none taken')})")
    unread: dict[str, list[str]] = {}
    for name, reason in sorted(missing.items()):
        if name.startswith("engine."):
            unread.setdefault(str(reason), []).append(name.removeprefix("engine."))
    parts += [f"{', '.join(names)}: {reason}" for reason, names in unread.items()]
    return "; ".join(parts)


# (title, common name, statistic, scale, unit): what the engine's own /metrics said during each level
ENGINE_FIGURES = [
    ("running", "running", "mean", 1.0, ""),
    ("waiting", "waiting", "max", 1.0, " max"),
    ("KV cache", "kv_cache_usage_fraction", "max", 100.0, "% max"),
    ("prefix-cache hits", "prefix_cache_hit_rate", "mean", 100.0, "%"),
    ("generation", "generation_tokens", "per_s", 1.0, " tok/s"),
]


def engine_metrics_line(result: BenchResult) -> str:
    """Per level, the engine's running and waiting requests, KV-cache use, prefix-cache hit rate and generation
    rate, as the bench sampled them from the engine's /metrics ("-": the engine does not export it)."""
    parts = []
    for level in sorted(result.levels, key=level_key):
        engine = (level.telemetry or {}).get("engine") or {}
        if not engine.get("samples"):
            continue
        figures = []
        for title, name, stat, scale, unit in ENGINE_FIGURES:
            found = engine.get(name) or {}
            value = found.get(stat)
            figures.append(f"{title} {'-' if value is None else number(value * scale) + unit}")
            if (found.get("ranks") or 1) > 1 and found.get("rank_max") is not None:  # averaged over ranks
                figures[-1] += f" (busiest of {found['ranks']:g} ranks {number(found['rank_max'] * scale)}{unit})"
        parts.append(f"{level_name(level_key(level))}: " + ", ".join(figures))
    return "; ".join(parts) or "no engine samples"


def caveats(one: OneResult) -> list[str]:
    """Every caveat the result carries, each with the level it touches, in words a person can act on."""
    result = one.entry.result
    lines = []
    if result.status == "interrupted":
        lines.append("the benchmark was interrupted; its last level is partial")
    whole = result_caveat(result)
    lines += [whole] if whole else []
    found = result.max_rate_meeting_slo
    if found and not found.converged:
        lines.append(f"the capacity search did not converge: {found.note}")
    for level in sorted(result.levels, key=level_key):
        said = _level_caveats(level)
        if said:
            lines.append(f"{level_name(level_key(level))}: " + "; ".join(said))
    return [" ".join(line.split()) for line in lines]


def _level_caveats(level: Level) -> list[str]:
    said = []
    if level.interrupted:
        said.append("interrupted (partial)")
    if level.failed:
        reasons = ", ".join(f"{reason} ×{count}" for reason, count in sorted(level.failures.items()))
        said.append(f"{level.failed} of {level.requests} requests failed" + (f": {reasons}" if reasons else ""))
    warnings = [w for w in level.warnings if "request(s) failed" not in w]
    said += warnings
    if level.over_max_batch_size and not any("max_batch_size" in w for w in warnings):
        said.append("concurrency above the engine's built max_batch_size")
    return said


def level_head(one: OneResult) -> list[str]:
    search = any(lv.meets_slo is not None for lv in one.entry.result.levels)
    titles = [metric.titled for metric in shown_in(View.REPORT)]
    return ["level", "n/N", *titles, *(["meets SLO"] if search else []), "caveats"]


def level_rows(one: OneResult) -> list[list[tuple[str, str]]]:
    """One row per level: (value, 95 % interval or "") per cell."""
    out = []
    search = any(lv.meets_slo is not None for lv in one.entry.result.levels)
    for level in sorted(one.entry.result.levels, key=level_key):
        row = [(level_name(level_key(level)), ""), (f"{level.completed}/{level.requests}", "")]
        for metric in shown_in(View.REPORT):
            interval = level.interval(metric)
            row.append(
                (
                    number(level.value(metric)),
                    f"[{number(interval[0])}, {number(interval[1])}]{repeats_said(level)}" if interval else "",
                )
            )
        if search:
            row.append(("yes" if level.meets_slo else "no" if level.meets_slo is not None else "-", ""))
        said = level_caveats(one.entry, level, set())
        row.append(("✗ " + ", ".join(said) if said else "-", ""))
        out.append(row)
    return out


def header_lines(one: OneResult) -> list[str]:
    lines = [f"Written {now()[:16].replace('T', ' ')} UTC on {host_name()} by labctl {__version__}."]
    chosen = choice_line(one)
    return lines + ([chosen] if chosen else [])


def markdown(one: OneResult, plots: list[str]) -> str:
    lines = [
        f"# labctl report: {md(one.name)}",
        "",
        *[f"- {md(line)}" for line in header_lines(one)],
        "",
        "## Setup",
        "",
    ]
    lines += ["| | |", "|---|---|", *[f"| {md(k)} | {md(v)} |" for k, v in setup_facts(one)]]
    lines += ["", "## Workload and SLO", "", *[f"- {md(line)}" for line in workload_lines([one.entry])]]
    lines += ["", "## Per level", "", INTERVALS_SAID, ""]
    head = level_head(one)
    lines += ["| " + " | ".join(md(h) for h in head) + " |", "|" + "---|" * len(head)]
    for row in level_rows(one):
        lines.append("| " + " | ".join(md(f"{v} {ci}".strip()) for v, ci in row) + " |")
    said = caveats(one)
    lines += ["", "## Caveats", "", *([f"- ✗ {md(c)}" for c in said] or ["- none"])]
    lines += ["", "## Plots", "", *[f"![{name}]({name})" for name in plots]]
    return "\n".join(lines) + "\n"


def page(one: OneResult, plots: list[str]) -> str:
    esc = html.escape
    header = "".join(f"<li>{esc(line)}</li>" for line in header_lines(one))
    setup = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in setup_facts(one))
    spec = "".join(f"<li>{esc(line)}</li>" for line in workload_lines([one.entry]))
    head = "".join(f"<th>{esc(t)}</th>" for t in level_head(one))
    body = ""
    for row in level_rows(one):
        cells = "".join(
            f"<td>{esc(v)}" + (f"<br><span class=ci>{esc(ci)}</span>" if ci else "") + "</td>" for v, ci in row[:-1]
        )
        last = row[-1][0]
        body += f"<tr>{cells}<td{' class=bad' if last.startswith('✗') else ''}>{esc(last)}</td></tr>"
    said = "".join(f"<li class=bad>✗ {esc(c)}</li>" for c in caveats(one)) or "<li>none</li>"
    images = "".join(f'<figure><img src="{esc(name)}" alt="{esc(name)}"></figure>' for name in plots)
    title = esc(f"labctl report: {one.name}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }}
th {{ background: #f0f0f0; }} table.setup {{ max-width: 1100px; }} table.setup th {{ white-space: nowrap; }}
table.setup td, ul.spec {{ overflow-wrap: anywhere; }} ul.spec {{ font-size: 12px; }}
table.levels td {{ white-space: nowrap; }} span.ci {{ color: #666; font-size: 11px; }}
li.bad, td.bad {{ color: #b00; }}
div.plots {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 1em; }}
figure {{ margin: 0; }} img {{ width: 100%; border: 1px solid #ddd; }}
{EXPLORE_STYLE}
</style></head><body>
<h1>{title}</h1>
<ul>{header}</ul>
<h2>Setup</h2><table class=setup>{setup}</table>
<h2>Workload and SLO</h2><ul class=spec>{spec}</ul>
<h2>Per level</h2><p>{esc(INTERVALS_SAID)}</p>
<table class=levels><tr>{head}</tr>{body}</table>
<h2>Explore</h2>{explorer([one.entry], [])}
<h2>Caveats</h2><ul>{said}</ul>
<h2>Plots</h2><div class=plots>{images}</div>
</body></html>
"""


def write_one_result_report(folder: Path, one: OneResult, overwrite: bool = False) -> Path:
    """Built beside `folder` and renamed into place (labctl.host.files.outputs): all of it, or the old one untouched."""

    def build(work: Path) -> None:
        plots = draw_one_result(work, one.entry, one.name, one.about, caveats(one))
        write_atomically(work / "report.md", markdown(one, plots))
        write_atomically(work / "index.html", page(one, plots))

    ids = [one.entry.result.bench_id]
    marker = {"kind": "one-result report", "labctl_version": __version__, "bench_ids": ids, "written_at": now()}
    return write_report_folder(folder, marker, overwrite, build)
