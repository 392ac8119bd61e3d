"""vLLM's HTTP surface beyond completions, for the vLLM persona: its route table (which routes exist, which
its `--api-key` guards), the small open routes, and the whole set of `vllm:` metric series.

Read from vLLM 0.34.0's code (the routers under vllm/entrypoints, vllm/v1/metrics/loggers.py and perf.py)
and held to a real vLLM (the CPU build, 0.32.0, whose routes and metric names are the same apart from the
allowlisted ones) by tests/real/test_persona_conforms.py. Values the harness has no notion of are zero:
no such event happened. Routes that labctl never calls exist (so the key guard and the route table are
the engine's) but answer 501, said so in the body. The tokenizer's routes (/tokenize, /detokenize,
/tokenizer_info) serve the plain harness too: lm-eval's remote tokenizer reads them.
"""

from __future__ import annotations

import json
from typing import Any

from labctl.harness import words
from labctl.harness.model import Settings
from labctl.harness.protocol import HttpError, invalid_body

# (method, path) of every route `vllm serve` registers by default; the key guards only /v1/*.
ROUTES = (
    ("GET", "/health"),
    ("GET", "/kv_event_sources"),
    ("GET", "/load"),
    ("GET", "/metrics"),
    ("GET", "/ping"),
    ("GET", "/v1/models"),
    ("GET", "/v1/responses/{response_id}"),
    ("GET", "/version"),
    ("POST", "/detokenize"),
    ("POST", "/generative_scoring"),
    ("POST", "/invocations"),
    ("POST", "/is_scaling_elastic_ep"),
    ("POST", "/ping"),
    ("POST", "/scale_elastic_ep"),
    ("POST", "/tokenize"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/chat/completions/batch"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/responses/{response_id}/cancel"),
    ("POST", "/v1/systemone"),
)
TOKENIZER_INFO = ("GET", "/tokenizer_info")  # only with --enable-tokenizer-info-endpoint
EOS_TOKEN = "</s>"  # a piece like any other: the harness ends its answers without one
SIMULATED_PATHS = {
    "/health",
    "/kv_event_sources",
    "/load",
    "/metrics",
    "/ping",
    "/v1/models",
    "/version",
    "/detokenize",
    "/invocations",
    "/is_scaling_elastic_ep",
    "/tokenize",
    "/v1/chat/completions",
    "/v1/completions",
}

# name → kind; counters are served as NAME_total and NAME_created, histograms as _bucket/_count/_sum/_created.
COUNTERS = (
    "estimated_flops_per_gpu",
    "estimated_read_bytes_per_gpu",
    "estimated_write_bytes_per_gpu",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "external_prefix_cache_queries",
    "external_prefix_cache_hits",
    "mm_cache_queries",
    "mm_cache_hits",
    "num_preemptions",
    "prompt_tokens",
    "prompt_tokens_by_source",
    "prompt_tokens_cached",
    "prompt_tokens_cached_by_source",
    "generation_tokens",
    "request_success",
)
GAUGES: tuple[str, ...] = ("num_requests_running", "num_requests_waiting", "num_requests_waiting_by_reason")
GAUGES += ("engine_sleep_state", "kv_cache_usage_perc")
HISTOGRAMS = (
    "request_prompt_tokens",
    "request_generation_tokens",
    "iteration_tokens_total",
    "request_max_num_generation_tokens",
    "request_params_n",
    "request_params_max_tokens",
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_inference_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_num_preemptions",
    "request_prefill_kv_computed_tokens",
)
EXTRA_LABELS = {
    "num_requests_waiting_by_reason": ',reason="capacity"',
    "engine_sleep_state": ',sleep_state="awake"',
    "prompt_tokens_by_source": ',source="local_compute"',
    "prompt_tokens_cached_by_source": ',source="device"',
    "request_success": ',finished_reason="stop"',
}


def metrics_text(model: str, values: dict[str, float], created: float, cache: dict[str, str] | None = None) -> str:
    """Every default `vllm:` series; `values` holds the ones the harness counts (by family name), `cache` the
    labels of vllm:cache_config_info (its CacheConfig fields, as strings)."""
    labels = f'engine="0",model_name="{model}"'
    lines: list[str] = []
    for name in COUNTERS:
        full = labels + EXTRA_LABELS.get(name, "")
        lines += [f"# TYPE vllm:{name}_total counter", f"vllm:{name}_total{{{full}}} {values.get(name, 0)}"]
        lines += [f"# TYPE vllm:{name}_created gauge", f"vllm:{name}_created{{{full}}} {created}"]
    for name in GAUGES:
        full = labels + EXTRA_LABELS.get(name, "")
        lines += [f"# TYPE vllm:{name} gauge", f"vllm:{name}{{{full}}} {values.get(name, 0)}"]
    for name in HISTOGRAMS:
        lines.append(f"# TYPE vllm:{name} histogram")
        lines += [f'vllm:{name}_bucket{{{labels},le="+Inf"}} 0', f"vllm:{name}_count{{{labels}}} 0"]
        lines += [f"vllm:{name}_sum{{{labels}}} 0", f"vllm:{name}_created{{{labels}}} {created}"]
    reject = f'model_name="{model}",reason="max_num_queued_reqs"'
    lines += ["# TYPE vllm:admission_rejections_total counter", f"vllm:admission_rejections_total{{{reject}}} 0"]
    lines += [
        "# TYPE vllm:admission_rejections_created gauge",
        f"vllm:admission_rejections_created{{{reject}}} {created}",
    ]
    lines += [
        "# TYPE vllm:cache_config_info gauge",
        "vllm:cache_config_info{"
        + ",".join([labels, *(f'{k}="{v}"' for k, v in (cache or {"enable_prefix_caching": "True"}).items())])
        + "} 1",
    ]
    return "\n".join(lines) + "\n"


def openapi(tokenizer_info: bool = False) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for method, path in (*ROUTES, TOKENIZER_INFO) if tokenizer_info else ROUTES:
        paths.setdefault(path, {})[method.lower()] = {"summary": "labctl persona"}
    return {"openapi": "3.1.0", "info": {"title": "FastAPI", "version": "0.1.0"}, "paths": paths}


DOCS = b"<!DOCTYPE html><html><head><title>vLLM persona - Swagger UI</title></head><body></body></html>"


def route_exists(method: str, path: str) -> bool:
    for known_method, known in ROUTES:
        if known_method != method:
            continue
        if "{" in known:
            head, _, tail = known.partition("{response_id}")
            middle = path[len(head) : len(path) - len(tail)] if path.startswith(head) and path.endswith(tail) else ""
            if middle and "/" not in middle and len(path) > len(head) + len(tail):
                return True
        elif path == known:
            return True
    return False


def not_simulated(method: str, path: str) -> bool:
    """A route vLLM has that the persona does not act out (labctl never calls it)."""
    return route_exists(method, path) and path not in SIMULATED_PATHS


def is_chat(body: bytes) -> bool:
    """/invocations takes a chat request when the body has messages, else a completion request."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "messages" in data


def tokenize_reply(body: bytes, max_model_len: int) -> dict[str, Any]:
    """/tokenize: the harness's own tokens (labctl/harness/words.py), whose ids /detokenize turns back into text;
    `messages` are joined by spaces. A body it cannot read counts as no text."""
    try:
        data = json.loads(body)
    except ValueError:
        data = {}
    text = data.get("prompt") if isinstance(data, dict) else None
    if not isinstance(text, str) and isinstance(data, dict):
        messages = data.get("messages")
        parts = [m.get("content") for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
        text = " ".join(p for p in parts if isinstance(p, str))
    found = words.pieces(text) if isinstance(text, str) else []
    strs = isinstance(data, dict) and data.get("return_token_strs") is True
    return {
        "count": len(found),
        "max_model_len": max_model_len,
        "tokens": [words.piece_id(p) for p in found],
        "token_strs": found if strs else None,
    }


def detokenize_reply(body: bytes, s: Settings) -> dict[str, Any]:
    """/detokenize: the text of the ids; one the harness could not have made is a 400."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise invalid_body(s, "the request body is not valid JSON", None) from None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        raise invalid_body(s, "'tokens' is required and must be a list of token ids", "tokens")
    try:
        return {"prompt": words.decode(tokens)}
    except ValueError as exc:
        raise HttpError(400, f"tokens{exc}", "tokens") from None


def tokenizer_info_reply(max_model_len: int) -> dict[str, Any]:
    """/tokenizer_info (vLLM's with --enable-tokenizer-info-endpoint): what lm-eval's remote tokenizer reads."""
    return {
        "eos_token": EOS_TOKEN,
        "bos_token": None,
        "pad_token": None,
        "chat_template": None,
        "tokenizer_class": "labctl-harness-words",
        "model_max_length": max_model_len,
    }
