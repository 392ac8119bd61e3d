"""Records on a shared host: no lost updates between `up` and a concurrent `down`, a run stopped from
another home is recorded in the home that owns it, `down ENGINE` acts only on your own runs here."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import containers_of, labctl, record, remove_runs, up, write_profile


def test_down_during_up_is_not_overwritten(lab: Path, home: Path) -> None:
    write_profile(lab, "slow", free_port(), extra=["--cold-start", "3"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "labctl", "up", "harness", "--profile", "slow", "--allow-unpinned"],
        cwd=lab,
        env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    run_id = ""
    while not run_id or not containers_of(run_id):
        assert time.monotonic() < deadline and proc.poll() is None
        runs = sorted((home / "runs").glob("*/record.json")) if (home / "runs").is_dir() else []
        run_id = runs[0].parent.name if runs else ""
        time.sleep(0.1)
    assert labctl(lab, home, "down", run_id, "--reason", "GPU needed now").code == 0
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "was stopped by" in err
    final = record(home, run_id)
    assert final["status"] == "stopped" and final["stop_reason"] == "GPU needed now"


def test_down_from_another_home_updates_the_owning_record(lab: Path, home: Path, tmp_path: Path) -> None:
    write_profile(lab, "p", free_port())
    result = up(lab, home, "p")
    assert result.code == 0, result.stderr
    run_id = __import__("json").loads(result.stdout)["run_id"]
    other = tmp_path / "other-home"
    other.mkdir()
    assert labctl(lab, other, "down", run_id).code == 0
    owning = record(home, run_id)
    assert owning["status"] == "stopped" and (home / "runs" / run_id / "serve.log").is_file()
    assert containers_of(run_id) == []


def test_down_engine_acts_only_on_your_runs_here_and_asks_for_more_than_one(
    lab: Path, home: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-home"
    other.mkdir()
    ids = []
    for name, where in (("a", home), ("b", home), ("c", other)):
        write_profile(lab, name, free_port())
        result = up(lab, where, name)
        assert result.code == 0, result.stderr
        ids.append(__import__("json").loads(result.stdout)["run_id"])
    try:
        refused = labctl(lab, home, "down", "harness")
        assert refused.code == 2 and "matches 2 of your runs" in refused.stderr
        done = labctl(lab, home, "down", "harness", "--all")
        assert done.code == 0 and done.stdout.count("stopped ") == 2
        assert containers_of(ids[2]), "another home's run is not touched by down ENGINE"
    finally:
        remove_runs(other)
