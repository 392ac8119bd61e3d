"""The bench result as a typed value: made from the document the bench writes (bench/session.py), and read
back by one loader that checks a result file's schema version and shape, or says in one line which file,
which field, and what to do. `bench`, `compare`, `report` and the study read its fields; its metrics are read
by the metric table (bench/metric_table.py). The document itself is kept as `data`: `to_json()` gives it
back as written, so the file keeps its exact format. A level of N > 1 repeats that an older labctl gave
bootstrap intervals over its per-run values (about [min, max]) is read with Student-t ones, recomputed from
the per-run values it stores."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.bench.intervals import REQUEST_METHOD, repeat_intervals, repeat_method
from labctl.bench.metric_table import METRICS, Metric, value_in
from labctl.catalog.batch_cap import BatchCap
from labctl.catalog.engine_settings import Effective
from labctl.errors import BadInput
from labctl.host.identity import writer_gone
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
    accelerator: str | None = None
    engine: str = "?"
    profile: str = "?"
    model: str = ""
    environment_label: str = ""
    base_url: str = ""
    thinking: str | None = None
    memory: Memory | None = None
    max_batch_size: int | None = None
    batch_cap: BatchCap | None = None  # the engine's cap on sequences at once, and where it was read
    settings: dict[str, Effective] | None = None  # what the engine computed with (engine_settings.py)
    gpus: int | None = None  # GPUs the engine held (real or simulated); None: none, or not known (older results)
    gpu_hour_price: float | None = None  # the host's price of one GPU-hour (its hosts-file entry): cost per token


@dataclass(frozen=True)
class Override:
    flag: str
    value: Any


@dataclass(frozen=True)
class PromptFacts:
    """How a bench chose its prompts (labctl.bench.prompt_slots): none sent twice unless repeat_prompts."""

    seed: int = 0
    sent: int = 0
    distinct: int = 0
    first: int = 0  # the workload's first prompt this bench sent (a study's later benches start further on)
    available: int | None = None  # distinct prompts the dataset holds; None: synthetic, without end
    repeat_prompts: bool = False  # the workload sends prompts more than once on purpose
    shared_on_purpose: bool = False  # shared-prefix or multi-turn: requests share prefixes by design
    rule: str | None = None  # the sampler's rule (ShareGPT: vLLM's)


@dataclass(frozen=True)
class DatasetFacts:
    """A Hub dataset a bench read, offline, from the Hub cache."""

    repo: str
    revision: str
    commit: str | None
    file: str
    bytes: int | None = None


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
    prompts: PromptFacts | None = None
    dataset: DatasetFacts | None = None


@dataclass(frozen=True)
class KvBound:
    """A level with more streams than the engine's KV cache holds at once (a study's plan estimated it): the
    engine queues and preempts there, and that is what the level measures."""

    streams: int  # how many of the workload's sequences the KV cache holds, by the plan's memory fit


@dataclass(frozen=True)
class Level:
    concurrency: int
    requests: int = 0
    completed: int = 0
    repeat: int = 1
    target_rate: float | None = None
    client_cpu_share: float | None = None  # of one core; above 1 with several client processes
    client_workers: int = 1  # client processes that shared the streams (--client-workers)
    client_cpu_busiest_share: float | None = None
    duration_s: float | None = None
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    partial: bool = False  # more than --max-error-rate failed
    shared_engine: bool = False  # another bench held the engine (--allow-shared-engine)
    engine_busier: dict[str, Any] | None = None  # the engine held more requests than this client sent
    usage_fallback: bool = False
    chunks_unlike_usage: int = 0
    meets_slo: bool | None = None  # a capacity search's level: whether it met the SLO
    over_max_batch_size: bool = False
    duration_limit_s: float | None = None  # the workload's duration_s: nothing was sent after it
    unsent: int = 0  # prompts the duration left unsent
    send_lag_p99_ms: float | None = None  # open loop: the sender's own lateness against the schedule
    send_lag_max_ms: float | None = None
    loop_late_p99_ms: float | None = None  # the client's event loop: how late its probe woke (its timestamps' error)
    loop_late_max_ms: float | None = None
    kv_bound: KvBound | None = None
    warnings: tuple[str, ...] = ()
    telemetry: dict[str, Any] | None = None
    figures: dict[str, float | None] = field(default_factory=dict)  # per metric of the table: its value
    # and its 95 % interval: a key present when the level carries `<key>_ci95`, even as null
    intervals: dict[str, tuple[float, float] | None] = field(default_factory=dict)

    def value(self, metric: Metric) -> float | None:
        return value_in(metric, self.figures, self.telemetry)

    def interval(self, metric: Metric) -> tuple[float, float] | None:
        return self.intervals.get(metric.key)

    def metric_cells(self) -> dict[str, float | None]:
        """Every metric of the table, and for those with an interval `<key>_ci95_low` and `_high` (exports)."""
        cells: dict[str, float | None] = {}
        for metric in METRICS:
            cells[metric.key] = self.value(metric)
            if metric.interval:
                bounds = self.interval(metric)
                cells[f"{metric.key}_ci95_low"] = bounds[0] if bounds else None
                cells[f"{metric.key}_ci95_high"] = bounds[1] if bounds else None
        return cells

    @property
    def interval_basis(self) -> str:
        """What the level's 95 % intervals are over: `n=3 runs` (Student-t) or `n=200 requests` (bootstrap)."""
        return f"n={self.repeat} runs" if self.repeat > 1 else f"n={self.completed} requests"

    @property
    def engine_shared(self) -> bool:
        return self.shared_engine or bool(self.engine_busier)

    def engine_counter(self, common: str, part: str) -> float | None:
        """One of the engine's own telemetry figures in this level (e.g. preemptions/increase, waiting/max)."""
        found = ((self.telemetry or {}).get("engine") or {}).get(common)
        value = found.get(part) if isinstance(found, dict) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def kv_bound_text(self) -> str | None:
        """`KV-bound (cache holds ~19 streams): preemptions +12, waiting max 41`, with the engine's own counters."""
        if self.kv_bound is None:
            return None
        said = []
        for common, part, word in (("preemptions", "increase", "preemptions +"), ("waiting", "max", "waiting max ")):
            value = self.engine_counter(common, part)
            said.append(f"{word}{value:g}" if value is not None else f"{common} not exported")
        return f"KV-bound (cache holds ~{self.kv_bound.streams} streams): " + ", ".join(said)


@dataclass(frozen=True)
class Capacity:
    note: str
    rule: str = ""
    slo: dict[str, Any] = field(default_factory=dict)
    converged: bool | None = None


@dataclass(frozen=True)
class SharedEngine:
    allowed: bool = True
    holder: str | None = None


@dataclass(frozen=True)
class Client:
    host: str | None = None
    labctl_version: str | None = None


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
    client: Client | None = None
    writer: dict[str, Any] | None = None
    interval_method: str | None = None
    max_error_rate: float = 0.1
    shared_engine: SharedEngine | None = None
    failure: str | None = None
    interrupted_reason: str | None = None
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the document as written

    def to_json(self) -> dict[str, Any]:
        """The document as the bench wrote it (its key order, and the fields no reader types, kept)."""
        return self.data

    def changed(self, **fields: Any) -> BenchResult:
        """The same result with top-level fields of its document set (the document's key order kept)."""
        return parse_result({**self.data, **fields})


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
    if any(repeat_intervals(raw, ()) is not None for raw in data["levels"]):
        method = f"{REQUEST_METHOD} within a run; across repeats {repeat_method(result.repeat)}, recomputed on reading"
        result = dataclasses.replace(result, interval_method=method)
    if result.target.gpus is not None:
        levels = tuple(per_gpu(level, result.target.gpus, result.target.gpu_hour_price) for level in levels)
    return dataclasses.replace(result, levels=levels, data=data)


def per_gpu(level: Level, gpus: int, price: float | None = None) -> Level:
    """A level with its per-GPU figures (each total over the GPUs the engine held, its interval scaled alike) and,
    given the host's GPU-hour price, its cost per million output tokens: price × GPUs / (tokens/s × 3600) × 10^6,
    whose interval is the throughput's carried through that (decreasing) map: the price is set, not measured."""
    if gpus < 1:
        raise ShapeError("target.gpus", f"{gpus}: an engine that held GPUs held at least one")
    if price is not None and not (math.isfinite(price) and 0 < price <= 10_000):
        raise ShapeError("target.gpu_hour_price", f"{price}: a price per GPU-hour is above 0 and at most 10000")
    figures, intervals = dict(level.figures), dict(level.intervals)
    per_second = None if price is None else price * gpus / 3600 * 1e6  # a million tokens' cost at one token a second

    def cost(rate: float | None) -> float | None:
        return per_second / rate if per_second is not None and rate else None

    for metric in METRICS:
        if metric.per_gpu_of is not None:
            total = level.figures.get(metric.per_gpu_of)
            figures[metric.key] = None if total is None else total / gpus
            if metric.per_gpu_of in level.intervals:
                bounds = level.intervals[metric.per_gpu_of]
                intervals[metric.key] = None if bounds is None else (bounds[0] / gpus, bounds[1] / gpus)
        elif metric.cost_of is not None and price is not None:
            figures[metric.key] = cost(level.figures.get(metric.cost_of))
            if metric.cost_of in level.intervals:
                bounds = level.intervals[metric.cost_of]
                low, high = (cost(bounds[1]), cost(bounds[0])) if bounds else (None, None)
                intervals[metric.key] = (low, high) if low is not None and high is not None else None
    return dataclasses.replace(level, figures=figures, intervals=intervals)


def with_metrics(level: Level, data: dict[str, Any], where: str) -> Level:
    """A level's metrics and their intervals, read by the metric table; numbers kept as written (a rate of 2
    stays 2, as every printer showed it)."""
    figures: dict[str, float | None] = {}
    intervals: dict[str, tuple[float, float] | None] = {}
    for metric in METRICS:
        if not metric.stored:
            continue
        from_json(float | None, data.get(metric.key), f"{where}.{metric.key}")
        figures[metric.key] = _possible(data.get(metric.key), f"{where}.{metric.key}")
        ci = f"{metric.key}_ci95"
        if metric.interval and ci in data:
            found = from_json(tuple[float, ...] | None, data[ci], f"{where}.{ci}")
            check_interval(found, f"{where}.{ci}")
            if found is not None:
                low, high = data[ci][0], data[ci][1]  # a Student-t interval over few runs may reach below 0
                if not (math.isfinite(low) and math.isfinite(high)) or low > high:
                    raise ShapeError(f"{where}.{ci}", f"[{low}, {high}] is not an interval (finite, low end first)")
            intervals[metric.key] = None if found is None else (data[ci][0], data[ci][1])
    for median, p99 in (("median_ttft_ms", "p99_ttft_ms"), ("median_tpot_ms", "p99_tpot_ms"),
                        ("median_itl_ms", "p99_itl_ms"), ("median_e2el_ms", "p99_e2el_ms")):  # fmt: skip
        low, high = figures.get(median), figures.get(p99)
        if low is not None and high is not None and low > high * (1 + 1e-9):
            raise ShapeError(f"{where}.{median}", f"the median ({low}) is above the p99 ({high}): impossible")
    _check_counts(level, where)
    for key, again in (repeat_intervals(data, list(intervals)) or {}).items():
        intervals[key] = None if again is None else (again[0], again[1])
    return dataclasses.replace(level, target_rate=data.get("target_rate"), figures=figures, intervals=intervals)


def _possible(value: Any, where: str) -> float | None:
    """A figure as written, refused when no measurement gives it: negative, infinite or not a number."""
    if value is None:
        return None
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ShapeError(where, f"{value!r} is not a possible measurement (a time, rate or share is finite and >= 0)")
    return value  # type: ignore[no-any-return]


def _check_counts(level: Level, where: str) -> None:
    if level.concurrency < 1:
        raise ShapeError(f"{where}.concurrency", f"{level.concurrency}: a level has at least one stream")
    for name in ("requests", "completed", "failed"):
        if getattr(level, name) < 0:
            raise ShapeError(f"{where}.{name}", f"{getattr(level, name)}: a count is >= 0")
    if level.completed + level.failed > level.requests and level.requests > 0:
        raise ShapeError(
            f"{where}.completed",
            f"{level.completed} completed and {level.failed} failed of {level.requests} requests: more than were sent",
        )


def level_from_json(data: Any, where: str = "level") -> Level:
    """One level from its JSON, as a result file holds it."""
    return with_metrics(from_json(Level, data, where), expect(dict, data, where), where)


def load_result(path: Path) -> BenchResult:
    """One bench result file, typed; a wrong shape or a newer schema is one line (BadInput)."""
    data = read_json_file(path, "bench result", MAX_RESULT_BYTES)
    try:
        return parse_result(data)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, ShapeError) and isinstance(data, dict) and "schema_version" not in data:
            exc = ShapeError(exc.field, f"{exc.problem}; it has no schema_version: an older labctl wrote it")
        raise shape_refusal("bench result", path, exc, FIX) from None


def settle(result: BenchResult) -> BenchResult:
    """A result still `running` whose writer is gone (a SIGKILLed bench) is interrupted, said so on reading;
    the file is left as it is (it may belong to another user)."""
    if result.status == "running" and writer_gone(result.writer):
        who = result.writer or {}
        return result.changed(
            status="interrupted",
            interrupted_reason=(
                f"its writer (pid {str(who.get('process', '?')).split(':')[0]} on {who.get('host')}) is gone: the "
                "bench was killed before it could say so"
            ),
        )
    return result


def list_results(runs: Runs, run_id: str, skipped: Callable[[str], None] | None = None) -> list[BenchResult]:
    """Every result of a run, oldest first, settled; one that cannot be read is reported to `skipped` and left
    out, never hiding the others."""
    folder = runs.dir(run_id) / "bench"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(settle(load_result(path)))
        except BadInput as exc:
            if skipped:
                skipped(f"skipped {exc}")
    return found


def find_result(runs: Runs, bench_id: str) -> tuple[BenchResult, Path]:
    """A result by its bench id, under any run, settled."""
    if not is_result_id(bench_id, "b"):
        raise BadInput(
            f"{bench_id[:80]!r} is not a bench id (like b20261203-015815-a1b2c3). "
            "List a run's results with `labctl bench list RUN_ID`."
        )
    for run_id in runs.all_ids():
        path = runs.dir(run_id) / "bench" / f"{bench_id}.json"
        if path.is_file():
            return settle(load_result(path)), path
    raise BadInput(
        f"no bench result {bench_id} under {runs.root}. List a run's results with `labctl bench list RUN_ID`."
    )
