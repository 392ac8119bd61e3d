"""What a real vLLM showed about the bench's own arithmetic, checked in-process: the SLO path for a request
without a timed token, requests whose chunks differ from usage counted per level, and the open loop's
"fell behind" judged on its sends alone."""

from __future__ import annotations

from labctl.bench.capacity import level_passes
from labctl.bench.client import RequestResult
from labctl.bench.metrics import level_metrics, meets_slo
from labctl.bench.request_lines import request_line, result_of
from labctl.bench.runner import LevelOutcome

SLO = {"ttft_ms": 500.0, "tpot_ms": 50.0}


def done(sent: float, first: float | None, n: int = 4, gap: float = 0.01, **facts: object) -> RequestResult:
    chunks = [] if first is None else [first + k * gap for k in range(n)]
    return RequestResult(
        ok=True, sent=sent, first_token=first, chunk_times=chunks, output_tokens=n, usage_reported=True, **facts
    )  # type: ignore[arg-type]


def test_a_request_without_a_timed_token_does_not_meet_the_slo_and_does_not_crash() -> None:
    # a per-request line of an older client: ok, usage counted, no TTFT (it crashed `--slo` with AssertionError)
    bare = done(0.0, None)
    assert meets_slo(bare, SLO) is False
    metrics = level_metrics([bare, done(0.0, 0.1)], 1.0, SLO)
    assert metrics["good_requests"] == 1 and metrics["completed"] == 2


def test_requests_streamed_unlike_usage_are_counted_flagged_and_kept() -> None:
    odd = done(0.0, 0.1, chunks_unlike_usage=True)
    summary = LevelOutcome(1, [odd, done(0.0, 0.1)], 1.0, 0.0, None).summary(None)
    assert summary["chunks_unlike_usage"] == 1 and summary["completed"] == 2
    assert any("usage count" in w for w in summary["warnings"])
    assert summary["median_e2el_ms"] is not None  # both requests are in the latency figures
    line = request_line(0, 0, 1, 0, odd)
    assert line["chunks_unlike_usage"] is True and result_of(line).chunks_unlike_usage


def open_loop(lag_s: float, drain_s: float) -> LevelOutcome:
    """Ten requests due every 0.1 s (10 req/s), each sent `lag_s` later than the one before it was due
    would be, the last answered `drain_s` after the last send."""
    results = []
    for i in range(10):
        due = i * 0.1
        r = done(due + i * lag_s, due + i * lag_s + 0.05)
        r.scheduled = due
        results.append(r)
    duration = results[-1].sent + drain_s
    return LevelOutcome(4, results, duration, 0.0, target_rate=10.0)


def test_a_long_drain_is_not_falling_behind() -> None:
    # the sends kept their schedule; the last answers took 3 s: "achieved" over the whole level was 2.6 req/s
    summary = open_loop(lag_s=0.0, drain_s=3.0).summary(None)
    assert not any(w.startswith("CLIENT FELL BEHIND") for w in summary["warnings"]), summary["warnings"]
    assert abs(summary["achieved_rate"] - 10.0) < 1e-6 and abs(summary["scheduled_rate"] - 10.0) < 1e-6
    assert level_passes(summary | {"good_requests": 10})


def test_sends_that_lag_their_schedule_are_falling_behind() -> None:
    summary = open_loop(lag_s=0.02, drain_s=0.1).summary(None)  # each send 20 ms later than the last: 8.3 req/s
    assert any(w.startswith("CLIENT FELL BEHIND") for w in summary["warnings"]), summary["warnings"]
    assert not level_passes(summary | {"good_requests": 10})
