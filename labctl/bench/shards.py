"""One level over several client processes, for loads one event loop on one core cannot time right: each
worker (`python -m labctl.bench.bench_job`, the client a remote host runs) holds a share of the streams and
of the prompts, warms up, then waits; all start measuring at one moment of this machine's monotonic clock
(CLOCK_MONOTONIC is machine-wide, so every worker's timestamps are on one clock); their requests stream back
as they finish and are merged into one level.

How the level is split: the streams as evenly as they go; a closed loop's sessions dealt round-robin (each
worker sends its own until they run out: a worker that finishes early does not take another's); an open
loop's arrival schedule made once, here, for the whole level and dealt round-robin, so that the sum of the
workers' sends is the level's schedule. Each worker's concurrency cap holds for its share."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from labctl.bench.level_job import (
    MODULE,
    PROTOCOL,
    LevelJob,
    event_of,
    outcome_of,
    protocol_refusal,
    request_of,
)
from labctl.bench.prompts import Prompt, sessions
from labctl.bench.runner import LevelOutcome, LevelProgress, LevelPrompts, arrival_offsets
from labctl.errors import LabctlError
from labctl.host.remote.client_processes import ClientProcess, lines, stop_all

Progress = Callable[[str, int, int], None]
START_MARGIN_S = 0.2  # from the last worker's `warm` to the common start: every worker has read its line by then


def shares(total: int, workers: int) -> list[int]:
    """`total` streams over `workers` as evenly as they go (the first ones take the remainder)."""
    return [total // workers + (1 if k < total % workers else 0) for k in range(workers)]


def scheduled(job: LevelJob) -> list[Prompt]:
    """The measured prompts, each with its due time: a trace's own, else the level's arrival schedule (as one
    process would draw it); a closed loop's stay unscheduled."""
    measured = job.prompts.measured
    spec = job.workload.spec
    if not measured or measured[0].at_s is not None or not spec["request_rate"]:
        return list(measured)
    rng = random.Random(f"{spec['seed']}:arrivals:{job.level}")
    ramp = float(spec.get("ramp_up_s") or 0.0)
    offsets = arrival_offsets(spec["request_rate"], job.workload.burstiness, rng, ramp)
    return [dataclasses.replace(p, at_s=offset) for p, offset in zip(measured, offsets, strict=False)]


def split(job: LevelJob) -> list[LevelJob]:
    """The level's jobs, one per worker (never more workers than streams)."""
    count = max(1, min(job.workers, job.concurrency))
    measured = scheduled(job)
    if measured and measured[0].at_s is not None:  # open loop: the schedule dealt out
        parts = [measured[k::count] for k in range(count)]
    else:
        groups = sessions(measured)
        parts = [[p for group in groups[k::count] for p in group] for k in range(count)]
    warm_groups = sessions(job.prompts.warm)
    warm = [[p for group in warm_groups[k::count] for p in group] for k in range(count)]
    return [
        dataclasses.replace(job, concurrency=streams, prompts=LevelPrompts(warm[k], parts[k]), workers=1)
        for k, streams in enumerate(shares(job.concurrency, count))
    ]


@dataclasses.dataclass
class Worker:
    index: int
    job: LevelJob
    process: ClientProcess
    final: dict[str, Any] | None = None
    done: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # phase word: (done, total)

    def who(self) -> str:
        return f"worker {self.index + 1} (pid {self.process.pid})"

    def planned(self, word: str) -> int:
        """The prompts of a phase (`warm-up` or `measure`) this worker was given, before it says so itself."""
        return len(self.job.prompts.warm if word == "warm-up" else self.job.prompts.measured)


def run_sharded(job: LevelJob, progress: Progress, partial: LevelProgress) -> LevelOutcome:
    """One run of one level over `job.workers` processes. Fills `partial` as requests come back (Ctrl-C keeps
    them); TimeoutError past the deadline, as the one-process runner."""
    workers: list[Worker] = []
    try:
        for index, part in enumerate(split(job)):
            workers.append(Worker(index, part, ClientProcess(MODULE, part.encode(barrier=True))))
        _follow(job, workers, progress, partial)
    finally:
        stop_all([w.process for w in workers])
    if any(w.final is not None and w.final["event"] == "timed_out" for w in workers):
        raise TimeoutError
    finals = [outcome_of(w.final, w.job, []) for w in workers if w.final is not None]
    outcome = LevelOutcome(
        job.concurrency,
        list(partial.results),
        max(f.duration_s for f in finals),
        sum(f.client_cpu_s for f in finals),
        job.workload.spec["request_rate"],
    )
    outcome.started = partial.started
    outcome.workers = len(workers)
    outcome.busiest_cpu_share = max(f.client_cpu_s / f.duration_s if f.duration_s > 0 else 0.0 for f in finals)
    outcome.unsent = sum(f.unsent for f in finals)
    outcome.duration_limit_s = finals[0].duration_limit_s
    # the latest worker's loop: every timestamp it took can be that late
    outcome.loop_late_p99_ms = max((f.loop_late_p99_ms for f in finals if f.loop_late_p99_ms is not None), default=None)
    outcome.loop_late_max_ms = max((f.loop_late_max_ms for f in finals if f.loop_late_max_ms is not None), default=None)
    return outcome


def _follow(job: LevelJob, workers: list[Worker], progress: Progress, partial: LevelProgress) -> None:
    """Reads every worker's events until each has said how its level ended."""
    by_process = {id(w.process): w for w in workers}
    warm: set[int] = set()
    end = time.monotonic() + job.deadline + 30  # the workers stop themselves at the deadline; this is a backstop
    while any(w.final is None for w in workers):
        if time.monotonic() > end:
            raise TimeoutError
        for process, line in lines([w.process for w in workers if w.final is None], 0.5):
            worker = by_process[id(process)]
            if line is None:
                if worker.final is None:
                    raise LabctlError(
                        f"bench client {worker.who()} ended without saying it finished ({process.ended()})"
                    )
                continue
            _event(job, worker, workers, line, warm, progress, partial)


def _event(
    job: LevelJob,
    worker: Worker,
    workers: list[Worker],
    line: bytes,
    warm: set[int],
    progress: Progress,
    partial: LevelProgress,
) -> None:
    event = event_of(line, worker.who())
    if event is None:
        return
    kind = event["event"]
    if kind == "client" and event.get("protocol") != PROTOCOL:
        raise protocol_refusal(event.get("protocol", 1), sys.executable, worker.who())
    if kind == "warm":
        warm.add(worker.index)
        if len(warm) == len(workers):
            start_at = time.perf_counter() + START_MARGIN_S
            for each in workers:
                each.process.send(json.dumps({"start_at": start_at}).encode())
            partial.cpu_started, partial.started = time.process_time(), start_at
    elif kind == "request":
        partial.results.append(request_of(event.get("line")))
    elif kind == "progress":
        word = str(event.get("phase", "")).split(" ")[0]
        worker.done[word] = (int(event.get("done", 0)), int(event.get("total", 0)))
        done = sum(w.done.get(word, (0, 0))[0] for w in workers)
        total = sum(w.done[word][1] if word in w.done else w.planned(word) for w in workers)
        progress(f"{word} c={job.concurrency}", done, total)
    elif kind == "error":
        raise LabctlError(f"bench client {worker.who()} refused its job: {event.get('message')}")
    elif kind in ("level", "timed_out"):
        worker.final = event
