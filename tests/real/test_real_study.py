"""A short version of studies/cpu-real.yaml, run unattended by `labctl study run` on the real vLLM on CPU: two
cells (prefix caching on and off) brought up, canaried, measured on the shared-prefix workload and taken down
one after the other; the study's state and report say so, and the engine's own counters, sampled into each
bench result, show the difference. The GPU-free study tests (tests/study/) cover resume and failures."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.real_engine import RealLab, logs_of_runs, real_lab
from helpers.support import REPO

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

NAME = "cpu-real-short"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLab]:
    lab = real_lab(tmp_path_factory.mktemp("real-study"))
    study = yaml.safe_load((REPO / "studies" / "cpu-real.yaml").read_text())
    study.update(
        study=NAME,
        workloads=[{"name": "shared-prefix", "concurrency": [1, 2], "requests": 6}],
        suites=[],
        timeout_s=600,
    )
    (lab.lab / "studies").mkdir()
    (lab.lab / "studies" / f"{NAME}.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    yield lab
    lab.down_all()


def prefix_hits(run_dir: Path, result: dict[str, Any]) -> float:
    """How many prompt tokens the engine's own counter (vllm:prefix_cache_hits_total, sampled by the bench into
    its telemetry file) says came from the prefix cache while the bench ran."""
    lines = (run_dir / "bench" / result["telemetry_file"]).read_text().splitlines()
    hits = [d["values"]["prefix_cache_hit_rate.num"] for d in map(json.loads, lines) if "values" in d]
    hits = [h for h in hits if h is not None]
    return max(hits) - min(hits) if hits else 0.0


def test_the_cpu_real_study_runs_both_cells_unattended(real: RealLab) -> None:
    done = real.labctl("study", "run", NAME, "--port", str(free_port()), timeout=1500)
    assert done.code == 0, f"{done.stdout[-3000:]}{done.stderr[-3000:]}{logs_of_runs(real.home)}"
    folder = real.home / "studies" / NAME
    cells = [json.loads(p.read_text()) for p in sorted((folder / "cells").glob("*.json"))]
    assert len(cells) == 2 and {c["state"] for c in cells} == {"done"}, [c.get("failure") for c in cells]
    hits: dict[bool, float] = {}
    for cell in cells:
        benches = [b for b in cell["benches"] if not b["canary"]]
        assert benches and all(b["status"] == "complete" for b in benches)
        run_dir = real.home / "runs" / cell["run_id"]
        result = json.loads((run_dir / "bench" / f"{benches[0]['bench_id']}.json").read_text())
        assert result["study"], "a study's bench names its study and cell"
        hits["--enable-prefix-caching" in cell["cell"]] = prefix_hits(run_dir, result)
    assert hits[True] > 0 and hits[False] == 0, hits
    assert (folder / "report").is_dir() and any((folder / "report").iterdir())
    # The waste figure on a real engine: every cell's record has the engine's own cold start, so it is a figure,
    # never "not checked" (printed: `pytest -s` shows what this machine measured)
    [waste] = [
        line for line in (folder / "report" / "report.md").read_text().splitlines() if line.startswith("- waste ")
    ]
    assert "GPU-hours" in waste and "not checked" not in waste, waste
    print(f"\ncpu-real-short {waste[2:]}")
    left = [
        cid
        for cell in cells
        for cid in subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=labctl.run_id={cell['run_id']}"], capture_output=True, text=True
        ).stdout.split()
    ]
    assert left == [], "a study takes every cell's engine down"
    again = real.labctl("study", "run", NAME, "--port", str(free_port()), timeout=300)
    assert again.code == 0 and "2 reused" in again.stdout + again.stderr, again.stdout + again.stderr
    status = real.labctl("study", "status", NAME, "--json")
    assert status.code == 0 and "done" in status.stdout, status.stderr
