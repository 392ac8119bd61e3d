"""The report's telemetry panels read each level's stored summary: an engine gauge as it is, GPU fields
averaged over the run's GPUs, and nothing invented where a level has no samples."""

from __future__ import annotations

from labctl.compare.plots import TELEMETRY_PANELS, telemetry_value

LEVEL = {
    "concurrency": 4,
    "telemetry": {
        "gpu": {
            "samples": 5,
            "gpus": {
                "0": {"name": "Simulated NVIDIA H100", "utilization_gpu_pct": {"mean": 60.0, "max": 90.0}},
                "1": {"name": "Simulated NVIDIA H100", "utilization_gpu_pct": {"mean": 80.0, "max": 95.0}},
            },
        },
        "engine": {"samples": 5, "running": {"mean": 3.5, "max": 4.0}, "kv_cache_usage": None},
    },
}


def test_gpu_fields_are_averaged_over_the_runs_gpus() -> None:
    assert telemetry_value(LEVEL["telemetry"], ("gpu", "utilization_gpu_pct", "mean")) == 70.0
    assert telemetry_value(LEVEL["telemetry"], ("gpu", "utilization_gpu_pct", "max")) == 92.5


def test_engine_gauges_are_read_as_stored_and_missing_ones_stay_missing() -> None:
    assert telemetry_value(LEVEL["telemetry"], ("engine", "running", "mean")) == 3.5
    assert telemetry_value(LEVEL["telemetry"], ("engine", "kv_cache_usage", "mean")) is None
    assert telemetry_value(LEVEL["telemetry"], ("gpu", "memory_used_mib", "max")) is None


def test_a_level_without_telemetry_gives_no_figure_in_any_panel() -> None:
    bare = {"concurrency": 1}
    assert all(telemetry_value(bare.get("telemetry"), where) is None for _, _, where in TELEMETRY_PANELS)


def test_kv_cache_use_is_a_fraction_in_json_and_a_percentage_for_people() -> None:
    """A real vLLM on a tiny model used 0.4 % of its KV cache: `bench show` printed it as 0.00."""
    from labctl.bench.results import Level
    from labctl.catalog.engine_metrics import COMMON
    from labctl.cli.bench import _level_detail

    assert "kv_cache_usage_fraction" in COMMON
    kv = {"mean": 0.004, "max": 0.0125}
    for name in ("kv_cache_usage_fraction", "kv_cache_usage"):  # a result written before the name said so
        level = {"concurrency": 1, "telemetry": {"engine": {"samples": 3, name: kv}}}
        assert telemetry_value(level["telemetry"], ("engine", "kv_cache_usage_fraction", "mean")) == 0.004
        line = _level_detail(Level(concurrency=1, telemetry=level["telemetry"]))
        assert "KV cache mean 0.4% max 1.2%" in line and "0.00" not in line, line
    assert [unit for title, unit, _ in TELEMETRY_PANELS if "KV" in title] == ["%"]
