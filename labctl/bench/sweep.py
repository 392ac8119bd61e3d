"""The levels of a bench one after another (or the capacity search's rates), each saved as it finishes,
with what the bench is doing said as it goes; an interrupt or the deadline leaves a partial result saved."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labctl.bench import capacity
from labctl.bench.bench_request import BenchRequest, SweepProgress
from labctl.bench.client import Target
from labctl.bench.intervals import combine_repeats
from labctl.bench.level_job import LevelJob
from labctl.bench.level_summary import (
    SHARED_WARNING,
    every_request_failed,
    level_line,
    mark_partial,
    summarise_run,
    telemetry_of,
)
from labctl.bench.prompt_slots import PromptSlots, level_prompts, slots_for
from labctl.bench.remote_client import OnHost
from labctl.bench.result_store import save_result
from labctl.bench.runner import (
    LevelOutcome,
    LevelProgress,
    Progress,
    client_failures,
    outcome_of,
    run_level,
)
from labctl.bench.shards import run_sharded
from labctl.bench.sweep_plan import PlannedLevel, SweepClock, plan_levels, plan_line
from labctl.bench.telemetry import Window
from labctl.bench.workloads import Workload
from labctl.catalog.batch_cap import BatchCap
from labctl.errors import LabctlError
from labctl.host.engine.sampler import Sampler
from labctl.run.records.record import now


class Sweep:
    """Runs the levels one after another, saving the result after each, and says what it is doing."""

    def __init__(
        self,
        request: BenchRequest,
        workload: Workload,
        target: Target,
        limit: int | None,
        result: dict[str, Any],
        path: Path,
        progress: SweepProgress,
        say: Callable[[str], None],
        end: float,
        slots: PromptSlots | None = None,
    ) -> None:
        self.request, self.workload, self.target, self.limit = request, workload, target, limit
        self.result, self.path, self.progress, self.say, self.end = result, path, progress, say, end
        self.requests_path: Path = path.with_name(path.stem + ".requests.jsonl")
        self.sampler: Sampler | None = None
        self.on_host: OnHost | None = None  # a run on a remote host: its client runs there
        self.shared: str | None = None  # who else held the engine (--allow-shared-engine)
        self.current: str | None = None  # the level being measured, for what a failed write lost
        self.cap = BatchCap(None)  # the engine's batch cap: a level above it is marked
        self.slots = slots or slots_for(
            workload, request.repeat, request.prompt_start, capacity.MAX_STEPS if request.find_max_rate else 0
        )

    def run_once(
        self, workload: Workload, concurrency: int, index: int, repeat: int, tick: Progress, partial: LevelProgress
    ) -> LevelOutcome:
        """One run of a level, here or on the run's host; TimeoutError past the deadline."""
        left = max(0.0, self.end - time.monotonic())
        timeout = self.request.request_timeout
        prompts = level_prompts(workload, index, self.slots, repeat)
        workers = self.request.client_workers
        if self.on_host is None and workers > 1:
            job = LevelJob(self.target, workload, concurrency, index, repeat, prompts, timeout, left, workers)
            return run_sharded(job, tick, partial)
        if self.on_host is None:
            level_run = run_level(self.target, workload, concurrency, index, timeout, tick, partial, prompts)
            return asyncio.run(asyncio.wait_for(level_run, left))
        on_host_target = Target(
            str(self.result["target"]["base_url"]), self.target.model, self.target.api_key, self.target.thinking
        )
        job = LevelJob(on_host_target, workload, concurrency, index, repeat, prompts, timeout, left, workers)
        return self.on_host.run_level(job, tick, partial)

    def finish_run(
        self, outcome: LevelOutcome, workload: Workload, index: int, repeat: int, windows: list[Window]
    ) -> dict[str, Any]:
        assert self.sampler is not None
        run = summarise_run(outcome, workload, self.limit, index, repeat, self.requests_path, self.sampler, windows)
        queued = self.cap.queued(outcome.concurrency)
        if queued is not None and not run.get("over_max_batch_size"):  # a built engine's limit says it already
            run["warnings"].append(queued)
        if self.shared is not None:
            run["shared_engine"] = True
            run["warnings"].append(f"{SHARED_WARNING}: {self.shared} measured the engine too (--allow-shared-engine)")
        return run

    def run_all(self) -> None:
        planned = plan_levels(self.workload)
        self.say(plan_line(planned))
        clock = SweepClock(planned)
        for index, level in enumerate(planned):
            self.measure(index, level, clock, len(planned))
            clock.finish_level()
            if index + 1 < len(planned):
                left = len(planned) - index - 1
                self.say(f"sweep ETA {SweepClock.clock(clock.eta(0))} for {left} more level(s), from the pace so far")

    def search(self) -> None:
        spec = self.workload.spec
        cap = max(spec["concurrency"])
        rates = [r for r in self.workload.rates() if r]
        start = min(rates) if rates else 1.0
        template = PlannedLevel(cap, start, self.workload.requests_for(cap), self.workload.warmup_for(cap))
        self.say(plan_line([template] * capacity.MAX_STEPS, search=True))
        self.say(f"search rule: {capacity.RULE}; SLO {spec['slo']}")
        trials: list[capacity.Trial] = []
        index = 0
        try:
            while (rate := capacity.next_rate(trials, start)) is not None:
                level = PlannedLevel(cap, rate, template.requests, template.warmup)
                summary = self.measure(index, level, SweepClock([level]), None)
                passed = capacity.level_passes(summary)
                summary["meets_slo"] = passed
                trials.append(capacity.Trial(rate, passed))
                self.say(f"  rate {rate:g}/s {'meets' if passed else 'misses'} the SLO")
                index += 1
        except (KeyboardInterrupt, LabctlError):
            if trials:  # what the finished levels showed, marked as a search that did not end
                found = capacity.conclusion(trials, spec["slo"]) | {"converged": False, "interrupted": True}
                save_result(self.path, self.result | {"max_rate_meeting_slo": found})
            raise
        self.result["max_rate_meeting_slo"] = capacity.conclusion(trials, spec["slo"])
        self.say("max_rate_meeting_slo: " + self.result["max_rate_meeting_slo"]["note"])

    def measure(self, index: int, planned: PlannedLevel, clock: SweepClock, count: int | None) -> dict[str, Any]:
        concurrency, workload, request = planned.concurrency, self.workload.at_rate(planned.rate), self.request
        result, path = self.result, self.path
        where = f"level {index + 1}" + (f"/{count}" if count else "") + f" {planned.name}"
        self.current = planned.name

        def tick(phase: str, done: int, total: int) -> None:
            in_level = done + (planned.warmup if phase.startswith("measure") else 0)
            self.progress(f"{where} {phase.split(' ')[0]}", done, total, clock.eta(in_level))

        runs: list[dict[str, Any]] = []
        windows: list[Window] = []
        for repeat in range(request.repeat):
            partial = LevelProgress()
            if self.sampler is not None:
                self.sampler.mark()
            try:
                outcome = self.run_once(workload, concurrency, index, repeat, tick, partial)
                if self.sampler is not None:
                    self.sampler.mark()
            except (TimeoutError, KeyboardInterrupt) as exc:
                outcome = outcome_of(concurrency, partial, planned.rate, interrupted=True)
                runs.append(self.finish_run(outcome, workload, index, repeat, windows))
                result["levels"].append(runs[0] if len(runs) == 1 else combine_repeats(runs))
                if isinstance(exc, KeyboardInterrupt):
                    result.update(status="interrupted", finished_at=now())
                    save_result(path, result)
                    self.say(f"interrupted: partial result saved to {path}")
                    raise
                result.update(status="timed_out", finished_at=now())
                save_result(path, result)
                raise LabctlError(
                    f"the bench passed its deadline of {request.deadline:g} s (--deadline) at {planned.name}; "
                    f"the partial result is saved, marked timed_out: {path}"
                ) from None
            run = self.finish_run(outcome, workload, index, repeat, windows)
            runs.append(run)
            own = client_failures(outcome.results)
            if own:  # the client's own limits (open files, memory): not the engine's failures, not a number
                result["levels"].append(run)
                result.update(status="failed", finished_at=now(), failure=own)
                save_result(path, result)
                raise LabctlError(f"{own} at {planned.name}: the level measures the client, not the engine. {path}")
            if run["requests"] and not run["completed"]:
                result["levels"].append(run)
                result.update(status="failed", finished_at=now())
                save_result(path, result)
                raise LabctlError(every_request_failed(run["failures"], f"requests at {planned.name}", path))
        level = runs[0] if len(runs) == 1 else combine_repeats(runs)
        if len(runs) > 1 and self.sampler is not None:
            level["telemetry"] = telemetry_of(self.sampler, windows)
        mark_partial(level, request.max_error_rate)
        result["levels"].append(level)
        self.say(f"{where} done: {level_line(level)}")
        for warning in level["warnings"]:
            self.say(f"warning ({planned.name}): {warning}")
        save_result(path, result | {"status": "running"})
        return level
