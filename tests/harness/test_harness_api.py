"""The harness engine seen through the official openai SDK: chat and completions, streaming and not,
usage, errors in OpenAI's shape, keys, determinism."""

from __future__ import annotations

import httpx
import openai
import pytest
from helpers.harness_proc import harness

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers


@pytest.fixture(scope="module")
def base() -> str:
    with harness("--ttft-ms", "5", "--tpot-ms", "1", "--max-model-len", "4096") as (url, _):
        yield url


def client(base: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)


def test_models_and_version(base: str) -> None:
    assert [m.id for m in client(base).models.list()] == ["harness"]
    assert httpx.get(f"{base}/version").json()["version"].startswith("labctl-harness ")


def test_chat_non_streaming(base: str) -> None:
    reply = client(base).chat.completions.create(
        model="harness", messages=[{"role": "user", "content": "say three words"}], max_tokens=7, seed=1, temperature=0
    )
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage is not None and reply.usage.prompt_tokens == 3
    assert reply.usage.completion_tokens == len(reply.choices[0].message.content.split()) <= 7


def test_chat_streaming_role_chunk_usage_done(base: str) -> None:
    stream = client(base).chat.completions.create(
        model="harness",
        messages=[{"role": "user", "content": "a b c d"}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content == ""  # role-only chunk carries no token
    tokens = [c.choices[0].delta.content for c in chunks[1:] if c.choices and c.choices[0].delta.content]
    assert len(tokens) == 12
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12 and chunks[-1].usage.prompt_tokens == 4


def test_completions_both_ways(base: str) -> None:
    c = client(base)
    plain = c.completions.create(model="harness", prompt="one two", max_tokens=5, extra_body={"ignore_eos": True})
    assert plain.usage.completion_tokens == 5 and plain.choices[0].finish_reason == "length"
    streamed = "".join(
        x.choices[0].text
        for x in c.completions.create(
            model="harness", prompt="one two", max_tokens=5, stream=True, extra_body={"ignore_eos": True}
        )
        if x.choices
    )
    assert streamed == plain.choices[0].text  # deterministic: same prompt, same answer


def test_max_completion_tokens_and_seed(base: str) -> None:
    c = client(base)

    def ask(seed):
        return (
            c.chat.completions.create(  # noqa: E731
                model="harness",
                messages=[{"role": "user", "content": "x"}],
                max_completion_tokens=30,
                seed=seed,
                extra_body={"ignore_eos": True},
            )
            .choices[0]
            .message.content
        )

    assert len(ask(1).split()) == 30
    assert ask(1) == ask(1) and ask(1) != ask(2)


def test_unknown_model_is_404(base: str) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client(base).chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert err.value.body["message"] == "The model `gpt-9` does not exist."


@pytest.mark.parametrize(
    "body",
    [
        {"model": "harness", "messages": "hi"},
        {"model": "harness", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1},
        {"model": "harness", "messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9},
        {"model": "harness", "messages": [{"role": "user", "content": "x"}], "max_tokens": "10"},
        {"model": "harness", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
        {"model": "harness", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
        {"model": 7, "messages": [{"role": "user", "content": "x"}]},
    ],
)
def test_bad_requests_are_400(base: str, body: dict) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(base).chat.completions.create(**body)  # type: ignore[call-overload]
    assert err.value.status_code == 400 and err.value.body["message"]


def test_malformed_json_is_400(base: str) -> None:
    r = httpx.post(f"{base}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": "the request body is not valid JSON",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }


def test_missing_messages_is_400(base: str) -> None:
    r = httpx.post(f"{base}/v1/chat/completions", json={"model": "harness"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_api_key_enforced_like_vllm() -> None:
    with harness(env={"LABCTL_HARNESS_API_KEY": "k-123", "PATH": "/usr/bin:/bin"}) as (url, _):
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong").models.list()
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong").chat.completions.create(model="harness", messages=[{"role": "user", "content": "x"}])
        assert [m.id for m in client(url, "k-123").models.list()] == ["harness"]
        assert httpx.get(f"{url}/health").status_code == 200  # /health, /metrics stay open
        assert httpx.get(f"{url}/metrics").status_code == 200


def test_metrics_count_requests_and_tokens(base: str) -> None:
    before = httpx.get(f"{base}/metrics").text
    client(base).completions.create(model="harness", prompt="a b c", max_tokens=4, extra_body={"ignore_eos": True})
    after = httpx.get(f"{base}/metrics").text

    def value(text: str, name: str) -> float:
        return float(next(x for x in text.splitlines() if x.startswith(name + "{")).split()[-1])

    assert value(after, "harness_generation_tokens_total") - value(before, "harness_generation_tokens_total") == 4
    assert value(after, "harness_prompt_tokens_total") - value(before, "harness_prompt_tokens_total") == 3
    assert value(after, "harness_num_requests_running") == 0
