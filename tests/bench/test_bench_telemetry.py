"""Telemetry's pure parts: each engine's own metric names mapped to the common ones, the personas
serving names the mapping knows, nvidia-smi's query lines, and the per-level summary."""

from __future__ import annotations

import pytest
from helpers.support import REPO

from labctl.bench.telemetry import summarise_engine, summarise_gpus
from labctl.catalog import engine_metrics
from labctl.catalog.engine_metrics import COMMON, parse_gpu_lines, parse_prometheus
from labctl.catalog.engines import lab_telemetry
from labctl.catalog.lab import Lab
from labctl.harness.personas import Persona

ENGINE_METRICS = lab_telemetry(Lab(REPO)).names  # each shipped engine's folder states its names


def engine_of(values: dict[str, float], hint: str | None) -> str | None:
    return engine_metrics.engine_of(values, hint, ENGINE_METRICS)


def map_metrics(engine: str, values: dict[str, float]) -> dict[str, float]:
    return engine_metrics.map_metrics(ENGINE_METRICS[engine], values)


def mapping_used(engine: str, values: dict[str, float]) -> dict[str, str | None]:
    return engine_metrics.mapping_used(ENGINE_METRICS[engine], values)


# Scrapes shaped like each engine's own /metrics (names from the sources catalog/engine_metrics.py cites).
VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3.0
vllm:num_requests_running{engine="1",model_name="qwen"} 2.0
vllm:num_requests_waiting{engine="0",model_name="qwen"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
vllm:num_preemptions_total{engine="0",model_name="qwen"} 4.0
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 250.0
vllm:generation_tokens_total{engine="0",model_name="qwen"} 5000.0
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="qwen"} 0.0
vllm:time_to_first_token_seconds_sum{model_name="qwen"} 1.5
"""
SGLANG = """sglang:num_running_reqs{model_name="q"} 7
sglang:num_queue_reqs{model_name="q"} 2
sglang:token_usage{model_name="q"} 0.5
sglang:cache_hit_rate{model_name="q"} 0.125
sglang:num_retracted_requests_total{model_name="q"} 1
sglang:generation_tokens_total{model_name="q"} 99
"""
TRTLLM = """trtllm_num_requests_running{model_name="q",engine_type="trtllm"} 6.0
trtllm_num_requests_waiting{model_name="q",engine_type="trtllm"} 0.0
trtllm_kv_cache_utilization{model_name="q",engine_type="trtllm"} 0.75
trtllm_kv_cache_hit_rate{model_name="q",engine_type="trtllm"} 0.1
trtllm_generation_tokens_total{model_name="q",engine_type="trtllm"} 10.0
"""
ATLAS = """atlas_requests_active 2
atlas_generation_tokens_total 42
atlas_prefix_cache_hit_rate 0.3000
"""


def test_prometheus_text_keeps_each_label_set_and_its_type_and_skips_histograms() -> None:
    values = parse_prometheus(VLLM + "garbage line without value\nbad{ 1\nvllm:x NaN\n")
    assert values["vllm:num_requests_running"].values == (3.0, 2.0)
    assert values["vllm:num_requests_running"].type == "gauge" and values["vllm:num_requests_waiting"].type is None
    assert values["vllm:num_requests_running"].total == 5.0
    assert not any(name.endswith(("_bucket", "_sum")) for name in values)
    assert "vllm:x" not in values


# Two data-parallel ranks of one vLLM server, as its PrometheusStatLogger labels them (engine="0", "1").
TWO_RANKS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 4.0
vllm:num_requests_running{engine="1",model_name="qwen"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 1.0
vllm:num_requests_waiting{engine="1",model_name="qwen"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.6
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.7
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="qwen"} 2.0
vllm:num_preemptions_total{engine="1",model_name="qwen"} 5.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 100.0
vllm:prefix_cache_queries_total{engine="1",model_name="qwen"} 300.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 10.0
vllm:prefix_cache_hits_total{engine="1",model_name="qwen"} 30.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="qwen"} 500.0
"""


def test_two_ranks_average_their_kv_cache_share_and_sum_their_counts_and_counters() -> None:
    mapped = map_metrics("vllm", parse_prometheus(TWO_RANKS))
    assert mapped["kv_cache_usage_fraction"] == pytest.approx(0.65)  # not 1.3
    assert mapped["kv_cache_usage_fraction.rank_max"] == pytest.approx(0.7)
    assert mapped["kv_cache_usage_fraction.ranks"] == 2
    assert mapped["running"] == 7 and mapped["waiting"] == 3  # requests: the server's total
    assert mapped["preemptions"] == 7 and mapped["generation_tokens"] == 1500
    assert (mapped["prefix_cache_hit_rate.num"], mapped["prefix_cache_hit_rate.den"]) == (40.0, 400.0)


def test_a_level_of_two_ranks_keeps_the_busiest_rank_beside_the_average() -> None:
    from labctl.bench.results import Level
    from labctl.cli.bench import _level_detail

    later = TWO_RANKS.replace('{engine="1",model_name="qwen"} 0.7', '{engine="1",model_name="qwen"} 0.9')
    samples = [
        {"t": float(t), "values": map_metrics("vllm", parse_prometheus(text))}
        for t, text in enumerate((TWO_RANKS, later))
    ]
    kinds = {"kv_cache_usage_fraction": "fraction", "running": "gauge", "preemptions": "counter"}
    summary = summarise_engine(samples, kinds, [(0.0, 1.0)])
    kv = summary["kv_cache_usage_fraction"]
    assert kv["mean"] == pytest.approx(0.7) and kv["max"] == pytest.approx(0.75)
    assert kv["rank_max"] == pytest.approx(0.9) and kv["ranks"] == 2
    assert summary["running"] == {"mean": 7.0, "max": 7.0}
    line = _level_detail(Level(concurrency=8, telemetry={"engine": summary}))
    assert "KV cache mean 70.0% max 75.0% (busiest of 2 ranks max 90.0%)" in line, line


def test_a_counter_by_its_type_line_is_summed_whatever_the_folder_says() -> None:
    names = {"kv_cache_usage_fraction": (engine_metrics.Source("x_share", "fraction"),)}
    summed = parse_prometheus('# TYPE x_share counter\nx_share{rank="0"} 2\nx_share{rank="1"} 3\n')
    assert engine_metrics.map_metrics(names, summed) == {"kv_cache_usage_fraction": 5.0}
    assert engine_metrics.kind_of(names, "kv_cache_usage_fraction", summed) == "counter"
    averaged = parse_prometheus('x_share{rank="0"} 0.2\nx_share{rank="1"} 0.4\n')  # no TYPE line: the folder's kind
    assert engine_metrics.map_metrics(names, averaged)["kv_cache_usage_fraction"] == pytest.approx(0.3)


@pytest.mark.parametrize(
    "engine, text, expected",
    [
        (
            "vllm",
            VLLM,
            {"running": 5, "waiting": 1, "kv_cache_usage_fraction": 0.25, "preemptions": 4, "generation_tokens": 5000},
        ),
        (
            "sglang",
            SGLANG,
            {
                "running": 7,
                "waiting": 2,
                "kv_cache_usage_fraction": 0.5,
                "prefix_cache_hit_rate": 0.125,
                "preemptions": 1,
            },
        ),
        ("trtllm", TRTLLM, {"running": 6, "waiting": 0, "kv_cache_usage_fraction": 0.75, "prefix_cache_hit_rate": 0.1}),
        ("atlas", ATLAS, {"running": 2, "generation_tokens": 42, "prefix_cache_hit_rate": 0.3}),
    ],
)
def test_each_engines_own_names_map_to_the_common_ones(engine: str, text: str, expected: dict[str, float]) -> None:
    values = parse_prometheus(text)
    assert engine_of(values, None) == engine and engine_of(values, "external") == engine
    mapped = map_metrics(engine, values)
    for common, value in expected.items():
        assert mapped[common] == pytest.approx(value), common
    assert set(mapping_used(engine, values)) == set(COMMON)


def test_vllm_prefix_hit_rate_is_the_ratio_of_its_counters_over_a_level() -> None:
    samples = [
        {"t": 0.0, "values": {"prefix_cache_hit_rate.num": 100.0, "prefix_cache_hit_rate.den": 1000.0}},
        {"t": 1.0, "values": {"prefix_cache_hit_rate.num": 400.0, "prefix_cache_hit_rate.den": 2000.0}},
        {"t": 9.0, "values": {"prefix_cache_hit_rate.num": 900.0, "prefix_cache_hit_rate.den": 9000.0}},
    ]
    summary = summarise_engine(samples, {"prefix_cache_hit_rate": "ratio"}, [(0.0, 1.5)])
    assert summary["prefix_cache_hit_rate"]["mean"] == pytest.approx(0.3)
    assert summary["samples"] == 2


def test_a_level_shorter_than_the_scrape_interval_reads_the_samples_that_bracket_it() -> None:
    samples = [  # the bench's marks before and after the level, and the loop's one sample inside it
        {"t": 5.0, "values": {"prefix_cache_hit_rate.num": 0.0, "prefix_cache_hit_rate.den": 100.0}},
        {"t": 5.2, "values": {"prefix_cache_hit_rate.num": 50.0, "prefix_cache_hit_rate.den": 200.0}},
        {"t": 6.1, "values": {"prefix_cache_hit_rate.num": 100.0, "prefix_cache_hit_rate.den": 400.0}},
        {"t": 0.0, "values": {"prefix_cache_hit_rate.num": 0.0, "prefix_cache_hit_rate.den": 0.0}},  # out of order
    ]
    summary = summarise_engine(samples, {"prefix_cache_hit_rate": "ratio"}, [(5.1, 6.0)])
    assert summary["prefix_cache_hit_rate"]["mean"] == pytest.approx(100.0 / 300.0)
    assert summary["samples"] == 1
    assert (
        summarise_engine(samples[:2], {"prefix_cache_hit_rate": "ratio"}, [(5.1, 6.0)])["prefix_cache_hit_rate"] is None
    )


def test_gauges_give_mean_and_max_and_counters_their_increase_per_window() -> None:
    samples = [{"t": float(t), "values": {"running": float(t), "generation_tokens": 10.0 * t}} for t in range(10)]
    kinds = {"running": "gauge", "generation_tokens": "counter"}
    summary = summarise_engine(samples, kinds, [(0.0, 2.0), (5.0, 7.0)])
    assert summary["running"] == {"mean": pytest.approx(3.5), "max": 7.0}
    assert summary["generation_tokens"] == {"increase": 40.0, "per_s": 10.0}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "atlas"])
def test_every_persona_serves_names_the_mapping_reads(engine: str) -> None:
    from labctl.harness.persona_http import metrics_text

    persona = Persona(engine, "0.34.0" if engine == "vllm" else "1.0.0", "org/m", ["m"])
    counters = {"requests_success_total": 3, "prompt_tokens_total": 30, "generation_tokens_total": 60}
    values = parse_prometheus(metrics_text(persona, counters, running=2, waiting=1, max_num_seqs=8))
    assert engine_of(values, engine) == engine
    mapped = map_metrics(engine, values)
    active = 2 + (1 if engine == "atlas" else 0)  # Atlas counts a request active from arrival: queued too
    assert mapped["running"] == active and mapped["generation_tokens"] == 60
    exported = {c for c, candidates in ENGINE_METRICS[engine].items() if candidates}
    assert {c.split(".")[0] for c in mapped} == exported


def test_nvidia_smi_query_lines_and_their_summary() -> None:
    text = (
        "0, Simulated NVIDIA H100 80GB HBM3, 0, 0, 69.50, 1980\n"
        "1, Simulated NVIDIA GB10, 35, [N/A], 20.00, 2400\n"
        "not a gpu line\n"
    )
    rows = parse_gpu_lines(text)
    assert [r["index"] for r in rows] == ["0", "1"] and all(r["simulated"] for r in rows)
    assert rows[1]["memory_used_mib"] is None and rows[1]["utilization_gpu_pct"] == 35.0
    summary = summarise_gpus([{"t": 1.0, "gpus": rows}, {"t": 2.0, "gpus": rows}, {"t": 5.0, "gpus": []}], [(0, 3)])
    assert summary["samples"] == 2
    assert summary["gpus"]["0"]["power_draw_w"] == {"mean": 69.5, "max": 69.5}
    assert summary["gpus"]["1"]["memory_used_mib"] is None
