"""labctl's bench client next to the engine: `python3 -m labctl.bench.on_host`, run in a container of
labctl's own image with host networking on the engine's host, so that the network between the controller
and the GPU host never enters TTFT. It reads one job (JSON) on stdin — the workload, the engine's address
on that host, limits — runs every level with the same client and runner as a local bench, and writes one
JSON object per line: `client` (where it runs), `level` (a level's summary), then `done` or `error`.
The controller stores the result (labctl/bench/session.py)."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labctl.bench.client import Target
from labctl.bench.environment import client_environment
from labctl.bench.runner import LevelProgress, outcome_of, run_level
from labctl.bench.workloads import Workload

MAX_JOB_BYTES = 64 * 1024 * 1024  # a workload spec plus at most its bounded dataset file


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"event": kind, **fields}), flush=True)


def workload_of(job: dict[str, Any], folder: Path) -> Workload:
    """The workload as the controller validated it; a file dataset is written where the spec names it."""
    spec = job["workload"]["spec"]
    if job.get("dataset_text") is not None:
        path = (folder / spec["dataset"]["path"]).resolve()
        if folder.resolve() not in path.parents:
            raise ValueError("the dataset path leaves the workload folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(job["dataset_text"], encoding="utf-8")
    return Workload(str(job["workload"]["name"]), spec, folder)


def run(job: dict[str, Any]) -> None:
    emit("client", environment=client_environment())
    target = Target(job["target"]["base_url"], job["target"]["model"], job.get("api_key"), job["target"]["thinking"])
    end = time.monotonic() + float(job["deadline"])
    with tempfile.TemporaryDirectory(prefix="labctl-workload-") as folder:
        workload = workload_of(job, Path(folder))
        for index, (concurrency, rate) in enumerate(workload.levels()):
            partial = LevelProgress()
            level_workload = workload.at_rate(rate)

            def progress(phase: str, done: int, total: int) -> None:
                if done == total:
                    emit("progress", phase=phase, done=done, total=total)

            level = run_level(target, level_workload, concurrency, index, job["request_timeout"], progress, partial)
            try:
                outcome = asyncio.run(asyncio.wait_for(level, max(0.0, end - time.monotonic())))
            except TimeoutError:
                outcome = outcome_of(concurrency, partial, rate, interrupted=True)
                emit("level", summary=outcome.summary(workload.slo))
                emit("timed_out", concurrency=concurrency)
                return
            emit("level", summary=outcome.summary(workload.slo))
    emit("done")


def main() -> None:
    raw = sys.stdin.buffer.read(MAX_JOB_BYTES + 1)
    if len(raw) > MAX_JOB_BYTES:
        emit("error", message=f"the job is larger than {MAX_JOB_BYTES} bytes")
        sys.exit(2)
    try:
        run(json.loads(raw))
    except (KeyError, TypeError, ValueError) as exc:
        emit("error", message=f"a malformed job: {type(exc).__name__}: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
