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
    assert telemetry_value(LEVEL, ("gpu", "utilization_gpu_pct", "mean")) == 70.0
    assert telemetry_value(LEVEL, ("gpu", "utilization_gpu_pct", "max")) == 92.5


def test_engine_gauges_are_read_as_stored_and_missing_ones_stay_missing() -> None:
    assert telemetry_value(LEVEL, ("engine", "running", "mean")) == 3.5
    assert telemetry_value(LEVEL, ("engine", "kv_cache_usage", "mean")) is None
    assert telemetry_value(LEVEL, ("gpu", "memory_used_mib", "max")) is None


def test_a_level_without_telemetry_gives_no_figure_in_any_panel() -> None:
    bare = {"concurrency": 1}
    assert all(telemetry_value(bare, where) is None for _, _, where in TELEMETRY_PANELS)
