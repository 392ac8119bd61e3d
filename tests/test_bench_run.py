"""labctl bench RUN_ID against a harness engine started by labctl (a resident one: its key is used
without ever being shown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_proc import free_port
from lifecycle_helpers import labctl, up, write_profile

pytestmark = pytest.mark.docker


def test_bench_a_labctl_run(lab: Path, home: Path) -> None:
    write_profile(lab, "b", free_port())
    info = json.loads(up(lab, home, "b", "--resident").stdout)
    result = labctl(
        lab,
        home,
        "bench",
        info["run_id"],
        "--workload",
        "latency-probe",
        "--requests",
        "5",
        "--output-len",
        "4",
        "--json",
    )
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["run_id"] == info["run_id"] and doc["target"]["engine"] == "harness"
    assert doc["target"]["environment_label"] == "harness-check" and doc["target"]["image_digest"].startswith("sha256:")
    assert doc["levels"][0]["completed"] == 5
    assert (home / "runs" / info["run_id"] / "bench" / f"{doc['bench_id']}.json").is_file()
    key = json.loads(labctl(lab, home, "share", info["run_id"], "--json").stdout)["api_key"]
    assert key not in result.stdout + result.stderr
    assert key not in (home / "runs" / info["run_id"] / "bench" / f"{doc['bench_id']}.json").read_text()
