"""A study's report: per (cell, repeat) its state, failure class, censored levels, prep parts, GPU-hours and
quality, then, per workload, the comparison (labctl.compare: checklist, tables, plots) of every cell that
measured. Rewritten after every finished cell, so an interrupted study has a complete report of what it
measured; the folder carries labctl's marker and only such a folder is replaced."""

from __future__ import annotations

import contextlib
import html
import json
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from labctl import __version__
from labctl.bench.intervals import t_interval
from labctl.bench.metric_table import BY_KEY, Metric, View, shown_in
from labctl.bench.results import Level, find_result
from labctl.compare.report_folder import markdown, page
from labctl.compare.rules import Entry, checklist, rows
from labctl.errors import LabctlError
from labctl.host.files.atomic import write_atomically
from labctl.host.files.outputs import write_report_folder
from labctl.host.gpus.lock import file_lock
from labctl.quality.evaluate import find_eval
from labctl.run.records.prep_view import seconds
from labctl.run.records.record import now
from labctl.run.records.store import Runs
from labctl.study.failures import meets_slo
from labctl.study.prefetch import overlaps
from labctl.study.state import StudyState

REQUEST_RATE = BY_KEY["request_throughput"]
SUMMARY_COLUMNS = (
    "cell",
    "repeat",
    "state",
    "failure",
    "censored",
    "pull s",
    "fetch s",
    "build s",
    "cold start s",
    "measuring h",
    "cold start h",
    "waiting h",
    "queue wait s",
    "quality",
    "max level meeting SLO",
)


def _hours(seconds_: float, gpus: int) -> float:
    return round(seconds_ * max(gpus, 1) / 3600, 4)


def _number(value: Any) -> str:
    return "-" if value is None else (f"{value:.3g}" if isinstance(value, float) else str(value))


def ladder_entries(runs: Runs, cells: list[dict[str, Any]]) -> dict[str, list[Entry]]:
    """Per workload, one comparison entry per (cell, repeat) that measured its ladder; a crashed ladder
    keeps the levels measured before its censored ones."""
    out: dict[str, list[Entry]] = {}
    for data in cells:
        for bench in data.get("benches") or []:
            if bench.get("canary"):
                continue
            try:
                result, _ = find_result(runs, str(bench["bench_id"]))
                record = runs.load(result.run_id)
            except (LabctlError, KeyError):
                continue
            censored = set((data.get("censored") or {}).get(bench.get("workload")) or [])
            levels = tuple(lv for lv in result.levels if lv.concurrency not in censored and lv.completed)
            if not levels:
                continue
            evals = {}
            for ev in data.get("evals") or []:
                with contextlib.suppress(LabctlError, KeyError):
                    evals[str(ev["suite"])] = find_eval(runs, str(ev["eval_id"]))
            given = f"{data['cell']} r{data['repeat']}"
            out.setdefault(str(bench["workload"]), []).append(
                Entry(
                    given, replace(result, levels=levels), record, evals, name=given, censored=tuple(sorted(censored))
                )
            )
    return out


def summary_rows(runs: Runs, cells: list[dict[str, Any]]) -> list[dict[str, str]]:
    table = []
    for data in sorted(cells, key=lambda c: (int(c.get("repeat") or 0), str(c.get("cell")))):
        times, gpus = data.get("times") or {}, int(data.get("gpus") or 0)
        record = runs.try_load(str(data["run_id"])) if data.get("run_id") else None
        prep = record.prep if record is not None else {}
        failure = data.get("failure") or {}
        best = []
        for bench in data.get("benches") or []:
            if bench.get("canary"):
                continue
            try:
                result, _ = find_result(runs, str(bench["bench_id"]))
            except LabctlError:
                continue
            meeting = [lv for lv in result.levels if meets_slo(lv)]
            if meeting:
                top = max(meeting, key=lambda lv: lv.concurrency)
                rate, ci = top.value(REQUEST_RATE), top.interval(REQUEST_RATE)
                span = f" [{ci[0]:.2f}, {ci[1]:.2f}] {top.interval_basis}" if ci else ""
                best.append(f"{bench['workload']} c={top.concurrency} ({_number(rate)} req/s{span})")
            elif result.levels:
                best.append(f"{bench['workload']}: none")
        table.append(
            {
                "cell": str(data.get("cell")),
                "repeat": str(data.get("repeat")),
                "state": str(data.get("state")) + (f" ({data['level']})" if data.get("level") else ""),
                "failure": f"{failure.get('class')}: {failure.get('reason')}" if failure else "-",
                "censored": "; ".join(f"{w} c≥{min(c)}" for w, c in (data.get("censored") or {}).items() if c) or "-",
                "pull s": _number(seconds(prep, "image_pull")),
                "fetch s": _number(seconds(prep, "model_fetch")),
                "build s": _number(seconds(prep, "engine_build")),
                "cold start s": _number(record.timings.cold_start_s if record else None),
                "measuring h": _number(_hours(float(times.get("measuring_s") or 0), gpus)),
                "cold start h": _number(_hours(float(times.get("cold_start_s") or 0), gpus)),
                "waiting h": _number(_hours(float(times.get("waiting_s") or 0), gpus)),
                "queue wait s": _number(times.get("queue_wait_s")),
                "quality": ", ".join(f"{e['suite']} {e['score']:.0%}" for e in data.get("evals") or []) or "-",
                "max level meeting SLO": "; ".join(best) or "-",
            }
        )
    return table


def gpu_hours(cells: list[dict[str, Any]]) -> list[str]:
    """The study's GPU-hours: measuring, cold start and waiting (for claims), and the waiting's share."""
    totals = {"measuring_s": 0.0, "cold_start_s": 0.0, "waiting_s": 0.0}
    for data in cells:
        gpus = int(data.get("gpus") or 0)
        for key in totals:
            totals[key] += float((data.get("times") or {}).get(key) or 0) * max(gpus, 1)
    queued = [float((data.get("times") or {}).get("queue_wait_s") or 0) for data in cells]
    # A job held no GPU while Slurm queued it: its queue wait is wall time, never GPU-hours.
    queue = (
        [
            f"Slurm queue wait (not GPU-hours): {sum(queued):.1f} s over {sum(1 for q in queued if q)} job(s), longest {max(queued):.1f} s"
        ]
        if any(queued)
        else []
    )
    if not any(totals.values()):
        return queue
    hours = {k: v / 3600 for k, v in totals.items()}
    beyond = hours["measuring_s"] + hours["waiting_s"]
    share = hours["waiting_s"] / beyond if beyond else 0.0
    return [
        f"study total: {sum(hours.values()):.4f} GPU-hours: measuring {hours['measuring_s']:.4f}, cold start "
        f"{hours['cold_start_s']:.4f}, waiting {hours['waiting_s']:.4f} ({share:.1%} of the hours beyond cold starts)",
        _waste(cells, sum(totals.values())),
        *queue,
    ]


def _waste(cells: list[dict[str, Any]], total_s: float) -> str:
    """GPU time that is neither measuring nor the engine's own cold start: waiting for claims and pulls, and
    what `up` spent beyond the engine (pulls and fetches not done ahead, labctl's own checks and polling)."""
    waiting = beyond_engine = 0.0
    for data in cells:
        times, gpus = data.get("times") or {}, max(int(data.get("gpus") or 0), 1)
        if float(times.get("cold_start_s") or 0) and times.get("engine_cold_start_s") is None:
            return "waste (neither measuring nor the engine's own cold start): not checked (a cell's record has no engine cold start)"
        waiting += float(times.get("waiting_s") or 0) * gpus
        beyond_engine += (
            max(0.0, float(times.get("cold_start_s") or 0) - float(times.get("engine_cold_start_s") or 0)) * gpus
        )
    wasted = waiting + beyond_engine
    return (
        f"waste (neither measuring nor the engine's own cold start): {wasted / 3600:.4f} GPU-hours, "
        f"{wasted / total_s:.1%} of the study's (waiting {waiting / 3600:.4f}, up beyond the engine "
        f"{beyond_engine / 3600:.4f}; the goal is under 5 %)"
    )


PerCell = dict[str, dict[str, dict[int, list[Level]]]]


def _per_cell(runs: Runs, cells: list[dict[str, Any]]) -> PerCell:
    """workload -> cell -> level -> that level of each repeat's ladder (censored levels left out)."""
    out: PerCell = {}
    for data in cells:
        for bench in data.get("benches") or []:
            if bench.get("canary"):
                continue
            try:
                result, _ = find_result(runs, str(bench["bench_id"]))
            except LabctlError:
                continue
            censored = set((data.get("censored") or {}).get(bench.get("workload")) or [])
            for level in result.levels:
                c = level.concurrency
                if c not in censored and level.completed:
                    out.setdefault(str(bench["workload"]), {}).setdefault(str(data["cell"]), {}).setdefault(
                        c, []
                    ).append(level)
    return out


def _interval(levels: list[Level], metric: Metric) -> tuple[float, float] | None:
    """Across repeats, the Student-t interval of the per-run values; one run, its own (over its requests)."""
    if len(levels) > 1:
        found = t_interval(lv.value(metric) for lv in levels)
        return (found[0], found[1]) if found else None
    return levels[0].interval(metric) if levels else None


def _basis(levels: list[Level]) -> str:
    """The n an interval of `_interval` is over, said beside it."""
    return f"n={len(levels)} runs" if len(levels) > 1 else levels[0].interval_basis


# higher-is-better metrics first: what a cell serves, then how fast it answers
VERDICT_METRICS = sorted(shown_in(View.VERDICT), key=lambda metric: metric.better != "higher")


def verdicts(per_cell: PerCell) -> list[str]:
    """Per workload and level, each pair of cells: where the 95 % intervals overlap, not distinguishable."""
    lines = []
    for workload, by_cell in per_cell.items():
        names = sorted(by_cell)
        levels = sorted({c for cell in by_cell.values() for c in cell})
        for level in levels:
            for metric in VERDICT_METRICS:
                for i, a in enumerate(names):
                    for b in names[i + 1 :]:
                        ca = _interval(by_cell[a].get(level, []), metric)
                        cb = _interval(by_cell[b].get(level, []), metric)
                        if not ca or not cb:
                            continue
                        if ca[0] <= cb[1] and cb[0] <= ca[1]:
                            verdict = "not distinguishable"
                        else:
                            verdict = f"{a if ca[0] > cb[1] else b} higher"
                        na, nb = _basis(by_cell[a][level]), _basis(by_cell[b][level])
                        lines.append(
                            f"{workload} c={level} {metric.named}: {a} [{ca[0]:.4g}, {ca[1]:.4g}] {na} vs {b} "
                            f"[{cb[0]:.4g}, {cb[1]:.4g}] {nb}: {verdict}"
                        )
    return lines


def slo_lines(per_cell: PerCell) -> list[str]:
    """Per workload and cell: the highest level every repeat measured within the SLO, its rate and interval."""
    lines = []
    for workload, by_cell in per_cell.items():
        for cell, levels in sorted(by_cell.items()):
            meeting = [c for c, found in levels.items() if found and all(meets_slo(lv) for lv in found)]
            if not meeting:
                lines.append(f"{workload} {cell}: no level met the SLO in every repeat")
                continue
            top = max(meeting)
            found = levels[top]
            rates = [v for v in (lv.value(REQUEST_RATE) for lv in found) if v is not None]
            ci = _interval(found, REQUEST_RATE)
            span = f", 95% [{ci[0]:.3g}, {ci[1]:.3g}] {_basis(found)}" if ci else ""
            mean = sum(rates) / len(rates) if rates else 0.0
            lines.append(f"{workload} {cell}: c={top}, {mean:.3g} req/s over {len(found)} repeat(s){span}")
    return lines


def kv_bound_lines(per_cell: PerCell) -> list[str]:
    """Per workload, cell and level run KV-bound: each repeat's engine preemptions and queue beside the mark."""
    lines = []
    for workload, by_cell in per_cell.items():
        for cell, levels in sorted(by_cell.items()):
            for c, found in sorted(levels.items()):
                said = [f"r{i} {text}" for i, lv in enumerate(found, start=1) if (text := lv.kv_bound_text())]
                if said:
                    lines.append(f"{workload} {cell} c={c}: " + "; ".join(said))
    return lines


def _markdown(
    name: str, table: list[dict[str, str]], caveats: list[str], found: list[str], slo: list[str], sections: list[str]
) -> str:
    head = "| " + " | ".join(SUMMARY_COLUMNS) + " |\n|" + "---|" * len(SUMMARY_COLUMNS) + "\n"
    body = "".join("| " + " | ".join(r[c].replace("|", "/") for c in SUMMARY_COLUMNS) + " |\n" for r in table)
    text = f"# Study {name}\n\n{head}{body}\n"
    if slo:
        text += "## Highest level meeting the SLO\n\n" + "".join(f"- {line}\n" for line in slo) + "\n"
    if found:
        text += "## Verdicts\n\n" + "".join(f"- {line}\n" for line in found) + "\n"
    if caveats:
        text += "## Caveats\n\n" + "".join(f"- {line}\n" for line in caveats) + "\n"
    text += "## Comparisons\n\n" + "".join(f"- [{w}]({w}/index.html)\n" for w in sections)
    return text


def _html(
    name: str, table: list[dict[str, str]], caveats: list[str], found: list[str], slo: list[str], sections: list[str]
) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in SUMMARY_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{esc(r[c])}</td>" for c in SUMMARY_COLUMNS) + "</tr>" for r in table)
    items = "".join(f"<li>{esc(line)}</li>" for line in found)
    best = "".join(f"<li>{esc(line)}</li>" for line in slo)
    notes = "".join(f"<li>{esc(line)}</li>" for line in caveats)
    links = "".join(f'<li><a href="{esc(w)}/index.html">{esc(w)}</a></li>' for w in sections)
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>Study {esc(name)}</title></head><body>"
        f"<h1>Study {esc(name)}</h1><table border=1><tr>{head}</tr>{body}</table>"
        f"<h2>Highest level meeting the SLO</h2><ul>{best}</ul><h2>Verdicts</h2><ul>{items}</ul><h2>Caveats</h2><ul>{notes}</ul><h2>Comparisons</h2><ul>{links}</ul>"
        "</body></html>\n"
    )


def write_study_report(runs: Runs, state: StudyState, target: Path | None = None, overwrite: bool = False) -> Path:
    folder = target or state.report_dir
    unreadable: list[str] = []
    cells = state.all_cells(unreadable.append)
    table = summary_rows(runs, cells)
    entries = ladder_entries(runs, cells)
    caveats = [f"{c['cell']} r{c['repeat']}: {note}" for c in cells for note in c.get("caveats") or []]
    caveats += [f"{c['cell']} r{c['repeat']}: {note}" for c in cells for note in c.get("findings") or []]
    caveats += overlaps(state, cells)
    caveats += unreadable  # a state file of the wrong shape is said, never silently left out
    caveats += gpu_hours(cells)
    per_cell = _per_cell(runs, cells)
    found, slo = verdicts(per_cell), slo_lines(per_cell)
    caveats = [*kv_bound_lines(per_cell), *caveats]  # the engine queued and preempted there: said first

    def build(work: Path) -> None:
        for workload, chosen in entries.items():
            section = work / workload
            section.mkdir()
            checks = checklist(chosen)
            table_rows = rows(chosen, checks)
            plots = _plots(section, chosen, checks, caveats)
            write_atomically(section / "report.md", markdown(checks, table_rows, chosen, plots))
            write_atomically(section / "index.html", page(checks, table_rows, chosen, plots))
        sections = sorted(entries)
        write_atomically(work / "report.md", _markdown(state.name, table, caveats, found, slo, sections))
        write_atomically(work / "index.html", _html(state.name, table, caveats, found, slo, sections))
        write_atomically(work / "cells.json", json.dumps(cells, indent=1) + "\n")

    marker = {"kind": "study report", "study": state.name, "labctl_version": __version__, "written_at": now()}
    with file_lock(state.folder / ".report.lock"):
        return write_report_folder(folder, marker, overwrite, build)


def _plots(folder: Path, entries: list[Entry], checks: list[Any], caveats: list[str]) -> list[str]:
    from labctl.compare.plots import draw_plots

    try:
        with warnings.catch_warnings():  # many series make matplotlib's legend placement slow, and say so
            warnings.simplefilter("ignore", UserWarning)
            return draw_plots(folder, entries, checks)
    except (ImportError, LabctlError) as exc:  # labctl[report] not installed: the tables are the report
        caveats.append(f"no plots in {folder.name}: {exc}")
        return []


def report_writer(runs: Runs, state: StudyState, say: Callable[[str], None]) -> Callable[[], None]:
    """For the runner: a report that cannot be written is said, never the end of the study."""

    def write() -> None:
        try:
            write_study_report(runs, state)
        except Exception as exc:  # noqa: BLE001 - the measurements are safe in the records; the report is redone
            say(f"warning: the study report was not rewritten: {type(exc).__name__}: {exc}")

    return write
