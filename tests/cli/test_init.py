"""`labctl init` and a labctl run from outside any lab, through the real CLI (this checkout's code): init makes a
lab and records it as the default lab, refuses a non-empty folder with one line and writes nothing; with no lab
around, the lab that ships with labctl (for this editable install, the checkout) is used read-only, and what a
command renders goes to the user's data folder."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers.support import LABCTL, REPO, Result

pytestmark = pytest.mark.process


@pytest.fixture
def user(tmp_path: Path) -> dict[str, str]:
    """A user of their own: settings and data folders in tmp, no lab named by the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("LABCTL_LAB", "LABCTL_HOME")}
    return {**env, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data")}


def labctl(env: dict[str, str], cwd: Path, *args: str) -> Result:
    proc = subprocess.run([*LABCTL, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def refused(result: Result, start: str) -> None:
    assert result.code == 2, result
    assert result.stderr.startswith(f"Error: {start}") and result.stderr.count("\n") == 1, result.stderr


def test_init_makes_a_lab_and_records_it_as_the_default(user: dict[str, str], tmp_path: Path) -> None:
    made = labctl(user, tmp_path, "init", "mylab")
    assert made.code == 0, made
    lab = tmp_path / "mylab"
    assert made.stdout.splitlines() == [
        f"made a lab in {lab}: engines/, templates/, workloads/, suites/, studies/, hosts.yaml, .gitignore (6 engines, 12 profiles)",
        f"recorded {lab} as your default lab in {tmp_path}/config/labctl/config.yaml",
        f"next: cd {lab} && git init && labctl validate && labctl up harness --profile smoke --allow-unpinned",
    ]
    assert (lab / ".gitignore").read_text().splitlines()[1:] == [
        "runs/",
        ".state/",
        "/compose/*.yaml",
        "# a study's state and report (the study files beside them are yours)",
        "/studies/*/",
    ]
    assert (lab / "studies" / "harness-demo.yaml").is_file()
    assert os.access(lab / "engines" / "harness" / "persona" / "bin" / "vllm", os.X_OK)
    assert not list(lab.rglob("__pycache__"))
    # the new lab is the default one: from a folder outside any lab, its own changes show
    (lab / "engines" / "harness" / "profiles" / "mine.yaml").write_text(
        (lab / "engines" / "harness" / "profiles" / "smoke.yaml").read_text()
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = labctl(user, elsewhere, "profiles", "harness")
    assert listed.code == 0 and "mine" in listed.stdout, listed
    checked = labctl(user, elsewhere, "validate")
    assert checked.code == 0 and checked.stdout.endswith("ok: 13 profile(s) valid\n"), checked
    hosts = labctl(user, lab, "hosts", "--json")  # the hosts.yaml skeleton is a valid, empty hosts file
    assert hosts.code == 0 and '"name": "local"' in hosts.stdout, hosts
    again = labctl(user, tmp_path, "init", str(lab))
    assert again.code == 0 and again.stdout.startswith(f"{lab} already is a lab folder: left as it is\n"), again


def test_init_refuses_a_folder_that_is_not_empty_and_writes_nothing(user: dict[str, str], tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine\n")
    refused(labctl(user, busy, "init"), f"labctl init .: {busy} is not empty and not a lab folder")
    refused(labctl(user, tmp_path, "init", "busy/notes.txt"), "labctl init busy/notes.txt: ")
    refused(labctl(user, tmp_path, "init", "no/such/lab"), "labctl init no/such/lab: the folder ")
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "config").exists() and not (tmp_path / "no").exists()


def test_a_bad_settings_file_is_refused_before_init_writes(user: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "config" / "labctl" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("lab: [not, a, path]\n")
    refused(labctl(user, tmp_path, "init", "fresh"), f"{config}:1: lab: ")
    assert not (tmp_path / "fresh").exists()


def snapshot(*folders: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for folder in folders for p in folder.rglob("*") if p.is_file()}


def test_outside_any_lab_the_shipped_lab_is_read_only(user: dict[str, str], tmp_path: Path) -> None:
    before = snapshot(REPO / "compose", REPO / "engines")
    listed = labctl(user, tmp_path, "profiles")
    assert listed.code == 0 and re.search(r"\nharness +smoke ", listed.stdout), listed
    rendered = labctl(user, tmp_path, "render", "harness", "--profile", "smoke")
    assert rendered.code == 0, rendered
    assert rendered.stdout == f"{tmp_path}/data/labctl/compose/harness-smoke.yaml\n"
    assert Path(rendered.stdout.strip()).is_file()
    refused(labctl(user, tmp_path, "pin", "harness", "--profile", "smoke"), "labctl pin harness --profile smoke would")
    assert snapshot(REPO / "compose", REPO / "engines") == before
