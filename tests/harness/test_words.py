"""The harness engine's tokens and log-probabilities, in-process: token ids hold their text (every text
round-trips, and an id encode could not have made is refused), completion prompts come as texts or ids, and
the answer map decides which continuation of a mapped prompt is likely. The HTTP side is test_logprobs.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from labctl.harness import words
from labctl.harness.logprobs import (
    GENERATED,
    PROMPT,
    RIGHT,
    RIVAL,
    WRONG,
    AnswerIndex,
    completion_logprobs,
    score_prompt,
)
from labctl.harness.model import Settings, count_tokens
from labctl.harness.personas import build_persona
from labctl.harness.protocol import HttpError, parse_request

GPUS = {"NVIDIA_VISIBLE_DEVICES": "0"}
QUESTION = "Question: What is the capital of France?\nAnswer:"


@given(st.text())
@example("a \ud800b")  # JSON can carry a lone surrogate
def test_every_text_round_trips_through_its_ids(text: str) -> None:
    ids = words.encode(text)
    assert words.decode(ids) == text
    assert "".join(words.pieces(text)) == text
    assert all(i >= words.RESERVED_IDS and i.bit_length() <= words.MAX_ID_BITS for i in ids)
    assert count_tokens(text) == len(ids)


def test_a_piece_is_a_word_and_the_whitespace_before_it() -> None:
    assert words.pieces("Hello  wörld\n ü ") == ["Hello", "  wörld", "\n ü", " "]
    assert words.pieces("") == [] and words.pieces(" \n") == [" \n"]
    assert count_tokens("one two three") == 3 and count_tokens("one two three\n") == 4
    long = "x" * (2 * words.MAX_PIECE_CHARS + 1)
    assert [len(p) for p in words.pieces(long)] == [words.MAX_PIECE_CHARS, words.MAX_PIECE_CHARS, 1]


@pytest.mark.parametrize("continuation", [" Paris", " Paris, France", "\n\n B", " " + "y" * 300])
def test_a_context_tokenizes_as_the_start_of_context_and_continuation(continuation: str) -> None:
    """lm-eval's split: it encodes context+continuation and the context, and cuts the first at the second's length."""
    for context in (QUESTION, "w" * 200):
        whole, alone = words.encode(context + continuation), words.encode(context)
        assert whole[: len(alone)] == alone
        assert words.decode(whole[len(alone) :]) == continuation


@pytest.mark.parametrize(
    "bad",
    [
        -1,
        1.5,
        "7",
        True,
        None,
        2**5000,
        int.from_bytes(b"\x02abc", "big"),  # not behind the marker byte
        int.from_bytes(b"\x01\xff\xfe", "big"),  # not UTF-8
    ],
)
def test_an_id_encode_could_not_have_made_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^\[1\]: token id"):
        words.decode([words.piece_id("ok"), bad])


def test_reserved_ids_decode_to_nothing() -> None:
    """Ids below 256 are the tokenizer's special ids (a real vLLM decodes [1, 2, 3] too: the persona must)."""
    assert words.decode([0, 1, 2, 255, words.piece_id("a")]) == "a"


def completion(s: Settings, **body: object) -> dict[str, object]:
    return parse_request(json.dumps({"model": "harness"} | body).encode(), False, s)


def test_a_completion_prompt_is_a_text_texts_ids_or_lists_of_ids() -> None:
    s = Settings()
    ids = words.encode("a b")
    assert completion(s, prompt="a b")["prompt_pieces"] == [["a", " b"]]
    assert completion(s, prompt=["a b", "c"])["prompt_pieces"] == [["a", " b"], ["c"]]
    assert completion(s, prompt=ids)["prompt_pieces"] == [["a", " b"]]
    batch = completion(s, prompt=[ids, words.encode("c d e")])
    assert batch["prompt_pieces"] == [["a", " b"], ["c", " d", " e"]] and batch["prompt_tokens"] == 5
    assert completion(s, prompt=[[0, *ids]])["prompt"] == "a b"  # ids kept as given: 3 tokens
    assert completion(s, prompt=[[0, *ids]])["prompt_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": [1, "a"]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [[]]}, "prompt"),
        ({"prompt": [[512]]}, "prompt"),  # 0x0200: not behind the marker byte
        ({"prompt": "a", "logprobs": 21}, "logprobs"),
        ({"prompt": "a", "logprobs": True}, "logprobs"),
        ({"prompt": "a", "echo": "yes"}, "echo"),
        ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ({"prompt": ["a", "b"], "stream": True}, "stream"),
        ({"prompt": "a", "echo": True, "logprobs": 1, "stream": True}, "stream"),
    ],
)
def test_completion_bodies_refused(body: dict[str, object], param: str) -> None:
    with pytest.raises(HttpError) as caught:
        completion(Settings(), **body)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_max_tokens_zero_with_echo_scores_the_prompt_only() -> None:
    assert completion(Settings(), prompt="a", echo=True, max_tokens=0)["max_tokens"] == 0
    assert completion(Settings(dialect="vllm"), prompt="a", echo=True, max_tokens=0)["max_tokens"] == 0


def scores(s: Settings, text: str) -> list[float]:
    return score_prompt(s, AnswerIndex(s.answers), words.pieces(text))


def test_the_mapped_answer_is_likely_and_any_other_continuation_unlikely() -> None:
    s = Settings(answers={"  " + QUESTION + "\n": " Paris ", "Question:": "no"})
    context = [PROMPT] * len(words.pieces(QUESTION))
    assert scores(s, QUESTION + " Paris") == [*context, RIGHT]
    assert scores(s, "\n" + QUESTION + " Paris ") == [*context, RIGHT, RIGHT]  # the trailing piece is the answer's
    assert scores(s, QUESTION + " Lyon, France") == [*context, WRONG, WRONG]
    assert scores(s, QUESTION) == [PROMPT] + [WRONG] * 7  # the longest mapped prompt it goes on past: "Question:"
    assert scores(s, "Unmapped: Paris") == [PROMPT, PROMPT]
    assert scores(s, QUESTION + "Paris") == [*context[:-1], PROMPT]  # "\nAnswer:Paris" begins before the answer


def test_the_wrong_rate_flips_which_continuation_is_likely() -> None:
    s = Settings(answers={QUESTION: "Paris"}, wrong_rate=1.0)
    assert scores(s, QUESTION + " Paris")[-1] == WRONG and scores(s, QUESTION + " Lyon")[-1] == RIGHT


def test_logprobs_shape_with_and_without_echo() -> None:
    s = Settings(answers={QUESTION: "Paris"})
    index, prompt = AnswerIndex(s.answers), words.pieces(QUESTION + " Lyon")
    echoed = completion_logprobs(s, index, prompt, ["x"], 1)
    assert echoed["tokens"] == [*prompt, "x"]
    assert echoed["token_logprobs"][0] is None and echoed["top_logprobs"][0] is None
    assert echoed["token_logprobs"][-2:] == [WRONG, GENERATED]
    assert echoed["top_logprobs"][-2:] == [{RIVAL: RIGHT, " Lyon": WRONG}, {"x": GENERATED}]
    assert echoed["text_offset"] == [sum(len(p) for p in prompt[:i]) for i in range(len(prompt) + 1)]
    assert completion_logprobs(s, index, prompt, [], 0)["top_logprobs"][-1] == {" Lyon": WRONG}  # top 0: itself
    alone = completion_logprobs(s, index, None, ["x", " y"], 1)
    assert alone == {
        "tokens": ["x", " y"],
        "token_logprobs": [GENERATED, GENERATED],
        "top_logprobs": [{"x": GENERATED}, {" y": GENERATED}],
        "text_offset": [0, 1],
    }


@pytest.mark.parametrize(
    ("flags", "served"),
    [
        ([], False),
        (["--enable-tokenizer-info-endpoint"], True),
        (["--enable-tokenizer-info-endpoint", "--disable-tokenizer-info-endpoint"], False),
        (["--disable-tokenizer-info-endpoint", "--enable-tokenizer-info-endpoint"], True),
    ],
)
def test_the_vllm_persona_serves_tokenizer_info_only_when_asked(flags: list[str], served: bool) -> None:
    persona, _ = build_persona("vllm", "0.34.0", ["serve", "M", *flags], GPUS)
    assert persona.tokenizer_info is served
