"""labctl compare: numbers from different engines share a table only when they were measured under
the same rules. The rules are checked first; a mixed table needs --allow-mismatch and is marked."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labctl.bench.metric_table import View, shown_in
from labctl.bench.results import BenchResult, Memory, find_result, list_results
from labctl.catalog.engine_settings import SAME_RULES, SHOWN, TITLES, UNKNOWN, Effective
from labctl.errors import BadInput
from labctl.quality.evals import list_evals
from labctl.run.records.prep_view import cache_state, seconds
from labctl.run.records.record import Record
from labctl.run.records.store import Runs, is_run_id

RULES = (
    "model family and revision",
    "thinking mode",
    "workload",
    "environment label",
    "accelerator",
    "GPU model",
    "quality suite version",
    "concurrency within built max batch size",
    *(TITLES[name] for name in SAME_RULES),
)
# Said, not enforced: the other effective settings (chunked prefill, speculative decoding, the batch cap, sampling
# defaults) differ between engines by design; the checklist shows which, and how each was known.
SETTINGS_RULE = "other effective settings (shown, not enforced)"
OTHER_SETTINGS = tuple(name for name in SHOWN if name not in SAME_RULES)
# Said, not enforced: a cold and a warm start serve the same tokens at the same speed once ready, but their
# prep times (fetch, pull, build) do not compare; the checklist says so instead of comparing them silently.
CACHE_RULE = "what a cache served (prep times compare only when equal)"
# The metrics of a comparison's row: every schema-1 result holds them, so a level without one is refused.
LEVEL_KEYS = tuple(metric.key for metric in shown_in(View.COMPARE_ROW) if metric.stored)
REQUIRED_RESULT_KEYS = ("bench_id", "run_id", "target", "workload", "levels")


@dataclass
class Entry:
    given: str
    result: BenchResult
    record: Record
    evals: dict[str, dict[str, Any]]
    name: str | None = None  # what to call it where engine/profile says too little (a study's cell and repeat)
    censored: tuple[int, ...] = ()  # a study's cell whose engine died: the levels it has no number for

    @property
    def label(self) -> str:
        return self.name or f"{self.record.engine}/{self.record.profile}"

    @property
    def thinking(self) -> str:
        given = self.result.target.thinking
        if given is None and self.record.engine_setup is not None:
            given = self.record.engine_setup.thinking
        return str(given) if given else "unknown"

    @property
    def memory(self) -> str:
        """The engine's memory option, its value and what it means (one number, four meanings)."""
        memory = self.result.target.memory
        setup = self.record.engine_setup
        if memory is None and setup is not None and setup.memory_setting:
            memory = Memory(setup.memory_setting, setup.memory_value, setup.memory_meaning)
        if not memory:
            return "-"
        value = memory.value
        return f"{memory.setting} {value if value is not None else 'default'} ({memory.meaning})"

    @property
    def settings(self) -> dict[str, Effective]:
        """What the engine computed with: the result's copy, else its run's record (older results have none)."""
        return dict(self.result.target.settings or self.record.settings or {})

    def setting(self, name: str) -> Effective:
        return self.settings.get(name) or Effective(
            UNKNOWN, "unknown", "not recorded (an older labctl, or an endpoint labctl did not start)"
        )

    def _gpu_free_simulation(self) -> bool:
        """An engine that needs no GPU and is no real engine on CPU: labctl's harness, or a folder like it."""
        return self.record.gpus.note == "no GPU" and self.record.accelerator_kind != "cpu"

    def facts(self) -> dict[str, str]:
        model = ((self.record.resolved_profile or {}).get("model")) or {}
        devices = self.record.gpus.devices
        gpu = (
            ", ".join(sorted({d.name for d in devices}))
            if devices
            else ("none (no GPU used)" if self._gpu_free_simulation() else "unknown")
        )
        over = [str(level.concurrency) for level in self.result.levels if level.over_max_batch_size]
        workload, target = self.result.workload, self.result.target
        return {
            "model family and revision": f"{model.get('family', '?')}@{model.get('revision', '?')}",
            "thinking mode": self.thinking,
            "workload": f"{workload.name} ({workload.sha256[:12]})"
            + (f", lengths in tokens of {workload.tokenizer}" if workload.length_unit == "tokens" else ""),
            "environment label": target.environment_label or "?",
            # gpu, simulated, cpu or unknown (an endpoint labctl did not start): never equals across kinds
            "accelerator": str(target.accelerator or self.record.accelerator_kind),
            "GPU model": gpu,
            "concurrency within built max batch size": "over at " + ",".join(over) if over else "ok",
            **{TITLES[name]: self.setting(name).value for name in SAME_RULES},
        }


def load_entry(runs: Runs, given: str, skipped: Callable[[str], None] | None = None) -> Entry:
    """A bench id's result, or a run id's newest complete one; a bad file among a run's results, or a
    run record that cannot be read, is reported to `skipped` and gone past."""
    if is_run_id(given):
        every = list_results(runs, given, skipped)
        results = [r for r in every if r.status == "complete"]
        if not results:
            partial = [
                f"{kind}: {', '.join(r.bench_id for r in every if r.status == kind)}"
                for kind in ("interrupted", "partial")
                if any(r.status == kind for r in every)
            ]
            raise BadInput(
                f"run {given} has no complete bench result"
                + (f" ({'; '.join(partial)}; give a bench id to use a partial result)" if partial else "")
                + f": run `labctl bench {given} --workload NAME` first."
            )
        result = results[-1]
    elif given.startswith("b") and is_run_id(given[1:]):
        result, _ = find_result(runs, given)
    else:
        raise BadInput(f"{given!r} is neither a run id nor a bench id (like b20261203-015815-a1b2c3).")
    if result.status == "running":  # a live bench (a dead one reads as interrupted)
        raise BadInput(f"bench result {given} is still being measured: compare it once its bench has finished.")
    if result.status in ("failed", "timed_out"):
        raise BadInput(
            f"bench result {given} {result.status.replace('_', ' ')}: it holds no valid numbers to compare. "
            "Re-run the benchmark once the endpoint answers."
        )
    check_comparable(given, result.to_json())
    target = result.target
    record = _record_of(runs, result, skipped) or Record(
        run_id=result.run_id,
        status="unknown",
        engine=target.engine or "?",
        profile=target.profile or "?",
        served_model_name=target.model,
    )
    evals: dict[str, dict[str, Any]] = {}
    for evaluation in list_evals(runs, result.run_id, skipped):
        if evaluation.get("status", "complete") != "complete":
            continue  # a failed evaluation has no score; a partial one scores the endpoint's failures too
        evals[evaluation["suite"]["name"]] = evaluation  # the latest per suite wins (sorted by id = time)
    return Entry(given=given, result=result, record=record, evals=evals)


def check_comparable(given: str, document: dict[str, Any]) -> None:
    """The document holds what a comparison reads: results of an older schema lack some of it."""
    missing = [k for k in REQUIRED_RESULT_KEYS if k not in document]
    if missing or document.get("schema_version", 0) < 1:
        raise BadInput(
            f"bench result {given} lacks {', '.join(missing) or 'schema_version'}: it comes from an older "
            "labctl; re-run the benchmark."
        )
    for level in document["levels"]:
        absent = [k for k in ("concurrency", *LEVEL_KEYS) if k not in level]
        if absent:
            raise BadInput(
                f"bench result {given} lacks {', '.join(absent)} at concurrency {level.get('concurrency')}: "
                "an older schema; re-run the benchmark."
            )


@dataclass
class Check:
    rule: str
    ok: bool
    values: dict[str, str]  # entry label -> value
    blocking: bool = True  # a failed blocking rule refuses the table (unless --allow-mismatch)
    checked: bool = True  # False: no result says what the rule asks (unknown on every side): `ok` (no mismatch
    # is known) but never a tick

    @property
    def mark(self) -> str:
        if not self.checked:
            return "?"
        return "✓" if self.ok else ("✗" if self.blocking else "!")


def _unknown(value: str) -> bool:
    """A fact no result recorded: `unknown`, `?`, or a `?` part (`?@?`: neither family nor revision known)."""
    return value in ("unknown", "?", "") or any(part == "?" for part in value.replace("@", " ").split())


def _same(rule: str, values: dict[str, str], shown: dict[str, str] | None = None) -> Check:
    """Equal values pass; values unknown on every side are not checked (equal, but nobody knows to what)."""
    if all(_unknown(v) for v in values.values()):
        return Check(rule, True, shown or values, blocking=False, checked=False)  # no mismatch known, no tick
    return Check(rule, len(set(values.values())) == 1, shown or values)


def checklist(entries: list[Entry]) -> list[Check]:
    checks = []
    for rule in RULES:
        if rule == "quality suite version":
            checks.append(_suite_check(entries))
            continue
        values = {e.given: e.facts()[rule] for e in entries}
        if rule in SETTING_OF:  # equal values (unknown beside a known one is not), shown with how each was known
            shown = {e.given: e.setting(SETTING_OF[rule]).describe() for e in entries}
            checks.append(_same(rule, values, shown))
            continue
        if rule == "concurrency within built max batch size":
            checks.append(Check(rule, all(v == "ok" for v in values.values()), values))
        else:
            checks.append(_same(rule, values))
    cached = {e.given: cache_state(e.record.prep) for e in entries}
    checks.append(Check(CACHE_RULE, len(set(cached.values())) == 1, cached, blocking=False))
    checks.append(_settings_check(entries))
    return checks


SETTING_OF = {TITLES[name]: name for name in SAME_RULES}


def _settings_check(entries: list[Entry]) -> Check:
    """The other settings: all of them when they agree, else only those that differ, per result."""
    differ = [n for n in OTHER_SETTINGS if len({e.setting(n).value for e in entries}) > 1]
    shown = differ or list(OTHER_SETTINGS)
    values = {
        e.given: ", ".join(
            f"{TITLES[n]} {e.setting(n).value}" + (f" [{e.setting(n).source}]" if differ else "") for n in shown
        )
        for e in entries
    }
    return Check(SETTINGS_RULE, not differ, values, blocking=False)


def settings_text(entry: Entry) -> str:
    """Every effective setting of one result, on one line."""
    return ", ".join(f"{TITLES[n]} {entry.setting(n).value}" for n in SHOWN)


def _suite_check(entries: list[Entry]) -> Check:
    values: dict[str, str] = {}
    ok = True
    names = {name for e in entries for name in e.evals}
    for name in sorted(names):
        versions = {e.evals[name]["suite"]["full_version"] for e in entries if name in e.evals}
        ok = ok and len(versions) == 1
    for e in entries:
        values[e.given] = ", ".join(suite_text(n, ev) for n, ev in sorted(e.evals.items())) or "no quality results"
    return Check("quality suite version", ok, values)


def suite_text(name: str, ev: dict[str, Any]) -> str:
    """A suite's version; for lm-eval task sets also each task's version and its data's revision and hash."""
    text = f"{name} {ev['suite']['full_version']}"
    tasks = ev.get("tasks") or []
    if tasks:
        text += (
            " ["
            + "; ".join(
                f"{t['task']} v{t['version']} data {t['dataset']['source']} #{str(t['dataset']['sha256'])[:12]} "
                f"{t['num_fewshot']}-shot"
                for t in tasks
            )
            + "]"
        )
    return text


def _short(value: Any, width: int = 19) -> str:
    return str(value)[:width] if value else "-"


def _version(record: Record) -> str:
    version = record.engine_version
    if isinstance(version, dict):
        return str(version.get("version") or json.dumps(version)[:30])
    return str(version)[:30] if version else "-"


def _prep(record: Record) -> dict[str, Any]:
    timings = record.timings
    build = timings.engine_build_s
    prep = record.prep
    pull = seconds(prep, "image_pull")
    return {
        "pull_s": pull if pull is not None else timings.image_pull_s,
        "fetch_s": seconds(prep, "model_fetch"),
        "build_s": build.seconds if build else seconds(prep, "engine_build"),
        "load_s": seconds(prep, "engine_load"),
        "warmup_s": seconds(prep, "warmup"),
        "cold_start_s": timings.cold_start_s,
        "cache": cache_state(prep),
    }


def rows(entries: list[Entry], checks: list[Check]) -> list[dict[str, Any]]:
    """One row per entry and concurrency level; `mismatch` names the columns whose rule failed."""
    failed = {c.rule for c in checks if not c.ok and c.checked}
    out = []
    for e in entries:
        facts = e.facts()
        quality = "; ".join(score_text(n, ev) for n, ev in sorted(e.evals.items())) or "-"
        suites = "; ".join(f"{n} {ev['suite']['full_version']}" for n, ev in sorted(e.evals.items())) or "-"
        for level in e.result.levels:
            mismatch = sorted(
                rule
                for rule in failed
                if rule != "concurrency within built max batch size" or level.over_max_batch_size
            )
            client = e.result.client
            out.append(
                {
                    "id": e.result.bench_id,
                    "engine": e.record.engine,
                    "profile": e.record.profile,
                    "image": e.record.image.reference or "-",
                    "image_digest": _short(e.record.image.digest, 19),
                    "command": " ".join(e.record.container.command_line if e.record.container else ()) or "-",
                    "engine_version": _version(e.record),
                    **_prep(e.record),
                    "model": facts["model family and revision"],
                    "thinking": facts["thinking mode"],
                    "memory": e.memory,
                    **{name: facts[TITLES[name]] for name in SAME_RULES},
                    "settings": settings_text(e),
                    "workload": facts["workload"],
                    "environment_label": facts["environment label"],
                    "accelerator": facts["accelerator"],
                    "gpu": facts["GPU model"],
                    "concurrency": level.concurrency,
                    "rate": level.target_rate,
                    "completed": level.completed,
                    "requests": level.requests,
                    "failed": level.failed,
                    "interrupted": level.interrupted,
                    "status": e.result.status,
                    "partial": level.partial,
                    "engine_shared": level.engine_shared,
                    **{k: level.figures.get(k) for k in LEVEL_KEYS},
                    **{f"{k}_ci95": ci for k, ci in level.intervals.items() if k in LEVEL_KEYS},
                    "cells": level.metric_cells(),  # every metric and interval bound, for the CSV
                    "repeat": level.repeat,
                    "quality": quality,
                    "suite_version": suites,
                    "bench_date": (e.result.created_at or "-")[:16].replace("T", " "),
                    "host": (client.host if client else None) or "-",
                    "labctl_version": (client.labctl_version if client else None) or "-",
                    "mismatch": mismatch,
                }
            )
    mark_indistinguishable(out)
    return out


def score_text(name: str, ev: dict[str, Any]) -> str:
    """`coding 80% (8/10, 95% 55–100%)`: the score with its n/N and interval."""
    if ev.get("score") is None:
        return f"{name} failed"
    text = f"{name} {ev['score']:.0%} ({ev['passed']}/{ev['total']}"
    interval = ev.get("score_ci95")
    return text + (f", 95% {interval[0]:.0%}–{interval[1]:.0%})" if interval else ")")


def mark_indistinguishable(table: list[dict[str, Any]]) -> None:
    """`not_distinguishable`: the metrics whose 95 % interval overlaps another result's at the same
    concurrency; a difference between them is not shown by the data."""
    for row in table:
        row["not_distinguishable"] = sorted(
            key
            for key in LEVEL_KEYS
            if any(
                other["id"] != row["id"]
                and other["concurrency"] == row["concurrency"]
                and _overlap(row.get(f"{key}_ci95"), other.get(f"{key}_ci95"))
                for other in table
            )
        )


def _overlap(a: list[float] | None, b: list[float] | None) -> bool:
    if not a or not b:
        return False
    return a[0] <= b[1] and b[0] <= a[1]


def _record_of(runs: Runs, result: BenchResult, skipped: Callable[[str], None] | None) -> Record | None:
    """The result's run record; one that cannot be read leaves the result's own facts (and says so)."""
    if not is_run_id(result.run_id) or not runs.exists(result.run_id):
        return None
    try:
        return runs.load(result.run_id)
    except BadInput as exc:
        if skipped:
            skipped(f"skipped the record of {result.bench_id}: {exc}")
        return None


def compare(
    runs: Runs, ids: list[str], skipped: Callable[[str], None] | None = None
) -> tuple[list[Check], list[dict[str, Any]], list[Entry]]:
    if len(ids) < 2:
        raise BadInput(
            "give at least two bench or run ids to compare (one result has nothing to be compared with; "
            "`labctl report ID -o DIR` writes the report of one)."
        )
    if len(set(ids)) != len(ids):
        raise BadInput("an id is given twice.")
    entries = [load_entry(runs, i, skipped) for i in ids]
    checks = checklist(entries)
    return checks, rows(entries, checks), entries


# Which row columns belong to which rule, for marking differing cells.
RULE_COLUMNS = {
    "model family and revision": "model",
    "thinking mode": "thinking",
    "workload": "workload",
    "environment label": "environment_label",
    "accelerator": "accelerator",
    "GPU model": "gpu",
    "quality suite version": "suite_version",
    "concurrency within built max batch size": "concurrency",
    CACHE_RULE: "cache",
    **{TITLES[name]: name for name in SAME_RULES},
    SETTINGS_RULE: "settings",
}
