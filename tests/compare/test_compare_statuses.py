"""compare and report show a result's honest status (issue 29, classes 7 and 11): a partial result and a
level on a shared engine carry their caveats in the table and its list, never as clean numbers; a run id
picks only complete results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.harness_proc import free_port_in, harness
from helpers.support import run_labctl

pytestmark = pytest.mark.process  # the CLI and the harness engine as local processes; no Docker

BENCH = ("--workload", "latency-probe", "--output-len", "8", "--input-len", "16", "--no-telemetry")


def _bench(lab: Path, home: Path, *engine_args: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    with harness("--ttft-ms", "2", "--tpot-ms", "1", *engine_args, model="h", port=free_port_in(48000, 48999)) as (
        base,
        _,
    ):
        run_labctl(
            "bench",
            "run",
            "--base-url",
            base + "/v1",
            "--model",
            "h",
            *BENCH,
            "--concurrency",
            "2",
            "--requests",
            "30",
            "--json",
            *extra,
            lab=lab,
            env={"LABCTL_HOME": str(home)},
        )
    newest = sorted(home.glob("runs/*/bench/b*[0-9a-f].json"), key=lambda p: p.stat().st_mtime)[-1]
    return dict(json.loads(newest.read_text()))


def test_compare_shows_a_partial_result_as_partial(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    clean = _bench(lab, home)
    partial = _bench(lab, home, "--error-rate", "0.6", "--seed", "2")
    assert clean["status"] == "complete" and partial["status"] == "partial"
    env = {"LABCTL_HOME": str(home)}
    table = run_labctl("compare", clean["bench_id"], partial["bench_id"], lab=lab, env=env)
    assert table.code == 0, table
    assert "partial (too many failed)" in table.stdout
    assert "B: partial: more than 10% of a level's requests failed" in table.stdout
    as_json = json.loads(
        run_labctl("compare", clean["bench_id"], partial["bench_id"], "--json", lab=lab, env=env).stdout
    )
    assert any(row.get("partial") and row.get("status") == "partial" for row in as_json["rows"])
    assert any("partial" in caveat for caveat in as_json["caveats"])
    by_run = run_labctl("compare", partial["run_id"], clean["bench_id"], lab=lab, env=env)
    assert by_run.code == 2 and "no complete bench result" in by_run.stderr


def test_compare_marks_a_level_measured_on_a_shared_engine(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    a = _bench(lab, home)
    b = _bench(lab, home)
    path = next(home.glob(f"runs/*/bench/{b['bench_id']}.json"))
    b["levels"][0]["engine_busier"] = {"peak_in_flight": 9, "client_concurrency": 2}  # as telemetry marks it
    path.write_text(json.dumps(b))
    table = run_labctl("compare", a["bench_id"], b["bench_id"], lab=lab, env={"LABCTL_HOME": str(home)})
    assert table.code == 0, table
    assert "B c=2: engine shared" in table.stdout
