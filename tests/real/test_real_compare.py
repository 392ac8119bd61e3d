"""Two real setups side by side: tiny-qwen3 with vLLM's prefix caching on (its default) and off, benchmarked
on the shared-prefix workload; compare puts them in one table, and the engine's own counter shows the difference."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.harness_proc import free_port
from helpers.real_engine import RealLab, metric, real_lab

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

ON, OFF = "tiny-qwen3", "tiny-qwen3-no-prefix-cache"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLab]:
    lab = real_lab(tmp_path_factory.mktemp("real-compare"))
    lab.add_profile(OFF, extra_args=["--no-enable-prefix-caching"], description="tiny-qwen3 without prefix caching")
    yield lab
    lab.down_all()


@pytest.fixture(scope="module")
def pair(real: RealLab) -> tuple[dict[str, str], dict[str, str]]:
    ports = {free_port()}
    while len(ports) < 2:  # nothing listens yet: each pick alone could return the same port
        ports.add(free_port())
    with ThreadPoolExecutor(2) as pool:  # both cold starts at once: the module pays about one
        on, off = pool.map(lambda profile, port: real.up(profile, port=port), (ON, OFF), sorted(ports))
    return on, off


def test_prefix_caching_on_and_off_compare_and_the_engine_counts_the_hits(
    real: RealLab, pair: tuple[dict[str, str], dict[str, str]]
) -> None:
    benches = []
    for info in pair:
        done = real.labctl(
            "bench", "run", info["run_id"], "--workload", "shared-prefix", "--concurrency", "4", "--requests", "16"
        )
        assert done.code == 0, done.stderr
        [result] = (real.home / "runs" / info["run_id"] / "bench").glob("b*.json")
        benches.append(json.loads(result.read_text())["bench_id"])
    on, off = (info["base_url"].removesuffix("/v1") for info in pair)
    assert metric(on, "vllm:prefix_cache_hits_total") > 0
    assert metric(off, "vllm:prefix_cache_hits_total", absent=0) == 0
    compared = real.labctl("compare", *benches)
    assert compared.code == 0, compared.stderr
    assert "✓ accelerator: cpu" in compared.stdout, compared.stdout[:2000]
    assert "TTFT p50" in compared.stdout
