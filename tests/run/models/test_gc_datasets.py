"""Dataset snapshots `labctl fetch --task` put in the cache: gc offers one only when this home's ledger says it
fetched it and no task set of the lab still pins it; a forged line naming another folder offers nothing."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from helpers.records import copy_lab

from labctl.catalog.lab import Lab
from labctl.quality.tasks import pinned_datasets
from labctl.run.models import gc
from labctl.run.models.datasets import dataset_acquisition
from labctl.run.models.fetch import Fetched
from labctl.run.records.acquired import Acquisition, Action, Kind

pytestmark = pytest.mark.unit

PINNED = ("openai/gsm8k", "740312add88f781978c0658806c59bc2815b9866")  # suites/lm-eval/gsm8k/source.yaml


def _snapshot(cache: Path, repo: str, commit: str) -> Fetched:
    repo_dir = cache / "hub" / ("datasets--" + repo.replace("/", "--"))
    blob = repo_dir / "blobs" / ("b" * 64)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x" * 1000)
    (repo_dir / "snapshots" / commit).mkdir(parents=True)
    (repo_dir / "snapshots" / commit / "test.jsonl").symlink_to(blob)
    return Fetched(repo, commit, commit, str(cache), 1, 1000, 1000, 0.1, False, "http://127.0.0.1:1")


def test_a_fetched_dataset_stays_while_a_task_set_pins_it_and_goes_after(tmp_path: Path) -> None:
    lab = copy_lab(tmp_path)
    line = dataset_acquisition(_snapshot(tmp_path / "cache", *PINNED))
    assert line.kind is Kind.DATASET and line.action is Action.FETCHED
    assert gc._datasets([line], pinned_datasets(Lab(lab))) == []
    shutil.rmtree(lab / "suites" / "lm-eval" / "gsm8k")
    (item,) = gc._datasets([line], pinned_datasets(Lab(lab)))
    assert item.kind == "dataset" and item.bytes == 1000 and item.where == line.folder
    assert gc._remove(item) is None and not Path(line.folder).parent.parent.exists()


def test_a_found_dataset_or_a_forged_folder_is_never_offered(tmp_path: Path) -> None:
    fetched = _snapshot(tmp_path / "cache", "org/other", "c" * 40)
    found = dataset_acquisition(dataclasses.replace(fetched, cached=True))
    forged = Acquisition(Kind.DATASET, Action.FETCHED, host="local", folder=str(tmp_path), name="x")
    model_shaped = Acquisition(
        Kind.DATASET, Action.FETCHED, host="local", folder=str(tmp_path / "cache" / "hub" / "models--a--b"), name="y"
    )
    assert gc._datasets([found, forged, model_shaped], set()) == []
    assert gc._datasets([dataset_acquisition(fetched)], None) == []  # a task set gc cannot read keeps all
    assert gc._datasets([dataset_acquisition(fetched)], set()) != []
