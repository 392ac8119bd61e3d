"""A multiple-choice lm-eval task against a real vLLM on CPU: scored by the engine's own log-probabilities
through /v1/completions (echo, logprobs), counted by its own tokenizer over HTTP (/tokenize, /tokenizer_info,
served with --enable-tokenizer-info-endpoint).

The vllm-cpu image carries no C++ compiler, and vLLM computes prompt log-probabilities with torch.compile,
whose CPU backend compiles C++: without TORCHDYNAMO_DISABLE=1 (passed through the profile's `env`) the engine
dies on the first such request (InvalidCxxCompiler), as seen here."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from helpers.real_engine import RealLab, logs_of_runs, real_lab

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

PROFILE = "tiny-qwen3-scored"
MC_TASK = """task: mc_mini
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: gold
doc_to_choice: choices
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLab]:
    lab = real_lab(tmp_path_factory.mktemp("real-scored"))
    lab.add_profile(
        PROFILE,
        extra_args=["--enable-tokenizer-info-endpoint"],
        env=["TORCHDYNAMO_DISABLE"],
        description="tiny-qwen3 serving its tokenizer and prompt log-probabilities",
    )
    folder = lab.lab / "suites" / "lm-eval" / "mc-mini"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(MC_TASK)
    (folder / "source.yaml").write_text(
        "version: '1'\ndescription: four-way questions\ndataset: {format: json, files: {test: test.jsonl}}\n"
    )
    docs = [
        {"question": f"Which colour is number {i}?", "choices": ["red", "green", "blue", "black"], "gold": i % 4}
        for i in range(5)
    ]
    (folder / "test.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    yield lab
    lab.down_all()


def test_a_multiple_choice_task_is_scored_by_the_real_engines_log_probabilities(
    real: RealLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "TORCHDYNAMO_DISABLE", "1")  # labctl passes it through to the engine
    info = real.up(PROFILE)
    done = real.labctl("eval", "run", info["run_id"], "--suite", "lm-eval:mc-mini", "--limit", "3", "--json")
    assert done.code == 0, done.stderr[-3000:] + logs_of_runs(real.home)
    result = json.loads(done.stdout)
    [task] = result["tasks"]
    assert task["output_type"] == "multiple_choice" and task["chat_template"] is False and task["limit"] == 3
    assert result["smoke"] is True and result["total"] == 3 and result["status"] == "complete"
    samples = (real.home / "runs" / info["run_id"] / "eval" / result["samples_file"]).read_text().splitlines()
    assert len(samples) == 3
    for line in samples:  # the engine's own log-likelihoods, one per choice, the highest chosen
        output = json.loads(line)["output"]
        assert output.startswith("choice ") and float(output.split("log-likelihood ")[1].rstrip(")")) < 0, output
    full = real.labctl("eval", "run", info["run_id"], "--suite", "lm-eval:mc-mini", "--json")
    assert full.code == 0, full.stderr[-2000:]
    refused = real.labctl("eval", "diff", result["eval_id"], json.loads(full.stdout)["eval_id"])
    assert refused.code == 2 and "a smoke run (--limit 3) vs a full run" in refused.stderr, refused
