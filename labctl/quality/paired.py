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
    return float(min(1.0, 2 * tail))


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


def version_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What makes two evaluations' versions differ, said by field: an lm-eval task's version, its dataset's
    revision or hash, its few-shot count or generation settings; a suite's version."""
    found = []
    limits = [(side.get("settings") or {}).get("limit") for side in (a, b)]
    if limits[0] != limits[1]:
        found.append(" vs ".join("a full run" if n is None else f"a smoke run (--limit {n})" for n in limits))
    a_tasks = {t["name"]: t for t in a.get("tasks") or []}
    b_tasks = {t["name"]: t for t in b.get("tasks") or []}
    if a_tasks.keys() != b_tasks.keys():
        found.append(f"task sets {', '.join(sorted(a_tasks)) or '-'} vs {', '.join(sorted(b_tasks)) or '-'}")
    for name in sorted(a_tasks.keys() & b_tasks.keys()):
        x, y = a_tasks[name], b_tasks[name]
        for label, get in (
            ("task version", lambda t: f"{t['task']} v{t['version']} (set {t['set_version']})"),
            ("dataset revision", lambda t: f"{t['dataset']['source']}"),
            ("dataset hash", lambda t: t["dataset"]["sha256"][:12]),
            ("few-shot count", lambda t: str(t["num_fewshot"])),
            ("generation settings", lambda t: json_text(t["generation"])),
            ("metric", lambda t: f"{t['metric']},{t['filter']}"),
        ):
            if get(x) != get(y):
                found.append(f"{name}: {label} {get(x)} vs {get(y)}")
    if (a.get("harness") or {}).get("version") != (b.get("harness") or {}).get("version"):
        found.append(f"harness {(a.get('harness') or {}).get('version')} vs {(b.get('harness') or {}).get('version')}")
    if not found and a["suite"].get("sha256") != b["suite"].get("sha256"):
        found.append(f"suite version {a['suite'].get('full_version')} vs {b['suite'].get('full_version')}")
    return found


def json_text(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)
