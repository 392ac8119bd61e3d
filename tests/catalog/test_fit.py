"""Memory fit before start: the shipped profiles fit their targets; `up` refuses what the chosen GPUs'
free memory cannot hold, with the numbers and the ways out, unless --allow-unfit."""

from __future__ import annotations

import pytest
from helpers.support import REPO

from labctl.catalog.fit import default_target, fit
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.compose.contract_check import with_gpus
from labctl.errors import BadInput
from labctl.host.gpus.inventory import Gpu
from labctl.run.lifecycle.preflight import check_memory_fit

LAB = Lab(REPO)
QWEN3 = [("vllm", "qwen3-32b"), ("sglang", "qwen3-32b"), ("trtllm", "qwen3-32b"), ("trtllm", "qwen3-32b-engine")]


def h100(index: str, free_mib: int) -> Gpu:
    return Gpu(
        index,
        "Simulated NVIDIA H100 80GB HBM3",
        f"GPU-{index}",
        "580.95.05",
        f"{81559 - free_mib} MiB",
        "81559 MiB",
        f"{free_mib} MiB",
    )


@pytest.mark.parametrize(("engine", "name"), QWEN3)
def test_shipped_qwen3_profiles_fit_two_h100s(engine: str, name: str) -> None:
    profile = load_profile(LAB, engine, name)
    estimate = fit(profile, default_target(profile))
    assert estimate is not None and estimate.fits and profile.gpu_count == 2


def test_bf16_qwen3_32b_at_32k_does_not_fit_one_h100_under_sglang() -> None:
    profile = with_gpus(load_profile(LAB, "sglang", "qwen3-32b"), 1)
    estimate = fit(profile, default_target(profile))
    assert estimate is not None and not estimate.fits
    ways = " ".join(estimate.ways_out())
    assert "2 GPUs" in ways or "tensor parallel" in ways
    assert "FP8" in ways and "max_model_len" in ways


def test_up_refuses_when_free_memory_is_too_small_unless_allowed() -> None:
    profile = load_profile(LAB, "vllm", "qwen3-32b")
    held = [h100("0", 20_000), h100("1", 81_559)]  # another process holds 60 GB of GPU 0
    with pytest.raises(BadInput) as caught:
        check_memory_fit(profile, held, None, allow_unfit=False)
    message = str(caught.value)
    assert "does not fit the free memory of GPU(s) 0,1" in message and "--allow-unfit" in message
    assert "ways out:" in message
    allowed = check_memory_fit(profile, held, None, allow_unfit=True)
    assert allowed is not None and not allowed.fits and allowed.allowed_unfit
    free = check_memory_fit(profile, [h100("0", 81_559), h100("1", 81_559)], None, allow_unfit=False)
    assert free is not None and free.fits and free.gpu_memory_gib == pytest.approx(79.6, abs=0.1)
