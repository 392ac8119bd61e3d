"""Gauges right under data parallelism, on the real vLLM: two engine ranks (--data-parallel-size 2, one core
each) export their KV-cache share side by side (engine="0", engine="1"). Under load each rank's share is near
1, so adding them up (what labctl did before) would read about 1.7; labctl's telemetry averages a share over
the ranks, keeps the busiest rank beside it, and says how many ranks it saw. The samples go through the
functions the bench's sampler uses (parse_prometheus, map_metrics, summarise_engine)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from helpers.harness_proc import free_port
from helpers.real_engine import IMAGE, TINY_MODELS, need_image
from helpers.support import REPO

from labctl.bench.telemetry import summarise_engine
from labctl.catalog.engine_metrics import engine_of, kind_of, map_metrics, parse_prometheus
from labctl.catalog.engines import lab_telemetry
from labctl.catalog.lab import Lab

# Exclusive: alone at the end of make test. Both ranks and the API servers share this machine's two cores; with
# the other tiers running beside it, vLLM's /metrics answered only after the load had ended (one scrape).
pytestmark = [pytest.mark.docker, pytest.mark.real_engine, pytest.mark.exclusive]

SHARE = "kv_cache_usage_fraction"


@pytest.fixture(scope="module")
def two_ranks() -> Iterator[str]:
    """vLLM's own server with two data-parallel engine ranks, each KV cache 24 blocks: a few requests fill it."""
    need_image()
    model = TINY_MODELS / "tiny-qwen3"
    if not model.is_dir():
        pytest.fail(f"{model} is absent: make tiny-models", pytrace=False)
    port = free_port()
    name = f"labctl-test-dp-{port}"
    subprocess.run(
        [
            *("docker", "run", "-d", "--name", name, "--network", "host", "--cpuset-cpus", "0-1", "--shm-size", "1g"),
            *("-e", "VLLM_CPU_KVCACHE_SPACE=1", "-e", "VLLM_CPU_OMP_THREADS_BIND=0|1", "-e", "HF_HUB_OFFLINE=1"),
            *("-v", f"{model}:/model:ro", "--entrypoint", "vllm", IMAGE, "serve", "/model"),
            *("--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024"),
            *("--enforce-eager", "--data-parallel-size", "2", "--num-gpu-blocks-override", "24"),
            # float32: in bf16 vLLM 0.32's CPU attention takes its AMX kernel, and a data-parallel rank's worker
            # dies of SIGILL on its first request where the CPU has AMX (a single rank does not).
            *("--dtype", "float32"),
        ],
        check=True,
        capture_output=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        serving(base, name, time.monotonic() + 600)
        yield base
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def complete(base: str, prompt: str, max_tokens: int) -> None:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True})
    headers = {"content-type": "application/json"}
    urllib.request.urlopen(urllib.request.Request(f"{base}/v1/completions", body.encode(), headers), timeout=600).read()


def serving(base: str, name: str, deadline: float) -> None:
    """Ready means a completion answered (as labctl's own readiness says): /v1/models answers before both
    ranks serve. A container that stopped fails at once, with its log."""
    while True:
        try:
            complete(base, "ready?", 2)
            return
        except OSError as exc:
            state = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True
            )
            if state.stdout.strip() != "true" or time.monotonic() > deadline:
                logs = subprocess.run(["docker", "logs", "--tail", "40", name], capture_output=True, text=True)
                pytest.fail(f"vLLM with two ranks answered no completion ({exc}):\n{logs.stdout}{logs.stderr}")
            time.sleep(2)


def test_the_kv_cache_share_of_two_ranks_is_averaged_and_reads_at_most_one(two_ranks: str) -> None:
    tables = lab_telemetry(Lab(REPO)).names
    words = " ".join(["alpha beta gamma delta"] * 40)

    failures: list[str] = []

    def request(i: int) -> None:
        try:
            complete(two_ranks, f"{i} {words}", 600)
        except OSError as exc:
            failures.append(f"request {i}: {exc}")

    samples, raw, summed = [], {}, []
    started = time.monotonic()
    # How full each rank gets depends on how vLLM spreads the requests: a round whose ranks never held more
    # than one cache's worth together shows nothing a sum would get wrong, so the load comes again (3 rounds).
    for round_ in range(3):
        load = [threading.Thread(target=request, args=(100 * round_ + i,)) for i in range(24)]
        for thread in load:
            thread.start()
        begun = time.monotonic()
        while any(thread.is_alive() for thread in load) and time.monotonic() - begun < 300:
            text = urllib.request.urlopen(f"{two_ranks}/metrics", timeout=10).read().decode()
            raw = parse_prometheus(text)
            engine = engine_of(raw, "vllm-cpu", tables)  # as the sampler finds whose names these are
            assert engine == "vllm", engine
            names = tables[engine]
            ranks = [
                float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:kv_cache_usage_perc{")
            ]
            summed.append(sum(ranks))
            samples.append({"t": time.monotonic(), "values": map_metrics(names, raw)})
            time.sleep(0.3)
        for thread in load:
            thread.join(timeout=60)
        if max(summed) > 1.0:
            break
    assert not failures, failures
    assert len(samples) >= 3, f"the load ended after {len(samples)} scrape(s)"
    names = tables["vllm"]
    assert kind_of(names, SHARE, raw) == "fraction"
    summary = summarise_engine(samples, {SHARE: "fraction"}, [(started, time.monotonic())])[SHARE]
    assert summary["ranks"] == 2, summary
    assert max(summed) > 1.0, summed  # what a sum over the ranks would have said
    assert 0.0 < summary["mean"] <= summary["max"] <= 1.0 and summary["rank_max"] <= 1.0, summary
    print(f"two ranks: summed at most {max(summed):.2f}; labctl reads mean {summary['mean']:.2f}, "
          f"max {summary['max']:.2f}, busiest rank {summary['rank_max']:.2f}")  # fmt: skip
