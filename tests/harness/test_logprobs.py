"""The harness engine serves log-probabilities, as a local process: its tokenizer's routes round-trip any text,
the official openai SDK reads echoed prompt logprobs over token-id prompts, and lm-eval's own local-completions
model with the remote tokenizer scores a multiple-choice question from the answer map, as it would a vLLM."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from helpers.harness_proc import harness, vllm_persona

pytestmark = pytest.mark.process

QUESTION = "Question: What is the capital of France?\nAnswer:"
TEXTS = [
    "",
    "one",
    "Hello  wörld\n\n ünïcödé 漢字 🙂 ",
    "tabs\tand\r\nlines\n",
    "   ",
    "x" * 400 + " y",
    "a b ",
    "lone \ud800",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    answers = tmp_path_factory.mktemp("answers") / "answers.json"
    answers.write_text(json.dumps({QUESTION: "Paris", "Q: 2+2=": "4"}), encoding="utf-8")
    with harness("--answers", str(answers), "--ttft-ms", "1", "--tpot-ms", "1") as (url, _):
        yield url


def test_tokenize_then_detokenize_gives_the_text_back(base: str) -> None:
    for text in TEXTS:
        body = json.dumps({"prompt": text, "return_token_strs": True})  # ASCII: a lone surrogate travels escaped
        tokens = httpx.post(f"{base}/tokenize", content=body).json()
        assert tokens["count"] == len(tokens["tokens"]) == len(tokens["token_strs"])
        assert "".join(tokens["token_strs"]) == text
        assert httpx.post(f"{base}/detokenize", json={"tokens": tokens["tokens"]}).json() == {"prompt": text}
    plain = httpx.post(f"{base}/tokenize", json={"prompt": "a b"}).json()
    assert plain["token_strs"] is None and plain["max_model_len"] == 32768
    joined = httpx.post(f"{base}/tokenize", json={"messages": [{"role": "user", "content": "a"}, {"content": "b"}]})
    assert joined.json()["count"] == 2


def test_tokenizer_info_is_what_lm_evals_remote_tokenizer_reads(base: str) -> None:
    from lm_eval.utils import check_remote_tokenizer_support

    assert httpx.get(f"{base}/tokenizer_info").json() == {
        "eos_token": "</s>",
        "bos_token": None,
        "pad_token": None,
        "chat_template": None,
        "tokenizer_class": "labctl-harness-words",
        "model_max_length": 32768,
    }
    assert check_remote_tokenizer_support(f"{base}/v1/completions")


def ids(base: str, text: str) -> list[int]:
    return list(httpx.post(f"{base}/tokenize", json={"prompt": text}).json()["tokens"])


def test_the_openai_sdk_reads_echoed_logprobs_over_token_ids(base: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
    right, wrong = ids(base, QUESTION + " Paris"), ids(base, QUESTION + " Lyon")
    reply = client.completions.create(
        model="harness", prompt=[right, wrong], echo=True, logprobs=1, max_tokens=1, temperature=0
    )
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.usage is not None and reply.usage.prompt_tokens == len(right) + len(wrong) == 18
    assert reply.usage.completion_tokens == 2
    for choice, continuation, figure in zip(reply.choices, (" Paris", " Lyon"), (-0.1, -2.5), strict=True):
        lp = choice.logprobs
        assert lp is not None and lp.tokens is not None and lp.token_logprobs is not None
        assert lp.top_logprobs is not None and lp.text_offset is not None
        assert choice.text.startswith(QUESTION + continuation) and len(lp.tokens) == 10
        assert "".join(lp.tokens) == choice.text
        assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(10)]
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing comes before the first
        assert lp.token_logprobs[1:8] == [-1.0] * 7 and lp.token_logprobs[8:] == [figure, -0.5]
        assert lp.top_logprobs[8][continuation] == figure and lp.top_logprobs[9] == {lp.tokens[9]: -0.5}
        assert (max(lp.top_logprobs[8].values()) == figure) is (figure == -0.1)  # a wrong choice is not greedy
    without = client.completions.create(model="harness", prompt=right, max_tokens=3, extra_body={"ignore_eos": True})
    assert without.choices[0].logprobs is None and not without.choices[0].text.startswith("Question")
    only = client.completions.create(
        model="harness", prompt=right, max_tokens=2, logprobs=0, extra_body={"ignore_eos": True}
    )
    assert only.choices[0].logprobs is not None and only.choices[0].logprobs.token_logprobs == [-0.5, -0.5]
    streamed = client.completions.create(model="harness", prompt=right, max_tokens=3, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices)  # one prompt as ids streams too


def loglikelihoods(url: str, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]]:
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    lm = LocalCompletionsAPI(
        base_url=f"{url}/v1/completions", model="harness", tokenizer_backend="remote", num_concurrent=1
    )
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    return list(lm.loglikelihood(requests, disable_tqdm=True))


def test_lm_eval_picks_the_mapped_answer_and_only_it_is_greedy(base: str) -> None:
    choices = [" Lyon", " Paris", " Marseille, France"]
    found = loglikelihoods(base, [(QUESTION, c) for c in choices])
    assert found == [(-2.5, False), (pytest.approx(-0.1), True), (-5.0, False)]
    # The answer map's prompts are stripped: a context with trailing whitespace (moved to the continuation by
    # lm-eval) scores alike; one the map lacks gives every token the same figure, each the likeliest.
    assert loglikelihoods(base, [("Q: 2+2= ", "4"), ("Q: 2+2= ", "5")]) == [(pytest.approx(-0.1), True), (-2.5, False)]
    assert loglikelihoods(base, [("Unmapped context:", " a"), ("Unmapped context:", " b c")]) == [
        (-1.0, True),
        (-2.0, True),
    ]


def test_ids_the_harness_could_not_have_made_are_400(base: str) -> None:
    for tokens in ([-1], [512], ["a"], [int.from_bytes(b"\x01\xff", "big")], 5):
        response = httpx.post(f"{base}/detokenize", json={"tokens": tokens})
        error = response.json()["error"]
        assert response.status_code == 400 and error["code"] == 400 and error["param"] == "tokens", tokens
        assert error["type"] == "BadRequestError"
    for prompt in ([512], [[1, 2], [-3]], [[]], [1, "a"]):
        response = httpx.post(f"{base}/v1/completions", json={"model": "harness", "prompt": prompt, "max_tokens": 1})
        assert response.status_code == 400 and response.json()["error"]["param"] == "prompt", prompt
    assert (
        "prompt[1][0]: token id -3 is negative"
        in httpx.post(f"{base}/v1/completions", json={"model": "harness", "prompt": [[300], [-3]]}).json()["error"][
            "message"
        ]
    )


def test_the_vllm_persona_serves_tokenizer_info_with_its_flag_and_lm_eval_through_it() -> None:
    with vllm_persona("--enable-tokenizer-info-endpoint") as url:
        assert httpx.get(f"{url}/tokenizer_info").json()["eos_token"] == "</s>"
        assert "/tokenizer_info" in httpx.get(f"{url}/openapi.json").json()["paths"]
        from lm_eval.models.openai_completions import LocalCompletionsAPI

        lm = LocalCompletionsAPI(base_url=f"{url}/v1/completions", model="m", tokenizer_backend="remote")
        assert lm.tok_encode("a b") == ids(url, "a b") and lm.tokenizer.decode(ids(url, "a b")) == "a b"
    with vllm_persona() as url:
        assert httpx.get(f"{url}/tokenizer_info").status_code == 404  # as vLLM without the flag
        assert "/tokenizer_info" not in httpx.get(f"{url}/openapi.json").json()["paths"]
        assert httpx.post(f"{url}/detokenize", json={"tokens": [1, 2, 3]}).status_code == 200  # as a real vLLM
