"""The capacity search rule and rate-sweep workloads, without a server: a pure function of the evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.bench import capacity
from labctl.bench.workloads import Workload, check_workload, parse_slo, with_overrides
from labctl.catalog.limits import MAX_RATE
from labctl.catalog.sourcefile import parse_yaml_mapping
from labctl.errors import BadInput


def search(true_capacity: float, start: float) -> dict:
    trials: list[capacity.Trial] = []
    while (rate := capacity.next_rate(trials, start)) is not None:
        trials.append(capacity.Trial(rate, rate <= true_capacity))
    return capacity.conclusion(trials, {"ttft_ms": 100.0})


@pytest.mark.parametrize(("true_capacity", "start"), [(7.3, 1.0), (7.3, 40.0), (0.5, 0.25), (123.0, 2.0)])
def test_search_brackets_then_bisects_to_the_tolerance(true_capacity: float, start: float) -> None:
    found = search(true_capacity, start)
    assert found["bracketed"] and found["converged"]
    assert found["rate"] <= true_capacity < found["first_failing_rate"]
    assert found["first_failing_rate"] - found["rate"] <= capacity.TOLERANCE * found["first_failing_rate"]
    assert len(found["evidence"]) <= capacity.MAX_STEPS
    rates = [e["rate"] for e in found["evidence"]]
    assert rates[0] == start and len(set(rates)) == len(rates)  # never measures a rate twice


def test_search_that_never_passes_or_never_fails_says_so() -> None:
    nothing = search(0.0, 1.0)
    assert nothing["rate"] is None and not nothing["bracketed"] and "no rate tried met the SLO" in nothing["note"]
    everything = search(MAX_RATE * 2, 1.0)
    assert everything["rate"] is not None and everything["first_failing_rate"] is None
    assert "every rate tried met the SLO" in everything["note"]


def test_a_level_passes_only_with_attainment_and_a_client_that_kept_up() -> None:
    level = {"requests": 100, "good_requests": 90, "achieved_rate": 9.6, "target_rate": 10.0}
    assert capacity.level_passes(level)
    assert not capacity.level_passes(level | {"good_requests": 89})
    assert not capacity.level_passes(level | {"achieved_rate": 9.4})
    assert not capacity.level_passes(level | {"interrupted": True})


def _workload(text: str) -> Workload:
    src = parse_yaml_mapping(text, Path("w.yaml"))
    return Workload("w", check_workload(src, src.data), Path("."))


BASE = "description: x\ndataset: {kind: random, input_len: 8, output_len: 8}\nconcurrency: [1, 4]\n"


def test_a_rate_list_makes_one_level_per_concurrency_and_rate() -> None:
    w = _workload(BASE + "request_rate: [1, 2.5]\n")
    assert w.levels() == [(1, 1.0), (1, 2.5), (4, 1.0), (4, 2.5)]
    assert w.at_rate(2.5).spec["request_rate"] == 2.5 and w.spec["request_rate"] == [1.0, 2.5]
    assert _workload(BASE).levels() == [(1, None), (4, None)]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("request_rate: [1, .inf]\n", ["request_rate[1]", "finite"]),
        ("request_rate: [1, 0]\n", ["request_rate[1]"]),
        ("request_rate: []\n", ["request_rate"]),
        ("request_rate: [1, true]\n", ["request_rate[1]"]),
        ("request_rate: '5'\n", ["request_rate"]),
        ("request_rate: [" + ", ".join(["1"] * 33) + "]\n", ["request_rate", "levels"]),
    ],
)
def test_bad_rate_lists_are_refused_with_where(line: str, words: list[str]) -> None:
    with pytest.raises(BadInput) as caught:
        _workload(BASE + line)
    message = str(caught.value)
    assert message.startswith("w.yaml") and all(w in message for w in words), message


def test_overrides_are_kept_in_order_with_the_files_hash() -> None:
    w = _workload(BASE)
    changed = with_overrides(w, requests=5, request_rate=[2.0, 4.0], slo=parse_slo("ttft_ms=500,tpot_ms=50"))
    assert [flag for flag, _ in changed.overrides] == ["--request-rate", "--requests", "--slo"]
    assert changed.file_sha256 == w.sha256 != changed.sha256
    assert changed.describe_overrides() == "--request-rate 2,4 --requests 5 --slo ttft_ms=500,tpot_ms=50"
    assert with_overrides(w) is w


@pytest.mark.parametrize("text", ["ttft=5", "ttft_ms=0", "ttft_ms=nan", "ttft_ms=1,ttft_ms=2", "ttft_ms=1e99", ""])
def test_bad_slo_flags(text: str) -> None:
    with pytest.raises(BadInput, match="--slo"):
        parse_slo(text)


def test_bad_rate_flags() -> None:
    with pytest.raises(BadInput, match="--request-rate"):
        with_overrides(_workload(BASE), request_rate=[float("inf")])


def test_the_plan_and_the_sweep_eta() -> None:
    from labctl.bench.sweep_plan import PlannedLevel, SweepClock, plan_levels, plan_line

    w = _workload(BASE + "request_rate: [2, 4]\nrequests: 8\nwarmup_per_concurrency: 1\n")
    levels = plan_levels(w)
    assert [(lv.concurrency, lv.rate, lv.requests, lv.warmup) for lv in levels] == [
        (1, 2.0, 8, 1),
        (1, 4.0, 8, 1),
        (4, 2.0, 8, 4),
        (4, 4.0, 8, 4),
    ]
    line = plan_line(levels)
    assert line.startswith("plan: 4 level(s) c=1 rate=2/s, c=1 rate=4/s, c=4 rate=2/s, c=4 rate=4/s; 32 measured")
    assert "estimated ≥ 12s" in line  # 8/2 + 8/4 + 8/2 + 8/4 s of arrivals
    closed = plan_line(plan_levels(_workload(BASE)))
    assert "from the pace of the first requests" in closed
    clock = SweepClock([PlannedLevel(1, None, 10, 0), PlannedLevel(2, 1.0, 10, 0)])
    clock.started -= 5.0  # 5 s for the first 5 requests: 1 s each
    eta = clock.eta(5)
    assert eta is not None and 14.5 < eta < 15.5  # 5 left at 1 s, then 10 paced at 1/s (not faster than arrivals)
    assert SweepClock.clock(3725) == "1h02m" and SweepClock.clock(75) == "1m15s" and SweepClock.clock(None) == "?"
