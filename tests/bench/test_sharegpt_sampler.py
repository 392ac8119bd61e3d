"""ShareGPT prompts as vLLM's sampler takes them (its length rule, its seeded order), and prompts laid out so
that none is sent twice: within a level, across levels, across repeats and across a study's benches."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from labctl.bench.prompt_slots import available_prompts, check_enough, prompt_facts, prompts_for, slots_for
from labctl.bench.sharegpt import is_valid_sequence, sample_pool
from labctl.bench.tokens import WORDS
from labctl.bench.workloads import Workload, check_workload
from labctl.catalog.sourcefile import SourceFile
from labctl.errors import BadInput

pytestmark = pytest.mark.unit


def words(n: int, tag: str) -> str:
    return " ".join([tag] + [f"w{i}" for i in range(n - 1)])


def conversation(prompt: str, answer: str) -> dict[str, Any]:
    return {"id": prompt[:8], "conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]}


def sharegpt_items(valid: int) -> list[dict[str, Any]]:
    """`valid` conversations that pass vLLM's rule, and one of each kind it drops."""
    items = [conversation(words(5 + i % 7, f"ok{i}"), words(4 + i % 5, f"a{i}")) for i in range(valid)]
    items += [
        conversation(words(3, "short-prompt"), words(10, "a")),  # prompt < 4
        conversation(words(10, "short-answer"), words(3, "a")),  # output < 4
        conversation(words(1025, "long-prompt"), words(10, "a")),  # prompt > 1024
        conversation(words(1000, "long-total"), words(1049, "a")),  # prompt + output > 2048
        {"id": "one-turn", "conversations": [{"from": "human", "value": words(10, "one-turn")}]},
        {"id": "none"},
    ]
    return items


def test_vllms_length_rule_at_its_bounds() -> None:
    assert is_valid_sequence(4, 4) and is_valid_sequence(1024, 1024)
    assert not is_valid_sequence(3, 4) and not is_valid_sequence(4, 3)
    assert not is_valid_sequence(1025, 4) and not is_valid_sequence(1024, 1025)
    assert is_valid_sequence(4, 1, skip_min_output_len_check=True)  # a fixed output length skips the minimum


def vllm_reference(items: list[dict[str, Any]], seed: int, n: int) -> list[str]:
    """vLLM's ShareGPTDataset.load_data + sample, as its code reads (lengths in words here)."""
    data = [e for e in items if "conversations" in e and len(e["conversations"]) >= 2]
    random.seed(seed)
    random.shuffle(data)
    out = []
    for entry in data:
        if len(out) >= n:
            break
        prompt, completion = entry["conversations"][0]["value"], entry["conversations"][1]["value"]
        if is_valid_sequence(len(prompt.split()), len(completion.split())):
            out.append(prompt)
    return out


def test_the_pool_is_vllms_sample_in_vllms_order() -> None:
    items = sharegpt_items(40)
    pool = sample_pool(items, 7, WORDS, None)
    assert [text for text, _, _ in pool] == vllm_reference(items, 7, 1000)
    assert len(pool) == 40 and not any(text.startswith(("short", "long", "one-turn")) for text, _, _ in pool)
    recorded = {c["conversations"][0]["value"]: len(c["conversations"][1]["value"].split()) for c in items[:40]}
    assert all(out == recorded[text] and n == len(text.split()) for text, n, out in pool)
    assert [t for t, _, _ in sample_pool(items, 8, WORDS, None)] != [t for t, _, _ in pool]  # the seed orders


def test_a_fixed_output_length_counts_in_the_total() -> None:
    items = [conversation(words(1000, "p"), words(2, "a")), conversation(words(10, "q"), words(2, "a"))]
    assert [t[:1] for t, _, _ in sample_pool(items, 0, WORDS, 1100)] == ["q"]  # 1000 + 1100 > 2048
    assert sample_pool(items, 0, WORDS, None) == []  # recorded answers of 2 words: too short


def dataset_workload(tmp_path: Path, valid: int, **extra: Any) -> Workload:
    (tmp_path / "sg.json").write_text(json.dumps(sharegpt_items(valid)))
    data = {
        "description": "x",
        "dataset": {"kind": "sharegpt", "path": "sg.json"},
        "concurrency": [1, 2],
        "requests": 3,
        "warmup_per_concurrency": 1,
        **extra,
    }
    return Workload("sg", check_workload(SourceFile(tmp_path / "sg.yaml", data), data), tmp_path)


def every_prompt(workload: Workload, repeat: int = 1, first: int = 0) -> list[str]:
    slots = slots_for(workload, repeat, first)
    return [
        p.text
        for index in range(len(slots.levels))
        for r in range(repeat)
        for measured in (False, True)
        for p in prompts_for(workload, slots, index, r, measured)
    ]


def test_no_prompt_twice_within_levels_across_levels_and_repeats(tmp_path: Path) -> None:
    workload = dataset_workload(tmp_path, 40)
    sent = every_prompt(workload, repeat=2)
    assert len(sent) == slots_for(workload, 2).total == (1 + 3 + 2 + 3) * 2
    assert len(set(sent)) == len(sent)
    pool = [t for t, _, _ in sample_pool(sharegpt_items(40), 0, WORDS, None)]
    assert sent == pool[: len(sent)]  # without replacement, in vLLM's order
    later = every_prompt(workload, repeat=1, first=len(sent))  # a study's next bench starts past this one
    assert not set(later) & set(sent)
    facts = prompt_facts(workload, slots_for(workload, 2), available_prompts(workload))
    assert facts["distinct"] == facts["sent"] == 18 and facts["available"] == 40 and facts["seed"] == 0


def test_too_many_requests_for_the_pool_is_refused_in_one_line(tmp_path: Path) -> None:
    workload = dataset_workload(tmp_path, 10)
    with pytest.raises(BadInput) as refused:
        check_enough(workload, slots_for(workload, repeat=2))
    said = str(refused.value)
    assert "sends 18 prompts but its dataset holds 10 distinct" in said and "repeat_prompts" in said
    assert "\n" not in said
    assert check_enough(workload, slots_for(workload)) == 10  # 9 fit
    with pytest.raises(BadInput, match="after the 5 its study's earlier benches sent"):
        check_enough(workload, slots_for(workload, first=5))


def test_repeating_on_purpose_is_allowed_and_said(tmp_path: Path) -> None:
    workload = dataset_workload(tmp_path, 10, repeat_prompts=True)
    slots = slots_for(workload, repeat=2)
    assert check_enough(workload, slots) == 10
    sent = every_prompt(workload, repeat=2)
    assert len(sent) == 18 and len(set(sent)) == 10
    facts = prompt_facts(workload, slots, 10)
    assert facts["repeat_prompts"] is True and facts["distinct"] == 10


@pytest.mark.parametrize("kind", ["random", "shared-prefix", "multi-turn"])
def test_synthetic_prompts_are_distinct_across_levels_repeats_and_benches(tmp_path: Path, kind: str) -> None:
    dataset: dict[str, Any] = {"kind": kind, "input_len": 6, "output_len": 4}
    if kind == "shared-prefix":
        dataset |= {"prefix_len": 5, "prefix_count": 2}
    if kind == "multi-turn":
        dataset |= {"turns": 2}
    data = {"description": "x", "dataset": dataset, "concurrency": [1, 2], "requests": 4}
    workload = Workload("s", check_workload(SourceFile(tmp_path / "s.yaml", data), data), tmp_path)
    sent = every_prompt(workload, repeat=2) + every_prompt(workload, repeat=1, first=24)
    assert len(set(sent)) == len(sent)  # shared prefixes and histories are shared; each request's own part is not
    assert available_prompts(workload) is None
    assert prompt_facts(workload, slots_for(workload), None)["shared_on_purpose"] is (kind != "random")


def test_a_level_with_prefix_hits_its_workload_does_not_expect_gets_a_caveat(tmp_path: Path) -> None:
    from labctl.bench.level_summary import UNEXPECTED_HITS_WARNING, hits_warning

    def telemetry(rate: float) -> dict[str, Any]:
        return {"engine": {"prefix_cache_hit_rate": {"mean": rate}}}

    distinct = dataset_workload(tmp_path, 40)
    said = hits_warning(distinct, telemetry(0.35))
    assert said is not None and said.startswith(UNEXPECTED_HITS_WARNING) and "35.0 %" in said
    assert hits_warning(distinct, telemetry(0.005)) is None  # a chat template's shared opening
    assert hits_warning(distinct, {"engine": {}}) is None  # an engine without the counters
    assert hits_warning(dataset_workload(tmp_path, 40, repeat_prompts=True), telemetry(0.9)) is None
    data = {
        "description": "x",
        "dataset": {"kind": "shared-prefix", "input_len": 4, "output_len": 4, "prefix_len": 8, "prefix_count": 1},
        "concurrency": [1],
    }
    shared = Workload("s", check_workload(SourceFile(tmp_path / "s.yaml", data), data), tmp_path)
    assert hits_warning(shared, telemetry(0.9)) is None  # shared on purpose
