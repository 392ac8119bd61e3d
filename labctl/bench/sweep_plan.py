"""What a sweep will do, said before it starts, and how long the rest will take, said while it runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from labctl.bench.workloads import Workload


@dataclass(frozen=True)
class PlannedLevel:
    concurrency: int
    rate: float | None
    requests: int
    warmup: int

    @property
    def name(self) -> str:
        return f"c={self.concurrency}" + (f" rate={self.rate:g}/s" if self.rate else "")


def plan_levels(workload: Workload) -> list[PlannedLevel]:
    return [PlannedLevel(c, r, workload.requests_for(c), workload.warmup_for(c)) for c, r in workload.levels()]


def plan_line(levels: list[PlannedLevel], search: bool = False) -> str:
    measured = sum(lv.requests for lv in levels)
    warm = sum(lv.warmup for lv in levels)
    paced = [lv for lv in levels if lv.rate]
    known = sum(lv.requests / lv.rate for lv in paced if lv.rate)
    if search:
        head = f"plan: capacity search, up to {len(levels)} levels of {levels[0].requests} requests at concurrency ≤ {levels[0].concurrency}"
    else:
        head = f"plan: {len(levels)} level(s) " + ", ".join(lv.name for lv in levels)
        head += f"; {measured} measured + {warm} warm-up requests"
    if search:
        estimate = "duration: each level takes requests ÷ rate; the ETA follows the search"
    elif len(paced) == len(levels):
        estimate = f"estimated ≥ {_clock(known)} (arrivals alone)"
    else:
        estimate = "estimated duration: from the pace of the first requests (the ETA follows)"
    return f"{head}; {estimate}"


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@dataclass
class SweepClock:
    """ETA for the whole sweep from the pace so far: seconds per request (warm-up included), times the
    requests still to send; paced levels cannot go faster than their arrivals."""

    levels: list[PlannedLevel]
    started: float = field(default_factory=time.monotonic)
    done_before: int = 0  # requests of levels already finished
    current: int = 0  # index of the level running

    def total(self, index: int) -> int:
        return self.levels[index].requests + self.levels[index].warmup

    def finish_level(self) -> None:
        self.done_before += self.total(self.current)
        self.current += 1

    def eta(self, done_in_level: int) -> float | None:
        done = self.done_before + done_in_level
        elapsed = time.monotonic() - self.started
        if done <= 0 or elapsed <= 0:
            return None
        per_request = elapsed / done
        remaining = 0.0
        for index in range(self.current, len(self.levels)):
            left = self.total(index) - (done_in_level if index == self.current else 0)
            level = self.levels[index]
            floor = left / level.rate if level.rate else 0.0
            remaining += max(left * per_request, floor)
        return remaining

    @staticmethod
    def clock(seconds: float | None) -> str:
        return "?" if seconds is None else _clock(seconds)
