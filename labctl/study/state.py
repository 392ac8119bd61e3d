"""A study's state in the home (`studies/NAME/`): which file it belongs to, and one small file per (cell,
repeat), each written atomically, so a killed controller leaves every cell's last known state readable."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl.errors import BadInput
from labctl.host.files.atomic import write_atomically
from labctl.run.records.record import now
from labctl.study.cells import file_key
from labctl.study.spec import NAME, Study

# pending → running → done | failed | interrupted; a finished state (done, failed) with the same fingerprint
# is never measured again.
FINISHED = ("done", "failed")
MAX_STATE_BYTES = 1024 * 1024


def study_folder(home: Path, name: str) -> Path:
    if NAME.fullmatch(name) is None:
        raise BadInput(f"study name {name[:80]!r}: expected lower-case letters, digits, '.', '_' or '-' (1-63).")
    return home / "studies" / name


@dataclass(frozen=True)
class StudyState:
    folder: Path

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def cells_dir(self) -> Path:
        return self.folder / "cells"

    @property
    def report_dir(self) -> Path:
        return self.folder / "report"

    def about(self) -> dict[str, Any]:
        return _read(self.folder / "study.json") or {}

    def cell_path(self, cell_key: str, repeat: int) -> Path:
        return self.cells_dir / f"{file_key(cell_key, repeat)}.json"

    def load_cell(self, cell_key: str, repeat: int) -> dict[str, Any] | None:
        """The (cell, repeat)'s state; None when there is none or it is of the wrong shape (then it is redone)."""
        data = _read(self.cell_path(cell_key, repeat))
        return data if data is not None and cell_problem(data) is None else None

    def save_cell(self, data: dict[str, Any]) -> None:
        data["updated_at"] = now()
        write_atomically(self.cell_path(str(data["cell"]), int(data["repeat"])), json.dumps(data, indent=1) + "\n")

    def all_cells(self, skipped: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
        """Every readable (cell, repeat) state; one of the wrong shape is reported to `skipped` and left out."""
        if not self.cells_dir.is_dir():
            return []
        found = []
        for path in sorted(self.cells_dir.glob("*.json")):
            data = _read(path)
            problem = "not a JSON object labctl can read" if data is None else cell_problem(data)
            if problem is None and data is not None:
                found.append(data)
            elif skipped:
                skipped(f"skipped {path}: {problem}; it is measured again by the next study run")
        return found


# A (cell, repeat) state's fields that every reader relies on, and their types.
CELL_FIELDS: dict[str, tuple[type, ...]] = {
    "cell": (str,),
    "repeat": (int,),
    "state": (str,),
    "benches": (list,),
    "evals": (list,),
    "times": (dict,),
    "caveats": (list,),
    "findings": (list,),
    "censored": (dict,),
    "run_id": (str, type(None)),
    "failure": (dict, type(None)),
    "host": (str, type(None)),
    "started_at": (str, type(None)),
    "finished_at": (str, type(None)),
}


def cell_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a (cell, repeat) state file's shape (None: nothing): a field missing or of the wrong
    type, a repeat below 1, a bench entry that is not a mapping with a bench id, a time that is not a number."""
    for name, types in CELL_FIELDS.items():
        value = data.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{name}: expected {' or '.join(t.__name__ for t in types)}, found {type(value).__name__}"
    if data["repeat"] < 1:
        return f"repeat: {data['repeat']} is below 1"
    if not all(isinstance(b, dict) and isinstance(b.get("bench_id"), str) for b in data["benches"]):
        return "benches: each entry is a mapping with a bench_id"
    if not all(isinstance(e, dict) for e in data["evals"]):
        return "evals: each entry is a mapping"
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in data["times"].values()):
        return "times: each value is a number of seconds"
    return None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(MAX_STATE_BYTES))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def open_state(home: Path, study: Study) -> StudyState:
    """The study's folder, made on first use; the same name from a different file is refused."""
    state = StudyState(study_folder(home, study.name))
    about = state.about()
    if about and about.get("file") != str(study.path):
        raise BadInput(
            f"study {study.name!r} in {state.folder} belongs to {about.get('file')}, not {study.path}: give this "
            "study another name, or run the file it belongs to."
        )
    if not about:
        about = {"name": study.name, "file": str(study.path), "created_at": now()}
    about["file_sha256"] = study.sha256
    write_atomically(state.folder / "study.json", json.dumps(about, indent=1) + "\n")
    return state


def find_state(home: Path, name: str) -> StudyState:
    state = StudyState(study_folder(home, name))
    if not state.about():
        known = (
            sorted(p.name for p in (home / "studies").glob("*") if p.is_dir()) if (home / "studies").is_dir() else []
        )
        raise BadInput(
            f"no study {name!r} in {home}: run `labctl study run FILE` first"
            + (f" (studies here: {', '.join(known)})" if known else "")
            + "."
        )
    return state


def check_untouched(home: Path, study: Study) -> None:
    """`plan` writes nothing, yet refuses as `run` would: another file already owns this name."""
    about = StudyState(study_folder(home, study.name)).about()
    if about and about.get("file") != str(study.path):
        raise BadInput(
            f"study {study.name!r} in {home / 'studies' / study.name} belongs to {about.get('file')}, not "
            f"{study.path}: give this study another name, or plan the file it belongs to."
        )
