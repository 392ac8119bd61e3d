"""`labctl study status`: each (cell, repeat)'s state, the running cell's level, and an ETA for the study."""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Callable
from typing import Any

from labctl.host.identity import writer_gone
from labctl.study.state import FINISHED, StudyState


def _seconds(data: dict[str, Any]) -> float | None:
    try:
        start = dt.datetime.fromisoformat(str(data["started_at"]).replace("Z", "+00:00"))
        end = dt.datetime.fromisoformat(str(data["finished_at"]).replace("Z", "+00:00"))
    except (KeyError, ValueError, TypeError):
        return None
    return (end - start).total_seconds()


def study_status(
    state: StudyState, planned: int | None = None, skipped: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """`planned`: how many (cell, repeat) the study file has now (the status of a study whose file is gone
    counts what its state knows)."""
    cells = state.all_cells(skipped)
    rows = [
        {
            "cell": c.get("cell"),
            "repeat": c.get("repeat"),
            "host": c.get("host"),
            "state": (
                "interrupted (its study run is gone)"
                if c.get("state") == "running" and writer_gone(c.get("runner"))
                else c.get("state")
            ),
            "level": c.get("level"),
            "run_id": c.get("run_id"),
            "failure": (c.get("failure") or {}).get("class"),
            "redone_because": c.get("redone_because"),
        }
        for c in sorted(cells, key=lambda c: (int(c.get("repeat") or 0), str(c.get("cell"))))
    ]
    finished = [c for c in cells if c.get("state") in FINISHED]
    durations = [d for d in (_seconds(c) for c in finished) if d is not None]
    total = max(planned or 0, len(cells))
    left = total - len(finished)
    hosts = max(len({c.get("host") for c in cells}), 1)
    eta = round(statistics.fmean(durations) * left / hosts, 1) if durations and left else (0.0 if not left else None)
    return {
        "study": state.name,
        "file": state.about().get("file"),
        "cells": rows,
        "finished": len(finished),
        "total": total,
        "eta_s": eta,
        "report": str(state.report_dir / "index.html") if (state.report_dir / "index.html").is_file() else None,
    }
