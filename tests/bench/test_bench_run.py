"""labctl bench RUN_ID against a harness engine started by labctl (a resident one: its key is used
without ever being shown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import labctl, up, write_profile

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


def test_a_bench_keeps_telemetry_series_and_a_per_request_file(lab: Path, home: Path) -> None:
    """The harness engine in Docker, benched with --repeat 2: the engine's /metrics is sampled every
    second during each level (its own harness_* names, mapped), every request is in the JSONL beside
    the result, and the GPU samples this GPU-free host cannot give are said to be missing, with why."""
    write_profile(lab, "t", free_port(), extra=["--ttft-ms", "30", "--tpot-ms", "25"])
    info = json.loads(up(lab, home, "t").stdout)
    result = labctl(
        lab,
        home,
        "bench",
        info["run_id"],
        "--workload",
        "latency-probe",
        "--requests",
        "12",
        "--output-len",
        "16",
        "--repeat",
        "2",
        "--json",
    )
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    folder = home / "runs" / info["run_id"] / "bench"
    lines = [json.loads(line) for line in (folder / doc["requests_file"]).read_text().splitlines()]
    assert lines[0] == {"format": "labctl-requests/1"}
    assert sorted({(r["level"], r["repeat"]) for r in lines[1:]}) == [(0, 0), (0, 1)] and len(lines) == 25
    assert all(r["ok"] and len(r["itl_ms"]) == r["output_tokens"] - 1 == 15 for r in lines[1:])
    level = doc["levels"][0]
    assert level["repeat"] == 2 and level["completed"] == 24 and len(level["repeats"]) == 2
    low, high = level["median_tpot_ms_ci95"]
    assert low <= level["median_tpot_ms"] <= high
    telemetry = doc["telemetry"]
    assert telemetry["engine"]["names_of"] == "harness" and telemetry["engine"]["samples"] >= 4
    assert telemetry["engine"]["mapping"]["running"] == "harness_num_requests_running"
    assert "no nvidia-smi" in telemetry["missing"]["gpu"] and "no gpu samples" in result.stderr.lower()
    per_level = level["telemetry"]["engine"]
    assert per_level["samples"] >= 2 and per_level["running"]["max"] >= 1
    assert per_level["generation_tokens"]["increase"] > 0
    for name in (doc["requests_file"], doc["telemetry_file"]):  # group-writable like the result beside them
        assert (folder / name).stat().st_mode & 0o777 == (folder / f"{doc['bench_id']}.json").stat().st_mode & 0o777
    series = [json.loads(line) for line in (folder / doc["telemetry_file"]).read_text().splitlines()]
    assert {s["source"] for s in series} == {"engine"} and all("running" in s["values"] for s in series)
