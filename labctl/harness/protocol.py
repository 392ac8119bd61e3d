"""The HTTP and OpenAI request shapes the harness engine speaks: errors in OpenAI's format, request
lines and headers, and completion requests checked as strictly as real engines check them."""

from __future__ import annotations

import json
from typing import Any

from labctl.harness import words
from labctl.harness.model import Settings, count_tokens

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
}
ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    411: "BadRequestError",
    413: "RequestTooLarge",
    431: "BadRequestError",
    501: "NotImplementedError",
    503: "ServiceUnavailableError",
}
# vLLM answers a body its request model cannot parse (FastAPI's validation) with this type and `body.FIELD`.
VALIDATION_TYPE = "Bad Request"
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs


class HttpError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind


def error_body(status: int, message: str, param: str | None = None, kind: str | None = None) -> dict[str, Any]:
    kind = kind or ERROR_TYPES.get(status, "Error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def invalid_body(s: Settings, message: str, field: str | None) -> HttpError:
    """A body that does not parse: in vLLM's words when the persona is vLLM, else the harness's own."""
    if s.dialect == "vllm":
        return HttpError(400, message, f"body.{field or 0}", VALIDATION_TYPE)
    return HttpError(400, message, field)


def usage_of(request: dict[str, Any], completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": request["prompt_tokens"],
        "completion_tokens": completion_tokens,
        "total_tokens": request["prompt_tokens"] + completion_tokens,
    }


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise HttpError(400, f"unsupported protocol {version}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, "malformed header line")
        headers[name.strip().lower()] = value.strip()
    return method, path, headers


def _int_field(data: dict[str, Any], name: str, s: Settings) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_body(s, f"'{name}' must be an integer", name)
    return value


def parse_request(body: bytes, chat: bool, s: Settings) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise invalid_body(s, "the request body is not valid JSON", None) from None
    if not isinstance(data, dict):
        raise invalid_body(s, "the request body must be a JSON object", None)
    model = data.get("model")
    if not isinstance(model, str):
        raise invalid_body(s, "'model' is required and must be a string", "model")
    if model != s.model and model not in s.served_names:
        raise HttpError(404, f"The model `{model}` does not exist.", "model")
    prompt_pieces: list[list[str]] = []
    echo = False  # completions only, as logprobs
    logprobs: int | None = None
    if chat:
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise invalid_body(s, "'messages' is required and must be a non-empty list", "messages")
        texts = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise HttpError(400, f"messages[{i}] must be an object with a 'role'", "messages")
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            if content is not None and not isinstance(content, str):
                raise HttpError(400, f"messages[{i}].content must be a string or a list of parts", "messages")
            texts.append(content or "")
        users = [t for m, t in zip(messages, texts, strict=False) if m.get("role") == "user"]
        prompt = users[-1] if users else texts[-1]
        prompt_tokens = sum(count_tokens(t) for t in texts)
    else:
        prompt_pieces = _prompt_pieces(data.get("prompt"), s)
        prompt = "".join(prompt_pieces[0])
        prompt_tokens = sum(len(p) for p in prompt_pieces)
        echoed = data.get("echo", False)
        if echoed is not None and not isinstance(echoed, bool):
            raise invalid_body(s, "'echo' must be true or false", "echo")
        echo = bool(echoed)
        logprobs = _int_field(data, "logprobs", s)
        if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
            raise HttpError(400, f"logprobs must be between 0 and {MAX_LOGPROBS}, got {logprobs}", "logprobs")
    # a batch is held to the limits prompt by prompt, as vLLM holds it: its longest prompt decides
    longest = max((len(p) for p in prompt_pieces), default=prompt_tokens)
    max_tokens = _int_field(data, "max_completion_tokens", s)
    if max_tokens is None:
        max_tokens = _int_field(data, "max_tokens", s)
    if max_tokens is None:
        max_tokens = min(s.default_max_tokens, max(1, s.max_model_len - longest))
    if max_tokens < 1 and not (max_tokens == 0 and echo):  # vLLM: "max_tokens can only be 0 if echo is True"
        raise HttpError(400, f"max_tokens must be at least 1, got {max_tokens}", "max_tokens")
    if s.dialect == "vllm":
        max_tokens = _vllm_fit(longest, max_tokens, s.max_model_len)
    elif longest + max_tokens > s.max_model_len:
        raise HttpError(
            400,
            f"This model's maximum context length is {s.max_model_len} tokens. However, you requested "
            f"{longest + max_tokens} tokens ({longest} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    temperature = data.get("temperature", 1.0)
    if s.dialect == "vllm" and isinstance(temperature, (int, float)) and temperature < 0:
        raise HttpError(400, f"temperature must be non-negative, got {temperature}.", "temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise HttpError(400, "'temperature' must be a number between 0 and 2", "temperature")
    seed = _int_field(data, "seed", s)
    n = _int_field(data, "n", s)
    if n not in (None, 1):
        raise HttpError(400, "only n=1 is supported", "n")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid_body(s, "'stream' must be true or false", "stream")
    if stream and (len(prompt_pieces) > 1 or echo or logprobs is not None):
        raise HttpError(
            400,
            "the harness engine streams one prompt without echo or logprobs; send a batch, echo or logprobs "
            "with stream false",
            "stream",
        )
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise HttpError(400, "'stream_options' must be an object", "stream_options")
    ignore_eos = data.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise HttpError(400, "'ignore_eos' must be true or false", "ignore_eos")
    kwargs = data.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise HttpError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs")
    thinking = kwargs.get("enable_thinking")
    return {
        "thinking": thinking if isinstance(thinking, bool) else None,
        "prompt": prompt,
        "prompt_pieces": prompt_pieces,  # a completion's prompts, each as its tokens' text (chat: none)
        "prompt_tokens": prompt_tokens,
        "echo": echo,
        "logprobs": logprobs,
        "max_tokens": max_tokens,
        "stream": stream,
        "include_usage": bool(options.get("include_usage")),
        "ignore_eos": ignore_eos,
        "seed": seed,
        "temperature": float(temperature),
    }


def _prompt_pieces(raw: Any, s: Settings) -> list[list[str]]:
    """A completion's prompt as vLLM takes it (a text, texts, token ids, or lists of token ids): each prompt as the
    text of its tokens. Token ids are the harness's own (labctl/harness/words.py), kept as given."""
    if isinstance(raw, str):
        return [words.pieces(raw)]
    if isinstance(raw, list) and raw and all(isinstance(p, str) for p in raw):
        return [words.pieces(p) for p in raw]
    if isinstance(raw, list) and raw and all(isinstance(p, int) and not isinstance(p, bool) for p in raw):
        batch = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(p, list) and p for p in raw):
        batch = raw
    else:
        message = "'prompt' is required: a string, a list of strings, a list of token ids or a list of such lists"
        raise invalid_body(s, message, "prompt")
    found = []
    for i, ids in enumerate(batch):
        try:
            found.append(words.decode_pieces(ids))
        except ValueError as exc:
            where = f"prompt[{i}]" if batch is raw else "prompt"
            raise HttpError(400, f"{where}{exc}", "prompt") from None
    return found


def _vllm_fit(prompt_tokens: int, max_tokens: int, max_model_len: int) -> int:
    """vLLM refuses a prompt or a max_tokens longer than the context, and shortens max_tokens to fit beside
    the prompt (vllm/renderers/params.py and get_max_tokens in vllm/entrypoints/serve/utils/api_utils.py)."""
    if prompt_tokens > max_model_len:
        raise HttpError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains "
            f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. Please "
            "reduce the length of the input prompt.",
            "input_tokens",
        )
    if max_tokens > max_model_len:
        raise HttpError(
            400,
            f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. Please request fewer "
            "output tokens.",
            "max_tokens",
        )
    return min(max_tokens, max(1, max_model_len - prompt_tokens))  # max_tokens 0 (echo only) stays 0
