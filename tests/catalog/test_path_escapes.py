"""Paths built from a colleague's file or a command-line id stay inside the lab (or runs/): no `..`,
no absolute path, no symlink that leads out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.lab_copy import copy_lab

from labctl.bench.results import find_result
from labctl.bench.workloads import load_workload, make_prompts
from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.quality.evaluate import find_eval
from labctl.quality.suites import load_suite
from labctl.run.records.store import Runs

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "20261203-015815-a1b2c3"


def _lab(tmp_path: Path) -> Lab:
    return Lab(copy_lab(tmp_path / "lab", ("workloads", "suites")))


def _dataset_workload(lab: Lab, path: str, kind: str = "jsonl") -> None:
    (lab.workloads_dir / "evil.yaml").write_text(
        f"description: d\ndataset: {{kind: {kind}, path: '{path}'}}\nrequests: 2\nconcurrency: [1]\n"
    )


@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "data/../../secret.jsonl", "a\\..\\b"])
def test_dataset_paths_are_plain_relative_paths(tmp_path: Path, path: str) -> None:
    lab = _lab(tmp_path)
    _dataset_workload(lab, path)
    with pytest.raises(BadInput, match=r"workloads/evil\.yaml:2: dataset\.path"):
        load_workload(lab, "evil")


def test_dataset_symlinks_leaving_workloads_are_refused(tmp_path: Path) -> None:
    lab = _lab(tmp_path)
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"prompt": "the host secret"}\n')
    (lab.workloads_dir / "data.jsonl").symlink_to(secret)
    _dataset_workload(lab, "data.jsonl")
    workload = load_workload(lab, "evil")
    with pytest.raises(BadInput, match="outside"):
        make_prompts(workload, 2, salt=0)


def test_dataset_inside_workloads_is_read(tmp_path: Path) -> None:
    lab = _lab(tmp_path)
    (lab.workloads_dir / "data").mkdir(exist_ok=True)
    (lab.workloads_dir / "data" / "p.jsonl").write_text('{"prompt": "hello there"}\n')
    _dataset_workload(lab, "data/p.jsonl")
    assert make_prompts(load_workload(lab, "evil"), 1, salt=0)[0].text == "hello there"


@pytest.mark.parametrize("kind", ["workload", "suite"])
def test_lab_file_symlinks_leaving_the_lab_are_refused(tmp_path: Path, kind: str) -> None:
    lab = _lab(tmp_path)
    outside = tmp_path / "outside.yaml"
    if kind == "workload":
        shutil.copy(lab.workloads_dir / "latency-probe.yaml", outside)
        (lab.workloads_dir / "evil.yaml").symlink_to(outside)
        with pytest.raises(BadInput, match="outside the lab"):
            load_workload(lab, "evil")
    else:
        shutil.copy(lab.root / "suites/short-answer/suite.yaml", outside)
        (lab.root / "suites/evil").mkdir()
        (lab.root / "suites/evil/suite.yaml").symlink_to(outside)
        with pytest.raises(BadInput, match="outside the lab"):
            load_suite(lab, "evil")


def _home_with_a_secret(tmp_path: Path) -> Runs:
    (tmp_path / "runs" / RUN_ID / "bench").mkdir(parents=True)
    (tmp_path / "runs" / RUN_ID / "eval").mkdir(parents=True)
    (tmp_path / "secret.json").write_text(json.dumps({"secret": "outside runs"}))
    return Runs(tmp_path)


@pytest.mark.parametrize("given", ["../../../secret", "b../../../secret", "b" + RUN_ID + "\n", "/etc/passwd"])
def test_bench_ids_are_checked_before_a_path_is_built(tmp_path: Path, given: str) -> None:
    with pytest.raises(BadInput, match="is not a bench id"):
        find_result(_home_with_a_secret(tmp_path), given)


@pytest.mark.parametrize("given", ["../../../secret", "e../../../secret", "e" + RUN_ID + "\n"])
def test_eval_ids_are_checked_before_a_path_is_built(tmp_path: Path, given: str) -> None:
    with pytest.raises(BadInput, match="is not an evaluation id"):
        find_eval(_home_with_a_secret(tmp_path), given)
