"""The shipped real-workload samples against the harness engine (a local process): the server is sent
what each kind promises, as the server itself counts it (its usage), and lengths are in the model's
tokens when its tokenizer is cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.harness_proc import harness
from helpers.support import REPO, run_labctl, tiny_tokenizer_cache

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers


def bench(lab: Path, home: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_labctl("bench", "run", *args, lab=lab, env={"LABCTL_HOME": str(home), **(env or {})})


def test_multi_turn_sends_the_growing_conversation_after_the_pause(lab: Path, tmp_path: Path) -> None:
    (lab / "workloads" / "chat3.yaml").write_text(
        "description: x\ndataset: {kind: multi-turn, turns: 3, think_time_s: 0.4, input_len: 10, output_len: 5}\n"
        "requests: 6\nconcurrency: [2]\nwarmup_per_concurrency: 0\n"
    )
    with harness("--ttft-ms", "2", "--tpot-ms", "1", model="m") as (base, _):
        result = bench(lab, tmp_path / "h", "--base-url", f"{base}/v1", "--model", "m", "--workload", "chat3", "--json")
    assert result.code == 0, result.stderr
    level = json.loads(result.stdout)["levels"][0]
    assert level["completed"] == 6 and level["total_output_tokens"] == 6 * 5
    # the server counted each turn's whole conversation: 10, 25, 40 words per session (two sessions)
    assert level["total_input_tokens"] == 2 * (10 + 25 + 40)
    assert level["duration_s"] >= 2 * 0.4  # two pauses per session, the sessions side by side


def test_sharegpt_sample_gets_its_recorded_output_lengths(lab: Path, tmp_path: Path) -> None:
    conversations = json.loads((REPO / "workloads" / "data" / "sharegpt-sample.json").read_text())
    recorded = {len(c["conversations"][1]["value"].split()) for c in conversations}
    with harness("--ttft-ms", "1", "--tpot-ms", "0.2", model="m") as (base, _):
        result = bench(
            lab,
            tmp_path / "h",
            "--base-url",
            f"{base}/v1",
            "--model",
            "m",
            "--workload",
            "sharegpt-sample",
            "--concurrency",
            "4",
            "--requests",
            "24",
            "--json",
        )
    assert result.code == 0, result.stderr
    level = json.loads(result.stdout)["levels"][0]
    assert level["output_len"]["min"] in recorded and level["output_len"]["max"] in recorded
    assert level["output_len"]["min"] < level["output_len"]["max"]


def test_shared_prefix_and_tools_samples_run(lab: Path, tmp_path: Path) -> None:
    with harness("--ttft-ms", "1", "--tpot-ms", "0.2", model="m") as (base, _):
        for name in ("shared-prefix", "tool-calls"):
            result = bench(
                lab,
                tmp_path / "h",
                "--base-url",
                f"{base}/v1",
                "--model",
                "m",
                "--workload",
                name,
                "--concurrency",
                "2",
                "--requests",
                "4",
                "--json",
            )
            assert result.code == 0, result.stderr
            level = json.loads(result.stdout)["levels"][0]
            assert level["completed"] == 4 and level["failed"] == 0
            if name == "shared-prefix":  # 1024-word prefix + 128-word question, counted by the server
                assert level["total_input_tokens"] == 4 * (1024 + 128)


def test_lengths_in_tokens_with_a_cached_tokenizer_else_words_said(lab: Path, tmp_path: Path) -> None:
    cache = tiny_tokenizer_cache(tmp_path / "hf")
    args = ("--workload", "latency-probe", "--requests", "3", "--input-len", "40", "--output-len", "2", "--json")
    with harness("--ttft-ms", "1", "--tpot-ms", "1", model="m") as (base, _):
        target = ("--base-url", f"{base}/v1", "--model", "m")
        tokens = bench(
            lab, tmp_path / "h", *target, "--tokenizer", "acme/tiny", *args, env={"HF_HUB_CACHE": str(cache)}
        )
        words = bench(
            lab, tmp_path / "h", *target, "--tokenizer", "acme/tiny", *args, env={"HF_HUB_CACHE": str(tmp_path)}
        )
    assert tokens.code == 0 and words.code == 0, tokens.stderr + words.stderr
    with_tokens, with_words = json.loads(tokens.stdout), json.loads(words.stdout)
    assert with_tokens["workload"]["length_unit"] == "tokens"
    assert with_tokens["workload"]["tokenizer"].endswith("tokenizer.json")
    assert with_words["workload"]["length_unit"] == "words"
    assert "lengths in words: none: acme/tiny's tokenizer.json is not in the HF cache" in words.stderr
    # the harness counts words: 40 tokens of a tokenizer whose pieces are shorter than words are fewer words
    assert with_tokens["levels"][0]["total_input_tokens"] < with_words["levels"][0]["total_input_tokens"] == 3 * 40
