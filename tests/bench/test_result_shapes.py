"""Result files are checked by their typed loader, not trusted by shape: a bench result or evaluation
that parses but has a field null, missing or of the wrong type, a newer schema, a list or a deep JSON
bomb is one line naming the file and the field; in `bench list`, `eval list`, `compare` and `report` it is
skipped on its own line, every other result is still used, and the command exits 1. Results come from a
real bench against the harness engine (a local process); the hostile files are copies of them, edited."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.support import run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine

BAD_ID = "b20261204-000000-ffffff"  # sorts after nothing real: named explicitly where it matters
LATEST_ID = "b29991231-235959-ffffff"  # sorts after every real result: a run id would pick it first
SMALL = ("--workload", "latency-probe", "--requests", "4", "--output-len", "4", "--input-len", "8", "--no-telemetry")


def start_engine() -> tuple[subprocess.Popen[bytes], int]:
    """The harness engine on a free port of 46100-46999 (tried at random: parallel workers pick apart)."""
    for _ in range(20):
        port = random.randrange(46100, 46999)
        engine = subprocess.Popen(
            [sys.executable, "-m", "labctl.harness", "--model", "truth", "--port", str(port), "--ttft-ms", "5"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while engine.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    time.sleep(0.2)
                    if engine.poll() is None:  # ours answered, not another worker's on the same port
                        return engine, port
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        engine.kill()
        engine.wait(10)
    raise RuntimeError("the harness engine could not start on a port in 46100-46999")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """A home with two external runs, one bench result each, measured against the harness engine."""
    home = tmp_path_factory.mktemp("shapes") / "home"
    engine, port = start_engine()
    try:
        runs = []
        for _ in range(2):
            base = f"http://127.0.0.1:{port}/v1"
            done = run_labctl("bench", "run", "--base-url", base, "--model", "truth", *SMALL, "--json", env=_env(home))
            assert done.code == 0, done.stderr
            runs.append(json.loads(done.stdout)["run_id"])
        yield home, runs[0], runs[1]
    finally:
        engine.terminate()
        engine.wait(10)


def _env(home: Path) -> dict[str, str]:
    return {"LABCTL_HOME": str(home)}


@pytest.fixture
def world(measured: tuple[Path, str, str], tmp_path: Path) -> tuple[Path, str, str]:
    home = tmp_path / "home"
    shutil.copytree(measured[0], home)
    return home, measured[1], measured[2]


def good_result(home: Path, run_id: str) -> dict[str, Any]:
    path = next(p for p in (home / "runs" / run_id / "bench").glob("b*.json") if p.stem not in (BAD_ID, LATEST_ID))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def plant(home: Path, run_id: str, content: Any, bench_id: str = LATEST_ID) -> Path:
    path = home / "runs" / run_id / "bench" / f"{bench_id}.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def edited(home: Path, run_id: str, change: Any, bench_id: str = LATEST_ID) -> dict[str, Any]:
    data = good_result(home, run_id)
    data["bench_id"] = bench_id
    change(data)
    return data


def one_line_skip(stderr: str, path: Path, *words: str) -> None:
    lines = [line for line in stderr.splitlines() if line.startswith("skipped ")]
    assert len(lines) == 1 and str(path) in lines[0], stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in stderr, stderr


HOSTILE: dict[str, tuple[Any, tuple[str, ...]]] = {
    "a field null": (lambda d: d.update(levels=None), ("field levels", "expected a list, found null")),
    "a level field of the wrong type": (
        lambda d: d["levels"][0].update(median_ttft_ms="fast"),
        ("levels[0].median_ttft_ms", "expected a number"),
    ),
    "a field missing": (lambda d: d["target"].clear() or d.pop("levels"), ("field levels: missing",)),
    "a number too large": (
        lambda d: d["levels"][0].update(median_tpot_ms=10**400),
        ("levels[0].median_tpot_ms", "a number too large"),
    ),
    "a NaN": (lambda d: d["levels"][0].update(output_throughput=float("nan")), ("not a finite number",)),
    "a future schema": (lambda d: d.update(schema_version=99), ("written by a newer labctl", "upgrade labctl")),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_bench_list_skips_a_bad_result_on_one_line_and_lists_the_rest(world: tuple[Path, str, str], case: str) -> None:
    home, run_a, _ = world
    change, words = HOSTILE[case]
    path = plant(home, run_a, edited(home, run_a, change))
    listed = run_labctl("bench", "list", run_a, "--json", env=_env(home))
    assert listed.code == 1, listed.stderr
    assert [r["bench_id"] for r in json.loads(listed.stdout)] == [good_result(home, run_a)["bench_id"]]
    one_line_skip(listed.stderr, path, *words)


@pytest.mark.parametrize("case", list(HOSTILE))
def test_bench_show_of_a_bad_result_is_one_line_exit_2(world: tuple[Path, str, str], case: str) -> None:
    home, run_a, _ = world
    change, words = HOSTILE[case]
    path = plant(home, run_a, edited(home, run_a, change, BAD_ID), BAD_ID)
    shown = run_labctl("bench", "show", BAD_ID, env=_env(home))
    assert (shown.code, shown.stdout) == (2, ""), shown.stderr
    assert shown.stderr.count("\n") == 1 and str(path) in shown.stderr and "Traceback" not in shown.stderr
    assert all(w in shown.stderr for w in words), shown.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        ('["a", "list"]', ("not a JSON object (found a list)",)),
        ('{"a": [' * 100 + "1" + "]}" * 100, ("nested more than 64 levels deep",)),
        ("[" * 100_000, ("nested too deeply",)),
        ('{"bench_id": "b1", "levels": [], "run_id": "x"', ("not readable JSON",)),  # truncated
    ],
)
def test_a_list_a_json_bomb_or_a_truncated_result_is_skipped(
    world: tuple[Path, str, str], content: str, words: tuple[str, ...]
) -> None:
    home, run_a, _ = world
    path = plant(home, run_a, content)
    listed = run_labctl("bench", "list", run_a, env=_env(home))
    assert listed.code == 1 and good_result(home, run_a)["bench_id"] in listed.stdout, listed.stderr
    one_line_skip(listed.stderr, path, *words)


@pytest.mark.parametrize("case", ["a field null", "a level field of the wrong type", "a future schema"])
def test_compare_skips_a_bad_result_and_uses_the_good_one(world: tuple[Path, str, str], case: str) -> None:
    home, run_a, run_b = world
    change, words = HOSTILE[case]
    path = plant(home, run_a, edited(home, run_a, change))  # the newest of run A: compare would pick it
    compared = run_labctl("compare", run_a, run_b, "--json", env=_env(home))
    assert compared.code == 1, compared.stderr
    ids = {row["id"] for row in json.loads(compared.stdout)["rows"]}
    assert ids == {good_result(home, run_a)["bench_id"], good_result(home, run_b)["bench_id"]}
    one_line_skip(compared.stderr, path, *words)


def test_compare_goes_on_when_a_run_record_is_truncated(world: tuple[Path, str, str]) -> None:
    home, run_a, run_b = world
    record = home / "runs" / run_a / "record.json"
    record.write_text(record.read_text()[:40])
    compared = run_labctl("compare", run_a, run_b, env=_env(home))
    assert compared.code == 1 and "Traceback" not in compared.stderr, compared.stderr
    assert f"skipped the record of {good_result(home, run_a)['bench_id']}" in compared.stderr
    assert str(record) in compared.stderr


def test_report_skips_a_bad_result_and_writes_the_rest(world: tuple[Path, str, str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    home, run_a, run_b = world
    path = plant(home, run_a, edited(home, run_a, lambda d: d["levels"][0].update(p99_ttft_ms=[1])))
    written = run_labctl("report", run_a, run_b, "-o", str(tmp_path / "report"), env=_env(home), timeout=300)
    assert written.code == 1, written.stderr
    assert (tmp_path / "report" / "index.html").is_file()
    one_line_skip(written.stderr, path, "levels[0].p99_ttft_ms", "expected a number, found a list")


def test_eval_list_skips_an_evaluation_of_the_wrong_shape(world: tuple[Path, str, str]) -> None:
    home, run_a, _ = world
    folder = home / "runs" / run_a / "eval"
    folder.mkdir()
    good = {
        "schema_version": 1,
        "eval_id": "e20261204-000000-aaaaaa",
        "run_id": run_a,
        "created_at": "2026-12-04T00:00:00.000Z",
        "suite": {"name": "s", "version": "1", "sha256": "ab", "full_version": "1+ab"},
        "score": 0.5,
        "passed": 1,
        "total": 2,
        "cases": [],
    }
    (folder / "e20261204-000000-aaaaaa.json").write_text(json.dumps(good))
    bad = folder / "e20261204-000001-bbbbbb.json"
    bad.write_text(json.dumps(good | {"eval_id": "e20261204-000001-bbbbbb", "suite": None}))
    listed = run_labctl("eval", "list", run_a, "--json", env=_env(home))
    assert listed.code == 1 and [e["eval_id"] for e in json.loads(listed.stdout)] == [good["eval_id"]]
    one_line_skip(listed.stderr, bad, "field suite", "expected a mapping, found null")
    named = run_labctl("eval", "diff", "e20261204-000001-bbbbbb", good["eval_id"], env=_env(home))
    assert named.code == 2 and named.stderr.count("\n") == 1 and str(bad) in named.stderr


def test_workloads_lists_the_good_files_and_skips_an_invalid_one(lab: Path) -> None:
    good = sorted(p.stem for p in (lab / "workloads").glob("*.yaml"))
    (lab / "workloads" / "broken.yaml").write_text("name: broken\nconcurrency: [1, two]\n")
    (lab / "workloads" / "list.yaml").write_text("- a\n- b\n")
    listed = run_labctl("workloads", "--json", lab=lab)
    assert listed.code == 1, listed.stderr
    assert [w["workload"] for w in json.loads(listed.stdout)] == good
    lines = listed.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("skipped workload ") for line in lines), listed.stderr
    assert "broken.yaml" in listed.stderr and "list.yaml" in listed.stderr and "Traceback" not in listed.stderr


def test_suites_lists_the_good_suites_and_skips_an_invalid_one(lab: Path) -> None:
    good = sorted(p.parent.name for p in (lab / "suites").glob("*/suite.yaml"))
    good += sorted(f"lm-eval:{p.parent.name}" for p in (lab / "suites" / "lm-eval").glob("*/source.yaml"))
    for name, text in (("broken", "name: broken\ncases: [1, two]\n"), ("listed", "- a\n- b\n")):
        (lab / "suites" / name).mkdir()
        (lab / "suites" / name / "suite.yaml").write_text(text)
    listed = run_labctl("suites", "--json", lab=lab)
    assert listed.code == 1, listed.stderr
    assert [s["suite"] for s in json.loads(listed.stdout)] == good
    lines = listed.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("skipped suite ") for line in lines), listed.stderr
    assert "broken" in lines[0] and "listed" in lines[1] and "Traceback" not in listed.stderr
    plain = run_labctl("suites", lab=lab)
    assert plain.code == 1 and all(name in plain.stdout for name in good)
