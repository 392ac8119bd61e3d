"""How many distinct prompts each workload of a study sends to one engine, and where each bench starts:
every (cell, repeat) runs a canary then the ladder, and repeat r's benches start past repeat r-1's, so that no
prompt is sent twice in a study unless the workload says repeat_prompts (labctl.bench.prompt_slots). A
dataset workload whose pool is too small is refused at plan; a Hub dataset not yet fetched, or not pinned to
a commit, is named with the one command that fixes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labctl.bench.hub_dataset import hub_dataset_of
from labctl.bench.prompt_slots import available_prompts, shortage, slots_for
from labctl.bench.tokens import counter_for
from labctl.bench.workloads import Workload, with_overrides
from labctl.host.hub.cache import COMMIT


def bench_totals(workload: Workload, levels: list[int]) -> tuple[int, int]:
    """(canary, ladder): the prompts the two benches of one (cell, repeat) send."""
    if not levels:
        return 0, 0
    canary = slots_for(with_overrides(workload, [levels[0]])).total
    return canary, slots_for(with_overrides(workload, levels)).total


def bench_starts(workload: Workload, levels: list[int], repeat: int) -> tuple[int, int]:
    """Where repeat `repeat` (from 1)'s canary and ladder start in the workload's prompts."""
    canary, ladder = bench_totals(workload, levels)
    first = (repeat - 1) * (canary + ladder)
    return first, first + canary


@dataclass(frozen=True)
class PromptBudget:
    workload: str
    source: str  # where the prompts come from, as shown
    needed: int  # the most prompts one cell's repeats send
    available: int | None  # distinct prompts the dataset holds; None: synthetic, or not countable yet
    unit: str  # the length unit the pool was counted in (the study model's tokens, or words)
    repeat_prompts: bool
    findings: tuple[str, ...] = ()
    refusals: tuple[str, ...] = ()  # what `study run` refuses (not fetched, not pinned)
    too_few: str | None = None  # more prompts asked than the dataset holds: the study file itself is refused

    def line(self) -> str:
        repeats = " (repeat_prompts: true)" if self.repeat_prompts else ""
        if self.available is not None:
            have = f"{self.available} distinct available ({self.unit})"
        elif self.source.endswith("(not fetched)"):
            have = "distinct count unknown until fetched"
        else:
            return f"prompts {self.workload}: synthetic, {self.needed} per cell, each distinct{repeats}"
        return f"prompts {self.workload}: {self.source}; {self.needed} per cell, {have}{repeats}"

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "source": self.source,
            "needed": self.needed,
            "available": self.available,
            "unit": self.unit,
            "repeat_prompts": self.repeat_prompts,
        }


def plan_prompts(
    name: str, workload: Workload, ladders: list[list[int]], repeats: int, model_id: str, allow_unpinned: bool
) -> PromptBudget:
    """The prompts a workload needs in this study (the largest cell's), checked against what it holds."""
    needed = max((sum(bench_totals(workload, levels)) * repeats for levels in ladders), default=0)
    counted = workload.with_counter(counter_for(model_id))
    hub = hub_dataset_of(name, workload.hub_dataset)
    findings: list[str] = []
    refusals: list[str] = []
    if hub is None:
        source = f"dataset {workload.spec['dataset']['path']}" if workload.spec["dataset"].get("path") else "synthetic"
    else:
        commit = hub.commit()
        source = f"Hub dataset {hub.repo}@{hub.revision}" + (
            f" (commit {commit})" if commit and commit != hub.revision else ""
        )
        source += f", {hub.file}"
        if not COMMIT.fullmatch(hub.revision) and not allow_unpinned:
            refusals.append(
                f"workload {name}: its dataset revision {hub.revision!r} is not a commit: run "
                f"`labctl pin --workload {name}` (or allow_unpinned: true in the study)"
            )
        if hub.cached_file() is None:
            refusals.append(
                f"workload {name}: its dataset {hub.source} is not in the Hub cache: run `{hub.fetch_command}` "
                "(its distinct prompts are counted once it is there)"
            )
            unit, repeat = counted.counter.unit, counted.repeats_prompts
            return PromptBudget(name, source + " (not fetched)", needed, None, unit, repeat, (), tuple(refusals))
    available = available_prompts(counted)
    problem = shortage(counted, needed, available, f"one cell's {repeats} repeat(s) of canary and ladder")
    if available is not None and counted.counter.unit != "tokens":
        findings.append(f"workload {name}: the dataset was filtered in words ({counted.counter.source})")
    return PromptBudget(
        name,
        source,
        needed,
        available,
        counted.counter.unit,
        counted.repeats_prompts,
        tuple(findings),
        tuple(refusals),
        problem,
    )
