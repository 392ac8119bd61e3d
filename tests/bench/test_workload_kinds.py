"""Workload kinds beyond random prompts, built without a server: shared prefixes, multi-turn sessions,
ShareGPT files with their recorded output lengths, tools, and lengths in the model's own tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.support import REPO, tiny_tokenizer_cache

from labctl.bench.client import Target
from labctl.bench.prompts import sessions
from labctl.bench.runner import request_body
from labctl.bench.tokens import counter_for
from labctl.bench.workloads import Workload, check_workload, load_workload, make_prompts
from labctl.catalog.lab import find_lab
from labctl.catalog.sourcefile import parse_yaml_mapping
from labctl.errors import BadInput


def workload(text: str, folder: Path = Path(".")) -> Workload:
    src = parse_yaml_mapping(text, Path("workloads/w.yaml"))
    return Workload("w", check_workload(src, src.data), folder)


HEAD = "description: x\nconcurrency: [2]\n"


def test_shared_prefix_prompts_reuse_the_same_prefixes_at_every_level() -> None:
    w = workload(
        HEAD + "dataset: {kind: shared-prefix, prefix_len: 30, prefix_count: 3, input_len: 5, output_len: 4}\n"
    )
    first, second = make_prompts(w, 6, salt=0), make_prompts(w, 6, salt=1)
    prefixes = [p.text.split("\n")[0] for p in first]
    assert len(set(prefixes)) == 3 and prefixes[0] == prefixes[3]
    assert [p.text.split("\n")[0] for p in second] == prefixes  # the same prefixes at the next level
    assert len({p.text for p in first + second}) == 12  # every request still distinct after its prefix
    assert all(p.input_len == 35 and len(p.text.split()) == 35 for p in first)


def test_multi_turn_sessions_grow_their_context_and_pause() -> None:
    w = workload(HEAD + "dataset: {kind: multi-turn, turns: 3, think_time_s: 0.5, input_len: 6, output_len: 4}\n")
    prompts = make_prompts(w, 7, salt=0)
    assert len(prompts) == 7
    grouped = sessions(prompts)
    assert [len(s) for s in grouped] == [3, 3, 1]
    one = grouped[0]
    assert [len(p.messages) for p in one] == [1, 3, 5]
    assert [m["role"] for m in one[2].messages] == ["user", "assistant", "user", "assistant", "user"]
    assert one[2].messages[:3] == one[1].messages  # each turn carries the conversation so far
    assert [p.input_len for p in one] == [6, 16, 26] and [p.think_s for p in one] == [0.0, 0.5, 0.5]
    body = request_body(w, Target("http://127.0.0.1:1/v1", "m"), one[2])
    assert body["messages"] == list(one[2].messages)


def test_sharegpt_asks_for_the_recorded_output_lengths() -> None:
    lab = find_lab(str(REPO))
    w = load_workload(lab, "sharegpt-sample")
    conversations = json.loads((REPO / "workloads" / "data" / "sharegpt-sample.json").read_text())
    recorded = {c["conversations"][0]["value"]: len(c["conversations"][1]["value"].split()) for c in conversations}
    prompts = make_prompts(w, 40, salt=0)
    assert all(p.max_tokens == recorded[p.text] for p in prompts)
    assert len({p.max_tokens for p in prompts}) > 2
    spec = json.loads(json.dumps(w.spec))
    spec["dataset"]["recorded_output"] = False
    spec["max_tokens"] = 64  # a fixed output length counts in vLLM's prompt + output <= 2048 rule
    fixed = Workload(w.name, spec, w.folder)
    assert {p.max_tokens for p in make_prompts(fixed, 10, salt=0)} == {spec["max_tokens"]}


def test_tools_go_with_every_chat_request() -> None:
    lab = find_lab(str(REPO))
    w = load_workload(lab, "tool-calls")
    body = request_body(w, Target("http://127.0.0.1:1/v1", "m"), make_prompts(w, 1, salt=0)[0])
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "search_docs"]
    assert body["tool_choice"] == "auto" and "strict" not in body["tools"][0]["function"]


def test_lengths_in_the_models_tokens_when_its_tokenizer_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tiny_tokenizer_cache(tmp_path)))
    counter = counter_for("acme/tiny")
    assert counter.unit == "tokens" and counter.source.endswith("tokenizer.json")
    w = workload(HEAD + "dataset: {kind: random, input_len: 64, output_len: 4}\n").with_counter(counter)
    prompts = make_prompts(w, 5, salt=0)
    for p in prompts:
        assert p.input_len == counter.count(p.text)
        assert 60 <= p.input_len <= 64 and len(p.text.split()) < 40  # tokens, not words
    missing = counter_for("acme/absent")
    assert missing.unit == "words" and "acme/absent's tokenizer.json is not in the HF cache" in missing.source
    assert counter_for("not a repo").unit == "words"


def test_a_tokenizer_link_out_of_the_cache_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tiny_tokenizer_cache(tmp_path / "cache")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    snapshot = next((cache / "models--acme--tiny" / "snapshots").iterdir())
    outside = tmp_path / "elsewhere.json"
    (snapshot / "tokenizer.json").rename(outside)
    (snapshot / "tokenizer.json").symlink_to(outside)
    with pytest.raises(BadInput, match="leads outside the HF cache"):
        counter_for("acme/tiny")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("dataset: {kind: shared-prefix, input_len: 5, output_len: 4, prefix_len: 9}\n", ["needs prefix_count"]),
        (
            "dataset: {kind: random, input_len: 5, output_len: 4, prefix_len: 9}\n",
            ["w.yaml:3", "prefix_len belongs to shared-prefix"],
        ),
        ("dataset: {kind: multi-turn, input_len: 5, output_len: 4, turns: 1}\n", ["dataset.turns", "1 is not allowed"]),
        ("dataset: {kind: multi-turn, input_len: 5, output_len: 4, turns: 200}\n", ["dataset.turns", "above the most"]),
        (
            "dataset: {kind: multi-turn, input_len: 5, output_len: 4, turns: 2}\nrequest_rate: 3\n",
            ["request_rate", "closed loop"],
        ),
        (
            "dataset: {kind: multi-turn, input_len: 600000, output_len: 4, turns: 2}\n",
            ["dataset.turns", "more than 1048576 tokens"],
        ),
        (
            "dataset: {kind: shared-prefix, input_len: 5, output_len: 4, prefix_len: 9, prefix_count: 100000}\n",
            ["prefix_count"],
        ),
        (
            "dataset: {kind: random, input_len: 5, output_len: 4}\ntools: [{type: function, function: {name: 'a b'}}]\n",
            ["tools[0].function.name", "letters, digits"],
        ),
        (
            "dataset: {kind: random, input_len: 5, output_len: 4}\ntools: [{type: retrieval, function: {name: a}}]\n",
            ["tools[0].type"],
        ),
        ("dataset: {kind: random, input_len: 5, output_len: 4}\ntool_choice: auto\n", ["tool_choice needs tools"]),
        (
            "dataset: {kind: random, input_len: 5, output_len: 4}\nendpoint: completions\n"
            "tools: [{type: function, function: {name: a}}]\n",
            ["chat requests only"],
        ),
        ("dataset: {kind: sharegpt, path: x.json, recorded_output: 3}\n", ["recorded_output", "found 3"]),
    ],
)
def test_bad_workloads_say_where(text: str, words: list[str]) -> None:
    with pytest.raises(BadInput) as caught:
        workload(HEAD + text)
    message = str(caught.value)
    assert message.startswith("workloads/w.yaml") and "\n" not in message
    assert all(w in message for w in words), message


def test_multi_turn_refuses_arrival_rates_from_flags() -> None:
    from labctl.bench.workloads import with_overrides

    w = workload(HEAD + "dataset: {kind: multi-turn, turns: 2, input_len: 6, output_len: 4}\n")
    with pytest.raises(BadInput, match="multi-turn sessions run closed loop"):
        with_overrides(w, request_rate=[2.0])
