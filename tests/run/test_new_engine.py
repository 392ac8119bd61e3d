"""An engine is a folder: a lab that holds only a copy of the harness engine under another name validates,
renders, starts, benchmarks and stops it through the CLI with no Python edit; its metric names, metrics
route and memory facts come from that folder. And a GPU engine whose folder states no memory fit is
refused by file and field, never skipped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import IMAGE, labctl

pytestmark = pytest.mark.docker
ENGINE = "parrot"


def _new_engine_lab(lab: Path) -> Path:
    """The lab fixture's copy, with every engine replaced by the harness's folder named parrot."""
    engines = lab / "engines"
    harness = engines / "harness"
    shutil.move(harness, lab / ENGINE)
    shutil.rmtree(engines)
    engines.mkdir()
    shutil.move(lab / ENGINE, engines / ENGINE)
    folder = engines / ENGINE
    for profile in (folder / "profiles").glob("*.yaml"):
        profile.unlink()
    spec = yaml.safe_load((folder / "engine.yaml").read_text())
    spec["title"] = "Parrot (the harness under another name)"
    (folder / "engine.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    profile = {
        "description": "the new engine's one profile",
        "image": IMAGE,
        "unpinned": True,
        "model": {"id": "labctl/harness-synthetic", "revision": "v1", "family": "synthetic", "quantization": "none"},
        "served_model_name": "parrot-tiny",
        "max_model_len": 4096,
        "max_num_seqs": 16,
        "port": free_port(),
        "extra_args": ["--cold-start", "0.2", "--ttft-ms", "5", "--tpot-ms", "1"],
    }
    (folder / "profiles" / "tiny.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return folder


def test_a_new_engine_folder_runs_through_the_cli(lab: Path, home: Path) -> None:
    folder = _new_engine_lab(lab)
    valid = labctl(lab, home, "validate")
    assert valid.code == 0, valid.stderr
    assert valid.stdout.splitlines()[0] == f"{ENGINE}/tiny: valid (no external CLI contract)"
    rendered = labctl(lab, home, "render", ENGINE, "--profile", "tiny", "--stdout")
    assert rendered.code == 0, rendered.stderr
    assert IMAGE in rendered.stdout and "parrot-tiny" in rendered.stdout

    started = labctl(lab, home, "up", ENGINE, "--profile", "tiny", "--allow-unpinned", "--json")
    assert started.code == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    try:
        bench = labctl(lab, home, "bench", "run", run_id, "--workload", "latency-probe", "--requests", "2", "--json")
        assert bench.code == 0, bench.stderr
        telemetry = json.loads(bench.stdout)["telemetry"]["engine"]
        assert telemetry["names_of"] == ENGINE and telemetry["url"].endswith("/metrics") and telemetry["samples"]
    finally:
        stopped = labctl(lab, home, "down", run_id)
    assert stopped.code == 0, stopped.stderr

    spec = yaml.safe_load((folder / "engine.yaml").read_text())
    spec["gpu"] = {"required": True, "archs": []}  # a GPU engine now, and its folder states no memory fit
    (folder / "engine.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    profile = yaml.safe_load((folder / "profiles" / "tiny.yaml").read_text())
    (folder / "profiles" / "tiny.yaml").write_text(yaml.safe_dump({**profile, "gpus": {"count": 1}}))
    refused = labctl(lab, home, "validate")
    assert refused.code == 2
    assert f"engines/{ENGINE}/engine.yaml" in refused.stderr and "memory_setting: missing" in refused.stderr
