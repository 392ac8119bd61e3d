"""A study's state in the home (`studies/NAME/`): which file it belongs to, and one small file per (cell,
repeat), each written atomically, so a killed controller leaves every cell's last known state readable."""

from __future__ import annotations

import json
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
        return _read(self.cell_path(cell_key, repeat))

    def save_cell(self, data: dict[str, Any]) -> None:
        data["updated_at"] = now()
        write_atomically(self.cell_path(str(data["cell"]), int(data["repeat"])), json.dumps(data, indent=1) + "\n")

    def all_cells(self) -> list[dict[str, Any]]:
        if not self.cells_dir.is_dir():
            return []
        found = [_read(p) for p in sorted(self.cells_dir.glob("*.json"))]
        return [c for c in found if c is not None]


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
