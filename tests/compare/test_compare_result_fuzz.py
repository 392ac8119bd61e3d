"""compare, the one-result report's loading and `bench show` on a result with one part (at any depth)
replaced by an arbitrary value or removed: a table, or the bad result skipped on one line, or one
refusal (LabctlError); never another exception. The results are files in a temporary home."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers.hostile_json import mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labctl.bench.results import load_result
from labctl.cli.bench import print_result
from labctl.compare.formats import FORMATS, render
from labctl.compare.rules import compare
from labctl.compare.single import load_one
from labctl.errors import LabctlError
from labctl.run.records.store import Runs

pytestmark = pytest.mark.process  # fuzzing with many examples: not the seconds-long unit tier

RUN_A, RUN_B = "20261203-015815-a1b2c3", "20261203-015816-d4e5f6"
LATEST = "b29991231-235959-ffffff"


def result(run_id: str, bench_id: str) -> dict[str, Any]:
    level = {
        "concurrency": 1,
        "requests": 4,
        "completed": 4,
        "failed": 0,
        "median_ttft_ms": 20.0,
        "p99_ttft_ms": 21.0,
        "median_tpot_ms": 2.0,
        "median_itl_ms": 2.0,
        "p99_itl_ms": 2.5,
        "median_e2el_ms": 200.0,
        "output_throughput": 400.0,
        "request_throughput": 3.0,
        "goodput": 3.0,
        "client_cpu_share": 0.02,
        "median_ttft_ms_ci95": [19.0, 21.0],
        "warnings": ["CLIENT SATURATED: x"],
        "telemetry": {"engine": {"running": {"mean": 1.0, "max": 2.0}}},
    }
    return {
        "schema_version": 1,
        "bench_id": bench_id,
        "run_id": run_id,
        "status": "complete",
        "created_at": "2026-12-03T01:58:15.000Z",
        "target": {
            "engine": "harness",
            "profile": "smoke",
            "model": "m",
            "environment_label": "harness-check",
            "thinking": "off",
            "memory": {"setting": "--x", "value": 0.5, "meaning": "share"},
        },
        "workload": {
            "name": "chat-sweep",
            "sha256": "ab" * 32,
            "spec": {"slo": {"ttft_ms": 100}, "endpoint": "chat"},
            "overrides": [{"flag": "--requests", "value": 4}],
        },
        "client": {"host": "h", "labctl_version": "0.1.0"},
        "levels": [level],
        "warnings": [],
        "max_rate_meeting_slo": {"note": "n", "rule": "r", "slo": {"ttft_ms": 100}},
    }


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_compare_and_show_of_a_changed_result_never_crash(data: st.DataObject) -> None:
    bad = data.draw(mutated(result(RUN_A, LATEST)))
    with tempfile.TemporaryDirectory() as folder:
        runs = Runs(Path(folder))
        for run_id, bench_id in ((RUN_A, "b20261203-015815-000000"), (RUN_B, "b20261203-015816-000000")):
            (runs.dir(run_id) / "bench").mkdir(parents=True)
            (runs.dir(run_id) / "bench" / f"{bench_id}.json").write_text(json.dumps(result(run_id, bench_id)))
        path = runs.dir(RUN_A) / "bench" / f"{LATEST}.json"
        path.write_text(json.dumps(bad))
        skipped: list[str] = []
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                checks, rows, entries = compare(runs, [RUN_A, RUN_B], skipped.append)
                for fmt in FORMATS:
                    render(checks, rows, entries, fmt)
            except LabctlError:
                pass
            with contextlib.suppress(LabctlError):
                load_one(runs, RUN_A, skipped.append)
            with contextlib.suppress(LabctlError):
                print_result(load_result(path), str(path))
        assert all("\n" not in line for line in skipped)
