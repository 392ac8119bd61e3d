"""An evaluation where more than --max-error-rate of the cases got no answer (the endpoint failed, not the
model) is `partial` and exits 1, as a bench does; wrong answers alone never make it partial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.hostile_server import hostile_server
from helpers.support import run_labctl

pytestmark = pytest.mark.process  # a loopback server and the CLI as a subprocess


def evaluate(lab: Path, home: Path, base: str, *args: str):  # type: ignore[no-untyped-def]
    return run_labctl(
        "eval", "--base-url", base, "--model", "m", "--suite", "short-answer", *args, lab=lab,
        env={"LABCTL_HOME": str(home)},
    )  # fmt: skip


def stored(home: Path, doc: dict) -> dict:
    return dict(json.loads((home / "runs" / doc["run_id"] / "eval" / f"{doc['eval_id']}.json").read_text()))


def test_half_the_cases_unanswered_is_partial_and_exits_1(lab: Path, tmp_path: Path) -> None:
    with hostile_server("flaky") as base:
        result = evaluate(lab, tmp_path / "h", base, "--json")
        plain = evaluate(lab, tmp_path / "h", base)
    assert result.code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["status"] == "partial" and doc["unanswered"] == doc["total"] // 2 and doc["passed"] == 0
    assert doc["warnings"][0].startswith(f"PARTIAL: {doc['unanswered']}/{doc['total']} cases got no answer")
    assert doc["settings"]["max_error_rate"] == 0.1
    assert stored(tmp_path / "h", doc)["status"] == "partial"
    assert "Error: the evaluation is partial" in result.stderr and "Traceback" not in result.stderr
    assert plain.code == 1 and "Error: the evaluation is partial" in plain.stderr and "passed" in plain.stdout


def test_a_higher_max_error_rate_accepts_it(lab: Path, tmp_path: Path) -> None:
    with hostile_server("flaky") as base:
        result = evaluate(lab, tmp_path / "h", base, "--json", "--max-error-rate", "0.6")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "complete"


def test_wrong_answers_alone_are_complete(lab: Path, tmp_path: Path) -> None:
    with hostile_server("wrong") as base:
        result = evaluate(lab, tmp_path / "h", base, "--json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["status"] == "complete" and doc["unanswered"] == 0 and doc["passed"] == 0


def test_a_max_error_rate_outside_0_to_1_is_refused_before_anything_is_written(lab: Path, tmp_path: Path) -> None:
    with hostile_server("wrong") as base:
        result = evaluate(lab, tmp_path / "h", base, "--max-error-rate", "1.5")
    assert result.code == 2 and result.stderr.count("\n") == 1 and "--max-error-rate 1.5" in result.stderr
    assert not (tmp_path / "h").exists()


def test_a_partial_evaluation_is_not_diffed(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "h"
    with hostile_server("flaky") as base:
        partial = json.loads(evaluate(lab, home, base, "--json").stdout)
    with hostile_server("wrong") as base:
        complete = json.loads(evaluate(lab, home, base, "--json").stdout)
    diffed = run_labctl(
        "eval", "diff", partial["eval_id"], complete["eval_id"], lab=lab, env={"LABCTL_HOME": str(home)}
    )
    assert diffed.code == 2 and diffed.stderr.count("\n") == 1, diffed.stderr
    assert f"evaluation {partial['eval_id']} is partial" in diffed.stderr
