"""What each engine persona answers on the routes where engines differ: health, version and info
endpoints, the 401 body, the model list's owner, and /metrics under the engine's own metric names.

Every metric name is the engine's own, read from its source (its folder's engine.yaml `telemetry` says where),
served at the folder's endpoints.metrics (TensorRT-LLM's /prometheus/metrics: its /metrics is JSON iteration
statistics). Values the harness has no notion of (preemptions, prefix-cache hits) are served as zero,
honestly: none happened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labctl.harness import vllm_surface

if TYPE_CHECKING:  # the plain harness image carries no contract code: import Persona for types only
    from labctl.harness.personas import Persona

SGLANG_HEALTH_SLEEP_S = 1.1  # SGLang's /health sleeps 1 s in its loop before it can answer 200
OWNED_BY = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm", "atlas": "atlas"}


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    delay: float = 0.0  # seconds to wait before answering


def _json(status: int, obj: Any, delay: float = 0.0) -> Reply:
    return Reply(status, json.dumps(obj).encode(), delay=delay)


def unauthorized(persona: Persona) -> Reply:
    if persona.engine in ("vllm", "sglang"):
        return _json(401, {"error": "Unauthorized"})  # both engines' key middleware answer exactly this
    return _json(401, {"error": {"message": "Unauthorized: missing or invalid API key", "type": "auth_error"}})


def persona_reply(persona: Persona, path: str, ready: bool, model_max_len: int) -> Reply | None:
    """The persona's answer for an engine-specific GET route, or None when the route is the harness's."""
    engine = persona.engine
    if engine == "sglang":
        if path in ("/health", "/health_generate"):
            # Starting → 503 at once; ready → the 1-token generation loop, which sleeps first.
            return Reply(200, b"", delay=SGLANG_HEALTH_SLEEP_S) if ready else Reply(503, b"")
        if path == "/ready" and persona.has_ready:
            return _json(200, {"status": "ready"}) if ready else _json(503, {"status": "starting"})
        if path in ("/get_server_info", "/server_info"):
            return _json(200, {**persona.server_args, "version": persona.version, "labctl_persona": True})
        if path == "/get_model_info":
            return _json(
                200, {"model_path": persona.model_arg, "tokenizer_path": persona.model_arg, "is_generation": True}
            )
        return None
    if engine == "atlas":
        if path == "/health":
            return _json(200, {"status": "ready", "model": persona.served_names[0]})
        if path == "/health/live":
            return _json(200, {"status": "alive"})
        return None
    # vLLM and TensorRT-LLM: the port opens only once loaded, so /health is 200 whenever it answers.
    if path == "/health":
        return Reply(200, b"")
    if path == "/version":
        return _json(200, {"version": persona.version})
    return None


def models_reply(persona: Persona, created: int, max_model_len: int) -> Reply:
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": OWNED_BY[persona.engine],
            "root": persona.model_arg,
            "parent": None,
            "max_model_len": max_model_len,
        }
        for name in persona.served_names
    ]
    return _json(200, {"object": "list", "data": data})


def _line(name: str, kind: str, value: float, labels: str) -> list[str]:
    return [f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value}"]


def metrics_text(
    persona: Persona, counters: dict[str, int], running: int, waiting: int, max_num_seqs: int, created: float = 0.0
) -> str:
    model = persona.served_names[0]
    usage = round(running / max_num_seqs, 4) if max_num_seqs else 0.0
    engine = persona.engine
    lines: list[str] = []
    if engine == "vllm" and persona.version_tuple() >= (0, 11):
        values = {
            "request_success": counters["requests_success_total"],
            "prompt_tokens": counters["prompt_tokens_total"],
            "generation_tokens": counters["generation_tokens_total"],
            "prefix_cache_queries": counters["prompt_tokens_total"],
            "num_requests_running": running,
            "num_requests_waiting": waiting,
            "kv_cache_usage_perc": usage,
        }
        return vllm_surface.metrics_text(model, values, created, persona.server_args.get("cache_config"))
    if engine == "vllm":
        labels = f'model_name="{model}",engine="0"'
        kv = "vllm:kv_cache_usage_perc" if persona.version_tuple() >= (0, 11) else "vllm:gpu_cache_usage_perc"
        lines += _line(
            "vllm:request_success_total",
            "counter",
            counters["requests_success_total"],
            labels + ',finished_reason="stop"',
        )
        lines += _line("vllm:prompt_tokens_total", "counter", counters["prompt_tokens_total"], labels)
        lines += _line("vllm:generation_tokens_total", "counter", counters["generation_tokens_total"], labels)
        lines += _line("vllm:num_requests_running", "gauge", running, labels)
        lines += _line("vllm:num_requests_waiting", "gauge", waiting, labels)
        lines += _line(kv, "gauge", usage, labels)
        lines += _line("vllm:num_preemptions_total", "counter", 0, labels)
        lines += _line("vllm:prefix_cache_queries_total", "counter", counters["prompt_tokens_total"], labels)
        lines += _line("vllm:prefix_cache_hits_total", "counter", 0, labels)
    elif engine == "sglang":
        labels = f'model_name="{model}"'
        lines += _line("sglang:num_requests_total", "counter", counters["requests_success_total"], labels)
        lines += _line("sglang:prompt_tokens_total", "counter", counters["prompt_tokens_total"], labels)
        lines += _line("sglang:generation_tokens_total", "counter", counters["generation_tokens_total"], labels)
        lines += _line("sglang:num_running_reqs", "gauge", running, labels)
        lines += _line("sglang:num_queue_reqs", "gauge", waiting, labels)
        lines += _line("sglang:token_usage", "gauge", usage, labels)
        lines += _line("sglang:cache_hit_rate", "gauge", 0.0, labels)
        lines += _line("sglang:num_retracted_requests_total", "counter", 0, labels)
    elif engine == "trtllm":
        labels = f'model_name="{model}",engine_type="trtllm"'
        lines += _line(
            "trtllm_request_success_total",
            "counter",
            counters["requests_success_total"],
            labels + ',finished_reason="stop"',
        )
        lines += _line("trtllm_prompt_tokens_total", "counter", counters["prompt_tokens_total"], labels)
        lines += _line("trtllm_generation_tokens_total", "counter", counters["generation_tokens_total"], labels)
        lines += _line("trtllm_num_requests_running", "gauge", running, labels)
        lines += _line("trtllm_num_requests_waiting", "gauge", waiting, labels)
        lines += _line("trtllm_kv_cache_utilization", "gauge", usage, labels)
        lines += _line("trtllm_kv_cache_hit_rate", "gauge", 0.0, labels)
        cache = persona.server_args.get("kv_cache_config") or {}
        lines += _line(
            "trtllm_kv_cache_config_info", "gauge", 1, labels + "".join(f',{k}="{v}"' for k, v in cache.items())
        )
    else:  # Atlas: unlabelled process totals, active requests only (no queue, no KV-cache gauge)
        lines += ["# TYPE atlas_requests_total counter", f"atlas_requests_total {counters['requests_success_total']}"]
        lines += ["# TYPE atlas_requests_active gauge", f"atlas_requests_active {running + waiting}"]
        lines += [
            "# TYPE atlas_prompt_tokens_total counter",
            f"atlas_prompt_tokens_total {counters['prompt_tokens_total']}",
        ]
        lines += [
            "# TYPE atlas_generation_tokens_total counter",
            f"atlas_generation_tokens_total {counters['generation_tokens_total']}",
        ]
        lines += ["# TYPE atlas_prefix_cache_hits_total counter", "atlas_prefix_cache_hits_total 0"]
        lines += ["# TYPE atlas_prefix_cache_hit_rate gauge", "atlas_prefix_cache_hit_rate 0.0000"]
    return "\n".join(lines) + "\n"


def trtllm_iteration_stats() -> Reply:
    """TensorRT-LLM's /metrics: a JSON list of recent iteration statistics (the harness keeps none)."""
    return _json(200, [])
