"""One measured request as one JSON line (the per-request file's format, and what the bench client on a
remote host sends back): when it was due and sent, TTFT, each inter-token gap, tokens and the error; and
the request rebuilt from its line. Pure: the client image carries it."""

from __future__ import annotations

from typing import Any

from labctl.bench.client import RequestResult

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
        "dispatched": r.dispatched or None,
        "sent": r.sent,
        "ttft_ms": None if first is None else (first - r.sent) * 1000,
        "itl_ms": [(b - a) * 1000 for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)],
        "output_tokens": r.output_tokens,
        "prompt_tokens": r.prompt_tokens,
        "input_len": r.input_len,
        "usage_reported": r.usage_reported,
        "chunks_unlike_usage": r.chunks_unlike_usage,
    }


def result_of(line: dict[str, Any]) -> RequestResult:
    """A request back from its line: chunk arrival times rebuilt from TTFT and the gaps."""
    r = RequestResult(
        ok=bool(line["ok"]),
        error=line["error"],
        scheduled=line["scheduled"] or 0.0,
        dispatched=line.get("dispatched") or 0.0,
        sent=line["sent"],
        output_tokens=line["output_tokens"],
        prompt_tokens=line["prompt_tokens"],
        usage_reported=line["usage_reported"],
        input_len=line["input_len"],
        request_id=line.get("request_id") or "",
        chunks_unlike_usage=bool(line.get("chunks_unlike_usage")),
    )
    if line["ttft_ms"] is not None:
        t = r.sent + line["ttft_ms"] / 1000
        r.first_token = t
        r.chunk_times = [t]
        for gap in line["itl_ms"]:
            t += gap / 1000
            r.chunk_times.append(t)
    return r
