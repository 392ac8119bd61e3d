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
