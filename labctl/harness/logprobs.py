"""The harness engine's log-probabilities (a completion's `logprobs`; with `echo`, its prompt's too), read from
the answer map: a prompt that continues a mapped prompt (a multiple-choice question, then one choice) is likely
where the continuation is the mapped answer and unlikely where it is not, so lm-eval's log-likelihood tasks
pick the mapped answer. Every other prompt token is equally likely, and so is every generated token."""

from __future__ import annotations

import bisect
from typing import Any

from labctl.harness.model import Settings, answered_wrongly

PROMPT = -1.0  # a prompt token outside a continuation of a mapped prompt
RIGHT = -0.1  # a token of the mapped answer, continuing its prompt
WRONG = -2.5  # a token of any other continuation: the model would rather have said something else
GENERATED = -0.5  # a generated token: the one sampled is the likeliest
RIVAL = "<other>"  # what the model would rather have said than a WRONG token (its top_logprobs shows it)


class AnswerIndex:
    """The answer map's prompts, stripped once and longest first: which mapped prompt does a prompt continue?"""

    def __init__(self, answers: dict[str, str]) -> None:
        stripped = {key.strip(): answer.strip() for key, answer in answers.items()}
        self.entries = sorted(((k, a) for k, a in stripped.items() if k), key=lambda entry: -len(entry[0]))
        self.negative_lengths = [-len(k) for k, _ in self.entries]  # ascending, for bisect

    def continued(self, text: str) -> tuple[str, str] | None:
        """The longest mapped prompt that `text` begins with and goes on past, and its answer (stripped)."""
        shorter = bisect.bisect_right(self.negative_lengths, -len(text))
        for i in range(shorter, len(self.entries)):
            key, answer = self.entries[i]
            if text.startswith(key):
                return key, answer
        return None


def score_prompt(settings: Settings, index: AnswerIndex, prompt_pieces: list[str]) -> list[float]:
    """Each prompt token's log-probability: the tokens wholly past the mapped prompt it continues are RIGHT when
    they say its answer (WRONG when --wrong-rate draws that prompt: the model then believes another), else WRONG."""
    text = "".join(prompt_pieces)
    stripped = text.lstrip()
    found = index.continued(stripped)
    if found is None:
        return [PROMPT] * len(prompt_pieces)
    key, answer = found
    start = len(text) - len(stripped) + len(key)
    said = stripped[len(key) :].strip() == answer
    continuation = RIGHT if said != answered_wrongly(settings, key) else WRONG
    scores, at = [], 0
    for piece in prompt_pieces:
        scores.append(continuation if at >= start else PROMPT)
        at += len(piece)
    return scores


def _top(token: str, value: float, k: int) -> dict[str, float]:
    """The top-k alternatives and the token itself (OpenAI's and vLLM's logprobs=k: up to k+1 entries)."""
    if value == WRONG and k > 0:
        rival = RIVAL if token != RIVAL else RIVAL + "s"
        return {rival: RIGHT, token: value}
    return {token: value}


def completion_logprobs(
    settings: Settings,
    index: AnswerIndex,
    prompt_pieces: list[str] | None,
    generated: list[str],
    k: int,
) -> dict[str, Any]:
    """A completion choice's `logprobs`: over the prompt's tokens when echoed (`prompt_pieces` not None), the
    first without a figure (nothing comes before it), then over the generated tokens."""
    tokens: list[str] = []
    values: list[float | None] = []
    if prompt_pieces:
        tokens += prompt_pieces
        values += [None, *score_prompt(settings, index, prompt_pieces)[1:]]
    tokens += generated
    values += [GENERATED] * len(generated)
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": [None if v is None else _top(t, v, k) for t, v in zip(tokens, values, strict=True)],
        "text_offset": offsets,
    }
