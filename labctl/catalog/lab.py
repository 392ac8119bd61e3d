"""Where a lab's files are (engines/, templates/, compose/), and which lab a command uses."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from labctl.catalog.user_folders import config_file, default_lab
from labctl.errors import BadInput

LAB_FOLDERS = (
    "engines",
    "templates",
    "workloads",
    "suites",
    "studies",
)  # the lab that ships with labctl (setup.py copies)
PACKAGE = Path(__file__).resolve().parent.parent

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # always fullmatch: `$` accepts a trailing newline


@dataclass(frozen=True)
class Lab:
    root: Path
    packaged: bool = False  # the lab that ships with labctl: read-only, its runs and renders go to the home
    compose_root: Path | None = None  # where rendered files go, when not into the lab's own compose/

    @property
    def engines_dir(self) -> Path:
        return self.root / "engines"

    @property
    def templates_dir(self) -> Path:
        return self.root / "templates"

    @property
    def compose_dir(self) -> Path:
        return self.compose_root or self.root / "compose"

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

    def rendering_into(self, folder: Path) -> Lab:
        return replace(self, compose_root=folder)

    def check_writable(self, what: str) -> None:
        """The lab that ships with labctl is read-only: it is the same for everyone who installed it."""
        if self.packaged:
            raise BadInput(
                f"{what} would change the lab that ships with labctl ({self.root}), which is read-only. "
                "Make a lab of your own with `labctl init DIR` and run this there (cd DIR, or --lab DIR)."
            )


def check_name(name: str, what: str) -> str:
    """Engine and profile names become path parts: refuse anything that could escape the lab."""
    if not _NAME.fullmatch(name) or ".." in name:
        raise BadInput(
            f"{what} name {name!r} is not allowed: use letters, digits, '.', '_' and '-' "
            f"(no path separators, no '..', not starting with '.' or '-')."
        )
    return name


def is_lab(path: Path) -> bool:
    return (path / "engines").is_dir() and (path / "templates").is_dir()


def shipped_lab() -> tuple[Path | None, bool]:
    """The lab that ships with labctl and whether it is a checkout: `labctl/_lab` inside an installed wheel
    (setup.py copies it there at build time), or the checkout itself for an editable install."""
    inside = PACKAGE / "_lab"
    if is_lab(inside):
        return inside, False
    checkout = PACKAGE.parent
    if is_lab(checkout) and (checkout / "pyproject.toml").is_file():
        return checkout, True
    return None, False


@dataclass(frozen=True)
class Search:
    """The places a lab is looked for, in order: --lab, $LABCTL_LAB, the current folder and its parents, the
    default lab `labctl init` recorded (in the settings file), the lab that ships with labctl."""

    option: str | None = None
    env: str | None = None
    cwd: Path = field(default_factory=Path.cwd)
    config: Path | None = None  # the settings file; default: the user's (read only when it comes to that)
    shipped: Path | None = None
    shipped_is_checkout: bool = False

    def lab_at(self, root: Path) -> Lab:
        packaged = self.shipped is not None and root == self.shipped and not self.shipped_is_checkout
        return Lab(root, packaged=packaged)


def find_lab(explicit: str | os.PathLike[str] | None = None) -> Lab:
    shipped, is_checkout = shipped_lab()
    option = os.fspath(explicit) if explicit else None
    return search_lab(Search(option, os.environ.get("LABCTL_LAB"), Path.cwd(), None, shipped, is_checkout))


def search_lab(search: Search) -> Lab:
    """The lab folder, from the first place in `search` that names one. A place that names a folder which is not
    a lab is an error (never a silent fall-through), and every error lists where labctl looked."""
    needs = "it needs engines/ and templates/"
    for chosen, how in ((search.option, "--lab"), (search.env, "LABCTL_LAB")):
        if chosen:
            root = Path(chosen).expanduser().resolve()
            if not is_lab(root):
                raise BadInput(
                    f"{how} {root} is not a lab folder ({needs}); labctl looked only there, as {how} asks. "
                    "Make a lab with `labctl init DIR`, or name the folder that holds engines/."
                )
            return search.lab_at(root)
    here = search.cwd.resolve()
    for candidate in (here, *here.parents):
        if is_lab(candidate):
            return search.lab_at(candidate)
    config = search.config or config_file()
    recorded = default_lab(config)
    looked = f"--lab and LABCTL_LAB (neither set), {here} and its parents"
    if recorded is not None:
        root = recorded.resolve()
        if not is_lab(root):
            raise BadInput(
                f"the default lab {root} (recorded in {config}) is not a lab folder ({needs}); labctl looked in "
                f"{looked}, then there. Make it again with `labctl init {root}`, or record another: `labctl init DIR`."
            )
        return search.lab_at(root)
    if search.shipped is not None:
        return Lab(search.shipped, packaged=True)
    raise BadInput(
        f"no lab folder found: labctl looked in {looked}, the default lab in {config} (none recorded) and the "
        "lab that ships with labctl (missing from this install). Make a lab with `labctl init DIR`, or pass --lab DIR."
    )
