"""Private copies of the shipped lab's folders, for tests that break them on purpose. Hundreds of tests take
one: the shipped files are read once per test process and written out (no per-file stat copying), which made
the unit tier's lab copies several times cheaper than shutil.copytree."""

from __future__ import annotations

import functools
from pathlib import Path

from helpers.support import REPO


@functools.cache
def _files(folder: str) -> tuple[tuple[str, bytes], ...]:
    """The shipped folder's files (relative path, bytes): the folder as git holds it, minus build droppings."""
    root = REPO / folder
    return tuple(
        (path.relative_to(root).as_posix(), path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    )


def copy_folder(folder: str, dest: Path, skip: tuple[str, ...] = ()) -> Path:
    """`REPO/folder` copied to `dest` (files whose name is in `skip` left out)."""
    made: set[Path] = set()
    for rel, data in _files(folder):
        target = dest / rel
        if target.name in skip:
            continue
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_bytes(data)
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def copy_lab(root: Path, folders: tuple[str, ...] = ("engines", "templates", "workloads", "suites")) -> Path:
    """A lab at `root` holding copies of the shipped `folders`."""
    for folder in folders:
        copy_folder(folder, root / folder)
    return root
