"""labctl's bench client next to the engine: `python3 -m labctl.bench.bench_job`, run in a container of
labctl's own image with host networking on the engine's host, so that the network between the controller
and the GPU host never enters TTFT. It reads one job (one line of JSON) on stdin, and stops when stdin closes before it is done
(host/remote/lifeline.py) — one run of one level: its prompts
(made on the controller, where the workload, its dataset and the model's tokenizer are), the request
settings, the engine's address on that host, limits — runs it with the same runner as a local bench, and
writes one JSON object per line: `client` (where it runs), `request` (each measured request as it
finishes, in the per-request file's format), `progress`, then `level` (how long measuring took, the
client's CPU) or `timed_out`, or `error`. The controller does the rest (repeats, intervals, telemetry,
the capacity search: labctl/bench/sweep.py).

The same process is a worker of a sharded level (labctl/bench/shards.py): with `barrier`, it writes `warm`
after its warm-up and waits for a line `{"start_at": T}` on stdin, T on this machine's monotonic clock, so that
every worker measures from one moment; with `client_workers` above 1 it shards the level itself (a remote
host's client)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labctl.bench.client import Target
from labctl.bench.environment import client_environment
from labctl.bench.level_job import MAX_WORKERS, PROTOCOL, LevelJob
from labctl.bench.prompts import Prompt
from labctl.bench.request_lines import request_line
from labctl.bench.runner import LevelOutcome, LevelProgress, LevelPrompts, lateness, run_level
from labctl.bench.shards import run_sharded
from labctl.bench.workloads import Workload
from labctl.host.remote.lifeline import CONTROLLER_GONE, Lifeline, read_job

MAX_JOB_BYTES = 64 * 1024 * 1024  # a level's prompts
PROGRESS_EVERY_S = 0.5


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"event": kind, "now": time.perf_counter(), **fields}), flush=True)


def prompts_of(job: dict[str, Any]) -> LevelPrompts:
    def made(items: list[dict[str, Any]]) -> list[Prompt]:
        return [
            Prompt(
                text=str(p["text"]),
                input_len=int(p["input_len"]),
                max_tokens=int(p["max_tokens"]),
                messages=tuple({str(k): str(v) for k, v in m.items()} for m in p["messages"]),
                session=int(p["session"]),
                think_s=float(p["think_s"]),
                at_s=None if p.get("at_s") is None else float(p["at_s"]),
            )
            for p in items
        ]

    return LevelPrompts(warm=made(job["prompts"]["warm"]), measured=made(job["prompts"]["measured"]))


class CommonStart:
    """A worker's wait for the common start: `warm` out, the start time in; from then on stdin's end means the
    controller is gone (before it, an end is that too)."""

    def __init__(self) -> None:
        self.lifeline: Lifeline | None = None

    async def __call__(self) -> float:
        emit("warm")
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.readline)
        if not line:
            os._exit(CONTROLLER_GONE)
        start_at = float(json.loads(line)["start_at"])
        self.lifeline = Lifeline()
        return start_at


def run(job: dict[str, Any], lifeline: Lifeline | None = None) -> None:
    workers = int(job.get("client_workers") or 1)
    if job.get("protocol") != PROTOCOL:
        emit("client", protocol=PROTOCOL, environment=client_environment())
        raise ValueError(f"job protocol {job.get('protocol')!r}; this client speaks {PROTOCOL}")
    emit("client", protocol=PROTOCOL, environment=client_environment(workers))
    target = Target(job["target"]["base_url"], job["target"]["model"], job.get("api_key"), job["target"]["thinking"])
    concurrency, index, repeat = int(job["concurrency"]), int(job["level"]), int(job["repeat"])
    if not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"client_workers {workers}: 1 to {MAX_WORKERS}")
    common_start = CommonStart() if job.get("barrier") else None
    partial = LevelProgress()
    sent, said_at = [0], [0.0]

    def flush() -> None:
        while sent[0] < len(partial.results):
            r = partial.results[sent[0]]
            emit("request", started=partial.started, line=request_line(index, repeat, concurrency, sent[0], r))
            sent[0] += 1

    def progress(phase: str, done: int, total: int) -> None:
        flush()
        now = time.monotonic()
        if done == total or now - said_at[0] >= PROGRESS_EVERY_S:
            said_at[0] = now
            emit("progress", phase=phase, done=done, total=total)

    with tempfile.TemporaryDirectory(prefix="labctl-workload-") as folder:
        workload = Workload(str(job["workload"]["name"]), job["workload"]["spec"], Path(folder))
        deadline = max(0.0, float(job["deadline"]))
        start_cpu = time.process_time()
        outcome: LevelOutcome | None = None
        try:
            if workers > 1:
                level_job = LevelJob(
                    target, workload, concurrency, index, repeat, prompts_of(job), job["request_timeout"], deadline,
                    workers,
                )  # fmt: skip
                outcome = run_sharded(level_job, progress, partial)
            else:
                level = run_level(
                    target, workload, concurrency, index, job["request_timeout"], progress, partial, prompts_of(job),
                    common_start,
                )  # fmt: skip
                outcome = asyncio.run(asyncio.wait_for(level, deadline))
            ended = "level"
        except TimeoutError:
            ended = "timed_out"
        flush()
        duration = time.perf_counter() - partial.started if partial.started else 0.0
        cpu = time.process_time() - (partial.cpu_started if partial.started else start_cpu)
        late_p99, late_max = lateness(partial.loop_late_ms)
        if outcome is not None and outcome.workers > 1:  # the workers' own figures, not this coordinator's
            duration, cpu = outcome.duration_s, outcome.client_cpu_s
            late_p99, late_max = outcome.loop_late_p99_ms, outcome.loop_late_max_ms
        for line in (lifeline, common_start.lifeline if common_start else None):
            if line is not None:
                line.done()
        emit(
            ended,
            started=partial.started,
            duration_s=duration,
            client_cpu_s=cpu,
            requests=len(partial.results),
            unsent=outcome.unsent if outcome else 0,
            duration_limit_s=outcome.duration_limit_s if outcome else None,
            loop_late_p99_ms=late_p99,
            loop_late_max_ms=late_max,
            client_workers=outcome.workers if outcome else workers,
            client_cpu_busiest_share=outcome.busiest_cpu_share if outcome else None,
        )


def main() -> None:
    raw = read_job(MAX_JOB_BYTES)
    if raw is None:
        emit("error", message=f"the job is larger than {MAX_JOB_BYTES} bytes")
        sys.exit(2)
    try:
        job = json.loads(raw)
        # a worker waiting for the common start reads stdin itself until then (CommonStart)
        run(job, None if isinstance(job, dict) and job.get("barrier") else Lifeline())
    except (KeyError, TypeError, ValueError) as exc:
        emit("error", message=f"a malformed job: {type(exc).__name__}: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
