"""Where a lab's files are: engines/, templates/, compose/ and the runs folder."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from labctl.errors import BadInput

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # always fullmatch: `$` accepts a trailing newline


@dataclass(frozen=True)
class Lab:
    root: Path

    @property
    def engines_dir(self) -> Path:
        return self.root / "engines"

    @property
    def templates_dir(self) -> Path:
        return self.root / "templates"

    @property
    def compose_dir(self) -> Path:
        return self.root / "compose"

    @property
    def workloads_dir(self) -> Path:
        return self.root / "workloads"

    def engine_dir(self, engine: str) -> Path:
        folder = self.inside(self.engines_dir / check_name(engine, "engine"))
        self.inside(folder / "engine.yaml")
        return folder

    def profile_path(self, engine: str, profile: str) -> Path:
        return self.inside(self.engine_dir(engine) / "profiles" / f"{check_name(profile, 'profile')}.yaml")

    def inside(self, path: Path) -> Path:
        """`path` as given, refused when it resolves outside the lab folder: a symlink a colleague
        planted must not make labctl read (and send, or show) a file from elsewhere on the host."""
        root, target = self.root.resolve(), path.resolve()
        if target != root and root not in target.parents:
            shown = path.relative_to(self.root) if path.is_relative_to(self.root) else path
            raise BadInput(
                f"{shown} leads outside the lab folder (to {target}): labctl reads only files inside {root}. "
                "Copy the file into the lab instead of linking it."
            )
        return path


def check_name(name: str, what: str) -> str:
    """Engine and profile names become path parts: refuse anything that could escape the lab."""
    if not _NAME.fullmatch(name) or ".." in name:
        raise BadInput(
            f"{what} name {name!r} is not allowed: use letters, digits, '.', '_' and '-' "
            f"(no path separators, no '..', not starting with '.' or '-')."
        )
    return name


def _is_lab(path: Path) -> bool:
    return (path / "engines").is_dir() and (path / "templates").is_dir()


def find_lab(explicit: str | os.PathLike[str] | None = None) -> Lab:
    """The lab folder: --lab / LABCTL_LAB, else the nearest parent of the cwd holding engines/ and
    templates/, else the checkout labctl was installed from."""
    chosen = explicit or os.environ.get("LABCTL_LAB")
    if chosen:
        root = Path(chosen).expanduser().resolve()
        if not _is_lab(root):
            raise BadInput(f"{root} is not a lab folder (it needs engines/ and templates/). Check --lab / LABCTL_LAB.")
        return Lab(root)
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if _is_lab(candidate):
            return Lab(candidate)
    source = Path(__file__).resolve().parent.parent
    if _is_lab(source):
        return Lab(source)
    raise BadInput("no lab folder found: run labctl inside a lab checkout, or set LABCTL_LAB / --lab.")
