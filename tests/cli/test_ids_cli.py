"""Through the CLI: `show`, `export` and `bench list` take a run by a part of its id or as `latest`; a part that
names several runs is one `Error:` line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import run_labctl

from labctl.run.records.record import Endpoint, new_record
from labctl.run.records.store import Runs

pytestmark = pytest.mark.process

OLD, NEW = "20261207-041200-a1b2c3", "20261207-041300-ffee01"


def test_a_run_by_a_part_of_its_id_or_latest(tmp_path: Path) -> None:
    runs = Runs(tmp_path / "home")
    for run_id in (OLD, NEW):
        runs.save(new_record(run_id, "harness", "smoke", "m", Endpoint(), None, "harness-check", status="stopped"))
    env = {"LABCTL_HOME": str(runs.root.parent)}
    for given, meant in (("a1b2c3", OLD), ("20261207-0413", NEW), ("latest", NEW)):
        shown = run_labctl("show", given, "--json", env=env)
        assert shown.code == 0 and meant in shown.stdout, (given, shown)
    listed = run_labctl("bench", "list", "latest", env=env)
    assert listed.code == 0, listed
    several = run_labctl("show", "20261207-04", env=env)
    assert several.code == 2 and several.stderr.count("\n") == 1 and "names 2 run ids" in several.stderr, several
