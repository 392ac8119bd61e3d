"""Which prompts each part of a bench sends, so that none is sent twice: a prefix cache then serves only what
the workload means it to (a shared prefix, a conversation's history), whatever the engine. The warm-up and
the measured requests of every level and every repeat take their own stretch of the workload's prompts, and a
bench may start past the stretches earlier benches of one study used (`first`).

Synthetic kinds have prompts without end: each stretch gets its own salt. Dataset kinds (jsonl, ShareGPT)
have a pool: each stretch is the pool's prompts `start` to `start + count`, so the whole bench needs
`first + total` distinct prompts, refused up front when the pool holds fewer (unless `repeat_prompts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labctl.bench.hub_dataset import hub_dataset_of
from labctl.bench.prompts import Prompt, build_prompts, check_arrivals, dataset_file, dataset_pool, trace_arrivals
from labctl.bench.runner import LevelPrompts
from labctl.bench.sharegpt import RULE
from labctl.bench.sweep_plan import PlannedLevel, plan_levels
from labctl.bench.workloads import Workload, list_workloads, load_workload
from labctl.catalog.lab import Lab
from labctl.errors import BadInput

DATASET_KINDS = ("jsonl", "sharegpt")
SHARED_ON_PURPOSE = ("shared-prefix", "multi-turn")  # kinds whose requests share prefixes by design


@dataclass(frozen=True)
class PromptSlots:
    levels: tuple[tuple[int, int], ...]  # (warm-up, measured) requests of each level, in the order they run
    repeat: int = 1  # runs of each level (bench --repeat), one after another
    first: int = 0  # the pool's first prompt this bench sends: a study's earlier benches used those before

    def per_level(self, index: int) -> int:
        warm, measured = self.levels[min(index, len(self.levels) - 1)]
        return warm + measured

    @property
    def total(self) -> int:
        """Prompts this bench sends, all distinct."""
        return sum(w + m for w, m in self.levels) * self.repeat

    def start(self, index: int, repeat: int, measured: bool) -> int:
        before = sum(self.per_level(i) for i in range(index)) * self.repeat + repeat * self.per_level(index)
        warm = self.levels[min(index, len(self.levels) - 1)][0]
        return self.first + before + (warm if measured else 0)

    def salt(self, index: int, repeat: int, measured: bool) -> int | str:
        """A synthetic stretch's salt: as before for a first run from the start, distinct for every other."""
        base = index if measured else 10_000 + index
        return base if repeat == 0 and self.first == 0 else f"{base}r{repeat}f{self.first}"


def slots_for(workload: Workload, repeat: int = 1, first: int = 0, search_steps: int = 0) -> PromptSlots:
    """The stretches of a sweep of the workload's levels (or of a capacity search's steps, all of one size)."""
    planned = plan_levels(workload)
    if search_steps:
        top = max(workload.concurrency)
        planned = [PlannedLevel(top, None, workload.requests_for(top), workload.warmup_for(top))] * search_steps
    return PromptSlots(tuple((lv.warmup, lv.requests) for lv in planned), repeat, first)


def prompts_for(workload: Workload, slots: PromptSlots, index: int, repeat: int, measured: bool) -> list[Prompt]:
    """One stretch: a level's warm-up or measured prompts in one repeat."""
    warm, count = slots.levels[min(index, len(slots.levels) - 1)]
    hub = hub_dataset_of(workload.name, workload.hub_dataset)
    return build_prompts(
        workload.spec,
        workload.name,
        workload.folder,
        workload.counter,
        count if measured else warm,
        slots.salt(index, repeat, measured),
        slots.start(index, repeat, measured),
        hub.locate() if hub else None,
    )


def level_prompts(workload: Workload, level_index: int, slots: PromptSlots, repeat: int = 0) -> LevelPrompts:
    """A level's prompts in one repeat, made where the workload and its tokenizer are (a remote host's client
    is sent them)."""
    return LevelPrompts(
        warm=prompts_for(workload, slots, level_index, repeat, measured=False),
        measured=prompts_for(workload, slots, level_index, repeat, measured=True),
    )


def available_prompts(workload: Workload) -> int | None:
    """The distinct prompts a dataset workload can send (read offline); None for synthetic ones (no end)."""
    if workload.dataset_kind not in DATASET_KINDS:
        return None
    hub = hub_dataset_of(workload.name, workload.hub_dataset)
    path = hub.locate() if hub else None
    return len(dataset_pool(workload.spec, workload.name, workload.folder, workload.counter, path))


def shortage(workload: Workload, needed: int, available: int | None, what: str) -> str | None:
    """One line when `what` needs more distinct prompts than the dataset holds, else None."""
    if available is None or needed <= available or workload.repeats_prompts:
        return None
    return (
        f"workload {workload.name}: {what} sends {needed} prompts but its dataset holds {available} distinct usable "
        f"ones ({workload.counter.unit}): labctl sends none twice (a prefix cache would serve the repeats). Lower "
        "the requests or levels, or say repeat_prompts: true in the workload (recorded)."
    )


def check_trace(workload: Workload, slots: PromptSlots) -> None:
    """Refuses a trace that does not read, or a level that replays more arrivals than the trace holds (each level
    replays the trace's first ones, its prompts its own)."""
    hub = hub_dataset_of(workload.name, workload.hub_dataset)
    path = hub.locate() if hub else None
    arrivals = len(trace_arrivals(path or dataset_file(workload.spec["dataset"], workload.name, workload.folder)))
    check_arrivals(workload.name, max((max(w, m) for w, m in slots.levels), default=0), arrivals)


def check_enough(workload: Workload, slots: PromptSlots) -> int | None:
    """Refuses a bench that needs more distinct prompts than its dataset holds; returns the pool's size."""
    if workload.dataset_kind == "trace":
        check_trace(workload, slots)
    available = available_prompts(workload)
    after = f" (after the {slots.first} its study's earlier benches sent)" if slots.first else ""
    problem = shortage(workload, slots.first + slots.total, available, "this bench" + after)
    if problem:
        raise BadInput(problem)
    return available


def check_lab_workloads(lab: Lab) -> list[str]:
    """Every workload of the lab loaded (its fields checked), and each dataset workload's own sweep checked
    against the distinct prompts its dataset holds, in words (no model is named here; bench and study plan
    count in the model's tokens). Refuses the first problem; returns a note per dataset not counted."""
    notes = []
    for name in list_workloads(lab):
        workload = load_workload(lab, name)
        hub = hub_dataset_of(name, workload.hub_dataset)
        if hub is not None and hub.cached_file() is None:
            notes.append(
                f"workload {name}: its Hub dataset is not fetched, its prompts not counted (`{hub.fetch_command}`)"
            )
            continue
        check_enough(workload, slots_for(workload))
    return notes


def prompt_facts(workload: Workload, slots: PromptSlots, available: int | None) -> dict[str, Any]:
    """What the result records about the prompts: the seed, the rule, how many were sent and how many distinct."""
    kind = workload.dataset_kind
    distinct = slots.total if available is None else min(slots.total, available)  # wrapped when repeated
    facts: dict[str, Any] = {
        "seed": workload.seed,
        "sent": slots.total,
        "distinct": distinct,
        "first": slots.first,
        "available": available,
        "repeat_prompts": workload.repeats_prompts,
        "shared_on_purpose": kind in SHARED_ON_PURPOSE,
    }
    if kind == "sharegpt":
        facts["rule"] = RULE
    return facts
