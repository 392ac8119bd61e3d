"""init: a lab folder of one's own, from the lab that ships with labctl."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from labctl.cli.context import out


def register(app: typer.Typer) -> None:
    app.command("init")(init)


def init(
    folder: Annotated[str, typer.Argument(help="The folder to make (new or empty; default: this folder).")] = ".",
) -> None:
    """Make a lab folder (engines, profiles, templates, workloads, suites, hosts.yaml, .gitignore) from the lab that ships with labctl, and record it as your default lab.

    An existing lab folder is left as it is and only recorded. The record is ~/.config/labctl/config.yaml
    ($XDG_CONFIG_HOME/labctl): labctl uses that lab when neither --lab, $LABCTL_LAB nor a parent folder
    names one.

    Example: labctl init ~/lab
    """
    root = make_own_lab(folder)
    out(f"next: cd {root} && git init && labctl validate && labctl up harness --profile smoke --allow-unpinned")


def make_own_lab(folder: str, say: Callable[[str], None] = out) -> Path:
    """What `labctl init FOLDER` does (make the lab, record it as the default lab, say so); its root."""
    from labctl.catalog.lab import shipped_lab
    from labctl.catalog.new_lab import check_target, make_lab
    from labctl.catalog.user_folders import config_file, config_text, default_lab
    from labctl.errors import BadInput
    from labctl.host.files.atomic import write_atomically

    root = check_target(folder)
    config = config_file()
    default_lab(config)  # a settings file labctl cannot read is refused before anything is written
    source, _ = shipped_lab()
    if source is None:
        raise BadInput("this labctl install carries no lab to copy (no labctl/_lab): reinstall labctl.")
    made = make_lab(root, source)
    write_atomically(config, config_text(root))
    if made.made:
        say(f"made a lab in {root}: {', '.join(made.made)} ({made.engines} engines, {made.profiles} profiles)")
    else:
        say(f"{root} already is a lab folder: left as it is")
    say(f"recorded {root} as your default lab in {config}")
    return root
