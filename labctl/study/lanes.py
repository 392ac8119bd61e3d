"""Which of a host's (cell, repeat) may run at the same time: one engine at a time per GPU set. Two cells
run together only when both use GPUs and their GPU sets are disjoint; everything else waits its turn in the
study's order. This only decides when a cell *tries*: the on-host claims of `up` still decide who gets a GPU
(a refusal is a wait, as for any `up`). Pure: it asks no host anything."""

from __future__ import annotations

from dataclasses import dataclass

from labctl.catalog.profiles import Profile


@dataclass(frozen=True)
class Need:
    cell: str  # the cell's key: two repeats of one cell never run together
    ids: frozenset[str]  # the GPUs the profile names (device_ids); empty for `count:` or no GPU
    count: int  # how many GPUs; 0 for an engine that uses none

    @property
    def placed(self) -> bool:
        return bool(self.ids)


def need_of(cell: str, profile: Profile) -> Need:
    if not profile.engine.needs_gpu:
        return Need(cell, frozenset(), 0)
    return Need(cell, frozenset(profile.gpu_ids), max(profile.gpu_count, 1))


def clash(a: Need, b: Need, host_gpus: int) -> bool:
    """Whether a and b may not run at the same time on a host with `host_gpus` GPUs."""
    if a.cell == b.cell or not a.count or not b.count:
        # a GPU-free engine measures the host's CPUs, which every engine on the host shares
        return True
    if a.placed and b.placed:
        return bool(a.ids & b.ids)
    return a.count + b.count > host_gpus  # a `count:` cell lands on whichever GPUs are free


def startable(pending: list[Need], running: list[Need], host_gpus: int) -> list[int]:
    """The indexes of `pending` (in the study's order) that may start now: clear of every running cell, and of
    every earlier pending one, so that no cell overtakes an earlier one on its GPUs and repeats stay in order."""
    chosen: list[int] = []
    for index, need in enumerate(pending):
        ahead = [*running, *pending[:index]]
        if any(clash(need, other, host_gpus) for other in ahead):
            continue
        busy = [*running, *(pending[i] for i in chosen)]
        if busy and sum(n.count for n in busy) + need.count > host_gpus:
            continue
        chosen.append(index)
    return chosen


def free_slot(taken: set[int]) -> int:
    """The lowest port slot no running cell of the host uses (slot 0 is the planned port)."""
    slot = 0
    while slot in taken:
        slot += 1
    return slot
