"""A workload's Hub dataset is untrusted input: repo, revision and file full-match the Hub's name rules,
come together and never with a local path; what the lab's workloads read is what gc keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from labctl.bench.dataset_pin import workload_datasets
from labctl.bench.workloads import load_workload
from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.host.hub.cache import repo_folder

pytestmark = pytest.mark.unit

HUB = {"kind": "sharegpt", "repo": "org/sg", "revision": "main", "file": "data/sg.json"}


def lab_with(tmp_path: Path, dataset: dict[str, Any]) -> Lab:
    (tmp_path / "workloads").mkdir()
    spec = {"description": "x", "dataset": dataset, "concurrency": [1]}
    (tmp_path / "workloads" / "w.yaml").write_text(yaml.safe_dump(spec))
    return Lab(tmp_path)


@pytest.mark.parametrize(
    "change, said",
    [
        ({"repo": "org/../etc"}, "dataset.repo"),
        ({"repo": "just-a-name"}, "dataset.repo"),
        ({"revision": "../main"}, "dataset.revision"),
        ({"revision": "main\nx"}, "dataset.revision"),
        ({"file": "../secret.json"}, "dataset.file"),
        ({"file": "/etc/passwd"}, "dataset.file"),
        ({"file": None}, "no file"),
        ({"path": "local.json"}, "not both"),
        ({"kind": "random", "input_len": 4, "output_len": 4}, "belongs to jsonl or sharegpt"),
    ],
)
def test_a_bad_hub_dataset_is_refused_in_one_line(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    dataset = {k: v for k, v in (HUB | change).items() if v is not None}
    with pytest.raises(BadInput) as refused:
        load_workload(lab_with(tmp_path, dataset), "w")
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_gc_keeps_the_snapshot_a_workload_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    lab = lab_with(tmp_path, HUB)
    assert load_workload(lab, "w").hub_dataset == ("org/sg", "main", "data/sg.json")
    assert workload_datasets(lab) == set()  # not fetched: nothing of it in the cache
    refs = repo_folder(tmp_path / "cache" / "hub", "org/sg", "dataset") / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("b" * 40)
    assert workload_datasets(lab) == {("org/sg", "b" * 40)}
    (lab.workloads_dir / "broken.yaml").write_text("description: [\n")
    assert workload_datasets(lab) is None  # unreadable: nobody can tell what it needs


def test_validate_refuses_a_workload_asking_for_more_prompts_than_its_dataset_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    from labctl.bench.prompt_slots import check_lab_workloads

    (tmp_path / "workloads").mkdir()
    convs = [{"conversations": [{"value": f"q{i} a b c d"}, {"value": "a b c d"}]} for i in range(10)]
    (tmp_path / "workloads" / "sg.json").write_text(json.dumps(convs))
    spec = {"description": "x", "dataset": {"kind": "sharegpt", "path": "sg.json"}, "concurrency": [1, 2]}
    (tmp_path / "workloads" / "w.yaml").write_text(yaml.safe_dump(spec | {"requests": 4}))
    (tmp_path / "workloads" / "hub.yaml").write_text(yaml.safe_dump({**spec, "dataset": HUB}))
    with pytest.raises(BadInput, match="sends 11 prompts but its dataset holds 10 distinct"):
        check_lab_workloads(Lab(tmp_path))
    (tmp_path / "workloads" / "w.yaml").write_text(yaml.safe_dump(spec | {"requests": 3}))
    (note,) = check_lab_workloads(Lab(tmp_path))
    assert "workload hub: its Hub dataset is not fetched" in note and "labctl fetch --workload hub" in note
