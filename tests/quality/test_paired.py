"""The paired statistic (exact McNemar) and the instruction checker that needs no NLTK: pure functions."""

from __future__ import annotations

import math

import pytest

from labctl.quality.instructions import followed, words
from labctl.quality.paired import mcnemar_p, pair, version_differences


@pytest.mark.parametrize(
    "only_a, only_b, p",
    [
        (0, 0, 1.0),
        (1, 0, 1.0),
        (5, 0, 2 / 32),  # 0.0625: five cases one way are not yet enough at 95 %
        (6, 0, 2 / 64),
        (0, 6, 2 / 64),
        (7, 3, 2 * sum(math.comb(10, k) for k in range(4)) / 1024),
    ],
)
def test_exact_mcnemar_p(only_a: int, only_b: int, p: float) -> None:
    assert mcnemar_p(only_a, only_b) == pytest.approx(p)


def cases(passed: str) -> list[dict[str, object]]:
    return [{"id": f"c{i}", "passed": ch == "1"} for i, ch in enumerate(passed)]


def test_pairing_counts_and_verdicts() -> None:
    a, b = cases("1111111100"), cases("1000000101")
    paired = pair(a, b)
    assert (paired.both_right, paired.both_wrong, paired.only_a, paired.only_b) == (2, 1, 6, 1)
    assert paired.verdict == "not distinguishable"  # 6 vs 1: p = 0.125
    better = pair(cases("1111111111"), cases("1000000011"))
    assert better.verdict == "A better" and pair(cases("1000000011"), cases("1111111111")).verdict == "B better"
    assert pair(cases("11"), [{"id": "other", "passed": True}]).unmatched == 3


def test_version_differences_name_the_field() -> None:
    task = {
        "name": "gsm8k",
        "task": "gsm8k",
        "version": "3.0",
        "set_version": "1",
        "dataset": {"source": "openai/gsm8k@aaa", "sha256": "1" * 64},
        "num_fewshot": 5,
        "generation": {"until": ["Question:"]},
        "metric": "exact_match",
        "filter": "strict-match",
    }
    a = {"suite": {"sha256": "x"}, "tasks": [task], "harness": {"version": "0.4.13"}}
    b = {"suite": {"sha256": "y"}, "tasks": [task | {"version": "4.0"}], "harness": {"version": "0.4.13"}}
    assert version_differences(a, b) == ["gsm8k: task version gsm8k v3.0 (set 1) vs gsm8k v4.0 (set 1)"]
    moved = {
        "suite": {"sha256": "z"},
        "tasks": [task | {"dataset": {"source": "openai/gsm8k@bbb", "sha256": "2" * 64}}],
    }
    assert any("dataset revision openai/gsm8k@aaa vs openai/gsm8k@bbb" in d for d in version_differences(a, moved))


@pytest.mark.parametrize(
    "answer, instruction, ok",
    [
        ("one two three", {"kind": "max_words", "args": {"n": 3}}, True),
        ("one two three four", {"kind": "max_words", "args": {"n": 3}}, False),
        ("all lower here", {"kind": "lowercase"}, True),
        ("Not lower", {"kind": "lowercase"}, False),
        ("HELLO", {"kind": "uppercase"}, True),
        ("bring an Umbrella", {"kind": "include_word", "args": {"word": "umbrella"}}, True),
        ("umbrellas only", {"kind": "include_word", "args": {"word": "umbrella"}}, False),
        ('```json\n{"a": 1}\n```', {"kind": "json"}, True),
        ("{a: 1}", {"kind": "json"}, False),
        ("- a\n- b\n", {"kind": "bullets", "args": {"n": 2}}, True),
        ("- a\n- b\n- c", {"kind": "bullets", "args": {"n": 2}}, False),
        ("no commas here", {"kind": "no_commas"}, True),
        ('"quoted"', {"kind": "quoted"}, True),
        ("Done. Stay dry.", {"kind": "ends_with", "args": {"phrase": "Stay dry."}}, True),
    ],
)
def test_instruction_checks(answer: str, instruction: dict[str, object], ok: bool) -> None:
    assert followed(answer, [instruction]) == [ok]


def test_unknown_instruction_kind_is_an_error_in_the_data() -> None:
    with pytest.raises(ValueError, match="unknown instruction kind"):
        followed("x", [{"kind": "nltk_sentences"}])
    assert words("it's 3 o'clock, isn't it?") == 5
