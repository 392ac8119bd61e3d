"""Eval of a thinking model (a loopback server shaped as vLLM with `--reasoning-parser qwen3`): a case whose
max_tokens runs out mid-thought is flagged "cut off while reasoning", and a suite's thinking_allowance gives
the model room whenever its thinking is not off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.hostile_server import hostile_server
from helpers.support import run_labctl

pytestmark = pytest.mark.process  # the CLI and a loopback server

SUITE = """version: '1'
description: one sum
defaults:
  max_tokens: 16
{allowance}cases:
- id: add
  prompt: What is 17 + 25?
  check: {{kind: number, expected: 42}}
  reference: '42'
"""


def evaluate(lab: Path, home: Path, base: str, allowance: int | None, *args: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    folder = lab / "suites" / "sum"
    folder.mkdir(parents=True, exist_ok=True)
    extra = f"  thinking_allowance: {allowance}\n" if allowance is not None else ""
    (folder / "suite.yaml").write_text(SUITE.format(allowance=extra))
    result = run_labctl(
        "eval", "run", "--base-url", base, "--model", "m", "--suite", "sum", "--json", *args,
        lab=lab, env={"LABCTL_HOME": str(home)},
    )  # fmt: skip
    assert result.code == 0 and "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout), result.stderr


def test_max_tokens_running_out_mid_thought_is_flagged_and_an_allowance_gives_room(lab: Path, tmp_path: Path) -> None:
    with hostile_server("vllm-thinking") as base:
        cut, said = evaluate(lab, tmp_path / "h", base, None)
        roomy, _ = evaluate(lab, tmp_path / "h", base, 2048)
        off, _ = evaluate(lab, tmp_path / "h", base, 2048, "--thinking", "off")
    [case] = cut["cases"]
    assert case["cut_off_while_reasoning"] is True and not case["passed"] and case["finish_reason"] == "length"
    assert case["reason"].startswith("cut off while reasoning: max_tokens 16 ran out before any answer")
    assert cut["cut_off_while_reasoning"] == 1 and "1 case(s) cut off while reasoning" in said
    [case] = roomy["cases"]  # thinking unknown (an endpoint labctl did not start): it may think, so it gets room
    assert case["passed"] and case["settings"]["max_tokens"] == 16 + 2048 and not case["cut_off_while_reasoning"]
    assert roomy["cut_off_while_reasoning"] == 0 and case["reasoning_tokens"] == 300
    [case] = off["cases"]  # thinking off: the suite's own max_tokens, unchanged
    assert case["settings"]["max_tokens"] == 16 and case["max_tokens"] == 16
