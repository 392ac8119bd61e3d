"""Each interval kind covers the truth about 95 % of the time at the sizes labctl uses: 2,000 draws from a
known distribution (scripts/interval_coverage.py, fixed seeds), 93-97 % of their intervals holding it."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest
from helpers.support import REPO

from labctl.bench.intervals import t_interval, wilson_interval

LOW, HIGH = 0.93, 0.97


def coverage_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("interval_coverage", REPO / "scripts" / "interval_coverage.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    return module


def test_three_repeats_get_the_student_t_interval_and_one_run_none() -> None:
    low, high = t_interval([100.0, 105.0, 110.0]) or [0.0, 0.0]
    assert round(low, 1) == 92.6 and round(high, 1) == 117.4  # a bootstrap said [100, 110]
    assert t_interval([100.0]) is None and t_interval([100.0, None, float("nan")]) is None


def test_a_perfect_pass_rate_is_not_said_to_be_certain() -> None:
    low, high = wilson_interval(12, 12) or [0.0, 0.0]
    assert round(low, 3) == 0.758 and high == 1.0  # a bootstrap over the cases said 100 %-100 %
    low, high = wilson_interval(0, 12) or [1.0, 1.0]
    assert low == 0.0 and round(high, 3) == 0.242
    low, high = wilson_interval(6, 12) or [0.0, 0.0]
    assert low < 0.5 < high and abs((low + high) / 2 - 0.5) < 1e-12
    assert wilson_interval(0, 0) is None


def test_student_t_covers_the_true_mean_of_three_repeats() -> None:
    row = coverage_script().student_t()
    assert LOW <= row.coverage <= HIGH, row


def test_wilson_covers_the_true_pass_rate_of_twelve_cases() -> None:
    row = coverage_script().wilson()
    assert LOW <= row.coverage <= HIGH, row


@pytest.mark.process  # 2,000 bootstraps of 1,000 resamples: tens of seconds on a busy machine
def test_the_request_bootstrap_covers_the_true_median_and_mean_ttft_of_200_requests() -> None:
    for row in coverage_script().bootstrap(stats=("median", "mean")):
        assert LOW <= row.coverage <= HIGH, row
