"""Where a bench result is written: the document saved after every level, a write that fails said as the
client's fault with what was lost, and the typed value (bench/results.py) made from the finished document."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labctl.bench.metrics import clean
from labctl.bench.results import BenchResult, parse_result
from labctl.errors import LabctlError
from labctl.run.records.record import now
from labctl.run.records.store import (
    write_run_file,
)

RESULT_SCHEMA = 1


class WriteFailed(LabctlError):
    """A file of the bench could not be written (a full disk, a quota, a file size limit): the client's fault,
    never the engine's."""

    def __init__(self, path: Path, what: str, exc: OSError) -> None:
        self.path, self.what, self.reason = path, what, exc.strerror or str(exc)
        super().__init__(
            f"could not write {path}: {self.reason}; {what} was not saved (a client fault, not the engine's)"
        )


def guarded(path: Path, what: str, write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as exc:
        raise WriteFailed(path, what, exc) from None


def save_result(path: Path, result: dict[str, Any]) -> None:
    try:
        write_run_file(path, json.dumps(clean(result), indent=1) + "\n")
    except OSError as exc:
        raise WriteFailed(path, "the result", exc) from None


def mark_lost(result: dict[str, Any], path: Path, requests_path: Path, exc: WriteFailed, level: str | None) -> None:
    """A write failed: the per-request file is removed (it is cut short), the result says failed and why, and
    the error says which file and what was lost."""
    try:
        requests_path.unlink()
        removed = True
    except OSError:
        removed = False
    where = f"level {level}" if level else "the bench"
    reason = (
        f"could not write {exc.path}: {exc.reason}; {exc.what} of {where} was lost (a client fault, not the engine's)"
    )
    result.update(status="failed", finished_at=now(), failure=reason, requests_file=None)
    try:
        save_result(path, result)
        saved = f"the result {path} is marked failed with that reason"
    except WriteFailed:
        saved = f"the result {path} could not be saved either (a later command shows it as interrupted)"
    removal = f"the cut-short per-request file {requests_path.name} was removed; " if removed else ""
    exc.args = (f"{reason}; {removal}{saved}. Free some space and run the bench again.",)


def made(document: dict[str, Any]) -> BenchResult:
    """The typed result of the document the bench wrote; `to_json()` gives the document back as it was."""
    return dataclasses.replace(parse_result(clean(document)), data=document)
