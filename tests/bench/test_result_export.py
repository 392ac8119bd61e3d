"""One result out of labctl: `bench show --format csv|markdown|json` gives a row per level with every metric of
the table and its 95 % interval bounds, and compare's CSV carries them too; a cell a spreadsheet would run as a
formula is quoted."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.harness_proc import harness
from helpers.lab_copy import copy_lab
from helpers.records import harness_run_record
from helpers.support import Result, run_labctl

from labctl.bench.metric_table import METRICS, metric_columns

pytestmark = pytest.mark.process


def labctl(world: dict[str, Any], *args: str) -> Result:
    return run_labctl(*args, lab=world["lab"], env={"LABCTL_HOME": str(world["home"])})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("export")
    lab, home = root / "lab", root / "home"
    copy_lab(lab)
    world: dict[str, Any] = {"lab": lab, "home": home, "ids": []}
    with harness("--ttft-ms", "5", "--tpot-ms", "1", model="harness-smoke") as (base, _):
        for _ in range(2):
            run = harness_run_record(lab, home, base, "harness-smoke")
            args = ("--workload", "chat-sweep", "--concurrency", "1,2", "--requests", "6", "--input-len", "8")
            done = labctl(world, "bench", "run", run, *args, "--output-len", "4", "--json")
            assert done.code == 0, done.stderr
            world["ids"].append(json.loads(done.stdout)["bench_id"])
    return world


def test_one_result_as_csv_markdown_and_json(world: dict[str, Any]) -> None:
    bench = world["ids"][-1]
    out = labctl(world, "bench", "show", bench[-6:], "--format", "csv")  # a part of the id, as people type it
    assert out.code == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [int(r["concurrency"]) for r in rows] == [1, 2] and {r["bench_id"] for r in rows} == {bench}
    assert set(metric_columns()) <= set(rows[0]), "every metric and every interval bound is a column"
    assert any(m.interval for m in METRICS)
    for row in rows:
        low, mid, high = (
            float(row[k]) for k in ("median_ttft_ms_ci95_low", "median_ttft_ms", "median_ttft_ms_ci95_high")
        )
        assert low <= mid <= high, row
        assert row["interval_basis"] == f"n={row['completed']} requests"
    as_json = json.loads(labctl(world, "bench", "show", bench, "--format", "json").stdout)
    assert [r["concurrency"] for r in as_json] == [1, 2] and as_json[0]["median_ttft_ms"] is not None
    markdown = labctl(world, "bench", "show", bench, "--format", "markdown").stdout.splitlines()
    assert markdown[0].startswith("| bench_id | run_id |") and len(markdown) == 4, markdown
    wrong = labctl(world, "bench", "show", bench, "--format", "xml")
    assert wrong.code == 2 and "--format 'xml'" in wrong.stderr, wrong


def test_a_formula_in_a_result_file_is_quoted_in_the_csv(world: dict[str, Any]) -> None:
    bench = world["ids"][0]
    path = next(Path(world["home"]).glob(f"runs/*/bench/{bench}.json"))
    result = json.loads(path.read_text())
    result["target"]["model"] = '=HYPERLINK("http://x")'
    path.write_text(json.dumps(result))
    rows = list(csv.DictReader(io.StringIO(labctl(world, "bench", "show", bench, "--format", "csv").stdout)))
    assert rows[0]["model"] == '\'=HYPERLINK("http://x")'


def test_compare_csv_carries_every_metric_and_its_interval(world: dict[str, Any]) -> None:
    done = labctl(world, "compare", *world["ids"], "--format", "csv", "--allow-mismatch")
    assert done.code == 0, done.stderr
    header = next(csv.reader(io.StringIO(done.stdout)))
    assert "median_ttft_ms_ci95_low" in header and "median_ttft_ms_ci95_high" in header, header
    assert all(m.key in header or m.label in header for m in METRICS), header  # by label where compare shows it
