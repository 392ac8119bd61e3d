"""Evaluations read back: one loader that checks an evaluation file's schema version and shape and gives
a typed value, or one line saying which file, which field, and what to do. The file itself is kept as
`data` for what reads it as a whole; an interval an older labctl took by bootstrap over the cases (12/12 said
100 %-100 %) is read as the Wilson interval of its passed/total, the file left as written."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.bench.intervals import PASS_RATE_METHOD, wilson_interval
from labctl.errors import BadInput
from labctl.run.records.store import MAX_RESULT_BYTES, Runs, is_result_id, read_json_file, shape_refusal
from labctl.run.records.typed import ShapeError, check_depth, check_interval, check_version, expect, from_json

READABLE = (1,)
UNVERSIONED = 1
FIX = "Re-run the evaluation, or move the file out of the run's eval/ folder."


@dataclass(frozen=True)
class SuiteFacts:
    name: str
    sha256: str = ""
    version: str = ""
    full_version: str = ""


@dataclass(frozen=True)
class CaseVerdict:
    id: str
    passed: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Evaluation:
    eval_id: str
    run_id: str
    suite: SuiteFacts
    schema_version: int = UNVERSIONED
    status: str = "complete"
    created_at: str = ""
    score: float | None = None
    passed: int = 0
    total: int = 0
    score_ci95: tuple[float, ...] | None = None
    cases: tuple[CaseVerdict, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the file as written


def parse_eval(data: Any) -> Evaluation:
    check_depth(data)
    check_version(expect(dict, data), READABLE, UNVERSIONED)
    evaluation: Evaluation = from_json(Evaluation, {k: v for k, v in data.items() if k != "data"})
    check_interval(evaluation.score_ci95, "score_ci95")
    if isinstance(data.get("suite"), dict) and not isinstance(data["suite"].get("version", ""), str):
        raise ShapeError("suite.version", "expected a string")
    if evaluation.score_ci95 is not None and data.get("interval_method") != PASS_RATE_METHOD:
        wilson = wilson_interval(evaluation.passed, evaluation.total)
        data = {**data, "score_ci95": wilson, "interval_method": f"{PASS_RATE_METHOD} (recomputed on reading)"}
        evaluation = dataclasses.replace(evaluation, score_ci95=None if wilson is None else tuple(wilson))
    return dataclasses.replace(evaluation, data=data)


def load_eval(path: Path) -> Evaluation:
    """One evaluation file, typed; a wrong shape or a newer schema is one line (BadInput)."""
    data = read_json_file(path, "evaluation", MAX_RESULT_BYTES)
    try:
        return parse_eval(data)
    except (ValueError, TypeError) as exc:
        raise shape_refusal("evaluation", path, exc, FIX) from None


def load_evals(runs: Runs, run_id: str, skipped: Callable[[str], None] | None = None) -> list[Evaluation]:
    """Every evaluation of a run, oldest first; one that cannot be read is reported to `skipped`."""
    folder = runs.dir(run_id) / "eval"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(load_eval(path))
        except BadInput as exc:
            if skipped:
                skipped(f"skipped {exc}")
    return found


def find_eval(runs: Runs, eval_id: str) -> Evaluation:
    if not is_result_id(eval_id, "e"):
        raise BadInput(
            f"{eval_id[:80]!r} is not an evaluation id (like e20261203-015815-a1b2c3). "
            "List a run's evaluations with `labctl eval list RUN_ID`."
        )
    for run_id in runs.all_ids():
        path = runs.dir(run_id) / "eval" / f"{eval_id}.json"
        if path.is_file():
            return load_eval(path)
    raise BadInput(f"no evaluation {eval_id} under {runs.root}.")


def list_evals(runs: Runs, run_id: str, skipped: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    return [evaluation.data for evaluation in load_evals(runs, run_id, skipped)]
