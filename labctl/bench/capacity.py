"""Capacity search: the highest request rate whose goodput still meets the SLO.

The rule (pure, so it is tested without a server): start at the workload's lowest rate (1 req/s
when it has none); while every level passed, double the rate (exponential bracketing); while every
level failed, halve it; once a passing rate lies below a failing one, bisect between the highest
pass below the lowest failure and that failure until they are within TOLERANCE of each other
(relative to the failing rate), or MAX_STEPS levels were run. A level passes when at least
ATTAINMENT of the requests it sent completed within every SLO and the client kept up (sent, first
send to last, at least KEPT_UP of its arrival schedule's rate)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labctl.bench.runner import KEPT_UP
from labctl.catalog.limits import MAX_RATE, MIN_RATE

TOLERANCE = 0.1
MAX_STEPS = 16
ATTAINMENT = 0.9
RULE = (
    "exponential bracketing (double while passing, halve while failing) then bisection until the highest "
    f"passing and lowest failing rate are within {TOLERANCE:.0%} of the failing rate, at most {MAX_STEPS} "
    f"levels; a level passes when >= {ATTAINMENT:.0%} of its requests met every SLO and the client sent at "
    f">= {KEPT_UP:.0%} of its arrival schedule's rate"
)


@dataclass(frozen=True)
class Trial:
    rate: float
    passed: bool


def level_passes(level: dict[str, Any]) -> bool:
    sent = level.get("requests") or 0
    good = level.get("good_requests")
    if good is None:  # a result written before good_requests was kept
        good = round((level.get("goodput") or 0.0) * (level.get("duration_s") or 0.0))
    attained = good / sent if sent else 0.0
    # against the schedule's own rate (gamma arrivals scatter around the target); older results: the target
    wanted = level.get("scheduled_rate") or level.get("target_rate") or 0.0
    kept_up = (level.get("achieved_rate") or 0.0) >= KEPT_UP * wanted
    return bool(attained >= ATTAINMENT and kept_up and not level.get("interrupted"))


def bounds(trials: list[Trial]) -> tuple[float | None, float | None]:
    """(highest pass below the lowest failure, lowest failure)."""
    failed = [t.rate for t in trials if not t.passed]
    ceiling = min(failed) if failed else None
    passed = [t.rate for t in trials if t.passed and (ceiling is None or t.rate < ceiling)]
    return (max(passed) if passed else None), ceiling


def next_rate(trials: list[Trial], start: float) -> float | None:
    """The next rate to try, or None when the search is done."""
    if not trials:
        return start
    if len(trials) >= MAX_STEPS:
        return None
    low, high = bounds(trials)
    if high is None:  # everything passed so far
        assert low is not None
        return None if low >= MAX_RATE else min(low * 2, MAX_RATE)
    if low is None:  # everything failed so far
        return None if high / 2 < MIN_RATE else high / 2
    if high - low <= TOLERANCE * high:
        return None
    return (low + high) / 2


def conclusion(trials: list[Trial], slo: dict[str, float]) -> dict[str, Any]:
    low, high = bounds(trials)
    if low is None:
        note = f"no rate tried met the SLO (the lowest tried: {min(t.rate for t in trials):g} req/s)"
    elif high is None:
        note = f"every rate tried met the SLO; the search stopped at {low:g} req/s (the ceiling or the step limit)"
    else:
        note = f"meets the SLO at {low:g} req/s, not at {high:g} req/s"
    return {
        "rate": low,
        "first_failing_rate": high,
        "bracketed": low is not None and high is not None,
        "converged": low is not None and high is not None and high - low <= TOLERANCE * high,
        "slo": dict(slo),
        "attainment": ATTAINMENT,
        "tolerance": TOLERANCE,
        "rule": RULE,
        "note": note,
        "evidence": [{"rate": t.rate, "meets_slo": t.passed} for t in trials],
    }
