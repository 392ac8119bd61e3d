"""The user's own folders (XDG): settings in `$XDG_CONFIG_HOME/labctl` (default `~/.config/labctl`: the hosts
file and the default lab `labctl init` records), data in `$XDG_DATA_HOME/labctl` (default
`~/.local/share/labctl`: runs and rendered files of the lab that ships with labctl). Folders only: who the
user is comes from the OS, never from these variables."""

from __future__ import annotations

import json
import os
from pathlib import Path

from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.sourcefile import load_yaml_mapping
from labctl.errors import BadInput

CONFIG_FIELDS = {
    "lab": Field(
        "str",
        "the absolute path of your default lab folder (`labctl init DIR` records it)",
        check=lambda v: Path(v).is_absolute(),
    ),
}


def _xdg(variable: str, fallback: str) -> Path:
    chosen = os.environ.get(variable, "")
    if os.path.isabs(chosen):  # the XDG rule: a relative value is invalid and ignored
        return Path(chosen) / "labctl"
    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        raise BadInput(
            f"cannot tell your home folder (no HOME, no passwd entry): set {variable} to an absolute folder."
        ) from None
    return home / fallback / "labctl"


def config_folder() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config")


def data_folder() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share")


def config_file() -> Path:
    return config_folder() / "config.yaml"


def default_lab(path: Path) -> Path | None:
    """The lab folder `labctl init` recorded in the settings file `path`, or None when none is."""
    if not path.is_file():
        return None
    src = load_yaml_mapping(path)
    lab = check_mapping(src, (), src.data, CONFIG_FIELDS)["lab"]
    return Path(lab) if lab else None


def config_text(lab: Path) -> str:
    """The settings file recording `lab` as the default lab."""
    return (
        "# labctl's settings for this user (written by `labctl init`; edit freely).\n"
        "# lab: the lab folder labctl uses when neither --lab, $LABCTL_LAB nor a parent folder names one.\n"
        f"lab: {json.dumps(str(lab))}\n"  # a JSON string is a YAML string
    )
