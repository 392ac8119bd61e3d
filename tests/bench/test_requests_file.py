"""The per-request file: written beside a result, read back, it recomputes every summary of its level."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from labctl.bench.client import RequestResult
from labctl.bench.metrics import level_metrics
from labctl.bench.request_file import append_requests, read_requests


def some_requests(seed: int, n: int) -> list[RequestResult]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sent = 1000.0 + i * rng.uniform(0.001, 0.05)
        if i % 9 == 4:
            out.append(RequestResult(ok=False, error="HTTP 503: busy", sent=sent, scheduled=sent - 0.002))
            continue
        first = sent + rng.uniform(0.02, 0.3)
        chunks = [first]
        for _ in range(rng.randint(0, 40)):
            chunks.append(chunks[-1] + rng.uniform(0.0, 0.05))
        out.append(
            RequestResult(
                ok=True,
                sent=sent,
                scheduled=sent - rng.uniform(0, 0.01),
                first_token=first,
                chunk_times=chunks,
                output_tokens=len(chunks),
                prompt_tokens=rng.randint(10, 500),
                usage_reported=i % 7 != 0,
                input_len=128,
                request_id=f"labctl-1-{i}",
            )
        )
    return out


def close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def test_the_file_recomputes_every_summary_of_each_level_and_repeat(tmp_path: Path) -> None:
    path = tmp_path / "b1.requests.jsonl"
    slo = {"ttft_ms": 150.0, "tpot_ms": 30.0}
    written = {(0, 0): some_requests(1, 60), (0, 1): some_requests(2, 60), (1, 0): some_requests(3, 120)}
    for (level, repeat), results in written.items():
        append_requests(path, level, repeat, 8 * (level + 1), results)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "labctl-requests/1"} and len(lines) == 1 + 240
    first = json.loads(lines[1])
    assert {"sent", "ttft_ms", "itl_ms", "output_tokens", "error", "request_id"} <= set(first)
    back = read_requests(path)
    assert back.keys() == written.keys()
    for key, results in written.items():
        expected = level_metrics(results, 12.5, slo)
        recomputed = level_metrics(back[key], 12.5, slo)
        assert expected.keys() == recomputed.keys()
        different = [k for k in expected if not close(expected[k], recomputed[k])]
        assert different == [], different
