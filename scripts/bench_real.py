"""make bench-real: does labctl's bench measure a real server as vLLM's own client does?

One real `vllm serve` (the vLLM CPU image, the tiny Qwen3 from build/tiny-models) pinned to one core;
labctl's `bench run --base-url` and `vllm bench serve` (from the same image) pinned to the other, take
turns against it (prefix caching off: both send the same seeded prompts on every repeat) with the same lengths (random prompts of 128 tokens, 64 output tokens, ignore_eos, the
model's own tokenizer) at each concurrency, a few repeats, the order swapped on every repeat so that
drift falls on both. It prints the medians of the repeats side by side, and each repeat's pair as a ratio
labctl / vllm: the median of the pairs' ratios and a Student-t 95 % interval over the pairs (n pairs).
Then TTFT against the engine's own histogram (vllm:time_to_first_token_seconds, read from /metrics before and
after each client's run): each client's mean TTFT minus the engine's mean over the same requests is where
that client starts its clock and reads the first token, so the two offsets explain the TTFT ratio.
Raw results stay in build/bench-real/.

Options (environment): LABCTL_VLLM_CPU_IMAGE, LABCTL_TINY_MODELS, BENCH_REAL_PORT,
BENCH_REAL_CONCURRENCY (1,4,16), BENCH_REAL_REPEATS (5), BENCH_REAL_SERVER_CPU (0),
BENCH_REAL_CLIENT_CPU (1)."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("LABCTL_VLLM_CPU_IMAGE", "labctl/vllm-cpu:0.32.0")
MODELS = Path(os.environ.get("LABCTL_TINY_MODELS", REPO / "build" / "tiny-models")).resolve()
OUT = REPO / "build" / "bench-real"
MODEL = "tiny-qwen3"
INPUT_LEN, OUTPUT_LEN = 128, 64
WARMUP_PER_STREAM = 3  # the latency-probe workload's warm-up; vllm bench serve gets as many
METRICS = (("TTFT ms", "median_ttft_ms"), ("TPOT ms", "median_tpot_ms"), ("ITL ms", "median_itl_ms"))
METRICS += (("out tok/s", "output_throughput"),)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def say(text: str) -> None:
    print(f"bench-real: {text}", file=sys.stderr, flush=True)


def requests_for(concurrency: int) -> int:
    return max(32, 8 * concurrency)


def start_server(name: str, port: int, cpu: str) -> str:
    argv = ["docker", "run", "-d", "--name", name, "--network", "host", "--shm-size", "1g", "--cpuset-cpus", cpu]
    argv += ["-e", "VLLM_CPU_KVCACHE_SPACE=1", "-e", f"VLLM_CPU_OMP_THREADS_BIND={cpu}"]
    argv += ["-v", f"{MODELS}:/models:ro", IMAGE, f"/models/{MODEL}", "--served-model-name", MODEL]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--max-model-len", "2048"]
    argv += ["--no-enable-prefix-caching"]  # both clients send the same seeded prompts on every repeat
    subprocess.run(argv, check=True, capture_output=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
                if answer.status == 200:
                    return base
        except OSError:
            pass
        running = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True
        )
        if running.stdout.strip() != "true":
            break
        time.sleep(1)
    logs = subprocess.run(["docker", "logs", "--tail", "20", name], capture_output=True, text=True)
    raise SystemExit(f"bench-real: vllm serve in {name} was not ready:\n{logs.stdout}{logs.stderr}")


ENGINE_TTFT = "vllm:time_to_first_token_seconds"


def engine_ttft(base: str) -> tuple[float, float]:
    """The engine's TTFT histogram so far: (sum of seconds, count), over every label set."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    totals = {"_sum": 0.0, "_count": 0.0}
    for line in text.splitlines():
        for suffix in totals:
            if line.startswith(ENGINE_TTFT + suffix):
                totals[suffix] += float(line.rsplit(" ", 1)[1])
    return totals["_sum"], totals["_count"]


def run_labctl(base: str, concurrency: int, cpu: str, home: Path) -> dict[str, float]:
    argv = ["taskset", "-c", cpu, sys.executable, "-m", "labctl", "bench", "run", "--base-url", f"{base}/v1"]
    argv += ["--model", MODEL, "--workload", "latency-probe", "--concurrency", str(concurrency)]
    argv += ["--requests", str(requests_for(concurrency)), "--input-len", str(INPUT_LEN)]
    argv += ["--output-len", str(OUTPUT_LEN), "--tokenizer", str(MODELS / MODEL), "--no-telemetry", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LABCTL_HOME": str(home)})
    if done.returncode != 0:
        raise SystemExit(f"bench-real: labctl bench failed:\n{done.stderr[-3000:]}")
    level = json.loads(done.stdout)["levels"][0]
    figures = {key: float(level[key]) for _, key in METRICS} | {"output_tokens": level["total_output_tokens"]}
    return figures | {"mean_ttft_ms": float(level["mean_ttft_ms"])}


def run_vllm(base: str, concurrency: int, cpu: str, out: Path, tag: str) -> dict[str, float]:
    argv = ["docker", "run", "--rm", "--name", f"labctl-bench-real-client-{tag}", "--network", "host"]
    argv += ["--cpuset-cpus", cpu, "-v", f"{MODELS}:/models:ro", "-v", f"{out}:/out", "--entrypoint", "vllm", IMAGE]
    argv += ["bench", "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
    argv += ["--base-url", base, "--model", MODEL, "--tokenizer", f"/models/{MODEL}", "--dataset-name", "random"]
    argv += ["--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN)]
    argv += ["--random-range-ratio", "0", "--ignore-eos", "--temperature", "0", "--disable-tqdm"]
    argv += ["--num-prompts", str(requests_for(concurrency)), "--max-concurrency", str(concurrency)]
    argv += ["--num-warmups", str(WARMUP_PER_STREAM * concurrency), "--percentile-metrics", "ttft,tpot,itl,e2el"]
    argv += ["--save-result", "--result-dir", "/out", "--result-filename", f"{tag}.json"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench-real: vllm bench serve failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    result = json.loads((out / f"{tag}.json").read_text())
    figures = {key: float(result[key]) for _, key in METRICS} | {"output_tokens": result["total_output_tokens"]}
    return figures | {"mean_ttft_ms": float(result["mean_ttft_ms"])}


def table(results: dict[int, dict[str, list[dict[str, float]]]]) -> str:
    """Each repeat is a pair (labctl and vLLM's client back to back, the order swapped every repeat): the ratio
    of each pair, its median, and a Student-t 95 % interval of the pairs' mean ratio (labctl's own repeat
    method, n pairs said); within +-3 % is shown when the interval includes 1.0 and lies inside 0.97-1.03."""
    from labctl.bench.intervals import t_interval

    head = f"{'c':>3}  {'metric':<10} {'labctl':>10} {'vllm':>10} {'ratio':>7}  {'95% interval':>17}  n  verdict"
    lines = [head + "   (medians of the repeats; ratio: median of the pairs' ratios)"]
    for concurrency, tools in results.items():
        for label, key in METRICS:
            ours = statistics.median(r[key] for r in tools["labctl"])
            theirs = statistics.median(r[key] for r in tools["vllm"])
            pairs = [a[key] / b[key] for a, b in zip(tools["labctl"], tools["vllm"], strict=True) if b[key]]
            ratio = statistics.median(pairs) if pairs else float("nan")
            interval = t_interval(pairs)
            if interval is None:
                span, verdict = f"{'-':>17}", "not checked (fewer than 2 pairs)"
            else:
                span = f"[{interval[0]:.3f}, {interval[1]:.3f}]"
                verdict = _verdict(interval)
            lines.append(
                f"{concurrency:>3}  {label:<10} {ours:>10.2f} {theirs:>10.2f} {ratio:>7.3f}  {span:>17}  {len(pairs)}  {verdict}"
            )
    return "\n".join(lines)


def ttft_table(results: dict[int, dict[str, list[dict[str, float]]]]) -> str:
    """Each client's mean TTFT beside the engine's own mean over the same run (its histogram's rise; both windows
    hold the client's warm-up requests too, the same number for both clients): the offset is the client's share."""
    head = f"{'c':>3}  {'client':<7} {'mean TTFT':>10} {'engine':>8} {'offset':>8}   (ms; medians of the repeats)"
    lines = [head]
    for concurrency, tools in results.items():
        offsets = {}
        for tool in ("labctl", "vllm"):
            runs = [r for r in tools[tool] if r.get("engine_mean_ttft_ms") is not None]
            if not runs:
                lines.append(f"{concurrency:>3}  {tool:<7} not checked (the engine exported no TTFT histogram)")
                continue
            client = statistics.median(r["mean_ttft_ms"] for r in runs)
            engine = statistics.median(r["engine_mean_ttft_ms"] for r in runs)
            offsets[tool] = statistics.median(r["mean_ttft_ms"] - r["engine_mean_ttft_ms"] for r in runs)
            lines.append(f"{concurrency:>3}  {tool:<7} {client:>10.2f} {engine:>8.2f} {offsets[tool]:>+8.2f}")
        if len(offsets) == 2:
            lines.append(
                f"{'':>3}  labctl's offset minus vLLM's client's: {offsets['labctl'] - offsets['vllm']:+.2f} ms "
                "(below 0: labctl's clock starts later or reads the first token sooner)"
            )
    return "\n".join(lines)


def _verdict(interval: list[float]) -> str:
    """The goal: the interval includes 1.0 and lies within 0.97-1.03."""
    low, high = interval
    if not low <= 1.0 <= high:
        return "differs (the interval excludes 1.0)"
    return "within +-3 %" if low >= 0.97 and high <= 1.03 else "includes 1.0, wider than +-3 %"


def main() -> None:
    if not (MODELS / MODEL / "tokenizer.json").is_file():
        raise SystemExit(f"bench-real: no tiny model in {MODELS}: run `make tiny-models`")
    levels = [int(c) for c in os.environ.get("BENCH_REAL_CONCURRENCY", "1,4,16").split(",")]
    repeats = int(os.environ.get("BENCH_REAL_REPEATS", "5"))
    server_cpu = os.environ.get("BENCH_REAL_SERVER_CPU", "0")
    client_cpu = os.environ.get("BENCH_REAL_CLIENT_CPU", "1")
    port = int(os.environ.get("BENCH_REAL_PORT") or free_port())
    run_tag = uuid.uuid4().hex[:8]
    name = f"labctl-bench-real-{run_tag}"
    out = OUT / run_tag
    out.mkdir(parents=True, exist_ok=True)
    home = out / "home"
    say(f"{IMAGE} serving {MODEL} on core {server_cpu}, port {port}; clients on core {client_cpu}; raw in {out}")
    results: dict[int, dict[str, list[dict[str, float]]]] = {c: {"labctl": [], "vllm": []} for c in levels}
    loads: list[float] = []  # other work on this machine shows in every figure: say how much there was
    try:
        base = start_server(name, port, server_cpu)
        for repeat in range(repeats):
            for concurrency in levels:
                order = ["labctl", "vllm"] if repeat % 2 == 0 else ["vllm", "labctl"]
                for tool in order:
                    tag = f"{tool}-c{concurrency}-r{repeat}"
                    before = engine_ttft(base)
                    if tool == "labctl":
                        figures = run_labctl(base, concurrency, client_cpu, home)
                    else:
                        figures = run_vllm(base, concurrency, client_cpu, out, f"{run_tag}-{tag}")
                    after = engine_ttft(base)
                    count = after[1] - before[1]
                    figures["engine_mean_ttft_ms"] = (after[0] - before[0]) / count * 1000 if count else None
                    results[concurrency][tool].append(figures)
                    if figures["output_tokens"] != requests_for(concurrency) * OUTPUT_LEN:
                        say(f"{tag}: {figures['output_tokens']} output tokens, not {OUTPUT_LEN} per request")
                    shown = ", ".join(f"{label} {figures[key]:.2f}" for label, key in METRICS)
                    loads.append(os.getloadavg()[0])
                    say(f"{tag}: {shown} (load average {loads[-1]:.1f})")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    print()
    print(ttft_table(results))
    print(f"load average during the runs: {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores")
    say(f"raw results: {out}/results.json")


if __name__ == "__main__":
    main()
