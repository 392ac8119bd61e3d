"""Files at the edge: written whole or not at all, so a killed labctl never leaves half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
    """`owner` (uid, gid; -1 keeps one) is set before the file gets its name: no moment with the wrong one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the name points at them
        if owner is not None:
            os.chown(tmp, *owner)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename in (None, tmp):  # a full disk fails the write, which names no file: name the target
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under `path`, each counted once, symlinks not followed."""
    total, seen = 0, set()
    for root, _dirs, files in os.walk(path):
        for name in files:
            stats = os.lstat(os.path.join(root, name))
            if (
                stats.st_nlink
                and (stats.st_dev, stats.st_ino) not in seen
                and not os.path.islink(os.path.join(root, name))
            ):
                seen.add((stats.st_dev, stats.st_ino))
                total += stats.st_size
    return total


def remove_tree(path: Path) -> None:
    import shutil

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError inside names `path` when it names no file: a full disk fails a write, which names none."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
