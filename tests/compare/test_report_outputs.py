"""report -o writes where it is told and nowhere else (issue 29, class 5): built beside the target and
renamed in, marked as labctl's, refusing a folder that is not its own, an empty path, `/` and a missing
parent, and leaving the old report whole when the new one fails midway. The result comes from a real
bench of the harness engine run as a local process (no Docker)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.harness_proc import harness
from helpers.records import harness_run_record
from helpers.support import REPO, Result, run_labctl

from labctl.run.records.store import Runs

pytestmark = pytest.mark.process  # local processes: the CLI and the harness engine

DIGEST = "sha256:" + "ab" * 32
REPORT_MARKER = ".labctl-report"  # labctl.host.files.outputs.REPORT_MARKER, spelled out: the name is the contract


def labctl(world: dict[str, Any], *args: str, cwd: Path | None = None) -> Result:
    return run_labctl(*args, lab=world["lab"], env={"LABCTL_HOME": str(world["home"])})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report-outputs")
    lab, home = root / "lab", root / "home"
    for folder in ("engines", "templates", "workloads", "suites"):
        shutil.copytree(REPO / folder, lab / folder)
    world: dict[str, Any] = {"lab": lab, "home": home}
    args = ("--workload", "latency-probe", "--requests", "4")
    with harness("--ttft-ms", "5", "--tpot-ms", "1", model="harness-smoke") as (base, _):
        for name in ("a", "b"):
            run = harness_run_record(lab, home, base, digest=DIGEST)
            done = labctl(world, "bench", "run", run, *args, "--json")
            assert done.code == 0, done.stderr
            world[name] = json.loads(done.stdout)["bench_id"]
    return world


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_report_carries_its_marker_and_replaces_labctls_own_report(world: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "r"
    first = labctl(world, "report", world["a"], "-o", str(target))
    assert first.code == 0, first.stderr
    marker = json.loads((target / REPORT_MARKER).read_text())
    assert marker["written_by"] == "labctl" and marker["bench_ids"] == [world["a"]] and marker["labctl_version"]
    assert REPORT_MARKER not in marker["files"] and "pareto.png" in marker["files"]  # what labctl wrote there
    again = labctl(world, "report", world["a"], world["b"], "-o", str(target))
    assert again.code == 0, again.stderr
    assert (target / "pareto.png").is_file()
    assert json.loads((target / REPORT_MARKER).read_text())["bench_ids"] == [world["a"], world["b"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no temporary folder left beside it

    # a file someone added to the report folder is never removed without --overwrite
    (target / "notes.md").write_text("what we saw")
    before = snapshot(target)
    refused = labctl(world, "report", world["a"], "-o", str(target))
    assert refused.code == 3 and "holds files labctl did not write there (notes.md)" in refused.stderr, refused.stderr
    assert snapshot(target) == before
    replaced = labctl(world, "report", world["a"], "-o", str(target), "--overwrite")
    assert replaced.code == 0 and not (target / "notes.md").exists(), replaced.stderr


@pytest.mark.parametrize("ids", [["a"], ["a", "b"]], ids=["one", "comparison"])
def test_a_foreign_folder_is_refused_exit_3_and_left_as_it_was(
    world: dict[str, Any], tmp_path: Path, ids: list[str]
) -> None:
    target = tmp_path / "photos"
    target.mkdir()
    (target / "report.md").write_text("my own notes\n")
    (target / "holiday.png").write_bytes(b"\x89PNG")
    before = snapshot(target)
    refused = labctl(world, "report", *[world[i] for i in ids], "-o", str(target))
    assert refused.code == 3, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "--overwrite" in refused.stderr
    assert snapshot(target) == before and sorted(p.name for p in tmp_path.iterdir()) == ["photos"]
    done = labctl(world, "report", *[world[i] for i in ids], "-o", str(target), "--overwrite")
    assert done.code == 0, done.stderr
    assert not (target / "holiday.png").exists() and (target / REPORT_MARKER).is_file()


def test_a_file_in_the_way_is_refused(world: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "r"
    target.write_text("a file\n")
    refused = labctl(world, "report", world["a"], "-o", str(target))
    assert refused.code == 3 and target.read_text() == "a file\n"


@pytest.mark.parametrize("given", ["", "/", ".", ".."])
def test_a_path_that_names_no_folder_of_its_own_is_refused(world: dict[str, Any], given: str) -> None:
    before = sorted(p.name for p in world["lab"].iterdir())
    refused = labctl(world, "report", world["a"], "-o", given)
    assert refused.code == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and refused.stderr.startswith("Error: ")
    assert sorted(p.name for p in world["lab"].iterdir()) == before  # the CLI ran in the lab folder


def test_a_missing_parent_is_refused_and_not_created(world: dict[str, Any], tmp_path: Path) -> None:
    refused = labctl(world, "report", world["a"], "-o", str(tmp_path / "no" / "such" / "r"))
    assert refused.code == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "does not exist" in refused.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("which", ["one", "comparison"])
def test_a_report_that_fails_midway_leaves_the_old_one_whole(
    world: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    from labctl.compare import report_folder as report
    from labctl.compare import single
    from labctl.compare.rules import compare

    target = tmp_path / "r"
    assert labctl(world, "report", world["a"], "-o", str(target)).code == 0
    before = snapshot(target)

    def half_drawn(folder: Path, *args: Any) -> list[str]:
        (folder / "throughput.png").write_bytes(b"half")
        raise RuntimeError("a plot failed")

    runs = Runs(world["home"])
    with pytest.raises(RuntimeError, match="a plot failed"):
        if which == "one":
            monkeypatch.setattr(single, "draw_one_result", half_drawn)
            single.write_one_result_report(target, single.load_one(runs, world["a"]))
        else:
            monkeypatch.setattr(report, "draw_plots", half_drawn)
            report.write_report(target, *compare(runs, [world["a"], world["b"]]))
    assert snapshot(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
