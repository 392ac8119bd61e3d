"""make bench-client: is labctl's load generator exact? It runs `labctl bench` against a local harness
engine whose truth is known (TTFT 50 ms, TPOT 20 ms) at concurrency 1, 64, 128, 256 (64 output tokens,
10x concurrency requests, warm-up at the same concurrency) and prints reported vs true medians; then
with TPOT 0 it measures the streamed tokens/s that pass through the client; then at 512 and 600 streams,
with telemetry sampling on, the receive lag: when labctl received each first token minus when the
harness wrote it (both CLOCK_MONOTONIC on this machine, joined by X-Request-Id)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

LABCTL = [sys.executable, "-m", "labctl"]
TTFT, TPOT = 50.0, 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def harness(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labctl.harness",
            "--model",
            "truth",
            "--port",
            str(port),
            "--max-num-seqs",
            "1024",
            "--max-model-len",
            "65536",
            *args,
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    raise SystemExit("harness did not start")


def bench(base: str, home: str, *args: str, host: list[str] | None = None) -> dict:
    out = subprocess.run(
        [
            *LABCTL,
            *(host or []),
            "bench",
            "--base-url",
            base,
            "--model",
            "truth",
            "--workload",
            "chat-sweep",
            "--input-len",
            "128",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "LABCTL_HOME": home},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout)


SIM_SMI = "/var/lib/labctl-sim/bin/nvidia-smi"
SIM_CONFIG = "/var/lib/labctl-sim/sim-h100.json"


def gpu_host(home: str) -> list[str]:
    """With the simulated lab's nvidia-smi stand-in present, GPU sampling runs too (a child process a
    second, as on a real host); without it only the engine's /metrics is sampled."""
    if not (os.path.exists(SIM_SMI) and os.path.exists(SIM_CONFIG)):
        return []
    path = os.path.join(home, "hosts.yaml")
    with open(path, "w") as f:
        json.dump({"hosts": {"sim-gpus": {"docker": "local", "nvidia_smi": [SIM_SMI, "--sim-config", SIM_CONFIG]}}}, f)
    os.environ["LABCTL_HOSTS"] = path
    return ["--host", "sim-gpus"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = int(position), min(int(position) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def receive_lags(base: str, home: str, result: dict) -> list[float]:
    """ms between the harness writing each first token and labctl receiving it."""
    root = base.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/harness/first-tokens", timeout=30) as answer:
        written = json.load(answer)
    path = os.path.join(home, "runs", result["run_id"], "bench", result["requests_file"])
    lags = []
    with open(path) as lines:
        for raw in lines:
            line = json.loads(raw)
            if line.get("ok") and line["request_id"] in written:
                lags.append((line["sent"] + line["ttft_ms"] / 1000 - written[line["request_id"]]) * 1000)
    return lags


def lag_levels(home: str) -> None:
    host = gpu_host(home)
    print(
        f"receive lag at 512 and 600 streams (TTFT {TTFT:.0f} ms, TPOT {TPOT:.0f} ms, 64 tokens, 10x requests), "
        f"telemetry on: engine /metrics{' and the simulated nvidia-smi' if host else ''} sampled every second"
    )
    print(
        f"{'conc':>5} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} {'n':>6} {'client CPU':>11}  target p50 <= 2 ms, p99 <= 10 ms"
    )
    for conc in (512, 600):
        proc, base = harness("--ttft-ms", str(TTFT), "--tpot-ms", str(TPOT))
        try:
            result = bench(base, home, "--concurrency", str(conc), "--output-len", "64", host=host)
            lags = receive_lags(base, home, result)
        finally:
            proc.terminate()
            proc.wait()
        level = result["levels"][0]
        p50, p99 = percentile(lags, 50), percentile(lags, 99)
        verdict = "met" if p50 <= 2 and p99 <= 10 else "MISSED"
        print(
            f"{conc:>5} {p50:>8.2f} {p99:>8.2f} {max(lags):>8.2f} {len(lags):>6} {level['client_cpu_share']:>10.0%}  "
            f"{verdict}  (telemetry: {result['telemetry']['engine']['samples']} engine, "
            f"{result['telemetry']['gpu']['samples']} GPU samples)"
        )


def main() -> int:
    home = tempfile.mkdtemp(prefix="labctl-bench-client-")
    proc, base = harness("--ttft-ms", str(TTFT), "--tpot-ms", str(TPOT))
    try:
        result = bench(base, home, "--concurrency", "1,64,128,256", "--output-len", "64")
    finally:
        proc.terminate()
        proc.wait()
    print(
        f"bench-client: harness truth TTFT {TTFT:.0f} ms, TPOT {TPOT:.0f} ms; 64 output tokens, 10x concurrency "
        f"requests, warm-up at the same concurrency; client and server share {os.cpu_count()} cores"
    )
    print(
        f"{'conc':>5} {'TTFT p50':>9} {'error':>7} {'TPOT p50':>9} {'error':>7} {'client CPU':>11}  verdict (TTFT within 5 %, TPOT within 1 %)"
    )
    for level in result["levels"]:
        ttft_err = level["median_ttft_ms"] / TTFT - 1
        tpot_err = level["median_tpot_ms"] / TPOT - 1
        ok = abs(ttft_err) <= 0.05 and abs(tpot_err) <= 0.01
        print(
            f"{level['concurrency']:>5} {level['median_ttft_ms']:>9.2f} {ttft_err:>+7.1%} {level['median_tpot_ms']:>9.3f} "
            f"{tpot_err:>+7.2%} {level['client_cpu_share']:>10.0%}  {'met' if ok else 'MISSED'}"
        )
    proc, base = harness("--ttft-ms", "0", "--tpot-ms", "0")
    try:
        result = bench(base, home, "--concurrency", "256", "--output-len", "256", "--requests", "2560")
    finally:
        proc.terminate()
        proc.wait()
    level = result["levels"][0]
    rate = level["output_throughput"]
    print(
        f"TPOT 0, 256 streams, 256 tokens each: {rate:,.0f} streamed tokens/s through the client "
        f"(client CPU {level['client_cpu_share']:.0%}); target >= 20,000: {'met' if rate >= 20000 else 'MISSED'}"
    )
    lag_levels(home)
    print(f"(load average now {', '.join(f'{x:.1f}' for x in os.getloadavg())}: other work on this machine counts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
