"""Prefetch: the images and models a host's cells need are pulled and fetched there ahead of their `up`, so
that between cells a GPU waits only for the next engine's cold start. A pull never runs on a host while that
host measures: what the first cells need runs before the host measures anything, the rest one step at a time
between levels (after one bench ends, before the next starts, and only while no other cell of the host is
mid-level). A pull that overlaps a measurement anyway (another host's, or a cell that could not wait) is a
caveat on the level it touched."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from labctl.catalog.hosts_file import HostEntry
from labctl.errors import LabctlError
from labctl.host.files.atomic import write_atomically
from labctl.run.images.pull import pull_for_up
from labctl.run.models.fetch import fetch_before_start
from labctl.run.records.record import now
from labctl.study.plan import CellPlan
from labctl.study.state import StudyState

Say = Callable[[str], None]


@dataclass
class Step:
    what: str  # "pull IMAGE" or "fetch MODEL@REVISION"
    cells: list[str]  # the keys of the cells that need it, in the study's order
    action: Callable[[], object]
    done: bool = False


def plan_steps(host: HostEntry, cells: list[CellPlan], fetch: bool, say: Say) -> list[Step]:
    """One step per image the host lacks and per model not cached, in the order the cells need them."""
    steps: dict[str, Step] = {}
    for cell in cells:
        profile = cell.cell.profile
        wanted: list[tuple[str, Callable[[], object]]] = []
        if not cell.image_cached:
            wanted.append(
                (f"pull {profile.image_text}", partial(pull_for_up, profile, host.is_remote, False, say, None))
            )
        if fetch and not cell.model_cached:
            remote = host if host.is_remote else None
            wanted.append(
                (
                    f"fetch {profile.model.id}@{profile.model.revision}",
                    partial(fetch_before_start, profile, None, True, remote, say, None),
                )
            )
        for what, action in wanted:
            if what in steps:
                steps[what].cells.append(cell.cell.key)
            else:
                steps[what] = Step(what, [cell.cell.key], action)
    return list(steps.values())


@dataclass
class Prefetcher:
    """A host's pending pulls and fetches, shared by the host's cells (one thread each)."""

    state: StudyState
    host: str
    steps: list[Step]
    entries: list[dict[str, Any]] = field(default_factory=list)
    measuring: int = 0  # cells of this host in the middle of a bench level
    _pulling: threading.Lock = field(default_factory=threading.Lock)  # one pull at a time on a host
    _count: threading.Condition = field(default_factory=threading.Condition)

    def for_cells(self, keys: list[str], where: str) -> float:
        """Every pending step these cells need, before their `up`: once no level of the host is in progress (a
        new level waits for it meanwhile). The seconds it took, waiting included."""
        t0 = time.monotonic()
        with self._pulling:
            wanted = [s for s in self.steps if not s.done and any(key in s.cells for key in keys)]
            if not wanted:
                return 0.0
            with self._count:
                self._count.wait_for(lambda: self.measuring == 0)
            for step in wanted:
                self._run(step, where)
        return time.monotonic() - t0

    def between_levels(self, key: str, after: str) -> float:
        """At most one pending step, while no other cell of the host measures; the seconds it took (the GPU of
        `key` waited for them)."""
        with self._count:
            if self.measuring:
                return 0.0
            if not self._pulling.acquire(blocking=False):
                return 0.0
        try:
            step = next((s for s in self.steps if not s.done), None)
            if step is None:
                return 0.0
            t0 = time.monotonic()
            self._run(step, f"between levels of {key}, after {after}")
            return time.monotonic() - t0
        finally:
            self._pulling.release()

    def pending(self) -> list[str]:
        return [s.what for s in self.steps if not s.done]

    @contextmanager
    def level(self) -> Iterator[None]:
        """A bench level of one cell: it waits for a pull in progress (never measures beside it), and no
        step starts between levels of the host's other cells until it ends."""
        with self._pulling, self._count:
            self.measuring += 1
        try:
            yield
        finally:
            with self._count:
                self.measuring -= 1
                self._count.notify_all()

    def _run(self, step: Step, where: str) -> None:
        entry: dict[str, Any] = {"host": self.host, "what": step.what, "where": where, "started_at": now()}
        t0 = time.monotonic()
        try:
            step.action()
        except LabctlError as exc:  # left to the cell's own `up`, which retries a flake once and classifies
            entry["error"] = str(exc).splitlines()[0][:300]
        step.done = True
        entry.update(finished_at=now(), seconds=round(time.monotonic() - t0, 3))
        self.entries.append(entry)
        path = self.state.folder / "prefetch" / f"{self.host}.json"
        write_atomically(path, json.dumps(self.entries, indent=1) + "\n")


def overlaps(state: StudyState, cells: list[dict[str, Any]]) -> list[str]:
    """Prefetches that ran while a level measured (on another host, or on the same one): a caveat on that
    level's numbers. A cell's benches carry their own times; an older state only the cell's."""
    found = []
    folder = state.folder / "prefetch"
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            for cell in cells:
                for label, start, end in _spans(cell):
                    if not label and cell.get("host") == entry.get("host"):
                        continue  # only the cell's whole span is known: its own host pulled around it, not during
                    if str(entry.get("started_at")) < end and start < str(entry.get("finished_at")):
                        level = f" {label}" if label else ""
                        found.append(
                            f"{cell['cell']} r{cell['repeat']}{level}: measured while {entry.get('host')} ran "
                            f"`{entry.get('what')}` ({entry.get('seconds')} s): a shared controller, network or host"
                        )
    return found


def _spans(cell: dict[str, Any]) -> list[tuple[str, str, str]]:
    benches = [b for b in cell.get("benches") or [] if isinstance(b, dict) and b.get("started_at")]
    if benches:
        return [
            (
                f"{b.get('workload')}{' canary' if b.get('canary') else ''}",
                str(b["started_at"]),
                str(b.get("finished_at") or "9999"),
            )
            for b in benches
        ]
    if not cell.get("started_at"):
        return []
    return [("", str(cell["started_at"]), str(cell.get("finished_at") or "9999"))]
