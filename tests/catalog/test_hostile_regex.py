"""A suite's regex check is a colleague's pattern run on an engine's answer: a catastrophic pattern
or a huge answer must cost a bounded time, whichever thread judges it."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.quality.suites import judge, load_suite

pytestmark = pytest.mark.process  # starts processes: the unit tier starts none


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expired(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def quick_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quarter of the shipped second: the bound is what is tested, and the unit tier stays fast."""
    monkeypatch.setattr("labctl.host.sandbox.regex.MATCH_SECONDS", 0.25)


SUITE = """\
version: '1'
description: test
cases:
- id: r
  prompt: what?
  check: {kind: regex, pattern: 'PATTERN'}
  reference: 'REFERENCE'
"""


def _suite(tmp_path: Path, pattern: str, reference: str) -> Path:
    folder = tmp_path / "suites" / "s"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite.yaml").write_text(SUITE.replace("PATTERN", pattern).replace("REFERENCE", reference))
    return tmp_path


@pytest.mark.parametrize("pattern", ["(a+)+b", "(a|a)*b", "(a*)*b", "(\\w+\\s?)*b"])
def test_catastrophic_pattern_on_its_reference_is_refused_at_load(tmp_path: Path, pattern: str) -> None:
    lab = _suite(tmp_path, pattern, "a" * 40)
    with deadline(10), pytest.raises(BadInput) as caught:
        load_suite(Lab(lab), "s")
    message = str(caught.value)
    assert message.startswith("suites/s/suite.yaml:") and "time limit" in message, message


def test_pattern_length_is_bounded(tmp_path: Path) -> None:
    lab = _suite(tmp_path, "a" * 2000, "a" * 2000)
    with pytest.raises(BadInput, match="pattern.*1000 characters"):
        load_suite(Lab(lab), "s")


@pytest.mark.parametrize("pattern", ["(a|a)*b", "(a+)+b"])
def test_catastrophic_pattern_on_an_answer_fails_the_case_in_bounded_time(pattern: str) -> None:
    with deadline(10):
        verdict = judge({"kind": "regex", "pattern": pattern}, "a" * 40)
    assert not verdict.passed and "time limit" in verdict.reason


def test_judging_in_a_worker_thread_is_bounded_too() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with deadline(20), ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda p: judge({"kind": "regex", "pattern": p}, "a" * 40), ["(a|a)*b", "a+"]))
    assert [v.passed for v in verdicts] == [False, True]


@pytest.mark.parametrize(
    "check",
    [{"kind": "regex", "pattern": "a*"}, {"kind": "exact", "expected": "a"}, {"kind": "json_schema", "schema": {}}],
)
def test_the_answer_text_is_bounded(check: dict[str, object]) -> None:
    with deadline(5):
        verdict = judge(check, "a" * 2_000_000)
    assert not verdict.passed and "characters" in verdict.reason
