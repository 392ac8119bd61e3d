"""bench and eval against an endpoint that fails, floods or hangs: bounded reads, bounded time, and
a result that says it failed instead of a score."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.hostile_server import hostile_server
from helpers.support import run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

SMALL = ("--workload", "latency-probe", "--requests", "3", "--output-len", "8", "--input-len", "16")


def last_line(text: str) -> str:
    """stderr ends with the error line; progress lines for people may come before it."""
    return text.splitlines()[-1] if text else ""


def _run(lab: Path, home: Path, *args: str, timeout: float = 60):  # type: ignore[no-untyped-def]
    return run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home)}, timeout=timeout)


def test_bench_where_every_request_fails_exits_1_and_stores_failed(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with hostile_server("fail") as base:
        result = _run(lab, home, "bench", "run", "--base-url", base, "--model", "m", *SMALL, "--concurrency", "1,2")
    assert result.code == 1, result
    assert last_line(result.stderr).startswith("Error: every request failed: HTTP 500: the engine is on fire")
    assert "Traceback" not in result.stderr
    [stored] = list(home.glob("runs/*/bench/*.json"))
    doc = json.loads(stored.read_text())
    assert doc["status"] == "failed" and [level["concurrency"] for level in doc["levels"]] == [1]
    compared = _run(lab, home, "compare", doc["bench_id"], "b20261203-015815-a1b2c3")
    assert compared.code == 2 and f"bench result {doc['bench_id']} failed" in compared.stderr, compared.stderr


def test_a_huge_model_list_is_refused_without_reading_it_all(lab: Path, tmp_path: Path) -> None:
    with hostile_server("huge-models") as base:
        started = time.monotonic()
        result = _run(lab, tmp_path / "home", "bench", "run", "--base-url", base, "--model", "m", *SMALL)
    assert result.code == 2 and "Traceback" not in result.stderr, result
    assert "8 MiB" in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert time.monotonic() - started < 20


def test_a_huge_error_body_fails_the_request_not_the_host(lab: Path, tmp_path: Path) -> None:
    with hostile_server("huge-error") as base:
        result = _run(lab, tmp_path / "home", "bench", "run", "--base-url", base, "--model", "m", *SMALL)
    assert result.code == 1 and "Traceback" not in result.stderr, result
    assert last_line(result.stderr).startswith("Error: every request failed: "), result.stderr
    assert "8 MiB" in result.stderr


def test_the_default_request_timeout_is_two_minutes() -> None:
    from labctl.bench.bench_request import BenchRequest

    assert BenchRequest(workload=None).request_timeout == 120.0
    shown = run_labctl("bench", "run", "--help")
    assert "--request-timeout" in shown.stdout and "120" in shown.stdout


def test_an_overall_deadline_ends_a_bench_against_a_hanging_endpoint(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with hostile_server("hang") as base:
        started = time.monotonic()
        result = _run(lab, home, "bench", "run", "--base-url", base, "--model", "m", *SMALL, "--deadline", "2")
        took = time.monotonic() - started
    assert result.code == 1 and "Traceback" not in result.stderr, result
    assert last_line(result.stderr).startswith("Error: the bench passed its deadline of 2 s"), result.stderr
    assert took < 20
    [stored] = list(home.glob("runs/*/bench/*.json"))
    assert json.loads(stored.read_text())["status"] == "timed_out"


@pytest.mark.parametrize("mode", ["fail", "huge-error"])
def test_eval_where_every_answer_fails_exits_1_and_stores_no_valid_score(lab: Path, tmp_path: Path, mode: str) -> None:
    home = tmp_path / "home"
    with hostile_server(mode) as base:
        result = _run(lab, home, "eval", "run", "--base-url", base, "--model", "m", "--suite", "short-answer")
    assert result.code == 1 and "Traceback" not in result.stderr, result
    assert result.stderr.startswith("Error: every request failed: "), result.stderr
    [stored] = list(home.glob("runs/*/eval/*.json"))
    doc = json.loads(stored.read_text())
    assert doc["status"] == "failed" and doc["score"] is None
    listed = _run(lab, home, "eval", "list", doc["run_id"])
    assert listed.code == 0 and "failed" in listed.stdout
