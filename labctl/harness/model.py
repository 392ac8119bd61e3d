"""The harness engine's behaviour, free of HTTP: its settings, how many tokens a prompt has, what it
answers, and when each token is due. Standard library only (the image carries no dependencies)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from labctl.harness import words

# A harness token is one word with the whitespace before it (labctl/harness/words.py): a prompt of N words
# has N prompt tokens, so workloads can ask for exact input lengths.
VOCAB = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "been",
    "one",
    "all",
    "we",
    "their",
    "has",
    "would",
    "when",
    "if",
    "so",
    "no",
    "will",
    "more",
    "can",
    "about",
    "model",
    "token",
    "engine",
    "batch",
    "latency",
    "server",
    "request",
    "stream",
    "cache",
    "prefix",
    "kernel",
    "memory",
    "compute",
]


WRONG_ANSWER = "I do not know."  # fails every kind of check: not a number, not JSON, not code


@dataclass
class Settings:
    model: str = "harness"
    revision: str = "v1"
    host: str = "127.0.0.1"
    port: int = 8000
    max_model_len: int = 32768
    max_num_seqs: int = 256
    cold_start: float = 0.0
    warmup: float = 0.0
    ttft_ms: float = 50.0
    ttft_per_token_ms: float = 0.0
    tpot_ms: float = 20.0
    tpot_batch_factor: float = 0.0
    jitter: float = 0.0
    seed: int = 0
    default_max_tokens: int = 256
    max_body_bytes: int = 4 * 1024 * 1024
    header_timeout: float = 10.0
    api_keys: list[str] = field(default_factory=list, repr=False)
    served_names: list[str] = field(default_factory=list)  # more names the model answers to (personas)
    reasoning: bool = False  # a reasoning parser is set: thinking goes to reasoning (vLLM) or reasoning_content
    thinking_default: bool = True  # the server's default when a request does not say
    dialect: str = "harness"  # whose request checks and error bodies: "harness", or "vllm" for its persona
    answers: dict[str, str] = field(default_factory=dict, repr=False)
    wrong_rate: float = 0.0
    # faults
    fail_on_start: bool = False
    never_ready: bool = False
    crash_after: int = 0
    error_rate: float = 0.0
    drop_stream_rate: float = 0.0


def parse_settings(argv: list[str] | None = None) -> Settings:
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python3 -m labctl.harness", description="labctl's GPU-free OpenAI-compatible engine"
    )
    p.add_argument("--model", default=env("HARNESS_MODEL", "harness"), help="served model name")
    p.add_argument("--revision", default="v1")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-model-len", type=int, default=32768)
    p.add_argument("--max-num-seqs", type=int, default=256, help="concurrent sequences; more requests queue")
    p.add_argument(
        "--cold-start", type=float, default=float(env("HARNESS_COLD_START", "0")), help="seconds the port stays closed"
    )
    p.add_argument(
        "--warmup", type=float, default=float(env("HARNESS_WARMUP", "0")), help="seconds of 503 after the port opens"
    )
    p.add_argument("--ttft-ms", type=float, default=float(env("HARNESS_TTFT_MS", "50")))
    p.add_argument("--ttft-per-token-ms", type=float, default=float(env("HARNESS_TTFT_PER_TOKEN_MS", "0")))
    p.add_argument("--tpot-ms", type=float, default=float(env("HARNESS_TPOT_MS", "20")))
    p.add_argument(
        "--tpot-batch-factor",
        type=float,
        default=float(env("HARNESS_TPOT_BATCH_FACTOR", "0")),
        help="TPOT grows by this fraction per extra running sequence",
    )
    p.add_argument("--jitter", type=float, default=0.0, help="relative jitter of TTFT and TPOT (seeded)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--default-max-tokens", type=int, default=256)
    p.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument("--header-timeout", type=float, default=10.0)
    p.add_argument("--api-key-file", help="a file holding API keys, one per line (else $LABCTL_HARNESS_API_KEY)")
    p.add_argument("--answers", help="JSON file mapping a prompt (last user message) to the answer")
    p.add_argument("--wrong-rate", type=float, default=0.0, help="share of mapped prompts answered wrongly")
    p.add_argument("--fail-on-start", action="store_true", help="fault: exit 3 at the end of the cold start")
    p.add_argument("--never-ready", action="store_true", help="fault: /health answers 503 forever")
    p.add_argument("--crash-after", type=int, default=0, help="fault: exit 1 when request N arrives")
    p.add_argument("--error-rate", type=float, default=0.0, help="fault: share of requests answered 503")
    p.add_argument("--drop-stream-rate", type=float, default=0.0, help="fault: share of streams cut mid-response")
    a = p.parse_args(argv)
    raw = Path(a.api_key_file).read_text() if a.api_key_file else env("LABCTL_HARNESS_API_KEY", "")
    keys = [k.strip() for k in raw.replace(",", "\n").splitlines() if k.strip()]
    answers = json.loads(Path(a.answers).read_text()) if a.answers else {}
    return Settings(
        model=a.model,
        revision=a.revision,
        host=a.host,
        port=a.port,
        max_model_len=a.max_model_len,
        max_num_seqs=a.max_num_seqs,
        cold_start=a.cold_start,
        warmup=a.warmup,
        ttft_ms=a.ttft_ms,
        ttft_per_token_ms=a.ttft_per_token_ms,
        tpot_ms=a.tpot_ms,
        tpot_batch_factor=a.tpot_batch_factor,
        jitter=a.jitter,
        seed=a.seed,
        default_max_tokens=a.default_max_tokens,
        max_body_bytes=a.max_body_bytes,
        header_timeout=a.header_timeout,
        api_keys=keys,
        answers=answers,
        wrong_rate=a.wrong_rate,
        fail_on_start=a.fail_on_start,
        never_ready=a.never_ready,
        crash_after=a.crash_after,
        error_rate=a.error_rate,
        drop_stream_rate=a.drop_stream_rate,
    )


def count_tokens(text: str) -> int:
    """Its pieces: its words, and one more for a trailing run of whitespace."""
    return words.count(text)


def stable_seed(*parts: object) -> int:
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def answered_wrongly(settings: Settings, prompt: str) -> bool:
    """Whether --wrong-rate makes the harness get this mapped prompt wrong (seeded: always the same prompts)."""
    return bool(settings.wrong_rate) and (
        random.Random(stable_seed("wrong", settings.seed, prompt)).random() < settings.wrong_rate
    )


@dataclass
class Answer:
    tokens: list[str]  # each already carries its leading space where one belongs
    finish_reason: str
    reasoning: int = 0  # the first `reasoning` tokens are thinking (reasoning_content), not content


def make_answer(settings: Settings, prompt: str, max_tokens: int, ignore_eos: bool, seed: int | None) -> Answer:
    """Deterministic output: the same prompt, seed and limits give the same text."""
    rng = random.Random(stable_seed(settings.seed, seed, prompt))
    mapped = settings.answers.get(prompt.strip())
    if mapped is not None:
        if answered_wrongly(settings, prompt):
            mapped = WRONG_ANSWER
        said = mapped.split(" ")
        tokens = [said[0]] + [" " + w for w in said[1:]]
        natural = len(tokens)
    else:
        natural = rng.randint(8, 64)
        count = max_tokens if ignore_eos else min(natural, max_tokens)
        tokens = [(" " if i else "") + VOCAB[rng.randrange(len(VOCAB))] for i in range(count)]
    if ignore_eos and len(tokens) < max_tokens:
        tokens += [" " + VOCAB[rng.randrange(len(VOCAB))] for _ in range(max_tokens - len(tokens))]
    if len(tokens) > max_tokens:
        return Answer(tokens[:max_tokens], "length")
    return Answer(tokens, "length" if len(tokens) == max_tokens and (ignore_eos or natural > max_tokens) else "stop")


class Schedule:
    """When each token of a sequence is due, on the event loop's clock. Absolute times, so that a
    late wake-up does not push every later token back."""

    def __init__(self, settings: Settings, start: float, prompt_tokens: int, rng: random.Random) -> None:
        self.settings = settings
        self.rng = rng
        ttft = (settings.ttft_ms + settings.ttft_per_token_ms * prompt_tokens) / 1000
        self.first = start + self._jitter(ttft)

    def _jitter(self, value: float) -> float:
        if not self.settings.jitter:
            return value
        return max(0.0, value * (1 + self.rng.uniform(-self.settings.jitter, self.settings.jitter)))

    def gap(self, running: int) -> float:
        base = self.settings.tpot_ms / 1000 * (1 + self.settings.tpot_batch_factor * max(0, running - 1))
        return self._jitter(base)
