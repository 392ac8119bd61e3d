"""Two evaluations of one suite (or task) version, case by case: both right, both wrong, only A, only B, and
an exact McNemar test on the cases that differ. Two percentages cannot say whether A beat B; the discordant
cases can."""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any

ALPHA = 0.05
METHOD = "exact McNemar test (two-sided binomial on the discordant cases), 95 %"


@dataclass(frozen=True)
class Paired:
    both_right: int
    both_wrong: int
    only_a: int
    only_b: int
    p_value: float
    verdict: str  # "A better", "B better" or "not distinguishable"
    unmatched: int = 0  # cases present on one side only (left out of the test)

    @property
    def cases(self) -> int:
        return self.both_right + self.both_wrong + self.only_a + self.only_b

    def to_json(self) -> dict[str, Any]:
        return {
            "both_right": self.both_right,
            "both_wrong": self.both_wrong,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "p_value": self.p_value,
            "verdict": self.verdict,
            "unmatched": self.unmatched,
            "method": METHOD,
        }

    def line(self) -> str:
        return (
            f"{self.cases} cases paired: both right {self.both_right}, both wrong {self.both_wrong}, only A "
            f"{self.only_a}, only B {self.only_b}; exact McNemar p={self.p_value:.3g}: {self.verdict}"
        )


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact p-value: under no difference, each discordant case is A's or B's with probability 1/2."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def pair(a_cases: list[dict[str, Any]], b_cases: list[dict[str, Any]]) -> Paired:
    a = {c["id"]: bool(c["passed"]) for c in a_cases}
    b = {c["id"]: bool(c["passed"]) for c in b_cases}
    shared = [i for i in a if i in b]
    counts = {(True, True): 0, (False, False): 0, (True, False): 0, (False, True): 0}
    for case in shared:
        counts[(a[case], b[case])] += 1
    only_a, only_b = counts[(True, False)], counts[(False, True)]
    p = mcnemar_p(only_a, only_b)
    verdict = "not distinguishable" if p >= ALPHA else ("A better" if only_a > only_b else "B better")
    return Paired(
        both_right=counts[(True, True)],
        both_wrong=counts[(False, False)],
        only_a=only_a,
        only_b=only_b,
        p_value=round(p, 6),
        verdict=verdict,
        unmatched=len(set(a) ^ set(b)),
    )
