"""What telemetry sources say, parsed: each engine's own Prometheus names mapped to common ones, a
scrape parsed, and nvidia-smi's query lines read. Pure; the sampler beside it polls the sources.

Where each name was read (search tool, public source):
- vLLM: vllm-project/vllm@005a810b vllm/v1/metrics/loggers.py (PrometheusStatLogger; prometheus_client
  adds `_total` to counters). `vllm:gpu_cache_usage_perc` is the name before 0.9 (renamed there).
- SGLang: sgl-project/sglang@00ae9c15 python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector).
- TensorRT-LLM: NVIDIA/TensorRT-LLM@050f80de tensorrt_llm/metrics/collector.py (MetricsCollector), served
  at /prometheus/metrics by tensorrt_llm/serve/openai_server.py (its /metrics is JSON iteration stats).
  It has no preemption counter.
- Atlas: Avarok-Cybersecurity/atlas@2589a55a crates/spark-server/src/metrics.rs and @0d2cd62e
  crates/spark-server/src/api/misc_handlers.rs (prefix cache). It exports active requests only: no
  waiting queue, no KV-cache usage, no preemptions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# kv_cache_usage_fraction: 0 to 1 as every engine exports it (vLLM's `_perc` is a fraction too); people see %
COMMON = (
    "running",
    "waiting",
    "kv_cache_usage_fraction",
    "preemptions",
    "prefix_cache_hit_rate",
    "generation_tokens",
)
LEGACY_NAMES = {"kv_cache_usage_fraction": "kv_cache_usage"}  # as results written before the rename say it
GPU_FIELDS = ("utilization_gpu_pct", "memory_used_mib", "power_draw_w", "clocks_sm_mhz")
# The nvidia-smi query: one line per GPU, plain numbers ([N/A] where a GPU has none, e.g. GB10 memory).
GPU_QUERY = "index,name,utilization.gpu,memory.used,power.draw,clocks.sm"
MAX_SCRAPE_BYTES = 4 * 1024 * 1024  # vLLM's /metrics with every histogram is ~100 KiB


@dataclass(frozen=True)
class Source:
    """One engine metric feeding a common one. `per` names a second counter: the common value is
    the ratio of their increases (vLLM's prefix-cache hits per queried token)."""

    metric: str
    kind: str  # gauge | counter
    per: str | None = None


_VLLM = "vllm-project/vllm@005a810b vllm/v1/metrics/loggers.py"
_SGLANG = "sgl-project/sglang@00ae9c15 python/sglang/srt/metrics/collector.py"
_TRTLLM = "NVIDIA/TensorRT-LLM@050f80de tensorrt_llm/metrics/collector.py"
_ATLAS = "Avarok-Cybersecurity/atlas@2589a55a crates/spark-server/src/metrics.rs, @0d2cd62e api/misc_handlers.rs"

# engine -> common name -> candidates, first present wins
ENGINE_METRICS: dict[str, dict[str, tuple[Source, ...]]] = {
    "vllm": {
        "running": (Source("vllm:num_requests_running", "gauge"),),
        "waiting": (Source("vllm:num_requests_waiting", "gauge"),),
        "kv_cache_usage_fraction": (
            Source("vllm:kv_cache_usage_perc", "gauge"),
            Source("vllm:gpu_cache_usage_perc", "gauge"),
        ),
        "preemptions": (Source("vllm:num_preemptions_total", "counter"),),
        "prefix_cache_hit_rate": (
            Source("vllm:prefix_cache_hits_total", "counter", per="vllm:prefix_cache_queries_total"),
            Source("vllm:gpu_prefix_cache_hit_rate", "gauge"),
        ),
        "generation_tokens": (Source("vllm:generation_tokens_total", "counter"),),
    },
    "sglang": {
        "running": (Source("sglang:num_running_reqs", "gauge"),),
        "waiting": (Source("sglang:num_queue_reqs", "gauge"),),
        "kv_cache_usage_fraction": (Source("sglang:token_usage", "gauge"),),
        "preemptions": (Source("sglang:num_retracted_requests_total", "counter"),),
        "prefix_cache_hit_rate": (Source("sglang:cache_hit_rate", "gauge"),),
        "generation_tokens": (Source("sglang:generation_tokens_total", "counter"),),
    },
    "trtllm": {
        "running": (Source("trtllm_num_requests_running", "gauge"),),
        "waiting": (Source("trtllm_num_requests_waiting", "gauge"),),
        "kv_cache_usage_fraction": (Source("trtllm_kv_cache_utilization", "gauge"),),
        "preemptions": (),
        "prefix_cache_hit_rate": (Source("trtllm_kv_cache_hit_rate", "gauge"),),
        "generation_tokens": (Source("trtllm_generation_tokens_total", "counter"),),
    },
    "atlas": {
        "running": (Source("atlas_requests_active", "gauge"),),
        "waiting": (),
        "kv_cache_usage_fraction": (),
        "preemptions": (),
        "prefix_cache_hit_rate": (Source("atlas_prefix_cache_hit_rate", "gauge"),),
        "generation_tokens": (Source("atlas_generation_tokens_total", "counter"),),
    },
    "harness": {  # labctl's own engine without a persona
        "running": (Source("harness_num_requests_running", "gauge"),),
        "waiting": (Source("harness_num_requests_waiting", "gauge"),),
        "kv_cache_usage_fraction": (),
        "preemptions": (),
        "prefix_cache_hit_rate": (),
        "generation_tokens": (Source("harness_generation_tokens_total", "counter"),),
    },
}
MAPPING_SOURCES = {"vllm": _VLLM, "sglang": _SGLANG, "trtllm": _TRTLLM, "atlas": _ATLAS, "harness": "labctl"}
METRICS_PATHS = {"trtllm": "/prometheus/metrics"}  # every other engine: /metrics
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+\S+)?\Z")


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value summed over its label sets (engines label by model and, with data
    parallelism, by engine index: the sum is the server's total). Histogram series are skipped."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name = match.group(1)
        if name.endswith(("_bucket", "_sum", "_count", "_created")):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            values[name] = values.get(name, 0.0) + value
    return values


def engine_of(values: dict[str, float], hint: str | None) -> str | None:
    """The engine whose names this scrape carries: the run's engine when it matches, else by prefix
    (an endpoint labctl did not start, or the harness engine wearing a persona)."""
    if hint in ENGINE_METRICS and any(s.metric in values for c in ENGINE_METRICS[hint].values() for s in c):
        return hint
    for engine, table in ENGINE_METRICS.items():
        if any(s.metric in values for candidates in table.values() for s in candidates):
            return engine
    return None


def map_metrics(engine: str, values: dict[str, float]) -> dict[str, float]:
    """One scrape under the common names. A ratio source keeps both counters (`NAME.num`, `NAME.den`)
    so the summary can divide their increases over a level."""
    out: dict[str, float] = {}
    for common, candidates in ENGINE_METRICS[engine].items():
        for source in candidates:
            if source.metric not in values:
                continue
            if source.per is not None:
                if source.per not in values:
                    continue
                out[f"{common}.num"], out[f"{common}.den"] = values[source.metric], values[source.per]
            else:
                out[common] = values[source.metric]
            break
    return out


def mapping_used(engine: str, values: dict[str, float]) -> dict[str, str | None]:
    """Common name -> the engine's own name it came from (None: the engine does not export it)."""
    used: dict[str, str | None] = {}
    for common, candidates in ENGINE_METRICS[engine].items():
        found = next((s for s in candidates if s.metric in values and (s.per is None or s.per in values)), None)
        used[common] = None if found is None else (found.metric + (f" / {found.per}" if found.per else ""))
    return used


def kind_of(engine: str, common: str, values: dict[str, float]) -> str | None:
    for source in ENGINE_METRICS[engine].get(common, ()):
        if source.metric in values:
            return "ratio" if source.per else source.kind
    return None


def parse_gpu_lines(text: str) -> list[dict[str, Any]]:
    """nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits -> one dict per GPU;
    [N/A] (or anything not a number) becomes None."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6 or not parts[0].isdigit():
            continue
        row: dict[str, Any] = {"index": parts[0], "name": parts[1][:96], "simulated": parts[1].startswith("Simulated ")}
        for key, raw in zip(GPU_FIELDS, parts[2:], strict=True):
            try:
                number = float(raw)
            except ValueError:
                number = math.nan
            row[key] = number if math.isfinite(number) else None
        rows.append(row)
    return rows
