"""`labctl init`: a lab folder of one's own, made from the lab that ships with labctl, ready to be a git
repository (engines with their profiles, templates, workloads, suites, a hosts file to fill in, and a
.gitignore for what labctl writes into a lab)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.lab import LAB_FOLDERS, is_lab
from labctl.errors import BadInput

GITIGNORE = """\
# What labctl writes into a lab folder: run records and their state (keys, forwards), rendered compose files.
runs/
.state/
/compose/*.yaml
# a study's state and report (the study files beside them are yours)
/studies/*/
"""
HOSTS = """\
# The Docker hosts everyone using this lab can drive, under each user's own hosts file
# (~/.config/labctl/hosts.yaml, which `labctl hosts add NAME ssh://user@host` writes). `local`, this
# machine's Docker, needs no entry. An example to copy into `hosts:`:
#
# hosts:
#   h100-a:
#     docker: ssh://lab@10.0.0.5    # local, unix:///path/docker.sock or ssh://user@host[:port]
#     nvidia_smi: [nvidia-smi]      # the command that answers nvidia-smi queries on that host
# default: h100-a                   # the host used without --host (default: local)
hosts: {}
"""
_SKIP = ("__pycache__", ".pyc")
NEW_LAB_FOLDER = "~/lab"  # where a lab of one's own is made when a command must write into the shipped one


@dataclass(frozen=True)
class NewLab:
    root: Path
    made: tuple[str, ...]  # what init wrote, relative to root; empty when the folder already was a lab
    engines: int = 0
    profiles: int = 0


def check_target(folder: str) -> Path:
    """The folder `labctl init` may write into: new (its parent exists), empty, or already a lab."""
    if not folder.strip():
        raise BadInput(
            "labctl init '': an empty path names no folder. Name one (labctl init ~/lab), or . for this one."
        )
    root = Path(folder).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise BadInput(f"labctl init {folder}: {root} is a file, not a folder. Name a new or empty folder.")
    if not root.exists() and not root.parent.is_dir():
        raise BadInput(
            f"labctl init {folder}: the folder {root.parent} does not exist; labctl init makes only the last "
            "folder. Make its parent first, or name another folder."
        )
    if root.is_dir() and not is_lab(root) and any(root.iterdir()):
        raise BadInput(
            f"labctl init {folder}: {root} is not empty and not a lab folder (no engines/ and templates/); "
            "init writes only into a new or empty folder. Name a new folder: labctl init DIR."
        )
    return root


def make_lab(root: Path, source: Path) -> NewLab:
    """Copy the shipped lab from `source` into `root` (checked by check_target); an existing lab is left as
    it is. Only regular files are copied: a symlink in the source would make the new lab read elsewhere."""
    if is_lab(root):
        return NewLab(root, ())
    missing = [name for name in LAB_FOLDERS if not (source / name).is_dir()]
    if missing:
        raise BadInput(f"the lab that ships with labctl ({source}) lacks {', '.join(missing)}: reinstall labctl.")
    root.mkdir(exist_ok=True)
    for name in LAB_FOLDERS:
        _copy_tree(source / name, root / name)
    (root / "hosts.yaml").write_text(HOSTS, encoding="utf-8")
    (root / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
    engines = [p for p in sorted((root / "engines").iterdir()) if (p / "engine.yaml").is_file()]
    profiles = sum(len(list((p / "profiles").glob("*.yaml"))) for p in engines)
    made = tuple(f"{name}/" for name in LAB_FOLDERS) + ("hosts.yaml", ".gitignore")
    return NewLab(root, made, len(engines), profiles)


def _copy_tree(source: Path, target: Path) -> None:
    target.mkdir()
    for entry in sorted(source.iterdir()):
        if entry.is_symlink() or entry.name.endswith(_SKIP):
            continue
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        elif entry.is_file():
            copied = target / entry.name
            shutil.copyfile(entry, copied)  # the new lab's own mode (the umask's), never the install's
            if entry.stat().st_mode & 0o111:  # the personas' bin/ scripts stay executable
                mode = copied.stat().st_mode
                copied.chmod(mode | (mode & 0o444) >> 2)
