"""A study's waste figure (issue 37, item 4): GPU time that is neither measuring nor the engine's own cold start
(waiting for claims and pulls, and what `up` spent beyond the engine), per GPU, as a share of the study's."""

from __future__ import annotations

from labctl.study.report import gpu_hours


def cell(gpus: int, measuring: float, cold: float, engine_cold: float | None, waiting: float) -> dict[str, object]:
    times: dict[str, float] = {"measuring_s": measuring, "cold_start_s": cold, "waiting_s": waiting}
    if engine_cold is not None:
        times["engine_cold_start_s"] = engine_cold
    return {"gpus": gpus, "times": times}


def test_the_waste_is_waiting_and_up_beyond_the_engine_per_gpu() -> None:
    lines = gpu_hours([cell(2, 3000, 400, 360, 100), cell(1, 3000, 300, 300, 0)])
    # 2 × (100 waiting + 40 beyond) = 280 s of 2 × 3500 + 3300 = 10,300 GPU-seconds
    assert lines[1] == (
        "waste (neither measuring nor the engine's own cold start): 0.0778 GPU-hours, 2.7% of the study's "
        "(waiting 0.0556, up beyond the engine 0.0222; the goal is under 5 %)"
    )


def test_a_cell_without_the_engines_own_cold_start_is_not_checked() -> None:
    lines = gpu_hours([cell(1, 3000, 300, None, 0)])
    assert lines[1].endswith("not checked (a cell's record has no engine cold start)")
