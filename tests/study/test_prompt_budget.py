"""A study's prompts: each (cell, repeat)'s canary and ladder start past every earlier bench's, so no prompt
reaches an engine twice in a study; plan counts what a dataset holds, refuses a study that asks for more, and
names the command that fetches or pins a Hub dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from labctl.bench.prompt_slots import prompts_for, slots_for
from labctl.bench.workloads import Workload, check_workload, with_overrides
from labctl.catalog.sourcefile import SourceFile
from labctl.host.hub.cache import repo_folder
from labctl.study.prompt_budget import bench_starts, bench_totals, plan_prompts

pytestmark = pytest.mark.unit

COMMIT = "a" * 40


def items(n: int) -> list[dict[str, Any]]:
    return [
        {"conversations": [{"from": "human", "value": f"q{i} one two three four"}, {"value": "a b c d e"}]}
        for i in range(n)
    ]


def workload(folder: Path, dataset: dict[str, Any]) -> Workload:
    data = {"description": "x", "dataset": dataset, "concurrency": [1, 2], "requests": 3}
    return Workload("sg", check_workload(SourceFile(folder / "sg.yaml", data), data), folder)


def sent_by(w: Workload, levels: list[int], repeat: int) -> list[str]:
    canary_start, ladder_start = bench_starts(w, levels, repeat)
    texts = []
    for bench, start in ((with_overrides(w, [levels[0]]), canary_start), (with_overrides(w, levels), ladder_start)):
        slots = slots_for(bench, first=start)
        for index in range(len(slots.levels)):
            for measured in (False, True):
                texts += [p.text for p in prompts_for(bench, slots, index, 0, measured)]
    return texts


def test_canary_ladder_and_repeats_never_share_a_prompt(tmp_path: Path) -> None:
    (tmp_path / "sg.json").write_text(json.dumps(items(60)))
    w = workload(tmp_path, {"kind": "sharegpt", "path": "sg.json"})
    assert bench_totals(w, [1, 2]) == (1 + 3, 1 + 3 + 2 + 3)
    sent = [t for r in (1, 2, 3) for t in sent_by(w, [1, 2], r)]
    assert len(sent) == 3 * 13 and len(set(sent)) == len(sent)
    budget = plan_prompts("sg", w, [[1, 2], [1]], 3, "org/none", allow_unpinned=False)
    assert (budget.needed, budget.available, budget.too_few, budget.refusals) == (39, 60, None, ())
    assert "39 per cell, 60 distinct available (words)" in budget.line()


def test_a_study_asking_for_more_than_the_dataset_holds_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sg.json").write_text(json.dumps(items(30)))
    w = workload(tmp_path, {"kind": "sharegpt", "path": "sg.json"})
    budget = plan_prompts("sg", w, [[1, 2]], 3, "org/none", allow_unpinned=False)
    assert budget.too_few is not None and "sends 39 prompts but its dataset holds 30 distinct" in budget.too_few


def test_a_hub_dataset_not_fetched_or_not_pinned_is_named_with_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    hub = {"kind": "sharegpt", "repo": "org/sg", "revision": "main", "file": "sg.json"}
    w = workload(tmp_path, hub)
    budget = plan_prompts("sg", w, [[1, 2]], 1, "org/none", allow_unpinned=False)
    assert any("`labctl pin --workload sg`" in r for r in budget.refusals)
    assert any("`labctl fetch --workload sg`" in r for r in budget.refusals)
    assert "unknown until fetched" in budget.line()
    folder = repo_folder(tmp_path / "cache" / "hub", "org/sg", "dataset")
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / "snapshots" / COMMIT / "sg.json").write_text(json.dumps(items(20)))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    fetched = plan_prompts("sg", w, [[1, 2]], 1, "org/none", allow_unpinned=True)
    assert fetched.refusals == () and fetched.available == 20
    assert f"Hub dataset org/sg@main (commit {COMMIT}), sg.json" in fetched.line()
