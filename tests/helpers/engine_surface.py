"""An OpenAI-compatible engine's HTTP surface, reduced to its shape: which routes answer with which status
with and without a key, the metric names, the fields of responses and stream chunks, the error bodies.

Two engines that should behave alike (a persona and the real engine) are read with the same requests and
compared key by key. Shapes, never text: a message's words, token ids, counts and timings are left out, and
so are fields whose value is null (a null carries no shape, and each release adds some)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import httpx

Surface = dict[str, Any]

GET_ROUTES = ("/health", "/version", "/v1/models", "/metrics", "/ping", "/load", "/docs", "/openapi.json")
GET_ROUTES += ("/kv_event_sources", "/no-such-route", "/v1/no-such-route")
POST_ROUTES = ("/v1/chat/completions", "/v1/completions", "/invocations", "/tokenize", "/detokenize", "/ping")
POST_ROUTES += ("/health", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions/batch")
POST_ROUTES += ("/generative_scoring", "/is_scaling_elastic_ep")


def paths(value: Any, prefix: str = "") -> set[str]:
    """The dotted paths of every non-null leaf (list items as `[]`; an empty list as `=[]`)."""
    if isinstance(value, dict):
        found: set[str] = set()
        for key, item in value.items():
            found |= paths(item, f"{prefix}.{key}" if prefix else key)
        return found
    if isinstance(value, list):
        if not value:
            return {f"{prefix}=[]"}
        return set().union(*(paths(item, f"{prefix}[]") for item in value))
    return set() if value is None else {prefix}


def _post_body(model: str) -> dict[str, Any]:
    """One body that every generating route accepts or refuses the same way (chat, completion, tokens)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Hello"}],
        "prompt": "Hello",
        "tokens": [1, 2, 3],
        "max_tokens": 2,
    }


def routes(client: httpx.Client, model: str, key: str) -> Surface:
    found: Surface = {}
    who = {"no key": {}, "wrong key": {"Authorization": "Bearer wrong"}, "key": {"Authorization": f"Bearer {key}"}}
    for path in GET_ROUTES:
        for label, headers in who.items():
            found[f"route GET {path} ({label})"] = client.get(path, headers=headers).status_code
    for path in POST_ROUTES:
        for label, headers in who.items():
            found[f"route POST {path} ({label})"] = client.post(
                path, headers=headers, json=_post_body(model)
            ).status_code
    table = client.get("/openapi.json")
    found["route table (openapi.json)"] = (
        sorted(f"{method.upper()} {path}" for path, ops in table.json()["paths"].items() for method in ops)
        if table.status_code == 200
        else f"status {table.status_code}"
    )
    return found


def metric_names(client: httpx.Client, prefix: str) -> list[str]:
    text = client.get("/metrics").text
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line.startswith(prefix)}
    return sorted(names)


def _chat(model: str, thinking: bool, **more: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6}
    body.update({"ignore_eos": True, "temperature": 0, "chat_template_kwargs": {"enable_thinking": thinking}})
    return body | more


def _events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[Any]:
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def stream_shape(events: Iterable[Any]) -> list[str]:
    """Each chunk as the sorted paths it carries, a run of alike chunks as one: how many chunks carry the tokens is
    the engine's timing, not its shape (a loaded vLLM puts several tokens in one chunk; seen in make test)."""
    shape: list[str] = []
    for event in events:
        kind = event if isinstance(event, str) else " ".join(sorted(paths(event)))
        if not shape or shape[-1] != kind:
            shape.append(kind)
    return shape


def thinking_fields(events: Iterable[Any]) -> list[str]:
    """The delta fields a stream's tokens arrive in, whatever the model chose to say."""
    fields: set[str] = set()
    for event in events:
        if isinstance(event, dict):
            for choice in event.get("choices") or []:
                fields |= {k for k, v in (choice.get("delta") or {}).items() if v is not None and k != "role"}
    return sorted(fields)


def responses(client: httpx.Client, model: str) -> Surface:
    found: Surface = {}
    for thinking in (False, True):
        label = "thinking" if thinking else "no thinking"
        # Whether a thinking model stops thinking within max_tokens is the model's choice, not the engine's:
        # with thinking on, `content` is left out.
        model_choice = {"choices[].message.content", "content"} if thinking else set()
        answer = client.post("/v1/chat/completions", json=_chat(model, thinking)).json()
        found[f"chat ({label}): fields"] = sorted(paths(answer) - model_choice)
        stream = _chat(model, thinking, stream=True, stream_options={"include_usage": True})
        events = _events(client, "/v1/chat/completions", stream)
        found[f"chat stream ({label}): token fields"] = sorted(set(thinking_fields(events[1:-2])) - model_choice)
        found[f"chat stream ({label}): first chunk"] = stream_shape(events[:1])
        found[f"chat stream ({label}): usage and end"] = stream_shape(events[-2:])
        if not thinking:
            found["chat stream (no thinking): chunks"] = stream_shape(events)
    completion = {"model": model, "prompt": "Hello", "max_tokens": 4, "ignore_eos": True, "temperature": 0}
    found["completion: fields"] = sorted(paths(client.post("/v1/completions", json=completion).json()))
    events = _events(
        client, "/v1/completions", completion | {"stream": True, "stream_options": {"include_usage": True}}
    )
    found["completion stream: chunks"] = stream_shape(events)
    return found


def errors(client: httpx.Client, model: str, max_model_len: int) -> Surface:
    """Error bodies: status, the fields of the body, and the error's type, code and param."""
    chat = _chat(model, False)
    cases = {
        "unknown model": chat | {"model": "no-such-model"},
        "prompt too long": chat | {"messages": [{"role": "user", "content": "word " * (2 * max_model_len)}]},
        "max_tokens above the context": chat | {"max_tokens": 2 * max_model_len},
        # The prompt fills nearly all the context, so an engine that fits max_tokens to the room left (vLLM
        # does) writes a few tokens, not hundreds: those took a loaded CPU vLLM past the client's timeout.
        "prompt and max_tokens above the context": chat
        | {"messages": [{"role": "user", "content": "word " * (max_model_len - 32)}], "max_tokens": max_model_len // 2},
        "temperature below 0": chat | {"temperature": -1},
        "max_tokens not an integer": chat | {"max_tokens": "many"},
        "max_tokens 0": chat | {"max_tokens": 0},
        "no messages": {"model": model},
    }
    found: Surface = {}
    for case, body in cases.items():
        response = client.post("/v1/chat/completions", json=body)
        answer = response.json()
        error = answer.get("error") if isinstance(answer, dict) else None
        shape: dict[str, Any] = {"status": response.status_code, "fields": sorted(paths(answer))}
        if isinstance(error, dict):
            shape |= {k: error.get(k) for k in ("type", "code", "param")}
        found[f"error: {case}"] = shape
    response = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    error = response.json().get("error", {})
    found["error: body not JSON"] = {"status": response.status_code} | {k: error.get(k) for k in ("type", "code")}
    return found


def read_surface(base: str, model: str, key: str, max_model_len: int, metric_prefix: str = "vllm:") -> Surface:
    with httpx.Client(base_url=base, timeout=120) as open_client:
        surface = routes(open_client, model, key)
    with httpx.Client(base_url=base, timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        surface |= responses(client, model)
        surface |= errors(client, model, max_model_len)
        surface["metric names"] = metric_names(client, metric_prefix)
    return surface


def differences(real: Surface, persona: Surface) -> dict[str, tuple[Any, Any]]:
    return {
        k: (real.get(k), persona.get(k)) for k in sorted(real.keys() | persona.keys()) if real.get(k) != persona.get(k)
    }
