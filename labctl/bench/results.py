"""Bench results read back: one loader that checks a result file's schema version and shape and gives a
typed value (the facts `bench list`, `bench show`, `compare` and `report` read), or one line saying which
file, which field, and what to do. The file itself is kept as `data` for what reads it as a whole."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.bench.metric_table import DERIVED, METRICS, Metric, value_in
from labctl.errors import BadInput
from labctl.run.records.store import MAX_RESULT_BYTES, Runs, is_result_id, read_json_file, shape_refusal
from labctl.run.records.typed import ShapeError, check_depth, check_interval, check_version, expect, from_json

READABLE = (1,)
UNVERSIONED = 1  # results written before schema_version was stamped read as version 1
FIX = "Re-run the benchmark, or move the file out of the run's bench/ folder."


@dataclass(frozen=True)
class Memory:
    setting: str
    value: float | None = None
    meaning: str | None = None


@dataclass(frozen=True)
class Target:
    engine: str = "?"
    profile: str = "?"
    model: str = ""
    environment_label: str = ""
    base_url: str = ""
    thinking: str | None = None
    memory: Memory | None = None
    max_batch_size: int | None = None


@dataclass(frozen=True)
class Override:
    flag: str
    value: Any


@dataclass(frozen=True)
class WorkloadFacts:
    name: str
    sha256: str
    file_sha256: str | None = None
    overrides: tuple[Override, ...] = ()
    slo: dict[str, float] | None = None
    spec: dict[str, Any] | None = None
    length_unit: str | None = None
    tokenizer: str | None = None


@dataclass(frozen=True)
class Level:
    concurrency: int
    requests: int = 0
    completed: int = 0
    repeat: int = 1
    target_rate: float | None = None
    client_cpu_share: float | None = None
    over_max_batch_size: bool = False
    warnings: tuple[str, ...] = ()
    telemetry: dict[str, Any] | None = None
    figures: dict[str, float | None] = field(default_factory=dict)  # per metric of the table: its value
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # and its 95 % interval, if any

    def value(self, metric: Metric) -> float | None:
        return value_in(metric, self.figures)

    def interval(self, metric: Metric) -> tuple[float, float] | None:
        return self.intervals.get(metric.key)


@dataclass(frozen=True)
class Capacity:
    note: str
    rule: str = ""
    slo: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchResult:
    bench_id: str
    run_id: str
    levels: tuple[Level, ...]
    target: Target
    workload: WorkloadFacts
    schema_version: int = UNVERSIONED
    status: str = "complete"
    created_at: str = ""
    finished_at: str | None = None
    warnings: tuple[str, ...] = ()
    telemetry: dict[str, Any] | None = None
    max_rate_meeting_slo: Capacity | None = None
    requests_file: str | None = None
    telemetry_file: str | None = None
    repeat: int = 1
    client: dict[str, Any] | None = None
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the file as written


def parse_result(data: Any) -> BenchResult:
    """A bench result from its JSON: ShapeError names a field of the wrong shape, FutureSchema a newer file."""
    check_depth(data)
    check_version(expect(dict, data), READABLE, UNVERSIONED)
    result: BenchResult = from_json(BenchResult, {k: v for k, v in data.items() if k != "data"})
    if result.workload.spec is not None:  # the workload as run: its SLO is read as numbers
        from_json(dict[str, float] | None, result.workload.spec.get("slo"), "workload.spec.slo")
    levels = tuple(
        with_metrics(level, raw, f"levels[{i}]")
        for i, (level, raw) in enumerate(zip(result.levels, data["levels"], strict=True))
    )
    return dataclasses.replace(result, levels=levels, data=data)


def with_metrics(level: Level, data: dict[str, Any], where: str) -> Level:
    """A level's metrics (and their intervals), read by the metric table."""
    figures: dict[str, float | None] = {}
    intervals: dict[str, tuple[float, float]] = {}
    for metric in METRICS:
        if metric.key in DERIVED:
            continue
        figures[metric.key] = from_json(float | None, data.get(metric.key), f"{where}.{metric.key}")
        if metric.interval:
            found = from_json(tuple[float, ...] | None, data.get(f"{metric.key}_ci95"), f"{where}.{metric.key}_ci95")
            check_interval(found, f"{where}.{metric.key}_ci95")
            if found is not None:
                intervals[metric.key] = (found[0], found[1])
    return dataclasses.replace(level, figures=figures, intervals=intervals)


def load_result(path: Path) -> BenchResult:
    """One bench result file, typed; a wrong shape or a newer schema is one line (BadInput)."""
    data = read_json_file(path, "bench result", MAX_RESULT_BYTES)
    try:
        return parse_result(data)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, ShapeError) and isinstance(data, dict) and "schema_version" not in data:
            exc = ShapeError(exc.field, f"{exc.problem}; it has no schema_version: an older labctl wrote it")
        raise shape_refusal("bench result", path, exc, FIX) from None


def load_results(runs: Runs, run_id: str, skipped: Callable[[str], None] | None = None) -> list[BenchResult]:
    """Every result of a run, oldest first; one that cannot be read is reported to `skipped` and left out,
    never hiding the others."""
    folder = runs.dir(run_id) / "bench"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(load_result(path))
        except BadInput as exc:
            if skipped:
                skipped(f"skipped {exc}")
    return found


def find_result(runs: Runs, bench_id: str) -> tuple[BenchResult, Path]:
    if not is_result_id(bench_id, "b"):
        raise BadInput(
            f"{bench_id[:80]!r} is not a bench id (like b20261203-015815-a1b2c3). "
            "List a run's results with `labctl bench list RUN_ID`."
        )
    for run_id in runs.all_ids():
        path = runs.dir(run_id) / "bench" / f"{bench_id}.json"
        if path.is_file():
            return load_result(path), path
    raise BadInput(
        f"no bench result {bench_id} under {runs.root}. List a run's results with `labctl bench list RUN_ID`."
    )
