"""The vLLM persona's HTTP shapes, as a local process through the official openai SDK: what the diff against
a real vLLM (tests/real/test_persona_conforms.py) found and the persona now does, kept here where no image
is needed. The GPU cannot exist here: NVIDIA_VISIBLE_DEVICES is set by hand, as Docker's device request would."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from helpers.harness_proc import vllm_persona

pytestmark = pytest.mark.process

KEY = "sk-vllm-persona-test"
MAX_LEN = 256


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with vllm_persona("--reasoning-parser", "qwen3", key=KEY, max_model_len=MAX_LEN) as url:
        yield url


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)


def test_a_stream_ends_on_the_last_token_then_usage_then_done(base: str) -> None:
    chunks = list(
        client(base).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hello there"}],
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
    )
    role, tokens, closing = chunks[0], chunks[1:-1], chunks[-1]
    assert role.choices[0].delta.role == "assistant"
    assert all(c.choices and c.choices[0].delta.content for c in tokens)  # every chunk after the role is a token
    assert [c.choices[0].finish_reason for c in tokens] == [None] * (len(tokens) - 1) + ["length"]
    assert closing.choices == [] and closing.usage is not None
    assert closing.usage.completion_tokens == len(tokens) == 6
    assert closing.usage.completion_tokens_details is not None
    assert closing.usage.completion_tokens_details.reasoning_tokens == 0


def test_thinking_goes_to_reasoning(base: str) -> None:
    on = client(base).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    extra = on.choices[0].message.model_extra or {}
    assert extra["reasoning"] and "reasoning_content" not in extra
    assert on.usage and on.usage.completion_tokens_details and on.usage.completion_tokens_details.reasoning_tokens


def test_routes_outside_v1_answer_without_the_key(base: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 401
    assert httpx.post(f"{base}/invocations", json=body).json()["object"] == "chat.completion"
    assert httpx.post(f"{base}/tokenize", json={"model": "m", "prompt": "a b c"}).json()["count"] == 3
    assert httpx.get(f"{base}/ping").status_code == 200
    table = httpx.get(f"{base}/openapi.json").json()["paths"]
    assert "post" in table["/invocations"] and "get" in table["/v1/models"]
    assert httpx.post(f"{base}/v1/responses", json=body).status_code == 401
    refused = httpx.post(f"{base}/v1/responses", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert refused.status_code == 501 and "does not act it out" in refused.json()["error"]["message"]


def test_lengths_and_parameters_are_refused_as_vllm_does(base: str) -> None:
    def post(**more: object) -> httpx.Response:
        body = {"model": "m", "messages": [{"role": "user", "content": "word " * 100}], "max_tokens": 4} | more
        return httpx.post(f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"})

    assert post(messages=[{"role": "user", "content": "word " * (MAX_LEN + 1)}]).json()["error"]["param"] == (
        "input_tokens"
    )
    assert post(max_tokens=MAX_LEN + 1).json()["error"]["param"] == "max_tokens"
    fitted = post(max_tokens=MAX_LEN, ignore_eos=True, chat_template_kwargs={"enable_thinking": False}).json()
    assert fitted["usage"]["completion_tokens"] == MAX_LEN - fitted["usage"]["prompt_tokens"]
    error = post(max_tokens="many").json()["error"]
    assert (error["type"], error["param"]) == ("Bad Request", "body.max_tokens")


def test_metrics_carry_every_default_series(base: str) -> None:
    text = httpx.get(f"{base}/metrics").text
    for name in ("vllm:time_to_first_token_seconds_bucket", "vllm:generation_tokens_total", "vllm:cache_config_info"):
        assert f"\n{name}{{" in text, name
