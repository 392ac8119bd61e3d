"""The checks labctl's shipped lm-eval task sets name in their task.yaml (`process_results: !function
checks.…`, a one-line module in the set's folder): code answers run in labctl's sandbox, never on the host;
instruction answers are checked without NLTK (labctl/quality/instructions.py)."""

from __future__ import annotations

from typing import Any

from labctl.catalog.limits import MAX_CODE_SECONDS
from labctl.quality.instructions import followed
from labctl.quality.suites import strip_fence


def code_passes(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    from labctl.host.sandbox.launch import run_code

    timeout = min(float(doc.get("timeout_s", 10)), MAX_CODE_SECONDS)
    ran = run_code(strip_fence(results[0] if results else ""), str(doc["tests"]), timeout)
    return {"pass": 1.0 if ran.passed else 0.0}


def instructions_followed(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    verdicts = followed(results[0] if results else "", list(doc["instructions"]))
    return {
        "all_followed": 1.0 if all(verdicts) else 0.0,
        "share_followed": sum(verdicts) / len(verdicts) if verdicts else 0.0,
    }
