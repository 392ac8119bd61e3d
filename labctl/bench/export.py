"""The per-request file beside a result (`requests_file`): one JSON line per measured request, enough
to recompute every summary of its level — when it was due and sent, TTFT, each inter-token gap,
output and prompt tokens, and the error. Times are CLOCK_MONOTONIC seconds (`sent`, `scheduled`)
and milliseconds (`ttft_ms`, `itl_ms`), the clock the harness engine also stamps its tokens with."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from labctl.bench.client import RequestResult
from labctl.run.store import write_run_file

FORMAT = "labctl-requests/1"


def request_line(level: int, repeat: int, concurrency: int, index: int, r: RequestResult) -> dict[str, Any]:
    first = r.first_token
    return {
        "level": level,
        "repeat": repeat,
        "concurrency": concurrency,
        "index": index,
        "request_id": r.request_id,
        "ok": r.ok,
        "error": r.error,
        "scheduled": r.scheduled or None,
        "sent": r.sent,
        "ttft_ms": None if first is None else (first - r.sent) * 1000,
        "itl_ms": [(b - a) * 1000 for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)],
        "output_tokens": r.output_tokens,
        "prompt_tokens": r.prompt_tokens,
        "input_len": r.input_len,
        "usage_reported": r.usage_reported,
    }


def append_requests(path: Path, level: int, repeat: int, concurrency: int, results: Iterable[RequestResult]) -> None:
    if not path.exists():  # group-writable like the run and its result
        write_run_file(path, json.dumps({"format": FORMAT}) + "\n")
    with path.open("a", encoding="utf-8") as out:
        for index, r in enumerate(results):
            out.write(json.dumps(request_line(level, repeat, concurrency, index, r)) + "\n")


def result_of(line: dict[str, Any]) -> RequestResult:
    """A request back from its line: chunk arrival times rebuilt from TTFT and the gaps."""
    r = RequestResult(
        ok=bool(line["ok"]),
        error=line["error"],
        scheduled=line["scheduled"] or 0.0,
        sent=line["sent"],
        output_tokens=line["output_tokens"],
        prompt_tokens=line["prompt_tokens"],
        usage_reported=line["usage_reported"],
        input_len=line["input_len"],
        request_id=line.get("request_id") or "",
    )
    if line["ttft_ms"] is not None:
        t = r.sent + line["ttft_ms"] / 1000
        r.first_token = t
        r.chunk_times = [t]
        for gap in line["itl_ms"]:
            t += gap / 1000
            r.chunk_times.append(t)
    return r


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
