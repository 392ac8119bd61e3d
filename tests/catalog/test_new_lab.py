"""`labctl init`'s library part: which folders it may write into, and what a new lab holds (only regular files
of the shipped lab: no symlink, no bytecode)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.support import REPO

from labctl.catalog.lab import LAB_FOLDERS, is_lab
from labctl.catalog.new_lab import check_target, make_lab
from labctl.errors import BadInput


def test_init_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine\n")
    with pytest.raises(BadInput, match=r"busy is not empty and not a lab folder .* Name a new folder"):
        check_target(str(tmp_path / "busy"))
    with pytest.raises(BadInput, match=r"notes\.txt is a file, not a folder"):
        check_target(str(tmp_path / "busy" / "notes.txt"))
    with pytest.raises(BadInput, match=r"the folder .*/no does not exist"):
        check_target(str(tmp_path / "no" / "lab"))
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["notes.txt"]


def test_init_takes_a_new_an_empty_or_a_lab_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert check_target(str(tmp_path / "new")) == tmp_path / "new"
    assert check_target(str(tmp_path / "empty")) == tmp_path / "empty"
    assert check_target(str(REPO)) == REPO
    assert make_lab(REPO, REPO).made == ()  # an existing lab is left as it is


def test_a_new_lab_copies_regular_files_only(tmp_path: Path) -> None:
    source = tmp_path / "shipped"
    for name in LAB_FOLDERS:
        (source / name).mkdir(parents=True)
    (source / "engines" / "e" / "profiles").mkdir(parents=True)
    (source / "engines" / "e" / "engine.yaml").write_text("title: e\n")
    (source / "engines" / "e" / "profiles" / "p.yaml").write_text("image: x\n")
    (source / "engines" / "e" / "run").write_text("#!/bin/sh\n")
    (source / "engines" / "e" / "run").chmod(0o755)
    (source / "engines" / "e" / "__pycache__").mkdir()
    (source / "engines" / "e" / "leak.yaml").symlink_to("/etc/passwd")
    made = make_lab(tmp_path / "lab", source)
    lab = tmp_path / "lab"
    assert is_lab(lab) and (made.engines, made.profiles) == (1, 1)
    assert sorted(p.name for p in (lab / "engines" / "e").iterdir()) == ["engine.yaml", "profiles", "run"]
    assert os.access(lab / "engines" / "e" / "run", os.X_OK)
    assert made.made == ("engines/", "templates/", "workloads/", "suites/", "studies/", "hosts.yaml", ".gitignore")
