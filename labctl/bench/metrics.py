"""Benchmark metrics with vLLM's definitions and key names (pure functions over request results).

TTFT: request sent -> first chunk carrying a token, with text or not (a special token streams as content
"", a tool call as tool_calls); the role-only chunk that opens a chat stream does not count.
TPOT: per request, (e2e - ttft) / (n_output - 1), only when n_output > 1 (n_output from the server's usage).
ITL: every gap between consecutive token-bearing chunks, pooled across requests.
E2E: request sent -> last token-bearing chunk. Queue time (open loop): due -> sent, kept apart.
A request whose timed chunks differ from its usage count is counted in `chunks_unlike_usage`, never left out.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any

from labctl.bench.client import RequestResult

PERCENTILES = (90, 95, 99)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def describe(name: str, values_ms: list[float], with_max: bool = False) -> dict[str, float]:
    out = {
        f"mean_{name}_ms": statistics.fmean(values_ms) if values_ms else math.nan,
        f"median_{name}_ms": statistics.median(values_ms) if values_ms else math.nan,
        f"std_{name}_ms": statistics.pstdev(values_ms) if len(values_ms) > 1 else (0.0 if values_ms else math.nan),
    }
    for q in PERCENTILES:
        out[f"p{q}_{name}_ms"] = percentile(values_ms, q)
    if with_max:
        out[f"max_{name}_ms"] = max(values_ms) if values_ms else math.nan
    return out


def level_metrics(results: list[RequestResult], duration_s: float, slo: dict[str, float] | None) -> dict[str, Any]:
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    ttft = [(r.first_token - r.sent) * 1000 for r in done if r.first_token is not None]
    e2e = [(r.chunk_times[-1] - r.sent) * 1000 for r in done if r.chunk_times]
    tpot = [
        ((r.chunk_times[-1] - r.first_token) * 1000) / (r.output_tokens - 1)
        for r in done
        if r.first_token is not None and r.output_tokens > 1
    ]
    itl = [(b - a) * 1000 for r in done for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]
    queue = [(r.sent - r.scheduled) * 1000 for r in results if r.scheduled]
    output_tokens = sum(r.output_tokens for r in done)
    input_tokens = sum(r.prompt_tokens if r.prompt_tokens is not None else r.input_len for r in done)
    lengths = [r.output_tokens for r in done]
    out: dict[str, Any] = {
        "completed": len(done),
        "failed": len(failed),
        "failures": dict(Counter((r.error or "unknown")[:120] for r in failed)),
        "duration_s": duration_s,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) / duration_s if duration_s > 0 else math.nan,
        "output_throughput": output_tokens / duration_s if duration_s > 0 else math.nan,
        "total_token_throughput": (input_tokens + output_tokens) / duration_s if duration_s > 0 else math.nan,
        "output_len": {
            "min": min(lengths, default=0),
            "median": statistics.median(lengths) if lengths else 0,
            "max": max(lengths, default=0),
        },
        "usage_fallback": any(not r.usage_reported for r in done),
        "chunks_unlike_usage": sum(1 for r in done if r.chunks_unlike_usage),
        "mean_queue_ms": statistics.fmean(queue) if queue else 0.0,
        "p99_queue_ms": percentile(queue, 99) if queue else 0.0,
    }
    out |= describe("ttft", ttft) | describe("tpot", tpot) | describe("itl", itl, with_max=True) | describe("e2el", e2e)
    if slo:
        good = [r for r in done if meets_slo(r, slo)]
        out["goodput"] = len(good) / duration_s if duration_s > 0 else math.nan
        out["good_requests"] = len(good)
        out["slo"] = dict(slo)
    else:
        out["goodput"] = None
    return out


def meets_slo(r: RequestResult, slo: dict[str, float]) -> bool:
    """A request with no timed token (a per-request line from an older client) cannot be shown to meet it."""
    if r.first_token is None or not r.chunk_times:
        return False
    ttft = (r.first_token - r.sent) * 1000
    e2e = (r.chunk_times[-1] - r.sent) * 1000
    tpot = (e2e - ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
    return (
        ttft <= slo.get("ttft_ms", math.inf)
        and tpot <= slo.get("tpot_ms", math.inf)
        and e2e <= slo.get("e2e_ms", math.inf)
    )


def clean(value: Any) -> Any:
    """NaN is not JSON: say null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value
