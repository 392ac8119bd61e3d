"""How a level is dealt over client worker processes (labctl/bench/shards.py): every prompt exactly once, a
session's turns together on one worker, the streams summing to the level's, and an open loop's arrival
schedule the one a single process would have drawn."""

from __future__ import annotations

import json
import random

import pytest
from helpers.support import REPO

from labctl.bench.client import Target
from labctl.bench.level_job import LevelJob
from labctl.bench.prompts import Prompt
from labctl.bench.runner import LevelOutcome, LevelPrompts, arrival_offsets
from labctl.bench.shards import scheduled, shares, split
from labctl.bench.workloads import load_workload, with_overrides
from labctl.catalog.lab import find_lab


def job(rate: list[float] | None = None, concurrency: int = 7, workers: int = 3, sessions: bool = False) -> LevelJob:
    workload = with_overrides(load_workload(find_lab(REPO), "chat-sweep"), [concurrency], 40, 8, 4, rate)
    measured = [
        Prompt(f"p{i}", 8, 4, session=(i // 4 if sessions else -1), think_s=0.0) for i in range(40)
    ]  # fmt: skip
    warm = [Prompt(f"w{i}", 8, 4) for i in range(10)]
    target = Target("http://127.0.0.1:1/v1", "m")
    return LevelJob(target, workload, concurrency, 0, 0, LevelPrompts(warm, measured), 10.0, 60.0, workers)


@pytest.mark.parametrize(("total", "workers"), [(7, 3), (1200, 4), (2000, 6), (5, 5), (3, 1)])
def test_the_streams_are_shared_as_evenly_as_they_go(total: int, workers: int) -> None:
    parts = shares(total, workers)
    assert sum(parts) == total and max(parts) - min(parts) <= 1 and len(parts) == workers


@pytest.mark.parametrize("rate", [None, [25.0]])
@pytest.mark.parametrize("sessions", [False, True])
def test_every_prompt_goes_to_exactly_one_worker(rate: list[float] | None, sessions: bool) -> None:
    whole = job(rate, sessions=sessions and rate is None)
    parts = split(whole)
    assert [p.concurrency for p in parts] == [3, 2, 2] and all(p.workers == 1 for p in parts)
    sent = sorted(p.text for part in parts for p in part.prompts.measured)
    assert sent == sorted(p.text for p in whole.prompts.measured)
    warmed = sorted(p.text for part in parts for p in part.prompts.warm)
    assert warmed == sorted(p.text for p in whole.prompts.warm)


def test_a_sessions_turns_stay_together_in_order() -> None:
    for part in split(job(sessions=True)):
        turns: dict[int, list[str]] = {}
        for prompt in part.prompts.measured:
            turns.setdefault(prompt.session, []).append(prompt.text)
        for session, texts in turns.items():
            assert texts == [f"p{i}" for i in range(4 * session, 4 * session + 4)]


def test_no_more_workers_than_streams() -> None:
    parts = split(job(concurrency=2, workers=8))
    assert [p.concurrency for p in parts] == [1, 1]


def test_the_open_loop_schedule_is_the_one_process_schedule_dealt_out() -> None:
    whole = job([25.0])
    spec = whole.workload.spec
    one = arrival_offsets(25.0, whole.workload.burstiness, random.Random(f"{spec['seed']}:arrivals:0"))
    expected = [next(one) for _ in whole.prompts.measured]
    assert [p.at_s for p in scheduled(whole)] == expected
    dealt = sorted(p.at_s or 0.0 for part in split(whole) for p in part.prompts.measured)
    assert dealt == sorted(expected)
    assert all(p.at_s is None for p in scheduled(job(None)))  # a closed loop stays unscheduled


def test_a_traces_own_times_are_kept() -> None:
    whole = job([25.0])
    traced = [Prompt(p.text, 8, 4, at_s=float(i) / 2) for i, p in enumerate(whole.prompts.measured)]
    whole = LevelJob(whole.target, whole.workload, 7, 0, 0, LevelPrompts([], traced), 10.0, 60.0, 3)
    assert [p.at_s for p in scheduled(whole)] == [p.at_s for p in traced]


def test_the_saturation_flag_is_the_busiest_workers_not_the_sum() -> None:
    spread = LevelOutcome(8, [], 10.0, 12.0, None, workers=2, busiest_cpu_share=0.6)
    summary = spread.summary(None)
    assert summary["client_cpu_share"] == 1.2 and summary["client_workers"] == 2
    assert not any(w.startswith("CLIENT SATURATED") for w in summary["warnings"])
    busy = LevelOutcome(8, [], 10.0, 12.0, None, workers=2, busiest_cpu_share=0.9)
    [flag] = [w for w in busy.summary(None)["warnings"] if w.startswith("CLIENT SATURATED")]
    assert flag.startswith("CLIENT SATURATED: its busiest of 2 worker processes used 90% of a core")
    late = LevelOutcome(8, [], 10.0, 2.0, None, loop_late_p99_ms=30.0, loop_late_max_ms=50.0, workers=3)
    late.busiest_cpu_share = 0.1
    [flag] = [w for w in late.summary(None)["warnings"] if w.startswith("CLIENT LATE")]
    assert flag.startswith("CLIENT LATE: the latest of its 3 worker processes' loops woke 30.0 ms late")


def test_a_job_for_a_worker_carries_the_barrier() -> None:
    decoded = json.loads(split(job())[0].encode(barrier=True))
    assert decoded["barrier"] is True and decoded["client_workers"] == 1 and decoded["concurrency"] == 3
