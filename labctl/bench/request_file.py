"""The per-request file beside a result (`requests_file`): one JSON line per measured request, enough
to recompute every summary of its level — when it was due and sent, TTFT, each inter-token gap,
output and prompt tokens, and the error. Times are CLOCK_MONOTONIC seconds (`sent`, `scheduled`)
and milliseconds (`ttft_ms`, `itl_ms`), the clock the harness engine also stamps its tokens with."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from labctl.bench.client import RequestResult
from labctl.bench.request_lines import FORMAT, request_line, result_of
from labctl.host.files.atomic import naming
from labctl.run.records.store import write_run_file


def append_requests(path: Path, level: int, repeat: int, concurrency: int, results: Iterable[RequestResult]) -> None:
    if not path.exists():  # group-writable like the run and its result
        write_run_file(path, json.dumps({"format": FORMAT}) + "\n")
    with naming(path), path.open("a", encoding="utf-8") as out:
        for index, r in enumerate(results):
            out.write(json.dumps(request_line(level, repeat, concurrency, index, r)) + "\n")


def read_requests(path: Path) -> dict[tuple[int, int], list[RequestResult]]:
    """(level, repeat) -> its requests, in the order they finished."""
    levels: dict[tuple[int, int], list[RequestResult]] = {}
    with path.open(encoding="utf-8") as lines:
        for raw in lines:
            line = json.loads(raw)
            if "format" in line:
                continue
            levels.setdefault((line["level"], line["repeat"]), []).append(result_of(line))
    return levels
