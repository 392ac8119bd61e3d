"""What one measured level says: its summary with intervals and telemetry, the warnings that mark it
(over a batch limit, shared, busier than this client, partial), and the line said when it is done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labctl.bench.bootstrap import request_intervals
from labctl.bench.metric_table import BY_KEY, View, shown_in, value_in
from labctl.bench.prompt_slots import SHARED_ON_PURPOSE
from labctl.bench.request_file import append_requests
from labctl.bench.result_store import guarded
from labctl.bench.runner import (
    LevelOutcome,
)
from labctl.bench.telemetry import Window, peak_in_flight, summarise_engine, summarise_gpus
from labctl.bench.workloads import Workload
from labctl.host.engine.sampler import Sampler

# How many requests more than this client sent the engine may show in flight (a sample can catch a request
# the client has finished but the engine not yet) before the level is marked as shared.
IN_FLIGHT_SLACK = 1

SHARED_WARNING = "ENGINE SHARED"

BUSIER_WARNING = "ENGINE BUSIER THAN THIS CLIENT"

PARTIAL_WARNING = "PARTIAL"

UNEXPECTED_HITS_WARNING = "PREFIX CACHE HITS"
# Hits below this share of prompt tokens are left unsaid: a chat template's shared opening (a few tokens,
# at most a block or two of a long prompt) is served from the cache whatever labctl sends.
EXPECTED_HITS_NOISE_PCT = 1.0


def summarise_run(
    outcome: LevelOutcome,
    workload: Workload,
    limit: int | None,
    index: int,
    repeat: int,
    requests_path: Path,
    sampler: Sampler,
    windows: list[Window],
) -> dict[str, Any]:
    """One run of a level: its requests appended to the per-request file, its summary with intervals
    over its requests, and the telemetry of its measured window."""
    guarded(
        requests_path,
        "the measurement (per-request lines and summary)",
        lambda: append_requests(requests_path, index, repeat, outcome.concurrency, outcome.results),
    )
    run = _level(outcome, workload, limit)
    run |= request_intervals(outcome.results, outcome.duration_s, workload.slo)
    run["level"], run["repeat_index"] = index, repeat
    if outcome.started is not None:
        window = (outcome.started, outcome.started + outcome.duration_s)
        windows.append(window)
        run["telemetry"] = telemetry_of(sampler, [window])
        peak = peak_in_flight(sampler.engine.samples, [window])
        if peak is not None and peak > outcome.concurrency + IN_FLIGHT_SLACK:
            run["engine_busier"] = {"peak_in_flight": peak, "client_concurrency": outcome.concurrency}
            run["warnings"].append(
                f"{BUSIER_WARNING}: the engine had up to {peak:g} requests in flight while this client sent at "
                f"most {outcome.concurrency}: another client shared it, and these figures are not this load's"
            )
        unexpected = hits_warning(workload, run["telemetry"])
        if unexpected:
            run["warnings"].append(unexpected)
    return run


def hits_warning(workload: Workload, telemetry: dict[str, Any]) -> str | None:
    """The caveat of a level whose engine served prompt tokens from its prefix cache that the workload does
    not mean to share (its kind shares none, and it repeats no prompt on purpose)."""
    if workload.dataset_kind in SHARED_ON_PURPOSE or workload.repeats_prompts:
        return None
    hits = value_in(BY_KEY["prefix_cache_hit_rate"], {}, telemetry)
    if hits is None or hits <= EXPECTED_HITS_NOISE_PCT:
        return None
    return (
        f"{UNEXPECTED_HITS_WARNING}: the engine's prefix cache served {hits:.1f} % of prompt tokens although this "
        "workload sends no prompt twice: prompts sent before this bench (another client, an earlier bench on "
        "this engine) were cached, and its first-token times are too low"
    )


def telemetry_of(sampler: Sampler, windows: list[Window]) -> dict[str, Any]:
    return {
        "gpu": summarise_gpus(sampler.gpu.samples, windows),
        "engine": summarise_engine(sampler.engine.samples, sampler.kinds(), windows),
    }


def mark_partial(level: dict[str, Any], max_error_rate: float) -> None:
    """More than `max_error_rate` of the level's requests failed: its numbers describe the survivors only."""
    sent, failed = level.get("requests") or 0, level.get("failed") or 0
    if sent and failed / sent > max_error_rate:
        level["partial"] = True
        level["warnings"] = [
            *level["warnings"],
            f"{PARTIAL_WARNING}: {failed}/{sent} requests failed ({failed / sent:.0%}, above --max-error-rate "
            f"{max_error_rate:.0%}); the figures describe the requests that succeeded only",
        ]


def level_line(level: dict[str, Any]) -> str:
    parts = []
    for metric in shown_in(View.PROGRESS):
        value = level.get(metric.key)
        if value is None and metric.key == "goodput":
            continue  # no SLO, no goodput
        if value is None and metric.unit == "ms":
            parts.append(f"{metric.label} -")
        else:  # a rate the level could not compute reads 0
            parts.append(metric.said(f"{value or 0:.{metric.digits}f}"))
    return f"{level['completed']}/{level['requests']} ok, " + ", ".join(parts)


def every_request_failed(failures: dict[str, int], where: str, path: Path) -> str:
    """The one line for an endpoint that answered nothing: its commonest reason, and where the result is."""
    reason = max(failures, key=lambda r: failures[r]) if failures else "no reason given"
    return (
        f"every request failed: {reason[:200]} ({sum(failures.values())} {where}). The result is saved with "
        f"status failed, not a score: {path}"
    )


def _level(outcome: Any, workload: Workload, limit: int | None) -> dict[str, Any]:
    return _mark_over_limit(outcome.summary(workload.slo), limit)


def _mark_over_limit(level: dict[str, Any], limit: int | None) -> dict[str, Any]:
    level = {**level, "warnings": list(level["warnings"])}
    if limit is not None and level["concurrency"] > limit:
        level["over_max_batch_size"] = True
        level["warnings"].append(
            f"concurrency {level['concurrency']} is above the engine's built max_batch_size {limit} (--allow-over-batch-limit)"
        )
    return level
