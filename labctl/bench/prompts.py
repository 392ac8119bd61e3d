"""What a workload sends, request by request: random prompts, prompts sharing a prefix, multi-turn
sessions, prompts read from a dataset file (jsonl, ShareGPT), and a trace's arrivals (labctl.bench.traces). Pure and deterministic from the
workload's seed; lengths in the model's tokens when its tokenizer is cached (labctl.bench.tokens)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from labctl.bench.sharegpt import RULE, sample_pool
from labctl.bench.tokens import Counter
from labctl.bench.traces import Arrival, read_trace
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
    at_s: float | None = None  # a trace's arrival: seconds after the level's start (None: the level's own schedule)


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
    spec: dict[str, Any],
    name: str,
    folder: Path,
    counter: Counter,
    count: int,
    salt: int | str,
    start: int = 0,
    path: Path | None = None,
) -> list[Prompt]:
    """Deterministic from the workload's seed. Synthetic kinds: `salt` keeps warm-up, each level's and each
    repeat's prompts distinct. Dataset kinds: prompts `start` to `start + count` of the dataset's pool, taken
    without replacement (`path`: the dataset file when it is not in the workloads folder, e.g. the Hub cache)."""
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
    if kind == "trace":
        return _trace_prompts(spec, name, path or dataset_file(dataset, name, folder), counter, count, salt, rng)
    pool = dataset_pool(spec, name, folder, counter, path)
    if start + count > len(pool) and not spec.get("repeat_prompts"):
        raise BadInput(
            f"workload {name}: prompts {start + 1} to {start + count} asked of a dataset with {len(pool)} distinct "
            "usable prompts; labctl sends none twice unless the workload says repeat_prompts: true."
        )
    taken = [pool[(start + i) % len(pool)] for i in range(count)]
    return [p if p.input_len >= 0 else replace(p, input_len=counter.count(p.text)) for p in taken]


# (file, size, mtime, seed, kind, length unit, tokenizer, recorded, max_tokens) -> the pool: a dataset is read,
# shuffled and filtered once per process, not once per level.
_POOLS: dict[tuple[Any, ...], list[Prompt]] = {}


def dataset_pool(spec: dict[str, Any], name: str, folder: Path, counter: Counter, path: Path | None) -> list[Prompt]:
    """Every distinct prompt of a jsonl or ShareGPT dataset, in the order they are sent: ShareGPT as vLLM's
    sampler takes them (labctl.bench.sharegpt), jsonl shuffled with the seed."""
    dataset = spec["dataset"]
    path = path or dataset_file(dataset, name, folder)
    recorded = dataset["kind"] == "sharegpt" and dataset["recorded_output"] is not False
    stat = path.stat()
    key: tuple[Any, ...] = (str(path), stat.st_size, stat.st_mtime_ns, spec["seed"], dataset["kind"])
    key += (counter.unit, counter.source, recorded, spec["max_tokens"])
    if key in _POOLS:
        return _POOLS[key]
    content = _read_text(path)
    if dataset["kind"] == "jsonl":
        texts = [text for text in _jsonl(path, content) if text.strip()]  # an empty prompt measures nothing
        random.Random(spec["seed"]).shuffle(texts)
        pool = [Prompt(text, -1, spec["max_tokens"]) for text in texts]  # lengths counted when taken
    else:
        try:
            items = json.loads(content)
        except (ValueError, RecursionError) as exc:
            raise BadInput(f"{path}: not JSON ({exc}): a ShareGPT file is a JSON list of conversations.") from None
        fixed = None if recorded else int(spec["max_tokens"])
        pool = [
            Prompt(text, prompt_len, min(out, spec["max_tokens"]) if recorded else spec["max_tokens"])
            for text, prompt_len, out in sample_pool(items, int(spec["seed"]), counter, fixed)
        ]
    if not pool:
        rule = "" if dataset["kind"] == "jsonl" else f" ({RULE}, lengths in {counter.unit})"
        raise BadInput(f"{path}: no usable prompt in the dataset{rule}; nothing was sent.")
    _POOLS.clear()  # one dataset at a time: ShareGPT's pool alone holds hundreds of MB of text
    _POOLS[key] = pool
    return pool


_TRACES: dict[tuple[Any, ...], list[Arrival]] = {}


def trace_arrivals(path: Path) -> list[Arrival]:
    """A trace file's arrivals, read once per process."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _TRACES:
        _TRACES.clear()
        _TRACES[key] = read_trace(_read_text(path), str(path))
    return _TRACES[key]


def check_arrivals(name: str, wanted: int, held: int) -> None:
    """Refuses a level that replays more arrivals than its trace holds (each level replays the first ones)."""
    if wanted > held:
        raise BadInput(
            f"workload {name}: a level asks for {wanted} requests but its trace holds {held} arrivals; "
            "set requests (and warm-up) to at most that."
        )


def _trace_prompts(
    spec: dict[str, Any], name: str, path: Path, counter: Counter, count: int, salt: int | str, rng: random.Random
) -> list[Prompt]:
    """The trace's first `count` arrivals, each a prompt of its own (synthetic text of the trace's input length,
    salted like the random kind's: never sent twice) asking for its output length, due at its timestamp."""
    arrivals = trace_arrivals(path)
    check_arrivals(name, count, len(arrivals))
    speedup = float(spec["dataset"]["speedup"] or 1.0)
    prompts = []
    for i, arrival in enumerate(arrivals[:count]):
        text, used = _text(rng, counter, arrival.input_len, f"t{salt}x{i}")
        max_tokens = min(arrival.output_len, int(spec["max_tokens"]))
        prompts.append(Prompt(text, used, max_tokens, at_s=arrival.at_ms / 1000.0 / speedup))
    return prompts


def _shared_prefix(
    spec: dict[str, Any], counter: Counter, count: int, salt: int | str, rng: random.Random
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


def _multi_turn(
    spec: dict[str, Any], counter: Counter, count: int, salt: int | str, rng: random.Random
) -> Iterator[Prompt]:
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


def dataset_file(dataset: dict[str, Any], name: str, folder: Path) -> Path:
    """A jsonl or ShareGPT file named by `path`, inside the workloads folder."""
    inside = folder.resolve()
    path: Path = (folder / str(dataset["path"])).resolve()
    if inside not in path.parents:
        raise BadInput(
            f"workload {name}: dataset {dataset['path']} leads outside {inside} (to {path}): labctl "
            "sends only files inside the workloads folder as prompts. Copy the dataset in instead of linking it."
        )
    if not path.is_file():
        raise BadInput(f"workload {name}: dataset file {path} not found.")
    return path


def _read_text(path: Path) -> str:
    try:
        return read_bounded(path, str(path), MAX_DATASET_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text.") from None


def _jsonl(path: Path, content: str) -> list[str]:
    texts: list[str] = []
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
        texts.append(text)
    return texts
