"""What a workload sends, request by request: random prompts, prompts sharing a prefix, multi-turn
sessions, and prompts read from a dataset file (jsonl, ShareGPT). Pure and deterministic from the
workload's seed; lengths in the model's tokens when its tokenizer is cached (labctl.bench.tokens)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl.bench.tokens import Counter
from labctl.catalog.sourcefile import read_bounded
from labctl.errors import BadInput

# ShareGPT_V3's unfiltered file, the largest public dataset vLLM's benchmarks read, is ~640 MB.
MAX_DATASET_BYTES = 1024 * 1024 * 1024

# Words for synthetic prompts: common English words, about one token each for most tokenizers.
WORDS = [
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
]


@dataclass(frozen=True)
class Prompt:
    text: str
    input_len: int  # in the workload's length unit: the model's tokens, or words without its tokenizer
    max_tokens: int
    messages: tuple[dict[str, str], ...] = ()  # a whole conversation (multi-turn); empty: one user message
    session: int = -1  # turns of one session go in order on one connection; -1: a request on its own
    think_s: float = 0.0  # the user's pause before this turn


def sessions(prompts: list[Prompt]) -> list[list[Prompt]]:
    """Consecutive turns of one session together; every other prompt alone."""
    out: list[list[Prompt]] = []
    for prompt in prompts:
        if prompt.session >= 0 and out and out[-1][0].session == prompt.session:
            out[-1].append(prompt)
        else:
            out.append([prompt])
    return out


def _length(rng: random.Random, base: int, ratio: float) -> int:
    low, high = max(1, math.floor(base * (1 - ratio))), max(1, math.ceil(base * (1 + ratio)))
    return rng.randint(low, high) if ratio else base


def _text(rng: random.Random, counter: Counter, length: int, first: str = "") -> tuple[str, int]:
    """Common words up to `length` in the counter's unit (a distinct `first` word defeats prefix caching)."""
    words, used = ([first], counter.word_cost(first)) if first else ([], 0)
    while used < length:
        word = WORDS[rng.randrange(len(WORDS))]
        words.append(word)
        used += counter.word_cost(word)
    text = " ".join(words)
    if counter.tokenizer is None:
        return text, len(words)
    text = counter.fit(text, length)
    return text, counter.count(text)


def build_prompts(
    spec: dict[str, Any], name: str, folder: Path, counter: Counter, count: int, salt: int
) -> list[Prompt]:
    """Deterministic from the workload's seed; `salt` keeps warm-up and each level's prompts distinct."""
    dataset = spec["dataset"]
    rng = random.Random(f"{spec['seed']}:{salt}")
    kind = dataset["kind"]
    if kind == "random":
        prompts = []
        for i in range(count):
            n_in = _length(rng, dataset["input_len"], dataset["range_ratio"])
            n_out = _length(rng, dataset["output_len"], dataset["range_ratio"])
            text, used = _text(rng, counter, n_in, f"r{salt}x{i}")
            max_tokens = min(n_out, spec["max_tokens"]) if dataset["range_ratio"] else spec["max_tokens"]
            prompts.append(Prompt(text, used, max_tokens))
        return prompts
    if kind == "shared-prefix":
        return list(_shared_prefix(spec, counter, count, salt, rng))
    if kind == "multi-turn":
        return list(_multi_turn(spec, counter, count, salt, rng))[:count]
    pairs = read_dataset(dataset, name, folder)
    chosen = [pairs[rng.randrange(len(pairs))] for _ in range(count)]
    recorded = kind == "sharegpt" and dataset["recorded_output"] is not False
    return [
        Prompt(
            text,
            counter.count(text),
            max(1, min(counter.count(reply), spec["max_tokens"])) if recorded and reply else spec["max_tokens"],
        )
        for text, reply in chosen
    ]


def _shared_prefix(
    spec: dict[str, Any], counter: Counter, count: int, salt: int, rng: random.Random
) -> Iterator[Prompt]:
    """prefix_count prefixes of prefix_len, the same at every level (built from the seed alone), each
    request one of them then a distinct suffix of input_len: what a prefix cache can reuse."""
    dataset = spec["dataset"]
    prefixes = [
        _text(random.Random(f"{spec['seed']}:prefix:{j}"), counter, dataset["prefix_len"], f"p{j}")
        for j in range(dataset["prefix_count"])
    ]
    for i in range(count):
        prefix, prefix_used = prefixes[i % len(prefixes)]
        suffix, used = _text(rng, counter, dataset["input_len"], f"r{salt}x{i}")
        yield Prompt(prefix + "\n" + suffix, prefix_used + used, spec["max_tokens"])


def _multi_turn(spec: dict[str, Any], counter: Counter, count: int, salt: int, rng: random.Random) -> Iterator[Prompt]:
    """Sessions of `turns` user turns, each sent with the whole conversation so far (the context grows),
    after `think_time_s`. The assistant turns in the history are synthetic text of output_len: a fixed
    stand-in for the answers, so every engine is sent the same conversation."""
    dataset = spec["dataset"]
    for session in range(math.ceil(count / dataset["turns"])):
        history: list[dict[str, str]] = []
        context = 0
        for turn in range(dataset["turns"]):
            user, used = _text(rng, counter, dataset["input_len"], f"r{salt}s{session}t{turn}")
            history.append({"role": "user", "content": user})
            context += used
            yield Prompt(
                user,
                context,
                spec["max_tokens"],
                tuple(history),
                session,
                (dataset["think_time_s"] or 0.0) if turn else 0.0,
            )
            answer, answered = _text(rng, counter, dataset["output_len"])
            history.append({"role": "assistant", "content": answer})
            context += answered


def read_dataset(dataset: dict[str, Any], name: str, folder: Path) -> list[tuple[str, str | None]]:
    """(prompt, recorded reply or None) pairs from a jsonl or ShareGPT file inside the workloads folder."""
    inside = folder.resolve()
    path = (folder / dataset["path"]).resolve()
    if inside not in path.parents:
        raise BadInput(
            f"workload {name}: dataset {dataset['path']} leads outside {inside} (to {path}): labctl "
            "sends only files inside the workloads folder as prompts. Copy the dataset in instead of linking it."
        )
    if not path.is_file():
        raise BadInput(f"workload {name}: dataset file {path} not found.")
    try:
        content = read_bounded(path, str(path), MAX_DATASET_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text.") from None
    pairs = _jsonl(path, content) if dataset["kind"] == "jsonl" else _sharegpt(path, content)
    pairs = [(text, reply) for text, reply in pairs if text.strip()]  # an empty prompt measures nothing
    if not pairs:
        raise BadInput(f"{path}: no usable prompt in the dataset (none, or only empty ones); nothing was sent.")
    return pairs


def _jsonl(path: Path, content: str) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            raise BadInput(
                f'{path}:{number}: not JSON: a jsonl dataset has one JSON object per line (e.g. {{"prompt": "..."}}).'
            ) from None
        text = item.get("prompt") if isinstance(item, dict) else None
        if not isinstance(text, str):
            raise BadInput(f'{path}:{number}: expected an object with a "prompt" string.')
        pairs.append((text, None))
    return pairs


def _sharegpt(path: Path, content: str) -> list[tuple[str, str | None]]:
    """The first human turn of each conversation, and the gpt turn answering it (its recorded length)."""
    try:
        items = json.loads(content)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: not JSON ({exc}): a ShareGPT file is a JSON list of conversations.") from None
    pairs: list[tuple[str, str | None]] = []
    for item in items if isinstance(items, list) else []:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not (isinstance(turns, list) and turns and isinstance(turns[0], dict) and turns[0].get("from") == "human"):
            continue
        answer = turns[1] if len(turns) > 1 and isinstance(turns[1], dict) and turns[1].get("from") == "gpt" else None
        reply = answer.get("value") if answer else None
        pairs.append((str(turns[0].get("value", "")), reply if isinstance(reply, str) and reply.strip() else None))
    return pairs
