"""Outputs labctl writes where the user points (-o): a report folder, an export file. Each is built whole
beside its target and renamed into place, so a failure leaves the old one as it was and no half-written
output; an existing target that is not labctl's own is refused unless the user says --overwrite."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labctl.errors import BadInput, Conflict
from labctl.host.files.atomic import remove_tree, write_atomically

REPORT_MARKER = ".labctl-report"  # in every report folder: what wrote it (labctl, its version, which ids)
MARKER_MAX_BYTES = 64 * 1024


def output_path(given: str, option: str = "-o") -> Path:
    """The path as given, refused when it names no file or folder of its own (empty, `/`, `.`, `..`) or when
    its parent folder is missing: labctl creates the one thing the user named, never the folders above it."""
    if not given.strip():
        raise BadInput(f"{option} '': an empty path names nothing; give a file or folder name.")
    path = Path(given)
    absolute = Path(os.path.abspath(given))
    if path.name in ("", ".", "..") or absolute == absolute.parent:
        raise BadInput(f"{option} {given!r}: name a new file or folder, not {given!r} itself.")
    if not absolute.parent.is_dir():
        raise BadInput(
            f"{option} {given!r}: the folder {str(absolute.parent)!r} does not exist; labctl creates only what you "
            "name. Create it first (mkdir) or pick another path."
        )
    return path


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a folder labctl wrote, or None (no marker, a link, unreadable, not labctl's)."""
    marker = folder / REPORT_MARKER
    if folder.is_symlink() or marker.is_symlink() or not marker.is_file():
        return None
    try:
        with marker.open("rb") as handle:
            data = json.loads(handle.read(MARKER_MAX_BYTES))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("written_by") == "labctl" else None


def _refuse_foreign(path: Path, what: str, overwrite: bool, is_own: bool) -> None:
    if os.path.lexists(path) and not is_own and not overwrite:
        raise Conflict(
            f"{path} exists and is not {what} labctl wrote: nothing was changed. Pick another path, or pass "
            "--overwrite to replace it."
        )


def check_report_target(path: Path, overwrite: bool) -> None:
    """Before any work: an existing folder is replaced only when it is labctl's own report and holds nothing
    but the files its marker lists (a file someone added there is never removed without --overwrite)."""
    marker = read_marker(path) if path.is_dir() else None
    _refuse_foreign(path, "a report folder", overwrite, marker is not None)
    if marker is None or overwrite:
        return
    listed = marker.get("files")
    added = [f for f in _files_in(path) if f != REPORT_MARKER and (not isinstance(listed, list) or f not in listed)]
    if added:
        shown = ", ".join(added[:3]) + (f" and {len(added) - 3} more" if len(added) > 3 else "")
        raise Conflict(
            f"{path} is a labctl report, but holds files labctl did not write there ({shown}): nothing was changed. "
            "Move them out, or pass --overwrite to replace the folder, those files included."
        )


def _files_in(folder: Path) -> list[str]:
    """Every file and link under `folder`, relative, sorted (links are not followed)."""
    found = []
    for root, dirs, files in os.walk(folder):
        found += [os.path.relpath(os.path.join(root, name), folder) for name in files]
        found += [os.path.relpath(os.path.join(root, d), folder) for d in dirs if os.path.islink(os.path.join(root, d))]
    return sorted(found)


def write_report_folder(path: Path, marker: dict[str, Any], overwrite: bool, build: Callable[[Path], None]) -> Path:
    """`build` fills a temporary folder beside `path`; only once it succeeded does the folder, marker
    included, take `path`'s name (the old one is moved aside first and removed after)."""
    check_report_target(path, overwrite)
    parent = path.absolute().parent
    work = Path(tempfile.mkdtemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        build(work)
        written = {"written_by": "labctl", **marker, "files": _files_in(work)}
        write_atomically(work / REPORT_MARKER, json.dumps(written, indent=1) + "\n")
        os.chmod(work, 0o755)  # mkdtemp's 0700 would hide the report from the colleagues it is for
        _swap_in(work, path)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return path


def write_output_file(path: Path, text: str, overwrite: bool, is_own: Callable[[Path], bool], what: str) -> None:
    """One file, replaced only when it is labctl's own (`is_own`) or with --overwrite; written atomically."""
    own = path.is_file() and not path.is_symlink() and is_own(path)
    _refuse_foreign(path, what, overwrite, own)
    if os.path.lexists(path) and (path.is_dir() and not path.is_symlink()):
        raise Conflict(f"{path} is a folder: nothing was changed. Give a file name.")
    if path.is_symlink():
        path.unlink()  # --overwrite replaces the link itself, never the file it points to
    write_atomically(path, text)


def _swap_in(work: Path, path: Path) -> None:
    if not os.path.lexists(path):
        os.rename(work, path)
        return
    aside_dir = Path(tempfile.mkdtemp(dir=path.absolute().parent, prefix=f".{path.name}.", suffix=".old"))
    aside = aside_dir / "old"
    os.rename(path, aside)
    try:
        os.rename(work, path)
    except BaseException:
        os.rename(aside, path)
        aside_dir.rmdir()
        raise
    remove_tree(aside)
    shutil.rmtree(aside_dir, ignore_errors=True)
