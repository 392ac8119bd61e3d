"""Prefetch: before a host measures its first cell, the images and models its cells will need are pulled and
fetched there, so that between cells a GPU waits only for the next engine's cold start. A pull never runs on a
host while that host measures; one that overlaps another host's measuring is a caveat of the report."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from labctl.errors import LabctlError
from labctl.host.files import write_atomically
from labctl.host.hosts import HostEntry
from labctl.run.images.pull import pull_for_up
from labctl.run.models.fetch import fetch_before_start
from labctl.run.records.record import now
from labctl.study.plan import CellPlan
from labctl.study.state import StudyState

Say = Callable[[str], None]


def prefetch_host(
    state: StudyState, host: HostEntry, cells: list[CellPlan], fetch: bool, say: Say
) -> list[dict[str, Any]]:
    """Pull each image the host lacks and fetch each model once, in the order the cells need them; a failure
    is noted and left to the cell's own `up` (which retries a flake once and classifies the rest)."""
    done: list[dict[str, Any]] = []
    images: set[str] = set()
    models: set[str] = set()
    for cell in cells:
        profile = cell.cell.profile
        steps: list[tuple[str, Callable[[], object]]] = []
        if not cell.image_cached and profile.image_text not in images:
            images.add(profile.image_text)
            steps.append(
                (f"pull {profile.image_text}", partial(pull_for_up, profile, host.is_remote, False, say, None))
            )
        model = f"{profile.model.id}@{profile.model.revision}"
        if fetch and not cell.model_cached and model not in models:
            models.add(model)
            remote = host if host.is_remote else None
            steps.append((f"fetch {model}", partial(fetch_before_start, profile, None, True, remote, say, None)))
        for what, action in steps:
            entry: dict[str, Any] = {"host": host.name, "what": what, "started_at": now()}
            t0 = time.monotonic()
            try:
                action()
            except LabctlError as exc:
                entry["error"] = str(exc).splitlines()[0][:300]
            entry.update(finished_at=now(), seconds=round(time.monotonic() - t0, 3))
            done.append(entry)
            write_atomically(state.folder / "prefetch" / f"{host.name}.json", json.dumps(done, indent=1) + "\n")
    return done


def overlaps(state: StudyState, cells: list[dict[str, Any]]) -> list[str]:
    """Prefetches that ran while a cell on another host measured: a caveat on that cell's numbers."""
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
                if cell.get("host") == entry.get("host") or not cell.get("started_at"):
                    continue
                end = cell.get("finished_at") or "9999"
                if str(entry.get("started_at")) < str(end) and str(cell["started_at"]) < str(entry.get("finished_at")):
                    found.append(
                        f"{cell['cell']} r{cell['repeat']}: measured while {entry.get('host')} ran "
                        f"`{entry.get('what')}` ({entry.get('seconds')} s): a shared controller or network"
                    )
    return found
