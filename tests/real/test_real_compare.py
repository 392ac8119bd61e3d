"""Two real setups side by side: tiny-qwen3 with vLLM's prefix caching on (its default) and off, benchmarked
on the shared-prefix workload; compare puts them in one table, and the engine's own counter shows the difference."""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator

import pytest
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
    # One cold start after the other: two at once put four OMP threads bound to the same two cores beside the
    # other tiers, and both starts took over 420 s in CI; one after the other costs a single cold start more.
    on = real.up(ON)
    return on, real.up(OFF)


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
    refused = real.labctl("compare", *benches)  # prefix caching is a same-rules field
    assert refused.code == 2 and "not measured under the same rules (prefix caching)" in refused.stderr
    compared = real.labctl("compare", *benches, "--allow-mismatch")
    assert compared.code == 0, compared.stderr
    assert "✗ prefix caching" in compared.stdout, compared.stdout[:2000]
    assert "✓ accelerator: cpu" in compared.stdout, compared.stdout[:2000]
    assert "TTFT p50" in compared.stdout


def distinct_workload(real: RealLab) -> str:
    """A jsonl workload of 40 prompts of about 600 tokens, none like another from its first words on, and unlike
    every other test's: levels c=2 and c=3 (6 measured and 1 warm-up request per stream) send 35 of them."""
    rng = random.Random(20261206)
    words = [f"{rng.choice('bcdfghklmnprstvz')}{rng.choice('aeiou')}{rng.choice('lmnrst')}" for _ in range(400)]
    salt = uuid.uuid4().hex[:8]
    data = real.lab / "workloads" / "data"
    data.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"prompt": f"case {salt}-{i}: " + " ".join(rng.choice(words) for _ in range(450))})
        for i in range(40)
    ]
    (data / f"distinct-{salt}.jsonl").write_text("\n".join(lines) + "\n")
    name = f"distinct-{salt}"
    (real.lab / "workloads" / f"{name}.yaml").write_text(
        f"description: distinct prompts, two levels\ndataset: {{kind: jsonl, path: data/distinct-{salt}.jsonl}}\n"
        "requests_per_concurrency: 6\nwarmup_per_concurrency: 1\nconcurrency: [2, 3]\nmax_tokens: 8\n"
        "ignore_eos: true\ntemperature: 0.0\nseed: 0\nendpoint: chat\nstream: true\n"
    )
    return name


def level_hits(real: RealLab, run_id: str, stdout: str) -> list[float]:
    bench_id = re.search(r"bench (b\S+) \(", stdout)
    assert bench_id, stdout
    result = json.loads((real.home / "runs" / run_id / "bench" / f"{bench_id.group(1)}.json").read_text())
    return [100.0 * lv["telemetry"]["engine"]["prefix_cache_hit_rate"]["mean"] for lv in result["levels"]]


def test_no_prompt_reaches_the_prefix_cache_twice_and_a_second_run_of_the_same_prompts_is_caught(
    real: RealLab, pair: tuple[dict[str, str], dict[str, str]]
) -> None:
    on = pair[0]
    base = on["base_url"].removesuffix("/v1")
    name = distinct_workload(real)
    before = metric(base, "vllm:prefix_cache_hits_total", absent=0)
    first = real.labctl("bench", "run", on["run_id"], "--workload", name)
    assert first.code == 0, first.stderr
    assert "PREFIX CACHE HITS" not in first.stderr + first.stdout
    protected = level_hits(real, on["run_id"], first.stdout + first.stderr)
    assert all(rate <= 1.0 for rate in protected), protected  # levels and warm-ups take their own prompts
    assert metric(base, "vllm:prefix_cache_hits_total", absent=0) - before < 0.01 * 35 * 600
    again = real.labctl("bench", "run", on["run_id"], "--workload", name)  # the same prompts, a second time
    assert again.code == 0, again.stderr
    assert "PREFIX CACHE HITS" in again.stderr + again.stdout
    repeated = level_hits(real, on["run_id"], again.stdout + again.stderr)
    assert all(rate > 50.0 for rate in repeated), repeated  # the engine's own counters say it served them
    print(f"prefix-cache hits per level: first run {protected}, the same prompts again {repeated}")
